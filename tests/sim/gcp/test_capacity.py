"""Capacity failures: stockout (all-or-nothing TPU slices, partial GPU pools), regional quota (synchronous 403
and asynchronous GCE_QUOTA_EXCEEDED), a busy cluster (400) and the concurrent-operations throttle (429)."""

from __future__ import annotations

import re

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import FakeGcp
from tests.sim.gcp.client import OPERATIONS, POOLS, PROJECT, REGION, ZONE_A, Client, compute_path
from tests.sim.gcp.test_node_pools import nodes

TPU = "ct5lp-hightpu-4t"
SLICE = {"placementPolicy": {"type": "COMPACT", "tpuTopology": "2x4"}}


def stockout_message(waited: str, expected: int, running: int) -> re.Pattern[str]:
    return re.compile(re.escape(
        f"Google Compute Engine: Not all instances running in IGM after {waited}. Expected {expected}, running "
        f"{running}, transitioning {expected - running}. Current errors: [GCE_STOCKOUT]: Instance '") +
        r"gke-c1-[a-z0-9-]+" + re.escape(
        f"' creation failed: The zone 'projects/{PROJECT}/zones/{ZONE_A}' does not have enough resources available "
        "to fulfill the request. '(resource type:compute)'.") + "$")


async def test_tpu_slice_is_all_or_nothing_under_stockout(gcp: FakeGcp, client: Client, clock: ManualClock,
                                                          http: KubeHTTP) -> None:
    gcp.faults.stock[(ZONE_A, TPU)] = 1  # one VM left; the 2x4 slice needs two
    gcp.faults.operation_seconds = 60
    gcp.faults.stockout_after = 600
    resp = await client.create_pool("tpu", TPU, 2, [ZONE_A], **SLICE)
    assert resp.status == 200, resp.text
    op = resp.body["name"]
    await clock.advance(60)
    assert (await client.op(op))["status"] == "RUNNING"
    mig = compute_path((await client.pool("tpu"))["instanceGroupUrls"][0])
    instances = (await client.post(f"{mig}/listManagedInstances")).body["managedInstances"]
    assert [(i["currentAction"], "instanceStatus" in i) for i in instances] == [("CREATING", False)] * 2
    assert {i["lastAttempt"]["errors"]["errors"][0]["code"] for i in instances} == {"ZONE_RESOURCE_POOL_EXHAUSTED"}
    assert gcp.state.vms == {}

    await clock.advance(540)
    done = await client.op(op)
    assert done["status"] == "DONE"
    assert done["error"]["code"] == 8
    assert stockout_message("10m0s", 2, 0).match(done["error"]["message"]), done["error"]["message"]
    assert done["statusMessage"] == done["error"]["message"]
    pool = await client.pool("tpu")
    assert pool["status"] == "ERROR"
    assert pool["conditions"] == [{"code": "GCE_STOCKOUT", "message": done["error"]["message"],
                                   "canonicalCode": "RESOURCE_EXHAUSTED"}]
    assert (await client.get(mig)).body["targetSize"] == 0
    assert gcp.state.vms == {}
    await gcp.settle()
    assert await nodes(http) == {}
    assert gcp.faults.stock[(ZONE_A, TPU)] == 1


async def test_tpu_slice_comes_up_whole_when_stock_arrives_in_time(gcp: FakeGcp, client: Client,
                                                                  clock: ManualClock, http: KubeHTTP) -> None:
    gcp.faults.stock[(ZONE_A, TPU)] = 1
    gcp.faults.stockout_after = 600
    op = (await client.create_pool("tpu", TPU, 2, [ZONE_A], **SLICE)).body["name"]
    await clock.advance(100)
    assert gcp.state.vms == {}
    gcp.faults.stock[(ZONE_A, TPU)] = 2
    await clock.advance(10)  # the next retry
    done = await client.op(op)
    assert (done["status"], "error" in done) == ("DONE", False)
    assert len({vm.created_at for vm in gcp.state.vms.values()}) == 1  # all at once
    assert (await client.pool("tpu"))["status"] == "RUNNING"
    await gcp.settle()
    assert len(await nodes(http)) == 2
    assert gcp.faults.stock[(ZONE_A, TPU)] == 0


@pytest.mark.parametrize(("machine", "grant", "stock"), [
    ("a3-highgpu-8g", 1, None),
    ("e2-standard-4", None, 1),
], ids=["gpu-partial-grant", "cpu-stock"])
async def test_pools_come_up_partially_under_stockout(gcp: FakeGcp, client: Client, clock: ManualClock,
                                                      http: KubeHTTP, machine: str, grant: int | None,
                                                      stock: int | None) -> None:
    gcp.faults.partial_gpu_grant = grant
    if stock is not None:
        gcp.faults.stock[(ZONE_A, machine)] = stock
    gcp.faults.stockout_after = 300
    op = (await client.create_pool("pool", machine, 3, [ZONE_A])).body["name"]
    assert gcp.faults.partial_gpu_grant is None  # one-shot
    await clock.advance(299)
    assert (await client.op(op))["status"] == "RUNNING"
    await clock.advance(1)
    done = await client.op(op)
    assert stockout_message("5m0s", 3, 1).match(done["error"]["message"]), done["error"]["message"]
    pool = await client.pool("pool")
    assert (pool["status"], pool["conditions"][0]["code"]) == ("RUNNING_WITH_ERROR", "GCE_STOCKOUT")
    await gcp.settle()
    assert len(await nodes(http)) == 1


