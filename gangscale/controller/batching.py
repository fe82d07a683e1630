"""When pending requests are planned: at once on an idle controller, in batches under load (group commit).

A planning pass is a batch. While scale-ups started by earlier passes are still calling the provider, requests
that become ready to plan are *held*: they gather, and one pass plans them all when those calls have returned,
the way a database commits the transactions that queued behind a disk write in one write. The window flags
bound the wait: the held requests are planned anyway once no new one has arrived for ``batch_idle``, or
``batch_max`` after the first. So a request that arrives on an idle controller is planned in the pass its
event wakes, with no window to wait out, and under a burst the batches grow with the load instead of a pass
being spent per arrival (each planning pass costs time in proportion to the cluster, not to its batch).

Everything here is plain data driven by the loop, with the time passed in.
"""

from __future__ import annotations


class Batching:
    def __init__(self, batch_idle: float, batch_max: float) -> None:
        self.batch_idle, self.batch_max = batch_idle, batch_max
        #: Requests whose scale-up (started by a planning pass) is calling the provider.
        self.in_flight: set[str] = set()
        #: Requests ready to plan, held for the next batch.
        self.held: set[str] = set()
        self._first: float | None = None
        self._last: float | None = None

    def started(self, key: str) -> None:
        self.in_flight.add(key)

    def finished(self, key: str) -> None:
        self.in_flight.discard(key)

    def forget(self, key: str) -> None:
        self.in_flight.discard(key)
        self.held.discard(key)
        if not self.held:
            self._first = self._last = None  # the window belonged to the requests that were held

    def holding(self, now: float) -> bool:
        """Whether a request ready to plan at ``now`` waits for the next batch: scale-ups are calling the provider,
        the window is not zero, and the window of what is held already (if anything) is still open."""
        if not self.in_flight or self.batch_idle <= 0 or self.batch_max <= 0:
            return False
        deadline = self.deadline()
        return deadline is None or now < deadline

    def hold(self, key: str, now: float) -> None:
        if key in self.held:
            return
        self.held.add(key)
        self._first = now if self._first is None else self._first
        self._last = now

    def deadline(self) -> float | None:
        """When the held requests are planned even if provider calls are still under way."""
        if self._first is None or self._last is None:
            return None
        return min(self._last + self.batch_idle, self._first + self.batch_max)

    def release(self, now: float) -> set[str]:
        """The held requests, if their batch may be planned at ``now`` (they are no longer held). A request that
        becomes ready in the pass that plans them joins them: the loop holds nothing in that pass."""
        if not self.held or self.holding(now):
            return set()
        held, self.held = self.held, set()
        self._first = self._last = None
        return held
