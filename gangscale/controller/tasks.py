"""The loop's background tasks: every provider call, status write, release and Event runs as one.

A task started with :meth:`Tasks.spawn` is kept until it ends and cancelled when the loop stops. It changes no
state itself: its result (or exception) is queued with the callback it was started with, and the loop applies it
at the start of its next pass (:meth:`Tasks.take_results`), so only the loop changes a request. Tasks that run as
long as the loop (the reflectors) are started with :meth:`Tasks.run_background`. Apart from the loop because this
bookkeeping decides nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gangscale.aio import cancel_and_wait
from gangscale.clock import Sleeps, counting_sleeps

log = logging.getLogger(__name__)

#: What a task's result is handed to, by the loop.
Then = Callable[[Any], None]
#: How the loop's helpers start a task (:meth:`Tasks.spawn`): the coroutine, the task's name, and ``then``.
Spawn = Callable[[Coroutine[Any, Any, Any], str, Then | None], None]


class Tasks:
    """The loop's guarded tasks (see the module docstring). ``on_done`` is called whenever a spawned task ends
    (not when it is cancelled): the loop wakes up for its result."""

    def __init__(self, on_done: Callable[[], None]) -> None:
        self._on_done = on_done
        self._tasks: dict[asyncio.Task[Any], Sleeps] = {}
        self._background: set[asyncio.Task[Any]] = set()
        #: Results of tasks that ended, with what to hand each one to, until the next pass takes them.
        self.results: list[tuple[Then, Any]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, then: Then | None = None) -> None:
        """A guarded background task: kept until done, cancelled when the loop stops. Its result (or exception)
        is handed to ``then`` by the loop, at the start of the next pass."""
        sleeps = Sleeps()
        task = asyncio.create_task(counting_sleeps(coro, sleeps), name=name)
        self._tasks[task] = sleeps

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.pop(t, None)
            if t.cancelled():
                return
            error = t.exception()
            if error is not None and then is None:
                log.error("background task %s failed", t.get_name(), exc_info=error)
            if then is not None:
                self.results.append((then, error if error is not None else t.result()))
            self._on_done()

        task.add_done_callback(done)

    def run_background(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A task that runs as long as the loop (a reflector, a poller) or until its owner cancels it: its failure
        is logged, it is cancelled when the loop stops."""
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._background.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task %s failed", t.get_name(), exc_info=t.exception())

        task.add_done_callback(done)
        return task

    def take_results(self) -> list[tuple[Then, Any]]:
        results, self.results = self.results, []
        return results

    def running(self) -> list[asyncio.Task[Any]]:
        """The spawned tasks under way. A task waiting for a manual clock to be moved is not: it cannot move until
        time does."""
        return [t for t, sleeps in self._tasks.items() if not sleeps.asleep]

    async def aclose(self) -> None:
        """Cancel every task and wait until each has ended."""
        await cancel_and_wait([*self._tasks, *self._background])
