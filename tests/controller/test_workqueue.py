"""Keys with work to do (``gangscale.controller.logic.workqueue``), on plain objects: dirty keys, one due time per key
(the latest call wins), and what ``take`` hands out."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gangscale.controller.logic.workqueue import WorkQueue

T0 = 1_000.0


def test_marked_keys_are_taken_once() -> None:
    q = WorkQueue()
    q.mark("a")
    q.mark_all(["b", "a"])
    assert (len(q), q.has_dirty) == (2, True)
    assert q.take(T0) == {"a", "b"}
    assert (len(q), q.has_dirty, q.take(T0)) == (0, False, set())


@dataclass(frozen=True)
class Case:
    id: str
    #: requeue calls in order: (key, time or None)
    calls: tuple[tuple[str, float | None], ...]
    #: take(now) -> keys, in order
    takes: tuple[tuple[float, frozenset[str]], ...]
    next_time: float | None = None


CASES = [
    Case("not-due-yet", (("a", T0 + 5),), ((T0 + 4.9, frozenset()),), T0 + 5),
    Case("due-at-its-time", (("a", T0 + 5),), ((T0 + 5, frozenset({"a"})),), None),
    Case("an-earlier-time-replaces", (("a", T0 + 10), ("a", T0 + 5)), ((T0 + 5, frozenset({"a"})),), None),
    Case("a-later-time-replaces-too", (("a", T0 + 5), ("a", T0 + 10)),
         ((T0 + 5, frozenset()), (T0 + 10, frozenset({"a"}))), None),
    Case("back-to-the-first-time", (("a", T0 + 5), ("a", T0 + 10), ("a", T0 + 5)),
         ((T0 + 5, frozenset({"a"})), (T0 + 10, frozenset())), None),
    Case("none-clears", (("a", T0 + 5), ("a", None)), ((T0 + 100, frozenset()),), None),
    Case("set-again-after-none", (("a", T0 + 5), ("a", None), ("a", T0 + 5)), ((T0 + 5, frozenset({"a"})),), None),
    Case("several-keys", (("a", T0 + 5), ("b", T0 + 1), ("c", T0 + 9)),
         ((T0 + 5, frozenset({"a", "b"})),), T0 + 9),
    Case("taken-once", (("a", T0 + 5),), ((T0 + 5, frozenset({"a"})), (T0 + 6, frozenset())), None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_requeue_and_take(case: Case) -> None:
    """One due time per key, the latest call wins; take returns the keys due by then and clears them."""
    q = WorkQueue()
    for key, at in case.calls:
        q.requeue(key, at)
    assert [q.take(now) for now, _ in case.takes] == [set(keys) for _, keys in case.takes]
    assert q.next_time() == case.next_time


def test_take_returns_dirty_and_due_keys_together() -> None:
    q = WorkQueue()
    q.mark("a")
    q.requeue("b", T0)
    q.requeue("c", T0 + 1)
    assert q.take(T0) == {"a", "b"}
    assert q.next_time() == T0 + 1


def test_a_due_key_that_is_also_dirty_is_taken_once_and_its_time_is_cleared() -> None:
    q = WorkQueue()
    q.mark("a")
    q.requeue("a", T0)
    assert q.take(T0) == {"a"}
    assert (q.take(T0 + 100), q.next_time()) == (set(), None)


def test_forget_removes_the_mark_and_the_time() -> None:
    q = WorkQueue()
    q.mark("a")
    q.requeue("a", T0)
    q.requeue("b", T0 + 1)
    q.forget("a")
    q.forget("never-seen")
    assert (len(q), q.next_time()) == (0, T0 + 1)
    assert q.take(T0 + 1) == {"b"}


def test_next_time_skips_stale_entries() -> None:
    """Replaced, cleared and forgotten times are dropped on the way to the earliest live one."""
    q = WorkQueue()
    q.requeue("a", T0 + 1)
    q.requeue("a", T0 + 7)
    q.requeue("b", T0 + 2)
    q.requeue("b", None)
    q.requeue("c", T0 + 3)
    q.forget("c")
    q.requeue("d", T0 + 5)
    assert q.next_time() == T0 + 5
    assert q.take(T0 + 5) == {"d"}
    assert q.next_time() == T0 + 7
    assert q.take(T0 + 7) == {"a"}
    assert q.next_time() is None


def test_requeue_at_the_same_time_twice_is_one_entry() -> None:
    q = WorkQueue()
    q.requeue("a", T0)
    q.requeue("a", T0)
    assert q.take(T0) == {"a"}
    q.requeue("a", T0 + 1)
    assert q.take(T0 + 1) == {"a"}
