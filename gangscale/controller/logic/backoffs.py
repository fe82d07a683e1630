"""Per-pool backoff after a failed scale-up (the cluster-autoscaler's node-group backoff, Karpenter's
insufficient-capacity cache): the planner keeps off a backed-off pool and falls back to the next one that fits.

The duration starts at ``initial``, doubles on each failure that happens while the pool is *not* backed off
(concurrent failures of one episode do not compound, as in the cluster-autoscaler), caps at ``maximum``, and
starts over once ``reset`` passes without a failure.

A stockout or a quota error says something about *size*: the cloud could not give the N units asked for, so it
is taken to have at most N - 1 more (fewer when the error says how many were left). Until the backoff ends the
pool offers at most that many units beyond what gangscale held when it failed (:meth:`PoolBackoffs.ceiling`), so
a gang too big to be obtained waits without holding units, and a smaller gang that fits is still served: no
head-of-line blocking behind a gang that cannot be had. Any other failure (nodes never Ready, a permanent or
transient error) closes the pool whole until the backoff ends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PoolBackoff:
    until: float
    reason: str
    duration: float
    last_failure: float
    #: Units the pool may still give beyond ``held`` (0: none at all).
    ceiling: int = 0
    #: Units gangscale held in the pool (in use and in flight) when the ceiling was learnt.
    held: int = 0


class PoolBackoffs:
    def __init__(self, initial: float, maximum: float, reset: float) -> None:
        self.initial, self.maximum, self.reset = initial, maximum, reset
        self._pools: dict[str, PoolBackoff] = {}

    def fail(self, pool: str, reason: str, now: float, *, at_least: float | None = None,
             asked: int | None = None, available: int | None = None, held: int = 0) -> float:
        """Back ``pool`` off after a failure; returns until when.

        ``asked`` (with ``available`` when the cloud said how many it had) is given for failures that depend on
        the size of the request (stockout, quota): the pool then stays open for fewer units, see the module
        docstring. ``held`` is what gangscale held in the pool at that moment.
        """
        current = self._pools.get(pool)
        if current is None or now - current.last_failure >= self.reset:
            duration = self.initial
        elif now < current.until:
            duration = current.duration  # same episode: do not compound
        else:
            duration = min(self.maximum, current.duration * 2)
        duration = max(duration, at_least or 0.0)
        until = max(now + duration, current.until if current is not None else 0.0)
        ceiling = 0 if asked is None else max(0, min(asked - 1, available if available is not None else asked))
        if current is not None and now < current.until:
            ceiling = min(ceiling, self._left(current, held))  # what an earlier failure of the episode allowed
        self._pools[pool] = PoolBackoff(until, reason, duration, now, ceiling, held)
        return until

    def get(self, pool: str, now: float) -> PoolBackoff | None:
        current = self._pools.get(pool)
        return current if current is not None and now < current.until else None

    def ceiling(self, pool: str, now: float, held: int) -> int | None:
        """Units the pool may still give now (None: no limit known), ``held`` being what gangscale holds in it."""
        current = self.get(pool, now)
        return None if current is None else self._left(current, held)

    def active(self, now: float) -> dict[str, PoolBackoff]:
        return {pool: b for pool, b in self._pools.items() if now < b.until}

    def next_expiry(self, now: float) -> float | None:
        pending = [b.until for b in self._pools.values() if b.until > now]
        return min(pending) if pending else None

    @staticmethod
    def _left(backoff: PoolBackoff, held: int) -> int:
        return max(0, backoff.ceiling - max(0, held - backoff.held))
