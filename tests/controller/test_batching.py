"""When pending requests are planned (``gangscale.controller.logic.batching``, group commit), on plain objects: held
while scale-ups are calling the provider, released once the calls return or the batch window closes. The window
itself (``Window``, shared with the Ray source's forming demand) first, as a table."""

from __future__ import annotations

import pytest

from gangscale.controller.logic.batching import Batching, Window

T0 = 1_000.0
IDLE, MAX = 1.0, 10.0


@pytest.mark.parametrize(("idle", "longest", "arrivals", "deadline"), [
    (IDLE, MAX, [], None),
    (IDLE, MAX, [0.0], IDLE),
    (IDLE, MAX, [0.0, 0.5], 0.5 + IDLE),
    (IDLE, MAX, [0.0, 0.5, 0.5], 0.5 + IDLE),
    (IDLE, MAX, [0.9 * i for i in range(12)], MAX),
    (IDLE, MAX, [0.0, 9.5], MAX),
    (0.0, 0.0, [0.0], 0.0),
    (0.0, MAX, [0.0, 3.0], 3.0),
    (IDLE, 0.0, [0.0, 0.5], 0.0),
    (-1.0, MAX, [0.0], -1.0),
], ids=["empty", "one-arrival", "idle-restarts", "same-time-again", "longest-caps-a-steady-stream",
        "longest-caps-a-late-arrival", "zero", "zero-idle", "zero-longest", "negative-idle"])
def test_window_deadline_is_the_sooner_of_idle_after_the_last_and_longest_after_the_first(
        idle: float, longest: float, arrivals: list[float], deadline: float | None) -> None:
    w = Window(idle, longest)
    for at in arrivals:
        w.note(T0 + at)
    expected = None if deadline is None else T0 + deadline
    assert w.deadline() == expected
    assert w.empty is (not arrivals)
    assert (w.first, w.last) == ((T0 + arrivals[0], T0 + arrivals[-1]) if arrivals else (None, None))
    if expected is not None:
        assert (w.due(expected - 0.01), w.due(expected), w.due(expected + 5)) == (False, True, True)
    else:
        assert w.due(T0 + 1e9) is False  # an empty window never closes


@pytest.mark.parametrize(("arrivals", "after_reset", "deadline"), [
    ([0.0, 0.5], [], None),
    ([0.0, 0.5], [100.0], 100.0 + IDLE),
    ([0.0, 9.0], [9.5], 9.5 + IDLE),
], ids=["empty-again", "a-new-window-starts-at-its-own-first-arrival", "the-old-first-arrival-is-forgotten"])
def test_window_reset_forgets_what_was_noted(arrivals: list[float], after_reset: list[float],
                                              deadline: float | None) -> None:
    w = Window(IDLE, MAX)
    for at in arrivals:
        w.note(T0 + at)
    w.reset()
    for at in after_reset:
        w.note(T0 + at)
    assert w.deadline() == (None if deadline is None else T0 + deadline)
    assert w.empty is (not after_reset)


def test_nothing_in_flight_never_holds() -> None:
    b = Batching(IDLE, MAX)
    assert b.deferring(T0) is False
    assert b.deadline() is None and b.take_batch(T0) == set()


def test_in_flight_holds_until_the_idle_window_closes() -> None:
    b = Batching(IDLE, MAX)
    b.started("busy")
    assert b.deferring(T0) is True  # the first request to arrive waits for the batch
    b.defer("a", T0)
    assert b.deadline() == T0 + IDLE
    assert (b.deferring(T0 + 0.5), b.take_batch(T0 + 0.5)) == (True, set())
    assert b.deferring(T0 + IDLE) is False
    assert b.take_batch(T0 + IDLE) == {"a"}
    assert (b.held, b.deadline()) == (set(), None)
    assert b.take_batch(T0 + IDLE) == set()


def test_each_arrival_extends_the_window_up_to_batch_max() -> None:
    """The deadline is min(last + batch_idle, first + batch_max)."""
    b = Batching(IDLE, MAX)
    b.started("busy")
    for i in range(12):
        b.defer(f"r{i}", T0 + i * 0.9)
        assert b.deadline() == min(T0 + i * 0.9 + IDLE, T0 + MAX)
    assert b.deferring(T0 + MAX - 0.01) is True
    assert b.deferring(T0 + MAX) is False
    assert b.take_batch(T0 + MAX) == {f"r{i}" for i in range(12)}


def test_holding_a_key_twice_does_not_move_the_window() -> None:
    b = Batching(IDLE, MAX)
    b.started("busy")
    b.defer("a", T0)
    b.defer("a", T0 + 0.5)
    assert b.deadline() == T0 + IDLE


def test_the_batch_is_released_when_the_provider_calls_return() -> None:
    b = Batching(IDLE, MAX)
    b.started("x")
    b.started("y")
    b.defer("a", T0)
    b.finished("x")
    assert b.take_batch(T0 + 0.1) == set()  # y still calls the provider
    b.finished("y")
    assert b.deferring(T0 + 0.1) is False
    assert b.take_batch(T0 + 0.1) == {"a"}


def test_forget_drops_a_key_from_both_sets() -> None:
    b = Batching(IDLE, MAX)
    b.started("x")
    b.defer("a", T0)
    b.defer("b", T0)
    b.forget("a")
    b.forget("x")
    assert (b.in_flight, b.held) == (set(), {"b"})
    assert b.take_batch(T0) == {"b"}


def test_a_new_batch_starts_its_own_window() -> None:
    b = Batching(IDLE, MAX)
    b.started("x")
    b.defer("a", T0)
    assert b.take_batch(T0 + IDLE) == {"a"}
    b.defer("b", T0 + 100)
    assert b.deadline() == T0 + 100 + IDLE
    assert b.deferring(T0 + 100.5) is True


def test_zero_windows_release_a_held_key_at_once() -> None:
    b = Batching(0.0, 0.0)
    b.started("x")
    b.defer("a", T0)
    assert b.deadline() == T0
    assert b.deferring(T0) is False
    assert b.take_batch(T0) == {"a"}


@pytest.mark.parametrize("batch_max", [0.0, MAX], ids=["both-zero", "idle-zero"])
def test_zero_idle_window_never_holds(batch_max: float) -> None:
    b = Batching(0.0, batch_max)
    b.started("x")
    assert b.deferring(T0) is False


def test_forgetting_the_only_held_key_leaves_no_stale_window() -> None:
    b = Batching(IDLE, MAX)
    b.started("x")
    b.defer("a", T0)
    b.forget("a")  # its object was deleted while it was held
    assert b.deadline() is None
    assert b.deferring(T0 + 100) is True  # x still calls the provider: a new arrival waits for the batch
