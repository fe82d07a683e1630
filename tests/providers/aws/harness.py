"""The aws provider against the fake EC2 (``gangscale.sim.aws``) over real HTTP, signed by aiobotocore.

Every exchange is checked against botocore's EC2 model at the end of each test (:meth:`Cloud.model_problems`):
the provider's requests and the fake's answers. Time is the test's :class:`ManualClock`; the fake's instances boot
at once unless a test says otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from gangscale.clock import ManualClock
from gangscale.config import parse_pool_yaml
from gangscale.model.nodepool import NodePool
from gangscale.providers.aws import AwsProvider
from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws import model as ec2_model

REGION, ZONE, OTHER_ZONE = "us-east-1", "us-east-1a", "us-east-1b"
SUBNET, OTHER_SUBNET = "subnet-0abc", "subnet-0def"
TEMPLATE = "lt-0123456789abcdef0"
CLUSTER = "my-eks"
P5, G5 = "p5.48xlarge", "g5.xlarge"
KEYS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
POOLS_YAML = f"""
nodePools:
- name: gpu
  machineType: {P5}
  zone: {ZONE}
  maxUnits: 16
  aws: {{region: {REGION}, cluster: {CLUSTER}, launchTemplate: {TEMPLATE}, subnet: {SUBNET}}}
- name: spot
  machineType: {G5}
  zone: {OTHER_ZONE}
  capacityType: spot
  maxUnits: 16
  aws: {{region: {REGION}, cluster: {CLUSTER}, launchTemplate: gpu-nodes, subnet: {OTHER_SUBNET}, nodeGroup: gpu-ng}}
- name: odcr
  machineType: {P5}
  zone: {ZONE}
  capacityType: reservation
  reservation: {{name: cr-0123456789abcdef0, nodes: 8}}
  maxUnits: 8
  aws: {{region: {REGION}, cluster: {CLUSTER}, launchTemplate: {TEMPLATE}, subnet: {SUBNET}}}
"""
DEADLINE_AFTER = 600.0


def pools(text: str = POOLS_YAML) -> tuple[NodePool, ...]:
    return parse_pool_yaml(text).pools


@dataclass
class Cloud:
    clock: ManualClock
    ec2: FakeEc2
    provider: AwsProvider
    others: list[AwsProvider] = field(default_factory=list)

    def deadline(self, after: float = DEADLINE_AFTER) -> float:
        return self.clock.now() + after

    def calls(self, action: str) -> int:
        """Exchanges of ``action`` the fake saw (answered or not)."""
        return sum(1 for call in self.ec2.calls if call.action == action)

    def ours(self, *, live: bool = True) -> list[str]:
        """Instances tagged by gangscale (live ones only by default)."""
        return sorted(i.id for i in self.ec2.instances.values()
                      if "gangscale.io/token" in i.tags and (i.live or not live))

    def running(self) -> list[str]:
        return sorted(i.id for i in self.ec2.instances.values() if i.state in ("pending", "running"))

    async def provider_again(self, **kw: object) -> AwsProvider:
        """Another provider on the same fake (a restart, or another replica), started."""
        other = new_provider(self.ec2, **kw)
        self.others.append(other)
        await other.start()
        return other

    def model_problems(self) -> list[str]:
        found = []
        for call in self.ec2.calls:
            found += [f"{call.action} request: {p}" for p in ec2_model.request_problems(call.action, call.form)
                      if call.user_agent.startswith("gangscale")]
            if call.status:
                found += [f"{call.action} answer: {p}"
                          for p in ec2_model.answer_problems(call.action, call.status, call.body)]
        return found


def new_provider(ec2: FakeEc2, *, text: str = POOLS_YAML, max_attempts: int = 3) -> AwsProvider:
    return AwsProvider(pools(text), ec2.clock, endpoint_url=ec2.url, credentials=KEYS, max_attempts=max_attempts,
                       user_agent="gangscale-test", poll_interval=1.0)


@asynccontextmanager
async def cloud(clock: ManualClock, *, text: str = POOLS_YAML, max_attempts: int = 3,
                start: bool = True) -> AsyncIterator[Cloud]:
    ec2 = FakeEc2(clock, None, region=REGION)
    ec2.add_subnet(SUBNET, ZONE, cidr="10.0.0.0/20")
    ec2.add_subnet(OTHER_SUBNET, OTHER_ZONE, cidr="10.0.16.0/20")
    ec2.add_launch_template(TEMPLATE, "gpu-nodes")
    ec2.add_capacity_reservation("cr-0123456789abcdef0", P5, ZONE, 8)
    await ec2.start()
    provider = new_provider(ec2, text=text, max_attempts=max_attempts)
    c = Cloud(clock, ec2, provider)
    try:
        if start:
            await provider.start()
        yield c
        problems = c.model_problems()
        assert not problems, "\n".join(problems[:10])
    finally:
        for p in (provider, *c.others):
            await p.aclose()
        await ec2.aclose()
