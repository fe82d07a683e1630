"""Dynamic Workload Scheduler capacity through the real controller: a gang placed on a queued-provisioning pool is
provisioned only once GKE provisions gangscale's ``queued-provisioning.gke.io`` request for it, a gang that spans
such a pool and another stays all or nothing, and a gang on flex-start nodes is told when they end, and its booking
ends then. The demo's cluster on a manual clock (``tests.providers.gke.cluster``):
the embedded API server, the fake GKE (with its emulation of GKE's handling of that class), the gke provider and
the controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gangscale.kube.resources import PODTEMPLATES, PROVREQS
from gangscale.sim.driver import SimCluster
from tests.builders import pod_template
from tests.deploy import manifests as m
from tests.providers.gke.cluster import event, fake, gke_cluster, ours, provisioned
from tests.providers.gke.harness import DWS_POOLS_YAML, DWS_RUN, FLEX_RUN, ZONE

NS = "default"
L4 = "g2-standard-8"
QUEUED_TOLERATION = {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


async def template(sim: SimCluster, name: str, *, limits: dict[str, str], pool: str,
                   tolerations: list[dict[str, str]] | None = None) -> None:
    body = pod_template(name, limits=limits)
    body["template"]["spec"]["nodeSelector"] = {"cloud.google.com/gke-nodepool": pool}
    if tolerations:
        body["template"]["spec"]["tolerations"] = tolerations
    await sim.http.request("POST", PODTEMPLATES.path(NS), body=body)


async def request(sim: SimCluster, name: str, *pod_sets: tuple[str, int],
                  parameters: dict[str, str] | None = None) -> None:
    spec: dict[str, Any] = {"provisioningClassName": "atomic-scale-up.gangscale.io",
                            "podSets": [{"podTemplateRef": {"name": t}, "count": n} for t, n in pod_sets]}
    if parameters:
        spec["parameters"] = parameters
    await sim.http.request("POST", PROVREQS.path(NS), body={
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "metadata": {"name": name},
        "spec": spec})


async def queued_requests(sim: SimCluster) -> list[dict[str, Any]]:
    items = (await sim.http.request("GET", PROVREQS.path(NS))).get("items") or []
    return [pr for pr in items if pr["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"]


async def test_a_gang_on_a_queued_pool_is_provisioned_only_once_gke_provisions_its_request(tmp_path: Path) -> None:
    async with gke_cluster(tmp_path, DWS_POOLS_YAML) as sim:
        gcp = fake(sim)
        gcp.faults.stock[(ZONE, L4)] = 0
        await template(sim, "dws-worker", limits={"nvidia.com/gpu": "1"}, pool="dws",
                       tolerations=[QUEUED_TOLERATION, GPU_TOLERATION])
        start = sim.now
        await request(sim, "training", ("dws-worker", 3))

        await sim.run_until(start + 240)  # queued: GKE has no capacity yet
        [inner] = await queued_requests(sim)
        conditions = {c["type"]: (c["status"], c["reason"]) for c in inner["status"]["conditions"]}
        assert conditions["Accepted"] == ("True", "SuccessfullyQueued")
        assert conditions["Provisioned"] == ("False", "ResourcePoolExhausted")
        assert inner["spec"]["podSets"][0]["count"] == 3
        assert (await provisioned(sim, "training"))[:2] == ("False", "ScaleUpInProgress")

        gcp.faults.stock[(ZONE, L4)] = 8
        gcp.poke()
        await sim.run_until(start + 480)
        status, reason, message = await provisioned(sim, "training")
        assert (status, reason) == ("True", "CapacityIsProvisioned"), message
        assert "dws +3 units" in message and "the cloud deletes them at " in message
        made = await ours(sim)
        assert len(made["vms"]) == 3 and len(made["nodes"]) == 3
        assert DWS_RUN > 600  # the gang's booking (10 min) ends before the run duration; the message still says it
        await sim.http.request("DELETE", PROVREQS.path(NS, "training"))
        # Its nodes stay as ordinary nodes, scaled down once unneeded for 10 min: the last one of them to go
        # takes gangscale's request for them along.
        await sim.run_until(sim.now + 900)
        assert (await ours(sim))["vms"] == []
        assert await queued_requests(sim) == []
        assert_the_role_grants_exactly_what_the_provider_asked(sim)


def assert_the_role_grants_exactly_what_the_provider_asked(sim: SimCluster) -> None:
    """The gke overlay's Role for queued provisioning, with the base ClusterRole, allows every request the provider
    made, and each of its rules was needed (the provider's client is named "gangscale", as in production)."""
    rendered = m.render(m.GKE_OVERLAY)
    role = m.role_rules(m.one(rendered, "Role", "gangscale-gke-queued-provisioning"))
    cluster_role = {(*rule, "") for rule in m.granted_rules(rendered)}
    asked = {m.request_rule(r) for r in sim.server.requests
             if r.user_agent.split("/")[0] == "gangscale" and r.verb and r.resource}
    assert [rule for rule in asked if not m.allows(role | cluster_role, rule)] == []
    used = {(g, r, v, "") for g, r, v, _ in asked if r in ("provisioningrequests", "podtemplates")
            and (v, r) not in (("delete", "provisioningrequests"), ("get", "podtemplates"),
                              ("list", "provisioningrequests"), ("watch", "provisioningrequests"),
                              ("list", "podtemplates"), ("watch", "podtemplates"))}
    assert used == role


async def test_a_gang_spanning_a_queued_pool_and_another_is_all_or_nothing(tmp_path: Path) -> None:
    async with gke_cluster(tmp_path, DWS_POOLS_YAML) as sim:
        gcp = fake(sim)
        gcp.faults.stock[(ZONE, "n2-standard-8")] = 0  # the CPU half can never be had
        await template(sim, "dws-worker", limits={"nvidia.com/gpu": "1"}, pool="dws",
                       tolerations=[QUEUED_TOLERATION, GPU_TOLERATION])
        await template(sim, "cpu-head", limits={"cpu": "6"}, pool="cpu")
        start = sim.now
        await request(sim, "mixed", ("dws-worker", 2), ("cpu-head", 1))

        await sim.run_until(start + 120)
        assert "scale-up failed and every unit it obtained was released" in await event(sim, "mixed", "ScaleUpFailed")
        assert (await provisioned(sim, "mixed"))[0] == "False"
        made = await ours(sim)
        assert (made["vms"], made["nodes"]) == ([], [])
        writes = [(r.verb, r.resource) for r in sim.server.requests
                  if r.resource in ("provisioningrequests", "podtemplates") and r.verb in ("create", "delete")
                  and r.user_agent.split("/")[0] == "gangscale"]  # the provider's client (the test's is another)
        assert sorted(writes) == sorted([("create", "podtemplates"), ("create", "provisioningrequests"),
                                         ("delete", "provisioningrequests"), ("delete", "podtemplates")]), writes
        assert await queued_requests(sim) == []  # gangscale's request for the queued half was withdrawn


async def test_a_gang_on_flex_start_nodes_is_told_when_they_end_and_its_booking_ends_then(tmp_path: Path) -> None:
    text = DWS_POOLS_YAML.replace(f"maxRunDurationSeconds: {FLEX_RUN}", "maxRunDurationSeconds: 600")
    async with gke_cluster(tmp_path, text) as sim:
        await template(sim, "flex-worker", limits={"nvidia.com/gpu": "1"}, pool="flex", tolerations=[GPU_TOLERATION])
        start = sim.now
        await request(sim, "short-run", ("flex-worker", 2), parameters={"bookingSeconds": "3600"})

        await sim.run_until(start + 60)
        status, reason, message = await provisioned(sim, "short-run")
        assert (status, reason) == ("True", "CapacityIsProvisioned"), message
        stamp = message.split("the cloud deletes them at ")[1].split(",")[0]
        assert f"capacity booked until {stamp} or until every pod is scheduled" in message  # not the 1 h asked for
        nodes = (await ours(sim))["nodes"]
        assert len(nodes) == 2

        await sim.run_until(start + 700)  # past the 10-minute run duration: Compute Engine deleted the VMs
        pr = await sim.http.request("GET", PROVREQS.path(NS, "short-run"))
        expired = next(c for c in pr["status"]["conditions"] if c["type"] == "BookingExpired")
        assert (expired["status"], expired["reason"]) == ("True", "CapacityReservationTimeExpired")
        assert "reached the end of their run duration" in expired["message"]
        assert not any(c["type"] == "CapacityRevoked" for c in pr["status"]["conditions"])
        assert not set(nodes) & set((await ours(sim))["nodes"])
