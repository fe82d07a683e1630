"""``gangscale run --provider gke`` killed (SIGKILL) at each step of an obtain, against the fake GKE + Compute
control plane: the next process finishes or undoes what the first left, with no duplicate node pool or VM and
no orphan.

The fake runs in this process (wall clock) and holds the cloud call that follows the chosen moment; the
harness kills gangscale while it waits for the answer, and the held call is dropped unapplied. Judged from the
fake's state and the API server: the PR ends ``Provisioned=True`` with exactly its slices (each 2 Ready nodes)
or VMs, or not provisioned with nothing of it left, and every node pool or VM gangscale made belongs to the
PR's recorded scale-up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gangscale.clock import SystemClock
from gangscale.config import parse_pool_yaml
from gangscale.providers.gke import names
from gangscale.sim.gcp import FakeGcp, Hold
from gangscale.sim.gcp.standalone import set_up
from tests.cli.test_run_gke import CLUSTER, GKE, PROJECT, REGION, ZONE
from tests.crash.harness import (
    TPU_TEMPLATE,
    Cluster,
    crash_cluster,
    ready,
    recorded_tokens,
    tracebacks,
    wait_until,
    wait_until_async,
)

POOLS = f"""\
nodePools:
  - name: tpu
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: {ZONE}
    maxUnits: 6
    gke: {GKE}, mode: slice}}
  - name: l4
    machineType: g2-standard-8
    zone: {ZONE}
    maxUnits: 8
    gke: {GKE}, mode: flex-start, nodePool: l4}}
  - name: cpu
    machineType: n2-standard-8
    allocatable: {{cpu: "7", memory: 28Gi}}
    zone: {ZONE}
    maxUnits: 8
    gke: {GKE}, mode: resize, nodePool: cpu}}
