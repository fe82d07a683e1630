"""``gangscale sim aws`` set-up from pool-file pools, and ``serve``."""

from __future__ import annotations

import asyncio

from gangscale.clock import ManualClock
from gangscale.config import parse_pool_yaml
from gangscale.model.nodepool import NodePool
from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws.nodes import parse_user_data
from gangscale.sim.aws.standalone import serve, set_up

#: Read as the CLI reads it (config.parse_pool_yaml), so the aws sections are what the config makes of the file: a
#: reservation's id reaches them from ``reservation.name`` (a hand-built section once hid that mismatch).
POOLS = """\
nodePools:
  - name: gpu
    machineType: p5.48xlarge
    zone: us-east-1a
    maxUnits: 16
    labels: {team: ml}
    aws: {region: us-east-1, cluster: my-eks, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0abc,
          nodeGroup: gpu-ng}
  - name: cpu
    machineType: m5.large
    zone: us-east-1b
    maxUnits: 4
    capacityType: reservation
    reservation: {name: cr-0abc, nodes: 3}
    aws: {region: us-east-1, cluster: my-eks, launchTemplate: cpu-lt, subnet: subnet-0def}
"""


def pools() -> list[NodePool]:
    return list(parse_pool_yaml(POOLS).pools)


def test_set_up_makes_what_the_pools_name(clock: ManualClock) -> None:
    ec2 = FakeEc2(clock, None)
    set_up(ec2, pools())
    assert {s.id: s.zone for s in ec2.state.subnets.values()} == {"subnet-0abc": "us-east-1a",
                                                                   "subnet-0def": "us-east-1b"}
    gpu = ec2.state.template("lt-0123456789abcdef0")
    assert gpu is not None
    labels, taints = parse_user_data(str(gpu.versions[1]["UserData"]))
    assert labels == {"team": "ml", "gangscale.io/node-pool": "gpu", "eks.amazonaws.com/nodegroup": "gpu-ng",
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


def test_the_readmes_example_pool_file_is_valid_and_faked_whole(clock: ManualClock) -> None:
    """docs/examples/aws-pools.yaml, the README's local three-process run: valid, and every template, subnet and
    capacity reservation it names is made."""
    from pathlib import Path  # noqa: PLC0415

    from gangscale.config import load_pool_file  # noqa: PLC0415

    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "aws-pools.yaml"
    pools = load_pool_file(str(example)).pools
    ec2 = FakeEc2(clock, None)
    set_up(ec2, pools)
    assert {str(pool.provider["aws"]["subnet"]) for pool in pools} <= set(ec2.state.subnets)
    assert all(ec2.state.template(str(pool.provider["aws"]["launchTemplate"])) is not None for pool in pools)
    assert "cr-0123456789abcdef0" in ec2.state.reservations
