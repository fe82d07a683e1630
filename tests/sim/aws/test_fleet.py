"""CreateFleet instant through the real SDK: all or nothing, ClientToken replay, quotas, capacity types."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from gangscale.clock import ManualClock
from gangscale.sim.aws import FakeEc2
from tests.sim.aws.conftest import SUBNET, TEMPLATE, ZONE, checked, client_for, fleet_request


async def test_eight_instances_from_one_call(ec2: FakeEc2, client: Any) -> None:
    ec2.stock[("p5.48xlarge", ZONE, "on-demand")] = 8
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(8)))
    assert answer["Errors"] == []
    [group] = answer["Instances"]
    assert (group["Lifecycle"], group["InstanceType"], len(group["InstanceIds"])) == ("on-demand", "p5.48xlarge", 8)
    assert group["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"] == SUBNET
    assert answer["FleetId"].startswith("fleet-")
    assert ec2.stock[("p5.48xlarge", ZONE, "on-demand")] == 0
    described = checked("DescribeInstances", await client.describe_instances(InstanceIds=group["InstanceIds"]))
    instances = [i for r in described["Reservations"] for i in r["Instances"]]
    assert {i["InstanceId"] for i in instances} == set(group["InstanceIds"])
    first = instances[0]
    assert first["PrivateDnsName"] == "ip-" + first["PrivateIpAddress"].replace(".", "-") + ".ec2.internal"
    assert first["PrivateIpAddress"].startswith("10.0.0.") and first["Placement"]["AvailabilityZone"] == ZONE
    assert {"Key": "gangscale.io/token", "Value": "tok-1"} in first["Tags"]
    assert first["State"] == {"Code": 16, "Name": "running"}  # boot_seconds 0: running at once
    assert "InstanceLifecycle" not in first


async def test_all_or_nothing_stock_7_ask_8(ec2: FakeEc2, client: Any) -> None:
    ec2.stock[("p5.48xlarge", ZONE, "on-demand")] = 7
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(8)))
    assert answer["Instances"] == []
    assert [e["ErrorCode"] for e in answer["Errors"]] == ["InsufficientInstanceCapacity"]
    assert "p5.48xlarge capacity in the Availability Zone you requested (us-east-1a)" in \
        answer["Errors"][0]["ErrorMessage"]
    assert ec2.instances == {} and ec2.stock[("p5.48xlarge", ZONE, "on-demand")] == 7


async def test_without_a_minimum_a_fleet_launches_what_it_can(ec2: FakeEc2, client: Any) -> None:
    ec2.stock[("p5.48xlarge", ZONE, "on-demand")] = 3
    request = fleet_request(5)
    del request["OnDemandOptions"]
    answer = checked("CreateFleet", await client.create_fleet(**request))
    assert len(answer["Instances"][0]["InstanceIds"]) == 3
    assert [e["ErrorCode"] for e in answer["Errors"]] == ["InsufficientInstanceCapacity"]


async def test_lost_answer_is_replayed_by_client_token(ec2: FakeEc2, client: Any) -> None:
    ec2.faults.lost_answers = 1
    # botocore's standard retry sends the same request again (same ClientToken) after the connection drops.
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(4, token="tok-lost")))
    assert [c.status for c in ec2.calls if c.action == "CreateFleet"] == [0, 200]
    assert len(ec2.instances) == 4
    again = checked("CreateFleet", await client.create_fleet(**fleet_request(4, token="tok-lost")))
    assert (again["FleetId"], again["Instances"]) == (answer["FleetId"], answer["Instances"])
    assert len(ec2.instances) == 4


async def test_replay_of_a_failed_fleet_gives_the_same_errors_and_no_instances(ec2: FakeEc2, client: Any) -> None:
    ec2.stock[("p5.48xlarge", ZONE, "on-demand")] = 1
    first = await client.create_fleet(**fleet_request(2, token="tok-x"))
    ec2.stock[("p5.48xlarge", ZONE, "on-demand")] = 10
    again = await client.create_fleet(**fleet_request(2, token="tok-x"))
    assert (again["FleetId"], again["Errors"], again["Instances"]) == \
        (first["FleetId"], first["Errors"], first["Instances"])
    assert ec2.instances == {}


async def test_same_token_other_parameters_is_a_mismatch(ec2: FakeEc2, client: Any) -> None:
    await client.create_fleet(**fleet_request(2, token="tok-m"))
    with pytest.raises(ClientError) as caught:
        await client.create_fleet(**fleet_request(3, token="tok-m"))
    assert caught.value.response["Error"]["Code"] == "IdempotentParameterMismatch"
    assert len(ec2.instances) == 2


async def test_vcpu_quota_is_an_error_item_with_ec2s_message(ec2: FakeEc2, client: Any) -> None:
    ec2.quotas["Running On-Demand P instances"] = 192 * 3
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(4)))
    assert answer["Instances"] == []
    [error] = answer["Errors"]
    assert error["ErrorCode"] == "VcpuLimitExceeded"
    assert error["ErrorMessage"].startswith("You have requested more vCPU capacity than your current vCPU limit of "
                                            "576 allows for the instance bucket")
    assert len(checked("CreateFleet", await client.create_fleet(**fleet_request(3, token="t2")))["Instances"][0][
        "InstanceIds"]) == 3


async def test_spot_has_its_own_quota_and_lifecycle(ec2: FakeEc2, client: Any) -> None:
    ec2.quotas["All P Spot Instance Requests"] = 192
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(2, capacity="spot")))
    assert [e["ErrorCode"] for e in answer["Errors"]] == ["MaxSpotInstanceCountExceeded"]
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(1, capacity="spot", token="t3")))
    [instance_id] = answer["Instances"][0]["InstanceIds"]
    assert answer["Instances"][0]["Lifecycle"] == "spot"
    described = await client.describe_instances(InstanceIds=[instance_id])
    assert described["Reservations"][0]["Instances"][0]["InstanceLifecycle"] == "spot"


@pytest.mark.parametrize(("change", "code"), [
    ({"Type": "maintain"}, "Unsupported"),
    ({"OnDemandOptions": {"MinTargetCapacity": 2}}, "InvalidParameterCombination"),
])
async def test_refused_requests(ec2: FakeEc2, client: Any, change: dict[str, Any], code: str) -> None:
    with pytest.raises(ClientError) as caught:
        await client.create_fleet(**{**fleet_request(2), **change})
    assert caught.value.response["Error"]["Code"] == code
    assert ec2.instances == {}


async def test_instant_takes_one_subnet(ec2: FakeEc2, client: Any) -> None:
    ec2.add_subnet("subnet-0bbbbbbbbbbbbbbb2", "us-east-1b", cidr="10.0.16.0/20")
    request = fleet_request(2, single=False, minimum=0)
    request["LaunchTemplateConfigs"][0]["Overrides"].append(
        {"InstanceType": "p5.48xlarge", "SubnetId": "subnet-0bbbbbbbbbbbbbbb2"})
    with pytest.raises(ClientError) as caught:
        await client.create_fleet(**request)
    assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"


async def test_targeted_capacity_reservation_first(ec2: FakeEc2, client: Any) -> None:
    ec2.add_capacity_reservation("cr-0aaaaaaaaaaaaaaa1", "p5.48xlarge", ZONE, 2)
    ec2.state.templates[TEMPLATE].versions[1]["CapacityReservationSpecification"] = {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaaaaaaaaaaaaaa1"}}
    ec2.stock[("p5.48xlarge", ZONE, "on-demand")] = 1
    request = fleet_request(3)
    request["OnDemandOptions"]["CapacityReservationOptions"] = {"UsageStrategy": "use-capacity-reservations-first"}
    answer = checked("CreateFleet", await client.create_fleet(**request))
    assert answer["Errors"] == [] and len(answer["Instances"][0]["InstanceIds"]) == 3
    in_reservation = [i for i in ec2.instances.values() if i.capacity_reservation_id == "cr-0aaaaaaaaaaaaaaa1"]
    assert len(in_reservation) == 2
    reservations = checked("DescribeCapacityReservations", await client.describe_capacity_reservations())
    assert reservations["CapacityReservations"][0]["AvailableInstanceCount"] == 0


async def test_capacity_block_has_no_on_demand_fallback(ec2: FakeEc2, client: Any) -> None:
    ec2.add_capacity_reservation("cr-0bbbbbbbbbbbbbbb2", "p5.48xlarge", ZONE, 4, capacity_block=True)
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(5, capacity="capacity-block")))
    assert answer["Instances"] == [] and answer["Errors"][0]["ErrorCode"] == "InsufficientInstanceCapacity"
    answer = checked("CreateFleet", await client.create_fleet(**fleet_request(4, capacity="capacity-block",
                                                                              token="t4")))
    assert answer["Instances"][0]["Lifecycle"] == "capacity-block"
    assert {i.capacity_reservation_id for i in ec2.instances.values()} == {"cr-0bbbbbbbbbbbbbbb2"}


async def test_reserved_capacity_with_target_and_fallback(ec2: FakeEc2, client: Any) -> None:
    ec2.add_capacity_reservation("cr-0ccccccccccccccc3", "p5.48xlarge", ZONE, 1)
    request = fleet_request(2, capacity="reserved-capacity", ReservedCapacityOptions={
        "ReservationTypes": ["on-demand-capacity-reservation"],
        "CapacityReservationTarget": {"CapacityReservationIds": ["cr-0ccccccccccccccc3"]}})
    answer = checked("CreateFleet", await client.create_fleet(**request))
    assert answer["Instances"] == [] and answer["Errors"][0]["ErrorCode"] == "ReservationCapacityExceeded"
    request["ClientToken"] = "t5"
    request["ReservedCapacityOptions"]["ReservedCapacityFallbackOptions"] = {"MarketTypes": ["on-demand"]}
    answer = checked("CreateFleet", await client.create_fleet(**request))
    assert len(answer["Instances"][0]["InstanceIds"]) == 2
    assert sorted(str(i.capacity_reservation_id) for i in ec2.instances.values()) == ["None", "cr-0ccccccccccccccc3"]


async def test_region_dependent_dns_and_resource_names(clock: ManualClock) -> None:
    fake = FakeEc2(clock, None, region="eu-west-1")
    fake.add_subnet(SUBNET, "eu-west-1a", cidr="10.1.0.0/24")
    fake.add_subnet("subnet-0rrrrrrrrrrrrrrr9", "eu-west-1b", cidr="10.1.1.0/24", hostname_type="resource-name")
    fake.add_launch_template(TEMPLATE, "gpu", instance_type="m5.large")
    async with fake, client_for(fake) as client:
        request = fleet_request(1, instance_type="m5.large")
        request["LaunchTemplateConfigs"][0]["Overrides"][0]["AvailabilityZone"] = "eu-west-1a"
        await client.create_fleet(**request)
        request = fleet_request(1, instance_type="m5.large", token="other")
        request["LaunchTemplateConfigs"][0]["Overrides"][0].update(SubnetId="subnet-0rrrrrrrrrrrrrrr9",
                                                                   AvailabilityZone="eu-west-1b")
        await client.create_fleet(**request)
    names = sorted(i.private_dns for i in fake.instances.values())
    assert names[0] == "i-" + names[0][2:19] + ".eu-west-1.compute.internal"
    assert names[1] == "ip-10-1-0-4.eu-west-1.compute.internal"
