"""Every failure of cloud-providers.md §1.4 through the gke provider against the fake control plane: the error class
the controller gets, whether the obtain was rolled back, and that nothing is left behind."""

from __future__ import annotations

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.gke import names
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.gcp import InjectedError
from tests.providers.gke.harness import CLUSTER, POOLS_YAML, REGION, ZONE, Cloud, cloud

TOKEN = "7a0c1e2f-3b4d-4c5e-9f60-718293a4b5c6-aabbccddeeff-1"
TPU, L4, CPU = "ct5lp-hightpu-4t", "g2-standard-8", "n2-standard-8"
BUSY = ("Operation operation-1596064640049-1b03e177 is currently upgrading cluster c1. Please wait and try again once "
        "it is done.")
THROTTLED = 'Too many operations: cluster "c1" hits the concurrent operations quota 5, please try again later.'


def ours(c: Cloud) -> list[str]:
    """Node pools and VMs gangscale made that exist now."""
    pools = [name for name in c.node_pools() if name.startswith("gs-")]
    vms = [vm.name for vm in c.gcp.state.vms.values() if vm.name.startswith("gs-")]
    return sorted(pools + vms)


async def failed(c: Cloud, pool: str, units: int, *, deadline_after: float = 3600.0) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await c.drive(c.provider.obtain(pool, units, token=TOKEN, deadline=c.deadline(deadline_after)))
    return caught.value


async def test_a_three_slice_gang_whose_third_slice_stocks_out_leaves_nothing(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.stock[(ZONE, TPU)] = 4  # two slices of two hosts
        c.gcp.faults.stockout_after = 120
        error = await failed(c, "tpu", 3)
        assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.STOCKOUT, "GCE_STOCKOUT", True)
        assert "[GCE_STOCKOUT]" in error.message
        assert c.calls("POST", "/nodePools") == 3 and c.calls("DELETE", "/nodePools/gs-") == 3
        assert ours(c) == []
        await c.gcp.settle()
        assert not [n for n in await c.nodes() if "gs-" in n]
        assert c.gcp.faults.stock[(ZONE, TPU)] == 4  # every VM given back


@pytest.mark.parametrize(("pool", "machine"), [("l4", L4), ("cpu", CPU)], ids=["l4", "cpu"])
async def test_vms_that_cannot_all_be_had_are_all_removed(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, pool: str, machine: str) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.stock[(ZONE, machine)] = 2
        c.gcp.faults.resize_request_fail_after = 300
        error = await failed(c, pool, 4, deadline_after=900)
        assert error.error_class is ErrorClass.STOCKOUT and error.rolled_back, error
        assert ours(c) == []


async def test_quota_refused_at_once_makes_nothing(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.cpu_quota[REGION] = 100.0  # one v5e host has 112 vCPUs
        error = await failed(c, "tpu", 1)
        assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.QUOTA, "QUOTA_EXCEEDED", True)
        assert error.message.startswith("Insufficient regional quota to satisfy request: resource \"CPUS\"")
        assert ours(c) == [] and c.calls("POST", "/nodePools") == 1


async def test_quota_found_later_is_rolled_back(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.async_quota_next = 1
        error = await failed(c, "tpu", 2)
        assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.QUOTA, "GCE_QUOTA_EXCEEDED", True)
        assert ours(c) == []


@pytest.mark.parametrize("injected", [
    InjectedError(429, "POST", "/nodePools$", THROTTLED, times=2),
    InjectedError(429, "POST", "/nodePools$", THROTTLED, retry_after=5, times=1),
    InjectedError(400, "POST", "/nodePools$", BUSY, status_name="FAILED_PRECONDITION", times=3),
], ids=["too-many-operations", "too-many-operations-retry-after", "cluster-busy"])
async def test_a_busy_cluster_is_waited_out(clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP,
                                            injected: InjectedError) -> None:
    async with cloud(clock, apiserver, http) as c:
        refusals = injected.times
        c.gcp.faults.errors.append(injected)
        started = clock.now()
        got = await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))
        assert len(got.units) == 1 and c.calls("POST", "/nodePools") == refusals + 1
        assert clock.now() - started >= (injected.retry_after or 2.0)
        assert len(ours(c)) == 1


