"""Stopping child tasks without losing a cancellation of one's own.

The habit ``task.cancel(); with suppress(CancelledError): await task`` has a trap: if the task that runs it is
itself cancelled while it waits there, the ``CancelledError`` it receives is the one suppressed, and it carries
on as if never cancelled (its ``cancelling()`` count stays up; whoever cancelled it waits forever). Seen here:
the controller, stopped right after a wake-up, kept running in its wait loop and the benchmark hung on it.
:func:`cancel_and_wait` waits with ``asyncio.wait``, which never raises a child's error, so only a cancellation
of the caller itself can come out of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one has finished. Their errors are retrieved (not raised): callers
    that care read ``task.exception()``."""
    every = list(tasks)
    pending = [task for task in every if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    for task in every:
        if not task.cancelled():
            task.exception()
