"""Equal immutable values kept as one object.

A large cluster repeats a few values many times: thousands of pods request the same resources, thousands of nodes
have the same labels and taints, many requests' templates describe the same pod. Records that hold one shared object
instead of equal copies cost a pointer each, and comparing two of them is often an identity check.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class Interned(Generic[T]):
    """One object for each distinct value seen, up to ``bound`` distinct values: past it a value is returned as it
    is (kept, just not shared), so that a cluster of values all different cannot grow the table without limit."""

    def __init__(self, bound: int = 10_000) -> None:
        self.bound = bound
        self._table: dict[T, T] = {}

    def __call__(self, value: T) -> T:
        found = self._table.get(value)
        if found is not None:
            return found
        if len(self._table) < self.bound:
            self._table[value] = value
        return value

    def __len__(self) -> int:
        return len(self._table)
