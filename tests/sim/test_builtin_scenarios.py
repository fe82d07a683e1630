"""Each built-in scenario, run end to end (Kueue, jobs, scheduler, simulated cloud, the real controller), and the
outcome it exists to show. The runs are on simulated time; each takes a few seconds of real time."""

from __future__ import annotations

import pytest

from gangscale.sim.report import rows, totals
from gangscale.sim.runner import BASELINE, GANGSCALE, RunResult, run_scenario
from gangscale.sim.scenario import load_scenario
from gangscale.sim.world import ARRIVED, FINISHED, POD_STARTED, PREEMPTED, RUNNING, SCALE_UP_FAILED

NS = "default"


async def run(name: str, mode: str = GANGSCALE, provider: str = "simulated") -> RunResult:
    result = await run_scenario(load_scenario(name), mode=mode, provider=provider)
    assert result.unsettled == 0
    return result


def at(result: RunResult, kind: str, name: str) -> float:
    when = result.timeline.first(kind, f"{NS}/{name}")
    assert when is not None, f"{name}: no {kind} entry"
    return when


def pools_used(result: RunResult, name: str) -> set[str]:
    return {result.nodes[e.data["node"]].pool for e in result.timeline.of(POD_STARTED, f"{NS}/{name}")}


def lost(result: RunResult) -> float:
    return totals(result, rows(result)).lost_accelerator_hours


def assert_gangs_ready_together(result: RunResult) -> None:
    """The nodes made for a gang turned Ready at one instant (they were obtained as one; for gangs within one pool,
    or pools with the same provisioning delay)."""
    for subject in result.workloads:
        ready = {result.nodes[e.data["node"]].ready for e in result.timeline.of(POD_STARTED, subject)}
        new = {r for r in ready if r is not None and r >= (result.timeline.first(ARRIVED, subject) or 0)}
        assert len(new) <= 1, f"{subject}: its new nodes turned Ready at {sorted(new)}"


@pytest.mark.parametrize("provider", ["simulated", "gke"])
async def test_tpu_multislice_runs_three_slices_alone_then_one_and_two_together(provider: str) -> None:
    """The same outcome with either provider: on ``gke`` each slice is a node pool of the fake GKE, and the
    scenario's stock is the zone's."""
    result = await run("tpu-multislice", provider=provider)
    assert result.finished
    three_done = at(result, FINISHED, "multislice-3slice")
    assert at(result, RUNNING, "multislice-3slice") < three_done
    # The 1- and 2-slice JobSets wait for the quota the 3-slice one holds, then run together.
    assert at(result, RUNNING, "multislice-1slice") >= three_done
    assert at(result, RUNNING, "multislice-1slice") == at(result, RUNNING, "multislice-2slice")
    # nodepool3 has no capacity for 15 minutes: nothing is obtained before, then all three slices at once.
    first_node = min(n.created for n in result.nodes.values())
    assert first_node >= result.start + 15 * 60
    assert {n.pool for n in result.nodes.values()} == {"nodepool1", "nodepool2", "nodepool3"}
    assert len({n.created for n in result.nodes.values()}) == 1
    assert lost(result) == 0
    assert_gangs_ready_together(result)
    # Everything is scaled down afterwards.
    assert all(n.gone is not None for n in result.nodes.values())


async def test_tpu_multislice_baseline_loses_accelerator_hours_to_the_partial_gang() -> None:
    result = await run("tpu-multislice", BASELINE)
    assert result.finished
    table = {r.subject: r for r in rows(result)}
    # Two slices (16 chips) ran pods of the 3-slice JobSet while the third slice was out of stock.
    assert table[f"{NS}/multislice-3slice"].lost_accelerator_hours > 3.5
    assert table[f"{NS}/multislice-1slice"].lost_accelerator_hours == 0


async def test_ray_priority_production_preempts_ci_and_ci_comes_back() -> None:
    result = await run("ray-priority")
    assert result.finished
    prod_start = at(result, RUNNING, "prod-batch-inference")
    for ci in ("ci-test-1", "ci-test-2"):
        preemptions = result.timeline.of(PREEMPTED, f"{NS}/{ci}")
        assert preemptions and all(p.at <= prod_start for p in preemptions)
        assert preemptions[0].data.get("by") == f"{NS}/prod-batch-inference"
        # It ran again after production finished, from the start of its run.
        last_run = result.timeline.of(RUNNING, f"{NS}/{ci}")[-1].at
        assert last_run >= at(result, FINISHED, "prod-batch-inference")
    assert pools_used(result, "prod-batch-inference") == {"cpu", "a100"}
    assert lost(result) == 0


async def test_ray_autoscaling_scales_to_zero_between_bursts() -> None:
    result = await run("ray-autoscaling")
    assert result.finished
    second_burst = result.start + 3600
    gpu = [n for n in result.nodes.values() if n.pool == "gpu"]
    alive_before_burst = [n for n in gpu if n.created < second_burst and (n.gone is None or n.gone > second_burst)]
    assert not alive_before_burst, "idle GPU nodes should be gone before the second burst"
    assert max(len([m for m in gpu if m.created <= n.created and (m.gone or 1e12) > n.created])
               for n in gpu) == 8  # the first burst used the whole pool
    assert any(n.created >= second_burst for n in gpu)
    assert all(n.gone is not None for n in result.nodes.values())
    assert lost(result) == 0


async def test_stockout_fallback_and_partial_grant_roll_back() -> None:
    result = await run("stockout-fallback")
    assert result.finished
    failures = [e.text for e in result.timeline.of(SCALE_UP_FAILED)]
    assert any("pool gpu-a: stockout" in t for t in failures), failures
    assert any("pool gpu-b: stockout" in t for t in failures), failures  # the partial grant, rolled back
    assert pools_used(result, "llm-pretrain") == {"gpu-b"}
    assert pools_used(result, "finetune") == {"gpu-a"}
    # gangscale never kept part of a gang: every node it kept served a workload.
    served = {e.data["node"] for e in result.timeline.of(POD_STARTED)}
    assert set(result.nodes) == served
    assert lost(result) == 0
    assert_gangs_ready_together(result)


@pytest.mark.parametrize("name", ["stockout-fallback"])
async def test_the_baseline_keeps_a_partial_gang_where_gangscale_waits(name: str) -> None:
    result = await run(name, BASELINE)
    table = {r.subject: r for r in rows(result)}
    assert table[f"{NS}/finetune"].lost_accelerator_hours > 1.0


@pytest.mark.parametrize("name", ["ray-priority", "ray-autoscaling", "stockout-fallback", "ray-gangs"])
async def test_every_scenario_runs_through_the_fake_gke(name: str) -> None:
    """Any scenario runs on the gke provider (gangscale demo --provider gke): every workload finishes, no gang is
    left partial, every node is gone at the end. (Timings differ where the fake models less than the simulated
    provider: capacity per zone, no partial grants.)"""
    result = await run(name, provider="gke")
    assert result.finished
    assert lost(result) == 0
    assert result.nodes and all(n.gone is not None for n in result.nodes.values())
