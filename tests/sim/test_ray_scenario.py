"""The built-in ``ray-gangs`` scenario end to end: the Ray autoscaler's stepwise demand on an autoscaling
RayCluster that Kueue does not manage, and issue 6's done-when for gangscale: every gang's nodes Ready
together, the 16-GPU placement group and the two 4-host TPU slices each obtained in one scale-up, no node for
the demand Ray withdrew, and everything scaled down at the end. The baseline run checks the emulation alone
(the per-pod autoscaler follows the pods, whatever the gangs)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from gangscale.sim.manifests import workload_manifest
from gangscale.sim.observer import NodeLife
from gangscale.sim.rayplan import Demand
from gangscale.sim.report import rows, totals
from gangscale.sim.runner import BASELINE, GANGSCALE, RunResult, ray_scripts, run_scenario
from gangscale.sim.scenario import ScenarioError, load_scenario, parse_scenario
from gangscale.sim.world import FINISHED, RAY_DEMAND, RAY_SCALE, RUNNING

SUBJECT = "default/ray-train"


async def run(mode: str) -> RunResult:
    result = await run_scenario(load_scenario("ray-gangs"), mode=mode)
    assert result.unsettled == 0
    return result


def delays(result: RunResult) -> dict[str, float]:
    return {p.name: float(p.provider["simulated"]["provisionSeconds"]) for p in result.scenario.pools()}


def by_token(nodes: list[NodeLife]) -> dict[str, list[NodeLife]]:
    out: dict[str, list[NodeLife]] = defaultdict(list)
    for n in nodes:
        out[n.token].append(n)
    return out


def scale_steps(result: RunResult, group: str) -> list[tuple[int, int]]:
    return [(e.data["old"], e.data["new"]) for e in result.timeline.of(RAY_SCALE, SUBJECT)
            if e.data["group"] == group and e.data["new"] > e.data["old"]]


def assert_ray_emulation(result: RunResult) -> None:
    """What Ray did, whoever provides the nodes."""
    assert scale_steps(result, "gpu") == [(0, 10), (10, 16)]
    assert scale_steps(result, "tpu") == [(0, 1), (1, 2)]
    events = {(e.data["demand"], e.data["event"]) for e in result.timeline.of(RAY_DEMAND, SUBJECT)}
    assert {("pg-16gpu", "placed"), ("tpu-2-slices", "placed"), ("pg-2l4", "withdrawn")} <= events
    assert ("pg-2l4", "placed") not in events
    assert result.timeline.first(FINISHED, SUBJECT) is not None


async def test_ray_gangs_come_up_whole_and_nothing_is_made_for_withdrawn_demand() -> None:
    result = await run(GANGSCALE)
    assert result.finished
    assert_ray_emulation(result)
    nodes = list(result.nodes.values())
    delay = delays(result)
    # Every gang (the nodes of one scale-up token) turned Ready within the pool's delay of its last node.
    for token, members in by_token(nodes).items():
        ready = [n.ready for n in members]
        assert None not in ready, f"token {token}: a node never turned Ready"
        spread = max(r for r in ready if r is not None) - min(r for r in ready if r is not None)
        assert spread <= delay[members[0].pool], f"token {token}: Ready over {spread}s"
    gpu = [n for n in nodes if n.pool == "gpu"]
    tpu = [n for n in nodes if n.pool == "tpu-v5e-4x4"]
    # The 16-GPU placement group in one scale-up, not the autoscaler's 10 then 6.
    assert len(gpu) == 16 and len({n.token for n in gpu}) == 1 and len({n.created for n in gpu}) == 1
    # Both 4-host TPU replicas (8 nodes) together.
    assert len(tpu) == 8 and len({n.token for n in tpu}) == 1 and len({n.ready for n in tpu}) == 1
    # The withdrawn L4 demand got nothing, not even after the stockout ended.
    assert not [n for n in nodes if n.pool == "l4"]
    # Every placed gang's pods started together: no accelerator-hour lost to a partial gang.
    assert totals(result, rows(result)).lost_accelerator_hours == 0
    assert [e.data["demand"] for e in result.timeline.of(RUNNING, SUBJECT)] == ["pg-16gpu", "tpu-2-slices"]
    # Ray's idle termination freed the nodes; gangscale scaled them all down.
    assert all(n.gone is not None for n in nodes)


async def test_the_baseline_follows_the_same_ray_steps_pod_by_pod() -> None:
    result = await run(BASELINE)
    assert result.finished
    assert_ray_emulation(result)
    assert not [n for n in result.nodes.values() if n.pool == "l4"]  # stocked out while Ray wanted it
    assert all(n.gone is not None for n in result.nodes.values())


# --- the scenario format ---------------------------------------------------------------------------------

RAY = """
name: ray
nodePools: [{name: gpu, machineType: a3-highgpu-1g, maxUnits: 4}]
workloads:
  - name: rc
    kind: RayCluster
    autoscaling: true
    idleTimeoutSeconds: 120
    duration: 5m
    podSets:
      - {name: head, head: true, requests: {cpu: "1"}}
      - {name: gpu, minReplicas: 1, maxReplicas: 4, idleTimeoutSeconds: 30, limits: {nvidia.com/gpu: 1}}
      - {name: tpu, numOfHosts: 4, replicas: 1}
    rayDemand:
      - {at: 1m, name: pg, group: gpu, replicas: 3}
      - {at: 2m, name: long, group: tpu, replicas: 1, duration: 1h}
      - {at: 4m, withdraw: pg}
