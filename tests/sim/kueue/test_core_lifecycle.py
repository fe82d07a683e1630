"""The workload controller's pure decisions: eviction, deactivation, check resets, admission, backoff."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gangscale.sim import world
from gangscale.sim.kueue import lifecycle
from gangscale.sim.kueue.lifecycle import KEEP, StatusEdit
from gangscale.sim.kueue.objects import (
    parse_cluster_queue,
    parse_flavor,
)
from gangscale.sim.kueue.quota import assign_flavors
from gangscale.sim.kueue.workload import Workload, parse_workload
from gangscale.timefmt import rfc3339
from tests.sim.kueue import T0, TPU, cluster_queue, flavor, reserved_status, workload

NOW = T0 + 100


def reserved(checks: Sequence[dict[str, Any]] = (), *, admitted: bool = False, extra: dict[str, Any] | None = None,
             active: bool | None = None) -> Workload:
    status = reserved_status("cq", [("main", 2, {TPU: "f"}, {TPU: 8})], at=T0, admitted=admitted)
    status["admissionChecks"] = [{"message": "", "lastTransitionTime": rfc3339(T0 + 10), **c} for c in checks]
    status.update(extra or {})
    obj = workload("w", [("main", 2, {TPU: 4})], uid="uid-w", created=T0 - 50, owner="job-w", active=active)
    obj["metadata"]["generation"] = 1
    obj["status"] = status
    return parse_workload(obj)


def test_retry_evicts_and_resets_checks_without_counting_on_the_workload() -> None:
    """``reconcileCheckBasedEviction`` (``pkg/controller/core/workload_controller.go``) calls ``evict.Evict``,
    which leaves ``status.requeueState`` alone: Kueue v0.19.2 keeps no retry count on the Workload for an
    admission check eviction (only ``workload.UpdateRequeueState``, for a PodsReady timeout, moves
    ``requeueState.count``); ``requeueAt`` was set earlier, while the quota was held (``requeue_at_update``).
    ``evict.resetChecksOnEviction`` resets the checks; its apply leaves ``podSetUpdates`` (and ``retryCount`` of
    a check that was not Retry) out."""
    wl = reserved([{"name": "prov", "state": "Retry", "message": "Retrying after failure: no capacity",
                    "requeueAfterSeconds": 600, "podSetUpdates": [{"name": "main"}]},
                   {"name": "other", "state": "Ready", "retryCount": 3}], admitted=True,
                  extra={"requeueState": {"count": 2}})
    edit = lifecycle.check_based_eviction(wl, NOW)
    assert edit is not None and edit.spec_active is None
    message = 'Evicted due to AdmissionCheck in Retry state: "prov" (Retrying after failure: no capacity)'
    assert edit.conditions["Evicted"] | {"lastTransitionTime": "-"} == {
        "type": "Evicted", "status": "True", "reason": "AdmissionCheck", "message": message,
        "lastTransitionTime": "-", "observedGeneration": 1}
    assert (edit.conditions["QuotaReserved"]["status"], edit.conditions["QuotaReserved"]["reason"],
            edit.conditions["QuotaReserved"]["message"]) == ("False", "Pending", message)
    assert edit.conditions["Admitted"]["reason"] == "NoReservationUnsatisfiedChecks"
    assert (edit.conditions["Requeued"]["status"], edit.conditions["Requeued"]["reason"]) == ("False", "AdmissionCheck")
    assert edit.admission is None
    assert edit.requeue_state is KEEP  # an existing count (from elsewhere) is neither raised nor dropped
    assert edit.checks == {
        "prov": {"name": "prov", "state": "Pending", "message": "Reset to Pending after eviction. Previously: Retry",
                 "lastTransitionTime": rfc3339(NOW), "requeueAfterSeconds": 600, "retryCount": 1},
        "other": {"name": "other", "state": "Pending", "message": "Reset to Pending after eviction. Previously: Ready",
                  "lastTransitionTime": rfc3339(NOW)}}
    assert edit.check_unset == {"prov": {"podSetUpdates"}, "other": {"podSetUpdates", "retryCount"}}
    assert edit.scheduling_stats == {"evictions": [{"reason": "AdmissionCheck", "underlyingCause": "", "count": 1}]}
    assert edit.events == [("Normal", "EvictedDueToAdmissionCheck", message)]
    assert [(k, d["reason"]) for k, _, d in edit.timeline] == [(world.EVICTED, "AdmissionCheck")]


@pytest.mark.parametrize(("checks", "message"), [
    ([{"name": "prov", "state": "Retry"}], 'Evicted due to AdmissionCheck in Retry state: "prov"'),
    ([{"name": "z", "state": "Retry", "message": "b"}, {"name": "a", "state": "Retry", "message": "a"}],
     'Evicted due to AdmissionChecks in Retry state: "a" (a); "z" (b)'),
], ids=["no-message", "several-sorted"])
def test_retry_messages(checks: list[dict[str, Any]], message: str) -> None:
    edit = lifecycle.check_based_eviction(reserved(checks), NOW)
    assert edit is not None and edit.conditions["Evicted"]["message"] == message
    assert edit.requeue_state is KEEP


def test_rejected_deactivates() -> None:
    wl = reserved([{"name": "prov", "state": "Rejected", "message": "out of capacity"},
                   {"name": "x", "state": "Retry", "retryCount": 1}],
                  extra={"requeueState": {"count": 1, "requeueAt": rfc3339(T0)}})
    edit = lifecycle.check_based_eviction(wl, NOW)
    assert edit is not None and edit.spec_active is False
    text = 'AdmissionCheck in Rejected state: "prov" (out of capacity)'
    assert edit.conditions["Evicted"]["reason"] == "DeactivatedDueToAdmissionCheck"
    assert edit.conditions["Evicted"]["message"] == f"The workload is deactivated due to {text}"
    assert edit.requeue_state is None
    assert edit.events[0] == ("Warning", "AdmissionCheckRejected", f"Deactivated due to {text}")
    assert edit.events[1][1] == "EvictedDueToDeactivatedDueToAdmissionCheck"
    assert edit.checks["prov"]["message"] == "Reset to Pending after eviction. Previously: Rejected"
    assert "retryCount" not in edit.checks["prov"] and edit.checks["x"]["retryCount"] == 2
    assert edit.scheduling_stats == {"evictions": [{"reason": "Deactivated", "underlyingCause": "AdmissionCheck",
                                                    "count": 1}]}
    assert [k for k, _, _ in edit.timeline] == [world.DEACTIVATED]


def test_no_eviction_without_failed_checks_or_when_not_reserved() -> None:
    assert lifecycle.check_based_eviction(reserved([{"name": "p", "state": "Pending"}]), NOW) is None
    idle = parse_workload(workload("w", [("main", 1, {TPU: 4})], status={"admissionChecks": [
        {"name": "p", "state": "Retry", "message": "", "lastTransitionTime": rfc3339(T0)}]}))
    assert lifecycle.check_based_eviction(idle, NOW) is None


def test_deactivated_by_someone_else() -> None:
    edit = lifecycle.deactivated_eviction(reserved(admitted=True, active=False), NOW)
    assert edit is not None
    assert (edit.conditions["Evicted"]["reason"], edit.conditions["Evicted"]["message"]) == (
        "Deactivated", "The workload is deactivated")
    assert edit.conditions["Admitted"]["reason"] == "NoReservation"
    assert lifecycle.deactivated_eviction(reserved(), NOW) is None


def test_preemption_edit() -> None:
    victim = reserved(admitted=True)
    preemptor = parse_workload(workload("hi", [("main", 1, {TPU: 4})], uid="uid-hi", job_uid="job-uid-hi",
                                        owner="job-hi"))
    edit = lifecycle.preemption(victim, preemptor, NOW)
    message = ("Preempted to accommodate a workload (UID: uid-hi, JobUID: job-uid-hi) due to prioritization in the "
               "ClusterQueue")
    assert (edit.conditions["Evicted"]["reason"], edit.conditions["Evicted"]["message"]) == ("Preempted", message)
    preempted = edit.conditions["Preempted"]
    assert (preempted["reason"], preempted["status"]) == ("InClusterQueue", "True")
    assert (edit.conditions["Requeued"]["status"], edit.conditions["Requeued"]["reason"]) == ("True", "Preempted")
    assert edit.events == [("Normal", "Preempted", message)]
    assert edit.timeline == [(world.PREEMPTED, "preempted by default/job-hi", {"by": "default/job-hi"})]
    assert edit.scheduling_stats == {"evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue",
                                                    "count": 1}]}


def test_reservation_edit_resets_old_eviction_and_adds_checks() -> None:
    obj = workload("w", [("main", 2, {TPU: 4})], uid="u", created=T0, owner="job-w")
    obj["status"] = {"conditions": [
        {"type": "Evicted", "status": "True", "reason": "AdmissionCheck", "message": "m",
         "lastTransitionTime": rfc3339(T0)},
        {"type": "Requeued", "status": "True", "reason": "BackoffFinished", "message": "",
         "lastTransitionTime": rfc3339(T0 + 30)}],
        "admissionChecks": [{"name": "prov", "state": "Pending", "message": "Reset", "retryCount": 1,
                             "lastTransitionTime": rfc3339(T0)},
                            {"name": "stale", "state": "Ready", "message": "", "lastTransitionTime": rfc3339(T0)}]}
    wl = parse_workload(obj)
    cq = parse_cluster_queue(cluster_queue("cq", {"f": {TPU: 24}}, checks=["prov", "new"]))
    assignment = assign_flavors(cq, {"f": parse_flavor(flavor("f"))}, wl, {})
    edit = lifecycle.reservation(wl, cq, assignment, NOW)
    assert edit.admission == {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "count": 2, "flavors": {TPU: "f"}, "resourceUsage": {TPU: "8"}}]}
    assert edit.conditions["QuotaReserved"]["message"] == "Quota reserved in ClusterQueue cq"
    assert (edit.conditions["Evicted"]["status"], edit.conditions["Evicted"]["reason"],
            edit.conditions["Evicted"]["message"]) == ("False", "QuotaReserved", "Previously: m")
    assert edit.checks == {"new": {"name": "new", "state": "Pending", "message": "",
                                   "lastTransitionTime": rfc3339(NOW)}}  # "prov" is kept as it is
    assert edit.drop_checks == {"stale"}
    assert "Admitted" not in edit.conditions
    assert edit.events == [("Normal", "QuotaReserved",
                            "Quota reserved in ClusterQueue cq, wait time since queued was 70s")]


def test_reservation_without_checks_admits_at_once() -> None:
    wl = parse_workload(workload("w", [("main", 1, {TPU: 4, "cpu": "1500m", "memory": "12Gi"})], created=T0))
    cq = parse_cluster_queue(cluster_queue("cq", {"f": {TPU: 24, "cpu": 100, "memory": "1Ti"}}))
    edit = lifecycle.reservation(wl, cq, assign_flavors(cq, {"f": parse_flavor(flavor("f"))}, wl, {}), NOW)
    assert edit.conditions["Admitted"]["message"] == "The workload is admitted"
    assert [(k, text) for k, text, _ in edit.timeline] == [
        (world.QUOTA_RESERVED, "quota reserved in ClusterQueue cq (cpu: 1500m on f, google.com/tpu: 4 on f, "
                               "memory: 12Gi on f)"),
        (world.ADMITTED, "admitted by ClusterQueue cq")]
    assert [r for _, r, _ in edit.events] == ["QuotaReserved", "Admitted"]


@pytest.mark.parametrize(("states", "wanted", "admits", "adds"), [
    (["Ready", "Ready"], ("a", "b"), True, set()),
    (["Ready", "Pending"], ("a", "b"), False, set()),
    (["Ready", "Ready"], ("a", "b", "c"), False, {"c"}),
], ids=["all-ready", "one-pending", "entry-missing"])
def test_admission_waits_for_every_check(states: list[str], wanted: tuple[str, ...], admits: bool,
                                         adds: set[str]) -> None:
    wl = reserved([{"name": n, "state": s} for n, s in zip("ab", states, strict=True)])
    edit = lifecycle.admission(wl, wanted, NOW)
    assert (edit is not None and "Admitted" in edit.conditions) == admits
    assert (set(edit.checks) if edit else set()) == adds


def test_retry_time_becomes_requeue_at_while_the_quota_is_held() -> None:
    """Kueue's ``workload.NeedsRequeueAtUpdate`` + ``SetRequeueState(wl, t, false)`` (``pkg/workload``), the first
    step of ``WorkloadReconciler.Reconcile``: the latest Retry check ``lastTransitionTime +
    requeueAfterSeconds`` (``GetMaxRetryTime``) becomes ``requeueAt`` when it is ahead and later than the current
    one; nothing else is written, and the Workload (active, ``requeueAt`` ahead) is then left alone, quota and
    all, until that time."""
    wl = reserved([{"name": "prov", "state": "Retry", "requeueAfterSeconds": 600},
                   {"name": "b", "state": "Retry", "requeueAfterSeconds": 60},
                   {"name": "c", "state": "Pending", "requeueAfterSeconds": 9000}])
    edit = lifecycle.requeue_at_update(wl, NOW)
    assert edit is not None and edit.requeue_state == {"requeueAt": rfc3339(T0 + 10 + 600)}
    assert not edit.conditions and not edit.checks and edit.admission is KEEP and not edit.events
    assert not lifecycle.holds_for_backoff(wl, NOW)  # requeueAt not written yet

    held = reserved([{"name": "prov", "state": "Retry", "requeueAfterSeconds": 600}],
                    extra={"requeueState": {"requeueAt": rfc3339(T0 + 10 + 600)}})
    assert lifecycle.requeue_at_update(held, NOW) is None  # already there
    assert lifecycle.holds_for_backoff(held, NOW) and not lifecycle.holds_for_backoff(held, T0 + 610)
    assert not lifecycle.holds_for_backoff(reserved([{"name": "prov", "state": "Retry", "requeueAfterSeconds": 600}],
                                                    extra={"requeueState": {"requeueAt": rfc3339(T0 + 610)}},
                                                    active=False), NOW)  # deactivation does not wait
    counted = reserved([{"name": "prov", "state": "Retry", "requeueAfterSeconds": 600}],
                       extra={"requeueState": {"count": 2, "requeueAt": rfc3339(NOW)}})
    edit = lifecycle.requeue_at_update(counted, NOW)
    assert edit is not None and edit.requeue_state == {"count": 2, "requeueAt": rfc3339(T0 + 610)}

    # the retry time has passed (the check's lastTransitionTime is older than its backoff): nothing to wait for
    late = reserved([{"name": "prov", "state": "Retry", "requeueAfterSeconds": 60}])
    assert lifecycle.requeue_at_update(late, NOW) is None and not lifecycle.holds_for_backoff(late, NOW)
    assert lifecycle.check_based_eviction(late, NOW) is not None


def test_backoff() -> None:
    requeued = {"type": "Requeued", "status": "False", "reason": "AdmissionCheck", "message": "x",
                "lastTransitionTime": rfc3339(T0)}
    obj = workload("w", [("main", 1, {TPU: 4})], status={"conditions": [requeued],
                                                         "requeueState": {"count": 1, "requeueAt": rfc3339(NOW)}})
    wl = parse_workload(obj)
    assert lifecycle.backoff_finished(wl, NOW - 1) is None
    edit = lifecycle.backoff_finished(wl, NOW)
    assert edit is not None and edit.requeue_state == {"count": 1}
    assert (edit.conditions["Requeued"]["status"], edit.conditions["Requeued"]["reason"],
            edit.conditions["Requeued"]["message"]) == ("True", "BackoffFinished", "The workload backoff was finished")
    assert lifecycle.must_be_gone(edit) == []
    # without a count, clearing requeueAt leaves an empty requeueState, which Kueue's apply leaves out
    # (``patching.admissionStatusPatch``): the field goes
    obj["status"]["requeueState"] = {"requeueAt": rfc3339(NOW)}
    edit = lifecycle.backoff_finished(parse_workload(obj), NOW)
    assert edit is not None and edit.requeue_state is None and lifecycle.must_be_gone(edit) == ["requeueState"]


def test_waiting_writes_only_changes() -> None:
    wl = parse_workload(workload("w", [("main", 1, {TPU: 4})]))
    edit = lifecycle.waiting(wl, "Pending", "no room", NOW)
    assert edit is not None and edit.events == [("Warning", "Pending", "no room")]
    obj = workload("w", [("main", 1, {TPU: 4})], status={"conditions": [edit.conditions["QuotaReserved"]]})
    assert lifecycle.waiting(parse_workload(obj), "Pending", "no room", NOW + 5) is None
    again = lifecycle.waiting(parse_workload(obj), "Inadmissible", "LocalQueue lq doesn't exist", NOW + 5)
    assert again is not None and again.events == []
    # the transition time stays: the status did not change
    assert again.conditions["QuotaReserved"]["lastTransitionTime"] == rfc3339(NOW)


def test_compose_changes_only_what_the_edit_says() -> None:
    owned = {"conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
             "admission": {"clusterQueue": "cq"},
             "admissionChecks": [{"name": "prov", "state": "Pending", "message": "", "podSetUpdates": []},
                                 {"name": "gone"}]}
    edit = StatusEdit(conditions={"Admitted": {"type": "Admitted", "status": "False"}}, admission=None,
                      requeue_state={"count": 1}, checks={"prov": {"name": "prov", "message": "Reset"},
                                                          "new": {"name": "new", "state": "Pending"}},
                      check_unset={"prov": {"podSetUpdates"}}, drop_checks={"gone"})
    status = lifecycle.compose(owned, edit)
    assert status == {"conditions": [{"type": "QuotaReserved", "status": "True"},
                                     {"type": "Admitted", "status": "False"}],
                      "requeueState": {"count": 1},
                      "admissionChecks": [{"name": "prov", "state": "Pending", "message": "Reset"},
                                          {"name": "new", "state": "Pending"}]}
    assert owned["admission"] == {"clusterQueue": "cq"}  # the input is not modified
    assert lifecycle.must_be_gone(edit) == ["admission"]
    assert lifecycle.compose(owned, StatusEdit()) == owned and not StatusEdit().writes_status
    assert StatusEdit().admission is KEEP


def test_release_of_a_workload_evicted_by_someone_else() -> None:
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "by someone",
               "lastTransitionTime": rfc3339(T0)}
    wl = reserved([{"name": "prov", "state": "Ready"}], admitted=True)
    assert lifecycle.release_evicted(wl, NOW) is None  # not evicted: nothing to release
    obj = dict(wl.raw)
    obj["status"] = {**obj["status"], "conditions": [*obj["status"]["conditions"], evicted]}
    edit = lifecycle.release_evicted(parse_workload(obj), NOW)
    assert edit is not None and edit.admission is None and edit.checks == {}
    assert edit.conditions["QuotaReserved"]["message"] == "by someone"
    assert edit.conditions["Admitted"]["reason"] == "NoReservation"  # its one check is still Ready
    assert (edit.conditions["Requeued"]["status"], edit.conditions["Requeued"]["reason"]) == ("True", "Preempted")
    assert "Evicted" not in edit.conditions
