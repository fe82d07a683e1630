"""The Workloads the job framework creates, per kind, and the suspend gate before admission."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gangscale.kube.resources import JOBS, RAYCLUSTERS, WORKLOADS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.world import Timeline
from tests.sim.jobs import support as s

JSON = dict[str, Any]


@pytest.fixture
def em(http: KubeHTTP) -> JobEmulator:
    return JobEmulator(http, Timeline(s.T0))


CASES = [
    (s.job("train", parallelism=4), "batch", [("main", 4)]),
    (s.jobset("slice", replicated=[("workers", 4, 2), ("coord", 1, 1)]), "jobset.x-k8s.io",
     [("workers", 8), ("coord", 1)]),
    (s.raycluster("rc", [("gpu", 2, 1), ("tpu", 2, 4)]), "ray.io", [("head", 1), ("gpu", 2), ("tpu", 8)]),
    (s.rayjob("rj", [("tpu", 1, 4)]), "ray.io", [("head", 1), ("tpu", 4), ("submitter", 1)]),
]


@pytest.mark.parametrize(("body", "group", "pod_sets"), CASES, ids=[c[0]["kind"] for c in CASES])
async def test_workload_shape(http: KubeHTTP, em: JobEmulator, body: JSON, group: str,
                              pod_sets: list[tuple[str, int]]) -> None:
    created = await s.create(http, body)
    name, job_uid, kind = created["metadata"]["name"], created["metadata"]["uid"], body["kind"]
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, name)
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{job_uid}".encode()).hexdigest()[:5]
    assert wl["metadata"]["name"] == f"{kind.lower()}-{name}-{digest}"
    assert wl["metadata"]["ownerReferences"] == [{
        "apiVersion": body["apiVersion"], "kind": kind, "name": name, "uid": job_uid, "controller": True,
        "blockOwnerDeletion": True}]
    assert wl["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": job_uid}
    assert wl["spec"]["queueName"] == "team" and wl["spec"]["priority"] == 0
    assert "priorityClassRef" not in wl["spec"]
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == pod_sets
    assert all(p["template"]["spec"]["containers"] for p in wl["spec"]["podSets"])
    job = await s.get(http, kind, name)
    assert job["spec"]["suspend"] is True
    assert await s.pods(http) == []
    assert await em.sync(s.T0) is False


async def test_priority_from_workload_priority_class(http: KubeHTTP, em: JobEmulator) -> None:
    await s.priority_class(http, "high", 1000)
    await s.create(http, s.job("train", labels={**s.QUEUE, "kueue.x-k8s.io/priority-class": "high"}))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    assert wl["spec"]["priority"] == 1000
    assert wl["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                              "name": "high"}


async def test_missing_priority_class_holds_the_workload_back(http: KubeHTTP, em: JobEmulator) -> None:
    await s.create(http, s.job("train", labels={**s.QUEUE, "kueue.x-k8s.io/priority-class": "nope"}))
    await s.settle(em, s.T0)
    assert await s.items(http, WORKLOADS) == []
    assert (await s.get(http, "Job", "train"))["spec"]["suspend"] is True
    await s.priority_class(http, "nope", 7)
    await s.settle(em, s.T0)
    assert (await s.workload_of(http, "train"))["spec"]["priority"] == 7


async def test_provreq_annotations_are_copied(http: KubeHTTP, em: JobEmulator) -> None:
    await s.create(http, s.job("train", annotations={
        "provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600", "other.io/x": "y",
        "sim.gangscale.io/duration": "60s"}))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    assert wl["metadata"]["annotations"] == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600"}


async def test_job_created_suspended_stays_suspended_until_admitted(http: KubeHTTP, em: JobEmulator) -> None:
    await s.create(http, s.job("train", suspend=True))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    job = await s.get(http, "Job", "train")
    assert job["spec"]["suspend"] is True and await s.pods(http) == []
    assert job["status"]["conditions"][0]["reason"] == "JobSuspended"
    # Quota reserved but checks pending: not admitted yet, still suspended.
    await s.apply_status(http, wl, {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "count": 2, "flavors": {"cpu": "default"}}]},
        "conditions": [s.cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq")]})
    await s.flavor(http, "default", {})
    await s.settle(em, s.T0)
    assert (await s.get(http, "Job", "train"))["spec"]["suspend"] is True and await s.pods(http) == []
    await s.admit(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0)
    job = await s.get(http, "Job", "train")
    assert job["spec"]["suspend"] is False
    assert len(await s.pods(http)) == 2
    assert [c["reason"] for c in job["status"]["conditions"]] == ["JobResumed"]


async def test_unmanaged_job_runs_without_a_workload(http: KubeHTTP, em: JobEmulator) -> None:
    await s.create(http, s.job("plain", labels={}))
    await s.settle(em, s.T0)
    assert await s.items(http, WORKLOADS) == []
    assert len(await s.pods(http)) == 2
    assert (await s.get(http, "Job", "plain"))["spec"]["suspend"] is False


async def test_children_of_managed_parents_get_no_workload(http: KubeHTTP, em: JobEmulator) -> None:
    await s.flavor(http, "default", {})
    await s.create(http, s.jobset("js", replicated=[("w", 2, 1)]))
    await s.create(http, s.rayjob("rj", [("tpu", 1, 1)]))
    await s.settle(em, s.T0)
    for owner in ("js", "rj"):
        await s.admit(http, await s.workload_of(http, owner))
    await s.settle(em, s.T0)
    assert len(await s.items(http, JOBS)) == 2 and len(await s.items(http, RAYCLUSTERS)) == 1
    # The RayJob's RayCluster carries the queue label (KubeRay copies labels) but is not managed itself.
    [rc] = await s.items(http, RAYCLUSTERS)
    assert rc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"
    assert len(await s.items(http, WORKLOADS)) == 2


async def test_queue_change_while_pending_moves_the_workload(http: KubeHTTP, em: JobEmulator) -> None:
    await s.create(http, s.job("train"))
    await s.settle(em, s.T0)
    await http.request("PATCH", JOBS.path(s.NS, "train"), content_type="application/merge-patch+json",
                       body={"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other"}}})
    await s.settle(em, s.T0)
    assert (await s.workload_of(http, "train"))["spec"]["queueName"] == "other"
