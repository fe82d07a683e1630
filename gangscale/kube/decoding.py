"""Decoding JSON answers with the garbage collector paused (no I/O here: the pure controller logic may import it)."""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The garbage collector paused for a burst of allocation that makes no reference cycles (decoding JSON, making
    the records of a page): a list page of 500 pods allocates some 200,000 objects, and the generational collections
    they set off (full ones, once the caches are large) were a third of the time of decoding it. It runs again as
    usual afterwards; nothing awaits inside, so no other task runs meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def decode(raw: bytes) -> Any:
    with gc_paused():
        return json.loads(raw)
