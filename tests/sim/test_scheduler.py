"""The simulated kube-scheduler against the embedded API server: what it binds, where, and what it says."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.controller.logic.record import Record, Step
from gangscale.kube.resources import NODES, PODS, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.scheduler import Scheduler
from gangscale.sim.world import Timeline
from tests import builders as b

JSON = dict[str, Any]
NS = "default"
TPU_NODE = {"cpu": "100", "memory": "180Gi", "google.com/tpu": "4", "pods": "110"}
CPU_NODE = {"cpu": "16", "memory": "64Gi", "pods": "110"}
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"


@pytest.fixture
def scheduler(http: KubeHTTP, clock: ManualClock) -> Scheduler:
    return Scheduler(http, Timeline(clock.now()))


async def add_node(http: KubeHTTP, apiserver: EmbeddedAPIServer, name: str, allocatable: dict[str, str], *,
                   labels: dict[str, str] | None = None, ready: bool = True, settle: bool = True) -> JSON:
    node = b.node(name, labels={"kubernetes.io/hostname": name, **(labels or {})},
                  ready="True" if ready else "False", allocatable=allocatable)
    created = await http.request("POST", NODES.path(), body=node)
    if settle:
        await apiserver.controllers.settle()  # the node lifecycle controller lifts the not-ready taint
    return created


async def add_pod(http: KubeHTTP, name: str, requests: dict[str, str] | None = None, *, priority: int | None = None,
                  labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                  **spec: Any) -> JSON:
    pod = b.pod(name, labels=labels, containers=[{"name": "main", "image": "trainer:v1",
                                                  "resources": b.requirements(requests)}])
    pod["spec"].update(spec)
    if priority is not None:
        pod["spec"]["priority"] = priority
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return await http.request("POST", PODS.path(NS), body=pod)


async def get_pod(http: KubeHTTP, name: str) -> JSON:
    return await http.request("GET", PODS.path(NS, name))


async def placement(http: KubeHTTP) -> dict[str, str | None]:
    pods = (await http.request("GET", PODS.path(NS)))["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}


async def scheduled_condition(http: KubeHTTP, name: str) -> tuple[str, str, str] | None:
    pod = await get_pod(http, name)
    for c in pod.get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled":
            return c["status"], c.get("reason", ""), c.get("message", "")
    return None


async def test_binds_in_priority_order_then_age(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                                               scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "tpu-1", TPU_NODE)
    await add_pod(http, "low", {"google.com/tpu": "2"}, priority=0)
    await clock.advance(1)
    await add_pod(http, "old-mid", {"google.com/tpu": "2"}, priority=5)
    await clock.advance(1)
    await add_pod(http, "new-mid", {"google.com/tpu": "2"}, priority=5)
    await clock.advance(1)
    await add_pod(http, "high", {"google.com/tpu": "2"}, priority=10)

    assert await scheduler.sync(clock.now()) is True

    assert await placement(http) == {"low": None, "old-mid": "tpu-1", "new-mid": None, "high": "tpu-1"}
    assert await scheduled_condition(http, "high") == ("True", "", "")
    message = "0/1 nodes are available: 1 Insufficient google.com/tpu."
    assert await scheduled_condition(http, "low") == ("False", "Unschedulable", message)
    assert await scheduled_condition(http, "new-mid") == ("False", "Unschedulable", message)


async def test_never_overcommits_counting_running_and_ignoring_finished_pods(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "tpu-1", TPU_NODE)
    await add_node(http, apiserver, "tpu-2", TPU_NODE)
    # Already running on tpu-1: 2 chips taken. Finished on tpu-2: frees its chips.
    await http.request("POST", PODS.path(NS), body=b.pod("running", node="tpu-1", containers=[
        {"name": "m", "image": "x", "resources": b.requirements({"google.com/tpu": "2"})}]))
    await http.request("POST", PODS.path(NS), body=b.pod("done", node="tpu-2", containers=[
        {"name": "m", "image": "x", "resources": b.requirements({"google.com/tpu": "4"})}]))
    await http.request("PATCH", PODS.path(NS, "done", "status"), body={"status": {"phase": "Succeeded"}},
                       content_type="application/merge-patch+json")
    for i in range(5):
        await add_pod(http, f"w{i}", {"google.com/tpu": "1", "cpu": "10"})

    assert await scheduler.sync(clock.now()) is True

    placed = await placement(http)
    per_node = {n: sorted(p for p, where in placed.items() if where == n and p.startswith("w"))
                for n in ("tpu-1", "tpu-2")}
    assert len(per_node["tpu-1"]) == 2 and len(per_node["tpu-2"]) == 3
    # Every pod found a place: 4 - 2 chips on tpu-1, 4 on tpu-2 (the finished pod holds nothing).
    assert all(placed[f"w{i}"] for i in range(5))
    # A second pass has nothing left to do.
    assert await scheduler.sync(clock.now()) is False


async def test_one_pass_fills_nodes_and_reports_the_rest(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                        clock: ManualClock, scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "tpu-1", TPU_NODE)
    await add_node(http, apiserver, "tpu-2", TPU_NODE)
    for i in range(5):
        await add_pod(http, f"w{i}", {"google.com/tpu": "2"})

    await scheduler.sync(clock.now())

    placed = await placement(http)
    assert sorted(n for n in placed.values() if n) == ["tpu-1", "tpu-1", "tpu-2", "tpu-2"]
    unplaced = [p for p, n in placed.items() if n is None]
    assert len(unplaced) == 1
    assert await scheduled_condition(http, unplaced[0]) == (
        "False", "Unschedulable", "0/2 nodes are available: 2 Insufficient google.com/tpu.")


async def test_message_in_kube_scheduler_format(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                                               scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "tpu-1", {**TPU_NODE, "google.com/tpu": "1"}, labels={"accel": "tpu"})
    await add_node(http, apiserver, "cpu-1", CPU_NODE)
    await add_node(http, apiserver, "cpu-2", CPU_NODE)
    await add_node(http, apiserver, "starting", TPU_NODE, labels={"accel": "tpu"}, ready=False, settle=False)
    await add_pod(http, "p", {"google.com/tpu": "4"}, nodeSelector={"accel": "tpu"})

    await scheduler.sync(clock.now())

    assert await scheduled_condition(http, "p") == (
        "False", "Unschedulable",
        "0/4 nodes are available: 1 Insufficient google.com/tpu, 1 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }, 2 node(s) didn't match Pod's node affinity/selector.")


async def test_unschedulable_written_once_and_again_when_the_message_changes(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "cpu-1", CPU_NODE)
    await add_pod(http, "gpu-pod", {"nvidia.com/gpu": "1"})

    assert await scheduler.sync(clock.now()) is True
    first = await get_pod(http, "gpu-pod")
    assert await scheduler.sync(clock.now()) is False
    assert (await get_pod(http, "gpu-pod"))["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    managers = {m["manager"] for m in first["metadata"]["managedFields"] if m.get("subresource") == "status"}
    assert "default-scheduler" in managers

    await clock.advance(30)
    await add_node(http, apiserver, "cpu-2", CPU_NODE)
    assert await scheduler.sync(clock.now()) is True
    assert await scheduled_condition(http, "gpu-pod") == (
        "False", "Unschedulable", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    conditions = {c["type"]: c for c in (await get_pod(http, "gpu-pod"))["status"]["conditions"]}
    first_conditions = {c["type"]: c for c in first["status"]["conditions"]}
    # Still False: the transition time stays that of the first write.
    assert conditions["PodScheduled"]["lastTransitionTime"] == first_conditions["PodScheduled"]["lastTransitionTime"]


async def test_no_nodes_at_all(http: KubeHTTP, clock: ManualClock, scheduler: Scheduler) -> None:
    await add_pod(http, "p", {"cpu": "1"})
    assert await scheduler.sync(clock.now()) is True
    assert await scheduled_condition(http, "p") == ("False", "Unschedulable", "no nodes available to schedule pods")


async def test_leaves_alone_pods_it_does_not_own(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                                                scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "cpu-1", CPU_NODE)
    await add_pod(http, "other-scheduler", {"cpu": "1"}, schedulerName="volcano")
    await add_pod(http, "gated", {"cpu": "1"}, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    pod = b.pod("deleting", containers=[{"name": "m", "image": "x"}], finalizers=["test/keep"])
    await http.request("POST", PODS.path(NS), body=pod)
    await http.request("DELETE", PODS.path(NS, "deleting"))

    assert await scheduler.sync(clock.now()) is False
    assert await placement(http) == {"other-scheduler": None, "gated": None, "deleting": None}
    assert await scheduled_condition(http, "other-scheduler") is None

    await http.request("PATCH", PODS.path(NS, "gated"), body={"spec": {"schedulingGates": None}},
                       content_type="application/merge-patch+json")
    assert await scheduler.sync(clock.now()) is True
    assert (await placement(http))["gated"] == "cpu-1"
    await http.request("PATCH", PODS.path(NS, "deleting"), body={"metadata": {"finalizers": None}},
                       content_type="application/merge-patch+json")


async def test_hostname_anti_affinity_spreads_a_gang(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                    clock: ManualClock, scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "tpu-1", TPU_NODE)
    await add_node(http, apiserver, "tpu-2", TPU_NODE)
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"job": "slice"}}}]}}
    for i in range(3):
        await add_pod(http, f"host-{i}", {"google.com/tpu": "1"}, labels={"job": "slice"}, affinity=anti)

    await scheduler.sync(clock.now())

    placed = await placement(http)
    assert sorted(n for n in placed.values() if n) == ["tpu-1", "tpu-2"]
    lost = next(p for p, n in placed.items() if n is None)
    assert await scheduled_condition(http, lost) == (
        "False", "Unschedulable", "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")


async def add_provreq(http: KubeHTTP, name: str, tokens: list[str], *, provisioned: bool) -> None:
    await http.request("POST", PROVREQS.path(NS), body={
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "metadata": {"name": name},
        "spec": {"provisioningClassName": "atomic-scale-up.gangscale.io",
                 "podSets": [{"podTemplateRef": {"name": name}, "count": 2}]}})
    record = Record(1, "obtained", 2e9, tuple(Step("tpu", 1, t) for t in tokens))
    status = "True" if provisioned else "False"
    await http.request("PATCH", PROVREQS.path(NS, name, "status"), query={"fieldManager": "gangscale",
                                                                            "force": "true"},
                       content_type="application/apply-patch+yaml", body={
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "metadata": {"name": name},
        "status": {"provisioningClassDetails": {"gangscale.io/scale-up": record.to_detail()},
                   "conditions": [{"type": "Provisioned", "status": status, "reason": "CapacityIsProvisioned",
                                   "message": "test", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})


async def test_consumers_take_their_booked_nodes_and_others_stay_off(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, scheduler: Scheduler) -> None:
    # Without the preference, bin packing and names would put everything on n1 and n2 first.
    await add_node(http, apiserver, "n1", TPU_NODE, labels={"gangscale.io/token": "tok-other"})
    await add_node(http, apiserver, "n2", TPU_NODE)
    await add_node(http, apiserver, "n3", TPU_NODE, labels={"gangscale.io/token": "tok-train"})
    await add_node(http, apiserver, "n4", TPU_NODE, labels={"gangscale.io/token": "tok-train"})
    await add_provreq(http, "train", ["tok-train"], provisioned=True)
    await add_provreq(http, "other", ["tok-other"], provisioned=True)
    await add_pod(http, "bystander", {"google.com/tpu": "4"}, priority=100)
    for i in range(2):
        await add_pod(http, f"train-{i}", {"google.com/tpu": "4"}, annotations={CONSUME: "train"})

    await scheduler.sync(clock.now())

    assert await placement(http) == {"bystander": "n2", "train-0": "n3", "train-1": "n4"}


async def test_a_booking_not_yet_provisioned_does_not_repel(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                           clock: ManualClock, scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "n1", TPU_NODE, labels={"gangscale.io/token": "tok-other"})
    await add_node(http, apiserver, "n2", TPU_NODE)
    await add_provreq(http, "other", ["tok-other"], provisioned=False)
    await add_pod(http, "bystander", {"google.com/tpu": "4"})

    await scheduler.sync(clock.now())

    assert (await placement(http))["bystander"] == "n1"
