"""Against the fake EC2: how the aws provider recognises nodes (a node it did not launch itself is learnt in the
background and the controller told), and what ``start`` refuses, naming the pool and the field."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from gangscale.clock import ManualClock
from gangscale.providers.base import ErrorClass, NodeRef, ProviderError
from tests.conftest import wait_for
from tests.providers.aws.harness import OTHER_ZONE, POOLS_YAML, TEMPLATE, ZONE, cloud

TOKEN = "7a0c1e2f-3b4d-4c5e-9f60-718293a4b5c6-1"
GPU_LABELS = {"gangscale.io/node-pool": "gpu", "topology.kubernetes.io/zone": ZONE}


async def test_node_ref_learns_an_unknown_node_through_the_background_read(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        other = await c.provider_again()  # another replica, started before the launch: it has not seen it
        told: list[Collection[str]] = []
        other.set_reclassify(told.append)
        got = await c.provider.obtain("gpu", 2, token=TOKEN, deadline=c.deadline())
        name, unit = got.units[0].nodes[0], got.units[0].unit_id
        # The provider that launched it knows the node at once; the other learns it.
        assert c.provider.node_ref(name, GPU_LABELS) == NodeRef("gpu", unit, TOKEN)
        assert other.node_ref(name, GPU_LABELS) == NodeRef("gpu")
        await wait_for(lambda: told)
        assert list(told[0]) == [name]
        assert other.node_ref(name, GPU_LABELS) == NodeRef("gpu", unit, TOKEN)
        assert c.calls("DescribeInstances") >= 1
        # A restarted provider knows every instance of the cluster from its start.
        restarted = await c.provider_again()
        assert restarted.node_ref(got.units[1].nodes[0], GPU_LABELS) == NodeRef("gpu", got.units[1].unit_id, TOKEN)


async def test_nodes_are_told_apart_by_label_and_zone(clock: ManualClock) -> None:
    async with cloud(clock) as c:
        got = await c.provider.obtain("spot", 1, token=TOKEN, deadline=c.deadline())
        name = got.units[0].nodes[0]
        managed = {"eks.amazonaws.com/nodegroup": "gpu-ng", "topology.kubernetes.io/zone": OTHER_ZONE}
        assert c.provider.node_ref(name, managed) == NodeRef("spot", got.units[0].unit_id, TOKEN)
        assert c.provider.node_ref(name, {**managed, "topology.kubernetes.io/zone": ZONE}) is None
        assert c.provider.node_ref("ip-10-9-9-9.ec2.internal", {"kubernetes.io/os": "linux"}) is None
        assert c.provider.claim(TOKEN) == TOKEN


@pytest.mark.parametrize(("change", "code", "field"), [
    (lambda c: c.ec2.state.templates.pop(TEMPLATE), "LAUNCH_TEMPLATE_NOT_FOUND", "aws.launchTemplate"),
    (lambda c: c.ec2.state.subnets.pop("subnet-0abc"), "SUBNET_NOT_FOUND", "aws.subnet"),
    (lambda c: c.ec2.add_subnet("subnet-0abc", OTHER_ZONE), "SUBNET_NOT_IN_ZONE", "aws.subnet"),
    (lambda c: setattr(c.ec2.state, "offerings", {("g5.xlarge", OTHER_ZONE)}), "INSTANCE_TYPE_NOT_OFFERED",
     "machineType"),
])
async def test_start_refuses_a_pool_it_cannot_serve(clock: ManualClock, change: object, code: str,
                                                    field: str) -> None:
    async with cloud(clock, text=POOLS_YAML, start=False) as c:
        change(c)  # type: ignore[operator]
        with pytest.raises(ProviderError) as caught:
            await c.provider.start()
        error = caught.value
        assert (error.error_class, error.code, error.pool) == (ErrorClass.PERMANENT, code, "gpu")
        assert error.message.startswith(field)
