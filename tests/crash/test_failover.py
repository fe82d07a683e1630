"""Two replicas of ``gangscale run`` contending for the leader lease against ``gangscale sim apiserver``.

The leader is SIGKILLed in the middle of a scale-up (its next node create held in the API server, so it dies
with the intent recorded and one slice made). The standby, kept synced all along, takes the lease once the
dead leader's lease has gone unrenewed for the lease duration — within one retry period after that (plus the
retry's jitter) — adopts the recorded scale-up and finishes it: the gang ends ``Provisioned=True`` with each of
its nodes created exactly once. The harness's short lease (1 s / 750 ms / 200 ms) keeps the test fast; the
timings scale as they are.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path

from tests.crash.harness import (
    TPU_TEMPLATE,
    recorded_tokens,
    tracebacks,
    units_of,
    wait_until,
    wait_until_async,
)
from tests.crash.harness import crash_cluster as cluster_of

LEASE, RETRY, JITTER = 1.0, 0.2, 0.2
NODE_CREATE = {"verb": "create", "resource": "nodes"}


def logged_at(text: str, fragment: str) -> float | None:
    """The wall-clock time of the first JSON log line whose message contains ``fragment``."""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if fragment in str(entry.get("msg", "")):
            return datetime.fromisoformat(str(entry["ts"]).replace("Z", "+00:00")).timestamp()
    return None


async def test_killing_the_leader_mid_scale_up_hands_over_and_the_scale_up_finishes_once(tmp_path: Path) -> None:
    async with cluster_of(tmp_path) as cluster:
        await cluster.template("slice-host", TPU_TEMPLATE)
        leader = await cluster.start_gangscale("--leader-elect-identity", "replica-a")
        standby_log = cluster.workdir / f"gangscale-{len(cluster.runs)}.log"
        standby_task = cluster.start_gangscale("--leader-elect-identity", "replica-b")
        # The standby cannot finish starting (it waits for the lease): start it and wait for its standby line.
        started = asyncio.create_task(standby_task)
        await wait_until(lambda: standby_log.exists() and "standby: the leader lease is held by replica-a"
                         in standby_log.read_text(), "the second replica to stand by")

        await cluster.hold(**NODE_CREATE, after=2)  # one 2-host slice made, the second's first node held
        await cluster.provreq("multislice", "slice-host", 4)
        await wait_until_async(cluster._has_held, "the leader to be mid-scale-up")
        killed = time.time()
        await cluster.kill_when_held(leader)

        standby = await asyncio.wait_for(started, 60)
        took_over = logged_at(standby.text(), "leading: taking over")
        assert took_over is not None
        assert took_over - killed <= LEASE + RETRY * (1 + JITTER) + 0.5, took_over - killed
        await standby.wait_logged("adopted from leader replica-a")

        async def provisioned() -> bool:
            cond = await cluster.condition("multislice", "Provisioned")
            return cond is not None and cond["status"] == "True"

        await wait_until_async(provisioned, "the adopted scale-up to finish")
        tokens = recorded_tokens(await cluster.pr("multislice"))
        made = [name for name, _, token in cluster.nodes.created if token in tokens]
        assert sorted(made) == sorted(set(made)) and len(made) == 4, cluster.nodes.created  # each node once
        assert sorted(map(len, units_of(await cluster.pr_nodes("multislice")).values())) == [2, 2]
        assert cluster.nodes.most <= 4
        assert await standby.stop() == 0 and tracebacks(standby) == []


async def test_a_leader_that_cannot_renew_stops_and_exits_non_zero(tmp_path: Path) -> None:
    async with cluster_of(tmp_path) as cluster:
        leader = await cluster.start_gangscale("--leader-elect-identity", "replica-a")
        await cluster.fail(verb="*", resource="coordination.k8s.io/leases", status=500, times=None)
        failing = time.time()
        code = await asyncio.wait_for(leader.proc.wait(), 30)
        assert code == 1
        lost = logged_at(leader.text(), "could not renew lease")
        assert lost is not None and lost - failing <= 0.75 + 0.2 + 0.5  # the renew deadline, then one retry
        assert "exiting so that another replica takes over" in leader.text()


async def test_a_leader_stopped_with_sigterm_hands_over_at_once(tmp_path: Path) -> None:
    slow = ("--leader-elect-lease-duration", "10s", "--leader-elect-renew-deadline", "7s")
    async with cluster_of(tmp_path) as cluster:
        leader = await cluster.start_gangscale("--leader-elect-identity", "replica-a", *slow)
        started = asyncio.create_task(cluster.start_gangscale("--leader-elect-identity", "replica-b", *slow))
        standby_log = cluster.workdir / "gangscale-1.log"
        await wait_until(lambda: standby_log.exists() and "standby:" in standby_log.read_text(),
                         "the second replica to stand by")
        stopped = time.time()
        assert await leader.stop() == 0
        standby = await asyncio.wait_for(started, 30)
        took_over = logged_at(standby.text(), "leading: taking over")
        assert took_over is not None and took_over - stopped < 2.0  # a retry period, not the 10 s lease
        assert "released lease" in leader.text()
        assert await standby.stop() == 0
