"""A 3-slice TPU gang (3 units of 2 hosts: 6 nodes) with ``gangscale run`` SIGKILLed at each point of its
scale-up, then restarted: it ends ``Provisioned=True`` with all 6 nodes Ready, or not Provisioned with no node
left, and never more than 6 nodes exist at once (issue "atomic across crashes")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crash.harness import (
    TPU_TEMPLATE,
    Cluster,
    crash_cluster,
    ready,
    recorded_tokens,
    tracebacks,
    units_of,
    wait_until_async,
)

STATUS = {"verb": "patch", "resource": "provisioningrequests", "subresource": "status"}
NODE_CREATE = {"verb": "create", "resource": "nodes"}


#: (the request to hold: the process is killed just before it would reach the server, extra faults first)
KILL_POINTS = [
    pytest.param({**STATUS, "body_contains": "obtaining"}, [], id="before-the-intent-is-written"),
    pytest.param(NODE_CREATE, [], id="before-the-provider-call"),
    pytest.param({**NODE_CREATE, "after": 1}, [], id="after-the-first-node"),
    pytest.param({**NODE_CREATE, "after": 2}, [], id="after-the-first-slice"),
    pytest.param({**NODE_CREATE, "after": 5}, [], id="before-the-last-node"),
    pytest.param({**STATUS, "body_contains": "obtained"}, [], id="after-the-last-node"),
    pytest.param({"verb": "patch", "resource": "nodes", "subresource": "status"}, [], id="after-the-obtained-write"),
    pytest.param({**STATUS, "body_contains": "CapacityIsProvisioned"}, [], id="before-the-provisioned-write"),
    pytest.param({"verb": "create", "resource": "events", "body_contains": "new nodes are Ready"}, [],
                 id="after-the-provisioned-write"),
    # The 4th node cannot be created (a permanent error): the provider deletes what it made, and is killed at
    # its first delete.
    pytest.param({"verb": "delete", "resource": "nodes"}, [{**NODE_CREATE, "after": 3, "status": 403}],
                 id="during-the-rollback"),
]


async def outcome(cluster: Cluster, name: str) -> bool:
    """True once the gang has an outcome: Provisioned=True, or Failed=True."""
    for ctype in ("Provisioned", "Failed"):
        cond = await cluster.condition(name, ctype)
        if cond is not None and cond["status"] == "True":
            return True
    return False


async def assert_all_or_nothing(cluster: Cluster, name: str) -> None:
    provisioned = await cluster.condition(name, "Provisioned")
    nodes = await cluster.list_nodes()
    if provisioned is not None and provisioned["status"] == "True":
        tokens = recorded_tokens(await cluster.pr(name))
        mine = [n for n in nodes if n["metadata"]["labels"].get("gangscale.io/token") in tokens]
        assert len(mine) == 6 and all(map(ready, mine)), (
            f"Provisioned=True ({provisioned['message']}) with {len(mine)} of 6 nodes, "
            f"{sum(map(ready, mine))} Ready: {sorted(n['metadata']['name'] for n in mine)}")
        assert sorted(map(len, units_of(mine).values())) == [2, 2, 2], units_of(mine)
        assert len(nodes) == 6, f"nodes that the gang does not own: {sorted(n['metadata']['name'] for n in nodes)}"
    else:
        left = [n["metadata"]["name"] for n in nodes]
        assert left == [], f"not provisioned ({provisioned}) but nodes are left: {left}"
    assert cluster.nodes.most <= 6, f"{cluster.nodes.most} nodes existed at once"


@pytest.mark.parametrize(("hold", "faults"), KILL_POINTS)
async def test_a_three_slice_gang_is_whole_or_absent_after_a_kill(tmp_path: Path, hold: dict[str, Any],
                                                                  faults: list[dict[str, Any]]) -> None:
    async with crash_cluster(tmp_path) as cluster:
        await cluster.template("slice-host", TPU_TEMPLATE)
        for fault in faults:
            await cluster.fail(**fault)
        await cluster.hold(**hold)
        first = await cluster.start_gangscale()
        await cluster.provreq("multislice", "slice-host", 6)
        await cluster.kill_when_held(first)

        second = await cluster.start_gangscale()
        await wait_until_async(lambda: outcome(cluster, "multislice"), "the gang's outcome")
        await assert_all_or_nothing(cluster, "multislice")
        assert await second.stop() == 0
        assert tracebacks(second) == []


async def test_a_slice_whose_removal_was_cut_short_is_removed_whole_by_the_next_process(tmp_path: Path) -> None:
    """Scale-down deletes a slice host by host; killed after the first host, the next process finishes the removal
    at once (a slice missing a host serves nothing) instead of waiting out the unneeded time again."""
    async with crash_cluster(tmp_path) as cluster:
        await cluster.template("slice-host", TPU_TEMPLATE)
        await cluster.hold(verb="delete", resource="nodes", after=1)
        first = await cluster.start_gangscale("--scale-down-unneeded-time", "1s")
        await cluster.provreq("short-lived", "slice-host", 2, parameters={"bookingSeconds": "1"})
        await cluster.kill_when_held(first)
        assert len(cluster.nodes.alive) == 1

        second = await cluster.start_gangscale("--scale-down-unneeded-time", "10m")
        await wait_until_async(no_nodes(cluster), "the rest of the slice to be removed")
        assert await second.stop() == 0
        assert tracebacks(second) == []


def no_nodes(cluster: Cluster) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await cluster.list_nodes() == []
    return check
