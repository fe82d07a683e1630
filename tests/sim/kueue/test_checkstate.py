"""The condition -> check state table (Kueue's syncCheckStates), row by row, with its priority cases."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gangscale.sim.kueue.checkstate import (
    PENDING,
    READY,
    REJECTED,
    RETRY,
    CheckFacts,
    CheckOutcome,
    Condition,
    RetryStrategy,
    decide,
    requeue_after_seconds,
)

T = Condition("True")
UPDATES = [{"name": "ps1", "annotations": {"a": "b"}}]
PENDING_EMPTY = CheckOutcome(PENDING, "")


def facts(state: str = PENDING, message: str = "", *, attempt: int | None = 1, **kw: Any) -> CheckFacts:
    base = CheckFacts(current=CheckOutcome(state, message), attempt=attempt, ready_pod_set_updates=UPDATES)
    return replace(base, **kw)


def conds(**by_type: Condition) -> dict[str, Condition]:
    return dict(by_type)


CASES: list[tuple[str, CheckFacts, CheckOutcome | None]] = [
    # row 0: config missing
    ("config-missing", facts(config_found=False, attempt=None),
     CheckOutcome(PENDING, "the check is not active")),
    ("config-missing-from-ready", facts(READY, "done", config_found=False),
     CheckOutcome(PENDING, "the check is not active")),
    ("config-missing-already-reported", facts(message="the check is not active", config_found=False), None),
    # row 0': nothing to provision
    ("not-needed", facts(request_needed=False, attempt=None),
     CheckOutcome(READY, "the provisioning request is not needed")),
    ("not-needed-drops-updates",
     replace(facts(request_needed=False), current=CheckOutcome(RETRY, "x", 60, UPDATES)),
     CheckOutcome(READY, "the provisioning request is not needed", 60, None)),
    ("not-needed-already-ready", facts(READY, "anything", request_needed=False), None),
    # no current request
    ("no-request", facts(attempt=None), None),
    # row 1: Failed
    ("failed-retry", facts(conditions=conds(Failed=Condition("True", "no capacity"))),
     CheckOutcome(RETRY, "Retrying after failure: no capacity", 60)),
    ("failed-retry-backoff-grows",
     facts(attempt=3, retry_count=2, conditions=conds(Failed=Condition("True", "m"))),
     CheckOutcome(RETRY, "Retrying after failure: m", 240)),
    ("failed-old-attempt-message-only",
     facts(attempt=1, retry_count=1, conditions=conds(Failed=Condition("True", "m"))),
     CheckOutcome(PENDING, "Retrying after failure: m")),
    ("failed-over-limit-rejected",
     facts(attempt=4, retry_count=3, conditions=conds(Failed=Condition("True", "gone"))),
     CheckOutcome(REJECTED, "gone")),
    ("failed-limit-0-rejected",
     facts(strategy=RetryStrategy(backoff_limit_count=0), conditions=conds(Failed=Condition("True", "m"))),
     CheckOutcome(REJECTED, "m")),
    ("failed-false-ignored", facts(conditions=conds(Failed=Condition("False", "m"))), None),
    ("failed-beats-provisioned",
     facts(conditions=conds(Provisioned=Condition("True", "ok"), Failed=Condition("True", "bad"))),
     CheckOutcome(RETRY, "Retrying after failure: bad", 60)),
    ("failed-beats-revoked",
     facts(attempt=4, conditions=conds(CapacityRevoked=Condition("True", "r"), Failed=Condition("True", "f"))),
     CheckOutcome(REJECTED, "f")),
    # row 2: CapacityRevoked
    ("revoked-active", facts(READY, conditions=conds(Provisioned=T, CapacityRevoked=Condition("True", "rv")),
                             admitted=True),
     CheckOutcome(REJECTED, "rv")),
    ("revoked-not-admitted", facts(conditions=conds(CapacityRevoked=Condition("True", "rv"))),
     CheckOutcome(REJECTED, "rv")),
    ("revoked-finished-no-change", facts(READY, conditions=conds(CapacityRevoked=T), finished=True), None),
    ("revoked-inactive-no-change", facts(READY, conditions=conds(CapacityRevoked=T), active=False), None),
    ("revoked-beats-expired",
     facts(conditions=conds(BookingExpired=Condition("True", "be"), CapacityRevoked=Condition("True", "rv"))),
     CheckOutcome(REJECTED, "rv")),
    # row 3: BookingExpired
    ("expired-not-admitted-retry",
     facts(conditions=conds(Provisioned=T, BookingExpired=Condition("True", "time is up"))),
     CheckOutcome(RETRY, "Retrying after booking expired: time is up", 60)),
    ("expired-old-attempt-message-only",
     facts(retry_count=1, conditions=conds(BookingExpired=Condition("True", "t"))),
     CheckOutcome(PENDING, "Retrying after booking expired: t")),
    ("expired-over-limit-rejected",
     facts(attempt=2, strategy=RetryStrategy(backoff_limit_count=1),
           conditions=conds(BookingExpired=Condition("True", "t"))),
     CheckOutcome(REJECTED, "t")),
    ("expired-admitted-no-change",
     facts(READY, "ok", admitted=True, conditions=conds(Provisioned=T, BookingExpired=Condition("True", "t"))),
     None),
    # row 4: Provisioned
    ("provisioned-ready",
     facts(conditions=conds(Accepted=T, Provisioned=Condition("True", "capacity is here"))),
     CheckOutcome(READY, "capacity is here", None, UPDATES)),
    ("provisioned-already-ready-no-change",
     facts(READY, "old", conditions=conds(Provisioned=Condition("True", "new"))), None),
    # row 5: Accepted
    ("accepted-with-eta",
     facts(conditions=conds(Accepted=T, Provisioned=Condition("False", "ETA 10:00"))),
     CheckOutcome(PENDING, "ETA 10:00")),
    ("accepted-eta-clears-retry-state",
     facts(RETRY, "x", conditions=conds(Accepted=T, Provisioned=Condition("Unknown", ""))),
     CheckOutcome(PENDING, "")),
    ("accepted-without-provisioned-no-change", facts(message="keep", conditions=conds(Accepted=T)), None),
    # row 6: anything else
    ("no-conditions-clears-message", facts(message="Error creating PodTemplate"), PENDING_EMPTY),
    ("provisioned-false-not-accepted",
     facts(message="m", conditions=conds(Provisioned=Condition("False", "ETA"))), PENDING_EMPTY),
    ("nothing-to-do", facts(), None),
]


@pytest.mark.parametrize(("f", "want"), [(f, w) for _, f, w in CASES], ids=[i for i, _, _ in CASES])
def test_decide(f: CheckFacts, want: CheckOutcome | None) -> None:
    assert decide(f) == want


@pytest.mark.parametrize(("retry_count", "strategy", "want"), [
    (0, RetryStrategy(), 60),
    (1, RetryStrategy(), 120),
    (4, RetryStrategy(), 960),
    (5, RetryStrategy(), 1800),
    (9, RetryStrategy(), 1800),
    (2, RetryStrategy(3, 7, 100), 28),
    (3, RetryStrategy(3, 7, 50), 50),
], ids=["n1", "n2", "n5", "n6-capped", "n10-capped", "custom-base", "custom-cap"])
def test_requeue_after_seconds(retry_count: int, strategy: RetryStrategy, want: int) -> None:
    assert requeue_after_seconds(retry_count, strategy) == want
