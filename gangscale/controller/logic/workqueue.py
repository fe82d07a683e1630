"""Keys with work to do, now or at a time: controller-runtime's work queue, for one loop.

A key is *dirty* when something it depends on changed (its object, a node of its scale-up, a consumer pod, the
result of its task); a pass reconciles exactly the dirty keys. A key may also be due at a time (a retry, a
booking TTL, a deadline): :meth:`WorkQueue.requeue` keeps one time per key, the latest call wins, and
:meth:`WorkQueue.take` returns the dirty keys together with those whose time has come. A forgotten key leaves
no trace.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class WorkQueue:
    def __init__(self) -> None:
        self._dirty: set[str] = set()
        self._at: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._dirty)

    def mark(self, key: str) -> None:
        self._dirty.add(key)

    def mark_all(self, keys: Iterable[str]) -> None:
        self._dirty.update(keys)

    def requeue(self, key: str, at: float | None) -> None:
        """``key`` is due at ``at`` (None: at no time); replaces any earlier time."""
        if at is None:
            self._at.pop(key, None)
            return
        if self._at.get(key) == at:
            return
        self._at[key] = at
        heapq.heappush(self._heap, (at, key))

    def forget(self, key: str) -> None:
        self._dirty.discard(key)
        self._at.pop(key, None)

    def take(self, now: float) -> set[str]:
        """The dirty keys and the keys due by ``now``; both are cleared."""
        keys, self._dirty = self._dirty, set()
        while self._heap and self._heap[0][0] <= now:
            at, key = heapq.heappop(self._heap)
            if self._at.get(key) == at:
                del self._at[key]
                keys.add(key)
        return keys

    @property
    def has_dirty(self) -> bool:
        return bool(self._dirty)

    def next_time(self) -> float | None:
        """The earliest time a key is due (stale heap entries are dropped on the way)."""
        while self._heap:
            at, key = self._heap[0]
            if self._at.get(key) == at:
                return at
            heapq.heappop(self._heap)
        return None
