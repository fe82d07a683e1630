"""Fixtures for the fake EC2: a started :class:`FakeEc2` on the test's manual clock, a plain aiobotocore EC2 client
pointed at it (the real SDK's serialisation and signing). Every exchange is checked against botocore's model by the
``ec2_traffic`` fixture of ``tests/conftest.py``, for every test that runs a fake EC2."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from gangscale.clock import ManualClock
from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws.model import validate_output

REGION = "us-east-1"
ZONE = "us-east-1a"
SUBNET = "subnet-0aaaaaaaaaaaaaaa1"
TEMPLATE = "lt-0123456789abcdef0"
USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: my-eks
  kubelet:
    flags:
      - --node-labels=eks.amazonaws.com/nodegroup=gpu-ng,eks.amazonaws.com/capacityType=ON_DEMAND
      - --register-with-taints=nvidia.com/gpu=present:NoSchedule

--//--
"""


def set_up(fake: FakeEc2) -> None:
    fake.add_subnet(SUBNET, ZONE, cidr="10.0.0.0/20")
    fake.add_launch_template(TEMPLATE, "gpu", user_data=USER_DATA, instance_type="p5.48xlarge")


@pytest_asyncio.fixture
async def ec2(clock: ManualClock) -> AsyncIterator[FakeEc2]:
    fake = FakeEc2(clock, None, region=REGION)
    set_up(fake)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.aclose()


def client_for(fake: FakeEc2, **retries: Any) -> Any:
    config = AioConfig(retries={"mode": "standard", "total_max_attempts": 3, **retries}, user_agent="test-client/1.0")
    return get_session().create_client("ec2", region_name=fake.region, endpoint_url=fake.url,
                                       aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                                       config=config)


@pytest_asyncio.fixture
async def client(ec2: FakeEc2) -> AsyncIterator[Any]:
    async with client_for(ec2) as made:
        yield made


def fleet_request(units: int, *, token: str = "tok-1", capacity: str = "on-demand", minimum: int | None = None,
                  single: bool = True, instance_type: str = "p5.48xlarge", **extra: Any) -> dict[str, Any]:
    """The CreateFleet gangscale's aws provider sends (the shared contract), in botocore's member names."""
    options: dict[str, Any] = {"MinTargetCapacity": units if minimum is None else minimum}
    if single:
        options.update(SingleInstanceType=True, SingleAvailabilityZone=True)
    request: dict[str, Any] = {
        "Type": "instant", "ClientToken": token,
        "TargetCapacitySpecification": {"TotalTargetCapacity": units, "DefaultTargetCapacityType": capacity},
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": {"LaunchTemplateId": TEMPLATE, "Version": "$Latest"},
                                   "Overrides": [{"InstanceType": instance_type, "SubnetId": SUBNET,
                                                  "AvailabilityZone": ZONE}]}],
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [
            {"Key": "gangscale.io/token", "Value": token}, {"Key": "gangscale.io/pool", "Value": "gpu"},
            {"Key": "kubernetes.io/cluster/my-eks", "Value": "owned"}]}],
    }
    request["SpotOptions" if capacity == "spot" else "OnDemandOptions"] = options
    request.update(extra)
    return request


def checked(operation: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The answer as botocore parsed it, after checking it against the model."""
    problems = validate_output(operation, answer)
    assert not problems, problems
    return answer
