"""The ClusterRoles, the leader-election Role and the simulated kubelets' node-Lease Role in deploy/ grant exactly
what the running code asks the API server for.

The controller and the simulated cloud run a scenario that walks every code path that talks to the API
(scale-up with a Workload owner, a template only a live GET finds, a failed request, a booking consumed,
a PR deleted while its nodes come up, scale-down, a finished PR deleted after its TTL). The embedded API
server logs every request with its RBAC verb; the controller's requests must equal the base ClusterRole's
rules, and the cloud's must equal what the simulated-cloud overlay adds (reads it shares with the base): its
ClusterRole for the Nodes, and its Role in kube-node-lease for the node Leases its kubelets renew (only there).

Two replicas of the real leader elector, configured as the Deployment configures them, walk every path of
the election (create the Lease, lose the race to create it, renew, stand by, lose the lease to failing
renewals, take it over, restart on standby, release it on SIGTERM, take a released lease): their requests,
object names included, must equal the leader-election Role's rules, in the Role's namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gangscale import cli
from gangscale.clock import ManualClock, Sleeps, counting_sleeps
from gangscale.kube.client import make_http
from gangscale.kube.lease import LeaseConfig, LeaseElector
from gangscale.kube.resources import LEASES, NAMESPACES, SECRETS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer, Fault, LoggedRequest
from tests.builders import PODTEMPLATES, PROVREQS, RAYCLUSTERS, WORKLOADS
from tests.conftest import wait_for
from tests.controller.harness import FAST, Cluster, running_cluster
from tests.deploy import helm
from tests.deploy import manifests as m
from tests.raybuilders import group, raycluster

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
DAY = 86400.0


def _rules(requests: list[LoggedRequest], agent: str) -> set[m.Rule]:
    return m.rules_from_requests(r for r in requests if r.user_agent.split("/")[0] == agent)


def _node_leases_granted_exactly(requests: list[LoggedRequest]) -> set[m.Rule]:
    """The simulated kubelets' node-Lease requests are in kube-node-lease only and need exactly what the overlay's
    Role there grants; their rules (left out of the ClusterRole comparison)."""
    leases = [r for r in requests if r.user_agent.split("/")[0] == "gangscale-simulated-cloud"
              and r.resource == "leases"]
    role = m.one(m.render(m.OVERLAY), "Role", "gangscale-simulated-node-leases")
    assert {r.namespace for r in leases} == {role["metadata"]["namespace"]} == {helm.NODE_LEASE_NAMESPACE}
    granted = m.role_rules(role)
    used = {m.request_rule(r)[:3] for r in leases}
    assert used == {rule[:3] for rule in granted}, (
        f"the kubelets use {sorted(used)}, the Role grants {sorted(rule[:3] for rule in granted)}")
    assert all(m.allows(granted, m.request_rule(r)) for r in leases)
    return m.rules_from_requests(leases)


async def _repeat_an_event(cl: Cluster) -> None:
    """An Event identical to one already sent is a PATCH of that Event's count (client-go's correlation): the recorder
    the controller reports every decision with, told the same thing twice."""
    pr = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
          "metadata": {"name": "gone", "namespace": "default", "uid": "0b8e2a52-5d1c-4f5e-9a4e-6f1f2d1c0e11"}}
    for _ in range(2):
        await cl.ctl.effects.record(pr, [("Warning", "ScaleUpFailed", "the same message")])


async def test_the_cluster_roles_grant_exactly_what_the_code_uses(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        workload = await cl.create(WORKLOADS, {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "wl"},
            "spec": {"priority": 100, "queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}]}})
        owner = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "wl",
                 "uid": workload["metadata"]["uid"], "controller": True}
        await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
        await cl.provreq("kept", ("slice", 2), owner=owner)
        await cl.provreq("missing", ("nowhere", 1))
        await cl.wait_condition("missing", "Failed", "True", "FailedToCreatePods")
        await cl.advance(30)
        await cl.wait_condition("kept", "Provisioned", "True", "CapacityIsProvisioned")
        nodes = await cl.ready_nodes()
        for i, node in enumerate(nodes):
            await cl.consumer(f"kept-{i}", "kept", node, {"google.com/tpu": "4"})
        await cl.advance(1)
        await cl.wait_condition("kept", "BookingExpired", "True", "CapacityBookingConsumed")

        await cl.provreq("dropped", ("slice", 2))
        await wait_for(lambda: len(cl.cloud.calls) >= 2, timeout=10)
        await cl.http.request("DELETE", PROVREQS.path("default", "dropped"))

        async def released() -> bool:
            return len(await cl.nodes()) == len(nodes)
        await wait_for(released, timeout=10)
        # Scale-down of emptied units, then the finished requests are deleted after their TTL.
        for pod in range(len(nodes)):
            await cl.http.request("DELETE", f"/api/v1/namespaces/default/pods/kept-{pod}")
        await cl.advance(11 * 60)
        await cl.advance(60)

        async def scaled_down() -> bool:
            return not await cl.nodes()
        await wait_for(scaled_down, timeout=10)
        await cl.advance(8 * DAY)
        await cl.advance(60)

        async def deleted() -> bool:
            return await cl.get_pr("kept") is None and await cl.get_pr("missing") is None
        await wait_for(deleted, timeout=10)
        # Ray demand: a gang's intent is an annotation on its RayCluster; a token-auth cluster's Secret is read
        # for its GCS (which does not answer here).
        await cl.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ray-token"},
                                  "data": {"auth_token": "c2VjcmV0"}})
        await cl.create(RAYCLUSTERS, raycluster("ray", [group("gpu", replicas=1, limits={"nvidia.com/gpu": "8"})],
                                                authOptions={"mode": "token", "secretName": "ray-token"}))
        await cl.idle()
        await cl.advance(7)

        async def ray_gang() -> bool:
            return any(c.operation == "obtain" and c.pool == "gpu" for p in cl.history for c in p.calls)
        await wait_for(ray_gang, timeout=10)
        # A template that exists but that the reflector has not seen yet is fetched with a GET.
        await cl.http.request("DELETE", PODTEMPLATES.path("default", "slice"))
        assert await cl.get_pr("kept") is None
        await _repeat_an_event(cl)
    requests = list(cl.server.requests)  # after shutdown: a watch is logged when its stream ends

    controller = _rules(requests, "gangscale")
    cloud = _rules(requests, "gangscale-simulated-cloud")
    base = m.granted_rules(m.render(m.BASE))
    overlay = m.granted_rules(m.render(m.OVERLAY))
    cloud -= _node_leases_granted_exactly(requests)
    # The Ray auth Secret is the one call the base's ClusterRole leaves out: overlays/ray-gcs grants it with a
    # Role in the RayCluster's namespace.
    secret_reads = [r for r in requests if r.user_agent.split("/")[0] == "gangscale" and r.resource == "secrets"]
    assert secret_reads and {m.request_rule(r)[:3] for r in secret_reads} == {("", "secrets", "get")}
    token_roles = helm.roles_by_namespace([o for o in m.render(m.RAY_GCS_OVERLAY) if o["kind"] == "Role"
                                           and o["metadata"]["name"] == "gangscale-ray-token-reader"])
    assert all(m.allows(token_roles.get(r.namespace, set()), m.request_rule(r)) for r in secret_reads)
    controller -= {("", "secrets", "get")}
    assert controller == base, (f"the code uses but the role lacks {sorted(controller - base)}; "
                                f"the role grants but the code never uses {sorted(base - controller)}")
    assert cloud <= overlay
    assert overlay - base == cloud - base, (
        f"the overlay adds {sorted(overlay - base)}, the simulated cloud needs {sorted(cloud - base)}")


@pytest.mark.parametrize(("ray", "dry_run"), [(True, True), (False, False)], ids=["dry-run", "ray-off"])
async def test_dry_run_reads_only_and_ray_off_touches_no_ray_object(tmp_path: Path, ray: bool, dry_run: bool) -> None:
    # What the chart's ClusterRole drops for these features (helm.expected_cluster_rules) the code never asks for.
    async with running_cluster(tmp_path, settings=replace(FAST, dry_run=dry_run, ray=ray)) as cl:
        await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
        await cl.provreq("kept", ("slice", 2))
        await cl.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ray-token"},
                                  "data": {"auth_token": "c2VjcmV0"}})
        await cl.create(RAYCLUSTERS, raycluster("ray", [group("gpu", replicas=1, limits={"nvidia.com/gpu": "8"})],
                                                authOptions={"mode": "token", "secretName": "ray-token"}))
        await cl.idle()
        for _ in range(3):
            await cl.advance(11)
        await cl.idle()
        if not dry_run:
            await cl.wait_condition("kept", "Provisioned", "True", "CapacityIsProvisioned")
    controller = _rules(list(cl.server.requests), "gangscale")
    allowed = helm.expected_cluster_rules(ray=ray, dry_run=dry_run, simulated_live=False)
    secrets = {("", "secrets", "get")} if ray else set()
    assert controller - secrets <= allowed, f"not granted: {sorted(controller - secrets - allowed)}"
    # Every rule kept is used, but for three the main scenario above shows: a podtemplate GET (a template the watch
    # has not delivered), the deletion of a PR 7 days after it ended, and the patch of a repeated Event.
    unexercised = {("", "podtemplates", "get"), ("autoscaling.x-k8s.io", "provisioningrequests", "delete"),
                   ("", "events", "patch")}
    assert allowed - controller <= unexercised, sorted(allowed - controller)
    if dry_run:
        assert all(verb in helm.READ_VERBS for _, _, verb in controller)
    else:
        assert not any(group == "ray.io" or resource == "secrets" for group, resource, _ in controller)


# --- leader election --------------------------------------------------------------------------------------


class Replica:
    """One replica's leader elector, with its own client (User-Agent ``gangscale/<pod>``, so that a fault can hit
    one replica) and its sleeps counted on the manual clock."""

    def __init__(self, http: KubeHTTP, clock: ManualClock, config: LeaseConfig) -> None:
        self.http, self.config = http, config
        self.elector = LeaseElector(http, clock, config)
        self.sleeps = Sleeps()
        self.task = asyncio.create_task(counting_sleeps(self.elector.run(), self.sleeps), name=config.identity)

    @property
    def waiting(self) -> bool:
        return self.task.done() or self.sleeps.asleep > 0

    async def stop(self) -> None:
        """SIGTERM: stop electing, give the lease up (as ``gangscale.controller.app.serve`` does)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.elector.release()