async def test_regional_quota_refuses_a_create_synchronously(gcp: FakeGcp, client: Client) -> None:
    gcp.add_node_pool((REGION, "c1"), "sys", machine_type="e2-standard-8", zones=[ZONE_A], node_count_per_zone=2)
    gcp.faults.cpu_quota[REGION] = 200
    resp = await client.create_pool("gpu", "a3-highgpu-8g", 1, [ZONE_A])
    assert resp.status == 403
    error = resp.error
    assert (error["status"], error["errors"][0]["reason"]) == ("PERMISSION_DENIED", "forbidden")
    assert error["message"] == (
        "Insufficient regional quota to satisfy request: resource \"CPUS\": request requires '208.0' and is short "
        "'24.0'. project has a quota of '200.0' with '184.0' available. View and manage quotas at "
        f"https://console.cloud.google.com/iam-admin/quotas?usage=USED&project={PROJECT}")
    assert [p["name"] for p in (await client.get(POOLS)).body["nodePools"]] == ["sys"]
    assert (await client.get(OPERATIONS)).body == {}
    resize = await client.post(f"{POOLS}/sys:setSize", {"nodeCount": 30})
    assert (resize.status, resize.error["message"][:40]) == (403, "Insufficient regional quota to satisfy r")
    assert len(gcp.state.vms) == 2


async def test_asynchronous_quota_failure_ends_the_operation_with_gce_quota_exceeded(
        gcp: FakeGcp, client: Client, clock: ManualClock) -> None:
    gcp.faults.async_quota_next = 1
    gcp.faults.operation_seconds = 30
    gcp.faults.stockout_after = 900
    op = (await client.create_pool("gpu", "a3-highgpu-8g", 2, [ZONE_A])).body["name"]
    await clock.advance(30)
    done = await client.op(op)
    assert done["status"] == "DONE"
    assert "Current errors: [GCE_QUOTA_EXCEEDED]: Instance 'gke-c1-gpu-" in done["error"]["message"]
    assert done["error"]["message"].endswith(f"creation failed: Quota 'CPUS' exceeded.  Limit: 0.0 in region {REGION}.")
    pool = await client.pool("gpu")
    assert (pool["status"], pool["conditions"][0]["code"]) == ("ERROR", "GCE_QUOTA_EXCEEDED")
    assert gcp.state.vms == {}
    second = (await client.create_pool("gpu2", "a3-highgpu-8g", 1, [ZONE_A])).body["name"]
    await clock.advance(30)
    assert "error" not in await client.op(second)


async def test_busy_cluster_and_running_operations_get_failed_precondition(gcp: FakeGcp, client: Client,
                                                                           clock: ManualClock) -> None:
    gcp.faults.busy = True
    busy = await client.create_pool("p1", "e2-standard-4", 1, [ZONE_A])
    assert (busy.status, busy.error["status"], busy.error["errors"][0]["reason"]) == (
        400, "FAILED_PRECONDITION", "failedPrecondition")
    assert re.fullmatch(r"Operation operation-\d{13}-[0-9a-f]{8} is currently upgrading cluster c1\. Please wait "
                        r"and try again once it is done\.", busy.error["message"])
    gcp.faults.busy = False
    gcp.faults.operation_seconds = 60
    first = (await client.create_pool("p1", "e2-standard-4", 1, [ZONE_A])).body["name"]
    same_pool = await client.delete(f"{POOLS}/p1")
    assert (same_pool.status, same_pool.error["message"]) == (
        400, f"Operation {first} is currently creating a node pool for cluster c1. Please wait and try again once "
             "it is done.")
    assert (await client.create_pool("p2", "e2-standard-4", 1, [ZONE_A])).status == 200  # other pools may proceed
    gcp.faults.serialize_cluster_ops = True
    assert (await client.create_pool("p3", "e2-standard-4", 1, [ZONE_A])).status == 400
    await clock.advance(60)
    assert (await client.create_pool("p3", "e2-standard-4", 1, [ZONE_A])).status == 200


async def test_too_many_operations_get_429(gcp: FakeGcp, client: Client, clock: ManualClock) -> None:
    gcp.faults.operation_seconds = 60
    gcp.faults.max_concurrent_ops = 2
    assert (await client.create_pool("p1", "e2-standard-4", 1, [ZONE_A])).status == 200
    assert (await client.create_pool("p2", "e2-standard-4", 1, [ZONE_A])).status == 200
    throttled = await client.create_pool("p3", "e2-standard-4", 1, [ZONE_A])
    assert throttled.status == 429
    assert (throttled.error["status"], throttled.error["message"]) == (
        "RESOURCE_EXHAUSTED", 'Too many operations: cluster "c1" hits the concurrent operations quota 2, please try '
                              "again later.")
    await clock.advance(60)
    assert (await client.create_pool("p3", "e2-standard-4", 1, [ZONE_A])).status == 200
