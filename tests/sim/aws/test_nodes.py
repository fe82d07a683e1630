"""Instances register EKS Nodes in the embedded API server; spot reclaim as Node Termination Handler sees it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.aws import FakeEc2
from tests.sim.aws.conftest import REGION, ZONE, client_for, fleet_request, set_up


@pytest_asyncio.fixture
async def kube_ec2(clock: ManualClock, http: KubeHTTP) -> AsyncIterator[FakeEc2]:
    fake = FakeEc2(clock, http, region=REGION)
    set_up(fake)
    fake.faults.boot_seconds = 60
    fake.faults.ready_seconds = 10
    await fake.start()
    try:
        yield fake
    finally:
        await fake.aclose()


async def node(http: KubeHTTP, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await http.request("GET", f"/api/v1/nodes/{name}")
        return found
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def test_a_running_instance_registers_its_node_with_eks_labels(kube_ec2: FakeEc2, http: KubeHTTP,
                                                                      clock: ManualClock) -> None:
    async with client_for(kube_ec2) as client:
        answer = await client.create_fleet(**fleet_request(1))
    instance = kube_ec2.instances[answer["Instances"][0]["InstanceIds"][0]]
    await kube_ec2.settle()
    assert await node(http, instance.private_dns) is None  # still pending
    await clock.advance(60)
    await kube_ec2.settle()
    body = await node(http, instance.private_dns)
    assert body is not None
    labels = body["metadata"]["labels"]
    assert labels["eks.amazonaws.com/nodegroup"] == "gpu-ng" and labels["topology.kubernetes.io/zone"] == ZONE
    assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge" and labels["kubernetes.io/arch"] == "amd64"
    assert labels["topology.k8s.aws/zone-id"] == "use1-az1"
    assert body["spec"]["providerID"] == f"aws:///{ZONE}/{instance.id}"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in body["spec"]["taints"]
    assert body["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert {c["type"]: c["status"] for c in body["status"]["conditions"]}["Ready"] == "False"
    await clock.advance(10)
    await kube_ec2.settle()
    body = await node(http, instance.private_dns)
    assert body is not None and {c["type"]: c["status"] for c in body["status"]["conditions"]}["Ready"] == "True"


async def test_terminated_instances_lose_their_nodes(kube_ec2: FakeEc2, http: KubeHTTP, clock: ManualClock) -> None:
    kube_ec2.faults.shutdown_seconds = 20
    async with client_for(kube_ec2) as client:
        answer = await client.create_fleet(**fleet_request(1))
        [instance_id] = answer["Instances"][0]["InstanceIds"]
        await clock.advance(60)
        await kube_ec2.settle()
        name = kube_ec2.instances[instance_id].private_dns
        assert await node(http, name) is not None
        await client.terminate_instances(InstanceIds=[instance_id])
        await clock.advance(19)
        await kube_ec2.settle()
        assert await node(http, name) is not None
        await clock.advance(1)
        await kube_ec2.settle()
        assert await node(http, name) is None


async def test_spot_reclaim_taints_then_terminates(kube_ec2: FakeEc2, http: KubeHTTP, clock: ManualClock) -> None:
    async with client_for(kube_ec2) as client:
        answer = await client.create_fleet(**fleet_request(2, capacity="spot"))
        await clock.advance(70)
        await kube_ec2.settle()
        [reclaimed] = kube_ec2.reclaim(1)
        await kube_ec2.settle()
        name = kube_ec2.instances[reclaimed].private_dns
        body = await node(http, name)
        assert body is not None and body["spec"]["unschedulable"] is True
        assert any(t["key"] == "aws-node-termination-handler/spot-itn" and t["effect"] == "NoSchedule"
                   for t in body["spec"]["taints"])
        assert kube_ec2.instances[reclaimed].state == "running"
        await clock.advance(120)
        await kube_ec2.settle()
        described = await client.describe_instances(InstanceIds=[reclaimed])
        state = described["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] == "terminated"
        assert state["StateReason"]["Code"] == "Server.SpotInstanceTermination"
        assert await node(http, name) is None
    others = set(answer["Instances"][0]["InstanceIds"]) - {reclaimed}
    assert [kube_ec2.instances[i].state for i in others] == ["running"]


async def test_a_notice_given_before_the_node_joined_taints_it_when_it_joins(kube_ec2: FakeEc2, http: KubeHTTP,
                                                                              clock: ManualClock) -> None:
    """NTH runs on the node, so it sees a notice given while the instance booted once the node has joined (chaos
    seed 24024: the node was otherwise removed untainted, as if for no reason)."""
    kube_ec2.faults.register_seconds = 100
    kube_ec2.faults.spot_notice_seconds = 300
    async with client_for(kube_ec2) as client:
        await client.create_fleet(**fleet_request(1, capacity="spot"))
    await clock.advance(60)
    await kube_ec2.settle()
    [reclaimed] = kube_ec2.reclaim(1)
    name = kube_ec2.instances[reclaimed].private_dns
    assert await node(http, name) is None
    await clock.advance(100)
    await kube_ec2.settle()
    body = await node(http, name)
    assert body is not None and body["spec"]["unschedulable"] is True
    assert any(t["key"] == "aws-node-termination-handler/spot-itn" for t in body["spec"]["taints"])
