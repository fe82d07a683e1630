"""GKE's ``queued-provisioning.gke.io`` ProvisioningRequests on the fake: a queued pool's MIG gets a resize request
named as GKE names it, and the request's conditions follow it (Accepted → Provisioned → BookingExpired →
CapacityRevoked), with stockouts, failures, problems of a Pending request, deletion and ``ValidUntilSeconds``."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.resources import PODTEMPLATES, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.resources import ResourceList
from gangscale.sim.gcp import FakeGcp
from gangscale.sim.gcp.queuedstatus import CLASS, nodes_needed, resize_request_name
from gangscale.sim.gcp.state import Mig
from gangscale.timefmt import rfc3339
from tests.conftest import wait_for
from tests.sim.gcp.client import REGION, ZONE_A, ZONE_B, Client, Resp
from tests.sim.gcp.test_compute import managed
from tests.sim.gcp.test_node_pools import nodes

L4 = "g2-standard-8"
NS = "default"
QUEUED = {"queuedProvisioning": {"enabled": True},
          "config": {"flexStart": True, "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}},
          "autoscaling": {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": 10, "locationPolicy": "ANY"}}
GCE_STOCKOUT = (f"The zone 'projects/demo-project/zones/{ZONE_A}' does not have enough resources available to "
                "fulfill the request.")


@pytest.mark.parametrize(("namespace", "name", "expected"), [
    ("short-namespace", "short-name", "gke-short-namespace-short-name-3d1e61d88309874b"),
    ("long-namespace-that-will-not-fit-in-the-cap", "short-name",
     "gke-long-namespace-that--short-name-85245499fd480865"),
    ("default", "acc-provisioned", "gke-default-acc-provisioned-408ac6c1e929cc97"),
], ids=["short", "long-namespace", "comment"])
def test_resize_request_name_matches_gkes_vectors(namespace: str, name: str, expected: str) -> None:
    """GKE's ``client_v1_test.go: TestResizeRequestNameV1`` vectors, and the example in a comment of its code."""
    assert resize_request_name(namespace, name) == expected


@pytest.mark.parametrize(("pod_sets", "expected"), [
    ([(3, {"cpu": 2000, "nvidia.com/gpu": 1, "pods": 1})], 3),
    ([(5, {"cpu": 3000, "pods": 1})], 3),
    ([(1, {"cpu": 3000, "pods": 1}), (2, {"cpu": 4000, "pods": 1})], 2),
    ([(1, {"nvidia.com/gpu": 2, "pods": 1})], "Insufficient nvidia.com/gpu"),
], ids=["one-gpu-each", "two-per-node", "podsets-share-nodes", "too-big"])
def test_nodes_needed_bin_packs_onto_the_machine(pod_sets: list[tuple[int, dict[str, int]]],
                                                 expected: int | str) -> None:
    allocatable = ResourceList({"cpu": 7910, "memory": 30 << 30, "nvidia.com/gpu": 1, "pods": 110})
    assert nodes_needed([(count, ResourceList(r)) for count, r in pod_sets], allocatable) == expected


# --- helpers ------------------------------------------------------------------------------------------------------


def queued_pool(gcp: FakeGcp, name: str = "dws", **extra: Any) -> None:
    gcp.add_node_pool((REGION, "c1"), name, machine_type=L4, zones=[ZONE_A, ZONE_B], extra={**QUEUED, **extra})


