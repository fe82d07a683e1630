"""The aws provider against the fake EC2: all or nothing, one CreateFleet per obtain, the token's instances found
again after a lost answer or a restart, idempotent release, errors classified."""

from __future__ import annotations

import pytest

from gangscale.clock import ManualClock
from gangscale.providers.base import ErrorClass, Obtained, ProviderError
from tests.providers.aws.harness import G5, OTHER_ZONE, P5, ZONE, cloud

TOKEN = "7a0c1e2f-3b4d-4c5e-9f60-718293a4b5c6-1"


def assert_whole(got: Obtained, units: int, pool: str = "gpu") -> None:
    assert (got.token, got.pool, len(got.units), got.incomplete) == (TOKEN, pool, units, ())
    assert len({u.unit_id for u in got.units}) == units
    assert all(u.unit_id.startswith("i-") and len(u.nodes) == 1 and u.nodes[0].endswith(".ec2.internal")
               for u in got.units)


async def test_an_8_unit_obtain_makes_exactly_8_instances_from_one_create_fleet(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        got = await c.provider.obtain("gpu", 8, token=TOKEN, deadline=c.deadline())
        assert_whole(got, 8)
        assert c.calls("CreateFleet") == 1
        assert c.ours() == sorted(u.unit_id for u in got.units)
        for unit in got.units:
            instance = c.ec2.instances[unit.unit_id]
            assert (instance.instance_type, instance.zone, instance.lifecycle) == (P5, ZONE, "on-demand")
            assert instance.private_dns == unit.nodes[0]
            assert instance.tags["gangscale.io/token"] == TOKEN and instance.tags["kubernetes.io/cluster/my-eks"] == \
                "owned"
        # The same token again: the same units, and no second fleet.
        again = await c.provider.obtain("gpu", 8, token=TOKEN, deadline=c.deadline())
        assert sorted(again.units, key=lambda u: u.unit_id) == sorted(got.units, key=lambda u: u.unit_id)
        assert c.calls("CreateFleet") == 1
        assert all(call.user_agent.startswith("gangscale-test") for call in c.ec2.calls)


async def test_a_zone_without_stock_for_all_8_gets_no_instance_and_a_stockout(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        c.ec2.stock[(P5, ZONE, "on-demand")] = 7
        with pytest.raises(ProviderError) as caught:
            await c.provider.obtain("gpu", 8, token=TOKEN, deadline=c.deadline())
        error = caught.value
        assert (error.error_class, error.rolled_back, error.pool) == (ErrorClass.STOCKOUT, True, "gpu")
        assert c.ours(live=False) == [] and c.ec2.stock[(P5, ZONE, "on-demand")] == 7
        assert await c.provider.lookup(TOKEN) is None


@pytest.mark.parametrize(("code", "status", "expected", "rolled_back"), [
    ("VcpuLimitExceeded", 400, ErrorClass.QUOTA, True),
    ("InstanceLimitExceeded", 400, ErrorClass.QUOTA, True),
    ("InsufficientInstanceCapacity", 500, ErrorClass.STOCKOUT, True),
    ("UnauthorizedOperation", 403, ErrorClass.PERMANENT, True),
    ("InternalError", 500, ErrorClass.TRANSIENT, False),
])
async def test_a_refused_create_fleet_is_classified(clock: ManualClock, code: str, status: int,
                                                    expected: ErrorClass, rolled_back: bool) -> None:
    async with cloud(clock, max_attempts=1) as c:
        c.ec2.faults.fail(code, status, action="CreateFleet")
        with pytest.raises(ProviderError) as caught:
            await c.provider.obtain("gpu", 4, token=TOKEN, deadline=c.deadline())
        assert (caught.value.error_class, caught.value.code, caught.value.rolled_back) == \
            (expected, code, rolled_back)
        assert c.ours(live=False) == []


async def test_a_spent_vcpu_quota_in_the_fleets_errors_is_quota(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        c.ec2.quotas["Running On-Demand P instances"] = 200  # vCPUs: one p5.48xlarge (192), not two
        with pytest.raises(ProviderError) as caught:
            await c.provider.obtain("gpu", 2, token=TOKEN, deadline=c.deadline())
        assert (caught.value.error_class, caught.value.code, caught.value.rolled_back) == \
            (ErrorClass.QUOTA, "VcpuLimitExceeded", True)
        assert c.ours(live=False) == []


async def test_a_throttle_is_retried_by_botocore_with_the_same_token(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        c.ec2.faults.throttle, c.ec2.faults.throttle_action = 1, "CreateFleet"
        got = await c.provider.obtain("gpu", 2, token=TOKEN, deadline=c.deadline())
        assert_whole(got, 2)
        assert c.calls("CreateFleet") == 2 and len(c.ours()) == 2


async def test_a_throttle_the_client_gives_up_on_is_transient_with_its_retry_after(clock: ManualClock) -> None:
    async with cloud(clock, max_attempts=1) as c:
        c.ec2.faults.throttle, c.ec2.faults.throttle_action = 1, "CreateFleet"
        c.ec2.faults.throttle_retry_after_ms = 2000
        with pytest.raises(ProviderError) as caught:
            await c.provider.obtain("gpu", 2, token=TOKEN, deadline=c.deadline())
        assert (caught.value.error_class, caught.value.code, caught.value.retry_after) == \
            (ErrorClass.TRANSIENT, "RequestLimitExceeded", 2.0)


async def test_a_dropped_answer_repeated_with_the_same_token_makes_no_second_instance_set(
        clock: ManualClock) -> None:
    async with cloud(clock, max_attempts=1) as c:
        c.ec2.faults.lost_answers, c.ec2.faults.lost_action = 1, "CreateFleet"
        with pytest.raises(ProviderError) as caught:
            await c.provider.obtain("gpu", 8, token=TOKEN, deadline=c.deadline())
        assert (caught.value.error_class, caught.value.rolled_back) == (ErrorClass.TRANSIENT, False)
        assert len(c.ours()) == 8  # applied, answer lost
        got = await c.provider.obtain("gpu", 8, token=TOKEN, deadline=c.deadline())
        assert_whole(got, 8)
        assert sorted(u.unit_id for u in got.units) == c.ours()
        assert c.calls("CreateFleet") == 1  # the repeat found the token's instances


async def test_a_dropped_answer_botocore_repeats_is_replayed_by_the_client_token(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        c.ec2.faults.lost_answers, c.ec2.faults.lost_action = 1, "CreateFleet"
        got = await c.provider.obtain("gpu", 8, token=TOKEN, deadline=c.deadline())
        assert_whole(got, 8)
        assert c.calls("CreateFleet") == 2 and len(c.ours()) == 8  # one launch, answered on the second call


async def test_lookup_after_a_restart_finds_the_tokens_instances(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        got = await c.provider.obtain("spot", 3, token=TOKEN, deadline=c.deadline())
        assert_whole(got, 3, "spot")
        assert {c.ec2.instances[u.unit_id].lifecycle for u in got.units} == {"spot"}
        assert {(c.ec2.instances[u.unit_id].instance_type, c.ec2.instances[u.unit_id].zone) for u in got.units} == \
            {(G5, OTHER_ZONE)}
        await c.provider.aclose()
        restarted = await c.provider_again()
        found = await restarted.lookup(TOKEN)
        assert found is not None
        assert (found.pool, sorted(found.units, key=lambda u: u.unit_id), found.incomplete) == \
            ("spot", sorted(got.units, key=lambda u: u.unit_id), ())
        assert await restarted.lookup("another-token") is None


async def test_release_is_idempotent(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        got = await c.provider.obtain("gpu", 3, token=TOKEN, deadline=c.deadline())
        first = got.units[0].unit_id
        await c.provider.release("gpu", [first], token="scale-down-1")
        assert first not in c.running() and len(c.running()) == 2
        found = await c.provider.lookup(TOKEN)
        assert found is not None and found.incomplete == (first,)  # a unit lost since
        await c.provider.release("gpu", [first], token="scale-down-1")  # again: nothing to do, no error
        await c.provider.release("gpu", [u.unit_id for u in got.units], token="scale-down-2")
        await c.provider.release("gpu", [u.unit_id for u in got.units], token="scale-down-2")
        await c.ec2.settle()
        assert c.running() == []
        assert await c.provider.lookup(TOKEN) is None
        await c.provider.release("gpu", ["i-0000000000000dead"], token="orphan")  # an id EC2 never knew
        # An instance of another pool is never terminated by a release naming this one.
        spot = await c.provider.obtain("spot", 1, token="tok-spot", deadline=c.deadline())
        await c.provider.release("gpu", [spot.units[0].unit_id], token="wrong-pool")
        assert spot.units[0].unit_id in c.running()


async def test_an_odcr_pool_launches_into_its_reservation_and_stops_at_its_size(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        got = await c.provider.obtain("odcr", 6, token=TOKEN, deadline=c.deadline())
        assert_whole(got, 6, "odcr")
        assert {c.ec2.instances[u.unit_id].capacity_reservation_id for u in got.units} == {"cr-0123456789abcdef0"}
        with pytest.raises(ProviderError) as caught:
            await c.provider.obtain("odcr", 4, token="tok-2", deadline=c.deadline())
        assert (caught.value.error_class, caught.value.rolled_back) == (ErrorClass.STOCKOUT, True)
        assert len(c.ours()) == 6  # no spill onto on-demand


async def test_the_fence_stops_a_launch(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        for ec2 in c.provider.clients.values():
            ec2.fence = lambda: False
        with pytest.raises(ProviderError) as caught:
            await c.provider.obtain("gpu", 2, token=TOKEN, deadline=c.deadline())
        assert (caught.value.code, caught.value.pool, caught.value.rolled_back) == ("NOT_LEADER", "gpu", False)
        assert c.calls("CreateFleet") == 0
