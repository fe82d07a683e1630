"""Jittered exponential backoff that defers to the server's ``Retry-After``.

Like client-go's and kopf's request loops: an answer that says when to come back (429, or 5xx with
``Retry-After``) is obeyed; otherwise the delay doubles from ``initial`` up to ``maximum`` with
±``jitter`` so that many clients do not retry in lockstep. ``reset()`` after a success.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    _next: float = 0.0

    def next(self, retry_after: float | None = None) -> float:
        """The delay before the next attempt."""
        if retry_after is not None and retry_after >= 0:
            # Never retry earlier than the server asked, and spread retries a little after it.
            delay = retry_after * (1.0 + self.rng.uniform(0.0, self.jitter / 2))
        else:
            base = self._next or self.initial
            delay = base * (1.0 + self.rng.uniform(-self.jitter, self.jitter))
        self._next = min(self.maximum, (self._next or self.initial) * self.factor)
        return min(delay, max(self.maximum, retry_after or 0.0))

    def reset(self) -> None:
        self._next = 0.0
