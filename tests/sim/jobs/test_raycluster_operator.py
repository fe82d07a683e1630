"""The KubeRay operator's worker reconciliation (ray-accel-spec §1.2, §1.6): desired pods from replicas clamped
to [minReplicas, maxReplicas] times numOfHosts, workersToDelete, no random deletion under autoscaling,
multi-host replicas created and deleted whole, and the status counts."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gangscale.kube.resources import RAYCLUSTERS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.jobs import raycontrollers as ray
from gangscale.sim.world import Timeline
from tests.sim.jobs import support as s

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"


def group(name: str = "gpu", *, replicas: int | None = 0, hosts: int = 1, low: int | None = None,
          high: int | None = None, delete: list[str] | None = None, suspend: bool | None = None) -> JSON:
    out: JSON = {"groupName": name, "numOfHosts": hosts, "rayStartParams": {},
                 "template": {"spec": {"containers": [s.container({"nvidia.com/gpu": "1"}, "ray-worker")]}}}
    for field, value in (("replicas", replicas), ("minReplicas", low), ("maxReplicas", high), ("suspend", suspend)):
        if value is not None:
            out[field] = value
    if delete is not None:
        out["scaleStrategy"] = {"workersToDelete": delete}
    return out


def cluster(*groups: JSON, autoscaling: bool = False, suspend: bool = False) -> JSON:
    spec = s.ray_cluster_spec([])
    spec["workerGroupSpecs"] = list(groups)
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    if suspend:
        spec["suspend"] = True
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": s.NS, "uid": "uid-rc"}, "spec": spec}


def head() -> JSON:
    return {"metadata": {"name": "rc-head-aaaaa", "labels": {ray.RAY_NODE_TYPE: "head", ray.RAY_GROUP: "headgroup"}},
            "status": {"phase": "Running"}}


def worker(name: str, grp: str = "gpu", *, index: int = 0, replica: str | None = None, host: int = 0,
           phase: str = "Pending", ready: bool = False) -> JSON:
    labels = {ray.RAY_NODE_TYPE: "worker", ray.RAY_GROUP: grp, ray.REPLICA_INDEX: str(index)}
    if replica is not None:
        labels.update({ray.REPLICA_NAME: replica, ray.HOST_INDEX: str(host)})
    st: JSON = {"phase": phase}
    if ready:
        st["conditions"] = [{"type": "Ready", "status": "True"}]
    return {"metadata": {"name": name, "labels": labels}, "status": st}


def slice_pods(replica: str, index: int, hosts: int = 4, *, present: int | None = None) -> list[JSON]:
    return [worker(f"{replica}-h{h}", "tpu", index=index, replica=replica, host=h)
            for h in range(hosts if present is None else present)]


def plan(rc: JSON, pods: list[JSON]) -> ray.PodPlan:
    return ray.raycluster_pod_plan(rc, [head(), *pods], random.Random(1), set())


def names(pods: tuple[JSON, ...]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


@pytest.mark.parametrize(("grp", "desired"), [
    (group(replicas=3), 3),
    (group(replicas=None, low=2), 2),
    (group(replicas=1, low=3), 3),
    (group(replicas=9, high=4), 4),
    (group(replicas=2, hosts=4), 8),
    (group(replicas=None), 0),
    (group(replicas=5, suspend=True), 0),
], ids=["replicas", "unset-means-min", "below-min", "above-max", "times-hosts", "unset-no-min", "group-suspended"])
def test_desired_pods_clamp_replicas_to_min_and_max(grp: JSON, desired: int) -> None:
    rc = cluster(grp)
    assert ray.group_desired_pods(rc, grp) == desired
    assert len(plan(rc, []).create) == desired
    assert ray.raycluster_status(rc, [])["desiredWorkerReplicas"] == desired


def test_a_suspended_cluster_wants_nothing_and_loses_every_pod() -> None:
    rc = cluster(group(replicas=2), suspend=True)
    assert ray.group_desired_pods(rc, rc["spec"]["workerGroupSpecs"][0]) == 0
    step = plan(rc, [worker("a")])
    assert names(step.delete) == ["a", "rc-head-aaaaa"] and step.create == ()


def test_a_suspended_group_loses_its_workers_only() -> None:
    rc = cluster(group(replicas=2, suspend=True), group("cpu", replicas=1))
    step = plan(rc, [worker("a"), worker("b", "cpu")])
    assert names(step.delete) == ["a"] and step.create == ()


@pytest.mark.parametrize(("replicas", "created"), [(2, 0), (3, 1)], ids=["replicas-lowered", "replicas-kept"])
def test_workers_to_delete_are_deleted_whatever_replicas_says(replicas: int, created: int) -> None:
    rc = cluster(group(replicas=replicas, delete=["b", "gone-already"]), autoscaling=True)
    step = plan(rc, [worker("a"), worker("b"), worker("c", index=2)])
    assert names(step.delete) == ["b"]
    assert len(step.create) == created
    # The replacement takes the lowest free replica index (1, freed by b).
    assert [p["metadata"]["labels"][ray.REPLICA_INDEX] for p in step.create] == ["1"] * created


@pytest.mark.parametrize(("autoscaling", "deleted"), [(True, []), (False, ["a", "b"])],
                         ids=["autoscaling-keeps-surplus", "no-autoscaling-deletes-surplus"])
def test_surplus_pods_are_deleted_only_without_autoscaling(autoscaling: bool, deleted: list[str]) -> None:
    rc = cluster(group(replicas=1), autoscaling=autoscaling)
    step = plan(rc, [worker("a"), worker("b", index=1), worker("c", index=2)])
    assert names(step.delete) == deleted and step.create == ()


def test_missing_multi_host_replicas_are_created_whole() -> None:
    rc = cluster(group("tpu", replicas=2, hosts=4))
    step = plan(rc, slice_pods("tpu-old", 1))
    assert step.delete == ()
    assert len(step.create) == 4
    labels = [p["metadata"]["labels"] for p in step.create]
    [replica] = {lab[ray.REPLICA_NAME] for lab in labels}
    assert replica != "tpu-old"
    assert sorted(lab[ray.HOST_INDEX] for lab in labels) == ["0", "1", "2", "3"]
    assert {lab[ray.REPLICA_INDEX] for lab in labels} == {"0"}  # index 1 is taken by tpu-old


def test_an_incomplete_multi_host_replica_is_deleted_whole_and_recreated() -> None:
    rc = cluster(group("tpu", replicas=1, hosts=4), autoscaling=True)
    broken = slice_pods("tpu-a", 0, present=3)
    step = plan(rc, broken)
    assert names(step.delete) == names(tuple(broken))
    assert len(step.create) == 4


def test_workers_to_delete_expands_to_the_whole_replica() -> None:
    rc = cluster(group("tpu", replicas=1, hosts=4, delete=["tpu-b-h2"]), autoscaling=True)
    kept, doomed = slice_pods("tpu-a", 0), slice_pods("tpu-b", 1)
    step = plan(rc, kept + doomed)
    assert names(step.delete) == names(tuple(doomed)) and step.create == ()


@pytest.mark.parametrize(("autoscaling", "deleted"), [(True, []), (False, ["tpu-b-h0", "tpu-b-h1", "tpu-b-h2",
                                                                           "tpu-b-h3"])],
                         ids=["autoscaling", "no-autoscaling"])
def test_surplus_multi_host_replicas_go_whole_and_only_without_autoscaling(autoscaling: bool,
                                                                           deleted: list[str]) -> None:
    rc = cluster(group("tpu", replicas=1, hosts=4), autoscaling=autoscaling)
    step = plan(rc, slice_pods("tpu-a", 0) + slice_pods("tpu-b", 1))
    assert names(step.delete) == deleted and step.create == ()


def test_status_counts_desired_bounds_running_and_ready() -> None:
    rc = cluster(group(replicas=3, low=1, high=5), group("tpu", replicas=1, hosts=4, low=0),
                 group("idle", replicas=1, suspend=True))
    pods = [head(), worker("a", phase="Running", ready=True), worker("b", phase="Running"), worker("c")]
    st = ray.raycluster_status(rc, pods)
    assert st["desiredWorkerReplicas"] == 3 + 4
    assert st["minWorkerReplicas"] == 1
    assert st["maxWorkerReplicas"] == ray.INT32_MAX  # 5 + 2147483647 * 4, capped as the int32 field must be
    assert (st["availableWorkerReplicas"], st["readyWorkerReplicas"]) == (2, 1)
    assert "state" not in st


# --- through the emulator and the API server -----------------------------------------------------------

@pytest.fixture
def em(http: KubeHTTP) -> JobEmulator:
    return JobEmulator(http, Timeline(s.T0), seed=3)


async def test_an_unmanaged_autoscaling_cluster_follows_replicas_and_workers_to_delete(http: KubeHTTP,
                                                                                       em: JobEmulator) -> None:
    body = cluster(group(replicas=3, high=8), autoscaling=True)
    del body["metadata"]["uid"]
    await s.create(http, body)
    await s.settle(em, s.T0)
    pods = await s.pods(http)
    workers = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["labels"][ray.RAY_NODE_TYPE] == "worker")
    assert len(pods) == 4 and len(workers) == 3
    # Lowering replicas alone deletes nothing under autoscaling.
    await http.request("PATCH", RAYCLUSTERS.path(s.NS, "rc"), content_type=MERGE,
                       body={"spec": {"workerGroupSpecs": [{**body["spec"]["workerGroupSpecs"][0], "replicas": 2}]}})
    await s.settle(em, s.T0)
    assert len(await s.pods(http)) == 4
    # Naming a worker deletes exactly it; the operator leaves the list in place.
    victim = workers[1]
    await http.request("PATCH", RAYCLUSTERS.path(s.NS, "rc"), content_type=MERGE, body={"spec": {"workerGroupSpecs": [
        {**body["spec"]["workerGroupSpecs"][0], "replicas": 2, "scaleStrategy": {"workersToDelete": [victim]}}]}})
    await s.settle(em, s.T0)
    left = {p["metadata"]["name"] for p in await s.pods(http)}
    assert victim not in left and len(left) == 3
    rc = await s.get(http, "RayCluster", "rc")
    assert rc["spec"]["workerGroupSpecs"][0]["scaleStrategy"] == {"workersToDelete": [victim]}
    assert rc["status"]["desiredWorkerReplicas"] == 2
    assert await em.sync(s.T0) is False