@pytest.mark.parametrize("injected", [
    InjectedError(500, "POST", "/nodePools$", html=True),
    InjectedError(503, "POST", "/nodePools$", "The service is currently unavailable."),
    # After the slice runs, while its VMs are listed (found by hack/chaos.py --provider gke, seed 7011: it escaped
    # as a raw HTTP error, not an error class).
    InjectedError(429, "POST", "/listManagedInstances$", "Quota exceeded for quota metric 'Read requests'."),
], ids=["500-html", "503", "429-listing-the-slice"])
async def test_server_errors_are_transient_and_a_repeat_finishes_the_obtain(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, injected: InjectedError) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.errors.append(injected)
        error = await failed(c, "tpu", 1)
        assert (error.error_class, error.rolled_back) == (ErrorClass.TRANSIENT, False)
        got = await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))
        assert [u.unit_id for u in got.units] == [names.unit_name(TOKEN, 0)]


async def test_a_lost_answer_is_repeated_and_the_pool_adopted_not_made_twice(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.lost_responses = 1
        error = await failed(c, "tpu", 1)
        assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.TRANSIENT, "UNAVAILABLE", False)
        assert ours(c) == [names.unit_name(TOKEN, 0)]  # the create was applied
        got = await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))
        assert [u.unit_id for u in got.units] == ours(c) and c.calls("POST", "/nodePools") == 2


async def test_a_name_taken_by_someone_else_fails_and_their_pool_is_left_alone(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.add_node_pool((REGION, CLUSTER), names.unit_name(TOKEN, 0), machine_type="n2-standard-8", zones=[ZONE])
        error = await failed(c, "tpu", 1)
        assert (error.error_class, error.code) == (ErrorClass.PERMANENT, "NODE_POOL_NAME_TAKEN")
        assert names.unit_name(TOKEN, 0) in c.node_pools()


async def test_an_operation_not_done_by_the_deadline_is_rolled_back_like_a_stockout(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.operation_seconds = 600
        error = await failed(c, "tpu", 1, deadline_after=300)
        assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.STOCKOUT, "DEADLINE_EXCEEDED", True)
        assert ours(c) == []


async def test_a_missing_cluster_and_an_autoscaled_pool_are_refused_at_start(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    async with cloud(clock, apiserver, http, text=POOLS_YAML.replace("cluster: c1", "cluster: nowhere"),
                     start=False) as c:
        with pytest.raises(ProviderError) as caught:
            await c.drive(c.provider.start())
        assert (caught.value.error_class, caught.value.code) == (ErrorClass.PERMANENT, "NOT_FOUND")
    async with cloud(clock, apiserver, http, start=False) as c:
        c.gcp.state.pool(REGION, CLUSTER, "l4").autoscaling = {"enabled": True, "maxNodeCount": 6}  # type: ignore
        with pytest.raises(ProviderError) as caught:
            await c.drive(c.provider.start())
        assert caught.value.code == "AUTOSCALED_BY_GKE" and "--no-enable-autoscaling" in caught.value.message


async def test_a_slice_left_in_error_by_an_obtain_nobody_finishes_is_deleted_by_the_next_start_or_obtain(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    """The create was applied, its answer lost, and its process ended (its request deleted meanwhile): GKE leaves
    the slice's node pool in ERROR with no VM, which no Node reveals (found by hack/chaos.py --provider gke, seed
    9039). A provider that starts, or makes another slice in the cluster, deletes it."""
    async with cloud(clock, apiserver, http) as c:
        c.gcp.faults.stock[(ZONE, TPU)] = 0
        c.gcp.faults.stockout_after = 60
        c.gcp.faults.lost_responses = 1
        error = await failed(c, "tpu", 1)
        assert (error.error_class, error.rolled_back) == (ErrorClass.TRANSIENT, False)
        await clock.advance(120)
        await c.gcp.settle()
        assert c.node_pools()[names.unit_name(TOKEN, 0)] == "ERROR"

        await c.restarted()
        await clock.advance(5)
        await c.gcp.settle()
        assert names.unit_name(TOKEN, 0) not in c.node_pools()

        c.gcp.faults.lost_responses = 1
        await failed(c, "tpu", 1)  # again, and this time another obtain comes along
        await clock.advance(120)
        c.gcp.faults.stock[(ZONE, TPU)] = 2
        other = TOKEN.replace("aabb", "ccdd")
        await c.drive(c.provider.obtain("tpu", 1, token=other, deadline=c.deadline()))
        assert sorted(name for name in c.node_pools() if name.startswith("gs-")) == [names.unit_name(other, 0)]