"""


def test_an_autoscaling_ray_cluster_expands_as_a_user_writes_it() -> None:
    w = parse_scenario(RAY).workloads[0]
    spec = workload_manifest(w)["spec"]
    assert "suspend" not in spec  # no queue: nothing suspends it
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["autoscalerOptions"] == {"upscalingMode": "Default", "idleTimeoutSeconds": 120}
    gpu, tpu = spec["workerGroupSpecs"]
    assert {k: gpu[k] for k in ("groupName", "replicas", "minReplicas", "maxReplicas", "numOfHosts",
                                "idleTimeoutSeconds", "scaleStrategy")} == {
        "groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 4, "numOfHosts": 1,
        "idleTimeoutSeconds": 30, "scaleStrategy": {}}
    assert (tpu["replicas"], tpu["minReplicas"], tpu["maxReplicas"], tpu["numOfHosts"]) == (1, 0, 2**31 - 1, 4)


def test_ray_demand_becomes_the_autoscaler_script() -> None:
    scripts = ray_scripts(parse_scenario(RAY), start=1000.0)
    assert scripts == {("default", "rc"): (
        Demand("pg", "gpu", 3, at=1060.0, withdraw_at=1240.0, duration=300.0),
        Demand("long", "tpu", 1, at=1120.0, withdraw_at=None, duration=3600.0))}


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("group: gpu, replicas: 3", "group: gpus, replicas: 3", "no worker group named 'gpus' (worker groups: gpu, tpu)"),
    ("withdraw: pg", "withdraw: pgx", "no demand named 'pgx' asked for earlier"),
    ("{at: 4m, withdraw: pg}", "{at: 30s, withdraw: pg}", "withdraws 'pg' before it is asked for"),
    ("name: long, group: tpu", "name: pg, group: tpu", "'pg' is used twice"),
    ("{at: 4m, withdraw: pg}", "{at: 4m, withdraw: pg, replicas: 2}", "a withdrawal has only"),
    ("{at: 1m, name: pg, group: gpu, replicas: 3}", "{at: 1m, name: pg, group: gpu}", "needs `name`, `group`"),
    ("    autoscaling: true\n", "", "needs an autoscaling RayCluster"),
    ("kind: RayCluster", "kind: RayCluster\n    queue: q", "managed by Kueue (queue) is not simulated"),
    ("minReplicas: 1, maxReplicas: 4", "minReplicas: 5, maxReplicas: 4", "minReplicas 5 exceeds maxReplicas 4"),
    ("{name: head, head: true,", "{name: head, head: true, minReplicas: 1,", "only apply to Ray worker groups"),
], ids=["unknown-group", "withdraw-unknown", "withdraw-early", "name-twice", "withdraw-extra-field",
        "demand-incomplete", "not-autoscaling", "queued", "min-over-max", "min-on-head"])
def test_a_bad_ray_scenario_is_refused_with_the_problem_named(old: str, new: str, expected: str) -> None:
    assert old in RAY
    with pytest.raises(ScenarioError) as err:
        parse_scenario(RAY.replace(old, new))
    assert expected in str(err.value)
