"""``gangscale run --provider aws`` killed (SIGKILL) at each step of an obtain, against the fake EC2 (issue 29): the
next process finishes or undoes what the first left, with no second instance set and no orphan instance.

As in ``test_gke_kill_points``, the fake runs in this process (wall clock) and holds the EC2 call that follows the
chosen moment; the harness kills gangscale while it waits for the answer, and the held call is dropped unapplied.
The steps of an obtain (``gangscale.providers.aws.provider``): the scale-up's intent (its token) is written on the
PR, then ``DescribeInstances`` by the token tag (a repeat's answer), ``CreateFleet`` (the token as ``ClientToken``
and tag), ``DescribeInstances`` of the ids (the node names). Judged from the fake's state and the API server: the
PR ends ``Provisioned=True`` with exactly its instances (each a Ready node; no other instance was ever launched)
or not provisioned with no instance left, and every instance gangscale made carries a token the PR recorded.
Every exchange is also checked against botocore's EC2 model (gangscale's requests and the fake's answers).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gangscale.clock import SystemClock
from gangscale.config import parse_pool_yaml
from gangscale.sim.aws import Exchange, FakeEc2, Hold
from gangscale.sim.aws.model import answer_problems, operations, request_problems, validate_output
from gangscale.sim.aws.standalone import set_up
from tests.cli.test_run_aws import CLUSTER, GPU_TEMPLATE, REGION, SUBNET, ZONE, aws_env
from tests.crash.harness import Cluster, crash_cluster, ready, recorded_tokens, tracebacks, wait_until, wait_until_async

TOKEN_TAG = "gangscale.io/token"
POOLS = f"""\
nodePools:
  - name: gpu
    machineType: p5.48xlarge
    zone: {ZONE}
    maxUnits: 8
    aws: {{region: {REGION}, cluster: {CLUSTER}, subnet: {SUBNET}, launchTemplate: {GPU_TEMPLATE}}}
"""
#: One whole p5.48xlarge.
GPU_TEMPLATE_SPEC = {"nodeSelector": {"gangscale.io/node-pool": "gpu"},
                     "containers": [{"name": "trainer", "image": "trainer:v1",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
UNITS = 4
#: The EC2 calls of an obtain, counted from the first process's start ("synced and reconciled"): the token lookup,
#: CreateFleet, the read of the names.
OBTAIN_CALLS = r"CreateFleet|DescribeInstances"
TOKEN_FILTER = f"tag:{TOKEN_TAG}"


class ModelCheck:
    """Every exchange against botocore's EC2 model: all requests here are gangscale's, so each must fit its input
    shape (a dropped one too: its form was sent); every answer its output shape or EC2's error envelope."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def __call__(self, exchange: Exchange) -> None:
        if exchange.action not in operations():
            self.problems.append(f"{exchange.action}: not an EC2 operation")
            return
        found = request_problems(exchange.action, exchange.form)
        if exchange.status:
            found += answer_problems(exchange.action, exchange.status, exchange.body)
        if exchange.answer is not None:
            found += validate_output(exchange.action, exchange.answer)
        self.problems += [f"{exchange.action} -> {exchange.status}: {p}" for p in found]


@contextlib.asynccontextmanager
async def aws_cluster(workdir: Path) -> AsyncIterator[tuple[Cluster, FakeEc2]]:
    async with crash_cluster(workdir) as cluster:
        cluster.pools.write_text(POOLS)
        ec2 = FakeEc2(SystemClock(), cluster.http, region=REGION)
        ec2.faults.ready_seconds = 0.3
        # A terminated instance's Node goes when the instance ends shutting down, as the cloud controller removes it.
        ec2.faults.shutdown_seconds = 0.5
        set_up(ec2, parse_pool_yaml(POOLS).pools)
        check = ModelCheck()
        ec2.observers.append(check)
        await ec2.start()
        try:
            yield cluster, ec2
        finally:
            await ec2.aclose()
        assert check.problems == [], "exchanges break botocore's EC2 model:\n" + "\n".join(check.problems[:10])


async def start(cluster: Cluster, ec2: FakeEc2) -> Any:
    return await cluster.start_gangscale("--provider", "aws", "--aws-endpoint", ec2.url,
                                         env=aws_env(cluster.workdir))


async def kill_when_held(hold: Hold, run: Any) -> None:
    await wait_until(hold.held.is_set, f"a call to be held ({hold.action})")
    await run.kill()
    hold.released.set()  # dropped unapplied: the killed process never got an answer


def made(ec2: FakeEc2, *, live: bool) -> dict[str, str]:
    """Instances gangscale launched (live ones, or every one ever): id -> its token tag."""
    return {i.id: i.tags[TOKEN_TAG] for i in ec2.instances.values()
            if TOKEN_TAG in i.tags and (not live or i.state in ("pending", "running"))}


async def outcome(cluster: Cluster, ec2: FakeEc2, name: str) -> bool:
    provisioned = await cluster.condition(name, "Provisioned")
    if provisioned is None:
        return False
    return provisioned["status"] == "True" or (provisioned["reason"] == "CapacityIsNotFound"
                                               and not made(ec2, live=True))


