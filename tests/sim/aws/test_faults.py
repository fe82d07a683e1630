"""Throttling honoured by botocore's standard retry, injected failures, holds, slow answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from gangscale.clock import ManualClock
from gangscale.sim.aws import FakeEc2, Hold
from tests.sim.aws.conftest import client_for, fleet_request


async def test_throttling_is_retried_by_botocore_standard_mode(ec2: FakeEc2, client: Any) -> None:
    ec2.faults.throttle = 1
    ec2.faults.throttle_retry_after_ms = 0
    await client.describe_subnets()
    assert [(c.action, c.status) for c in ec2.calls] == [("DescribeSubnets", 503), ("DescribeSubnets", 200)]
    assert "<Code>RequestLimitExceeded</Code>" in ec2.calls[0].body


async def test_throttling_past_the_attempts_is_an_error(ec2: FakeEc2) -> None:
    ec2.faults.throttle = 5
    ec2.faults.throttle_retry_after_ms = 0
    async with client_for(ec2, total_max_attempts=1) as client:
        with pytest.raises(ClientError) as caught:
            await client.describe_subnets()
    assert caught.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503


async def test_an_injected_failure_is_not_applied(ec2: FakeEc2, client: Any) -> None:
    ec2.faults.fail("InsufficientInstanceCapacity", 500, action="CreateFleet", message="We currently do not have "
                    "sufficient capacity", times=1)
    async with client_for(ec2, total_max_attempts=1) as single:
        with pytest.raises(ClientError) as caught:
            await single.create_fleet(**fleet_request(2))
    assert caught.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    assert ec2.instances == {}
    await client.create_fleet(**fleet_request(2))
    assert len(ec2.instances) == 2


async def test_a_held_call_dropped_unapplied(ec2: FakeEc2) -> None:
    hold = Hold("CreateFleet")
    ec2.holds.append(hold)
    async with client_for(ec2, total_max_attempts=1) as client:
        call = asyncio.create_task(client.create_fleet(**fleet_request(2)))
        await hold.held.wait()
        hold.released.set()
        with pytest.raises(Exception):  # noqa: B017 (the connection is closed: botocore's connection error)
            await call
    assert ec2.instances == {} and [c.status for c in ec2.calls] == [0]


async def test_slow_answers_wait_for_the_clock(ec2: FakeEc2, client: Any, clock: ManualClock) -> None:
    ec2.faults.answer_delay = 30
    call = asyncio.create_task(client.describe_subnets())
    while clock.sleepers == 0:  # noqa: ASYNC110 (the fake sleeps on the manual clock; nothing to wait on)
        await asyncio.sleep(0.01)
    assert not call.done()
    await clock.advance(30)
    assert (await call)["Subnets"]
