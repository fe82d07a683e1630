"""Pool health (:mod:`gangscale.controller.logic.poolhealth`), pure: outcome sequences → verdicts and their words,
the cooldown and the fresh start after it, the window sliding, the ratio's edges, ``min_outcomes``; how a failed
provider step is classified; how a verdict closes the pool through its backoff; the flags that set it.

Sequences are strings, one letter per scale-up (:func:`outcomes`): ``S`` success, ``T`` timeout, ``P`` partial
grant, ``O`` stockout, ``Q`` quota, ``E`` error. Outcome ``i`` is recorded at time ``NOW + i``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

import pytest

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.poolhealth import PoolHealth, ScaleUpOutcome, Unhealthy, describe
from gangscale.controller.logic.reconcile import Context
from gangscale.controller.logic.record import OBTAINED, Record, Step
from gangscale.controller.logic.request import Request, RequestState
from gangscale.controller.logic.scaleup import Failure, scale_up_failed
from gangscale.controller.logic.settings import Settings
from gangscale.flags import FlagError, add_run_flags, resolve
from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.timefmt import rfc3339
from tests.planner.builders import CPU_NODE, pool

NOW = 1_795_000_000.0
COOLDOWN = 1800.0
LETTERS = {"S": ScaleUpOutcome.SUCCESS, "T": ScaleUpOutcome.TIMEOUT, "P": ScaleUpOutcome.PARTIAL,
           "O": ScaleUpOutcome.STOCKOUT, "Q": ScaleUpOutcome.QUOTA, "E": ScaleUpOutcome.ERROR}


def outcomes(letters: str) -> list[ScaleUpOutcome]:
    return [LETTERS[letter] for letter in letters]


def health(**kwargs: Any) -> PoolHealth:
    return PoolHealth(**{"cooldown": COOLDOWN, **kwargs})


def feed(h: PoolHealth, letters: str, pool: str = "p", start: float = NOW) -> list[str | None]:
    """Record the sequence one second apart; what each ``record`` returned."""
    return [h.record(pool, outcome, start + i) for i, outcome in enumerate(outcomes(letters))]


@dataclass(frozen=True)
class Case:
    letters: str
    #: The index of the outcome that makes the pool unhealthy (None: it never is), and the verdict's reason.
    at: int | None = None
    reason: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


CASES = {
    # Karpenter's rule (failures / buffer size >= 0.5): [false, false] is unhealthy ...
    "two-of-two": Case("TT", 1, "pool p unhealthy: 2 of the last 2 scale-ups timed out"),
    # ... one failure is not, whatever the buffer holds, since the empty slots count as not failed.
    "one-failure": Case("T"),
    "success-then-failure": Case("ST"),
    "failure-then-success": Case("TS"),
    "one-of-four": Case("SSST"),
    "two-of-three": Case("TST", 2, "pool p unhealthy: 2 of the last 3 scale-ups timed out"),
    "exactly-the-ratio": Case("STST", 3, "pool p unhealthy: 2 of the last 4 scale-ups timed out"),
    "just-below-the-ratio": Case("STST", settings={"ratio": 0.51}),
    # The window slides: the first failure is out of it when the second comes.
    "window-slides": Case("TSSSST"),
    "window-slides-then-fails": Case("TSSSSTT", 6, "pool p unhealthy: 2 of the last 4 scale-ups timed out"),
    "issue-example": Case("TSTT", 3, "pool p unhealthy: 3 of the last 4 scale-ups timed out", {"ratio": 0.75}),
    "kinds-listed": Case("TSOT", 3, "pool p unhealthy: 3 of the last 4 scale-ups failed: 2 timed out, 1 stockout",
                         {"ratio": 0.75}),
    "kinds-by-count-then-kind": Case("QEO", 2, "pool p unhealthy: 3 of the last 3 scale-ups failed: 1 stockout, "
                                               "1 quota error, 1 provider error", {"ratio": 0.75}),
    "ratio-one-needs-the-whole-window": Case("TTT", settings={"ratio": 1.0}),
    "ratio-one": Case("TTTT", 3, "pool p unhealthy: 4 of the last 4 scale-ups timed out", {"ratio": 1.0}),
    "min-outcomes-one-judges-what-is-held": Case("T", 0, "pool p unhealthy: the last scale-up timed out",
                                                 {"min_outcomes": 1}),
    "min-outcomes-one-success-then-failure": Case("ST", 1, "pool p unhealthy: 1 of the last 2 scale-ups timed out",
                                                  {"min_outcomes": 1}),
    # Fewer outcomes than ``min_outcomes`` are judged as if the missing ones were successes.
    "min-outcomes-two": Case("T", 0, "pool p unhealthy: the last scale-up timed out", {"min_outcomes": 2}),
    "min-outcomes-three": Case("T", settings={"min_outcomes": 3}),
    "min-outcomes-three-then-two": Case("TT", 1, "pool p unhealthy: 2 of the last 2 scale-ups timed out",
                                        {"min_outcomes": 3}),
    "min-outcomes-above-the-window": Case("TTTT", settings={"min_outcomes": 10}),
    "window-one": Case("ST", 1, "pool p unhealthy: the last scale-up timed out", {"window": 1, "ratio": 1.0}),
    "window-zero-is-off": Case("TTTT", settings={"window": 0}),
    "successes-only": Case("SSSSSS"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_outcome_sequences_give_these_verdicts(case: Case) -> None:
    h = health(**case.settings)
    got = feed(h, case.letters)
    expected = [None] * len(case.letters)
    if case.at is not None:
        expected[case.at] = f"{case.reason}; skipped until {rfc3339(NOW + case.at + COOLDOWN)}"
    assert got == expected
    verdict = h.unhealthy("p", NOW + len(case.letters))
    assert (verdict.reason if verdict else None) == (case.reason or None)


@pytest.mark.parametrize(("letters", "reason"), [
    ("PP", "2 of the last 2 scale-ups got only part of their units"),
    ("OO", "2 of the last 2 scale-ups stocked out"),
    ("QQ", "2 of the last 2 scale-ups hit a quota"),
    ("EE", "2 of the last 2 scale-ups failed with a provider error"),
    ("PPO", "3 of the last 3 scale-ups failed: 2 partial grants, 1 stockout"),
    ("TEE", "3 of the last 3 scale-ups failed: 2 provider errors, 1 timed out"),
], ids=["partial", "stockout", "quota", "error", "plural-noun", "count-first"])
def test_every_kind_of_failure_counts_and_is_named(letters: str, reason: str) -> None:
    assert describe("p", outcomes(letters)) == f"pool p unhealthy: {reason}"
    assert feed(health(), letters[:2])[1] is not None  # each kind is a failure: two of them close the pool


def test_the_capacity_type_prefixes_the_pool() -> None:
    h = health()
    h.record("a3-spot", ScaleUpOutcome.TIMEOUT, NOW, capacity_type="spot")
    message = h.record("a3-spot", ScaleUpOutcome.TIMEOUT, NOW + 1, capacity_type="spot")
    assert message == (f"spot pool a3-spot unhealthy: 2 of the last 2 scale-ups timed out; skipped until "
                       f"{rfc3339(NOW + 1 + COOLDOWN)}")


def test_unhealthy_for_the_cooldown_then_the_buffer_starts_afresh() -> None:
    h = health()
    feed(h, "TT")
    verdict = h.unhealthy("p", NOW + 1)
    assert verdict is not None and (verdict.since, verdict.until) == (NOW + 1, NOW + 1 + COOLDOWN)
    assert h.unhealthy("p", NOW + COOLDOWN + 0.5) == verdict
    assert h.unhealthy("p", NOW + 1 + COOLDOWN) is None
    assert h.recent("p", NOW + 1 + COOLDOWN) == ()
    # One more failure does not close it again at once (1 of 4 slots); a second one does.
    assert feed(h, "T", start=NOW + 2000) == [None]
    assert feed(h, "T", start=NOW + 2001) == [f"pool p unhealthy: 2 of the last 2 scale-ups timed out; skipped until "
                                              f"{rfc3339(NOW + 2001 + COOLDOWN)}"]


def test_outcomes_during_the_cooldown_are_kept_but_neither_extend_nor_survive_it() -> None:
    """Scale-ups started before the verdict may end during the cooldown: shown, not counted again."""
    h = health()
    feed(h, "TT")
    until = NOW + 1 + COOLDOWN
    assert feed(h, "TS", start=NOW + 100) == [None, None]
    verdict = h.unhealthy("p", NOW + 200)
    assert verdict is not None and verdict.until == until
    assert verdict.outcomes == tuple(outcomes("TT"))  # the words stay those of the verdict
    assert verdict.reason == "pool p unhealthy: 2 of the last 2 scale-ups timed out"
    assert h.recent("p", NOW + 200) == tuple(outcomes("TTTS"))
    assert h.recent("p", until) == ()


def test_active_and_next_expiry_over_several_pools() -> None:
    h = health()
    feed(h, "TT", "a")
    feed(h, "OO", "b", start=NOW + 100)
    feed(h, "T", "c")
    assert sorted(h.active(NOW + 101)) == ["a", "b"]
    assert h.next_expiry(NOW + 101) == NOW + 1 + COOLDOWN
    assert sorted(h.active(NOW + 1 + COOLDOWN)) == ["b"]
    assert h.next_expiry(NOW + 1 + COOLDOWN) == NOW + 101 + COOLDOWN
    assert h.active(NOW + 101 + COOLDOWN) == {} and h.next_expiry(NOW + 101 + COOLDOWN) is None
    assert h.unhealthy("never-seen", NOW) is None and h.recent("never-seen", NOW) == ()


def test_every_outcome_is_told_and_the_verdict_once() -> None:
    told: list[tuple[str, ScaleUpOutcome, str | None]] = []
    h = health(on_outcome=lambda p, o, became: told.append((p, o, became.reason if became else None)))
    feed(h, "STTS")
    assert told == [("p", ScaleUpOutcome.SUCCESS, None), ("p", ScaleUpOutcome.TIMEOUT, None),
                    ("p", ScaleUpOutcome.TIMEOUT, "pool p unhealthy: 2 of the last 3 scale-ups timed out"),
                    ("p", ScaleUpOutcome.SUCCESS, None)]
    off: list[ScaleUpOutcome] = []
    feed(health(window=0, on_outcome=lambda p, o, became: off.append(o)), "TT")
    assert off == outcomes("TT")  # counted for the metrics even with health off


@pytest.mark.parametrize("kwargs", [{"ratio": 0.0}, {"ratio": 1.5}, {"window": -1}, {"cooldown": -1.0}],
                         ids=["ratio-zero", "ratio-above-one", "negative-window", "negative-cooldown"])
def test_impossible_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="pool health needs"):
        health(**kwargs)


# -- what a failed provider step says of its pool -----------------------------------------------------------------


def failure(error_class: ErrorClass, code: str = "X", *, available: int | None = None, asked: int = 4) -> Failure:
    return Failure(ProviderError(error_class, code, "m", pool="p", available=available), asked)


@pytest.mark.parametrize(("got", "outcome"), [
    (failure(ErrorClass.STOCKOUT, "GCE_STOCKOUT"), ScaleUpOutcome.STOCKOUT),
    (failure(ErrorClass.STOCKOUT, available=0), ScaleUpOutcome.STOCKOUT),
    (failure(ErrorClass.STOCKOUT, available=1), ScaleUpOutcome.PARTIAL),
    (failure(ErrorClass.STOCKOUT, available=4), ScaleUpOutcome.STOCKOUT),
    (failure(ErrorClass.QUOTA, "QUOTA_EXCEEDED"), ScaleUpOutcome.QUOTA),
    (failure(ErrorClass.QUOTA, available=2), ScaleUpOutcome.PARTIAL),
    (failure(ErrorClass.PERMANENT, "INCOMPLETE_RESULT"), ScaleUpOutcome.PARTIAL),
    (failure(ErrorClass.PERMANENT, "PERMISSION_DENIED"), ScaleUpOutcome.ERROR),
    (failure(ErrorClass.TRANSIENT, "UNAVAILABLE"), ScaleUpOutcome.ERROR),
], ids=["stockout", "stockout-none-left", "partial-grant", "stockout-enough-left", "quota", "partial-quota",
        "short-answer", "permanent", "transient-past-its-retries"])
def test_a_failed_step_is_classified(got: Failure, outcome: ScaleUpOutcome) -> None:
    assert got.outcome is outcome


# -- a verdict closes the pool through its backoff ------------------------------------------------------------------


class NoWorld:
    def node_present(self, name: str) -> bool:
        return False

    def node_ready(self, name: str) -> bool:
        return False

    def node_readiness(self, name: str) -> None:
        return None

    def consumed(self, st: object) -> None:
        return None


POOL = pool("p", CPU_NODE)
#: "spot " once pools have a capacity type (``NodePool.capacity_type``), else nothing.
PREFIX = f"{getattr(POOL, 'capacity_type', '')} ".lstrip()


def context(h: PoolHealth | None, backoffs: PoolBackoffs, at: float) -> Context:
    return Context(at, Settings(), {"p": POOL}, backoffs, NoWorld(), h)


def test_a_verdict_closes_the_pool_for_the_cooldown_with_itself_as_the_reason() -> None:
    backoffs, h = PoolBackoffs(60.0, 60.0, 3600.0), health()
    for i in range(2):
        ctx = context(h, backoffs, NOW + i)
        backoffs.fail("p", "nodes that did not become Ready in time", ctx.now)  # the failure's own backoff first
        verdict = ctx.scale_up_outcome("p", ScaleUpOutcome.TIMEOUT)
    assert isinstance(verdict, Unhealthy)
    closed = backoffs.get("p", NOW + 1000)
    assert closed is not None and closed.until == NOW + 1 + COOLDOWN and closed.reason == verdict.cause
    assert verdict.cause == "unhealthy: 2 of the last 2 scale-ups timed out"
    assert backoffs.ceiling("p", NOW + 1000, held=0) == 0  # closed whole, even for a stockout's smaller gangs
    # Outcomes of scale-ups in flight during the cooldown change neither the closure nor its reason (a failure's
    # own backoff is not taken while ``unhealthy`` answers: it would outlast the cooldown).
    later = context(h, backoffs, NOW + 20)
    assert later.scale_up_outcome("p", ScaleUpOutcome.SUCCESS) == verdict
    assert later.unhealthy("p") == verdict
    assert later.scale_up_outcome("p", ScaleUpOutcome.STOCKOUT) == verdict
    assert backoffs.get("p", NOW + 1000) == closed
    assert backoffs.get("p", NOW + 1 + COOLDOWN) is None and later.unhealthy("p") == verdict
    assert context(h, backoffs, NOW + 1 + COOLDOWN).unhealthy("p") is None


def scaled_up() -> RequestState:
    """A request whose one-unit scale-up of pool p was recorded (and is about to be told it failed)."""
    st = RequestState(Request("ns/pr", "uid-1", "provreq", "c", {"kind": "ProvisioningRequest"}, created=NOW - 100))
    st.record = Record(1, OBTAINED, NOW + 60, (Step("p", 1, "tok-p"),))
    return st


def stockout(code: str = "GCE_STOCKOUT") -> Failure:
    return Failure(ProviderError(ErrorClass.STOCKOUT, code, "out", pool="p"), 2)


def test_the_failure_that_makes_a_pool_unhealthy_says_so_in_the_condition() -> None:
    backoffs, h = PoolBackoffs(60.0, 60.0, 3600.0), health()
    first = scale_up_failed(scaled_up(), [stockout()], context(h, backoffs, NOW))
    st = scaled_up()
    # The obtain failed and so did the release after it: one scale-up, one outcome.
    release = Failure(ProviderError(ErrorClass.TRANSIENT, "UNAVAILABLE", "busy", pool="p"), 2)
    second = scale_up_failed(st, [stockout(), release], context(h, backoffs, NOW + 100))
    verdict = (f"{PREFIX}pool p unhealthy: 2 of the last 2 scale-ups stocked out; skipped until "
               f"{rfc3339(NOW + 100 + COOLDOWN)}")
    assert (first, second) == (["p"], ["p"])
    assert st.conditions[C.PROVISIONED].message == (
        f"scale-up failed and every unit it obtained was released: pool p: stockout (GCE_STOCKOUT: out); {verdict}; "
        "pool p: transient (UNAVAILABLE: busy); re-planning with the other pools")
    assert h.recent("p", NOW + 100) == tuple(outcomes("OO"))
    closed = backoffs.get("p", NOW + 100)
    assert closed is not None and closed.until == NOW + 100 + COOLDOWN
    assert closed.reason == "unhealthy: 2 of the last 2 scale-ups stocked out"
    # A scale-up that was in flight fails during the cooldown: told, recorded, and the closure left as it is.
    late = scaled_up()
    assert scale_up_failed(late, [stockout("ZONE_RESOURCE_POOL_EXHAUSTED")], context(h, backoffs, NOW + 500)) == []
    assert verdict in late.conditions[C.PROVISIONED].message
    assert backoffs.get("p", NOW + 500) == closed and len(h.recent("p", NOW + 500)) == 3


def test_without_a_tracker_or_for_an_unknown_pool_nothing_is_recorded() -> None:
    backoffs = PoolBackoffs(60.0, 60.0, 3600.0)
    assert context(None, backoffs, NOW).scale_up_outcome("p", ScaleUpOutcome.TIMEOUT) is None
    h = health(min_outcomes=1)
    assert context(h, backoffs, NOW).scale_up_outcome("gone", ScaleUpOutcome.TIMEOUT) is None
    assert h.active(NOW) == {} and backoffs.active(NOW) == {}


# -- the flags --------------------------------------------------------------------------------------------------


def parse(argv: list[str], env: dict[str, str] | None = None) -> Any:
    parser = argparse.ArgumentParser()
    add_run_flags(parser)
    return resolve(parser.parse_args(argv), env or {})


def test_the_flags_default_to_the_controller_defaults() -> None:
    flags, defaults = parse([]), Settings()
    assert (flags.pool_health_window, flags.pool_unhealthy_ratio, flags.pool_unhealthy_cooldown) == (
        defaults.pool_health_window, defaults.pool_unhealthy_ratio, defaults.pool_unhealthy_cooldown) == (
        4, 0.5, 1800.0)
    assert PoolHealth().window == 4 and PoolHealth().ratio == 0.5 and PoolHealth().cooldown == 1800.0


@pytest.mark.parametrize(("argv", "env", "field", "value"), [
    (["--pool-health-window", "0"], {}, "pool_health_window", 0),
    ([], {"GANGSCALE_POOL_HEALTH_WINDOW": "10"}, "pool_health_window", 10),
    ([], {"GANGSCALE_POOL_UNHEALTHY_RATIO": "1"}, "pool_unhealthy_ratio", 1.0),
    (["--pool-unhealthy-ratio", "0.25"], {}, "pool_unhealthy_ratio", 0.25),
    ([], {"GANGSCALE_POOL_UNHEALTHY_COOLDOWN": "1h"}, "pool_unhealthy_cooldown", 3600.0),
], ids=["window-off", "env-window", "env-ratio-one", "cli-ratio", "env-cooldown"])
def test_the_flags_are_read(argv: list[str], env: dict[str, str], field: str, value: object) -> None:
    assert getattr(parse(argv, env), field) == value


@pytest.mark.parametrize(("argv", "message"), [
    (["--pool-health-window", "-1"], "--pool-health-window='-1': not a number of scale-ups from 0 (pool health "
                                     "off) to 100"),
    (["--pool-health-window", "101"], "--pool-health-window='101': not a number of scale-ups"),
    (["--pool-health-window", "4.5"], "--pool-health-window='4.5': not a number of scale-ups"),
    (["--pool-unhealthy-ratio", "0"], "--pool-unhealthy-ratio='0': not a ratio above 0 and at most 1"),
    (["--pool-unhealthy-ratio", "1.01"], "--pool-unhealthy-ratio='1.01': not a ratio"),
    (["--pool-unhealthy-ratio", "nan"], "--pool-unhealthy-ratio='nan': not a ratio"),
    (["--pool-unhealthy-ratio", "half"], "--pool-unhealthy-ratio='half': not a ratio"),
    (["--pool-unhealthy-cooldown", "0"], "--pool-unhealthy-cooldown='0': must be more than 0 (to turn pool health "
                                         "off, use --pool-health-window 0)"),
    (["--pool-unhealthy-cooldown", "soon"], "--pool-unhealthy-cooldown='soon': not a duration"),
], ids=["window-negative", "window-too-big", "window-not-an-integer", "ratio-zero", "ratio-above-one", "ratio-nan",
        "ratio-word", "cooldown-zero", "cooldown-word"])
def test_out_of_range_flags_are_refused_in_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse(argv)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
