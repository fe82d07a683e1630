"""Per-pool backoff after a failed scale-up (the cluster-autoscaler's node-group backoff, Karpenter's
insufficient-capacity cache): the planner skips a backed-off pool and falls back to the next one that fits.

The duration starts at ``initial``, doubles on each failure that happens while the pool is *not* backed off
(concurrent failures of one episode do not compound, as in the cluster-autoscaler), caps at ``maximum``, and
starts over once ``reset`` passes without a failure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PoolBackoff:
    until: float
    reason: str
    duration: float
    last_failure: float


class PoolBackoffs:
    def __init__(self, initial: float, maximum: float, reset: float) -> None:
        self.initial, self.maximum, self.reset = initial, maximum, reset
        self._pools: dict[str, PoolBackoff] = {}

    def fail(self, pool: str, reason: str, now: float, *, at_least: float | None = None) -> float:
        """Back ``pool`` off after a failure; returns until when."""
        current = self._pools.get(pool)
        if current is None or now - current.last_failure >= self.reset:
            duration = self.initial
        elif now < current.until:
            duration = current.duration  # same episode: do not compound
        else:
            duration = min(self.maximum, current.duration * 2)
        duration = max(duration, at_least or 0.0)
        until = max(now + duration, current.until if current is not None else 0.0)
        self._pools[pool] = PoolBackoff(until, reason, duration, now)
        return until

    def get(self, pool: str, now: float) -> PoolBackoff | None:
        current = self._pools.get(pool)
        return current if current is not None and now < current.until else None

    def active(self, now: float) -> dict[str, PoolBackoff]:
        return {pool: b for pool, b in self._pools.items() if now < b.until}

    def next_expiry(self, now: float) -> float | None:
        pending = [b.until for b in self._pools.values() if b.until > now]
        return min(pending) if pending else None
