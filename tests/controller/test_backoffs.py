"""Per-pool backoff after failed scale-ups (``gangscale.controller.logic.backoffs``), on plain objects: how long a
pool is kept off after each failure, and how many units a sized failure (stockout, quota) leaves it open for."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gangscale.controller.logic.backoffs import PoolBackoff, PoolBackoffs

T0 = 1_000_000.0
INITIAL, MAXIMUM, RESET = 180.0, 1800.0, 10_800.0


def backoffs() -> PoolBackoffs:
    return PoolBackoffs(INITIAL, MAXIMUM, RESET)


def current(b: PoolBackoffs, now: float, pool: str = "a") -> PoolBackoff:
    found = b.get(pool, now)
    assert found is not None, f"{pool} is not backed off at {now}"
    return found


def test_the_first_failure_backs_off_initial() -> None:
    b = backoffs()
    assert b.fail("a", "stockout", T0) == T0 + INITIAL
    assert b.get("a", T0) == PoolBackoff(T0 + INITIAL, "stockout", INITIAL, T0, 0, 0)
    assert b.get("a", T0 + INITIAL - 1) is not None
    assert b.get("a", T0 + INITIAL) is None  # over at its end
    assert b.get("b", T0) is None


@dataclass(frozen=True)
class Case:
    id: str
    #: seconds after T0 of each failure
    failures: tuple[float, ...]
    #: the duration and end of the last backoff
    duration: float
    until: float


CASES = [
    Case("first", (0,), INITIAL, INITIAL),
    Case("during-the-backoff-does-not-compound", (0, 10), INITIAL, 10 + INITIAL),
    Case("many-during-the-backoff-do-not-compound", (0, 10, 20, 179), INITIAL, 179 + INITIAL),
    Case("right-after-the-backoff-doubles", (0, 180), 2 * INITIAL, 180 + 2 * INITIAL),
    Case("each-episode-doubles", (0, 180, 540, 1260), 8 * INITIAL, 1260 + 8 * INITIAL),
    Case("capped-at-maximum", (0, 180, 540, 1260, 2700), MAXIMUM, 2700 + MAXIMUM),
    Case("stays-at-maximum", (0, 180, 540, 1260, 2700, 4500), MAXIMUM, 4500 + MAXIMUM),
    Case("reset-after-quiet-time", (0, 180, 180 + RESET), INITIAL, 180 + RESET + INITIAL),
    Case("no-reset-a-second-early", (0, 180, 180 + RESET - 1), 4 * INITIAL, 180 + RESET - 1 + 4 * INITIAL),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_durations(case: Case) -> None:
    """initial, doubled by each failure after the backoff ended (not during it), capped, reset after quiet."""
    b, until = backoffs(), 0.0
    for at in case.failures:
        until = b.fail("a", "x", T0 + at)
    last = current(b, T0 + case.failures[-1])
    assert (last.duration, last.until, until) == (case.duration, T0 + case.until, T0 + case.until)
    assert last.last_failure == T0 + case.failures[-1]


@pytest.mark.parametrize(("at_least", "duration"), [(1000.0, 1000.0), (60.0, INITIAL), (None, INITIAL)],
                         ids=["longer-wins", "shorter-is-ignored", "none"])
def test_retry_after_lengthens(at_least: float | None, duration: float) -> None:
    b = backoffs()
    assert b.fail("a", "x", T0, at_least=at_least) == T0 + duration
    assert current(b, T0).duration == duration


def test_a_retry_after_is_doubled_by_the_next_episode_up_to_maximum() -> None:
    b = backoffs()
    b.fail("a", "x", T0, at_least=1000.0)
    assert b.fail("a", "x", T0 + 1000) == T0 + 1000 + MAXIMUM


def test_a_failure_during_a_retry_after_extends_it_by_the_same_duration() -> None:
    b = backoffs()
    b.fail("a", "x", T0, at_least=1000.0)
    assert b.fail("a", "y", T0 + 10) == T0 + 1010
    assert current(b, T0 + 10).reason == "y"


def test_a_reset_during_a_longer_retry_after_does_not_shorten_it() -> None:
    b = backoffs()
    b.fail("a", "x", T0, at_least=2 * RESET)
    assert b.fail("a", "x", T0 + RESET) == T0 + 2 * RESET
    assert current(b, T0 + RESET).duration == INITIAL


@dataclass(frozen=True)
class CeilingCase:
    id: str
    asked: int | None
    available: int | None
    ceiling: int


CEILINGS = [
    CeilingCase("not-sized-closes-whole", None, None, 0),
    CeilingCase("asked-minus-one", 4, None, 3),
    CeilingCase("one-asked-closes", 1, None, 0),
    CeilingCase("available-below", 4, 1, 1),
    CeilingCase("available-none-left", 4, 0, 0),
    CeilingCase("available-above-is-asked-minus-one", 4, 10, 3),
]


@pytest.mark.parametrize("case", CEILINGS, ids=[c.id for c in CEILINGS])
def test_a_sized_failure_leaves_a_ceiling(case: CeilingCase) -> None:
    """min(asked - 1, available) units, 0 for a failure that is not sized."""
    b = backoffs()
    b.fail("a", "x", T0, asked=case.asked, available=case.available)
    assert b.ceiling("a", T0, 0) == case.ceiling
    assert current(b, T0).ceiling == case.ceiling


@pytest.mark.parametrize(("held", "left"), [(0, 3), (2, 3), (3, 2), (4, 1), (5, 0), (9, 0)],
                         ids=["fewer-than-then", "as-many-as-then", "one-more", "two-more", "all-taken", "floored"])
def test_units_held_since_the_failure_shrink_the_ceiling(held: int, left: int) -> None:
    b = backoffs()
    b.fail("a", "x", T0, asked=4, held=2)
    assert b.ceiling("a", T0 + 1, held) == left


def test_no_ceiling_once_the_backoff_ends() -> None:
    b = backoffs()
    b.fail("a", "x", T0, asked=4)
    assert b.ceiling("a", T0 + INITIAL, 0) is None
    assert b.ceiling("other", T0, 0) is None


def test_a_later_failure_of_the_episode_keeps_the_smaller_ceiling() -> None:
    """The second failure counts what the first allowed, net of units taken since."""
    b = backoffs()
    b.fail("a", "x", T0, asked=4, held=0)
    b.fail("a", "x", T0 + 10, asked=8, held=2)  # 7 on its own, but only 3 - 2 = 1 was left
    assert current(b, T0 + 10).held == 2
    assert (b.ceiling("a", T0 + 10, 2), b.ceiling("a", T0 + 10, 3)) == (1, 0)


def test_an_unsized_failure_of_the_episode_closes_the_pool() -> None:
    b = backoffs()
    b.fail("a", "x", T0, asked=4)
    b.fail("a", "nodes never Ready", T0 + 10)
    assert b.ceiling("a", T0 + 10, 0) == 0


def test_a_failure_after_the_backoff_learns_a_new_ceiling() -> None:
    b = backoffs()
    b.fail("a", "x", T0, asked=2)
    b.fail("a", "x", T0 + INITIAL, asked=10)
    assert b.ceiling("a", T0 + INITIAL, 0) == 9


def test_active_and_next_expiry() -> None:
    b = backoffs()
    assert (b.active(T0), b.next_expiry(T0)) == ({}, None)
    b.fail("a", "x", T0)
    b.fail("b", "y", T0, at_least=600.0)
    assert sorted(b.active(T0)) == ["a", "b"] and b.next_expiry(T0) == T0 + INITIAL
    assert sorted(b.active(T0 + INITIAL)) == ["b"] and b.next_expiry(T0 + INITIAL) == T0 + 600
    assert (b.active(T0 + 600), b.next_expiry(T0 + 600)) == ({}, None)
