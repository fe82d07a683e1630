"""The fake GKE's Nodes under the node lifecycle controller: with ``heartbeats`` (as ``gangscale sim gcp`` runs)
their kubelets keep them Ready; without (the in-process default) they go ``Unknown`` within a minute, as a real
kube-controller-manager marks Nodes that have no kubelet."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.apiserver.nodehealth import NodeHealthMonitor
from gangscale.sim.gcp import FakeGcp
from tests import builders as b
from tests.conftest import wait_for
from tests.sim.gcp.client import REGION, ZONE_A, ZONE_B, Client

MINUTE = 60.0
STEP = 5.0


async def ready_of(http: KubeHTTP) -> dict[str, str]:
    page = await http.request("GET", b.NODES.path())
    return {n["metadata"]["name"]: next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready")
            for n in page["items"]}


async def step(clock: ManualClock, gcp: FakeGcp, monitor: NodeHealthMonitor, apiserver: EmbeddedAPIServer) -> None:
    await clock.advance(STEP)
    await gcp.settle()
    kubelets = gcp.nodes.kubelets
    await wait_for(lambda: not monitor.pending and (kubelets is None or not kubelets.syncing))
    await apiserver.controllers.settle()


@pytest.mark.parametrize("heartbeats", [True, False], ids=["heartbeats", "none"])
async def test_the_fakes_nodes_stay_ready_for_ten_minutes_only_with_heartbeats(
        clock: ManualClock, http: KubeHTTP, apiserver: EmbeddedAPIServer, heartbeats: bool) -> None:
    monitor = apiserver.controllers.monitor_node_health(clock)
    gcp = FakeGcp(clock, http, heartbeats=heartbeats)
    gcp.add_cluster(REGION, "c1", [ZONE_A, ZONE_B])
    await gcp.start()
    seen: list[dict[str, str]] = []
    try:
        async with aiohttp.ClientSession() as session:
            client = Client(session, gcp.url, gcp.token)
            resp = await client.create_pool("gpu", "a3-highgpu-8g", 1, [ZONE_A, ZONE_B])
            assert resp.status == 200, resp.text
        for _ in range(int(10 * MINUTE / STEP)):
            await step(clock, gcp, monitor, apiserver)
            seen.append(await ready_of(http))
    finally:
        await gcp.stop()
    assert len(seen[-1]) == 2
    if heartbeats:
        first_ready = next(i for i, states in enumerate(seen) if set(states.values()) == {"True"})
        assert all(set(states.values()) == {"True"} for states in seen[first_ready:]), seen
        leases = await http.request("GET", b.LEASES.path("kube-node-lease"))
        assert sorted(lease["spec"]["holderIdentity"] for lease in leases["items"]) == sorted(seen[-1])
    else:
        assert set(seen[-1].values()) == {"Unknown"}
        went: Any = next(i for i, states in enumerate(seen) if "Unknown" in states.values())
        assert went * STEP <= 2 * MINUTE
