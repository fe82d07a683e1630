"""The node-name map of the aws provider: names recorded from every answer, unknown names read in the background
in batches, the controller told of names that turned out to be units of ours, negative answers kept for a while."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

from gangscale.clock import ManualClock
from gangscale.providers.aws.nodes import NodeNames
from tests.conftest import wait_for

JSON = dict[str, Any]


def instance(instance_id: str, name: str, token: str | None = None, state: str = "running") -> JSON:
    tags = [{"Key": "gangscale.io/token", "Value": token}, {"Key": "gangscale.io/pool", "Value": "gpu"}] \
        if token else []
    return {"InstanceId": instance_id, "PrivateDnsName": name, "State": {"Name": state}, "Tags": tags}


class Ec2Names:
    """Answers ``DescribeInstances`` by private DNS name from ``instances``; records every batch asked."""

    def __init__(self, *instances: JSON) -> None:
        self.instances = list(instances)
        self.asked: list[tuple[str, list[str]]] = []
        self.failures = 0

    async def __call__(self, region: str, names: Sequence[str]) -> list[JSON]:
        self.asked.append((region, list(names)))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("dropped")
        return [i for i in self.instances if i["PrivateDnsName"] in names]


async def test_an_unknown_node_of_ours_is_learnt_in_the_background_and_reclassified(clock: ManualClock) -> None:
    ec2 = Ec2Names(instance("i-1", "ip-10-0-0-1.ec2.internal", "tok"), instance("i-2", "ip-10-0-0-2.ec2.internal"))
    names = NodeNames(clock, ec2)
    told: list[list[str]] = []
    names.set_reclassify(lambda changed: told.append(sorted(changed)))
    names.start()
    try:
        for n in ("ip-10-0-0-1.ec2.internal", "ip-10-0-0-2.ec2.internal", "ip-10-0-0-3.ec2.internal"):
            assert names.ref(n, "us-east-1") is None
        await wait_for(lambda: ec2.asked)
        await asyncio.sleep(0)
        assert ec2.asked == [("us-east-1", ["ip-10-0-0-1.ec2.internal", "ip-10-0-0-2.ec2.internal",
                                            "ip-10-0-0-3.ec2.internal"])]  # one batch
        assert told == [["ip-10-0-0-1.ec2.internal"]]  # only the one that is ours changed its answer
        known = names.ref("ip-10-0-0-1.ec2.internal", "us-east-1")
        assert known is not None and (known.instance_id, known.token, known.pool) == ("i-1", "tok", "gpu")
        other = names.ref("ip-10-0-0-2.ec2.internal", "us-east-1")
        assert other is not None and other.token is None  # not ours, kept for good
        # No instance has the third name: not asked again until the negative answer expires.
        assert names.ref("ip-10-0-0-3.ec2.internal", "us-east-1") is None
        await asyncio.sleep(0.01)
        assert len(ec2.asked) == 1
        await clock.advance(names.absent_ttl)
        assert names.ref("ip-10-0-0-3.ec2.internal", "us-east-1") is None
        await wait_for(lambda: len(ec2.asked) == 2)
    finally:
        await names.aclose()


async def test_a_failed_read_is_tried_again_after_a_backoff(clock: ManualClock) -> None:
    ec2 = Ec2Names(instance("i-1", "ip-10-0-0-1.ec2.internal", "tok"))
    ec2.failures = 1
    names = NodeNames(clock, ec2)
    told: list[Collection[str]] = []
    names.set_reclassify(told.append)
    names.start()
    try:
        names.ref("ip-10-0-0-1.ec2.internal", "us-east-1")
        await wait_for(lambda: clock.sleepers == 1)
        assert told == []
        await clock.advance(60)
        await wait_for(lambda: told)
        assert list(told[0]) == ["ip-10-0-0-1.ec2.internal"] and len(ec2.asked) == 2
    finally:
        await names.aclose()


async def test_answers_fill_the_map_and_gone_instances_are_kept_for_a_while(clock: ManualClock) -> None:
    names = NodeNames(clock, Ec2Names(), gone_ttl=120)
    told: list[list[str]] = []
    names.set_reclassify(lambda changed: told.append(sorted(changed)))
    assert names.ref("ip-10-0-0-1.ec2.internal", "us-east-1") is None  # queued (no task started: not asked)
    names.record([instance("i-1", "ip-10-0-0-1.ec2.internal", "tok"), instance("i-9", "", "tok", "pending")])
    assert told == [["ip-10-0-0-1.ec2.internal"]]  # an obtain's answer reclassifies a node seen before it
    assert names.ref("ip-10-0-0-1.ec2.internal", "us-east-1") is not None
    names.record([instance("i-1", "ip-10-0-0-1.ec2.internal", "tok", "shutting-down")])
    # Chaos seed 27056: its Node is still there, a unit of ours being released, not a free node.
    known = names.ref("ip-10-0-0-1.ec2.internal", "us-east-1")
    assert known is not None and known.token == "tok" and known.gone == clock.now()
    names.record([instance("i-2", "ip-10-0-0-2.ec2.internal", "tok2")])
    names.forget({"i-2"})  # released
    assert names.ref("ip-10-0-0-2.ec2.internal", "us-east-1") is not None
    await clock.advance(120)
    # Then its address may be another instance's: asked about again.
    assert names.ref("ip-10-0-0-1.ec2.internal", "us-east-1") is None
    assert names.ref("ip-10-0-0-2.ec2.internal", "us-east-1") is None
    assert names.known == {}


async def test_a_foreign_instances_name_reused_by_one_of_ours_is_told(clock: ManualClock) -> None:
    """A node group's own instance is recorded as not ours for good; its private address can go to an instance a
    previous leader launched, which a lookup then records: the controller must hear of the name again."""
    names = NodeNames(clock, Ec2Names())
    told: list[list[str]] = []
    names.set_reclassify(lambda changed: told.append(sorted(changed)))
    names.record([instance("i-theirs", "ip-10-0-0-7.ec2.internal")])
    names.record([instance("i-theirs", "ip-10-0-0-7.ec2.internal")])  # the same answer again: nothing to tell
    assert told == []
    names.record([instance("i-ours", "ip-10-0-0-7.ec2.internal", "tok")])
    assert told == [["ip-10-0-0-7.ec2.internal"]]
    known = names.ref("ip-10-0-0-7.ec2.internal", "us-east-1")
    assert known is not None and (known.instance_id, known.token) == ("i-ours", "tok")
