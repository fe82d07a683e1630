"""``cancel_and_wait``: children are stopped and waited for, and the caller's own cancellation is never lost."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gangscale.aio import cancel_and_wait


async def test_children_are_cancelled_and_their_errors_do_not_escape() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    async def sleeps() -> None:
        await asyncio.sleep(3600)

    failed, sleeping = asyncio.create_task(fails()), asyncio.create_task(sleeps())
    await asyncio.sleep(0)
    await cancel_and_wait([failed, sleeping])
    assert sleeping.cancelled() and isinstance(failed.exception(), ValueError)


async def test_a_caller_cancelled_while_it_waits_for_a_child_stays_cancelled() -> None:
    """The child takes a while to stop; the caller is cancelled meanwhile. With ``cancel(); suppress(
    CancelledError): await child`` the caller's CancelledError is the one suppressed and it runs on."""
    release = asyncio.Event()
    after: list[str] = []

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await release.wait()
            raise

    async def caller(child: asyncio.Task[None]) -> None:
        await cancel_and_wait([child])
        after.append("ran on")

    child = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    outer = asyncio.create_task(caller(child))
    await asyncio.sleep(0)
    outer.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert after == []
    with contextlib.suppress(asyncio.CancelledError):
        await child
