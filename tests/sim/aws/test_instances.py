"""DescribeInstances (filters, paging), TerminateInstances, instance states over the clock."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from gangscale.clock import ManualClock
from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws.state import Subnet
from tests.sim.aws.conftest import SUBNET, TEMPLATE, checked, fleet_request


async def launch(client: Any, units: int, token: str) -> list[str]:
    answer = await client.create_fleet(**fleet_request(units, token=token))
    return list(answer["Instances"][0]["InstanceIds"])


def ids_of(answer: dict[str, Any]) -> list[str]:
    return [i["InstanceId"] for r in answer["Reservations"] for i in r["Instances"]]


async def test_filters_by_tag_state_and_dns_name(ec2: FakeEc2, client: Any) -> None:
    first = await launch(client, 2, "a")
    second = await launch(client, 1, "b")
    by_tag = checked("DescribeInstances", await client.describe_instances(
        Filters=[{"Name": "tag:gangscale.io/token", "Values": ["a"]}]))
    assert sorted(ids_of(by_tag)) == sorted(first)
    name = ec2.instances[second[0]].private_dns
    by_dns = await client.describe_instances(Filters=[{"Name": "private-dns-name", "Values": [name]}])
    assert ids_of(by_dns) == second
    assert len(ids_of(await client.describe_instances(Filters=[{"Name": "tag-key", "Values": ["gangscale.io/*"]}]))) \
        == 3
    await client.terminate_instances(InstanceIds=first)
    running = await client.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["running"]}])
    assert ids_of(running) == second


async def test_paging(ec2: FakeEc2, client: Any) -> None:
    made = await launch(client, 12, "p")
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        kwargs: dict[str, Any] = {"MaxResults": 5, **({"NextToken": token} if token else {})}
        answer = checked("DescribeInstances", await client.describe_instances(**kwargs))
        seen += ids_of(answer)
        pages += 1
        token = answer.get("NextToken")
        if not token:
            break
    assert (sorted(seen), pages) == (sorted(made), 3)
    with pytest.raises(ClientError) as caught:
        await client.describe_instances(InstanceIds=made[:1], MaxResults=5)
    assert caught.value.response["Error"]["Code"] == "InvalidParameterCombination"


async def test_terminate_is_idempotent_and_terminated_instances_vanish_after_an_hour(
        ec2: FakeEc2, client: Any, clock: ManualClock) -> None:
    ec2.faults.shutdown_seconds = 30
    [instance_id] = await launch(client, 1, "t")
    answer = checked("TerminateInstances", await client.terminate_instances(InstanceIds=[instance_id]))
    change = answer["TerminatingInstances"][0]
    assert (change["PreviousState"]["Name"], change["CurrentState"]) == ("running", {"Code": 32,
                                                                                     "Name": "shutting-down"})
    await clock.advance(30)
    again = await client.terminate_instances(InstanceIds=[instance_id])
    assert again["TerminatingInstances"][0]["CurrentState"] == again["TerminatingInstances"][0]["PreviousState"] \
        == {"Code": 48, "Name": "terminated"}
    described = await client.describe_instances(InstanceIds=[instance_id])
    assert described["Reservations"][0]["Instances"][0]["StateReason"]["Code"] == "Client.UserInitiatedShutdown"
    await clock.advance(3600)
    with pytest.raises(ClientError) as caught:
        await client.describe_instances(InstanceIds=[instance_id])
    assert caught.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"


@pytest.mark.parametrize(("ids", "code"), [(["i-0123456789abcdef0"], "InvalidInstanceID.NotFound"),
                                           (["nonsense"], "InvalidInstanceID.Malformed")])
async def test_terminate_unknown_or_malformed_ids_terminates_nothing(ec2: FakeEc2, client: Any, ids: list[str],
                                                                     code: str) -> None:
    [instance_id] = await launch(client, 1, "u")
    with pytest.raises(ClientError) as caught:
        await client.terminate_instances(InstanceIds=[instance_id, *ids])
    assert caught.value.response["Error"]["Code"] == code
    assert ec2.instances[instance_id].state == "running"


async def test_pending_then_running_by_the_clock(ec2: FakeEc2, client: Any, clock: ManualClock) -> None:
    ec2.faults.boot_seconds = 40
    [instance_id] = await launch(client, 1, "b")
    state = (await client.describe_instances(InstanceIds=[instance_id]))["Reservations"][0]["Instances"][0]["State"]
    assert state == {"Code": 0, "Name": "pending"}
    await clock.advance(40)
    state = (await client.describe_instances(InstanceIds=[instance_id]))["Reservations"][0]["Instances"][0]["State"]
    assert state == {"Code": 16, "Name": "running"}


async def test_the_other_reads(ec2: FakeEc2, client: Any) -> None:
    templates = checked("DescribeLaunchTemplates", await client.describe_launch_templates(
        LaunchTemplateIds=[TEMPLATE]))
    assert templates["LaunchTemplates"][0]["LatestVersionNumber"] == 1
    versions = checked("DescribeLaunchTemplateVersions", await client.describe_launch_template_versions(
        LaunchTemplateId=TEMPLATE, Versions=["$Latest"]))
    assert b"kind: NodeConfig" in __import__("base64").b64decode(
        versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]["UserData"])
    subnets = checked("DescribeSubnets", await client.describe_subnets(SubnetIds=[SUBNET]))
    assert subnets["Subnets"][0]["AvailableIpAddressCount"] == 4096 - 5
    offerings = checked("DescribeInstanceTypeOfferings", await client.describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["p5.48xlarge"]}]))
    assert offerings["InstanceTypeOfferings"] == [{"InstanceType": "p5.48xlarge", "LocationType": "availability-zone",
                                                   "Location": "us-east-1a"}]
    types = checked("DescribeInstanceTypes", await client.describe_instance_types(InstanceTypes=["p5.48xlarge"]))
    assert types["InstanceTypes"][0]["VCpuInfo"]["DefaultVCpus"] == 192
    with pytest.raises(ClientError) as caught:
        await client.describe_launch_templates(LaunchTemplateNames=["nope"])
    assert caught.value.response["Error"]["Code"] == "InvalidLaunchTemplateName.NotFoundException"


def test_a_released_address_is_handed_out_again_only_after_the_others() -> None:
    """Chaos seed 23009: lowest-first gave a new instance the address (so the node name) of one terminated a moment
    before, while its Node was still being deleted."""
    subnet = Subnet("subnet-0a", "us-east-1a", "10.0.0.0/29")  # 8 addresses: .4, .5, .6 usable (AWS keeps 5)
    first = subnet.allocate()
    subnet.used.discard(first)
    assert [subnet.allocate(), subnet.allocate()] == ["10.0.0.5", "10.0.0.6"]
    assert subnet.allocate() == first == "10.0.0.4"  # round the range
    try:
        subnet.allocate()
    except ValueError as exc:
        assert "no free address" in str(exc)
    else:
        raise AssertionError("a full subnet handed out an address")
