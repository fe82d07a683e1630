"""The garbage collector while the caches fill (gangscale.controller.loop.growing_heap): off, on again after the
bound or at the end, and what the caches hold frozen out of later collections — only in a process of its own."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from gangscale.controller import loop
from gangscale.controller.loop import growing_heap


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    yield
    gc.unfreeze()  # this test process hosts every other test: nothing stays frozen
    gc.enable()


async def test_off_while_the_caches_fill_then_on_with_the_heap_frozen() -> None:
    assert gc.isenabled()
    with growing_heap(True):
        assert not gc.isenabled()
        kept = [{"record": i} for i in range(100)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(kept)


async def test_left_alone_in_a_shared_process() -> None:
    with growing_heap(False):
        assert gc.isenabled()
    assert gc.get_freeze_count() == 0


async def test_on_again_after_the_bound_if_the_caches_never_fill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "HEAP_GROWTH_BOUND", 0.0)
    with growing_heap(True):
        assert not gc.isenabled()
        for _ in range(3):
            await asyncio.sleep(0)  # the loop runs what is due: the bound has passed
        assert gc.isenabled()
    assert gc.isenabled()
