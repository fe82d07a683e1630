"""What Kueue's scheduler and workload controller change on one Workload, as pure functions of ``now``.

Each function returns a :class:`StatusEdit` (or None when nothing would change): the status fields to set
or remove under field manager ``kueue-admission``, a ``spec.active`` write, and the Events and timeline
entries that go with the transition. :mod:`gangscale.sim.kueue.core` performs them.

Reproduced (Kueue v1beta2 vocabulary):

- reservation: ``status.admission``, ``QuotaReserved=True/QuotaReserved`` ("Quota reserved in ClusterQueue
  <cq>"), an active ``Evicted``/``Preempted`` condition turned False with "Previously: <message>", one
  ``Pending`` entry per admission check of the ClusterQueue (existing entries kept, stale ones removed);
  with no check, ``Admitted=True`` in the same write;
- admission once every check is ``Ready``: ``Admitted=True/Admitted`` ("The workload is admitted");
- the Retry backoff while the quota is held (``NeedsRequeueAtUpdate``, ``SetRequeueState`` in Kueue's
  ``pkg/workload``; the first step of ``WorkloadReconciler.Reconcile`` in
  ``pkg/controller/core/workload_controller.go``): when a ``Retry`` check's ``lastTransitionTime +
  requeueAfterSeconds`` (the latest over the Retry checks, ``GetMaxRetryTime``) is still ahead and later
  than ``requeueState.requeueAt``, only ``requeueState.requeueAt`` is set (``count`` untouched), and an
  active Workload whose ``requeueAt`` is ahead is left alone until then (:func:`holds_for_backoff`): it
  keeps ``QuotaReserved=True`` and its quota. A ``requeueAt`` already past evicts at once;
- check-based eviction (``reconcileCheckBasedEviction``): any ``Rejected`` check deactivates the Workload
  (``spec.active=false``; Warning event ``AdmissionCheckRejected`` "Deactivated due to AdmissionCheck in
  Rejected state: ...") and evicts it (``Evicted=True/DeactivatedDueToAdmissionCheck``); otherwise any
  ``Retry`` check evicts it (``Evicted=True/AdmissionCheck``, "Evicted due to AdmissionCheck in Retry state:
  \"<check>\" (<msg>)"), leaving ``requeueState`` as it is (Kueue counts no retry on the Workload for an
  admission check eviction: ``requeueState.count`` is only moved by ``UpdateRequeueState`` for a PodsReady
  timeout); a Workload deactivated by anyone else is evicted with ``Evicted=True/Deactivated`` ("The
  workload is deactivated");
- preemption: ``Evicted=True/Preempted`` and ``Preempted=True/InClusterQueue`` with Kueue's message;
- on every eviction: each non-Pending check reset to ``Pending`` ("Reset to Pending after eviction.
  Previously: <state>"; ``requeueAfterSeconds`` kept; ``retryCount`` + 1 after ``Retry``; ``evict.go``
  ``resetChecksOnEviction``). Like Kueue's, the reset is one forced apply that leaves ``retryCount`` (after
  any other state) and ``podSetUpdates`` out: the server removes them only if no other manager owns them, and
  the provisioning admission check's field manager does own them (it applies whole entries), so they survive
  the reset: a Rejected check keeps its ``retryCount``. ``schedulingStats.evictions`` is counted, and the quota
  released at once:
  ``status.admission`` removed, ``QuotaReserved=False/Pending`` with the eviction message, ``Admitted=False``
  (``NoReservation`` / ``NoReservationUnsatisfiedChecks``) if it was admitted, ``Requeued`` (True after a
  preemption, False otherwise) with the eviction's reason and message;
- backoff end: ``Requeued=True/BackoffFinished`` and ``requeueAt`` cleared once it has passed (with no
  ``count`` left, ``requeueState`` goes: Kueue's apply leaves an empty one out);
- a Workload another party marked ``Evicted`` while it holds quota has the quota released the same way;
- ``QuotaReserved=False`` with a reason and message for a Workload that waits, written only when they change.

Simplified: real Kueue releases the quota only after the job framework reports the job stopped; here the
release is part of the eviction write (the job emulator stops the job when it sees ``Evicted``). Upstream's
intermediate ``DeactivationTarget`` condition is not written: deactivation and eviction happen in one pass.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gangscale.model.quantity import humanize
from gangscale.sim import world
from gangscale.sim.kueue.events import SCHEDULER, WORKLOAD_CONTROLLER
from gangscale.sim.kueue.objects import (
    ADMITTED,
    ADMITTED_MESSAGE,
    BACKOFF_FINISHED_MESSAGE,
    CHECK_PENDING,
    CHECK_READY,
    CHECK_REJECTED,
    CHECK_RETRY,
    DEACTIVATED_MESSAGE,
    EVICTED,
    PREEMPTED,
    PREEMPTION_MESSAGE,
    QUOTA_RESERVED,
    QUOTA_RESERVED_MESSAGE,
    REASON_ADMISSION_CHECK,
    REASON_ADMISSION_CHECK_REJECTED,
    REASON_ADMITTED,
    REASON_BACKOFF_FINISHED,
    REASON_DEACTIVATED,
    REASON_IN_CLUSTER_QUEUE,
    REASON_PENDING,
    REASON_PREEMPTED,
    REASON_QUOTA_RESERVED,
    REQUEUED,
    RESET_MESSAGE,
    ClusterQueue,
)
from gangscale.sim.kueue.quota import Assignment
from gangscale.sim.kueue.workload import CheckState, Workload
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
NORMAL, WARNING = "Normal", "Warning"


class Keep(Enum):
    KEEP = 0


KEEP = Keep.KEEP


@dataclass
class StatusEdit:
    """Changes to one Workload, in the order they are written: ``spec.active``, then status, then extras."""

    conditions: dict[str, JSON] = field(default_factory=dict)        # type -> full condition
    admission: JSON | Keep | None = KEEP
    requeue_state: JSON | Keep | None = KEEP
    scheduling_stats: JSON | Keep = KEEP
    checks: dict[str, JSON] = field(default_factory=dict)            # entry name -> fields to set
    #: entry name -> fields this manager's apply leaves out (another manager's ownership may keep them)
    check_unset: dict[str, set[str]] = field(default_factory=dict)
    drop_checks: set[str] = field(default_factory=set)               # entries that must go
    spec_active: bool | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    #: Which Kueue controller records the events: the workload controller, or the scheduler (``kueue-admission``:
    #: reservation, preemption, the Pending event, and admission in the reservation's write).
    reporter: str = WORKLOAD_CONTROLLER
    timeline: list[tuple[str, str, JSON]] = field(default_factory=list)  # (kind, text, data)

    @property
    def writes_status(self) -> bool:
        return bool(self.conditions or self.checks or self.check_unset or self.drop_checks
                    or self.admission is not KEEP or self.requeue_state is not KEEP
                    or self.scheduling_stats is not KEEP)


def condition(wl: Workload, kind: str, status: bool, reason: str, message: str, now: float) -> JSON:
    """A condition as metav1 SetStatusCondition leaves it: the transition time moves only with the status."""
    value = "True" if status else "False"
    old = wl.conditions.get(kind) or {}
    stamp = old.get("lastTransitionTime") if old.get("status") == value and old.get("lastTransitionTime") \
        else rfc3339(now)
    cond: JSON = {"type": kind, "status": value, "reason": reason, "message": message[:32768],
                  "lastTransitionTime": stamp}
    generation = (wl.raw.get("metadata") or {}).get("generation")
    if isinstance(generation, int):
        cond["observedGeneration"] = generation
    return cond


def differs(wl: Workload, kind: str, status: bool, reason: str, message: str) -> bool:
    old = wl.conditions.get(kind) or {}
    return (old.get("status"), old.get("reason"), old.get("message")) != ("True" if status else "False", reason,
                                                                          message)


def _set(edit: StatusEdit, wl: Workload, kind: str, status: bool, reason: str, message: str, now: float) -> None:
    if differs(wl, kind, status, reason, message):
        edit.conditions[kind] = condition(wl, kind, status, reason, message, now)


# --- reservation and admission --------------------------------------------------------------------------------

def check_entry_added(name: str, now: float) -> JSON:
    return {"name": name, "state": CHECK_PENDING, "message": "", "lastTransitionTime": rfc3339(now)}


def sync_checks(edit: StatusEdit, wl: Workload, wanted: tuple[str, ...], now: float) -> None:
    """A Pending entry for each wanted check the Workload lacks; entries of checks no longer wanted go."""
    have = {c.name for c in wl.checks}
    for name in wanted:
        if name not in have:
            edit.checks[name] = check_entry_added(name, now)
    edit.drop_checks.update(have - set(wanted))


def reservation(wl: Workload, cq: ClusterQueue, assignment: Assignment, now: float) -> StatusEdit:
    edit = StatusEdit(admission={"clusterQueue": cq.name, "podSetAssignments": assignment.to_api()},
                      reporter=SCHEDULER)
    _set(edit, wl, QUOTA_RESERVED, True, REASON_QUOTA_RESERVED, QUOTA_RESERVED_MESSAGE.format(cq=cq.name), now)
    for kind in (EVICTED, PREEMPTED):
        old = wl.conditions.get(kind) or {}
        if old.get("status") == "True":
            _set(edit, wl, kind, False, REASON_QUOTA_RESERVED, f"Previously: {old.get('message', '')}", now)
    wanted = cq.checks_for(assignment.flavors)
    sync_checks(edit, wl, wanted, now)
    queued_since = wl.transition_of(REQUEUED) or wl.created
    edit.events.append((NORMAL, "QuotaReserved", f"Quota reserved in ClusterQueue {cq.name}, wait time since "
                                                 f"queued was {max(0.0, now - queued_since):.0f}s"))
    usage = ", ".join(f"{resource}: {humanize(resource, amount)} on {flavor}" for (flavor, resource), amount
                      in sorted(assignment.usage().items()))
    edit.timeline.append((world.QUOTA_RESERVED, f"quota reserved in ClusterQueue {cq.name} ({usage})",
                          {"cluster_queue": cq.name, "flavors": sorted(assignment.flavors)}))
    if not wanted:
        _admit(edit, wl, cq.name, now, reserved_at=now)
    return edit


def _admit(edit: StatusEdit, wl: Workload, cq_name: str, now: float, reserved_at: float) -> None:
    _set(edit, wl, ADMITTED, True, REASON_ADMITTED, ADMITTED_MESSAGE, now)
    edit.events.append((NORMAL, "Admitted", f"Admitted by ClusterQueue {cq_name}, wait time since reservation "
                                            f"was {max(0.0, now - reserved_at):.0f}s"))
    edit.timeline.append((world.ADMITTED, f"admitted by ClusterQueue {cq_name}", {"cluster_queue": cq_name}))


def admission(wl: Workload, wanted: tuple[str, ...], now: float) -> StatusEdit | None:
    """Admit a reserving Workload whose every check is Ready (and keep its entries in step with the queue)."""
    if not wl.reserved or wl.admitted or wl.evicted:
        return None
    edit = StatusEdit()
    sync_checks(edit, wl, wanted, now)
    if edit.checks or edit.drop_checks:
        return edit  # the new entries start Pending; admission waits for them
    if all(c.state == CHECK_READY for c in wl.checks):
        _admit(edit, wl, wl.reserved_in or "", now, wl.transition_of(QUOTA_RESERVED) or now)
        return edit
    return None


# --- eviction -------------------------------------------------------------------------------------------------

def _checks_message(checks: list[CheckState], state: str) -> str:
    parts = [f'"{c.name}" ({c.message})' if c.message else f'"{c.name}"' for c in sorted(checks, key=lambda c: c.name)]
    noun = "AdmissionChecks" if len(checks) > 1 else "AdmissionCheck"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def _reset_checks(edit: StatusEdit, wl: Workload, now: float) -> None:
    for check in wl.checks:
        if check.state == CHECK_PENDING:
            continue
        entry: JSON = {"name": check.name, "state": CHECK_PENDING, "lastTransitionTime": rfc3339(now),
                       "message": RESET_MESSAGE.format(state=check.state)}
        unset = {"podSetUpdates"}
        if check.requeue_after is not None:
            entry["requeueAfterSeconds"] = check.requeue_after
        if check.state == CHECK_RETRY:
            entry["retryCount"] = (check.retry_count or 0) + 1
        else:
            unset.add("retryCount")
        edit.checks[check.name] = entry
        edit.check_unset[check.name] = unset


def _count_eviction(edit: StatusEdit, wl: Workload, reason: str, cause: str) -> None:
    stats = (wl.raw.get("status") or {}).get("schedulingStats") or {}
    evictions = [dict(e) for e in stats.get("evictions") or [] if isinstance(e, Mapping)]
    for entry in evictions:
        if entry.get("reason") == reason and entry.get("underlyingCause", "") == cause:
            entry["count"] = int(entry.get("count") or 0) + 1
            break
    else:
        evictions.append({"reason": reason, "underlyingCause": cause, "count": 1})
    edit.scheduling_stats = {**stats, "evictions": evictions}


def eviction(wl: Workload, reason: str, message: str, now: float, *, cause: str = "",
             requeued: bool = False) -> StatusEdit:
    """Evict ``wl`` and release its quota at once (see the module docstring)."""
    edit = StatusEdit()
    # Only a deactivation names its cause in the condition (DeactivatedDueToAdmissionCheck), as upstream.
    condition_reason = f"{reason}DueTo{cause}" if cause and reason == REASON_DEACTIVATED else reason
    _set(edit, wl, EVICTED, True, condition_reason, message, now)
    _reset_checks(edit, wl, now)
    _count_eviction(edit, wl, reason, cause)
    _release(edit, wl, condition_reason, message, requeued, now)
    if reason != REASON_PREEMPTED:  # the preemptor records its own event
        edit.events.append((NORMAL, f"EvictedDueTo{condition_reason}", message))
    return edit


def _release(edit: StatusEdit, wl: Workload, reason: str, message: str, requeued: bool, now: float) -> None:
    """Give the quota back (what upstream does once the job framework reports the job stopped)."""
    edit.admission = None
    _set(edit, wl, QUOTA_RESERVED, False, REASON_PENDING, message, now)
    if wl.admitted:
        if any(c.state != CHECK_READY for c in wl.checks) or edit.checks:
            _set(edit, wl, ADMITTED, False, "NoReservationUnsatisfiedChecks",
                 "The workload has no reservation and not all checks ready", now)
        else:
            _set(edit, wl, ADMITTED, False, "NoReservation", "The workload has no reservation", now)
    _set(edit, wl, REQUEUED, requeued, reason, message, now)


def release_evicted(wl: Workload, now: float) -> StatusEdit | None:
    """A Workload someone else marked ``Evicted`` still holds quota: release it (checks are left as they are)."""
    if not wl.reserved or wl.finished or not wl.evicted:
        return None
    evicted = wl.conditions.get(EVICTED) or {}
    reason = str(evicted.get("reason") or "")
    edit = StatusEdit()
    _release(edit, wl, reason, str(evicted.get("message") or ""), reason == REASON_PREEMPTED, now)
    edit.timeline.append((world.EVICTED, str(evicted.get("message") or reason), {"reason": reason}))
    return edit


def preemption(victim: Workload, preemptor: Workload, now: float) -> StatusEdit:
    message = PREEMPTION_MESSAGE.format(uid=preemptor.uid or "UNKNOWN", job_uid=preemptor.job_uid or "UNKNOWN")
    edit = eviction(victim, REASON_PREEMPTED, message, now, cause=REASON_IN_CLUSTER_QUEUE, requeued=True)
    edit.reporter = SCHEDULER
    _set(edit, victim, PREEMPTED, True, REASON_IN_CLUSTER_QUEUE, message, now)
    edit.events.append((NORMAL, "Preempted", message))
    edit.timeline.append((world.PREEMPTED, f"preempted by {preemptor.subject}", {"by": preemptor.subject}))
    return edit


def check_based_eviction(wl: Workload, now: float) -> StatusEdit | None:
    """Deactivate on a Rejected check, evict on a Retry check; None when neither applies."""
    if wl.finished or wl.evicted or not wl.reserved:
        return None
    rejected = [c for c in wl.checks if c.state == CHECK_REJECTED]
    if rejected and wl.active:
        text = _checks_message(rejected, CHECK_REJECTED)
        edit = eviction(wl, REASON_DEACTIVATED, f"{DEACTIVATED_MESSAGE} due to {text}", now,
                        cause=REASON_ADMISSION_CHECK)
        edit.requeue_state = None
        edit.spec_active = False
        edit.events.insert(0, (WARNING, REASON_ADMISSION_CHECK_REJECTED, f"Deactivated due to {text}"))
        edit.timeline.append((world.DEACTIVATED, f"deactivated: {text}", {"checks": [c.name for c in rejected]}))
        return edit
    retry = [c for c in wl.checks if c.state == CHECK_RETRY]
    if not retry:
        return None
    message = f"Evicted due to {_checks_message(retry, CHECK_RETRY)}"
    edit = eviction(wl, REASON_ADMISSION_CHECK, message, now)
    edit.timeline.append((world.EVICTED, message, {"reason": REASON_ADMISSION_CHECK}))
    return edit


def max_retry_time(wl: Workload) -> float | None:
    """Kueue's ``GetMaxRetryTime``: the latest ``lastTransitionTime + requeueAfterSeconds`` of the Retry checks."""
    times = [c.transition + c.requeue_after for c in wl.checks
             if c.state == CHECK_RETRY and c.transition is not None and c.requeue_after is not None]
    return max(times, default=None)


