"""The gke provider's slice and resize modes against the fake GKE + Compute control plane: what an obtain makes, what
a lookup finds (also from a new provider, as after a restart), what a release removes, and how the nodes are
recognised. The flex-start and queued-provisioning modes: ``test_flexstart.py``, ``test_queued.py``."""

from __future__ import annotations

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.base import ErrorClass, NodeRef, ProviderError
from gangscale.providers.gke import names
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests.providers.gke.harness import ZONE, cloud, make_provider

TOKEN = "4d6f7e1a-0b2c-4d5e-8f90-a1b2c3d4e5f6-0123456789ab-0"
TPU_LABELS = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
              "cloud.google.com/gke-tpu-topology": "2x4"}


async def test_two_tpu_slices_are_two_node_pools_of_two_nodes_with_gkes_labels(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        got = await c.drive(c.provider.obtain("tpu", 2, token=TOKEN, deadline=c.deadline()))
        slices = [names.unit_name(TOKEN, 0), names.unit_name(TOKEN, 1)]
        assert [unit.unit_id for unit in got.units] == slices and got.incomplete == ()
        assert all(len(unit.nodes) == 2 for unit in got.units)
        assert {name: status for name, status in c.node_pools().items() if name.startswith("gs-")} == {
            slices[0]: "RUNNING", slices[1]: "RUNNING"}
        assert c.calls("POST", "/nodePools") == 2
        await c.gcp.settle()
        nodes = await c.nodes()
        for unit in got.units:
            for name in unit.nodes:
                labels = nodes[name]["metadata"]["labels"]
                assert labels["cloud.google.com/gke-nodepool"] == unit.unit_id
                assert {k: labels[k] for k in TPU_LABELS} == TPU_LABELS
                assert nodes[name]["spec"]["providerID"] == f"gce://demo-project/{ZONE}/{name}"
                assert {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"} in \
                    nodes[name]["spec"]["taints"]
                assert c.provider.node_ref(name, labels) == NodeRef("tpu", unit.unit_id, names.claim(TOKEN))

        again = await c.drive(c.provider.obtain("tpu", 2, token=TOKEN, deadline=c.deadline()))
        assert again == got and c.calls("POST", "/nodePools") == 4  # both answered 409 and were adopted
        assert len(c.node_pools()) == 4  # l4, cpu and the two slices: nothing made twice
        assert await c.drive((await c.restarted()).lookup(TOKEN)) == got

        await c.drive(c.provider.release("tpu", slices, token=TOKEN))
        assert set(c.node_pools()) == {"l4", "cpu"}
        assert await c.drive((await c.restarted()).lookup(TOKEN)) is None


async def test_six_single_gpu_vms_come_through_one_create_instances_call(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        got = await c.drive(c.provider.obtain("l4", 6, token=TOKEN, deadline=c.deadline()))
        vms = [names.unit_name(TOKEN, i) for i in range(6)]
        assert [(u.unit_id, u.nodes) for u in got.units] == [(vm, (vm,)) for vm in vms]
        assert c.calls("POST", "/resizeRequests") == 0 and c.calls("POST", "/createInstances") == 1
        assert got.expires_at is None  # ordinary VMs: no run duration
        await c.gcp.settle()
        nodes = await c.nodes()
        assert set(vms) <= set(nodes)
        labels = nodes[vms[0]]["metadata"]["labels"]
        assert labels["cloud.google.com/gke-nodepool"] == "l4" and "gangscale.io/token" not in labels
        assert c.provider.node_ref(vms[0], labels) == NodeRef("l4", vms[0], names.claim(TOKEN))
        first = next(n for n in nodes if n not in vms)  # the node pool's own node: not gangscale's
        assert c.provider.node_ref(first, nodes[first]["metadata"]["labels"]) == NodeRef("l4", None, None)

        assert await c.drive((await c.restarted()).lookup(TOKEN)) == got
        await c.drive(c.provider.release("l4", vms[:2], token=TOKEN))
        await c.gcp.settle()
        assert not set(vms[:2]) & set(await c.nodes())
        assert set(vms[2:]) <= set(await c.nodes())


async def test_resize_mode_creates_the_named_vms_and_deletes_them(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        got = await c.drive(c.provider.obtain("cpu", 3, token=TOKEN, deadline=c.deadline()))
        vms = [names.unit_name(TOKEN, i) for i in range(3)]
        assert [u.unit_id for u in got.units] == vms
        assert c.calls("POST", "/createInstances") == 1
        again = await c.drive(c.provider.obtain("cpu", 3, token=TOKEN, deadline=c.deadline()))
        assert again == got and c.gcp.state.migs and sum(
            1 for vm in c.gcp.state.vms.values() if vm.name.startswith("gs-")) == 3
        await c.drive(c.provider.release("cpu", vms, token=TOKEN))
        assert await c.drive((await c.restarted()).lookup(TOKEN)) is None


async def test_a_slice_costs_four_cloud_calls_when_nothing_waits(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    """Create the node pool, see its operation DONE, read the pool, list its VMs: the calls docs/benchmarks.md
    counts per slice (with a zero-delay cloud), after one list of the cluster's node pools per obtain (the sweep of
    node pools left in ERROR)."""
    async with cloud(clock, apiserver, http) as c:
        before = len(c.provider.calls)
        await c.drive(c.provider.obtain("tpu", 3, token=TOKEN, deadline=c.deadline()))
        calls = [(method, url.rsplit("/", 1)[-1].split("-")[0]) for method, url in c.provider.calls[before:]]
        assert calls == [("GET", "nodePools")] + [("POST", "nodePools"), ("GET", "operation"), ("GET", "gs")] * 3 + \
            [("POST", "listManagedInstances")] * 3


async def test_a_provider_without_the_lease_changes_nothing_but_still_reads(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        got = await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))
        deposed = make_provider(c.gcp, clock)
        c.others.append(deposed)
        deposed.http.fence = lambda: False
        await c.drive(deposed.start())
        writes = sum(1 for call in c.gcp.calls if call.method != "GET")

        with pytest.raises(ProviderError) as info:
            await c.drive(deposed.obtain("tpu", 1, token=TOKEN.replace("0123", "4567"), deadline=c.deadline()))
        with pytest.raises(ProviderError):
            await c.drive(deposed.release("tpu", [unit.unit_id for unit in got.units], token=TOKEN))

        assert (info.value.code, info.value.error_class, info.value.rolled_back) == (
            "NOT_LEADER", ErrorClass.TRANSIENT, False)
        assert sum(1 for call in c.gcp.calls if call.method != "GET") == writes
        assert await c.drive(deposed.lookup(TOKEN)) == got
