"""The per-pod baseline autoscaler with the simulated scheduler and cloud, on a ManualClock, over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.kube.resources import NODES, PODS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import NodePool
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint
from gangscale.providers.base import ErrorClass
from gangscale.providers.simfaults import CREATED, FAILED, OBTAIN, RELEASE, RELEASED
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.baseline import PerPodAutoscaler
from gangscale.sim.scheduler import Scheduler
from gangscale.sim.world import Timeline
from tests import builders as b
from tests.conftest import wait_for

JSON = dict[str, Any]
NS = "default"
TPU_TAINT = Taint("google.com/tpu", "present", "NoSchedule")
DEADLINE = 10**10


def make_pool(name: str, allocatable: dict[str, str], *, stock: int | None = None, provision: float = 60.0,
              max_units: int = 10, min_units: int = 0, taints: tuple[Taint, ...] = ()) -> NodePool:
    return NodePool(name=name, allocatable=ResourceList.parse(allocatable), max_units=max_units, min_units=min_units,
                    taints=taints, provider={"simulated": {"stock": stock, "provisionSeconds": provision}})


CPU = make_pool("cpu", {"cpu": "16", "memory": "64Gi", "pods": "110"}, provision=0)
TPU = make_pool("tpu", {"cpu": "100", "memory": "180Gi", "google.com/tpu": "4", "pods": "110"}, stock=2,
                max_units=3, taints=(TPU_TAINT,))


@pytest_asyncio.fixture
async def cloud(http: KubeHTTP, clock: ManualClock) -> AsyncIterator[SimulatedProvider]:
    provider = SimulatedProvider(http, (CPU, TPU), clock)
    await provider.start()
    try:
        yield provider
    finally:
        await provider.aclose()


@pytest.fixture
def scheduler(http: KubeHTTP, clock: ManualClock) -> Scheduler:
    return Scheduler(http, Timeline(clock.now()))


@pytest.fixture
def baseline(http: KubeHTTP, cloud: SimulatedProvider, clock: ManualClock) -> PerPodAutoscaler:
    return PerPodAutoscaler(http, cloud, (CPU, TPU), Timeline(clock.now()))


async def add_pods(http: KubeHTTP, count: int, requests: dict[str, str], prefix: str = "w") -> None:
    for i in range(count):
        await http.request("POST", PODS.path(NS), body=b.pod(f"{prefix}{i}", containers=[
            {"name": "main", "image": "trainer:v1", "resources": b.requirements(requests)}]))


async def nodes(http: KubeHTTP, pool: str) -> list[JSON]:
    query = {"labelSelector": f"gangscale.io/node-pool={pool}"}
    return list((await http.request("GET", NODES.path(), query=query))["items"])


async def placement(http: KubeHTTP) -> dict[str, str | None]:
    items = (await http.request("GET", PODS.path(NS)))["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}


def obtains(cloud: SimulatedProvider) -> list[tuple[str, int, str]]:
    return [(c.pool, c.units, c.outcome) for c in cloud.calls if c.operation == OBTAIN]


async def all_ready(http: KubeHTTP, apiserver: EmbeddedAPIServer, pool: str) -> bool:
    await apiserver.controllers.settle()
    found = await nodes(http, pool)
    return bool(found) and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
        and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints") or [])
        for n in found)


async def round_at(clock: ManualClock, scheduler: Scheduler, baseline: PerPodAutoscaler) -> bool:
    """One driver round: the scheduler, then the autoscaler."""
    wrote = await scheduler.sync(clock.now())
    return await baseline.sync(clock.now()) or wrote


async def test_pending_tpu_pods_get_units_one_at_a_time(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                      clock: ManualClock, cloud: SimulatedProvider,
                                                      scheduler: Scheduler, baseline: PerPodAutoscaler) -> None:
    await add_pods(http, 2, {"google.com/tpu": "4"})
    await scheduler.sync(clock.now())

    assert await baseline.sync(clock.now()) is True

    # Two calls of one unit each, in the first pool whose template takes the pods (cpu has no TPU).
    assert obtains(cloud) == [("tpu", 1, CREATED), ("tpu", 1, CREATED)]
    assert len({c.token for c in cloud.calls}) == 2
    assert len(await nodes(http, "tpu")) == 2
    # Idempotent at the same instant, and the coming nodes are not asked for again at the next scan.
    assert await baseline.sync(clock.now()) is False
    await clock.advance(10)
    await scheduler.sync(clock.now())  # now "untolerated taint {node.kubernetes.io/not-ready: }"
    assert await baseline.sync(clock.now()) is False
    assert len(obtains(cloud)) == 2

    await clock.advance(50)  # provisionSeconds: the nodes turn Ready
    await wait_for(lambda: all_ready(http, apiserver, "tpu"))
    await round_at(clock, scheduler, baseline)
    assert sorted(n for n in (await placement(http)).values() if n) == sorted(n["metadata"]["name"]
                                                                         for n in await nodes(http, "tpu"))


async def test_a_stockout_leaves_a_partial_scale_up_in_place(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                           clock: ManualClock, cloud: SimulatedProvider,
                                                           scheduler: Scheduler, baseline: PerPodAutoscaler) -> None:
    # A 4-host job; the cloud has 2 TPU units in stock.
    await add_pods(http, 4, {"google.com/tpu": "4"})
    await scheduler.sync(clock.now())

    assert await baseline.sync(clock.now()) is True

    assert obtains(cloud) == [("tpu", 1, CREATED), ("tpu", 1, CREATED), ("tpu", 1, FAILED)]
    failed = cloud.calls[-1]
    assert failed.error_class is ErrorClass.STOCKOUT
    assert len(await nodes(http, "tpu")) == 2  # nothing rolled back
    # The failed pool is backed off (5 minutes, as the cluster-autoscaler backs off a node group): the scan
    # 10 s later asks for nothing.
    assert await baseline.sync(clock.now()) is False
    await clock.advance(10)
    await round_at(clock, scheduler, baseline)
    assert [outcome for _, _, outcome in obtains(cloud)] == [CREATED, CREATED, FAILED]

    await clock.advance(50)
    await wait_for(lambda: all_ready(http, apiserver, "tpu"))
    await round_at(clock, scheduler, baseline)
    # Half the job runs and holds its nodes while the other half waits: the cost of per-pod scale-up.
    placed = await placement(http)
    assert sum(1 for n in placed.values() if n) == 2
    assert sum(1 for n in placed.values() if n is None) == 2
    # Once the backoff has passed, the pool is tried again (and fails again: still no stock).
    for _ in range(24):
        await clock.advance(10)
        await round_at(clock, scheduler, baseline)
    assert [outcome for _, _, outcome in obtains(cloud)] == [CREATED, CREATED, FAILED, FAILED]


async def test_max_units_counts_existing_units(http: KubeHTTP, clock: ManualClock, cloud: SimulatedProvider,
                                              scheduler: Scheduler, baseline: PerPodAutoscaler) -> None:
    cpu_full = make_pool("cpu", {"cpu": "16", "memory": "64Gi", "pods": "110"}, max_units=2, provision=60)
    autoscaler = PerPodAutoscaler(baseline.http, cloud, (cpu_full, TPU), Timeline(clock.now()))
    await cloud.obtain("cpu", 1, token="earlier", deadline=DEADLINE)  # a unit that exists already (coming)
    await add_pods(http, 3, {"cpu": "10"})
    await scheduler.sync(clock.now())

    await autoscaler.sync(clock.now())

    # 3 pods of 10 cpu need 3 nodes; one is coming, and the pool may have 2 units: 1 more.
    assert [(p, o) for p, _, o in obtains(cloud)] == [("cpu", CREATED), ("cpu", CREATED)]
    assert len(await nodes(http, "cpu")) == 2


async def test_a_restarted_autoscaler_counts_coming_units(http: KubeHTTP, clock: ManualClock,
                                                         cloud: SimulatedProvider, scheduler: Scheduler,
                                                         baseline: PerPodAutoscaler) -> None:
    await add_pods(http, 1, {"google.com/tpu": "4"})
    await scheduler.sync(clock.now())
    await baseline.sync(clock.now())
    again = PerPodAutoscaler(baseline.http, cloud, (CPU, TPU), Timeline(clock.now()))

    assert await again.sync(clock.now()) is False
    assert len(obtains(cloud)) == 1


async def test_an_empty_unit_goes_after_unneeded_time(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                     clock: ManualClock, cloud: SimulatedProvider,
                                                     scheduler: Scheduler, baseline: PerPodAutoscaler) -> None:
    await add_pods(http, 1, {"cpu": "1"})
    await scheduler.sync(clock.now())
    assert await baseline.sync(clock.now()) is True
    await wait_for(lambda: all_ready(http, apiserver, "cpu"))  # provisionSeconds 0
    await scheduler.sync(clock.now())
    assert (await placement(http))["w0"] is not None
    assert await baseline.sync(clock.now()) is False  # sees the unit busy
    start = clock.now()

    # The pod finishes: from the next sync on, the unit is empty.
    await http.request("PATCH", PODS.path(NS, "w0", "status"), body={"status": {"phase": "Succeeded"}},
                       content_type="application/merge-patch+json")
    await clock.advance(5)
    assert await round_at(clock, scheduler, baseline) is False
    emptied = clock.now()
    # Woken at the first scan at or after the unit has been empty for 600 s.
    assert baseline.next_wake() == start + 610
    await clock.set(start + 600)
    assert await round_at(clock, scheduler, baseline) is False
    assert len(await nodes(http, "cpu")) == 1

    await clock.set(start + 610)
    assert await round_at(clock, scheduler, baseline) is True
    assert clock.now() - emptied >= 600
    assert await nodes(http, "cpu") == []
    assert [(c.operation, c.outcome) for c in cloud.calls][-1] == (RELEASE, RELEASED)
    assert baseline.next_wake() is None
    assert await round_at(clock, scheduler, baseline) is False


async def test_min_units_are_kept(http: KubeHTTP, clock: ManualClock, cloud: SimulatedProvider) -> None:
    kept = make_pool("cpu", {"cpu": "16", "memory": "64Gi", "pods": "110"}, min_units=1, provision=0)
    autoscaler = PerPodAutoscaler(http, cloud, (kept, TPU), Timeline(clock.now()), unneeded_time=60)
    await cloud.obtain("cpu", 2, token="earlier", deadline=DEADLINE)
    await wait_for(lambda: _ready_count(http, "cpu", 2))

    await autoscaler.sync(clock.now())
    await clock.advance(60)
    assert await autoscaler.sync(clock.now()) is True

    assert len(await nodes(http, "cpu")) == 1
    await clock.advance(600)
    assert await autoscaler.sync(clock.now()) is False
    assert len(await nodes(http, "cpu")) == 1


async def _ready_count(http: KubeHTTP, pool: str, count: int) -> bool:
    found = await nodes(http, pool)
    return len(found) == count and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
        for n in found)


async def test_a_unit_never_ready_is_replaced_after_max_provision_time(
        http: KubeHTTP, clock: ManualClock, cloud: SimulatedProvider, scheduler: Scheduler,
        baseline: PerPodAutoscaler) -> None:
    cloud.faults("tpu").never_ready = True
    await add_pods(http, 1, {"google.com/tpu": "4"})
    await scheduler.sync(clock.now())
    await baseline.sync(clock.now())
    first = {n["metadata"]["name"] for n in await nodes(http, "tpu")}
    start = clock.now()

    assert baseline.next_wake() == start + 900
    await clock.set(start + 890)
    await scheduler.sync(clock.now())
    assert await baseline.sync(clock.now()) is False
    await clock.set(start + 900)
    assert await baseline.sync(clock.now()) is True

    assert [(c.operation, c.outcome) for c in cloud.calls] == [
        (OBTAIN, CREATED), (RELEASE, RELEASED), (OBTAIN, CREATED)]
    second = {n["metadata"]["name"] for n in await nodes(http, "tpu")}
    assert len(second) == 1 and not second & first


async def test_idle_cluster_does_not_wake_it(http: KubeHTTP, clock: ManualClock, cloud: SimulatedProvider,
                                            scheduler: Scheduler, baseline: PerPodAutoscaler) -> None:
    assert await baseline.sync(clock.now()) is False
    assert baseline.next_wake() is None
    # A pod no pool can take: looked at once, then left alone until something changes.
    await add_pods(http, 1, {"nvidia.com/gpu": "1"})
    await clock.advance(3)
    await scheduler.sync(clock.now())
    assert await baseline.sync(clock.now()) is False
    assert baseline.next_wake() == clock.now() + 7  # the scan grid, not "now + interval"
    await clock.advance(7)
    assert await baseline.sync(clock.now()) is False
    assert baseline.next_wake() is None
    assert cloud.calls == []
