"""``queued-provisioning`` mode against the fake GKE + Compute control plane and GKE's handling of the
``queued-provisioning.gke.io`` class (``gangscale.sim.gcp.queued``): an obtain is a ProvisioningRequest of GKE's class
with its own PodTemplate pinned to the node pool; it succeeds only once GKE says Provisioned, and a failure or the
deadline leaves nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import PODTEMPLATES, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.base import ErrorClass, NodeRef, ProviderError
from gangscale.providers.gke import names
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.gcp.state import Mig
from tests.providers.gke.harness import CLUSTER, DWS_POOLS_YAML, DWS_RUN, NAMESPACE, REGION, ZONE, Cloud, cloud

T = TypeVar("T")
TOKEN = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a-0123456789ab-0"
NAME = names.resize_request_name(TOKEN)
L4 = "g2-standard-8"


def mig(c: Cloud) -> Mig:
    cluster = c.gcp.state.cluster(REGION, CLUSTER)
    assert cluster is not None
    return cluster.pools["dws"].migs[ZONE]


async def get(c: Cloud, path: str) -> dict[str, Any] | None:
    try:
        return await c.kube.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def test_an_obtain_is_a_queued_provisioning_request_and_succeeds_when_gke_provisions_it(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http, text=DWS_POOLS_YAML) as c:
        c.gcp.faults.stock[(ZONE, L4)] = 0  # queued until capacity comes

        async def capacity_later() -> None:
            await clock.sleep_until(clock.now() + 900)
            c.gcp.faults.stock[(ZONE, L4)] = 8
            c.gcp.poke()

        start = clock.now()
        got, _ = await c.drive(_both(c.provider.obtain("dws", 2, token=TOKEN, deadline=c.deadline()),
                                     capacity_later()))

        request = await get(c, PROVREQS.path(NAMESPACE, NAME))
        assert request is not None
        assert request["spec"] == {"provisioningClassName": "queued-provisioning.gke.io",
                                   "podSets": [{"podTemplateRef": {"name": NAME}, "count": 2}],
                                   "parameters": {"maxRunDurationSeconds": str(DWS_RUN)}}
        template = await get(c, PODTEMPLATES.path(NAMESPACE, NAME))
        assert template is not None
        spec = template["template"]["spec"]
        assert spec["nodeSelector"]["cloud.google.com/gke-nodepool"] == "dws"
        assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in \
            spec["tolerations"]
        assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}  # a whole g2-standard-8

        assert clock.now() >= start + 900  # provisioned only once GKE could
        vms = sorted(mig(c).members)
        assert [unit.unit_id for unit in got.units] == vms and len(vms) == 2
        assert got.expires_at == pytest.approx(start + 900 + DWS_RUN, abs=15)
        await c.gcp.settle()
        nodes = await c.nodes()
        for vm in vms:
            labels = nodes[vm]["metadata"]["labels"]
            assert c.provider.node_ref(vm, labels) == NodeRef("dws", vm, names.claim(TOKEN))
            assert {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"} in \
                nodes[vm]["spec"]["taints"]
        assert await c.drive((await c.restarted()).lookup(TOKEN)) == got

        await c.drive(c.provider.release("dws", [vms[0]], token=f"scale-down-{vms[0]}"))
        assert await get(c, PROVREQS.path(NAMESPACE, NAME)) is not None  # one of its VMs is left
        await c.drive(c.provider.release("dws", [vms[1]], token=f"scale-down-{vms[1]}"))
        await c.gcp.settle()
        assert await get(c, PROVREQS.path(NAMESPACE, NAME)) is None
        assert await get(c, PODTEMPLATES.path(NAMESPACE, NAME)) is None
        assert not set(vms) & set(await c.nodes())


@pytest.mark.parametrize(("fail_after", "deadline_after", "code"), [
    (300.0, 3600.0, "ResourcePoolExhausted"), (None, 900.0, "DEADLINE_EXCEEDED")],
    ids=["gke-failed-it", "deadline"])
async def test_a_request_gke_cannot_provision_leaves_nothing(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, fail_after: float | None,
        deadline_after: float, code: str) -> None:
    async with cloud(clock, apiserver, http, text=DWS_POOLS_YAML) as c:
        c.gcp.faults.stock[(ZONE, L4)] = 1
        c.gcp.faults.resize_request_fail_after = fail_after
        with pytest.raises(ProviderError) as caught:
            await c.drive(c.provider.obtain("dws", 3, token=TOKEN, deadline=c.deadline(deadline_after)))
        assert (caught.value.error_class, caught.value.code, caught.value.rolled_back) == (
            ErrorClass.STOCKOUT, code, True)
        await c.gcp.settle()
        assert await get(c, PROVREQS.path(NAMESPACE, NAME)) is None
        assert mig(c).members == {} and not [rr for rr in mig(c).resize_requests.values()
                                             if rr.state in ("CREATING", "ACCEPTED")]


async def test_a_node_pool_without_queued_provisioning_is_refused_at_start(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    text = DWS_POOLS_YAML.replace("mode: queued-provisioning, nodePool: dws", "mode: queued-provisioning, nodePool: l4")
    async with cloud(clock, apiserver, http, text=text, start=False) as c:
        with pytest.raises(ProviderError) as caught:
            await c.drive(c.provider.start())
        assert (caught.value.code, caught.value.pool) == ("NOT_QUEUED", "dws")


async def _both(first: Coroutine[Any, Any, T], second: Coroutine[Any, Any, Any]) -> tuple[T, Any]:
    one, two = await asyncio.gather(first, second)
    return one, two
