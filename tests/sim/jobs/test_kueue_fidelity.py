"""What Kueue v0.19.2's job framework puts on Workloads and started jobs, as seen on a real cluster (issue 24):
the kept ``batch.kubernetes.io/job-name`` label, ``topologyRequest.podIndexLabel``, the resource-in-use finalizer,
the Workload/pod-set/queue marks on started pod templates, and ``PodsReady`` from the start."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import JOBS, WORKLOADS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.world import Timeline
from tests.sim.jobs import support as s

JSON = dict[str, Any]
JOB_NAME = "batch.kubernetes.io/job-name"


@pytest.fixture
def em(http: KubeHTTP) -> JobEmulator:
    return JobEmulator(http, Timeline(s.T0))


def _pods_ready(wl: JSON) -> JSON:
    return next(c for c in wl["status"]["conditions"] if c["type"] == "PodsReady")


async def test_job_workload_keeps_the_job_name_label_and_has_the_finalizer(http: KubeHTTP, em: JobEmulator) -> None:
    """``jobframework.NewWorkload`` gives the Workload finalizer ``kueue.x-k8s.io/resource-in-use``; a Job's
    ``PodSets`` (``pkg/controller/jobs/job/job_controller.go``) copies the template through ``cleanLabels``, which
    drops the Job controller's labels except ``batch.kubernetes.io/job-name``, and, with TopologyAwareScheduling
    on (the default), sets ``topologyRequest.podIndexLabel`` to ``batch.kubernetes.io/job-completion-index``."""
    body = s.job("train")
    body["spec"]["template"]["metadata"] = {"labels": {
        JOB_NAME: "train", "job-name": "train", "controller-uid": "u", "batch.kubernetes.io/controller-uid": "u",
        "app": "x"}}
    await s.create(http, body)
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    assert wl["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    [ps] = wl["spec"]["podSets"]
    assert ps["template"]["metadata"]["labels"] == {JOB_NAME: "train", "app": "x"}
    assert ps["topologyRequest"] == {"podIndexLabel": "batch.kubernetes.io/job-completion-index"}


async def test_topology_requests_per_kind(http: KubeHTTP, em: JobEmulator) -> None:
    """``jobset_controller.go`` ``PodSets``: podIndexLabel as a Job's, ``subGroupIndexLabel``
    ``jobset.sigs.k8s.io/job-index`` and ``subGroupCount`` = the replicas; KubeRay's pod sets
    (``raycluster/common.go`` ``BuildPodSets``) get none without TAS annotations (``Build`` returns nil)."""
    await s.create(http, s.jobset("js", replicated=[("workers", 3, 2)]))
    await s.create(http, s.rayjob("rj", [("tpu", 1, 2)]))
    await s.settle(em, s.T0)
    [workers] = (await s.workload_of(http, "js"))["spec"]["podSets"]
    assert workers["topologyRequest"] == {"podIndexLabel": "batch.kubernetes.io/job-completion-index",
                                          "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index", "subGroupCount": 3}
    assert all("topologyRequest" not in p for p in (await s.workload_of(http, "rj"))["spec"]["podSets"])


async def test_started_job_carries_the_workload_and_queue_marks(http: KubeHTTP, em: JobEmulator) -> None:
    """``getPodSetsInfoFromStatus`` (``pkg/controller/jobframework/reconciler.go``): annotation
    ``kueue.x-k8s.io/workload`` (TopologyAwareScheduling), label ``kueue.x-k8s.io/podset``, and labels
    ``kueue.x-k8s.io/local-queue-name`` / ``kueue.x-k8s.io/cluster-queue-name`` (AssignQueueLabelsForPods,
    ``assignQueueLabels``); ``RestorePodSetsInfo`` takes them off again when the job is stopped."""
    await s.flavor(http, "default", {})
    await s.create(http, s.job("train"))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    await s.admit(http, wl)
    await s.settle(em, s.T0)
    template = (await s.get(http, "Job", "train"))["spec"]["template"]
    assert template["metadata"]["annotations"] == {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}
    labels = template["metadata"]["labels"]
    assert {k: labels[k] for k in labels if k.startswith("kueue.x-k8s.io/")} == {
        "kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "team",
        "kueue.x-k8s.io/cluster-queue-name": "cq"}
    pods = await s.pods(http)
    assert pods and all(p["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == wl["metadata"]["name"]
                        for p in pods)

    await s.evict(http, wl)
    await s.settle(em, s.T0)
    template = (await s.get(http, "Job", "train"))["spec"]["template"]
    assert "annotations" not in template["metadata"]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in template["metadata"].get("labels") or {})


async def test_pods_ready_is_written_even_without_wait_for_pods_ready(http: KubeHTTP, em: JobEmulator) -> None:
    """Kueue v0.19.2's configuration API defaults ``waitForPodsReady`` to present (``apis/config/v1beta2/
    defaults.go``), so the job reconciler's step 5 (``generatePodsReadyCondition``) always runs: ``PodsReady=False/
    WaitForStart`` ("Not all pods are ready or succeeded") until the Workload is admitted and its pods are ready,
    then ``True/Started``; written by ``workload.SetConditionAndUpdate`` under manager
    ``kueue-job-controller-PodsReady``."""
    await s.flavor(http, "default", {})
    await s.create(http, s.job("train", annotations={"sim.gangscale.io/duration": "100s"}))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    cond = _pods_ready(wl)
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "WaitForStart", "Not all pods are ready or succeeded")
    owners = [f["manager"] for f in wl["metadata"]["managedFields"]
              if "f:conditions" in f.get("fieldsV1", {}).get("f:status", {})]
    assert owners == ["kueue-job-controller-PodsReady"]

    await s.admit(http, wl)
    await s.settle(em, s.T0)
    assert _pods_ready(await s.workload_of(http, "train"))["reason"] == "WaitForStart"
    await s.bind_all(http)
    await s.settle(em, s.T0 + 1)
    cond = _pods_ready(await s.workload_of(http, "train"))
    assert (cond["status"], cond["reason"], cond["message"], cond["lastTransitionTime"]) == (
        "True", "Started", "All pods reached readiness and the workload is running", "2026-11-18T11:06:41Z")


async def test_finalizer_goes_when_the_workload_finishes(http: KubeHTTP, em: JobEmulator) -> None:
    """``ReconcileGenericJob``: a finished Workload gets ``workload.RemoveFinalizer``."""
    await s.flavor(http, "default", {})
    await s.create(http, s.job("train", annotations={"sim.gangscale.io/duration": "10s"}))
    await s.settle(em, s.T0)
    await s.admit(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0)
    await s.bind_all(http)
    await s.settle(em, s.T0 + 1)
    await s.settle(em, s.T0 + 11)
    wl = await s.workload_of(http, "train")
    assert any(c["type"] == "Finished" and c["status"] == "True" for c in wl["status"]["conditions"])
    assert "finalizers" not in wl["metadata"]


async def test_deleted_job_lets_its_workload_go(http: KubeHTTP, em: JobEmulator) -> None:
    """The garbage collector deletes the Workload of a deleted job, which its finalizer holds until the job
    reconciler's ``finalizeWorkloads`` (``workload.FinalizeOrphanedWorkload``) removes it."""
    await s.create(http, s.job("train"))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    await http.request("DELETE", JOBS.path(s.NS, "train"), query={"propagationPolicy": "Background"})
    for _ in range(50):
        await s.settle(em, s.T0)
        try:
            await http.request("GET", WORKLOADS.path(s.NS, wl["metadata"]["name"]))
        except ApiError as exc:
            assert exc.not_found
            return
    raise AssertionError("the Workload is still there")


async def test_deleted_workload_stops_the_job_and_is_recreated(http: KubeHTTP, em: JobEmulator) -> None:
    """``ReconcileGenericJob`` step 1.1: a Workload being deleted stops the job and loses the finalizer; the job
    then gets a new Workload."""
    await s.flavor(http, "default", {})
    await s.create(http, s.job("train"))
    await s.settle(em, s.T0)
    wl = await s.workload_of(http, "train")
    await s.admit(http, wl)
    await s.settle(em, s.T0)
    assert (await s.get(http, "Job", "train"))["spec"]["suspend"] is False
    await http.request("DELETE", WORKLOADS.path(s.NS, wl["metadata"]["name"]))
    await s.settle(em, s.T0)
    assert (await s.get(http, "Job", "train"))["spec"]["suspend"] is True
    new = await s.workload_of(http, "train")
    assert new["metadata"]["uid"] != wl["metadata"]["uid"]