async def pod_template(http: KubeHTTP, name: str = "pt", *, pool: str = "dws", gpus: int = 1,
                       zone: str | None = None) -> None:
    selector = {"cloud.google.com/gke-nodepool": pool, "cloud.google.com/gke-flex-start": "true"}
    if zone is not None:
        selector["topology.kubernetes.io/zone"] = zone
    await http.request("POST", PODTEMPLATES.path(NS), body={
        "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name, "namespace": NS},
        "template": {"spec": {"nodeSelector": selector, "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                               "requests": {"cpu": "2"}}}]}}})


async def create_pr(http: KubeHTTP, name: str = "job-1", *, template: str = "pt", count: int = 3,
                    cls: str = CLASS, **parameters: str) -> None:
    spec: dict[str, Any] = {"provisioningClassName": cls, "podSets": [{"count": count,
                                                                      "podTemplateRef": {"name": template}}]}
    if parameters:
        spec["parameters"] = parameters
    await http.request("POST", PROVREQS.path(NS), body={
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": NS}, "spec": spec})


async def get_pr(http: KubeHTTP, name: str = "job-1") -> dict[str, Any]:
    found: dict[str, Any] = await http.request("GET", PROVREQS.path(NS, name))
    return found


def conditions(pr: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """type → (status, reason, message)."""
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in (pr.get("status") or {}).get("conditions", [])}


def since(pr: dict[str, Any], kind: str) -> str:
    return str(next(c["lastTransitionTime"] for c in pr["status"]["conditions"] if c["type"] == kind))


async def until(http: KubeHTTP, predicate: Any, name: str = "job-1") -> dict[str, Any]:
    """The request once ``predicate(conditions)`` holds (a hang guard, not a timer)."""
    async def check() -> dict[str, Any] | None:
        pr = await get_pr(http, name)
        return pr if predicate(conditions(pr)) else None
    found: dict[str, Any] = await wait_for(check)
    return found


def status_is(kind: str, status: str, reason: str | None = None) -> Any:
    return lambda c: kind in c and c[kind][0] == status and (reason is None or c[kind][1] == reason)


def dws_mig(gcp: FakeGcp, zone: str = ZONE_A) -> Mig:
    pool = gcp.state.pool(REGION, "c1", "dws")
    assert pool is not None
    return pool.migs[zone]


def mig_path(gcp: FakeGcp, zone: str = ZONE_A) -> str:
    return f"/compute/v1/projects/demo-project/zones/{zone}/instanceGroupManagers/{dws_mig(gcp, zone).name}"


async def rr_of(client: Client, gcp: FakeGcp, name: str = "job-1") -> Resp:
    return await client.get(f"{mig_path(gcp)}/resizeRequests/{resize_request_name(NS, name)}")


# --- the request's life -----------------------------------------------------------------------------------------


async def test_queued_request_end_to_end(gcp: FakeGcp, client: Client, clock: ManualClock, http: KubeHTTP) -> None:
    queued_pool(gcp)
    gcp.faults.stock[(ZONE_A, L4)] = 0
    await pod_template(http)
    await create_pr(http, "other", cls="check-capacity.autoscaling.x-k8s.io")
    await create_pr(http, maxRunDurationSeconds="3600")
    start = clock.now()
    pr = await until(http, status_is("Provisioned", "False"))
    rr_name = resize_request_name(NS, "job-1")
    mig = dws_mig(gcp)
    assert pr["status"]["provisioningClassDetails"] == {
        "NodeGroupName": mig.name, "ResizeRequestName": rr_name, "NodePoolName": "dws", "SelectedZone": ZONE_A,
        "AcceleratorType": "nvidia-l4", "NodePoolAutoProvisioned": "false", "PodTemplateName": "pt",
        "ProvisioningMode": "resize_request"}
    assert conditions(pr) == {
        "Accepted": ("True", "SuccessfullyQueued", "Provisioning Request was successfully queued."),
        "Provisioned": ("False", "ResourcePoolExhausted", GCE_STOCKOUT)}
    assert all(c["observedGeneration"] == pr["metadata"]["generation"] for c in pr["status"]["conditions"])
    rr = (await rr_of(client, gcp)).body
    assert (rr["state"], rr["resizeBy"], rr["requestedRunDuration"]) == ("ACCEPTED", 3, {"seconds": "3600"})
    assert "status" not in await get_pr(http, "other")  # another class: not GKE's business

    await clock.advance(300)  # stocked out: it waits
    assert conditions(await get_pr(http))["Provisioned"][1] == "ResourcePoolExhausted"
    gcp.faults.stock[(ZONE_A, L4)] = 3
    await clock.advance(10)  # the resize request's next attempt
    provisioned = clock.now()
    pr = await until(http, status_is("Provisioned", "True", "Provisioned"))
    assert since(pr, "Provisioned") == rfc3339(provisioned) and provisioned == start + 310
    await gcp.settle()
    registered = await nodes(http)
    assert len(registered) == 3
    for node in registered.values():
        assert node["metadata"]["labels"]["autoscaling.gke.io/provisioning-request"] == rr_name
        assert node["metadata"]["labels"]["cloud.google.com/gke-flex-start"] == "true"
        assert {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]

    await clock.advance(599)
    assert "BookingExpired" not in conditions(await get_pr(http))
    await clock.advance(1)
    pr = await until(http, status_is("BookingExpired", "True", "BookingExpired"))
    assert since(pr, "BookingExpired") == rfc3339(provisioned + 600)
    await clock.advance(3000)  # Provisioned + the run duration
    pr = await until(http, status_is("CapacityRevoked", "True", "CapacityRevoked"))
    assert since(pr, "CapacityRevoked") == rfc3339(provisioned + 3600)
    assert await managed(client, mig_path(gcp)) == []
    await gcp.settle()
    assert await nodes(http) == {}
    assert gcp.queued is not None and gcp.queued.failures == []


async def test_failed_resize_request_fails_the_request(gcp: FakeGcp, client: Client, clock: ManualClock,
                                                       http: KubeHTTP) -> None:
    """A FAILED resize request → ``Failed=True`` with the reason mapped from its error; GKE deletes it an hour after."""
    queued_pool(gcp)
    gcp.faults.stock[(ZONE_A, L4)] = 1
    gcp.faults.resize_request_fail_after = 60
    await pod_template(http)
    await create_pr(http)
    await until(http, status_is("Provisioned", "False", "ResourcePoolExhausted"))
    await clock.advance(60)
    failed_at = clock.now()
    pr = await until(http, status_is("Failed", "True"))
    assert conditions(pr)["Failed"] == ("True", "ResourcePoolExhausted", GCE_STOCKOUT)
    assert conditions(pr)["Accepted"][0] == "True" and since(pr, "Failed") == rfc3339(failed_at)
    assert (await rr_of(client, gcp)).body["state"] == "FAILED"
    assert gcp.state.vms == {}
    await clock.advance(3600)
    await wait_for(lambda: _gone(client, gcp))


async def _gone(client: Client, gcp: FakeGcp) -> bool:
    resp = await rr_of(client, gcp)
    return resp.status == 404


@pytest.mark.parametrize(("setup", "reason", "pending", "failed"), [
    ("no-template", "MissingPodTemplates",
     "Provisioning Request will fail soon as it is missing pod templates, 1 pod templates were referenced, 1 "
     "templates were missing: pt",
     "Provisioning Request failed because there were missing pod templates, 1 pod templates were referenced, 1 "
     "templates were missing: pt"),
    ("not-queued", "NoQueuedNodepoolAvailable",
     "No nodepool with QueuedProvisioning enabled is available for scale up",
     "No nodepool with QueuedProvisioning enabled is available for scale up"),
    ("pod-too-big", "ProvisioningRequestNotSchedulableInNodepool",
     "Provisioning Request's pods cannot be scheduled in the nodepool. Predicate checking errors: dws "
     "(Insufficient nvidia.com/gpu)", None),
    ("zone-outside", "ProvisioningRequestNotSchedulableInNodepool",
     "Provisioning Request's pods cannot be scheduled in the nodepool. Predicate checking errors: dws "
     "(node(s) didn't match Pod's node affinity/selector)", None),
    ("over-max", "NodepoolSizeReached", "Max nodepool size reached, affected nodepools: dws", None),
], ids=["no-template", "not-queued", "pod-too-big", "zone-outside", "over-max"])
async def test_pending_problems_fail_the_request_after_two_minutes(
        gcp: FakeGcp, client: Client, clock: ManualClock, http: KubeHTTP, setup: str, reason: str, pending: str,
        failed: str | None) -> None:
    queued_pool(gcp)
    gcp.add_node_pool((REGION, "c1"), "plain", machine_type=L4, zones=[ZONE_A])
    if setup != "no-template":
        await pod_template(http, pool="plain" if setup == "not-queued" else "dws", gpus=2 if setup == "pod-too-big"
                           else 1, zone="us-central1-f" if setup == "zone-outside" else None)
    await create_pr(http, count=11 if setup == "over-max" else 3)
    pr = await until(http, status_is("Accepted", "False", reason))
    assert conditions(pr) == {"Accepted": ("False", reason, pending)}
    await clock.advance(119)
    assert "Failed" not in conditions(await get_pr(http))
    await clock.advance(1)
    pr = await until(http, status_is("Failed", "True"))
    assert conditions(pr)["Failed"] == ("True", reason, failed or pending)
    assert (await rr_of(client, gcp)).status == 404


async def test_a_template_that_comes_late_is_still_served(gcp: FakeGcp, clock: ManualClock, http: KubeHTTP) -> None:
    queued_pool(gcp)
    await create_pr(http)
    await until(http, status_is("Accepted", "False", "MissingPodTemplates"))
    await pod_template(http)
    await clock.advance(10)  # looked at again every 10 s, as GKE's autoscaler loop does
    await until(http, status_is("Provisioned", "True"))


@pytest.mark.parametrize("stock", [0, None], ids=["waiting", "provisioned"])
async def test_a_deleted_request_gives_up_its_resize_request(gcp: FakeGcp, client: Client, clock: ManualClock,
                                                             http: KubeHTTP, stock: int | None) -> None:
    """Waiting: the resize request is cancelled (nothing was made) and deleted. Provisioned: it is deleted and the
    VMs stay (GKE never deletes Nodes itself; its later scale-down of empty nodes is not modelled)."""
    queued_pool(gcp)
    gcp.faults.stock[(ZONE_A, L4)] = stock
    await pod_template(http)
    await create_pr(http)
    await until(http, status_is("Provisioned", "False" if stock == 0 else "True"))
    await http.request("DELETE", PROVREQS.path(NS, "job-1"))
    await wait_for(lambda: _gone(client, gcp))
    assert dws_mig(gcp).target_size == (0 if stock == 0 else 3)
    await gcp.settle()
    assert len(await nodes(http)) == (0 if stock == 0 else 3)


async def test_valid_until_seconds_fails_a_request_still_waiting(gcp: FakeGcp, clock: ManualClock,
                                                                 http: KubeHTTP) -> None:
    queued_pool(gcp)
    gcp.faults.stock[(ZONE_A, L4)] = 0
    await pod_template(http)
    await create_pr(http, ValidUntilSeconds="300")
    await until(http, status_is("Provisioned", "False"))
    await clock.advance(300)
    pr = await until(http, status_is("Failed", "True"))
    assert conditions(pr)["Failed"] == ("True", "WaitTimeExceeded", "Provisioning Request could not provision "
                                                                    "queued instances in the allocated time.")


async def test_set_size_on_a_queued_pool_stays_refused(gcp: FakeGcp, client: Client) -> None:
    queued_pool(gcp)
    resp = await client.post(f"/v1/projects/demo-project/locations/{REGION}/clusters/c1/nodePools/dws:setSize",
                             {"nodeCount": 1})
    assert (resp.status, resp.error["status"]) == (400, "FAILED_PRECONDITION")

