"""``gangscale demo --provider aws``: the built-in scenarios through the aws provider and the fake EC2
(:mod:`gangscale.sim.awsdemo`), with the same outcomes as on the simulated provider. Every exchange with the fake is
checked against botocore's EC2 model by this directory's ``ec2_traffic`` fixture (``conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangscale.cli import main
from gangscale.clock import ManualClock
from gangscale.config import parse_pool_file
from gangscale.model.catalog import GPU_RESOURCE, TPU_RESOURCE
from gangscale.sim import awsdemo
from gangscale.sim.aws import Exchange, FakeEc2
from gangscale.sim.report import rows, totals
from gangscale.sim.runner import AWS, BASELINE, RunResult, run_scenario
from gangscale.sim.scenario import builtin_names, load_scenario, parse_scenario
from gangscale.sim.world import FINISHED, RUNNING
from tests.cli.test_demo_command import tiny_scenario
from tests.conftest import Ec2Traffic
from tests.sim.test_builtin_scenarios import assert_gangs_ready_together, at

NS = "default"
#: The scenario machine → EC2 type table of awsdemo's docstring.
MAPPING = {"a3-highgpu-8g": "p5.48xlarge", "a3-highgpu-1g": "g6e.12xlarge", "a2-highgpu-4g": "g6e.12xlarge",
           "g2-standard-8": "g5.2xlarge", "ct5lp-hightpu-4t": "g6e.12xlarge", "": "m5.2xlarge"}
#: Each built-in scenario's outcome on the simulated provider: workloads left unfinished, lost accelerator-hours.
SIMULATED_OUTCOMES = {"tpu-multislice": ([], 0.0), "ray-priority": ([], 0.0), "ray-autoscaling": ([], 0.0),
                      "stockout-fallback": ([], 0.0), "spot-fallback": ([f"{NS}/finetune"], 0.0),
                      "ray-gangs": ([], 0.0)}


async def run_on_aws(name: str) -> RunResult:
    result = await run_scenario(load_scenario(name), provider=AWS)
    assert result.unsettled == 0
    return result


def lost(result: RunResult) -> float:
    return totals(result, rows(result)).lost_accelerator_hours


def test_the_mapping_of_machine_types_is_the_documented_one() -> None:
    pools = {p.machine_type: p for name in builtin_names() for p in load_scenario(name).pools()}
    assert {machine: awsdemo.ec2_machine(pool) for machine, pool in pools.items()} == MAPPING
    doc = awsdemo.__doc__ or ""
    for machine, ec2_type in MAPPING.items():
        assert any((machine or "allocatable only") in line and ec2_type in line for line in doc.splitlines())


def test_pools_become_aws_pools_with_a_subnet_and_template_each() -> None:
    scenario = load_scenario("stockout-fallback")
    pools = parse_pool_file({"nodePools": awsdemo.aws_pool_specs(scenario.node_pools)}).pools
    assert [(p.name, p.zone, p.machine_type, p.capacity_type) for p in pools] == [
        ("gpu-a", "us-east-1a", "p5.48xlarge", "on-demand"), ("gpu-b", "us-east-1b", "p5.48xlarge", "on-demand")]
    blocks = [p.provider["aws"] for p in pools]
    assert len({b["subnet"] for b in blocks}) == len({b["launchTemplate"] for b in blocks}) == 2
    assert all(b["region"] == "us-east-1" and b["cluster"] == "demo" for b in blocks)
    # The nodes keep the labels the scenario's nodes have (GKE's accelerator label, which selectors may name).
    assert pools[0].labels["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"


def test_a_tpu_slice_becomes_single_instance_units_and_its_workloads_ask_for_gpus() -> None:
    scenario = load_scenario("tpu-multislice")
    specs = awsdemo.aws_pool_specs(scenario.node_pools)
    pools = parse_pool_file({"nodePools": specs}).pools
    # Each 2x4 slice pool (maxUnits 1, 2 hosts) becomes 2 one-instance units; nodepool3's stock 0 stays 0.
    assert [(p.max_units, p.nodes_per_unit) for p in pools] == [(2, 1)] * 3
    assert pools[2].provider["simulated"]["stock"] == 0
    assert awsdemo.hosts_per_unit(scenario.node_pools) == {"nodepool1": 2, "nodepool2": 2, "nodepool3": 2}
    rewritten = awsdemo.aws_scenario(scenario)
    assert rewritten.workloads[0].pod_sets[0].limits == {GPU_RESOURCE: 4}
    assert rewritten.kueue.cluster_queues[0].quota == {"vlp-24": {GPU_RESOURCE: 24}}
    assert TPU_RESOURCE not in json.dumps(rewritten.model_dump(by_alias=True))
    # Without TPU pools the scenario is left alone.
    plain = load_scenario("stockout-fallback")
    assert awsdemo.aws_scenario(plain) is plain


def fleet_exchange(pool: str) -> Exchange:
    params = {"TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "gangscale.io/pool",
                                                                           "Value": pool}]}]}
    return Exchange(0.0, "CreateFleet", {}, params, 200, {}, "", "gangscale")


def test_stock_is_per_type_zone_and_lifecycle_with_stockouts_and_one_fleets_partial_grant() -> None:
    scenario = parse_scenario("""