async def _step(clock: ManualClock, replicas: list[Replica], seconds: float) -> None:
    target = clock.now() + seconds
    while clock.now() < target:
        await clock.advance(min(0.5, target - clock.now()))
        await wait_for(lambda: all(r.waiting for r in replicas))


async def _until(clock: ManualClock, replicas: list[Replica], done: Callable[[], bool], limit: float = 60) -> None:
    start = clock.now()
    while not done():
        assert clock.now() < start + limit, "the election did not get there"
        await _step(clock, replicas, 0.5)


@contextlib.asynccontextmanager
async def _clients(kubeconfig: Path, *pods: str) -> AsyncIterator[tuple[dict[str, KubeHTTP], list[Replica]]]:
    """A client per pod, and the list the test puts its replicas in: stopped (without a release) at the end."""
    clients = {pod: await make_http(str(kubeconfig), user_agent=f"gangscale/{pod}") for pod in pods}
    started: list[Replica] = []
    try:
        yield clients, started
    finally:
        for replica in started:
            replica.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await replica.task
        for client in clients.values():
            await client.api_client.close()


def _lease_config(deployment: dict[str, Any], identity: str) -> LeaseConfig:
    """The LeaseConfig `gangscale run` builds from the Deployment's arguments, in the Deployment's namespace
    (the namespace of the pod's service account) and with the pod's name as identity ($POD_NAME)."""
    flags = cli.run_flags(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert flags.leader_elect and flags.leader_elect_namespace is None and flags.leader_elect_identity is None
    return LeaseConfig(deployment["metadata"]["namespace"], flags.leader_elect_lease_name, identity,
                       lease_duration=flags.leader_elect_lease_duration,
                       renew_deadline=flags.leader_elect_renew_deadline,
                       retry_period=flags.leader_elect_retry_period)


async def test_the_leader_election_role_grants_exactly_what_the_elector_uses(
        apiserver: EmbeddedAPIServer, kubeconfig: Path, http: KubeHTTP, clock: ManualClock) -> None:
    base = m.render(m.BASE)
    deployment = m.one(base, "Deployment", "gangscale")
    role = m.one(base, "Role", "gangscale-leader-election")
    namespace = deployment["metadata"]["namespace"]
    await http.request("POST", NAMESPACES.path(), body=m.one(base, "Namespace"))  # setup, not the controller's
    config = {pod: _lease_config(deployment, pod) for pod in ("gangscale-5d8f-a", "gangscale-5d8f-b")}
    lease_path = LEASES.path(namespace, config["gangscale-5d8f-a"].name)

    async def holder() -> str:
        return str((await http.request("GET", lease_path))["spec"]["holderIdentity"])

    async with _clients(kubeconfig, *config) as (clients, started):
        # Both replicas start at once and find no Lease. The first create is held in the server until the other
        # replica's create has made the Lease: the held one then gets 409 AlreadyExists.
        apiserver.inject(Fault(verb="create", resource="coordination.k8s.io/leases", hold=True, times=1))
        running = [Replica(clients[pod], clock, config[pod]) for pod in config]
        started.extend(running)
        await wait_for(lambda: any(r.resource == "leases" and r.verb == "create" and r.status == 201
                                   for r in apiserver.requests))
        assert apiserver.release_held(serve=True) == 1
        await wait_for(lambda: all(r.waiting for r in running))
        (leader,) = [r for r in running if r.elector.leading.is_set()]
        (standby,) = [r for r in running if r is not leader]
        # The leader renews, the standby watches the record.
        await _step(clock, running, 20)
        assert leader.elector.valid() and standby.elector.holder == leader.config.identity
        # The leader's renewals fail (its API connection is broken): it loses the lease within the renew
        # deadline, and the standby takes the lease over once it has seen it unrenewed for the lease duration.
        apiserver.inject(Fault(status=500, resource="coordination.k8s.io/leases", times=None,
                               user_agent=f"gangscale/{leader.config.identity}"))
        await _until(clock, running, lambda: leader.elector.lost.is_set() and standby.elector.leading.is_set())
        assert await holder() == standby.config.identity
        # The old leader exits and its pod restarts (same name): it stands by.
        apiserver.faults.clear()
        restarted = Replica(clients[leader.config.identity], clock, leader.config)
        started.append(restarted)
        running = [standby, restarted]
        await _step(clock, running, 6)
        assert restarted.elector.holder == standby.config.identity and not restarted.elector.leading.is_set()
        # A rollout: SIGTERM to the leader, which releases the lease; the standby takes it at its next try.
        await standby.stop()
        assert await holder() == ""
        running = [restarted]
        await _until(clock, running, restarted.elector.leading.is_set, limit=2 * 1.2 + 1)
        await _step(clock, running, 4)
        await restarted.stop()
        assert await holder() == ""

    requests = [r for r in apiserver.requests if r.user_agent.split("/")[0] == "gangscale"]
    assert {r.status for r in requests if r.verb == "create"} == {201, 409}  # both paths of the create race
    assert 500 in {r.status for r in requests}  # the failing renewals needed authorization too
    needed = {m.request_rule(r) for r in requests}
    granted = m.role_rules(role)
    assert needed == granted, (f"the elector uses but the Role lacks {sorted(needed - granted)}; "
                               f"the Role grants but the elector never uses {sorted(granted - needed)}")
    # In the Role's namespace only, and every get and update names the one Lease.
    assert {r.namespace for r in requests} == {role["metadata"]["namespace"]} == {namespace}
    assert {r.name for r in requests if r.verb in ("get", "update")} == {config["gangscale-5d8f-a"].name}
    assert all(m.allows(granted, m.request_rule(r)) for r in requests)
    # And none of it needs the ClusterRole.
    assert not m.rules_from_requests(requests) & m.granted_rules(base)
