"""The Ray autoscaler emulator: its decisions (gangscale.sim.rayplan) and the component driving a RayCluster
through the embedded API server with the KubeRay operator emulator (no gangscale controller involved)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gangscale.kube.transport import KubeHTTP
from gangscale.sim import rayplan
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.jobs import raycontrollers as ray
from gangscale.sim.rayautoscaler import RayAutoscaler
from gangscale.sim.rayplan import Demand
from gangscale.sim.world import FINISHED, RAY_DEMAND, RAY_SCALE, RUNNING, Timeline
from tests.sim.jobs import support as s

JSON = dict[str, Any]
T0 = s.T0


def group(name: str, *, replicas: int = 0, hosts: int = 1, low: int = 0, high: int = 16,
          delete: list[str] | None = None, idle: int | None = None) -> JSON:
    out: JSON = {"groupName": name, "replicas": replicas, "minReplicas": low, "maxReplicas": high, "numOfHosts": hosts,
                 "rayStartParams": {}, "scaleStrategy": {} if delete is None else {"workersToDelete": delete},
                 "template": {"spec": {"containers": [s.container({"nvidia.com/gpu": "1"}, "ray-worker")]}}}
    if idle is not None:
        out["idleTimeoutSeconds"] = idle
    return out


def cluster(*groups: JSON, options: JSON | None = None) -> JSON:
    spec = s.ray_cluster_spec([])
    spec.update({"enableInTreeAutoscaling": True, "workerGroupSpecs": list(groups)})
    if options is not None:
        spec["autoscalerOptions"] = options
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc", "namespace": s.NS,
                                                                          "labels": {}}, "spec": spec}


def pod(name: str, grp: str, *, running: bool = False, replica: str | None = None, created: str = "t0") -> JSON:
    labels = {ray.RAY_NODE_TYPE: "worker", ray.RAY_GROUP: grp}
    if replica:
        labels[ray.REPLICA_NAME] = replica
    st: JSON = {"phase": "Running" if running else "Pending"}
    if running:
        st["containerStatuses"] = [{"name": "ray-worker", "state": {"running": {}}}]
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": created}, "status": st}


def pods_of(grp: str, n: int, *, running: bool = False, prefix: str | None = None) -> list[JSON]:
    return [pod(f"{prefix or grp}-{i}", grp, running=running) for i in range(n)]


def slice_of(replica: str, *, running: bool = False) -> list[JSON]:
    return [pod(f"{replica}-h{h}", "tpu", running=running, replica=replica) for h in range(4)]


def step(rc: JSON, pods: list[JSON], target: dict[str, int], idle: dict[str, float] | None = None,
         now: float = 100.0) -> rayplan.Iteration:
    groups = rayplan.groups_of(rc, pods)
    return rayplan.plan(groups, target, idle if idle is not None else rayplan.idle_since(groups, target, {}, now), now,
                        speed=rayplan.upscaling_speed(rc))


def replicas_op(i: int, value: int) -> JSON:
    return {"op": "replace", "path": f"/spec/workerGroupSpecs/{i}/replicas", "value": value}


def delete_op(i: int, names: list[str]) -> JSON:
    return {"op": "replace", "path": f"/spec/workerGroupSpecs/{i}/scaleStrategy", "value": {"workersToDelete": names}}


# --- decisions ------------------------------------------------------------------------------------------

def test_a_16_replica_demand_is_launched_10_then_6() -> None:
    first = step(cluster(group("gpu")), [], {"gpu": 16})
    assert first.ops == (replicas_op(0, 10),)
    assert rayplan.describe(first.changes[0]) == ("autoscaler: gpu replicas 0 -> 10 (16 wanted; at most 10 launches "
                                                  "per iteration)")
    second = step(cluster(group("gpu", replicas=10)), pods_of("gpu", 10), {"gpu": 16})
    assert second.ops == (replicas_op(0, 16),)


def test_the_launch_budget_is_shared_and_multi_host_groups_take_whole_replicas() -> None:
    rc = cluster(group("gpu", replicas=10), group("tpu", hosts=4, high=2))
    assert step(rc, pods_of("gpu", 10), {"gpu": 16, "tpu": 2}).ops == (replicas_op(0, 16), replicas_op(1, 1))
    rc = cluster(group("gpu", replicas=16), group("tpu", replicas=1, hosts=4, high=2))
    assert step(rc, pods_of("gpu", 16) + slice_of("s1"), {"gpu": 16, "tpu": 2}).ops == (replicas_op(1, 2),)
    # Three pods of budget left are not a 4-host replica.
    rc = cluster(group("gpu", replicas=9), group("tpu", hosts=4, high=2))
    assert step(rc, pods_of("gpu", 9), {"gpu": 16, "tpu": 2}).ops == (replicas_op(0, 16),)


def test_workers_asked_for_but_not_created_yet_use_up_the_budget() -> None:
    rc = cluster(group("gpu", replicas=10))
    assert step(rc, pods_of("gpu", 4), {"gpu": 16}).ops == (replicas_op(0, 14),)


def test_conservative_upscaling_grows_with_running_workers() -> None:
    rc = cluster(group("gpu", replicas=3), options={"upscalingMode": "Conservative"})
    assert step(rc, pods_of("gpu", 3, running=True), {"gpu": 16}).ops == (replicas_op(0, 6),)


@pytest.mark.parametrize(("low", "high", "demand", "target"), [
    (0, 16, 0, 0), (2, 16, 0, 2), (2, 16, 5, 5), (0, 4, 16, 4), (3, 4, 1, 3),
], ids=["nothing", "min-kept", "demand", "capped-at-max", "min-over-demand"])
def test_targets_are_demand_clamped_to_min_and_max(low: int, high: int, demand: int, target: int) -> None:
    groups = rayplan.groups_of(cluster(group("gpu", low=low, high=high)), [])
    live = [Demand("pg", "gpu", demand, at=0.0)] if demand else []
    assert rayplan.targets(groups, live) == {"gpu": target}


def test_one_patch_replicas_first_then_new_deletions_then_clears() -> None:
    rc = cluster(group("gpu", replicas=2), group("cpu", replicas=1, delete=["cpu-gone"]), group("l4"))
    pods = pods_of("gpu", 2) + pods_of("cpu", 1, running=True)
    it = step(rc, pods, {"gpu": 0, "cpu": 1, "l4": 3})
    assert it.ops == (replicas_op(0, 0), replicas_op(2, 3), delete_op(0, ["gpu-0", "gpu-1"]), delete_op(1, []))
    assert [rayplan.describe(c) for c in it.changes] == [
        "autoscaler: gpu replicas 2 -> 0 workersToDelete gpu-0, gpu-1 (not running, no longer needed)",
        "autoscaler: cpu workersToDelete cleared (the pods are gone)",
        "autoscaler: l4 replicas 0 -> 3"]


def test_nothing_is_launched_or_deleted_while_named_workers_still_exist() -> None:
    rc = cluster(group("gpu", replicas=1, delete=["gpu-1"]), group("l4", replicas=1))
    it = step(rc, pods_of("gpu", 2) + pods_of("l4", 1), {"gpu": 1, "l4": 0})
    assert it.blocked and it.ops == ()


def test_idle_running_workers_go_after_the_group_idle_timeout_pending_ones_at_once() -> None:
    rc = cluster(group("gpu", replicas=3, idle=60))
    pods = [pod("gpu-a", "gpu", running=True, created="t1"), pod("gpu-b", "gpu", running=True, created="t2"),
            pod("gpu-c", "gpu")]
    groups = rayplan.groups_of(rc, pods)
    idle = rayplan.idle_since(groups, {"gpu": 1}, {}, now=100.0)
    assert idle == {"gpu-b": 100.0}  # the oldest running worker stays busy; the pending one is not idle, just surplus
    early = rayplan.plan(groups, {"gpu": 1}, idle, 159.0)
    assert early.ops == (replicas_op(0, 2), delete_op(0, ["gpu-c"])) and early.idle_until == (160.0,)
    groups = rayplan.groups_of(cluster(group("gpu", replicas=2, idle=60)), pods[:2])
    assert rayplan.plan(groups, {"gpu": 1}, idle, 160.0).ops == (replicas_op(0, 1), delete_op(0, ["gpu-b"]))


def test_the_cluster_idle_timeout_applies_when_the_group_sets_none_and_60s_otherwise() -> None:
    groups = rayplan.groups_of(cluster(group("a"), group("b", idle=5), options={"idleTimeoutSeconds": 300}), [])
    assert [g.idle_timeout for g in groups] == [300.0, 5.0]
    assert rayplan.groups_of(cluster(group("a")), [])[0].idle_timeout == rayplan.DEFAULT_IDLE_TIMEOUT_S


def test_a_multi_host_replica_is_removed_whole() -> None:
    rc = cluster(group("tpu", replicas=2, hosts=4))
    it = step(rc, slice_of("s1", running=True) + slice_of("s2"), {"tpu": 1})
    assert it.ops == (replicas_op(0, 1), delete_op(0, [f"s2-h{h}" for h in range(4)]))


def test_demands_are_placed_first_come_first_served() -> None:
    groups = rayplan.groups_of(cluster(group("gpu", replicas=5)), pods_of("gpu", 5, running=True))
    live = [Demand("late", "gpu", 2, at=20.0), Demand("early", "gpu", 4, at=10.0)]
    assert [d.name for d in rayplan.newly_placed(live, groups, {})] == ["early"]
    assert rayplan.newly_placed(live, groups, {"early": 10.0}) == []


def test_the_iteration_grid() -> None:
    assert rayplan.tick_at_or_after(100.0, 100.0) == 100.0
    assert rayplan.tick_at_or_after(100.0, 101.0) == 105.0
    assert rayplan.tick_after(100.0, 105.0) == 110.0
    assert rayplan.is_tick(100.0, 160.0) and not rayplan.is_tick(100.0, 162.0)


# --- the component ----------------------------------------------------------------------------------------

Patches = list[tuple[float, list[JSON]]]


class Rig:
    """The operator emulator, the autoscaler, the head running on a node of its own, and the patches sent."""

    def __init__(self, http: KubeHTTP, script: list[Demand]) -> None:
        self.http = http
        self.timeline = Timeline(T0)
        self.jobs = JobEmulator(http, self.timeline, seed=5)
        self.ras = RayAutoscaler(http, self.timeline, {(s.NS, "rc"): script})
        self.patches: Patches = []
        self.now = T0
        self.operator = True
        real = http.request

        async def recording(method: str, path: str, **kw: Any) -> JSON:
            if method == "PATCH" and kw.get("content_type") == "application/json-patch+json":
                self.patches.append((self.now - T0, kw["body"]))
            return await real(method, path, **kw)

        self.ras.http = _Recorder(recording)  # type: ignore[assignment]

    async def start(self, body: JSON) -> None:
        await s.create(self.http, body)
        await s.settle(self.jobs, T0)
        await s.bind_all(self.http, "head-node")  # only the head exists yet
        await self.settle()

    async def settle(self) -> None:
        for _ in range(30):
            wrote = await self.ras.sync(self.now)
            if self.operator:
                wrote = await s.settle(self.jobs, self.now) > 0 or wrote
            if not wrote:
                return
        raise AssertionError("no fixed point")

    async def run_until(self, end: float, each: Callable[[], Awaitable[None]] | None = None) -> None:
        while (due := self.ras.next_wake()) is not None and due <= T0 + end:
            assert due > self.now
            self.now = due
            if each is not None:
                await each()
            await self.settle()

    async def rc(self) -> JSON:
        return await s.get(self.http, "RayCluster", "rc")

    async def workers(self) -> list[JSON]:
        return [p for p in await s.pods(self.http) if p["metadata"]["labels"][ray.RAY_NODE_TYPE] == "worker"]

    def texts(self, kind: str) -> list[tuple[float, str]]:
        return [(e.at - T0, e.text) for e in self.timeline.of(kind)]


class _Recorder:
    def __init__(self, request: Callable[..., Awaitable[JSON]]) -> None:
        self.request = request


async def test_stepwise_patches_reach_16_replicas_and_the_operator_creates_the_pods(http: KubeHTTP) -> None:
    rig = Rig(http, [Demand("pg-16gpu", "gpu", 16, at=T0 + 62)])
    await rig.start(cluster(group("gpu")))
    assert rig.ras.next_wake() == T0 + 62  # the demand's arrival; the grid is T0, T0+5, ...
    await rig.run_until(600)
    assert rig.patches == [(65.0, [replicas_op(0, 10)]), (70.0, [replicas_op(0, 16)])]
    assert [t for t, _ in rig.texts(RAY_SCALE)] == [65.0, 70.0]
    assert len(await rig.workers()) == 16 and (await rig.rc())["spec"]["workerGroupSpecs"][0]["replicas"] == 16
    assert rig.texts(RAY_DEMAND) == [(62.0, "placement group pg-16gpu asks for 16 gpu replica(s)")]
    assert rig.ras.next_wake() is None  # pending pods, nothing else to do


async def test_a_withdrawn_demand_removes_its_pending_workers_then_clears_the_list(http: KubeHTTP) -> None:
    rig = Rig(http, [Demand("pg", "gpu", 4, at=T0 + 60, withdraw_at=T0 + 92)])
    await rig.start(cluster(group("gpu")))
    await rig.run_until(200)
    assert [t for t, _ in rig.patches] == [60.0, 95.0, 100.0]
    doomed = rig.patches[1][1][1]["value"]["workersToDelete"]
    assert rig.patches[1][1] == [replicas_op(0, 0), delete_op(0, doomed)] and len(doomed) == 4
    assert rig.patches[2][1] == [delete_op(0, [])]
    assert await rig.workers() == []
    assert (await rig.rc())["spec"]["workerGroupSpecs"][0]["scaleStrategy"] == {"workersToDelete": []}
    assert rig.texts(RAY_DEMAND)[-1] == (92.0, "placement group pg withdrawn before it was placed")
    assert [t for t, _ in rig.texts(FINISHED)] == [92.0]


async def test_no_launch_while_named_workers_still_exist(http: KubeHTTP) -> None:
    rig = Rig(http, [Demand("a", "gpu", 2, at=T0 + 60, withdraw_at=T0 + 70), Demand("b", "cpu", 3, at=T0 + 72)])
    await rig.start(cluster(group("gpu"), group("cpu")))
    await rig.run_until(65)

    async def operator_stalls() -> None:
        rig.operator = rig.now >= T0 + 85  # the operator is slow to delete the named pods

    await rig.run_until(300, operator_stalls)
    times = [t for t, _ in rig.patches]
    # 75, 80 and 85 are blocked: the named pods still exist (at 85 the operator deletes them after the iteration).
    assert times == [60.0, 70.0, 90.0]
    assert rig.patches[2][1] == [replicas_op(1, 3), delete_op(0, [])]
    assert len(await rig.workers()) == 3


async def test_idle_running_workers_are_terminated_after_the_idle_timeout(http: KubeHTTP) -> None:
    rig = Rig(http, [Demand("pg", "gpu", 2, at=T0 + 60, duration=120)])
    await rig.start(cluster(group("gpu", idle=30)))

    await rig.run_until(60)
    await s.bind_all(http, "gpu-node")  # nodes for both workers, at once
    await rig.settle()
    await rig.run_until(600)
    assert rig.texts(RUNNING) == [(60.0, "placement group pg: all 2 gpu replica(s) running")]
    assert [t for t, _ in rig.texts(RAY_DEMAND)] == [60.0, 60.0, 180.0]  # requested, placed, released
    assert [t for t, _ in rig.texts(FINISHED)] == [180.0]
    assert [t for t, _ in rig.patches] == [60.0, 210.0, 215.0]
    assert rig.patches[1][1][0] == replicas_op(0, 0) and len(rig.patches[1][1][1]["value"]["workersToDelete"]) == 2
    assert "idle for 30s" in rig.texts(RAY_SCALE)[1][1]
    assert await rig.workers() == []


async def test_a_multi_host_demand_is_launched_and_withdrawn_in_whole_replicas(http: KubeHTTP) -> None:
    rig = Rig(http, [Demand("slices", "tpu", 2, at=T0 + 60, withdraw_at=T0 + 90)])
    await rig.start(cluster(group("tpu", hosts=4, high=2)))
    await rig.run_until(89)
    assert rig.patches == [(60.0, [replicas_op(0, 2)])]
    replicas: dict[str, set[str]] = {}
    for p in await rig.workers():
        labels = p["metadata"]["labels"]
        replicas.setdefault(labels[ray.REPLICA_NAME], set()).add(labels[ray.HOST_INDEX])
    assert sorted(replicas.values(), key=sorted) == [{"0", "1", "2", "3"}] * 2
    await rig.run_until(300)
    assert len(rig.patches[1][1][1]["value"]["workersToDelete"]) == 8
    assert await rig.workers() == []


async def test_nothing_happens_until_the_head_runs(http: KubeHTTP) -> None:
    rig = Rig(http, [Demand("pg", "gpu", 1, at=T0)])
    await s.create(http, cluster(group("gpu")))
    await rig.settle()
    assert rig.patches == [] and rig.ras.next_wake() is None and rig.timeline.entries == []
    assert (await rig.rc())["spec"]["workerGroupSpecs"][0]["replicas"] == 0
