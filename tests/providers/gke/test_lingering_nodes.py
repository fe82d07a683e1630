"""Nodes that outlive a rolled-back scale-up are no room to plan on.

On GKE a node pool's delete operation ends when its VMs are gone, but the Node objects stay until the cloud node
lifecycle controller notices the missing VMs (``GcpFaults.node_delete_seconds``). A gang whose second slice stocked
out has its first slice deleted by the provider; if the re-plan that follows took that slice's lingering Nodes
for free capacity, the gang would be told ``Provisioned=True`` on nodes about to vanish (found by
``tests/crash/test_gke_kill_points.py::…[during-the-rollback]``, intermittently).

Through the real controller and the gke provider against the fake GKE, on a manual clock
(``tests.providers.gke.cluster``): the zone has stock for one slice only, so the 2-slice gang can never be had.
"""

from __future__ import annotations

from pathlib import Path

from gangscale.kube.resources import EVENTS, NODES
from tests.providers.gke.cluster import TPU_SELECTOR, cluster, fake, gang, gke_cluster, ours, provisioned
from tests.providers.gke.harness import ZONE

LINGER = 30.0


async def test_a_rolled_back_slices_lingering_nodes_are_not_planned_onto(tmp_path: Path) -> None:
    async with gke_cluster(tmp_path) as sim:
        gcp = fake(sim)
        gcp.faults.stock[(ZONE, "ct5lp-hightpu-4t")] = 2  # one 2-host slice
        gcp.faults.node_delete_seconds = LINGER
        start = sim.now
        await gang(sim, "multislice", 4, limits={"google.com/tpu": "4"}, selector=TPU_SELECTOR)

        # The second slice stocks out; the provider deletes the first one. Its pool and VMs are gone, its Nodes not.
        await sim.run_until(start + LINGER / 2)
        made = await ours(sim)
        assert (made["pools"], made["vms"], len(made["nodes"])) == ([], [], 2), made
        assert not any(p.startswith("gs-") for p in cluster(sim).pools)

        await sim.run_until(start + 1800)
        events = (await sim.http.request("GET", EVENTS.path("default"))).get("items") or []
        told = [e["message"] for e in events if e["involvedObject"]["name"] == "multislice"
                and e["reason"] == "Provisioned"]
        assert told == [], f"provisioned on a slice that was being deleted: {told}"
        status, reason, _ = await provisioned(sim, "multislice")
        assert (status, reason) == ("False", "CapacityIsNotFound")
        assert (await sim.http.request("GET", NODES.path())).get("items") in (None, [])
        assert await ours(sim) == {"pools": [], "vms": [], "nodes": []}
