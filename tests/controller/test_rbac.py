"""The ClusterRoles in deploy/ grant exactly what the running code asks the API server for.

The controller and the simulated cloud run a scenario that walks every code path that talks to the API
(scale-up with a Workload owner, a template only a live GET finds, a failed request, a booking consumed,
a PR deleted while its nodes come up, scale-down, a finished PR deleted after its TTL). The embedded API
server logs every request with its RBAC verb; the controller's requests must equal the base ClusterRole's
rules, and the cloud's must equal what the simulated-cloud overlay adds (reads it shares with the base).
"""

from __future__ import annotations

from pathlib import Path

from gangscale.kube.resources import SECRETS
from tests.builders import PODTEMPLATES, PROVREQS, RAYCLUSTERS, WORKLOADS
from tests.conftest import wait_for
from tests.controller.harness import running_cluster
from tests.deploy import manifests as m
from tests.raybuilders import group, raycluster

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
DAY = 86400.0


def _rules(requests: list, agent: str) -> set[m.Rule]:
    return m.rules_from_requests(r for r in requests if r.user_agent.split("/")[0] == agent)


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
    requests = list(cl.server.requests)  # after shutdown: a watch is logged when its stream ends

    controller = _rules(requests, "gangscale")
    cloud = _rules(requests, "gangscale-simulated-cloud")
    base = m.granted_rules(m.render(m.BASE))
    overlay = m.granted_rules(m.render(m.OVERLAY))
    assert controller == base, (f"the code uses but the role lacks {sorted(controller - base)}; "
                                f"the role grants but the code never uses {sorted(base - controller)}")
    assert cloud <= overlay
    assert overlay - base == cloud - base, (
        f"the overlay adds {sorted(overlay - base)}, the simulated cloud needs {sorted(cloud - base)}")
