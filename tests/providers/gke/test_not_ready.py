"""Nodes that never turn Ready, through the real controller and the gke provider against the fake GKE + Compute
control plane: a multi-slice gang with a broken host, and a resize-request gang whose VMs never turn Ready. GKE
reports both as made; only the Nodes say otherwise. At ``max_node_provision_time`` the controller gives up on the
scale-up (``ScaleUpTimedOut``, Provisioned=False) and releases every unit of it, so nothing the gang got is left:
no node pool, VM or Node, and the node pool's instance group back at its size.

The cluster is the demo's (:class:`gangscale.sim.driver.SimCluster` on a manual clock: the embedded API server,
the fake cloud, the provider and the controller); ``run_until`` moves the clock from one timer to the next once
everything is quiet, so the deadline is reached without waiting for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from gangscale.controller.settings import Settings
from gangscale.kube.resources import EVENTS, NODES, PODTEMPLATES, PROVREQS
from gangscale.sim.driver import SimCluster, sim_cluster
from gangscale.sim.gcp import FakeGcp
from gangscale.sim.gcp.state import Cluster
from tests.builders import pod_template, provreq
from tests.providers.gke.harness import CLUSTER, REGION, ZONE, pools

NS = "default"
PROVISION_TIME = 600.0
SETTINGS = Settings(batch_idle=0.0, batch_max=0.0, max_node_provision_time=PROVISION_TIME)
#: After the deadline: long enough to release everything, shorter than the pool's backoff (3 min), so the gang
#: is not tried again yet.
AFTER = 120.0
TPU_SELECTOR = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x4"}
NOTHING: dict[str, list[str]] = {"pools": [], "vms": [], "nodes": []}


@contextlib.asynccontextmanager
async def gke_cluster(tmp_path: Path) -> AsyncIterator[SimCluster]:
    """The harness's pools on the fake GKE, with the gke provider and the controller running."""
    async with sim_cluster(tmp_path, pools()) as sim:
        await sim.start_gke_provider()
        await sim.start_controller(SETTINGS)
        yield sim


def fake(sim: SimCluster) -> FakeGcp:
    assert sim.gcp is not None
    return sim.gcp


async def gang(sim: SimCluster, name: str, count: int, *, limits: dict[str, str],
               selector: dict[str, str] | None = None) -> None:
    template = pod_template(f"{name}-worker", limits=limits)
    if selector:
        template["template"]["spec"]["nodeSelector"] = selector
    await sim.http.request("POST", PODTEMPLATES.path(NS), body=template)
    await sim.http.request("POST", PROVREQS.path(NS), body=provreq(name, template=f"{name}-worker", count=count))


async def provisioned(sim: SimCluster, name: str) -> tuple[str, str, str]:
    pr = await sim.http.request("GET", PROVREQS.path(NS, name))
    found = next(c for c in pr["status"]["conditions"] if c["type"] == "Provisioned")
    return found["status"], found["reason"], found["message"]


async def event(sim: SimCluster, name: str, reason: str) -> str:
    items = (await sim.http.request("GET", EVENTS.path(NS))).get("items") or []
    [found] = [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]
    return str(found["message"])


def cluster(sim: SimCluster) -> Cluster:
    found = fake(sim).state.cluster(REGION, CLUSTER)
    assert found is not None
    return found


async def ours(sim: SimCluster) -> dict[str, list[str]]:
    """What gangscale made that exists now: node pools in the fake, and every VM and Node (the existing node pools
    the pool file names are made without VMs, so every VM and Node is gangscale's)."""
    nodes = (await sim.http.request("GET", NODES.path())).get("items") or []
    return {"pools": sorted(p for p in cluster(sim).pools if p.startswith("gs-")),
            "vms": sorted(vm.name for vm in fake(sim).state.vms.values()),
            "nodes": sorted(n["metadata"]["name"] for n in nodes)}


async def ready_count(sim: SimCluster) -> int:
    nodes = (await sim.http.request("GET", NODES.path())).get("items") or []
    return sum(1 for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                       for c in n["status"].get("conditions") or []))



async def test_a_two_slice_gang_with_a_broken_host_in_its_second_slice_is_released_whole(tmp_path: Path) -> None:
    async with gke_cluster(tmp_path) as sim:
        gcp = fake(sim)
        gcp.faults.operation_seconds = 10  # so that the first slice is being made when the knob is set
        start = sim.now
        await gang(sim, "multislice", 4, limits={"google.com/tpu": "4"}, selector=TPU_SELECTOR)
        await sim.run_until(start + 60, done=lambda: bool(gcp.state.container_ops))
        assert len(gcp.state.container_ops) == 1
        gcp.faults.partial_slice_hosts = 1  # the next slice: 2 VMs running, 1 Node Ready

        await sim.run_until(start + PROVISION_TIME - 1)
        made = await ours(sim)
        assert (len(made["pools"]), len(made["vms"]), len(made["nodes"])) == (2, 4, 4)
        assert gcp.faults.partial_slice_hosts is None
        assert {cluster(sim).pools[name].status for name in made["pools"]} == {"RUNNING"}  # as GKE reports it
        assert await ready_count(sim) == 3
        assert (await provisioned(sim, "multislice"))[:2] == ("False", "ScaleUpInProgress")

        await sim.run_until(start + PROVISION_TIME + AFTER)
        assert (await event(sim, "multislice", "ScaleUpTimedOut")).startswith(
            "1 of 4 new nodes were not Ready within 10m (pools tpu); every unit of the scale-up is released")
        assert (await provisioned(sim, "multislice"))[:2] == ("False", "CapacityIsNotFound")
        assert await ours(sim) == NOTHING

        # Once the pool's backoff is over the gang is tried again, and (the knob was one-shot) gets whole slices.
        await sim.run_until(start + PROVISION_TIME + 900)
        assert (await provisioned(sim, "multislice"))[:2] == ("True", "CapacityIsProvisioned")
        made = await ours(sim)
        assert (len(made["pools"]), len(made["nodes"]), await ready_count(sim)) == (2, 4, 4)


async def test_a_resize_request_gang_whose_nodes_never_turn_ready_is_released_whole(tmp_path: Path) -> None:
    async with gke_cluster(tmp_path) as sim:
        gcp = fake(sim)
        gcp.faults.never_ready = True
        mig = cluster(sim).pools["l4"].migs[ZONE]
        size = mig.target_size
        start = sim.now
        await gang(sim, "gpu-gang", 6, limits={"nvidia.com/gpu": "1"})

        await sim.run_until(start + PROVISION_TIME - 1)
        made = await ours(sim)
        assert (made["pools"], len(made["vms"]), len(made["nodes"])) == ([], 6, 6)
        assert [rr.state for rr in mig.resize_requests.values()] == ["SUCCEEDED"]
        assert mig.target_size == size + 6 and await ready_count(sim) == 0
        assert (await provisioned(sim, "gpu-gang"))[:2] == ("False", "ScaleUpInProgress")

        await sim.run_until(start + PROVISION_TIME + AFTER)
        assert (await event(sim, "gpu-gang", "ScaleUpTimedOut")).startswith(
            "6 of 6 new nodes were not Ready within 10m (pools l4); every unit of the scale-up is released")
        assert (await provisioned(sim, "gpu-gang"))[:2] == ("False", "CapacityIsNotFound")
        assert await ours(sim) == NOTHING
        assert mig.target_size == size and mig.resize_requests == {}