def requeue_at_update(wl: Workload, now: float) -> StatusEdit | None:
    """Kueue's ``NeedsRequeueAtUpdate`` + ``SetRequeueState(wl, t, false)``: set ``requeueState.requeueAt`` to a
    Retry check's retry time that is still ahead and later than the current one; nothing else changes (the
    Workload keeps its quota and its ``count``, if any)."""
    if wl.finished:
        return None
    target = max_retry_time(wl)
    if target is None or target <= now or (wl.requeue_at is not None and wl.requeue_at >= target):
        return None
    state: JSON = {"requeueAt": rfc3339(target)}
    if wl.requeue_count:
        state["count"] = wl.requeue_count
    return StatusEdit(requeue_state=state)


def holds_for_backoff(wl: Workload, now: float) -> bool:
    """An active Workload whose ``requeueAt`` is ahead waits for it before anything else happens to it (Kueue's
    ``Reconcile`` returns ``RequeueAfter`` there): a reserving one keeps its quota and its Retry check."""
    return wl.active and not wl.finished and wl.requeue_at is not None and wl.requeue_at > now


def deactivated_eviction(wl: Workload, now: float) -> StatusEdit | None:
    """A reserving Workload someone set ``spec.active=false`` on is evicted (and its backoff forgotten)."""
    if wl.active or wl.finished or wl.evicted or not wl.reserved:
        return None
    edit = eviction(wl, REASON_DEACTIVATED, DEACTIVATED_MESSAGE, now)
    edit.requeue_state = None
    edit.timeline.append((world.DEACTIVATED, DEACTIVATED_MESSAGE, {}))
    return edit


