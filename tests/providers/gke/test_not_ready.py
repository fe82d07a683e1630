"""Nodes that never turn Ready, through the real controller and the gke provider against the fake GKE + Compute
control plane: a multi-slice gang with a broken host, and a gang of VMs added to an existing node pool whose VMs
never turn Ready. GKE reports both as made; only the Nodes say otherwise. At ``max_node_provision_time`` the
controller gives up on the scale-up (``ScaleUpTimedOut``, Provisioned=False) and releases every unit of it, so
nothing the gang got is left: no node pool, VM or Node, and the node pool's instance group back at its size.

The cluster is the demo's (:class:`gangscale.sim.driver.SimCluster` on a manual clock: the embedded API server,
the fake cloud, the provider and the controller); ``run_until`` moves the clock from one timer to the next once
everything is quiet, so the deadline is reached without waiting for it.
"""

from __future__ import annotations

from pathlib import Path

from tests.providers.gke.cluster import (
    AFTER,
    NOTHING,
    PROVISION_TIME,
    TPU_SELECTOR,
    cluster,
    event,
    fake,
    gang,
    gke_cluster,
    ours,
    provisioned,
    ready_count,
)
from tests.providers.gke.harness import ZONE


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


async def test_a_resize_gang_whose_nodes_never_turn_ready_is_released_whole(tmp_path: Path) -> None:
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
        assert mig.target_size == size + 6 and await ready_count(sim) == 0
        assert (await provisioned(sim, "gpu-gang"))[:2] == ("False", "ScaleUpInProgress")

        await sim.run_until(start + PROVISION_TIME + AFTER)
        assert (await event(sim, "gpu-gang", "ScaleUpTimedOut")).startswith(
            "6 of 6 new nodes were not Ready within 10m (pools l4); every unit of the scale-up is released")
        assert (await provisioned(sim, "gpu-gang"))[:2] == ("False", "CapacityIsNotFound")
        assert await ours(sim) == NOTHING
        assert mig.target_size == size and mig.resize_requests == {}
