"""compute v1 MIGs under the fake's node pools: get, listManagedInstances, resize, createInstances and
deleteInstances with ``requestId`` replay, resize requests (SUCCEEDED all at once, FAILED rolled back), and
zoneOperations get/wait."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import FakeGcp
from tests.conftest import wait_for
from tests.sim.gcp.client import PROJECT, REGION, ZONE_A, Client, compute_path
from tests.sim.gcp.test_node_pools import nodes

GPU = "a3-highgpu-8g"
OPS = f"/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/operations"


async def gpu_mig(gcp: FakeGcp, client: Client, count: int = 1, *, flex_start: bool = False) -> str:
    """A GPU pool's MIG; ``flex_start``: a flex-start pool (Compute Engine takes resize requests only for those)."""
    extra = {"config": {"flexStart": True}} if flex_start else None
    gcp.add_node_pool((REGION, "c1"), "gpu", machine_type=GPU, zones=[ZONE_A], node_count_per_zone=count, extra=extra)
    return compute_path((await client.pool("gpu"))["instanceGroupUrls"][0])


async def managed(client: Client, mig: str) -> list[dict[str, Any]]:
    resp = await client.post(f"{mig}/listManagedInstances")
    assert resp.status == 200, resp.text
    found: list[dict[str, Any]] = resp.body.get("managedInstances", [])
    return found


async def test_get_and_list_managed_instances(gcp: FakeGcp, client: Client) -> None:
    mig = await gpu_mig(gcp, client, 2)
    got = (await client.get(mig)).body
    assert (got["kind"], got["targetSize"], got["status"]["isStable"]) == ("compute#instanceGroupManager", 2, True)
    assert got["baseInstanceName"] + "-grp" == got["name"]
    assert got["zone"] == f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE_A}"
    assert got["currentActions"]["none"] == 2 and got["currentActions"]["creating"] == 0
    instances = await managed(client, mig)
    assert [(i["currentAction"], i["instanceStatus"]) for i in instances] == [("NONE", "RUNNING")] * 2
    first = instances[0]
    assert first["instance"] == (f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/"
                                 f"instances/{first['name']}")
    assert first["name"].startswith(got["baseInstanceName"] + "-")
    vm = (await client.get(compute_path(first["instance"]))).body
    assert (vm["name"], vm["status"], vm["machineType"].rsplit("/", 1)[1]) == (first["name"], "RUNNING", GPU)


async def test_resize_with_request_id_is_applied_once(gcp: FakeGcp, client: Client, http: KubeHTTP) -> None:
    mig = await gpu_mig(gcp, client)
    gcp.faults.stock[(ZONE_A, GPU)] = 2
    request_id = str(uuid.uuid4())
    first = await client.post(f"{mig}/resize", params={"size": "4", "requestId": request_id})
    assert first.status == 200, first.text
    op = first.body
    assert (op["operationType"], op["clientOperationId"], op["kind"]) == (
        "compute.instanceGroupManagers.resize", request_id, "compute#operation")
    assert op["targetLink"] == f"https://www.googleapis.com/compute/v1{mig[len('/compute/v1'):]}"
    replay = await client.post(f"{mig}/resize", params={"size": "9", "requestId": request_id})
    assert (replay.status, replay.body["name"], replay.body["status"]) == (200, op["name"], "DONE")
    assert (await client.get(mig)).body["targetSize"] == 4
    instances = await managed(client, mig)
    creating = [i for i in instances if i["currentAction"] == "CREATING"]
    assert len(creating) == 1 and "instanceStatus" not in creating[0]
    error = creating[0]["lastAttempt"]["errors"]["errors"][0]
    assert (error["code"], error["message"]) == (
        "ZONE_RESOURCE_POOL_EXHAUSTED", f"The zone 'projects/{PROJECT}/zones/{ZONE_A}' does not have enough "
                                        "resources available to fulfill the request.")
    assert (await client.get(mig)).body["currentActions"]["creating"] == 1
    await gcp.settle()
    assert len(await nodes(http)) == 3
    zero = await client.post(f"{mig}/resize", params={"size": "1", "requestId": "00000000-0000-0000-0000-000000000000"})
    assert (zero.status, zero.error["status"]) == (400, "INVALID_ARGUMENT")