async def judge(cluster: Cluster, ec2: FakeEc2, name: str, units: int) -> bool:
    """True if provisioned (with exactly its instances), False if not (with nothing left); fails on anything else."""
    provisioned = await cluster.condition(name, "Provisioned")
    assert provisioned is not None
    tokens = recorded_tokens(await cluster.pr(name))
    live, ever = made(ec2, live=True), made(ec2, live=False)
    assert set(ever.values()) <= tokens, f"instances of no recorded scale-up: {ever} (recorded {tokens})"
    if provisioned["status"] != "True":
        assert live == {}, f"not provisioned ({provisioned['message']}) but left behind: {live}"
        return False
    # No second instance set, not even one launched and terminated since: every instance ever made is one of these.
    assert len(live) == len(ever) == units, f"{len(live)} live of {len(ever)} made for {units}: {ever}"
    names = {ec2.instances[i].private_dns: i for i in live}

    async def all_ready() -> bool:
        nodes = {n["metadata"]["name"]: n for n in await cluster.list_nodes()}
        return set(nodes) == set(names) and all(ready(n) for n in nodes.values())

    await wait_until_async(all_ready, f"exactly the {units} nodes of the instances, Ready")
    for node in await cluster.list_nodes():
        assert node["spec"]["providerID"] == f"aws:///{ZONE}/{names[node['metadata']['name']]}"
    return True


async def dropped_call(ec2: FakeEc2) -> Exchange:
    """The call the first process was killed waiting for (recorded once the fake drops it)."""

    def dropped_calls() -> list[Exchange]:
        return [c for c in ec2.calls if c.status == 0 and c.params is None]

    await wait_until(lambda: bool(dropped_calls()), "the held call to be dropped")
    [dropped] = dropped_calls()
    return dropped


def what(call: Exchange) -> str:
    """A DescribeInstances by its filter's name, any other call by its action."""
    return call.form.get("Filter.1.Name", "") if call.action == "DescribeInstances" else call.action


#: (the call held, knobs, what the held call was: DescribeInstances's filter or the action, instances at the kill)
POINTS = [
    # The intent (the token) is on the PR; the obtain's first call, the token lookup, never answered.
    pytest.param(Hold("DescribeInstances"), {}, TOKEN_FILTER, 0, id="after-the-intent-before-any-call"),
    pytest.param(Hold(OBTAIN_CALLS, skip=1), {}, "CreateFleet", 0, id="before-create-fleet-is-answered"),
    # CreateFleet applied, its answer lost; killed while botocore's retry (the same ClientToken) waits for its answer.
    pytest.param(Hold("CreateFleet", skip=1), {"lost": 1}, "CreateFleet", UNITS,
                 id="after-create-fleet-applied-answer-lost"),
    pytest.param(Hold(OBTAIN_CALLS, skip=2), {}, "instance-id", UNITS, id="while-reading-the-node-names"),
    # The zone holds 2 of the 4: the fleet launches nothing, its answer (errors) lost, then the kill.
    pytest.param(Hold("CreateFleet", skip=1), {"lost": 1, "stock": 2}, "CreateFleet", 0, id="stockout-answer-lost"),
]


@pytest.mark.parametrize(("hold", "faults", "held", "at_kill"), POINTS)
async def test_a_gang_of_instances_is_whole_or_absent_after_a_kill(tmp_path: Path, hold: Hold, faults: dict[str, int],
                                                                   held: str, at_kill: int) -> None:
    async with aws_cluster(tmp_path) as (cluster, ec2):
        if "stock" in faults:
            ec2.stock[("p5.48xlarge", ZONE, "on-demand")] = faults["stock"]
        ec2.faults.lost_answers, ec2.faults.lost_action = faults.get("lost", 0), "CreateFleet"
        await cluster.template("gpu-host", GPU_TEMPLATE_SPEC)
        first = await start(cluster, ec2)
        ec2.holds.append(hold)  # after the start's own reads: counted from the obtain's first call
        await cluster.provreq("gang", "gpu-host", UNITS)
        await kill_when_held(hold, first)
        dropped = await dropped_call(ec2)
        assert what(dropped) == held
        assert len(made(ec2, live=False)) == at_kill
        tokens = recorded_tokens(await cluster.pr("gang"))
        assert tokens, "killed before the intent was recorded"
        # Every EC2 call of the obtain names the recorded token: the lookup's filter value, CreateFleet's ClientToken.
        assert {c.form.get("ClientToken") or c.form.get("Filter.1.Value.1") for c in ec2.calls
                if what(c) in ("CreateFleet", TOKEN_FILTER)} <= tokens

        second = await start(cluster, ec2)
        await wait_until_async(lambda: outcome(cluster, ec2, "gang"), "the gang's outcome")
        assert await judge(cluster, ec2, "gang", UNITS) == ("stock" not in faults)
        launched = {c.form["ClientToken"] for c in ec2.calls
                    if c.action == "CreateFleet" and c.answer is not None and c.answer["Instances"]}
        assert len(launched) == (0 if "stock" in faults else 1), launched  # one instance set, under one token
        assert await second.stop() == 0 and tracebacks(second) == []
