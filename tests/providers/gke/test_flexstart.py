"""``flex-start`` mode against the fake GKE + Compute control plane: one MIG resize request per obtain, sent as
Google documents it (``resizeBy`` and ``requestedRunDuration``), its VMs found by the request that made them, their
end of life reported, and released by unit so that no request is left behind."""

from __future__ import annotations

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.base import ErrorClass, NodeRef, Obtained, ProviderError, Unit
from gangscale.providers.gke import names
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.gcp.state import Mig
from tests.conftest import GoogleTraffic
from tests.providers.gke.harness import CLUSTER, DWS_POOLS_YAML, FLEX_RUN, REGION, ZONE, Cloud, cloud

TOKEN = "5b8c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d-0123456789ab-0"
L4 = "g2-standard-8"


def mig(c: Cloud) -> Mig:
    cluster = c.gcp.state.cluster(REGION, CLUSTER)
    assert cluster is not None
    return cluster.pools["flex"].migs[ZONE]


async def test_an_obtain_is_one_resize_request_with_the_run_duration_and_its_vms_end_with_it(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, google_traffic: GoogleTraffic) -> None:
    async with cloud(clock, apiserver, http, text=DWS_POOLS_YAML) as c:
        start = clock.now()
        got = await c.drive(c.provider.obtain("flex", 3, token=TOKEN, deadline=c.deadline()))

        [request] = mig(c).resize_requests.values()
        assert (request.name, request.resize_by, request.run_duration) == (
            names.resize_request_name(TOKEN), 3, {"seconds": str(FLEX_RUN)})
        assert request.instances is None  # resizeBy, as documented: Compute Engine names the VMs
        vms = sorted(member for member in mig(c).members)
        assert [unit.unit_id for unit in got.units] == vms and all(u.nodes == (u.unit_id,) for u in got.units)
        assert got.expires_at == pytest.approx(start + FLEX_RUN, abs=5)
        assert c.calls("POST", "/resizeRequests") == 1 and c.calls("POST", "/createInstances") == 0

        await c.gcp.settle()
        nodes = await c.nodes()
        for vm in vms:
            labels = nodes[vm]["metadata"]["labels"]
            assert labels["autoscaling.gke.io/provisioning-request"] == names.resize_request_name(TOKEN)
            assert c.provider.node_ref(vm, labels) == NodeRef("flex", vm, names.claim(TOKEN))
        assert await c.drive((await c.restarted()).lookup(TOKEN)) == got

        await clock.set(got.expires_at + 1)  # type: ignore[arg-type]
        await c.gcp.settle()
        assert not set(vms) & set(await c.nodes()) and mig(c).members == {}
        restarted = await c.restarted()
        gone = tuple(names.unit_name(TOKEN, i) for i in range(3))  # the request is there, its VMs are not
        assert await c.drive(restarted.lookup(TOKEN)) == Obtained(TOKEN, "flex", tuple(Unit(u, ()) for u in gone), gone)
        await c.drive(restarted.obtain("flex", 1, token=TOKEN.replace("0123", "9999"), deadline=c.deadline()))
        assert names.resize_request_name(TOKEN) not in mig(c).resize_requests  # the spent request is swept
    assert google_traffic.problems == []


async def test_scale_down_by_unit_deletes_the_vm_and_the_request_once_none_of_its_vms_is_left(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http, text=DWS_POOLS_YAML) as c:
        got = await c.drive(c.provider.obtain("flex", 3, token=TOKEN, deadline=c.deadline()))
        first, *rest = [unit.unit_id for unit in got.units]

        await c.drive(c.provider.release("flex", [first], token=f"scale-down-{first}"))
        assert first not in mig(c).members or mig(c).members[first].deleting
        assert list(mig(c).resize_requests) == [names.resize_request_name(TOKEN)]  # its other VMs live on

        for unit in rest:
            await c.drive(c.provider.release("flex", [unit], token=f"scale-down-{unit}"))
        await c.gcp.settle()
        assert mig(c).resize_requests == {} and not set(rest) & set(await c.nodes())
        assert await c.drive((await c.restarted()).lookup(TOKEN)) is None


@pytest.mark.parametrize(("fail_after", "deadline_after", "code"), [
    (300.0, 3600.0, "ZONE_RESOURCE_POOL_EXHAUSTED"), (None, 900.0, "DEADLINE_EXCEEDED")],
    ids=["request-failed", "deadline"])
async def test_a_request_that_cannot_be_had_leaves_nothing(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, fail_after: float | None,
        deadline_after: float, code: str) -> None:
    async with cloud(clock, apiserver, http, text=DWS_POOLS_YAML) as c:
        c.gcp.faults.stock[(ZONE, L4)] = 2
        c.gcp.faults.resize_request_fail_after = fail_after
        with pytest.raises(ProviderError) as caught:
            await c.drive(c.provider.obtain("flex", 3, token=TOKEN, deadline=c.deadline(deadline_after)))
        error = caught.value
        assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.STOCKOUT, code, True)
        assert mig(c).resize_requests == {} and mig(c).members == {}
        assert c.gcp.faults.stock[(ZONE, L4)] == 2


async def test_a_lost_answer_is_repeated_under_the_same_token_and_the_request_adopted(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http, text=DWS_POOLS_YAML) as c:
        c.gcp.faults.lost_responses = 1
        with pytest.raises(ProviderError) as caught:
            await c.drive(c.provider.obtain("flex", 2, token=TOKEN, deadline=c.deadline()))
        assert (caught.value.error_class, caught.value.rolled_back) == (ErrorClass.TRANSIENT, False)
        got = await c.drive(c.provider.obtain("flex", 2, token=TOKEN, deadline=c.deadline()))
        assert len(got.units) == 2 and len(mig(c).resize_requests) == 1 and len(mig(c).members) == 2


async def test_an_ordinary_node_pool_is_refused_for_flex_start_at_start(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    text = DWS_POOLS_YAML.replace("mode: flex-start, nodePool: flex", "mode: flex-start, nodePool: l4")
    async with cloud(clock, apiserver, http, text=text, start=False) as c:
        with pytest.raises(ProviderError) as caught:
            await c.drive(c.provider.start())
        assert (caught.value.code, caught.value.pool) == ("NOT_FLEX_START", "flex")
        assert "node pool l4 is not a flex-start node pool" in caught.value.message


async def test_a_flex_start_obtain_costs_five_calls_and_one_read_per_vm_when_nothing_waits(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    """The calls docs/benchmarks.md counts for a flex-start scale-up of N VMs (with a zero-delay cloud): the list
    of the group's requests (the sweep), the insert, its operation, the request (SUCCEEDED), the group's instances,
    and each VM's metadata."""
    async with cloud(clock, apiserver, http, text=DWS_POOLS_YAML) as c:
        before = len(c.provider.calls)
        await c.drive(c.provider.obtain("flex", 3, token=TOKEN, deadline=c.deadline()))
        calls = [(method, url.split("/compute/v1/")[1].split("/")[4:][:1] + url.rsplit("/", 1)[-1:])
                 for method, url in c.provider.calls[before:]]
        assert [(method, path[0]) for method, path in calls] == [
            ("GET", "instanceGroupManagers"), ("POST", "instanceGroupManagers"), ("GET", "operations"),
            ("GET", "instanceGroupManagers"), ("POST", "instanceGroupManagers"), ("GET", "instances"),
            ("GET", "instances"), ("GET", "instances")]
        assert [path[-1] for _, path in calls][:2] == ["resizeRequests", "resizeRequests"]
