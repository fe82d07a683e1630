"""``gangscale sim aws``'s knobs from a pool's ``simulated:`` section and its call log (``standalone.apply_knobs``,
``standalone.call_line``), which the three-process test (``tests/cli/test_run_aws.py``) relies on."""

from __future__ import annotations

from typing import Any

from gangscale.clock import ManualClock
from gangscale.config import parse_pool_yaml
from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws.standalone import apply_knobs, call_line, set_up
from tests.sim.aws.conftest import client_for, fleet_request

POOLS = """\
nodePools:
- name: gpu
  machineType: p5.48xlarge
  zone: us-east-1a
  maxUnits: 8
  aws: {region: us-east-1, cluster: my-eks, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0aaaaaaaaaaaaaaa1}
  simulated: {stock: 3, lostResponses: 1}
- name: spot
  machineType: g5.xlarge
  zone: us-east-1a
  capacityType: spot
  maxUnits: 8
  aws: {region: us-east-1, cluster: my-eks, launchTemplate: lt-0123456789abcdef1, subnet: subnet-0aaaaaaaaaaaaaaa1}
  simulated: {provisionSeconds: 5}
"""


def test_stock_and_lost_answers_come_from_the_simulated_section(clock: ManualClock) -> None:
    ec2 = FakeEc2(clock, None)
    apply_knobs(ec2, parse_pool_yaml(POOLS).pools)
    # The spot pool's section sets no stock: its stock stays unlimited (absent).
    assert ec2.stock == {("p5.48xlarge", "us-east-1a", "on-demand"): 3}
    assert (ec2.faults.lost_answers, ec2.faults.lost_action) == (1, "CreateFleet")


async def test_the_call_log_shows_a_lost_answer_its_replay_and_a_shortfall(clock: ManualClock) -> None:
    ec2 = FakeEc2(clock, None)
    pools = parse_pool_yaml(POOLS).pools
    set_up(ec2, pools)
    apply_knobs(ec2, pools)
    lines: list[str] = []
    ec2.observers.append(lambda exchange: lines.append(line) if (line := call_line(exchange)) else None)
    await ec2.start()
    try:
        async with client_for(ec2) as client:
            request: dict[str, Any] = fleet_request(2, token="t-1")
            first = await client.create_fleet(**request)  # lost, then botocore's retry: the replay
            short = await client.create_fleet(**{**request, "ClientToken": "t-2", "TargetCapacitySpecification": {
                "TotalTargetCapacity": 4, "DefaultTargetCapacityType": "on-demand"},
                "OnDemandOptions": {"MinTargetCapacity": 4, "SingleInstanceType": True}})
            await client.describe_instances()
    finally:
        await ec2.aclose()
    ids = ",".join(i for item in first["Instances"] for i in item["InstanceIds"])
    assert short["Instances"] == []
    assert lines == [f"CreateFleet ClientToken=t-1 TotalTargetCapacity=2 -> answer lost after it was applied: "
                     f"2 instance(s) {ids}",
                     f"CreateFleet ClientToken=t-1 TotalTargetCapacity=2 -> 200: 2 instance(s) {ids}",
                     "CreateFleet ClientToken=t-2 TotalTargetCapacity=4 -> 200: 0 instance(s) - "
                     "errors InsufficientInstanceCapacity"]
