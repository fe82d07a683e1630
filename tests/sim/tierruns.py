"""A one-hour demo run over three tiers' pools, built by hand (no cluster runs), for the report's and the plot's tier
tests: ``whole`` on two on-demand nodes; ``split`` on a spot node and an on-demand one; ``idle`` never runs; a CPU
node without a price runs all along."""

from __future__ import annotations

from gangscale.sim.observer import NodeLife
from gangscale.sim.runner import GANGSCALE, RunResult
from gangscale.sim.scenario import parse_scenario
from gangscale.sim.world import FINISHED, POD_STARTED, RUNNING, Timeline

T0 = 2_000_000.0
HOUR = 3600.0
SCENARIO = """
name: tiers
nodePools:
  - {name: gpu-spot, machineType: a3-highgpu-8g, capacityType: spot, maxUnits: 4, pricePerUnitHour: 30}
  - {name: gpu, machineType: a3-highgpu-8g, maxUnits: 4, pricePerUnitHour: 90}
  - {name: cpu, allocatable: {cpu: "16", memory: 64Gi}, maxUnits: 4}
workloads:
  - {name: whole, podSets: [{name: w, parallelism: 2}]}
  - {name: split, podSets: [{name: w, parallelism: 2}]}
  - {name: idle, podSets: [{name: w, parallelism: 1}]}
"""
WHOLE, SPLIT, IDLE = "default/whole", "default/split", "default/idle"


def tiers_run(mode: str = GANGSCALE, *, spot: bool = True) -> RunResult:
    """``whole`` on two on-demand nodes; ``split`` on a spot node (when ``spot``, else a third on-demand one) and an
    on-demand one; ``idle`` never runs; a CPU node without a price runs all along."""
    split_pool = "gpu-spot" if spot else "gpu"
    nodes = {n.name: n for n in (NodeLife("g0", "gpu", "g0", 8, T0, T0 + 60, T0 + HOUR),
                                 NodeLife("g1", "gpu", "g1", 8, T0, T0 + 60, T0 + HOUR),
                                 NodeLife("g2", "gpu", "g2", 8, T0, T0 + 60, T0 + HOUR / 2),
                                 NodeLife("s0", split_pool, "s0", 8, T0, T0 + 60, T0 + HOUR / 2),
                                 NodeLife("c0", "cpu", "c0", 0, T0, T0 + 60, None))}
    tl = Timeline(T0)
    for at, kind, subject, where in ((60, POD_STARTED, SPLIT, "s0"), (60, POD_STARTED, WHOLE, "g0"),
                                     (60, POD_STARTED, WHOLE, "g1"), (60, RUNNING, WHOLE, ""),
                                     (90, POD_STARTED, SPLIT, "g2"), (90, RUNNING, SPLIT, ""),
                                     (1800, FINISHED, SPLIT, ""), (3600, FINISHED, WHOLE, "")):
        tl.add(T0 + at, kind, subject, kind, **({"node": where, "accelerators": 8} if where else {}))
    return RunResult(parse_scenario(SCENARIO), mode, T0, T0 + HOUR, tl, nodes, [WHOLE, SPLIT, IDLE])
