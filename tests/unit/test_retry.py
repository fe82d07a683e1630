"""The one retry policy (:mod:`gangscale.retry`): growth, cap, Retry-After as a floor, jitter bounds, the presets."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from gangscale.controller.logic.settings import Settings
from gangscale.retry import (
    API_WATCH,
    GKE_BUSY,
    INTENT_CONFLICT,
    PREFLIGHT,
    PROVIDER_CALL,
    SIMULATED_KUBELET,
    STATUS_WRITE,
    Backoff,
    Policy,
    asked_delay,
    isolation,
    provider_start,
    replanning,
    retrying,
)


@dataclass(frozen=True)
class DelayCase:
    id: str
    policy: Policy
    attempt: int
    retry_after: float | None
    expected: float


DELAYS = [
    DelayCase("first-is-initial", Policy(1.0, 100.0), 1, None, 1.0),
    DelayCase("zero-counts-as-first", Policy(1.0, 100.0), 0, None, 1.0),
    DelayCase("doubles", Policy(1.0, 100.0), 2, None, 2.0),
    DelayCase("doubles-again", Policy(1.0, 100.0), 5, None, 16.0),
    DelayCase("other-factor", Policy(1.0, 100.0, factor=3.0), 3, None, 9.0),
    DelayCase("capped", Policy(1.0, 10.0), 5, None, 10.0),
    DelayCase("capped-without-overflow", Policy(1.0, 10.0), 100_000, None, 10.0),
    DelayCase("fixed", Policy(1.0, 1.0), 7, None, 1.0),
    DelayCase("initial-above-cap-is-the-cap", Policy(120.0, 60.0), 1, None, 60.0),
    DelayCase("zero-initial", Policy(0.0, 60.0), 9, None, 0.0),
    DelayCase("retry-after-later-than-own", Policy(1.0, 30.0), 1, 5.0, 5.0),
    DelayCase("own-later-than-retry-after", Policy(1.0, 30.0), 4, 2.0, 8.0),
    DelayCase("retry-after-beyond-the-cap", Policy(1.0, 30.0), 1, 100.0, 100.0),
    DelayCase("retry-after-zero", Policy(1.0, 30.0), 2, 0.0, 2.0),
    DelayCase("retry-after-negative-ignored", Policy(1.0, 30.0), 1, -5.0, 1.0),
]


@pytest.mark.parametrize("case", DELAYS, ids=[c.id for c in DELAYS])
def test_delay_without_jitter(case: DelayCase) -> None:
    assert case.policy.delay(case.attempt, case.retry_after) == case.expected


JITTERED = [
    ("below-the-cap", Policy(1.0, 100.0, jitter=0.2), 3, 4.0 * 0.8, 4.0 * 1.2),
    ("at-the-cap", Policy(1.0, 10.0, jitter=0.2), 8, 10.0 * 0.8, 10.0),
    ("api-watch-first", API_WATCH, 1, 0.4, 0.6),
    ("provider-call-capped", PROVIDER_CALL, 20, 24.0, 30.0),
]


@pytest.mark.parametrize(("policy", "attempt", "low", "high"), [c[1:] for c in JITTERED], ids=[c[0] for c in JITTERED])
def test_jitter_stays_within_its_fraction_and_under_the_cap(policy: Policy, attempt: int, low: float,
                                                            high: float) -> None:
    rng = random.Random(7)
    delays = [policy.delay(attempt, None, rng) for _ in range(500)]
    assert all(low <= d <= high for d in delays)
    assert len(set(delays)) > 1  # spread, not one value


def test_jitter_is_reproducible_with_a_seeded_generator() -> None:
    first = [API_WATCH.delay(n, None, random.Random(3)) for n in range(1, 8)]
    again = [API_WATCH.delay(n, None, random.Random(3)) for n in range(1, 8)]
    assert first == again


RETRY_AFTER = [
    ("short", 1.0),
    ("at-the-cap", 30.0),
    ("beyond-the-cap", 300.0),
]


@pytest.mark.parametrize("retry_after", [c[1] for c in RETRY_AFTER], ids=[c[0] for c in RETRY_AFTER])
@pytest.mark.parametrize("attempt", [1, 3, 12], ids=["first", "third", "twelfth"])
def test_retry_after_is_never_cut_by_jitter_or_cap(attempt: int, retry_after: float) -> None:
    rng = random.Random(11)
    policy = PROVIDER_CALL
    for _ in range(300):
        delay = policy.delay(attempt, retry_after, rng)
        assert delay >= retry_after
        # Spread after the asked time by at most half the jitter, never past the cap unless asked to.
        assert delay <= max(retry_after * (1 + policy.jitter / 2), policy.maximum)


PRESETS = [
    ("api-watch", API_WATCH, 0.5, 30.0, 0.2),
    ("provider-call", PROVIDER_CALL, 1.0, 30.0, 0.2),
    ("gke-busy", GKE_BUSY, 2.0, 30.0, 0.0),
    ("status-write", STATUS_WRITE, 1.0, 60.0, 0.0),
    ("intent-conflict", INTENT_CONFLICT, 1.0, 1.0, 0.0),
    ("preflight", PREFLIGHT, 0.5, 5.0, 0.0),
    ("simulated-kubelet", SIMULATED_KUBELET, 0.5, 10.0, 0.0),
    ("replanning", replanning(Settings()), 60.0, 600.0, 0.0),
    ("isolation", isolation(Settings()), 60.0, 600.0, 0.0),
    ("provider-start", provider_start(Settings()), 60.0, 600.0, 0.0),
    ("replanning-from-flags", replanning(Settings(retry_initial=5.0, retry_max=40.0)), 5.0, 40.0, 0.0),
]


@pytest.mark.parametrize(("policy", "initial", "maximum", "jitter"), [c[1:] for c in PRESETS],
                         ids=[c[0] for c in PRESETS])
def test_preset_values(policy: Policy, initial: float, maximum: float, jitter: float) -> None:
    assert (policy.initial, policy.maximum, policy.jitter, policy.factor) == (initial, maximum, jitter, 2.0)


STEPS = [
    ("status-write", STATUS_WRITE, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]),
    ("simulated-kubelet", SIMULATED_KUBELET, [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]),
    ("preflight", PREFLIGHT, [0.5, 1.0, 2.0, 4.0, 5.0]),
    ("gke-busy", GKE_BUSY, [2.0, 4.0, 8.0, 16.0, 30.0]),
    ("replanning", replanning(Settings()), [60.0, 120.0, 240.0, 480.0, 600.0]),
]


@pytest.mark.parametrize(("policy", "expected"), [c[1:] for c in STEPS], ids=[c[0] for c in STEPS])
def test_unjittered_presets_give_exact_times(policy: Policy, expected: list[float]) -> None:
    assert [policy.delay(n) for n in range(1, len(expected) + 1)] == expected


@pytest.mark.parametrize("kwargs", [{"initial": -1.0, "maximum": 1.0},
                                    {"initial": 1.0, "maximum": 1.0, "factor": 0.5},
                                    {"initial": 1.0, "maximum": 1.0, "jitter": 1.0}],
                         ids=["negative-initial", "shrinking", "jitter-of-100%"])
def test_nonsense_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry policy"):
        Policy(**kwargs)


def test_backoff_counts_failures_until_reset() -> None:
    backoff = Backoff(Policy(1.0, 4.0))
    assert [backoff.next() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    fresh = backoff.fresh()
    assert (fresh.policy, fresh.rng, fresh.failures) == (backoff.policy, backoff.rng, 0)
    backoff.reset()
    assert backoff.next(retry_after=3.0) == 3.0


class Failing(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("failing")
        self.retry_after = retry_after


class Refused(Exception):
    pass


@dataclass(frozen=True)
class LoopCase:
    id: str
    #: What each try does: an exception to raise, or None to return "done".
    script: list[Exception | None]
    attempts: int
    sleeps: list[float]
    raises: type[Exception] | None


LOOPS = [
    LoopCase("answers-at-once", [None], 0, [], None),
    LoopCase("retried-then-answers", [Failing(), Failing(), None], 0, [1.0, 2.0], None),
    LoopCase("retry-after-is-a-floor", [Failing(retry_after=7.0), Failing(retry_after=1.0), None], 0, [7.0, 2.0],
             None),
    LoopCase("not-retryable", [Refused(), None], 0, [], Refused),
    LoopCase("attempts-bound", [Failing(), Failing(), Failing(), None], 3, [1.0, 2.0], Failing),
    LoopCase("unbounded", [Failing()] * 9 + [None], 0, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0, 10.0], None),
]


@pytest.mark.parametrize("case", LOOPS, ids=[c.id for c in LOOPS])
async def test_retrying_sleeps_by_the_policy_on_the_callers_clock(case: LoopCase) -> None:
    script = iter(case.script)
    slept: list[float] = []
    heard: list[float] = []

    async def call() -> str:
        step = next(script)
        if step is not None:
            raise step
        return "done"

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    run = retrying(call, Policy(1.0, 10.0), sleep, retryable=lambda exc: isinstance(exc, Failing),
                   attempts=case.attempts, on_retry=lambda _exc, delay: heard.append(delay))
    if case.raises is None:
        assert await run == "done"
    else:
        with pytest.raises(case.raises):
            await run
    assert slept == heard == case.sleeps


@pytest.mark.parametrize(("exc", "expected"), [(Failing(2.5), 2.5), (Failing(None), None), (Refused(), None)],
                         ids=["carried", "none", "no-attribute"])
def test_asked_delay_reads_an_errors_retry_after(exc: Exception, expected: float | None) -> None:
    assert asked_delay(exc) == expected
