"""``gangscale sim aws`` set-up from pool-file pools, and ``serve``."""

from __future__ import annotations

import asyncio

from gangscale.clock import ManualClock
from gangscale.model.nodepool import NodePool
from gangscale.model.resources import ResourceList
from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws.nodes import parse_user_data
from gangscale.sim.aws.standalone import serve, set_up

AWS = {"region": "us-east-1", "cluster": "my-eks", "launchTemplate": "lt-0123456789abcdef0",
       "subnet": "subnet-0abc", "nodeGroup": "gpu-ng"}


def pools() -> list[NodePool]:
    return [NodePool("gpu", ResourceList(cpu=1000), 16, labels={"team": "ml"}, zone="us-east-1a",
                     machine_type="p5.48xlarge", provider={"aws": AWS}),
            NodePool("cpu", ResourceList(cpu=1000), 4, zone="us-east-1b", machine_type="m5.large",
                     capacity_type="reservation", reservation_nodes=3,
                     provider={"aws": {**AWS, "launchTemplate": "cpu-lt", "subnet": "subnet-0def",
                                       "nodeGroup": "", "capacityReservation": "cr-0abc"}})]


def test_set_up_makes_what_the_pools_name(clock: ManualClock) -> None:
    ec2 = FakeEc2(clock, None)
    set_up(ec2, pools())
    assert {s.id: s.zone for s in ec2.state.subnets.values()} == {"subnet-0abc": "us-east-1a",
                                                                   "subnet-0def": "us-east-1b"}
    gpu = ec2.state.template("lt-0123456789abcdef0")
    assert gpu is not None
    labels, taints = parse_user_data(str(gpu.versions[1]["UserData"]))
    assert labels == {"team": "ml", "eks.amazonaws.com/nodegroup": "gpu-ng",
                      "eks.amazonaws.com/capacityType": "ON_DEMAND"} and taints == []
    cpu = ec2.state.template("cpu-lt")
    assert cpu is not None and parse_user_data(str(cpu.versions[1]["UserData"]))[0] == {
        "gangscale.io/node-pool": "cpu"}
    assert ec2.state.reservations["cr-0abc"].total == 3


async def test_serve_until_stopped(clock: ManualClock) -> None:
    stop = asyncio.Event()
    urls: list[str] = []

    def ready(ec2: FakeEc2) -> None:
        urls.append(ec2.url)
        stop.set()

    assert await serve(pools(), None, clock=clock, ready=ready, stop=stop, heartbeats=False) == 0
    assert urls[0].startswith("http://127.0.0.1:")
