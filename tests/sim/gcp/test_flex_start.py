"""Instance templates and flex-start MIGs on the fake: the template follows the node pool, resize requests only for
flex-start (or reservation) templates, the resize request's metadata item and Node label, and VMs that end with their
run duration (resize request or template), taking their member, Node and target size with them."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import FakeGcp
from gangscale.sim.gcp.wire import compute_time
from tests.conftest import wait_for
from tests.sim.gcp.client import REGION, ZONE_A, Client, compute_path
from tests.sim.gcp.test_compute import managed
from tests.sim.gcp.test_node_pools import nodes

L4 = "g2-standard-8"
FLEX = {"config": {"flexStart": True}}


async def mig_of(gcp: FakeGcp, client: Client, name: str, extra: dict[str, Any] | None, *, machine: str = L4,
                 count: int = 0, spot: bool = False) -> str:
    gcp.add_node_pool((REGION, "c1"), name, machine_type=machine, zones=[ZONE_A], node_count_per_zone=count,
                      extra=extra, spot=spot)
    return compute_path((await client.pool(name))["instanceGroupUrls"][0])


async def vm(client: Client, name: str) -> dict[str, Any]:
    resp = await client.get(f"/compute/v1/projects/demo-project/zones/{ZONE_A}/instances/{name}")
    assert resp.status == 200, resp.text
    found: dict[str, Any] = resp.body
    return found


@pytest.mark.parametrize(("machine", "spot", "extra", "scheduling", "affinity"), [
    ("n2-standard-8", False, None,
     {"provisioningModel": "STANDARD", "onHostMaintenance": "MIGRATE", "automaticRestart": True, "preemptible": False},
     None),
    (L4, False, None,
     {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE", "automaticRestart": True,
      "preemptible": False}, None),
    ("n2-standard-8", True, None,
     {"provisioningModel": "SPOT", "onHostMaintenance": "TERMINATE", "automaticRestart": False}, None),
    (L4, False, FLEX,
     {"provisioningModel": "FLEX_START", "instanceTerminationAction": "DELETE", "onHostMaintenance": "TERMINATE"},
     None),
    (L4, False, {"config": {"flexStart": True, "maxRunDuration": "86400s",
                            "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}}},
     {"provisioningModel": "FLEX_START", "instanceTerminationAction": "DELETE", "onHostMaintenance": "TERMINATE",
      "maxRunDuration": {"seconds": "86400"}}, {"consumeReservationType": "NO_RESERVATION"}),
    (L4, False, {"config": {"reservationAffinity": {"consumeReservationType": "SPECIFIC_RESERVATION",
                                                    "key": "compute.googleapis.com/reservation-name",
                                                    "values": ["r1"]}}},
     {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE", "automaticRestart": True,
      "preemptible": False},
     {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
      "values": ["r1"]}),
], ids=["standard", "standard-gpu", "spot", "flex-start", "flex-start-max-run", "specific-reservation"])
async def test_instance_template_follows_the_node_pool(gcp: FakeGcp, client: Client, machine: str, spot: bool,
                                                       extra: dict[str, Any] | None, scheduling: dict[str, Any],
                                                       affinity: dict[str, Any] | None) -> None:
    """Served at the path the MIG's ``instanceTemplate`` names (the session's traffic check holds the answer to the
    compute discovery document's ``InstanceTemplate``)."""
    mig = (await client.get(await mig_of(gcp, client, "p", extra, machine=machine, spot=spot))).body
    resp = await client.get(compute_path(mig["instanceTemplate"]))
    assert resp.status == 200, resp.text
    template = resp.body
    assert (template["kind"], template["name"], template["selfLink"]) == (
        "compute#instanceTemplate", mig["instanceTemplate"].rsplit("/", 1)[1], mig["instanceTemplate"])
    assert template["properties"]["machineType"] == machine
    assert template["properties"]["scheduling"] == scheduling
    assert template["properties"].get("reservationAffinity") == affinity
    missing = await client.get("/compute/v1/projects/demo-project/global/instanceTemplates/nope")
    assert missing.status == 404


@pytest.mark.parametrize(("extra", "spot", "accepted"), [
    (None, False, False),
    (None, True, False),
    (FLEX, False, True),
    ({"config": {"reservationAffinity": {"consumeReservationType": "SPECIFIC_RESERVATION",
                                         "key": "compute.googleapis.com/reservation-name", "values": ["r1"]}}},
     False, True),
], ids=["standard", "spot", "flex-start", "specific-reservation"])
async def test_resize_requests_only_for_flex_start_or_reservations(gcp: FakeGcp, client: Client,
                                                                   extra: dict[str, Any] | None, spot: bool,
                                                                   accepted: bool) -> None:
    """"About resize requests in a MIG": for the flex-start and reservation-bound provisioning models. What the old
    ``resize-request`` mode did on an ordinary pool is refused; ``requestedRunDuration`` is never required."""
    mig = await mig_of(gcp, client, "p", extra, spot=spot)
    resp = await client.post(f"{mig}/resizeRequests", {"name": "rr-1", "resizeBy": 2})
    if accepted:
        assert resp.status == 200, resp.text
        assert (await client.get(f"{mig}/resizeRequests/rr-1")).body["state"] in ("ACCEPTED", "SUCCEEDED")
    else:
        assert (resp.status, resp.error["status"]) == (400, "INVALID_ARGUMENT")
        assert "FLEX_START or RESERVATION_BOUND" in resp.error["message"]
        assert (await client.get(f"{mig}/resizeRequests/rr-1")).status == 404
        assert (await client.get(mig)).body["targetSize"] == 0


