"""The simulated cloud's kubelets: node Leases renewed every 10 s and node status posted on change and every 5 minutes,
as a v1.36 kubelet does, on the provider's clock; a stopped kubelet lets the embedded node lifecycle controller mark
its node ``Unknown``, and its node comes back when it resumes. Against the embedded API server over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.kube.client import make_http
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import NodePool
from gangscale.providers.simnodes import (
    LEASE_DURATION_SECONDS,
    LEASE_NAMESPACE,
    RENEW_INTERVAL,
    STATUS_REPORT_FREQUENCY,
    micro_time,
)
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver import EmbeddedAPIServer, Fault, LoggedRequest
from gangscale.sim.apiserver.nodehealth import NodeHealthMonitor, NodeMonitorSettings
from gangscale.sim.quiet import until_quiet
from tests import builders as b
from tests.conftest import step_through
from tests.providers.test_simulated import DEADLINE, make_pool

JSON = dict[str, Any]
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
GRACE = NodeMonitorSettings().grace_period
#: Nodes up at once, and nodes that take 30 s.
FAST = make_pool("fast", {"cpu": "4", "memory": "16Gi"}, provision=0)
SLOW = make_pool("slow", {"cpu": "4", "memory": "16Gi"}, provision=30)
POOLS = (FAST, SLOW)


class Cloud:
    """A started provider on the test's server and clock, with the node lifecycle controller's health monitor on.
    The provider has a client of its own (``gangscale-simulated-cloud``, as in production): the request log tells
    its requests from the test's."""

    def __init__(self, http: KubeHTTP, cloud_http: KubeHTTP, apiserver: EmbeddedAPIServer,
                 clock: ManualClock) -> None:
        self.http, self.cloud_http, self.apiserver, self.clock = http, cloud_http, apiserver, clock
        self.monitor: NodeHealthMonitor = apiserver.controllers.monitor_node_health(clock)
        self.providers: list[SimulatedProvider] = []

    @property
    def provider(self) -> SimulatedProvider:
        return self.providers[-1]

    async def start(self, pools: Sequence[NodePool] = POOLS) -> SimulatedProvider:
        provider = SimulatedProvider(self.cloud_http, pools, self.clock)
        self.providers.append(provider)
        await provider.start()
        return provider

    async def obtain(self, pool: NodePool, units: int = 1, token: str = "tok-1") -> list[str]:
        got = await self.provider.obtain(pool.name, units, token=token, deadline=DEADLINE)
        return list(got.node_names)

    async def quiet(self) -> None:
        """Until the server, the cloud and the node lifecycle controller are quiet (``gangscale.sim.quiet``)."""
        await self.apiserver.controllers.settle()
        await until_quiet(self.apiserver, [("simulated cloud", lambda: not any(p.busy for p in self.providers)),
                                           ("node lifecycle controller", lambda: not self.monitor.pending)])
        await self.apiserver.controllers.settle()

    async def run(self, seconds: float, check: Callable[[], Any] | None = None) -> None:
        """Move the clock ``seconds`` on, stopping at every timer and letting everything react there (as the
        simulation driver does); ``check`` (a coroutine function) runs at every stop."""
        await step_through(self.clock, seconds, self.quiet, check)

    async def node(self, name: str) -> JSON:
        return await self.http.request("GET", b.NODES.path(name=name))

    async def lease(self, name: str) -> JSON:
        return await self.http.request("GET", b.LEASES.path(LEASE_NAMESPACE, name))

    def requests(self, resource: str, since: int = 0) -> list[LoggedRequest]:
        """The cloud's requests on ``resource`` (from the ``since``-th request of the log on)."""
        return [r for r in self.apiserver.requests[since:]
                if r.resource == resource and r.user_agent.startswith("gangscale-simulated-cloud")]


@pytest_asyncio.fixture
async def cloud(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                kubeconfig: Path) -> AsyncIterator[Cloud]:
    cloud_http = await make_http(str(kubeconfig), user_agent="gangscale-simulated-cloud")
    made = Cloud(http, cloud_http, apiserver, clock)
    try:
        await made.start()
        yield made
    finally:
        for provider in made.providers:
            await provider.aclose()
        await cloud_http.api_client.close()


def ready(node: JSON) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def taints(node: JSON) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}


def verbs(requests: Sequence[LoggedRequest]) -> list[tuple[str, int]]:
    return [(r.verb, r.status) for r in requests]


async def test_a_node_lease_is_created_then_renewed_every_ten_seconds_and_the_status_posted_every_five_minutes(
        cloud: Cloud) -> None:
    start = cloud.clock.now()
    (name,) = await cloud.obtain(FAST)
    await cloud.run(RENEW_INTERVAL)

    lease = await cloud.lease(name)
    node = await cloud.node(name)
    assert lease["spec"] == {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                             "renewTime": micro_time(cloud.clock.now())}
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}]
    # Its first renewal looks for it and creates it, as a kubelet's does.
    assert verbs(cloud.requests("leases")) == [("get", 404), ("create", 201)]

    mark = len(cloud.apiserver.requests)
    seen: list[str] = []

    async def still_ready() -> None:
        got = await cloud.node(name)
        seen.append(ready(got))
    await cloud.run(10 * 60 - RENEW_INTERVAL, still_ready)

    assert set(seen) == {"True"}
    # When nothing changes: a Lease update per 10 s, a status post per 5 minutes, and no read of the Node.
    assert verbs(cloud.requests("leases", mark)) == [("update", 200)] * 59
    assert [(r.verb, r.subresource) for r in cloud.requests("nodes", mark)] == [("patch", "status")] * 2
    posts = [r for r in cloud.requests("nodes") if r.subresource == "status"]
    elapsed = [r.time.timestamp() - start for r in posts]
    assert elapsed == [0.0, STATUS_REPORT_FREQUENCY, 2 * STATUS_REPORT_FREQUENCY]  # Ready, then the reports
    node = await cloud.node(name)
    conditions = {c["type"]: c for c in node["status"]["conditions"]}
    assert {kind: c["status"] for kind, c in conditions.items()} == {
        "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False", "Ready": "True"}
    assert conditions["Ready"]["lastTransitionTime"] == micro_time(start)[:19] + "Z"  # Ready since it came up
    assert conditions["Ready"]["lastHeartbeatTime"] == micro_time(start + 600)[:19] + "Z"


