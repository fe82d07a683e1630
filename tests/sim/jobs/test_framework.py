"""Kueue's job framework as pure functions: Workload names, the reconciler's next step, admission merged into
pod templates and restored from the Workload."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gangscale.sim.jobs import framework as fw
from gangscale.sim.jobs.kinds import JOB, JOBSET, RAYCLUSTER, RAYJOB, KindInfo

JSON = dict[str, Any]


def _expected_name(kind: str, group: str, name: str, job_uid: str) -> str:
    digest = hashlib.sha1("\n".join((kind, group, name, job_uid)).encode()).hexdigest()
    return f"{kind.lower()}-{name}"[:247] + "-" + digest[:5]


@pytest.mark.parametrize(("info", "name"), [
    (JOB, "train"), (JOBSET, "tpu-slice"), (RAYCLUSTER, "rc"), (RAYJOB, "rj"), (JOB, "x" * 300),
], ids=["job", "jobset", "raycluster", "rayjob", "long-name"])
def test_workload_name(info: KindInfo, name: str) -> None:
    got = fw.workload_name(info, name, "0f0e-uid")
    assert got == _expected_name(info.kind, info.group, name, "0f0e-uid")
    assert len(got) <= 253 and got.startswith(f"{info.kind.lower()}-")


def test_workload_name_depends_on_uid_and_group() -> None:
    assert fw.workload_name(JOB, "a", "u1") != fw.workload_name(JOB, "a", "u2")
    assert fw.workload_name(JOB, "a", "u1") == "job-a-" + hashlib.sha1(b"Job\nbatch\na\nu1").hexdigest()[:5]


def _cond(t: str, s: str = "True") -> JSON:
    return {"type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def _job(suspend: bool, complete: bool = False) -> JSON:
    obj: JSON = {"metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                 "spec": {"suspend": suspend, "parallelism": 1, "template": {"spec": {}}}}
    if complete:
        obj["status"] = {"conditions": [_cond("Complete")]}
    return obj


def _wl(*conds: str, queue: str = "q", admission: bool = False, deleting: bool = False,
        finalizer: bool = False) -> JSON:
    wl: JSON = {"metadata": {"name": "w"}, "spec": {"queueName": queue},
                "status": {"conditions": [_cond(c) for c in conds]}}
    if finalizer:
        wl["metadata"]["finalizers"] = [fw.RESOURCE_IN_USE]
    if admission:
        wl["status"]["admission"] = {"clusterQueue": "cq"}
    if deleting:
        wl["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return wl


@pytest.mark.parametrize(("job", "wl", "step"), [
    (_job(False), None, fw.Step.CREATE),
    (_job(True), None, fw.Step.CREATE),
    (_job(True), _wl(), fw.Step.STOP),
    (_job(True), _wl("QuotaReserved", admission=True), fw.Step.STOP),
    (_job(True), _wl("QuotaReserved", "Admitted", admission=True), fw.Step.START),
    (_job(False), _wl("QuotaReserved", "Admitted", admission=True), fw.Step.NONE),
    (_job(False), _wl(), fw.Step.STOP),
    (_job(False), _wl("Admitted", "Evicted", admission=True), fw.Step.STOP),
    (_job(True), _wl("Admitted", "Evicted", admission=True), fw.Step.STOP),
    (_job(False), _wl("Admitted", deleting=True), fw.Step.RELEASE),
    (_job(False, complete=True), _wl("Admitted"), fw.Step.FINISH),
    (_job(False, complete=True), _wl("Admitted", "Finished"), fw.Step.NONE),
    (_job(False, complete=True), _wl("Admitted", "Finished", finalizer=True), fw.Step.FINALIZE),
    (_job(False, complete=True), None, fw.Step.NONE),
    (_job(True), _wl(queue="other"), fw.Step.UPDATE_QUEUE),
    (_job(True), _wl("QuotaReserved", queue="other", admission=True), fw.Step.STOP),
], ids=["new-running", "new-suspended", "pending", "reserved-not-admitted", "admitted", "running",
        "running-unadmitted", "evicted-running", "evicted-suspended", "workload-deleting", "job-complete",
        "already-finished", "finished-with-finalizer", "complete-no-workload", "queue-changed",
        "queue-changed-with-admission"])
def test_decide(job: JSON, wl: JSON | None, step: fw.Step) -> None:
    assert fw.decide("Job", job, wl) is step


def _flavor(labels: dict[str, str], tolerations: list[JSON] | None = None) -> JSON:
    return {"spec": {"nodeLabels": labels, "tolerations": tolerations or []}}


TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _admitted(*updates: JSON) -> JSON:
    return {"metadata": {"name": "job-j-1a2b3"}, "spec": {"queueName": "lq", "podSets": [
                {"name": "main", "count": 2, "template": {}}]},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "a3", "nvidia.com/gpu": "a3"}}]},
                "admissionChecks": [{"name": "prov", "state": "Ready", "podSetUpdates": list(updates)}]}}


def test_admission_infos_combine_flavor_and_check_updates() -> None:
    wl = _admitted({"name": "main", "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "pr-1"},
                    "nodeSelector": {"gangscale.io/token": "t1"}, "labels": {"l": "v"},
                    "tolerations": [{"key": "x", "operator": "Exists"}]},
                   {"name": "other", "labels": {"ignored": "yes"}})
    infos = fw.admission_infos(wl, {"a3": _flavor({"pool": "a3"}, [TOL])})
    info = infos["main"]
    assert info.node_selector == {"pool": "a3", "gangscale.io/token": "t1"}
    # getPodSetsInfoFromStatus adds the Workload annotation, the pod set and queue labels before the updates
    assert info.annotations == {"kueue.x-k8s.io/workload": "job-j-1a2b3",
                                "autoscaling.x-k8s.io/consume-provisioning-request": "pr-1"}
    assert info.labels == {"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "lq",
                           "kueue.x-k8s.io/cluster-queue-name": "cq", "l": "v"}
    assert info.tolerations == [TOL, {"key": "x", "operator": "Exists"}]
    assert set(infos) == {"main"}


def test_admission_conflict_is_permanent() -> None:
    wl = _admitted({"name": "main", "nodeSelector": {"pool": "other"}})
    with pytest.raises(fw.AdmissionError) as err:
        fw.admission_infos(wl, {"a3": _flavor({"pool": "a3"})})
    assert err.value.permanent and "conflict for nodeSelector" in str(err.value)


def test_missing_flavor_is_retried() -> None:
    with pytest.raises(fw.AdmissionError) as err:
        fw.admission_infos(_admitted(), {})
    assert not err.value.permanent


def test_merge_is_additive_and_detects_conflicts() -> None:
    template: JSON = {"metadata": {"labels": {"app": "x"}},
                      "spec": {"nodeSelector": {"zone": "a"}, "tolerations": [TOL]}}
    info = fw.PodSetInfo("main", labels={"app": "x", "k": "v"}, node_selector={"pool": "p"},
                         tolerations=[TOL, {"key": "t", "operator": "Exists"}])
    merged = fw.merge_into(template, info)
    assert merged["metadata"]["labels"] == {"app": "x", "k": "v"}
    assert merged["spec"]["nodeSelector"] == {"zone": "a", "pool": "p"}
    assert merged["spec"]["tolerations"] == [TOL, {"key": "t", "operator": "Exists"}]
    assert template["spec"]["nodeSelector"] == {"zone": "a"}  # not mutated
    with pytest.raises(fw.AdmissionError):
        fw.merge_into(template, fw.PodSetInfo("main", node_selector={"zone": "b"}))


def test_restore_returns_to_the_original_and_keeps_named_labels() -> None:
    original = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}
    running = {"metadata": {"labels": {"app": "x", "k": "v", "job-name": "j"}, "annotations": {"a": "b"}},
               "spec": {"containers": [{"name": "c"}], "nodeSelector": {"pool": "p"}, "tolerations": [TOL]}}
    restored = fw.restore(running, original, keep_labels=("job-name",))
    assert restored == {"metadata": {"labels": {"app": "x", "job-name": "j"}},
                        "spec": {"containers": [{"name": "c"}]}}


def test_start_then_stop_round_trips_a_jobset() -> None:
    js: JSON = {"metadata": {"name": "js"}, "spec": {"suspend": True, "replicatedJobs": [
        {"name": "w", "replicas": 2, "template": {"spec": {"template": {"spec": {"containers": []}}}}}]}}
    wl = {"spec": {"podSets": [{"name": "w", "count": 2, "template": {"spec": {"containers": []}}}]}}
    started = fw.started(JOBSET, js, {"w": fw.PodSetInfo("w", node_selector={"pool": "tpu"})})
    assert started["spec"]["suspend"] is False
    assert started["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "pool": "tpu"}
    assert fw.stopped(JOBSET, started, wl) == js


@pytest.mark.parametrize(("old", "new", "patch"), [
    ({"a": 1}, {"a": 1}, {}),
    ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
    ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1, "y": 3}}, {"a": {"y": 3}}),
    ({"a": [1, 2]}, {"a": [1]}, {"a": [1]}),
    ({}, {"a": {"b": 1}}, {"a": {"b": 1}}),
], ids=["same", "removed", "nested", "list-replaced", "added"])
def test_merge_patch_diff(old: JSON, new: JSON, patch: JSON) -> None:
    assert fw.merge_patch_diff(old, new) == patch


def test_finished_patch_is_an_ssa_body_with_only_the_condition() -> None:
    wl = {"metadata": {"name": "w", "namespace": "ns", "generation": 3}}
    body = fw.finished_patch(wl, "done", True, 1_795_000_000.0)
    assert body["metadata"] == {"name": "w", "namespace": "ns"}
    assert body["status"] == {"conditions": [{
        "type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
        "lastTransitionTime": "2026-11-18T11:06:40Z", "observedGeneration": 3}]}
    assert fw.finished_patch(wl, "bad", False, 0.0)["status"]["conditions"][0]["reason"] == "Failed"
