"""Admission into pod templates (flavors, podSetUpdates), eviction (suspend, pods deleted, templates restored),
re-admission, and the Workload's Finished condition."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.resources import JOBS, PODS, RAYCLUSTERS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.world import Timeline
from tests.sim.jobs import support as s

JSON = dict[str, Any]
TOL = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"


@pytest.fixture
def em(http: KubeHTTP) -> JobEmulator:
    return JobEmulator(http, Timeline(s.T0))


def _update(pod_set: str) -> JSON:
    return {"name": pod_set, "annotations": {CONSUME: "pr-1"}, "labels": {"from-check": "yes"},
            "nodeSelector": {"gangscale.io/token": "tok"},
            "tolerations": [{"key": "booked", "operator": "Exists"}]}


CASES = [
    (s.job("train"), "main", 2),
    (s.jobset("js", replicated=[("workers", 2, 2)]), "workers", 4),
    (s.rayjob("rj", [("tpu", 1, 2)]), "tpu", 2),
    (s.raycluster("rc", [("tpu", 2, 1)]), "tpu", 2),
]


@pytest.mark.parametrize(("body", "pod_set", "n"), CASES, ids=[c[0]["kind"] for c in CASES])
async def test_admission_reaches_the_pods(http: KubeHTTP, em: JobEmulator, body: JSON, pod_set: str,
                                          n: int) -> None:
    await s.flavor(http, "default", {"pool": "cpu"})
    await s.flavor(http, "tpu-v5e", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}, [TOL])
    await s.create(http, body)
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, body["metadata"]["name"])
    await s.admit(http, wl, flavors={pod_set: "tpu-v5e"}, updates=[_update(pod_set)])
    await s.settle(em, s.T0)
    pods = await s.pods(http)
    admitted = [p for p in pods if p["metadata"]["labels"].get("from-check") == "yes"]
    assert len(admitted) == n
    for pod in admitted:
        assert pod["spec"]["nodeSelector"] == {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "gangscale.io/token": "tok"}
        assert pod["metadata"]["annotations"][CONSUME] == "pr-1"
        assert TOL in pod["spec"]["tolerations"] and {"key": "booked", "operator": "Exists"} in pod["spec"][
            "tolerations"]
    # Other pod sets got their own flavor only (the Ray head: pool=cpu).
    others = [p for p in pods if p not in admitted]
    assert all(p["spec"]["nodeSelector"] == {"pool": "cpu"} for p in others)
    assert await em.sync(s.T0) is False


async def test_conflicting_update_finishes_the_workload(http: KubeHTTP, em: JobEmulator) -> None:
    await s.flavor(http, "default", {"pool": "a"})
    await s.create(http, s.job("train"))
    await s.settle(em, s.T0)
    await s.admit(http, await s.workload_of(http, "train"), updates=[{"name": "main", "nodeSelector": {"pool": "b"}}])
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    [finished] = [c for c in wl["status"]["conditions"] if c["type"] == "Finished"]
    assert finished["status"] == "True" and finished["reason"] == "FailedToStart"
    assert "conflict for nodeSelector" in finished["message"]
    assert (await s.get(http, "Job", "train"))["spec"]["suspend"] is True and await s.pods(http) == []


def _template(obj: JSON, kind: str) -> JSON:
    if kind == "Job":
        return dict(obj["spec"]["template"])
    if kind == "JobSet":
        return dict(obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    return dict(obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])


@pytest.mark.parametrize("body", [c[0] for c in CASES[:3]], ids=[c[0]["kind"] for c in CASES[:3]])
async def test_eviction_suspends_deletes_pods_and_restores(http: KubeHTTP, em: JobEmulator, body: JSON) -> None:
    kind, name = body["kind"], body["metadata"]["name"]
    await s.flavor(http, "default", {"pool": "p"})
    await s.create(http, body)
    await s.settle(em, s.T0)
    original = _template(await s.get(http, kind, name), kind)
    await s.admit(http, await s.workload_of(http, name), updates=[
        _update(ps["name"]) for ps in (await s.workload_of(http, name))["spec"]["podSets"]])
    await s.settle(em, s.T0)
    running = await s.get(http, kind, name)
    assert running["spec"]["suspend"] is False and _template(running, kind) != original
    assert await s.pods(http)
    await s.evict(http, await s.workload_of(http, name))
    await s.settle(em, s.T0 + 5)
    stopped = await s.get(http, kind, name)
    assert stopped["spec"]["suspend"] is True
    assert _template(stopped, kind) == original
    assert await s.pods(http) == []
    if kind == "JobSet":
        assert await s.items(http, JOBS) == []
    if kind == "RayJob":
        assert await s.items(http, RAYCLUSTERS) == []
        assert stopped["status"]["jobDeploymentStatus"] == "Suspended"
    assert await em.sync(s.T0 + 5) is False


async def test_readmission_after_eviction_starts_again(http: KubeHTTP, em: JobEmulator) -> None:
    await s.flavor(http, "default", {})
    await s.flavor(http, "other", {"pool": "other"})
    await s.create(http, s.job("train"))
    await s.settle(em, s.T0)
    await s.admit(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0)
    first = {p["metadata"]["name"] for p in await s.pods(http)}
    await s.evict(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0 + 1)
    assert await s.pods(http) == []
    # Kueue reserves again (Evicted goes False, as upstream's SetQuotaReservation does), on another flavor.
    wl = await s.workload_of(http, "train")
    await s.apply_status(http, wl, {"conditions": [s.cond("Evicted", "False", "QuotaReserved", "Previously: x")]})
    await s.admit(http, await s.workload_of(http, "train"), flavors={"main": "other"})
    await s.settle(em, s.T0 + 2)
    pods = await s.pods(http)
    assert len(pods) == 2 and not first & {p["metadata"]["name"] for p in pods}
    assert all(p["spec"]["nodeSelector"] == {"pool": "other"} for p in pods)


async def test_running_job_losing_admission_is_stopped(http: KubeHTTP, em: JobEmulator) -> None:
    await s.flavor(http, "default", {})
    await s.create(http, s.job("train"))
    await s.settle(em, s.T0)
    await s.admit(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    await s.apply_status(http, wl, {"conditions": [s.cond("QuotaReserved", "False", "Pending"),
                                                   s.cond("Admitted", "False", "NoReservation")]})
    await s.settle(em, s.T0)
    assert (await s.get(http, "Job", "train"))["spec"]["suspend"] is True
    assert await s.items(http, PODS) == []


async def test_finished_condition_after_completion(http: KubeHTTP, em: JobEmulator) -> None:
    await s.flavor(http, "default", {})
    await s.create(http, s.job("train", annotations={"sim.gangscale.io/duration": "10s"}))
    await s.settle(em, s.T0)
    await s.admit(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0)
    await s.bind_all(http)
    await s.settle(em, s.T0 + 1)
    await s.settle(em, s.T0 + 11)
    wl = await s.workload_of(http, "train")
    [finished] = [c for c in wl["status"]["conditions"] if c["type"] == "Finished"]
    assert (finished["status"], finished["reason"], finished["message"]) == (
        "True", "Succeeded", "Reached expected number of succeeded pods")
    assert finished["lastTransitionTime"] == "2026-11-18T11:06:51Z"
    owners = {f["manager"] for f in wl["metadata"]["managedFields"] if f.get("subresource") == "status"}
    assert "kueue-job-controller" in owners
    assert await em.sync(s.T0 + 12) is False
