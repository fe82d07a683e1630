"""ProvisioningRequest conditions -> the Workload's admission check state: Kueue's ``syncCheckStates`` as one
pure decision.

Reproduced (Kueue ``pkg/controller/admissionchecks/provisioning/controller.go``), in the same priority order:

====  ==========================================  ==========================================================
row   when                                        the check becomes
====  ==========================================  ==========================================================
0     the ProvisioningRequestConfig is missing    ``Pending`` / ``the check is not active``
0'    no podSet needs provisioning                ``Ready`` / ``the provisioning request is not needed``,
                                                  podSetUpdates dropped (only on the transition)
-     no current ProvisioningRequest              no change
1     ``Failed=True``                             attempt <= limit: message ``Retrying after failure: <m>``,
                                                  and ``Retry`` + requeueAfterSeconds if attempt > retryCount;
                                                  attempt > limit: ``Rejected`` / ``<m>``
2     ``CapacityRevoked=True``                    active and unfinished Workload: ``Rejected`` / ``<m>``;
                                                  else no change
3     ``BookingExpired=True``                     not admitted: as row 1 with ``Retrying after booking
                                                  expired: <m>``; admitted: no change
4     ``Provisioned=True``                        on the transition to ``Ready``: message ``<m>`` and the
                                                  podSetUpdates; already Ready: no change
5     ``Accepted=True``                           with a Provisioned condition of any status: ``Pending`` /
                                                  its message (the ETA); without one: no change
6     anything else                               ``Pending`` / ``""`` (clears a stale error message)
====  ==========================================  ==========================================================

``requeueAfterSeconds`` for ``Retry`` is ``floor(min(base * 2^(n-1), max))`` with ``n = retryCount + 1``.
Simplified: Kueue adds a random jitter of at most 1e-4 of the wait (``wait.NewBackoff(..., 0.0001)``) before
truncating to whole seconds; it is dropped here so the simulation is deterministic (it can only ever change the
value by a second at the cap). ``lastTransitionTime`` is the caller's business (it changes with the state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gangscale.sim.kueue.prnames import CHECK_INACTIVE, NOT_NEEDED

JSON = dict[str, Any]

PENDING = "Pending"
READY = "Ready"
RETRY = "Retry"
REJECTED = "Rejected"

ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"


@dataclass(frozen=True)
class Condition:
    """One ProvisioningRequest condition, as far as Kueue reads it."""

    status: str
    message: str = ""


@dataclass(frozen=True)
class RetryStrategy:
    """``ProvisioningRequestConfig.spec.retryStrategy`` with the CRD defaults."""

    backoff_limit_count: int = 3
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 1800


@dataclass(frozen=True)
class CheckOutcome:
    """The fields of the check entry this controller writes (``lastTransitionTime`` aside)."""

    state: str
    message: str
    requeue_after_seconds: int | None = None
    pod_set_updates: list[JSON] | None = None


@dataclass(frozen=True)
class CheckFacts:
    """Everything the decision depends on. ``attempt`` is the current ProvisioningRequest's attempt number, None
    when there is no current request; ``conditions`` are its conditions by type; ``ready_pod_set_updates`` are
    the podSetUpdates a transition to Ready would carry (computed by the caller from the request and config)."""

    current: CheckOutcome
    retry_count: int = 0
    config_found: bool = True
    request_needed: bool = True
    attempt: int | None = None
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    strategy: RetryStrategy = RetryStrategy()
    admitted: bool = False
    active: bool = True
    finished: bool = False
    ready_pod_set_updates: list[JSON] = field(default_factory=list)

    # The condition views the decision matches on (status True only, except ``provisioned_any``).
    def _true(self, ctype: str) -> Condition | None:
        cond = self.conditions.get(ctype)
        return cond if cond is not None and cond.status == "True" else None

    @property
    def failed(self) -> Condition | None:
        return self._true(FAILED)

    @property
    def revoked(self) -> Condition | None:
        return self._true(CAPACITY_REVOKED)

    @property
    def expired(self) -> Condition | None:
        return self._true(BOOKING_EXPIRED)

    @property
    def provisioned(self) -> Condition | None:
        return self._true(PROVISIONED)

    @property
    def provisioned_any(self) -> Condition | None:
        return self.conditions.get(PROVISIONED)

    @property
    def accepted(self) -> bool:
        return self._true(ACCEPTED) is not None

    @property
    def retryable(self) -> bool:
        """The current attempt may still be retried (attempt <= backoffLimitCount)."""
        return self.attempt is not None and self.attempt <= self.strategy.backoff_limit_count

    @property
    def fresh(self) -> bool:
        """The current attempt is newer than the retries Kueue already counted, so it may go to Retry."""
        return self.attempt is not None and self.attempt > self.retry_count


def requeue_after_seconds(retry_count: int, strategy: RetryStrategy) -> int:
    """Seconds Kueue waits before requeueing after the ``retry_count + 1``-th retry (jitter dropped)."""
    n = retry_count + 1
    return int(min(strategy.backoff_base_seconds * 2 ** (n - 1), strategy.backoff_max_seconds))


def decide(f: CheckFacts) -> CheckOutcome | None:
    """The new check entry for ``f``, or None when nothing changes."""
    cur = f.current
    match f:
        case CheckFacts(config_found=False):
            new = replace(cur, state=PENDING, message=CHECK_INACTIVE)
        case CheckFacts(request_needed=False) if cur.state != READY:
            new = CheckOutcome(READY, NOT_NEEDED, cur.requeue_after_seconds, None)
        case CheckFacts(request_needed=False) | CheckFacts(attempt=None):
            new = cur
        case CheckFacts(failed=Condition(message=msg), retryable=True, fresh=True):
            new = replace(cur, state=RETRY, message=f"Retrying after failure: {msg}",
                          requeue_after_seconds=requeue_after_seconds(f.retry_count, f.strategy))
        case CheckFacts(failed=Condition(message=msg), retryable=True):
            new = replace(cur, message=f"Retrying after failure: {msg}")
        case CheckFacts(failed=Condition(message=msg)):
            new = replace(cur, state=REJECTED, message=msg)
        case CheckFacts(revoked=Condition(message=msg), active=True, finished=False):
            new = replace(cur, state=REJECTED, message=msg)
        case CheckFacts(revoked=Condition()):
            new = cur
        case CheckFacts(expired=Condition(message=msg), admitted=False, retryable=True, fresh=True):
            new = replace(cur, state=RETRY, message=f"Retrying after booking expired: {msg}",
                          requeue_after_seconds=requeue_after_seconds(f.retry_count, f.strategy))
        case CheckFacts(expired=Condition(message=msg), admitted=False, retryable=True):
            new = replace(cur, message=f"Retrying after booking expired: {msg}")
        case CheckFacts(expired=Condition(message=msg), admitted=False):
            new = replace(cur, state=REJECTED, message=msg)
        case CheckFacts(expired=Condition()):
            new = cur
        case CheckFacts(provisioned=Condition(message=msg)) if cur.state != READY:
            new = replace(cur, state=READY, message=msg, pod_set_updates=list(f.ready_pod_set_updates))
        case CheckFacts(provisioned=Condition()):
            new = cur
        case CheckFacts(accepted=True, provisioned_any=Condition(message=msg)):
            new = replace(cur, state=PENDING, message=msg)
        case CheckFacts(accepted=True):
            new = cur
        case _:
            new = replace(cur, state=PENDING, message="")
    return None if new == cur else new
