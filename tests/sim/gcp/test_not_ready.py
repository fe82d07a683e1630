"""Broken kubelets: a TPU slice whose hosts do not all turn Ready (``partial_slice_hosts``) and VMs whose Nodes
never turn Ready (``never_ready``). GKE still reports the pools as running; only the Nodes tell."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import FakeGcp
from tests.sim.gcp.client import ZONE_A, Client
from tests.sim.gcp.test_capacity import SLICE, TPU
from tests.sim.gcp.test_node_pools import nodes, ready

#: Long after every Ready timer: a Node not Ready by then never will be.
FOREVER = 86400.0


def ready_reason(node: dict[str, Any]) -> tuple[str, str]:
    found = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    return found["status"], found["reason"]


async def pool_nodes(http: KubeHTTP, pool: str) -> list[dict[str, Any]]:
    return [n for n in (await nodes(http)).values() if n["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == pool]


@pytest.mark.parametrize(("healthy", "ready_states"), [
    (1, ["False", "True"]),
    (0, ["False", "False"]),
    (2, ["True", "True"]),
], ids=["one-of-two", "none", "all"])
async def test_a_partial_slice_runs_with_every_vm_but_only_some_nodes_turn_ready(
        gcp: FakeGcp, client: Client, clock: ManualClock, http: KubeHTTP, healthy: int,
        ready_states: list[str]) -> None:
    gcp.faults.partial_slice_hosts = healthy
    gcp.faults.ready_seconds = 30
    resp = await client.create_pool("tpu", TPU, 2, [ZONE_A], **SLICE)
    assert resp.status == 200, resp.text
    assert gcp.faults.partial_slice_hosts is None  # one-shot
    done = await client.op(resp.body["name"])
    assert (done["status"], "error" in done) == ("DONE", False)
    assert (await client.pool("tpu"))["status"] == "RUNNING"
    assert [vm.status(clock.now()) for vm in gcp.state.vms.values()] == ["RUNNING", "RUNNING"]

    await clock.advance(FOREVER)
    await gcp.settle()
    found = await pool_nodes(http, "tpu")
    assert sorted(ready(n) for n in found) == ready_states
    assert {ready_reason(n) for n in found if ready(n) == "False"} <= {("False", "KubeletNotReady")}

    # Only that slice: the next one comes up whole.
    await client.create_pool("tpu2", TPU, 2, [ZONE_A], **SLICE)
    await clock.advance(30)
    await gcp.settle()
    assert [ready(n) for n in await pool_nodes(http, "tpu2")] == ["True", "True"]


@pytest.mark.parametrize(("machine", "count", "extra"), [
    ("e2-standard-4", 2, {}),
    (TPU, 1, {"placementPolicy": {"type": "COMPACT", "tpuTopology": "2x2"}}),
], ids=["cpu-pool", "single-host-tpu"])
async def test_partial_slice_hosts_waits_for_a_multi_host_slice(
        gcp: FakeGcp, client: Client, http: KubeHTTP, machine: str, count: int, extra: dict[str, Any]) -> None:
    gcp.faults.partial_slice_hosts = 0
    resp = await client.create_pool("other", machine, count, [ZONE_A], **extra)
    assert resp.status == 200, resp.text
    await gcp.settle()
    assert {ready(n) for n in await pool_nodes(http, "other")} == {"True"}
    assert gcp.faults.partial_slice_hosts == 0  # still there for the next multi-host slice


async def test_never_ready_breaks_new_vms_only_and_for_good(gcp: FakeGcp, client: Client, clock: ManualClock,
                                                            http: KubeHTTP) -> None:
    gcp.faults.ready_seconds = 10
    await client.create_pool("before", "e2-standard-4", 1, [ZONE_A])
    gcp.faults.never_ready = True
    resp = await client.create_pool("broken", "e2-standard-4", 2, [ZONE_A])
    done = await client.op(resp.body["name"])
    assert (done["status"], "error" in done) == ("DONE", False)
    assert (await client.pool("broken"))["status"] == "RUNNING"
    await clock.advance(FOREVER)
    await gcp.settle()
    assert [ready_reason(n) for n in await pool_nodes(http, "broken")] == [("False", "KubeletNotReady")] * 2
    assert [ready(n) for n in await pool_nodes(http, "before")] == ["True"]  # made before the knob: unharmed

    gcp.faults.never_ready = False
    await client.create_pool("after", "e2-standard-4", 1, [ZONE_A])
    await clock.advance(FOREVER)
    await gcp.settle()
    assert [ready(n) for n in await pool_nodes(http, "after")] == ["True"]
    assert [ready(n) for n in await pool_nodes(http, "broken")] == ["False", "False"]  # not repaired