# --- waiting --------------------------------------------------------------------------------------------------

def backoff_finished(wl: Workload, now: float) -> StatusEdit | None:
    """Once ``requeueAt`` has passed, an active Workload evicted by a check is requeued (``requeueAt`` cleared,
    ``Requeued=True/BackoffFinished``)."""
    if wl.reserved or not wl.active or (wl.requeue_at is not None and wl.requeue_at > now):
        return None
    edit = StatusEdit()
    if wl.requeue_at is not None:
        edit.requeue_state = {"count": wl.requeue_count} if wl.requeue_count else None
    requeued = wl.conditions.get(REQUEUED) or {}
    if requeued.get("status") == "False" and requeued.get("reason") == REASON_ADMISSION_CHECK:
        _set(edit, wl, REQUEUED, True, REASON_BACKOFF_FINISHED, BACKOFF_FINISHED_MESSAGE, now)
    return edit if edit.writes_status else None


def backoff_expired(wl: Workload, now: float) -> bool:
    """Kueue's ``ClusterQueue.backoffWaitingTimeExpired`` (``pkg/cache/queue/cluster_queue.go``): a Workload
    evicted by a check (``Requeued=False/AdmissionCheck``) waits for ``Requeued=True/BackoffFinished`` (so it is
    reserved again only after :func:`backoff_finished`, even when its ``requeueAt`` has passed), and any other
    for its ``requeueAt``. Upstream a ``Requeued=False`` of any reason holds the Workload back; the emulator
    checks only this reason, because it does not write the conditions that release the others (``Reactivated``
    after a deactivation)."""
    requeued = wl.conditions.get(REQUEUED) or {}
    if requeued.get("status") == "False" and requeued.get("reason") == REASON_ADMISSION_CHECK:
        return False
    return wl.requeue_at is None or wl.requeue_at <= now


