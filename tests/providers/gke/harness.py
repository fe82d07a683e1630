"""The gke provider against the fake GKE + Compute control plane (``gangscale.sim.gcp``), over real HTTP.

The fake registers Nodes in the embedded API server as a GKE kubelet would. Time is the test's
:class:`ManualClock`: :func:`drive` runs a provider call and moves the clock to the next timer whenever the call
waits for nothing but the clock (its polls, the fake's operations), so no test sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gangscale.clock import ManualClock, Sleeps, counting_sleeps
from gangscale.config import parse_pool_yaml
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import NodePool
from gangscale.providers.gke.auth import StaticToken
from gangscale.providers.gke.client import Endpoints
from gangscale.providers.gke.provider import GkeProvider
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.gcp import FakeGcp
from gangscale.sim.quiet import until_quiet

T = TypeVar("T")
PROJECT, REGION, ZONE = "demo-project", "us-central1", "us-central1-a"
CLUSTER = "c1"
FLEX_RUN, DWS_RUN = 3600, 7200
#: The node pool fields GKE's documented commands give a flex-start and a queued-provisioning node pool.
FLEX_START = {"config": {"flexStart": True, "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}}}
QUEUED = {"queuedProvisioning": {"enabled": True}, **FLEX_START,
          "autoscaling": {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": 16, "locationPolicy": "ANY"}}
#: A TPU v5e 2x4 slice pool (2 hosts per slice); single-GPU L4 VMs and CPU VMs added to the existing pools "l4" and
#: "cpu" by createInstances. ``DWS_POOLS_YAML`` adds L4 VMs of the flex-start pool "flex" by resize requests (1 h run
#: duration) and L4 VMs of the queued-provisioning pool "dws" through GKE's ProvisioningRequest class (2 h).
POOLS_YAML = f"""
nodePools:
  - name: tpu
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: {ZONE}
    maxUnits: 4
    gke: {{project: {PROJECT}, location: {REGION}, cluster: {CLUSTER}, mode: slice}}
  - name: l4
    machineType: g2-standard-8
    zone: {ZONE}
    maxUnits: 8
    gke: {{project: {PROJECT}, location: {REGION}, cluster: {CLUSTER}, mode: resize, nodePool: l4}}
  - name: cpu
    machineType: n2-standard-8
    allocatable: {{cpu: "7", memory: 28Gi}}
    zone: {ZONE}
    maxUnits: 8
    gke: {{project: {PROJECT}, location: {REGION}, cluster: {CLUSTER}, mode: resize, nodePool: cpu}}
"""
#: The same, with the flex-start pool "flex" and the queued-provisioning pool "dws" added.
DWS_POOLS_YAML = POOLS_YAML + f"""\
  - name: flex
    machineType: g2-standard-8
    zone: {ZONE}
    maxUnits: 8
    gke: {{project: {PROJECT}, location: {REGION}, cluster: {CLUSTER}, mode: flex-start, nodePool: flex,
          maxRunDurationSeconds: {FLEX_RUN}}}
  - name: dws
    machineType: g2-standard-8
    zone: {ZONE}
    maxUnits: 8
    gke: {{project: {PROJECT}, location: {REGION}, cluster: {CLUSTER}, mode: queued-provisioning, nodePool: dws,
          maxRunDurationSeconds: {DWS_RUN}}}
"""
#: Where the provider makes its queued-provisioning requests.
NAMESPACE = "default"
#: Far enough that no call here runs into it unless a test means it to.
DEADLINE_AFTER = 3600.0


def pools(text: str = POOLS_YAML) -> tuple[NodePool, ...]:
    return parse_pool_yaml(text).pools


@dataclass
class Cloud:
    clock: ManualClock
    server: EmbeddedAPIServer
    kube: KubeHTTP
    gcp: FakeGcp
    provider: GkeProvider

    others: list[GkeProvider] = field(default_factory=list)
    #: The pool file the providers run with.
    text: str = POOLS_YAML

    async def restarted(self) -> GkeProvider:
        """Another provider on the same cloud, started: what a restarted process has."""
        provider = make_provider(self.gcp, self.clock, self.text)
        self.others.append(provider)
        await self.drive(provider.start())
        return provider

    async def drive(self, coro: Coroutine[Any, Any, T], *, limit: float = 7200.0) -> T:
        return await drive(self, coro, limit=limit)

    def deadline(self, after: float = DEADLINE_AFTER) -> float:
        return self.clock.now() + after

    def node_pools(self) -> dict[str, str]:
        """Node pools of the cluster: name -> status."""
        cluster = self.gcp.state.cluster(REGION, CLUSTER)
        assert cluster is not None
        return {name: pool.status for name, pool in cluster.pools.items()}

    def calls(self, method: str, fragment: str) -> int:
        return sum(1 for call in self.gcp.calls if call.method == method and fragment in call.path)

    async def nodes(self) -> dict[str, dict[str, Any]]:
        found = await self.kube.request("GET", "/api/v1/nodes")
        return {n["metadata"]["name"]: n for n in found.get("items") or []}


def make_provider(gcp: FakeGcp, clock: ManualClock, text: str = POOLS_YAML) -> GkeProvider:
    return GkeProvider(pools(text), clock, tokens=StaticToken(gcp.token),
                       endpoints=Endpoints(container=gcp.url, compute=gcp.url + "/compute/v1"), poll_interval=1.0,
                       kube=gcp.kube, namespace=NAMESPACE)


@contextlib.asynccontextmanager
async def cloud(clock: ManualClock, server: EmbeddedAPIServer, kube: KubeHTTP, *, text: str = POOLS_YAML,
                start: bool = True) -> AsyncIterator[Cloud]:
    gcp = FakeGcp(clock, kube, project=PROJECT)
    gcp.add_cluster(REGION, CLUSTER, [ZONE, "us-central1-b"])
    gcp.add_node_pool((REGION, CLUSTER), "l4", machine_type="g2-standard-8", zones=[ZONE], node_count_per_zone=1)
    gcp.add_node_pool((REGION, CLUSTER), "cpu", machine_type="n2-standard-8", zones=[ZONE], node_count_per_zone=0)
    if "nodePool: flex" in text:
        gcp.add_node_pool((REGION, CLUSTER), "flex", machine_type="g2-standard-8", zones=[ZONE], extra=FLEX_START)
    if "nodePool: dws" in text:
        gcp.add_node_pool((REGION, CLUSTER), "dws", machine_type="g2-standard-8", zones=[ZONE], extra=QUEUED)
    await gcp.start()
    provider = make_provider(gcp, clock, text)
    c = Cloud(clock, server, kube, gcp, provider, text=text)
    try:
        if start:
            await c.drive(provider.start())
        yield c
    finally:
        for p in (provider, *c.others):
            await p.aclose()
        await gcp.stop()


async def drive(c: Cloud, coro: Coroutine[Any, Any, T], *, limit: float) -> T:
    """Run ``coro``; whenever it waits only for the clock and the clusters are quiet, move the clock to the next
    timer (a poll, an operation ending, a node turning Ready), up to ``limit`` seconds of clock time."""
    sleeps = Sleeps()
    task = asyncio.create_task(counting_sleeps(coro, sleeps))
    end = c.clock.now() + limit
    try:
        while not task.done():
            await until_quiet(c.server, [("provider call", lambda: task.done() or sleeps.asleep > 0),
                                         ("fake cloud", lambda: c.gcp.quiet)])
            if task.done():
                break
            deadline = c.clock.next_deadline
            if deadline is None or deadline > end:
                raise AssertionError(f"the call waits for nothing due before {end}: it would hang")
            await c.clock.set(deadline)
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
