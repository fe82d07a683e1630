"""Host ports and topology spread end to end (issue 25): the real controller on the embedded API server with the
simulated cloud. A gang of 3 pods that kube-scheduler would place at most one a node (a shared host port; a
hostname spread with ``minDomains: 3``) is never written ``Provisioned=True`` on a pool that can give only 2 nodes,
and gets exactly 3 nodes from a pool that can give 3.

The PodTemplates are created through ``cl.http``: the harness's ``cl.template`` has no way to pass ports or
spread constraints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Event
from tests.builders import PODTEMPLATES
from tests.controller.harness import NS, Cluster, running_cluster

JSON = dict[str, Any]
PROVREQS = StorageKey("autoscaling.x-k8s.io", "provisioningrequests")
PROVISION_SECONDS = 30.0
#: Generous against the controller's retry backoff: the refused gang is planned again several times meanwhile.
WATCH_SECONDS = 600.0

CPU_POOL_YAML = """
nodePools:
  - name: cpu
    zone: zone-a
    maxUnits: {max_units}
    allocatable: {{cpu: "16", memory: 64Gi, pods: "110"}}
    simulated: {{provisionSeconds: 30}}
"""

LABELS = {"app": "trainer"}
HOST_PORT: JSON = {"containers": [{"name": "main", "image": "trainer:v1",
                                   "resources": {"requests": {"cpu": "1"}},
                                   "ports": [{"containerPort": 8080, "hostPort": 8080}]}]}
SPREAD: JSON = {"containers": [{"name": "main", "image": "trainer:v1", "resources": {"requests": {"cpu": "1"}}}],
                "topologySpreadConstraints": [{"maxSkew": 1, "minDomains": 3, "topologyKey": "kubernetes.io/hostname",
                                               "whenUnsatisfiable": "DoNotSchedule",
                                               "labelSelector": {"matchLabels": LABELS}}]}
#: Each spec, and what the refusal must name.
SPECS = [pytest.param(HOST_PORT, "(one pod a node: host port 8080/TCP)", id="host-port"),
         pytest.param(SPREAD, "topology spread maxSkew 1 on kubernetes.io/hostname, minDomains 3", id="spread")]


def provisioned_history(cl: Cluster) -> list[str]:
    """The ``Provisioned`` status of every version of every ProvisioningRequest the store commits, from now on."""
    seen: list[str] = []

    def observe(key: StorageKey, ev: Event) -> None:
        if key == PROVREQS and ev.type != "DELETED":
            seen.extend(c.get("status", "") for c in (ev.obj.get("status") or {}).get("conditions") or []
                        if c.get("type") == "Provisioned")
    cl.server.store.listeners.append(observe)
    return seen


async def pod_template(cl: Cluster, name: str, spec: JSON) -> JSON:
    return await cl.http.request("POST", PODTEMPLATES.path(NS), body={
        "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
        "template": {"metadata": {"labels": LABELS}, "spec": spec}})


@pytest.mark.parametrize(("spec", "named"), SPECS)
async def test_a_pool_of_two_nodes_never_provisions_a_gang_that_needs_three(tmp_path: Path, spec: JSON,
                                                                           named: str) -> None:
    async with running_cluster(tmp_path, pool_yaml=CPU_POOL_YAML.format(max_units=2)) as cl:
        history = provisioned_history(cl)
        await pod_template(cl, "trainer", spec)
        await cl.provreq("gang", ("trainer", 3))
        await cl.wait_condition("gang", "Provisioned", "False", "CapacityIsNotFound")
        message = (await cl.conditions("gang"))["Provisioned"][2]
        assert message.startswith("cannot place every pod:") and named in message, message
        assert "needs 3 nodes for pod set" in message, message
        await cl.advance_stepwise(WATCH_SECONDS)
        conditions = await cl.conditions("gang")
        assert conditions["Provisioned"][:2] == ("False", "CapacityIsNotFound"), conditions
        assert history and "True" not in history, history
        assert cl.obtains() == [] and await cl.nodes() == []


@pytest.mark.parametrize(("spec", "named"), SPECS)
async def test_a_pool_of_three_nodes_provisions_one_node_per_pod(tmp_path: Path, spec: JSON, named: str) -> None:
    async with running_cluster(tmp_path, pool_yaml=CPU_POOL_YAML.format(max_units=3)) as cl:
        await pod_template(cl, "trainer", spec)
        await cl.provreq("gang", ("trainer", 3))
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("gang", "Provisioned", "True", "CapacityIsProvisioned")
        assert [(call.pool, call.units) for call in cl.obtains()] == [("cpu", 3)]
        assert len(await cl.ready_nodes("cpu")) == 3
