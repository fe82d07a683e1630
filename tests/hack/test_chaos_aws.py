"""The chaos campaign's aws runs (``hack/chaoslib/awsplan.py``, ``hack/chaoslib/aws.py``): the plan is the seed's,
the fake EC2's knobs are turned and undone, and the judges of its traffic and of what it holds at the end can fail."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from chaoslib.aws import AwsCloud, AwsTraffic, instances_at_the_end, set_timings, token_by_provider_id
from chaoslib.awsplan import AWS_MACHINES, AWS_ZONE, FAULT_KINDS, aws_faults, aws_pool_file
from chaoslib.checks import at_the_end, leadership
from chaoslib.observe import History, node_reclaimed
from chaoslib.plan import Action, Gang, make_plan, provider_of

from gangscale.clock import SystemClock
from gangscale.config import parse_pool_yaml
from gangscale.kube.reflector import ReflectorEvent
from gangscale.model.nodepool import POOL_LABEL
from gangscale.sim.aws import Exchange, FakeEc2
from gangscale.sim.aws import model as ec2_model
from gangscale.sim.aws.standalone import set_up
from tests.conftest import Ec2Traffic

JSON = dict[str, Any]
R1, R2 = "gangscale/1.0 (r1)", "gangscale/1.0 (r2)"
A = "a" * 36
TOKEN_A = f"{A}-0123456789ab-0"
T0 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC).timestamp()


def lease(at: float, agent: str) -> JSON:
    return {"time": datetime.fromtimestamp(T0 + at, UTC).isoformat(), "userAgent": agent, "verb": "update",
            "resource": "leases", "name": "gangscale", "subresource": "", "status": 200, "namespace": "default"}


# --- the plan ---------------------------------------------------------------------------------------------------------


def test_an_aws_plan_is_a_pure_function_of_the_seed_and_adds_only_cloud_faults() -> None:
    for seed in range(40):
        plan = make_plan(seed, provider="aws")
        assert plan == make_plan(seed, provider="aws")
        # The cloud faults come from a generator of their own: every other action is the simulated run's.
        assert tuple(a for a in plan.actions if a.kind != "cloud-fault") == make_plan(seed).actions
        faults = [a for a in plan.actions if a.kind == "cloud-fault" and a.fault["kind"] != "reclaim"]
        assert 2 <= len(faults) <= 6 and all(0 <= a.at < plan.fault_seconds for a in faults)
        # Reclaims come from a third generator: without them, the other cloud faults are the same.
        quiet = make_plan(seed, provider="aws", reclaims=False)
        assert [a for a in quiet.actions if a.kind == "cloud-fault"] == faults
    drawn = [a.fault for seed in range(300) for a in aws_faults(seed)]
    assert {f["kind"] for f in drawn} == {*FAULT_KINDS, "reclaim"} - {"throttle"}  # a throttle is an injected error
    codes = {f["code"] for f in drawn if f["kind"] == "error"}
    assert codes == {"RequestLimitExceeded", "InsufficientInstanceCapacity", "VcpuLimitExceeded", "InternalError",
                     "Unavailable", "UnauthorizedOperation"}
    # Permanent codes never hit the start's checks (a replica with a permanent start failure exits by design).
    assert {f["action"] for f in drawn if f["kind"] == "error" and f["status"] == 403} <= {
        "CreateFleet", "TerminateInstances"}


def test_all_cycles_the_three_providers_by_seed() -> None:
    assert [provider_of(seed, "all") for seed in (6, 7, 8, 9)] == ["simulated", "gke", "aws", "simulated"]
    assert [provider_of(seed, "both") for seed in (6, 7)] == ["simulated", "gke"]
    assert provider_of(7, "aws") == "aws"


def test_the_aws_pool_file_is_valid_and_spot_where_the_simulated_runs_are() -> None:
    pools = {p.name: p for p in parse_pool_yaml(aws_pool_file(True)).pools}
    assert [(p.machine_type, p.capacity_type, p.nodes_per_unit, p.max_units) for p in pools.values()] == [
        (AWS_MACHINES["tpu"], "spot", 1, 6), (AWS_MACHINES["gpu"], "spot", 1, 5),
        (AWS_MACHINES["cpu"], "on-demand", 1, 5)]
    assert {p.capacity_type for p in parse_pool_yaml(aws_pool_file(False)).pools} == {"on-demand"}


# --- the fake EC2's knobs ---------------------------------------------------------------------------------------------


def fake(spot: bool = True) -> tuple[FakeEc2, str]:
    text = aws_pool_file(spot)
    ec2 = FakeEc2(SystemClock(), None, region="us-east-1")
    set_timings(ec2)
    set_up(ec2, parse_pool_yaml(text).pools)
    return ec2, text


async def test_cloud_faults_turn_the_fakes_knobs_and_all_are_undone_when_the_faults_stop(tmp_path: Path) -> None:
    ec2, text = fake()
    baseline = dataclasses.replace(ec2.faults, errors=[])
    cloud = AwsCloud(ec2, text, AwsTraffic(), tmp_path)
    for fault, seconds in [
        ({"kind": "stockout", "pool": "gpu"}, 60.0),
        ({"kind": "quota", "pool": "cpu"}, 60.0),
        ({"kind": "error", "code": "RequestLimitExceeded", "status": 503, "action": "CreateFleet", "times": 2,
          "message": "Request limit exceeded.", "retry_after_ms": 500}, 0.0),
        ({"kind": "error", "code": "InternalError", "status": 500, "action": "*", "times": 1}, 0.0),
        ({"kind": "lost-answers", "count": 2, "action": "TerminateInstances"}, 0.0),
        ({"kind": "slow-answers", "answer_seconds": 0.7}, 0.05),
        ({"kind": "held-read", "action": "DescribeInstances", "skip": 1}, 1.0),
        ({"kind": "reclaim", "count": 1, "notice_seconds": 1.5}, 0.0),
    ]:
        cloud.apply(Action(0.0, "cloud-fault", seconds=seconds, fault=fault))
    faults = ec2.faults
    assert ec2.stock == {(AWS_MACHINES["gpu"], AWS_ZONE, "spot"): 0}
    assert ec2.quotas == {"Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances": 0}
    assert [(e.code, e.status, e.action, e.times, e.retry_after_ms) for e in faults.errors] == [
        ("RequestLimitExceeded", 503, "CreateFleet", 2, 500), ("InternalError", 500, "*", 1, None)]
    assert (faults.lost_answers, faults.lost_action, faults.answer_delay, faults.spot_notice_seconds) == (
        2, "TerminateInstances", 0.7, 1.5)
    assert [h.action for h in ec2.holds] == ["DescribeInstances"] and cloud.applied == 8
    assert faults.take_error("CreateFleet") is not None  # the throttle acts once
    faults.lost_answers -= 1  # one answer dropped
    await cloud.stop_faults()
    assert (dataclasses.replace(faults, spot_notice_seconds=baseline.spot_notice_seconds), ec2.stock, ec2.quotas,
            ec2.holds) == (baseline, {}, {}, [])
    assert cloud.hits == 2


# --- traffic against botocore's model, and leadership -----------------------------------------------------------------


async def test_traffic_is_judged_against_botocores_model_and_fails_on_a_seeded_wrong_member(
        ec2_traffic: Ec2Traffic) -> None:
    ec2_traffic.expect_problems = True  # the test's own seeded member: the harness's judge must find it, as below
    ec2, _ = fake()
    traffic = AwsTraffic()
    ec2.observers.append(traffic)
    await ec2.start()
    try:
        config = AioConfig(user_agent=R1, retries={"mode": "standard", "total_max_attempts": 1})
        async with get_session().create_client("ec2", region_name="us-east-1", endpoint_url=ec2.url, config=config,
                                               aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="x") as client:
            await client.describe_instances(Filters=[{"Name": "tag:gangscale.io/token", "Values": ["t"]}])
            await client.describe_subnets(SubnetIds=[next(iter(ec2.state.subnets))])
        assert (traffic.checked, traffic.problems, traffic.changes) == (2, [], [])
        # The same call with a member EC2's model does not have, signed as botocore signs (the fake reads no bytes of
        # the signature): refused by the fake, and judged a broken request because gangscale sent it.
        headers = {"Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/us-east-1/ec2/aws4_request, "
                                    "SignedHeaders=host;x-amz-date, Signature=00ff", "X-Amz-Date": "20261126T100000Z"}
        form = {"Action": "DescribeInstances", "Version": ec2_model.API_VERSION, "Filter.1.Name": "tag:x",
                "Filter.1.Value.1": "t", "Filter.1.Colour": "red"}
        async with aiohttp.ClientSession() as session:
            for agent in ("someone-else/1.0", R1):
                async with session.post(ec2.url, data=form, headers={**headers, "User-Agent": agent}) as resp:
                    assert resp.status == 400
    finally:
        await ec2.aclose()
    assert traffic.checked == 3  # another client's traffic is not judged
    assert len(traffic.problems) == 1 and "Colour" in traffic.problems[0] and R1 in traffic.problems[0]


def exchange(at: float, agent: str, action: str, status: int, *, form: JSON | None = None,
             params: JSON | None = None) -> Exchange:
    return Exchange(T0 + at, action, {"Action": action, **(form or {})}, params, status, None, "", agent)


def test_cloud_changes_are_judged_for_leadership_like_the_api_servers() -> None:
    changes = [
        exchange(2, R1, "CreateFleet", 200, form={"ClientToken": TOKEN_A}, params={}),
        exchange(3.5, R1, "DescribeInstances", 200, params={}),  # a read: not a change
        exchange(3.6, R1, "TerminateInstances", 503, form={"InstanceId.1": "i-1"}),  # throttled: changed nothing
    ]
    leases = [lease(1, R1), lease(3, R2)]

    def judged(more: list[Exchange]) -> Any:
        traffic = AwsTraffic()
        for one in [*changes, *more]:
            traffic(one)
        return leadership([*leases, *traffic.changes], 2.0)

    assert judged([]).problems == [] and judged([]).judged == 1
    # After r2 took the lease: a terminate the fake applied but whose answer it dropped is a change all the same.
    late = judged([exchange(3.7, R1, "TerminateInstances", 0, form={"InstanceId.1": "i-1"}, params={})])
    assert late.problems == ["r1 made 'TerminateInstances i-1 (answer dropped)' after r2 had taken the lease"]
    # One the fake dropped unread (a held call never served) changed nothing.
    assert judged([exchange(3.7, R1, "CreateFleet", 0, form={"ClientToken": "t"})]).problems == []
    assert judged([exchange(4.5, R1, "CreateFleet", 200, form={"ClientToken": "t"}, params={})]).problems == [
        "r1 made 'CreateFleet t' after r2 had taken the lease"]


# --- nodes and instances ----------------------------------------------------------------------------------------------


def instance(instance_id: str, state: str = "running", token: str = TOKEN_A, dns: str = "") -> SimpleNamespace:
    return SimpleNamespace(id=instance_id, state=state, tags={"gangscale.io/token": token} if token else {},
                           private_dns=dns or f"ip-{instance_id}.ec2.internal")


def node(name: str, instance_id: str, *, ready: bool = True, taints: list[JSON] | None = None) -> JSON:
    return {"metadata": {"name": name, "uid": name, "resourceVersion": "1", "labels": {POOL_LABEL: "gpu"}},
            "spec": {"providerID": f"aws:///{AWS_ZONE}/{instance_id}", "taints": taints or []},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_at_the_end_an_instance_without_its_node_is_an_orphan() -> None:
    instances = [instance("i-1"), instance("i-2", "pending"), instance("i-3", "terminated"),
                 instance("i-4", token=""), instance("i-5", "shutting-down")]
    assert instances_at_the_end(instances, ["ip-i-1.ec2.internal", "ip-i-2.ec2.internal"]) == []
    assert instances_at_the_end(instances, ["ip-i-2.ec2.internal"]) == [
        f"instance i-1 (running, token {TOKEN_A}) has no Node ip-i-1.ec2.internal"]


def test_an_eks_node_counts_for_the_request_whose_token_its_instance_carries() -> None:
    instances = {"i-1": instance("i-1"), "i-2": instance("i-2", token="")}
    tokens = token_by_provider_id(instances)
    history = History(tokens=tokens)
    history.on_node(ReflectorEvent("ADDED", node("ip-10-0-0-4.ec2.internal", "i-1")))
    history.on_node(ReflectorEvent("ADDED", node("ip-10-0-0-5.ec2.internal", "i-2")))
    assert [e.owner for e in history.events] == [A, ""]
    request = {"metadata": {"name": "gang-a", "uid": A},
               "status": {"conditions": [{"type": "Provisioned", "status": "True", "reason": "CapacityIsProvisioned"}]}}
    gangs = {"gang-a": Gang("gang-a", "gpu", 1)}
    mine = [node("ip-10-0-0-4.ec2.internal", "i-1")]
    assert at_the_end([request], mine, gangs, tokens=tokens) == []
    # Without the cloud's record the node is nobody's: the request has no new node.
    assert at_the_end([request], mine, gangs) == [
        "gang-a is Provisioned (CapacityIsProvisioned) with 0 new nodes (0 Ready); it needs 1 nodes in all"]


@pytest.mark.parametrize(("taints", "reclaimed"), [
    ([{"key": "aws-node-termination-handler/spot-itn", "value": "x", "effect": "NoSchedule"}], True),
    ([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], False)])
def test_a_spot_interruption_taint_marks_a_node_reclaimed(taints: list[JSON], reclaimed: bool) -> None:
    assert node_reclaimed(node("n", "i-1", taints=taints)) is reclaimed


def test_a_revocation_naming_a_reclaimed_token_is_excused(tmp_path: Path) -> None:
    ec2, text = fake()
    cloud = AwsCloud(ec2, text, AwsTraffic(), tmp_path)
    ec2.instances["i-1"] = instance("i-1", "terminated")  # type: ignore[assignment]
    cloud.reclaimed_ids.add("i-1")
    message = f"after a restart the provider no longer has every unit of this scale-up whole (the provider has no " \
              f"units under token {TOKEN_A}): the booked capacity is gone"
    request = {"metadata": {"name": "gang-a", "uid": A}, "status": {"conditions": [
        {"type": "Provisioned", "status": "True", "reason": "CapacityIsProvisioned"},
        {"type": "CapacityRevoked", "status": "True", "reason": "BookedNodeRemoved", "message": message}]}}
    gangs = {"gang-a": Gang("gang-a", "gpu", 1)}
    assert cloud.reclaimed_tokens() == {TOKEN_A}
    assert at_the_end([request], [], gangs, reclaimed=cloud.reclaimed_tokens()) == []
    assert at_the_end([request], [], gangs)[0].startswith("gang-a was revoked (BookedNodeRemoved) for nodes the cloud "
                                                          "did not reclaim")


def test_a_revocation_naming_a_reclaimed_unit_is_excused(tmp_path: Path) -> None:
    """Seed 25032: a restarted leader found one unit of four incomplete (its instance reclaimed) and named the unit,
    the instance id."""
    ec2, text = fake()
    cloud = AwsCloud(ec2, text, AwsTraffic(), tmp_path)
    ec2.instances["i-1"] = instance("i-1", "terminated")  # type: ignore[assignment]
    cloud.reclaimed_ids.add("i-1")
    message = "after a restart the provider no longer has every unit of this scale-up whole (tpu: 1 of 4 units are " \
              "not whole (i-1)): the booked capacity is gone"
    request = {"metadata": {"name": "gang-a", "uid": A}, "status": {"conditions": [
        {"type": "Provisioned", "status": "True", "reason": "CapacityIsProvisioned"},
        {"type": "CapacityRevoked", "status": "True", "reason": "BookedNodeRemoved", "message": message}]}}
    gangs = {"gang-a": Gang("gang-a", "gpu", 1)}
    assert at_the_end([request], [], gangs, reclaimed=cloud.reclaimed_units()) == []
    assert at_the_end([request], [], gangs, reclaimed=cloud.reclaimed_tokens()) != []
