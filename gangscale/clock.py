"""Time as an input: the controller, the providers and the simulation read time and sleep through a
:class:`Clock`, so tests and the demo can drive time instead of waiting for it.

``SystemClock`` is wall-clock time with ``asyncio.sleep``. ``ManualClock`` only moves when told to
(``advance``/``set``); sleepers wake in deadline order as it passes their deadlines, like kopf's
``looptime`` or Kueue's ``FakeClock``. Times are seconds since the epoch (floats), as the planner takes them.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import time
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, Protocol, TypeVar

from gangscale.aio import cancel_and_wait
from gangscale.timefmt import to_datetime

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps back (for durations a wall-clock step must not bend: leases)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until the clock reads ``deadline`` (at once if it already does). Deadlines are absolute, so
        a sleeper that starts late still wakes on time."""
        ...



class Sleeps:
    """How many tasks of one job sleep on a :class:`ManualClock` now. A job is a task and every task it starts
    (``asyncio.gather`` copies the context, so its children count here too); see :func:`counting_sleeps`. A job
    whose tasks wait only for a manual clock to be moved is not under way: only moving the clock moves it."""

    __slots__ = ("asleep",)

    def __init__(self) -> None:
        self.asleep = 0


_SLEEPS: contextvars.ContextVar[Sleeps | None] = contextvars.ContextVar("gangscale_sleeps", default=None)


def detached_context() -> contextvars.Context:
    """A context for a task that a job starts but that outlives it (a timer): its sleeps are not the job's, or a
    job still at work would look asleep while its timer waits."""
    context = contextvars.copy_context()
    context.run(_SLEEPS.set, None)
    return context


async def counting_sleeps(coro: Coroutine[Any, Any, T], sleeps: Sleeps) -> T:
    """Run ``coro`` with its manual-clock sleeps (and its child tasks') counted in ``sleeps``."""
    _SLEEPS.set(sleeps)
    return await coro


async def wait_event(clock: Clock, event: asyncio.Event, deadline: float | None) -> bool:
    """Wait until ``event`` is set or ``clock`` reads ``deadline`` (None: no deadline); True if the event is set."""
    if event.is_set() or (deadline is not None and deadline <= clock.now()):
        await asyncio.sleep(0)  # always a turn of the loop: a caller looping on this must not starve others
        return event.is_set()
    if deadline is None:
        await event.wait()
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep_until(deadline))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait((waiter, sleeper))
    return event.is_set()


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - time.time()))


class ManualClock:
    """A clock that moves only when ``advance`` or ``set`` is called."""

    def __init__(self, start: float = 1_795_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def datetime(self) -> datetime:
        return to_datetime(self._now)

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._seq), fut))
        sleeps = _SLEEPS.get()
        if sleeps is not None:
            sleeps.asleep += 1
        try:
            await fut
        finally:
            if sleeps is not None:
                sleeps.asleep -= 1

    @property
    def next_deadline(self) -> float | None:
        """The earliest deadline anybody sleeps until (cancelled sleepers excluded)."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    async def advance(self, seconds: float) -> None:
        await self.set(self._now + seconds)

    async def set(self, when: float) -> None:
        """Move to ``when``, waking each sleeper whose deadline passes, in deadline order, and letting it run."""
        while True:
            deadline = self.next_deadline
            if deadline is None or deadline > when:
                break
            _, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            fut.set_result(None)
            for _ in range(5):  # let the woken task (and what it wakes) run before time moves on
                await asyncio.sleep(0)
        self._now = max(self._now, when)
        await asyncio.sleep(0)