async def test_resize_request_vms_carry_its_name_and_end_with_its_run_duration(
        gcp: FakeGcp, client: Client, clock: ManualClock, http: KubeHTTP) -> None:
    mig = await mig_of(gcp, client, "flex", FLEX)
    gcp.faults.stock[(ZONE_A, L4)] = 0
    body = {"name": "rr-1", "resizeBy": 2, "requestedRunDuration": {"seconds": "3600"}}
    assert (await client.post(f"{mig}/resizeRequests", body)).status == 200
    await clock.advance(30)
    gcp.faults.stock[(ZONE_A, L4)] = 2
    await clock.advance(10)  # the next attempt (every retry_seconds = 10 s) gets both
    succeeded = clock.now()
    assert (await client.get(f"{mig}/resizeRequests/rr-1")).body["state"] == "SUCCEEDED"
    end = compute_time(succeeded + 3600)  # counted from the request's success, not its creation
    members = await managed(client, mig)
    assert [m["scheduling"] for m in members] == [{"terminationTimestamp": end}] * 2
    for member in members:
        got = await vm(client, member["name"])
        assert {"key": "google-compute-mig-resize-request", "value": "rr-1"} in got["metadata"]["items"]
        assert got["resourceStatus"] == {"scheduling": {"terminationTimestamp": end}}
        assert got["scheduling"]["provisioningModel"] == "FLEX_START"
    await gcp.settle()
    registered = await nodes(http)
    assert {name: (node["metadata"]["labels"]["autoscaling.gke.io/provisioning-request"],
                   node["metadata"]["labels"]["cloud.google.com/gke-flex-start"])
            for name, node in registered.items()} == {m["name"]: ("rr-1", "true") for m in members}

    await clock.advance(3599)
    assert len(await managed(client, mig)) == 2
    await clock.advance(1)  # the run duration ends: Compute Engine deletes the VMs
    assert await managed(client, mig) == []
    assert (await client.get(mig)).body["targetSize"] == 0
    for member in members:
        assert (await client.get(compute_path(member["instance"]))).status == 404
    await gcp.settle()
    assert await nodes(http) == {}
    assert (await client.get(f"{mig}/resizeRequests/rr-1")).body["state"] == "SUCCEEDED"


async def test_template_max_run_duration_ends_vms_from_their_creation(
        gcp: FakeGcp, client: Client, clock: ManualClock, http: KubeHTTP) -> None:
    """Without a ``requestedRunDuration``, a VM ends with its template's ``maxRunDuration`` counted from its own
    creation, and the MIG's target size drops with it (the fake's assumption: Google does not say)."""
    start = clock.now()
    mig = await mig_of(gcp, client, "flex", {"config": {"flexStart": True, "maxRunDuration": "1200s"}}, count=1)
    await clock.advance(600)
    assert (await client.post(f"{mig}/resizeRequests", {"name": "rr-1", "resizeBy": 1})).status == 200
    made = clock.now()
    members = {m["name"]: m for m in await managed(client, mig)}
    assert sorted(m["scheduling"]["terminationTimestamp"] for m in members.values()) == [
        compute_time(start + 1200), compute_time(made + 1200)]
    await gcp.settle()
    assert all(n["metadata"]["labels"]["cloud.google.com/gke-flex-start"] == "true"
               for n in (await nodes(http)).values())
    await clock.advance(600)
    assert (await client.get(mig)).body["targetSize"] == 1
    await clock.advance(600)
    assert (await client.get(mig)).body.get("targetSize", 0) == 0
    await gcp.settle()
    await wait_for(lambda: _no_nodes(http))


async def _no_nodes(http: KubeHTTP) -> bool:
    return await nodes(http) == {}


async def test_deleting_a_succeeded_resize_request_keeps_its_vms(gcp: FakeGcp, client: Client,
                                                                 clock: ManualClock) -> None:
    """Google: deleting a resize request does not delete the VMs it made; their end of life stays."""
    mig = await mig_of(gcp, client, "flex", FLEX)
    body = {"name": "rr-1", "resizeBy": 2, "requestedRunDuration": {"seconds": "600"}}
    assert (await client.post(f"{mig}/resizeRequests", body)).status == 200
    assert (await client.get(f"{mig}/resizeRequests/rr-1")).body["state"] == "SUCCEEDED"
    assert (await client.post(f"{mig}/resizeRequests/rr-1/cancel")).status == 400  # cancel only while ACCEPTED
    assert (await client.delete(f"{mig}/resizeRequests/rr-1")).status == 200
    assert (await client.get(f"{mig}/resizeRequests/rr-1")).status == 404
    members = await managed(client, mig)
    assert len(members) == 2 and all("terminationTimestamp" in m["scheduling"] for m in members)
    await clock.advance(600)
    assert await managed(client, mig) == []
