"""When pending requests are planned: at once on an idle controller, in batches under load (group commit).

A planning pass is a batch. While scale-ups started by earlier passes are still calling the provider, requests
that become ready to plan are *held*: they gather, and one pass plans them all when those calls have returned,
the way a database commits the transactions that queued behind a disk write in one write. The window flags
bound the wait: the held requests are planned anyway once no new one has arrived for ``batch_idle``, or
``batch_max`` after the first. So a request that arrives on an idle controller is planned in the pass its
event wakes, with no window to wait out, and under a burst the batches grow with the load instead of a pass
being spent per arrival (each planning pass costs time in proportion to the cluster, not to its batch).

The window itself is :class:`Window`, shared with the Ray source, whose autoscaler raises ``replicas`` in steps
that are merged into one gang the same way (``ray_batch_idle``/``ray_batch_max``, :mod:`raysource`).

Everything here is plain data driven by the loop, with the time passed in.
"""

from __future__ import annotations


class Window:
    """A batching window over arrivals: it closes once nothing new has arrived for ``idle``, or ``longest`` after
    the first arrival, whichever comes first. Empty (no deadline, never due) until the first arrival
    (:meth:`note`) and again after :meth:`reset`. A window of zero (or less) is due at its first arrival."""

    __slots__ = ("first", "idle", "last", "longest")

    def __init__(self, idle: float, longest: float) -> None:
        self.idle, self.longest = idle, longest
        #: When the first and the latest arrival of this window were noted (None while it is empty).
        self.first: float | None = None
        self.last: float | None = None

    @property
    def empty(self) -> bool:
        return self.first is None

    def note(self, now: float) -> None:
        """Something new arrived at ``now``: the window opens (if it was empty) and its idle time starts over."""
        if self.first is None:
            self.first = now
        self.last = now

    def deadline(self) -> float | None:
        """When the window closes: ``min(last + idle, first + longest)``; None while it is empty."""
        if self.first is None or self.last is None:
            return None
        return min(self.last + self.idle, self.first + self.longest)

    def due(self, now: float) -> bool:
        """Whether the window has closed at ``now`` (an empty one never has)."""
        deadline = self.deadline()
        return deadline is not None and now >= deadline

    def reset(self) -> None:
        """Empty again: what it gathered was taken (or is gone)."""
        self.first = self.last = None


class Batching:
    def __init__(self, batch_idle: float, batch_max: float) -> None:
        self.batch_idle, self.batch_max = batch_idle, batch_max
        #: Requests whose scale-up (started by a planning pass) is calling the provider.
        self.in_flight: set[str] = set()
        #: Requests ready to plan, held for the next batch.
        self.held: set[str] = set()
        #: The window of the held requests (empty when nothing is held).
        self.window = Window(batch_idle, batch_max)

    def started(self, key: str) -> None:
        self.in_flight.add(key)

    def finished(self, key: str) -> None:
        self.in_flight.discard(key)

    def forget(self, key: str) -> None:
        self.in_flight.discard(key)
        self.held.discard(key)
        if not self.held:
            self.window.reset()  # the window belonged to the requests that were held

    def deferring(self, now: float) -> bool:
        """Whether a request ready to plan at ``now`` waits for the next batch: scale-ups are calling the provider,
        the window is not zero, and the window of what is held already (if anything) is still open."""
        if not self.in_flight or self.batch_idle <= 0 or self.batch_max <= 0:
            return False
        return not self.window.due(now)

    def defer(self, key: str, now: float) -> None:
        if key in self.held:
            return
        self.held.add(key)
        self.window.note(now)

    def deadline(self) -> float | None:
        """When the held requests are planned even if provider calls are still under way."""
        return self.window.deadline()

    def take_batch(self, now: float) -> set[str]:
        """The held requests, if their batch may be planned at ``now`` (they are no longer held). A request that
        becomes ready in the pass that plans them joins them: the loop holds nothing in that pass."""
        if not self.held or self.deferring(now):
            return set()
        held, self.held = self.held, set()
        self.window.reset()
        return held