async def test_quota_exceeded_instances_say_so(gcp: FakeGcp, client: Client) -> None:
    mig = await gpu_mig(gcp, client)
    gcp.faults.cpu_quota[REGION] = 300.0  # 208 used; a second a3-highgpu-8g does not fit
    assert (await client.post(f"{mig}/resize", params={"size": "2"})).status == 200
    error = next(i for i in await managed(client, mig) if i["currentAction"] == "CREATING")["lastAttempt"]
    assert error["errors"]["errors"][0]["code"] == "QUOTA_EXCEEDED"
    assert error["errors"]["errors"][0]["message"] == f"Quota 'CPUS' exceeded.  Limit: 300.0 in region {REGION}."


async def test_create_and_delete_instances_with_request_id_replay(gcp: FakeGcp, client: Client,
                                                                  http: KubeHTTP) -> None:
    mig = await gpu_mig(gcp, client)
    request_id = str(uuid.uuid4())
    body = {"instances": [{"name": "gs-a"}, {"name": "gs-b"}]}
    first = await client.post(f"{mig}/createInstances", body, params={"requestId": request_id})
    assert (first.status, first.body["operationType"]) == (200, "compute.instanceGroupManagers.createInstances")
    again = await client.post(f"{mig}/createInstances", body, params={"requestId": request_id})
    assert again.body["name"] == first.body["name"]
    assert (await client.get(mig)).body["targetSize"] == 3
    assert [i["name"] for i in await managed(client, mig)][1:] == ["gs-a", "gs-b"]
    dup = await client.post(f"{mig}/createInstances", {"instances": [{"name": "gs-a"}]})
    assert (dup.status, dup.error["message"]) == (
        409, f"The resource 'projects/{PROJECT}/zones/{ZONE_A}/instances/gs-a' already exists")
    bad = await client.post(f"{mig}/createInstances", {"instances": [{"name": "GS_C"}]})
    assert (bad.status, bad.error["message"]) == (
        400, "Invalid value for field 'resource.instances[0].name': 'GS_C'. Must be a match of regex "
             "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
    await gcp.settle()
    assert {"gs-a", "gs-b"} <= set(await nodes(http))

    url = f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instances/gs-a"
    unknown = f"projects/{PROJECT}/zones/{ZONE_A}/instances/nope"
    refused = await client.post(f"{mig}/deleteInstances", {"instances": [url, unknown]})
    assert (refused.status, refused.error["status"]) == (400, "INVALID_ARGUMENT")
    delete_id = str(uuid.uuid4())
    deleted = await client.post(f"{mig}/deleteInstances", {"instances": [url, unknown],
                                                           "skipInstancesOnValidationError": True},
                                params={"requestId": delete_id})
    assert (deleted.status, deleted.body["operationType"]) == (200, "compute.instanceGroupManagers.deleteInstances")
    replay = await client.post(f"{mig}/deleteInstances", {"instances": [url]}, params={"requestId": delete_id})
    assert replay.body["name"] == deleted.body["name"]
    assert (await client.get(mig)).body["targetSize"] == 2
    await gcp.settle()
    assert "gs-a" not in await nodes(http)
    assert (await client.get(compute_path(url))).status == 404


async def test_resize_request_creates_every_vm_at_once_when_stock_allows(gcp: FakeGcp, client: Client,
                                                                        clock: ManualClock, http: KubeHTTP) -> None:
    mig = await gpu_mig(gcp, client, 0, flex_start=True)
    gcp.faults.stock[(ZONE_A, GPU)] = 0
    resp = await client.post(f"{mig}/resizeRequests", {"name": "rr-1", "resizeBy": 3, "description": "gang",
                                                       "requestedRunDuration": {"seconds": "3600"}},
                             params={"requestId": str(uuid.uuid4())})
    assert (resp.status, resp.body["operationType"]) == (200, "compute.instanceGroupManagerResizeRequests.insert")
    rr = (await client.get(f"{mig}/resizeRequests/rr-1")).body
    assert (rr["state"], rr["resizeBy"], rr["requestedRunDuration"]) == ("ACCEPTED", 3, {"seconds": "3600"})
    assert rr["status"]["lastAttempt"]["error"]["errors"][0]["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert (await client.get(mig)).body["targetSize"] == 3
    gcp.faults.stock[(ZONE_A, GPU)] = 2
    await clock.advance(10)
    assert (await client.get(f"{mig}/resizeRequests/rr-1")).body["state"] == "ACCEPTED"
    assert gcp.state.vms == {}
    gcp.faults.stock[(ZONE_A, GPU)] = 3
    await clock.advance(10)
    rr = (await client.get(f"{mig}/resizeRequests/rr-1")).body
    assert (rr["state"], rr["status"]) == ("SUCCEEDED", {})
    assert len(gcp.state.vms) == 3 and len({vm.created_at for vm in gcp.state.vms.values()}) == 1
    await gcp.settle()
    assert len(await nodes(http)) == 3
    listed = (await client.get(f"{mig}/resizeRequests")).body["items"]
    assert [r["name"] for r in listed] == ["rr-1"]
    assert (await client.post(f"{mig}/resizeRequests/rr-1/cancel")).status == 400
    await clock.advance(3600)  # the run duration ends: the MIG deletes the VMs
    await gcp.settle()
    assert await nodes(http) == {}
    assert (await client.delete(f"{mig}/resizeRequests/rr-1")).status == 200
    assert (await client.get(f"{mig}/resizeRequests/rr-1")).status == 404


async def test_resize_request_fails_and_rolls_back(gcp: FakeGcp, client: Client, clock: ManualClock,
                                                   http: KubeHTTP) -> None:
    mig = await gpu_mig(gcp, client, 0, flex_start=True)
    gcp.faults.stock[(ZONE_A, GPU)] = 2
    gcp.faults.resize_request_fail_after = 60
    assert (await client.post(f"{mig}/resizeRequests", {"name": "rr-1", "resizeBy": 3})).status == 200
    refused = await client.post(f"{mig}/resize", params={"size": "1"})
    assert (refused.status, refused.error["status"], refused.error["errors"][0]["reason"]) == (
        400, "FAILED_PRECONDITION", "conditionNotMet")
    duplicate = await client.post(f"{mig}/resizeRequests", {"name": "rr-1", "resizeBy": 1})
    assert duplicate.status == 409
    await clock.advance(59)
    assert (await client.get(f"{mig}/resizeRequests/rr-1")).body["state"] == "ACCEPTED"
    await clock.advance(1)
    rr = (await client.get(f"{mig}/resizeRequests/rr-1")).body
    assert rr["state"] == "FAILED"
    assert rr["status"]["error"]["errors"][0]["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert (await client.get(mig)).body["targetSize"] == 0
    assert await managed(client, mig) == []
    assert gcp.state.vms == {} and gcp.faults.stock[(ZONE_A, GPU)] == 2
    await gcp.settle()
    assert await nodes(http) == {}
    assert (await client.post(f"{mig}/resize", params={"size": "1"})).status == 200


async def test_resize_request_cancel(gcp: FakeGcp, client: Client) -> None:
    mig = await gpu_mig(gcp, client, 0, flex_start=True)
    gcp.faults.stock[(ZONE_A, GPU)] = 0
    assert (await client.post(f"{mig}/resizeRequests", {"name": "rr-1", "instances": [{"name": "w-0"},
                                                                                      {"name": "w-1"}]})).status == 200
    assert (await client.delete(f"{mig}/resizeRequests/rr-1")).status == 400  # still active
    cancel = await client.post(f"{mig}/resizeRequests/rr-1/cancel")
    assert (cancel.status, cancel.body["operationType"]) == (200, "compute.instanceGroupManagerResizeRequests.cancel")
    rr = (await client.get(f"{mig}/resizeRequests/rr-1")).body
    assert (rr["state"], rr["instances"]) == ("CANCELLED", [{"name": "w-0"}, {"name": "w-1"}])
    assert (await client.get(mig)).body["targetSize"] == 0


@pytest.mark.parametrize(("body", "message"), [
    ({"resizeBy": 1}, "Invalid value for field 'resource.name': 'None'. Must be a match of regex "
                      "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"),
    ({"name": "rr", "resizeBy": 0}, "Invalid value for field 'resource.resizeBy': '0'. Must be greater than 0."),
    ({"name": "rr"}, "Exactly one of 'resource.resizeBy' and 'resource.instances' must be specified."),
    ({"name": "rr", "resizeBy": 1, "requestedRunDuration": {"seconds": "60"}},
     "Invalid value for field 'resource.requestedRunDuration': the run duration must be between 10 minutes and 7 "
     "days."),
], ids=["no-name", "zero", "neither", "short-duration"])
async def test_invalid_resize_requests_get_400(gcp: FakeGcp, client: Client, body: dict[str, Any],
                                               message: str) -> None:
    mig = await gpu_mig(gcp, client, 0, flex_start=True)
    resp = await client.post(f"{mig}/resizeRequests", body)
    assert (resp.status, resp.error["message"]) == (400, message)


async def test_zone_operation_wait_holds_until_done_or_the_hold_passes(gcp: FakeGcp, client: Client,
                                                                       clock: ManualClock) -> None:
    mig = await gpu_mig(gcp, client)
    gcp.faults.compute_operation_seconds = 30
    gcp.faults.wait_seconds = 10
    op = (await client.post(f"{mig}/resize", params={"size": "2"})).body
    assert op["status"] == "RUNNING"
    start = clock.now()
    waiting = asyncio.ensure_future(client.post(f"{OPS}/{op['name']}/wait"))
    await wait_for(lambda: clock.next_deadline == start + 10)
    await clock.advance(10)
    first = await waiting
    assert (first.status, first.body["status"], first.body["progress"]) == (200, "RUNNING", 0)
    waiting = asyncio.ensure_future(client.post(f"{OPS}/{op['name']}/wait"))
    await wait_for(lambda: clock.next_deadline == start + 20)
    await clock.advance(20)
    second = await waiting
    assert (second.body["status"], second.body["progress"], "endTime" in second.body) == ("DONE", 100, True)
    got = (await client.get(f"{OPS}/{op['name']}")).body
    assert got == second.body


@pytest.mark.parametrize(("reference", "deleted"), [
    (f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instances/gs-a", True),
    (f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instances/gs-a", True),
    (f"projects/{PROJECT}/zones/{ZONE_A}/instances/gs-a", True),
    (f"zones/{ZONE_A}/instances/gs-a", True),
    ("gs-a", True),
    (f"/projects/{PROJECT}/zones/{ZONE_A}/instances/gs-a", False),
    (f"https://example.com/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instances/gs-a", False),
    (f"projects/{PROJECT}/zones/{ZONE_A}/instances/", False),
], ids=["full-url", "full-url-compute-host", "partial-project", "partial-zone", "name", "leading-slash",
        "other-host", "no-name"])
async def test_delete_instances_takes_the_documented_reference_forms_only(
        gcp: FakeGcp, client: Client, reference: str, deleted: bool) -> None:
    """Full or partial URLs, or names; a malformed one is refused even with ``skipInstancesOnValidationError``
    (which skips non-members, not malformed references)."""
    gcp.add_node_pool((REGION, "c1"), "cpu", machine_type="e2-standard-4", zones=[ZONE_A])
    mig = compute_path((await client.pool("cpu"))["instanceGroupUrls"][0])
    assert (await client.post(f"{mig}/createInstances", {"instances": [{"name": "gs-a"}]})).status == 200
    resp = await client.post(f"{mig}/deleteInstances", {"instances": [reference],
                                                        "skipInstancesOnValidationError": True})
    if deleted:
        assert resp.status == 200, resp.text
        assert (await client.get(mig)).body.get("targetSize", 0) == 0
    else:
        assert (resp.status, resp.error["message"]) == (
            400, f"Invalid value for field 'resource.instances[0]': '{reference}'. The URL is malformed.")
        assert (await client.get(mig)).body["targetSize"] == 1


async def test_delete_instances_refuses_names_and_urls_together(gcp: FakeGcp, client: Client) -> None:
    gcp.add_node_pool((REGION, "c1"), "cpu", machine_type="e2-standard-4", zones=[ZONE_A])
    mig = compute_path((await client.pool("cpu"))["instanceGroupUrls"][0])
    assert (await client.post(f"{mig}/createInstances", {"instances": [{"name": "a"}, {"name": "b"}]})).status == 200
    mixed = await client.post(f"{mig}/deleteInstances", {"instances": ["a", f"zones/{ZONE_A}/instances/b"]})
    assert mixed.status == 400 and "both instance URLs and instance names" in mixed.error["message"]
