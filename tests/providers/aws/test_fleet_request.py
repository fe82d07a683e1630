"""The CreateFleet request of an obtain, per capacity type, checked against botocore's own service model: the
operation's input shape through botocore's ``ParamValidator`` (unknown members, types, required members, ranges)
and, since botocore does not check enums on the client, every string member against its shape's ``enum``."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from gangscale.config import parse_pool_yaml
from gangscale.providers.aws.fleet import EKS_CLUSTER_TAG, create_fleet, fleet_answer, target_capacity_type
from gangscale.providers.aws.pools import AwsPool, aws_pools

TOKEN = "7a0c1e2f-3b4d-4c5e-9f60-718293a4b5c6-1"
POOLS = """
nodePools:
- name: od
  machineType: p5.48xlarge
  zone: us-east-1a
  maxUnits: 16
  aws: {region: us-east-1, cluster: my-eks, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0abc,
        placementGroup: train-pg}
- name: spot
  machineType: g5.xlarge
  zone: us-east-1b
  capacityType: spot
  maxUnits: 16
  aws: {region: us-east-1, cluster: my-eks, launchTemplate: gpu-nodes, launchTemplateVersion: "3",
        subnet: subnet-0def, nodeGroup: gpu-ng}
- name: odcr
  machineType: p4d.24xlarge
  zone: us-east-1a
  capacityType: reservation
  reservation: {name: cr-0123456789abcdef0, nodes: 8}
  maxUnits: 8
  aws: {region: us-east-1, cluster: my-eks, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0abc}
- name: block
  machineType: p5.48xlarge
  zone: us-east-1a
  capacityType: reservation
  reservation: {name: cr-0fedcba9876543210, nodes: 8}
  maxUnits: 8
  aws: {region: us-east-1, cluster: my-eks, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0abc,
        capacityBlock: true}
"""


@cache
def input_shape() -> Any:
    return botocore.session.get_session().get_service_model("ec2").operation_model("CreateFleet").input_shape


def problems(params: dict[str, Any]) -> str:
    report = ParamValidator().validate(params, input_shape())
    found = [str(report.generate_report())] if report.has_errors() else []
    return "\n".join(found + enum_problems(params, input_shape(), "CreateFleet"))


def enum_problems(value: Any, shape: Any, path: str) -> list[str]:
    """String values outside their shape's enum, anywhere in ``value`` (what ParamValidator leaves unchecked)."""
    if shape.type_name == "structure" and isinstance(value, dict):
        return [p for name, item in value.items() if name in shape.members
                for p in enum_problems(item, shape.members[name], f"{path}.{name}")]
    if shape.type_name == "list" and isinstance(value, list):
        return [p for i, item in enumerate(value) for p in enum_problems(item, shape.member, f"{path}[{i}]")]
    enum = getattr(shape, "enum", None) or []
    if shape.type_name == "string" and enum and value not in enum:
        return [f"{path}: {value!r} is not one of the {len(enum)} values of {shape.name}"]
    return []


def pools() -> dict[str, AwsPool]:
    return aws_pools({p.name: p for p in parse_pool_yaml(POOLS).pools})


@pytest.mark.parametrize(("pool", "capacity_type", "options"), [
    ("od", "on-demand", "OnDemandOptions"),
    ("spot", "spot", "SpotOptions"),
    ("odcr", "reserved-capacity", "OnDemandOptions"),
    ("block", "capacity-block", "OnDemandOptions"),
])
def test_every_capacity_type_asks_for_all_or_nothing_in_the_models_terms(pool: str, capacity_type: str,
                                                                          options: str) -> None:
    ap = pools()[pool]
    params = create_fleet(ap, 8, TOKEN)
    assert problems(params) == ""
    assert target_capacity_type(ap) == capacity_type
    assert params["Type"] == "instant" and params["ClientToken"] == TOKEN
    assert params["TargetCapacitySpecification"] == {"TotalTargetCapacity": 8, "DefaultTargetCapacityType":
                                                     capacity_type}
    assert params[options] == {"MinTargetCapacity": 8, "SingleInstanceType": True, "SingleAvailabilityZone": True}
    assert {"OnDemandOptions", "SpotOptions"} - {options} - set(params) == {"OnDemandOptions", "SpotOptions"} - \
        {options}  # exactly one kind of options
    (config,) = params["LaunchTemplateConfigs"]
    (override,) = config["Overrides"]
    assert (override["InstanceType"], override["SubnetId"], override["AvailabilityZone"]) == \
        (ap.instance_type, ap.subnet, ap.zone)
    (tags,) = params["TagSpecifications"]
    assert tags["ResourceType"] == "instance"
    assert {t["Key"]: t["Value"] for t in tags["Tags"]} == {
        "gangscale.io/token": TOKEN, "gangscale.io/pool": pool, "gangscale.io/cluster": "my-eks",
        "gangscale.io/units": "8", EKS_CLUSTER_TAG.format(cluster="my-eks"): "owned"}


def test_the_pools_own_details_reach_the_request() -> None:
    od, spot, odcr, block = (create_fleet(pools()[name], 2, TOKEN) for name in ("od", "spot", "odcr", "block"))
    assert od["LaunchTemplateConfigs"][0]["Overrides"][0]["Placement"] == {"GroupName": "train-pg"}
    assert od["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"] == \
        {"LaunchTemplateId": "lt-0123456789abcdef0", "Version": "$Default"}
    assert spot["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"] == \
        {"LaunchTemplateName": "gpu-nodes", "Version": "3"}
    assert "Placement" not in spot["LaunchTemplateConfigs"][0]["Overrides"][0]
    assert odcr["ReservedCapacityOptions"] == {
        "ReservationTypes": ["on-demand-capacity-reservation"],
        "CapacityReservationTarget": {"CapacityReservationIds": ["cr-0123456789abcdef0"]}}
    # A Capacity Block is targeted by the launch template (AWS's tutorial); no fallback to on-demand either way.
    assert "ReservedCapacityOptions" not in block and "ReservedCapacityOptions" not in od
    assert all("ReservedCapacityFallbackOptions" not in p.get("ReservedCapacityOptions", {}) for p in (odcr, block))


@pytest.mark.parametrize("seed", [
    lambda p: p["OnDemandOptions"].update(MinTargetCapacty=8),  # a misspelt member
    lambda p: p["TargetCapacitySpecification"].update(DefaultTargetCapacityType="ondemand"),  # not in the enum
    lambda p: p["TargetCapacitySpecification"].update(TotalTargetCapacity="8"),  # a string for an integer
    lambda p: p.pop("LaunchTemplateConfigs"),  # a required member
    lambda p: p["TagSpecifications"][0].update(Tags={"gangscale.io/token": TOKEN}),  # a map for a list
])
def test_the_model_check_fails_on_a_seeded_wrong_member(seed: Any) -> None:
    params = copy.deepcopy(create_fleet(pools()["od"], 8, TOKEN))
    seed(params)
    assert problems(params) != ""


def test_the_answer_gives_each_instance_once_and_the_errors() -> None:
    answer = fleet_answer({"FleetId": "fleet-1", "Instances": [{"InstanceIds": ["i-1", "i-2"]},
                                                               {"InstanceIds": ["i-2", "i-3"]}],
                           "Errors": [{"ErrorCode": "InsufficientInstanceCapacity"}]})
    assert answer.instance_ids == ("i-1", "i-2", "i-3")
    assert [e["ErrorCode"] for e in answer.errors] == ["InsufficientInstanceCapacity"]
    assert fleet_answer({}).instance_ids == ()