"""
L4_TEMPLATE = {"containers": [{"name": "w", "image": "trainer:v1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
CPU_TEMPLATE = {"nodeSelector": {"cloud.google.com/gke-nodepool": "cpu"},
                "containers": [{"name": "w", "image": "worker:v1", "resources": {"requests": {"cpu": "6"}}}]}
NODE_POOLS = r"/clusters/c1/nodePools$"
OPERATION = r"/locations/us-central1/operations/operation-"


@contextlib.asynccontextmanager
async def gke_cluster(workdir: Path) -> AsyncIterator[tuple[Cluster, FakeGcp]]:
    async with crash_cluster(workdir) as cluster:
        cluster.pools.write_text(POOLS)
        gcp = FakeGcp(SystemClock(), cluster.http, project=PROJECT)
        gcp.faults.ready_seconds = 0.3
        # As on GKE, a Node outlives its deleted VM for a while (the node lifecycle controller removes it).
        gcp.faults.node_delete_seconds = 0.5
        set_up(gcp, parse_pool_yaml(POOLS).pools)
        await gcp.start()
        try:
            yield cluster, gcp
        finally:
            await gcp.stop()


async def start(cluster: Cluster, gcp: FakeGcp, *flags: str) -> Any:
    host = gcp.url.removeprefix("http://")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_"))}
    env |= {"GCE_METADATA_HOST": host, "GCE_METADATA_IP": host, "CLOUDSDK_CONFIG": str(cluster.workdir / "gcloud")}
    return await cluster.start_gangscale("--provider", "gke", "--gke-container-endpoint", gcp.url,
                                         "--gke-compute-endpoint", f"{gcp.url}/compute/v1", *flags, env=env)


async def kill_when_held(cluster: Cluster, gcp: FakeGcp, hold: Hold, run: Any) -> None:
    await wait_until(hold.held.is_set, f"a call to be held ({hold.method} {hold.path})")
    await run.kill()
    hold.released.set()  # dropped unapplied: the killed process never got an answer


def ours(gcp: FakeGcp) -> dict[str, str]:
    """Node pools and VMs gangscale made that exist now: name -> the claim of the token that made it (in its name, or
    in the name of the resize request that made it)."""
    cluster = gcp.state.cluster(REGION, CLUSTER)
    assert cluster is not None
    made = {name: name for name in cluster.pools if name.startswith("gs-")}
    made |= {vm.name: vm.name for vm in gcp.state.vms.values() if vm.name.startswith("gs-")}
    made |= {vm.name: vm.resize_request for vm in gcp.state.vms.values()
             if (vm.resize_request or "").startswith("gs-")}
    return {name: by.split("-")[1] for name, by in made.items()}


async def outcome(cluster: Cluster, name: str, gcp: FakeGcp) -> bool:
    provisioned = await cluster.condition(name, "Provisioned")
    if provisioned is None:
        return False
    return provisioned["status"] == "True" or (provisioned["reason"] == "CapacityIsNotFound" and not ours(gcp))


async def judge(cluster: Cluster, gcp: FakeGcp, name: str, units: int, hosts: int) -> bool:
    """True if provisioned (with exactly its units), False if not (with nothing left); fails on anything else."""
    provisioned = await cluster.condition(name, "Provisioned")
    assert provisioned is not None
    claims = {names.claim(token) for token in recorded_tokens(await cluster.pr(name))}
    made = ours(gcp)
    if provisioned["status"] != "True":
        assert made == {}, f"not provisioned ({provisioned['message']}) but left behind: {made}"
        return False
    assert set(made.values()) <= claims, f"node pools or VMs of no recorded scale-up: {made}"
    slices = [n for n in made if not any(vm.name == n for vm in gcp.state.vms.values())]
    assert len(slices or made) == units, f"{len(slices or made)} units made for {units}: {sorted(made)}"
    nodes = {n["metadata"]["name"]: n for n in await cluster.list_nodes()}
    gs_nodes = [n for n, obj in nodes.items() if n in made or obj["metadata"]["labels"].get(
                "cloud.google.com/gke-nodepool", "").startswith("gs-")]
    assert len(gs_nodes) == units * hosts and all(ready(nodes[n]) for n in gs_nodes), gs_nodes
    return True


SLICE_POINTS = [
    pytest.param(Hold("POST", NODE_POOLS), {}, id="before-the-first-create"),
    pytest.param(Hold("GET", OPERATION), {}, id="after-the-create-call"),
    pytest.param(Hold("GET", OPERATION, skip=1), {"operation_seconds": 2.0}, id="while-polling"),
    pytest.param(Hold("POST", r"/listManagedInstances$"), {}, id="after-done"),
    pytest.param(Hold("POST", NODE_POOLS, skip=1), {}, id="after-the-first-slice"),
    pytest.param(Hold("DELETE", r"/nodePools/gs-"), {"stock": 2}, id="during-the-rollback"),
]


@pytest.mark.parametrize(("hold", "faults"), SLICE_POINTS)
async def test_a_two_slice_gang_is_whole_or_absent_after_a_kill(tmp_path: Path, hold: Hold,
                                                                faults: dict[str, Any]) -> None:
    async with gke_cluster(tmp_path) as (cluster, gcp):
        gcp.faults.operation_seconds = faults.get("operation_seconds", 0.0)
        if "stock" in faults:
            gcp.faults.stock[(ZONE, "ct5lp-hightpu-4t")] = faults["stock"]
        gcp.holds.append(hold)
        await cluster.template("slice-host", TPU_TEMPLATE)
        first = await start(cluster, gcp)
        await cluster.provreq("multislice", "slice-host", 4)
        await kill_when_held(cluster, gcp, hold, first)

        second = await start(cluster, gcp)
        await wait_until_async(lambda: outcome(cluster, "multislice", gcp), "the gang's outcome")
        provisioned = await judge(cluster, gcp, "multislice", units=2, hosts=2)
        assert provisioned == ("stock" not in faults)
        assert await second.stop() == 0 and tracebacks(second) == []


VM_POINTS = [
    pytest.param("l4-worker", L4_TEMPLATE, 6, Hold("POST", r"/resizeRequests$"), id="flex-before-the-resize-request"),
    pytest.param("l4-worker", L4_TEMPLATE, 6, Hold("GET", r"/zones/us-central1-a/operations/"),
                 id="flex-after-the-resize-request"),
    pytest.param("l4-worker", L4_TEMPLATE, 6, Hold("GET", r"/resizeRequests/gs-"), id="flex-while-polling-the-request"),
    pytest.param("l4-worker", L4_TEMPLATE, 6, Hold("GET", r"/instances/"), id="flex-while-finding-its-vms"),
    pytest.param("cpu-worker", CPU_TEMPLATE, 4, Hold("POST", r"/createInstances$"),
                 id="resize-before-create-instances"),
    pytest.param("cpu-worker", CPU_TEMPLATE, 4, Hold("POST", r"/listManagedInstances$"),
                 id="resize-while-watching-the-vms"),
]


@pytest.mark.parametrize(("template", "spec", "vms", "hold"), VM_POINTS)
async def test_the_vms_of_a_gang_are_all_there_or_none_after_a_kill(tmp_path: Path, template: str,
                                                                   spec: dict[str, Any], vms: int, hold: Hold) -> None:
    """Six L4 VMs of the flex-start pool (one resize request), or four CPU VMs of the resize pool (createInstances)."""
    async with gke_cluster(tmp_path) as (cluster, gcp):
        gcp.holds.append(hold)
        await cluster.template(template, spec)
        first = await start(cluster, gcp)
        await cluster.provreq("gang", template, vms)
        await kill_when_held(cluster, gcp, hold, first)

        second = await start(cluster, gcp)
        await wait_until_async(lambda: outcome(cluster, "gang", gcp), "the gang's outcome")
        assert await judge(cluster, gcp, "gang", units=vms, hosts=1)
        requests = [rr.name for mig in gcp.state.migs.values() for rr in mig.resize_requests.values()]
        # The repeat after the restart found the first one's resize request, or made it: never two.
        assert len(requests) == (1 if template == "l4-worker" else 0), requests
        assert await second.stop() == 0 and tracebacks(second) == []


async def test_a_slice_whose_second_host_registers_late_is_not_taken_for_a_half_removed_one(tmp_path: Path) -> None:
    """Issue 26, found by a fault campaign after a leader takeover: with ``provisionedWhen: Requested`` the request is
    Provisioned when GKE grants the slice, before its hosts register; the new leader's scale-down took the slice,
    whose first host was in its view and whose second was not yet, for one left half-removed, and removed it while
    booked. Here the first process is killed once it has written Provisioned=True, before either host registered;
    the second process takes over, its first host registers, and the second only seconds later
    (``register_spread_seconds``): the second process must keep the slice."""
    async with gke_cluster(tmp_path) as (cluster, gcp):
        gcp.faults.register_seconds = 8.0
        gcp.faults.register_spread_seconds = 5.0
        await cluster.template("slice-host", TPU_TEMPLATE)
        first = await start(cluster, gcp)
        await cluster.provreq("requested", "slice-host", 2, parameters={"provisionedWhen": "Requested"})
        await wait_until_async(lambda: provisioned(cluster, "requested"), "Provisioned=True on the grant")
        await first.kill()
        pools = set(ours(gcp))
        assert len(pools) == 1, pools
        assert await cluster.pr_nodes("requested") == [], "a host registered before the takeover"

        second = await start(cluster, gcp, "--scale-down-unneeded-time", "1s")

        async def settled() -> bool:
            nodes = await cluster.pr_nodes("requested")
            return set(ours(gcp)) != pools or (len(nodes) == 2 and all(ready(n) for n in nodes))

        await wait_until_async(settled, "both hosts of the slice Ready, or the slice removed")
        assert set(ours(gcp)) == pools, "the slice was removed while its second host was registering"
        assert "missing hosts" not in second.text()
        assert await second.stop() == 0 and tracebacks(second) == []


async def provisioned(cluster: Cluster, name: str) -> bool:
    cond = await cluster.condition(name, "Provisioned")
    return cond is not None and cond["status"] == "True"