@pytest.mark.parametrize(("pool", "stopped_for", "unknown"), [
    (FAST, 30, False),               # shorter than the grace period: nothing happens
    (FAST, 120, True),               # a Ready node goes Unknown, and comes back when its kubelet does
    (SLOW, 120, True),               # a node still coming up goes Unknown too; Ready when its kubelet is back
], ids=["brief", "ready-node", "node-coming-up"])
async def test_a_node_whose_kubelet_stops_goes_unknown_after_the_grace_period_and_back_when_it_resumes(
        cloud: Cloud, pool: NodePool, stopped_for: float, unknown: bool) -> None:
    (name,) = await cloud.obtain(pool)
    await cloud.run(5)
    stopped_at = cloud.clock.now()
    cloud.provider.faults(pool.name).heartbeat_stopped.add(name)
    states: list[tuple[float, str, frozenset[tuple[str, str]]]] = []

    async def record() -> None:
        got = await cloud.node(name)
        states.append((cloud.clock.now() - stopped_at, ready(got), frozenset(taints(got))))
    await cloud.run(stopped_for, record)

    went = [t for t, status, _ in states if status == "Unknown"]
    if not unknown:
        assert not went and states[-1][1] == ("True" if pool is FAST else "False")
    else:
        # Its last heartbeat was the renewal before it stopped (at most 10 s before): Unknown within a monitor
        # period after that heartbeat + the grace period, never before.
        assert GRACE - RENEW_INTERVAL < went[0] <= GRACE + NodeMonitorSettings().period
        assert states[-1][2] == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
        got = await cloud.node(name)
        assert {c["reason"] for c in got["status"]["conditions"]} == {"NodeStatusUnknown"}

    cloud.provider.faults(pool.name).heartbeat_stopped.discard(name)
    await cloud.run(2 * RENEW_INTERVAL)
    got = await cloud.node(name)
    assert ready(got) == "True"  # the slow node's 30 s are long past: its kubelet posts Ready
    assert taints(got) == set()
    assert {c["reason"] for c in got["status"]["conditions"]} == {
        "KubeletHasSufficientMemory", "KubeletHasNoDiskPressure", "KubeletHasSufficientPID", "KubeletReady"}


async def test_a_restarted_provider_picks_up_the_leases_where_the_last_one_left_them(cloud: Cloud) -> None:
    (name,) = await cloud.obtain(FAST)
    await cloud.run(30)
    first = cloud.provider
    await first.aclose()
    cloud.providers.remove(first)
    mark = len(cloud.apiserver.requests)
    await cloud.start()
    await cloud.run(20)

    # It reads the Lease it did not write (no create), then renews it; the node stayed Ready throughout.
    assert verbs(cloud.requests("leases", mark)) == [("get", 200), ("update", 200), ("update", 200)]
    assert ready(await cloud.node(name)) == "True"


async def test_released_nodes_lose_their_leases_and_their_kubelets(cloud: Cloud) -> None:
    names = await cloud.obtain(FAST, 2)
    await cloud.run(10)
    got = await cloud.provider.lookup("tok-1")
    assert got is not None
    await cloud.provider.release(FAST.name, [u.unit_id for u in got.units], token="rel-1")
    await cloud.apiserver.controllers.settle()  # the garbage collector deletes the Leases with their Nodes
    leases = await cloud.http.request("GET", b.LEASES.path(LEASE_NAMESPACE))
    assert [lease["metadata"]["name"] for lease in leases["items"]] == []
    mark = len(cloud.apiserver.requests)
    await cloud.run(60)
    assert cloud.requests("leases", mark) == [] and cloud.clock.sleepers == 0
    assert names


async def test_a_lease_deleted_under_a_kubelet_is_created_again(cloud: Cloud) -> None:
    (name,) = await cloud.obtain(FAST)
    await cloud.run(10)
    await cloud.http.request("DELETE", b.LEASES.path(LEASE_NAMESPACE, name))
    mark = len(cloud.apiserver.requests)
    await cloud.run(10)
    assert verbs(cloud.requests("leases", mark)) == [("update", 404), ("get", 404), ("create", 201)]
    assert (await cloud.lease(name))["spec"]["renewTime"] == micro_time(cloud.clock.now())


async def test_failed_renewals_are_retried_at_the_next_tick_and_the_node_reread_after_a_gap(cloud: Cloud) -> None:
    (name,) = await cloud.obtain(FAST)
    await cloud.run(10)
    cloud.apiserver.inject(Fault(resource="coordination.k8s.io/leases", status=500, times=3))
    mark = len(cloud.apiserver.requests)
    await cloud.run(40)
    # Three failed renewals (30 s without one: under the grace period), then the Lease is renewed again; the kubelet
    # reads its Node back once, since someone may have written it while it was away.
    assert verbs(cloud.requests("leases", mark)) == [("update", 500)] * 3 + [("update", 200)]
    assert [(r.verb, r.subresource) for r in cloud.requests("nodes", mark)] == [("list", None)]
    assert ready(await cloud.node(name)) == "True"