name: stock
nodePools:
  - {name: a, machineType: a3-highgpu-8g, zone: us-central1-a, maxUnits: 4, simulated: {stock: 1}}
  - {name: b, machineType: a3-highgpu-8g, zone: us-central1-a, maxUnits: 8}
  - {name: s, machineType: a3-highgpu-8g, zone: us-central1-a, maxUnits: 8, capacityType: spot}
""")
    pools = parse_pool_file({"nodePools": awsdemo.aws_pool_specs(scenario.node_pools)}).pools
    ec2 = FakeEc2(ManualClock(), None)
    capacity = awsdemo.configure(ec2, pools)
    key, spot = ("p5.48xlarge", "us-east-1a", "on-demand"), ("p5.48xlarge", "us-east-1a", "spot")
    assert ec2.stock[key] == 1 + 8 and spot not in ec2.stock  # b has no stock limit: its maxUnits count
    capacity.stockout("b", True)
    assert ec2.stock[key] == 1
    capacity.stockout("b", False)
    capacity.set("a", 3)
    assert ec2.stock[key] == 3 + 8
    capacity.partial_grant("b", 1)
    assert ec2.stock[key] == 3 + 1
    for observer in ec2.observers:
        observer(fleet_exchange("a"))  # another pool's fleet: the grant holds
    assert ec2.stock[key] == 3 + 1
    for observer in ec2.observers:
        observer(fleet_exchange("b"))
    assert ec2.stock[key] == 3 + 8


async def test_the_default_scenario_runs_on_aws_as_on_the_simulated_provider(ec2_traffic: Ec2Traffic) -> None:
    """tpu-multislice, as ``test_builtin_scenarios`` checks it on the simulated and gke providers: the 3-slice JobSet
    runs alone, then the 1- and 2-slice ones together; nothing is had before nodepool3 has capacity at 15 minutes,
    then every slice at once, and no accelerator-hour is lost."""
    result = await run_on_aws("tpu-multislice")
    assert result.finished and lost(result) == 0
    three_done = at(result, FINISHED, "multislice-3slice")
    assert at(result, RUNNING, "multislice-3slice") < three_done
    assert at(result, RUNNING, "multislice-1slice") == at(result, RUNNING, "multislice-2slice") >= three_done
    assert min(n.created for n in result.nodes.values()) >= result.start + 15 * 60
    assert {n.pool for n in result.nodes.values()} == {"nodepool1", "nodepool2", "nodepool3"}
    assert len(result.nodes) == 6 and len({n.created for n in result.nodes.values()}) == 1
    assert all(name.endswith(".ec2.internal") for name in result.nodes)  # EKS nodes: instances' private DNS names
    assert_gangs_ready_together(result)
    assert all(n.gone is not None for n in result.nodes.values())
    # The provider talked to the fake, and botocore's model found nothing wrong (checked by the fixture).
    assert ec2_traffic.exchanges > 0 and not ec2_traffic.problems


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SIMULATED_OUTCOMES))
async def test_every_builtin_scenario_has_the_simulated_outcome_on_aws(name: str, ec2_traffic: Ec2Traffic) -> None:
    unfinished, lost_hours = SIMULATED_OUTCOMES[name]
    result = await run_on_aws(name)
    assert result.unfinished() == unfinished
    assert lost(result) == pytest.approx(lost_hours)
    assert result.nodes and all(n.gone is not None for n in result.nodes.values())
    assert ec2_traffic.exchanges > 0


def test_every_builtin_scenario_has_an_expected_outcome() -> None:
    assert sorted(SIMULATED_OUTCOMES) == sorted(builtin_names())


def test_demo_command_runs_on_aws(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  ec2_traffic: Ec2Traffic) -> None:
    out_json = tmp_path / "run.json"
    assert main(["demo", "--scenario", str(tiny_scenario(tmp_path)), "--provider", "aws", "--quiet",
                 "--json", str(out_json)]) == 0
    assert "1/1 workloads finished" in capsys.readouterr().out
    (run,) = json.loads(out_json.read_text())["runs"]
    assert {n["pool"] for n in run["nodes"]} == {"tpu"} and len(run["nodes"]) == 2  # a 2-host slice: 2 instances
    assert all(n["name"].startswith("ip-10-") for n in run["nodes"])
    assert ec2_traffic.exchanges > 0
    assert main(["demo", "--scenario", str(tiny_scenario(tmp_path)), "--provider", "aws", "--baseline"]) == 2


async def test_the_baseline_is_refused_on_aws() -> None:
    with pytest.raises(ValueError, match="simulated provider"):
        await run_scenario(load_scenario("tpu-multislice"), mode=BASELINE, provider=AWS)