def waiting(wl: Workload, reason: str, message: str, now: float) -> StatusEdit | None:
    """``QuotaReserved=False`` with why the Workload waits; an Event when the message changes."""
    if wl.reserved or not differs(wl, QUOTA_RESERVED, False, reason, message):
        return None
    edit = StatusEdit(reporter=SCHEDULER)
    _set(edit, wl, QUOTA_RESERVED, False, reason, message, now)
    if reason == REASON_PENDING:  # the scheduler's event; the workload controller's reasons have none
        edit.events.append((WARNING, REASON_PENDING, message))
    return edit


# --- composing the apply patch --------------------------------------------------------------------------------

def _put(status: JSON, key: str, value: JSON | Keep | None) -> None:
    if value is KEEP:
        return
    if value is None:
        status.pop(key, None)
    else:
        status[key] = copy.deepcopy(value)


def compose(owned: Mapping[str, Any], edit: StatusEdit) -> JSON:
    """The status to apply: what the manager already owns (``owned``), changed as ``edit`` says."""
    status: JSON = copy.deepcopy(dict(owned))
    if edit.conditions:
        kept = [c for c in status.get("conditions") or [] if c.get("type") not in edit.conditions]
        status["conditions"] = kept + [copy.deepcopy(c) for c in edit.conditions.values()]
    _put(status, "admission", edit.admission)
    _put(status, "requeueState", edit.requeue_state)
    _put(status, "schedulingStats", edit.scheduling_stats)
    if edit.checks or edit.check_unset or edit.drop_checks:
        entries = {e["name"]: dict(e) for e in status.get("admissionChecks") or [] if e.get("name")}
        for name in edit.drop_checks:
            entries.pop(name, None)
        for name, gone in edit.check_unset.items():
            for key in gone:
                entries.get(name, {}).pop(key, None)
        for name, fields in edit.checks.items():
            entries[name] = {**entries.get(name, {}), **copy.deepcopy(fields)}
        status["admissionChecks"] = list(entries.values())
    return status


def must_be_gone(edit: StatusEdit) -> list[str]:
    """Top-level status fields the edit removes (checked after the apply, in case another manager owns them)."""
    return [key for key, value in (("admission", edit.admission), ("requeueState", edit.requeue_state))
            if value is None]
