#!/usr/bin/env python3
"""Benchmark the planner: speed across cluster sizes, and packing quality against exact optima.

    python hack/bench_planner.py [--quick] [--seed N] [--json FILE] [--profile]

Speed: for each generated size (pools / nodes / gangs; 3 zones), ``plan()`` runs repeatedly on the same
input (generation excluded); p50 and p99 are nearest-rank over the runs, so below 100 runs p99 is the slowest
run. Peak memory is that of one separate ``plan()`` call under tracemalloc. ``--quick`` stops at
50/1,000/500 and spends less time per size.

Quality:
  (a) homogeneous gangs (one pod set, one machine type, empty pools with ample headroom), default policy,
      against ceil(n / k) nodes rounded up to whole units;
  (b) ~150 small mixed gangs (2-3 pod sets, 4-12 pods), ``Policy(criteria=("nodes",))``, against the exact
      branch-and-bound optimum of ``gangscale.sim.oracle``.
Every plan in (a) and (b) is also checked for validity (fit, compatibility, anti-affinity, all pods placed).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gangscale.model.gang import Gang, PodSet  # noqa: E402
from gangscale.model.nodepool import NodePool  # noqa: E402
from gangscale.model.policy import Policy  # noqa: E402
from gangscale.model.snapshot import PoolState, Snapshot  # noqa: E402
from gangscale.planner import plan  # noqa: E402
from gangscale.sim.oracle import homogeneous_optimum, min_new_nodes, plan_problems  # noqa: E402
from gangscale.sim.synth import SYNTH_NOW, empty_pools, synth_cluster, synth_gangs, synth_small  # noqa: E402

SIZES = ((10, 100, 10), (20, 250, 50), (50, 1000, 500), (100, 2500, 1000), (200, 5000, 2000))
QUICK_SIZES = SIZES[:3]
ZONES = 3
NODES_POLICY = Policy(criteria=("nodes",))
Row = dict[str, Any]


def machine() -> Row:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "platform": platform.platform()}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, -(-len(ordered) * q // 100) - 1))]


# --- speed ------------------------------------------------------------------------------------------------

def timed_runs(snapshot: Snapshot, gangs: list[Gang], budget: float, min_runs: int, max_runs: int) -> list[float]:
    plan(snapshot, gangs, SYNTH_NOW)  # warm-up: imports, bytecode caches
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < min_runs or (len(times) < max_runs and time.perf_counter() - started < budget):
        gc.collect()  # so one run does not pay for the previous run's garbage
        t0 = time.perf_counter()
        plan(snapshot, gangs, SYNTH_NOW)
        times.append(time.perf_counter() - t0)
    return times


def peak_memory(snapshot: Snapshot, gangs: list[Gang]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        plan(snapshot, gangs, SYNTH_NOW)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench_size(pools: int, nodes: int, count: int, seed: int, quick: bool) -> Row:
    rng = random.Random(f"speed-{seed}-{pools}-{nodes}-{count}")
    snapshot = synth_cluster(pools, nodes, ZONES, rng)
    gangs = synth_gangs(count, snapshot, rng, homogeneous=False)
    times = timed_runs(snapshot, gangs, budget=4.0 if quick else 10.0, min_runs=5, max_runs=200)
    outcomes = {"Fits": 0, "ScaleUp": 0, "Infeasible": 0}
    for decision in plan(snapshot, gangs, SYNTH_NOW):
        outcomes[decision.outcome.value] += 1
    p50 = statistics.median(times)
    return {"pools": pools, "nodes": nodes, "gangs": count, "pods": sum(g.pods for g in gangs), "runs": len(times),
            "p50_s": p50, "p99_s": percentile(times, 99), "gangs_per_s": count / p50,
            "peak_mib": peak_memory(snapshot, gangs) / 2**20, **outcomes}


def profile_size(pools: int, nodes: int, count: int, seed: int, top: int = 18) -> None:
    rng = random.Random(f"speed-{seed}-{pools}-{nodes}-{count}")
    snapshot = synth_cluster(pools, nodes, ZONES, rng)
    gangs = synth_gangs(count, snapshot, rng, homogeneous=False)
    profiler = cProfile.Profile()
    profiler.runcall(plan, snapshot, gangs, SYNTH_NOW)
    print(f"\ncProfile of one plan() at {pools} pools / {nodes} nodes / {count} gangs (top {top} by tottime):")
    pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(top)


# --- quality ----------------------------------------------------------------------------------------------

def plan_alone(gang: Gang, pools: list[NodePool], policy: Policy | None) -> tuple[int | None, list[str]]:
    """New nodes the planner asks for ``gang`` on empty ``pools`` (None: infeasible), and plan problems."""
    decision = plan(Snapshot(tuple(PoolState(pool) for pool in pools)), [gang], SYNTH_NOW, policy)[0]
    if not decision.feasible:
        return None, []
    return decision.new_node_count, plan_problems(decision, gang, pools, policy)


def describe(gang: Gang, pools: list[NodePool]) -> str:
    def pod_set(ps: PodSet) -> str:
        selector = ",".join(f"{k}={v}" for k, v in ps.demand.node_selector)
        return (f"{ps.name} x{ps.count} {ps.demand.requests}{' one-per-node' if ps.demand.anti_affinity else ''}"
                f"{' sel=' + selector if selector else ''}{' tolerates' if ps.demand.tolerations else ''}")

    sets = "; ".join(pod_set(ps) for ps in gang.pod_sets)
    shapes = "; ".join(f"{p.name} {p.allocatable} x{p.nodes_per_unit}/unit max {p.max_units}"
                       f"{' tainted' if p.taints else ''}" for p in pools)
    return f"{gang.key}: [{sets}] on [{shapes}]"


def homogeneous_quality(seed: int, count: int) -> Row:
    rng = random.Random(f"homogeneous-{seed}")
    pools = empty_pools(synth_cluster(16, 0, 2, rng))
    gangs = synth_gangs(count, Snapshot(tuple(PoolState(pool) for pool in pools)), rng, homogeneous=True)
    planner_total = optimum_total = 0
    above: list[str] = []
    invalid: list[str] = []
    for gang in gangs:
        optimum = homogeneous_optimum(gang, pools)
        nodes, problems = plan_alone(gang, pools, None)
        if optimum is None or nodes is None:
            if (optimum is None) != (nodes is None):
                above.append(f"{gang.key}: planner {nodes}, optimum {optimum}")
            continue
        planner_total, optimum_total = planner_total + nodes, optimum_total + optimum
        if nodes > optimum:
            above.append(f"{gang.key} ({gang.pod_sets[0].count} x {gang.pod_sets[0].demand.requests}): "
                         f"planner {nodes}, optimum {optimum}")
        invalid.extend(f"{gang.key}: {problem}" for problem in problems)
    return {"gangs": count, "planner_nodes": planner_total, "optimal_nodes": optimum_total,
            "above_optimum": above, "invalid_plans": invalid}


def mixed_quality(seed: int, count: int) -> Row:
    rows: list[Row] = []
    oracle_time = 0.0
    for i in range(count):
        gang, pools = synth_small(random.Random(f"mixed-{seed}-{i}"), i)
        t0 = time.perf_counter()
        optimum = min_new_nodes(gang, pools)
        oracle_time += time.perf_counter() - t0
        nodes, problems = plan_alone(gang, pools, NODES_POLICY)
        rows.append({"gang": gang, "pools": pools, "optimum": optimum, "planner": nodes, "problems": problems})
    both = [r for r in rows if r["optimum"] is not None and r["planner"] is not None]
    planner_total, optimum_total = sum(r["planner"] for r in both), sum(r["optimum"] for r in both)
    above = [r for r in both if r["planner"] > r["optimum"]]
    worst = max(above, key=lambda r: (r["planner"] / r["optimum"], r["planner"] - r["optimum"]), default=None)
    missed = [r for r in rows if r["optimum"] is not None and r["planner"] is None]
    impossible = [r for r in rows if r["optimum"] is None and r["planner"] is not None]
    return {
        "instances": count, "both_feasible": len(both), "both_infeasible": sum(
            1 for r in rows if r["optimum"] is None and r["planner"] is None),
        "planner_nodes": planner_total, "optimal_nodes": optimum_total,
        "ratio": planner_total / optimum_total if optimum_total else 1.0, "above_optimum": len(above),
        "above_optimum_instances": [f"{describe(r['gang'], r['pools'])}: planner {r['planner']}, optimum "
                                    f"{r['optimum']}" for r in above],
        "worst": None if worst is None else
        f"{describe(worst['gang'], worst['pools'])}: planner {worst['planner']}, optimum {worst['optimum']}",
        "planner_infeasible_but_solvable": [f"{describe(r['gang'], r['pools'])}: optimum {r['optimum']}"
                                            for r in missed],
        "planner_plan_but_oracle_none": [describe(r["gang"], r["pools"]) for r in impossible],
        "invalid_plans": [f"{r['gang'].key}: {p}" for r in rows for p in r["problems"]],
        "oracle_seconds": oracle_time,
    }


# --- output -----------------------------------------------------------------------------------------------

def print_header() -> None:
    header = (f"{'pools':>5} {'nodes':>6} {'gangs':>6} {'pods':>7} {'runs':>4} {'p50 ms':>9} {'p99 ms':>9} "
              f"{'gangs/s':>8} {'peak MiB':>9} {'Fits':>5} {'ScaleUp':>7} {'Infeas.':>7}")
    print(header)
    print("-" * len(header))


def print_row(r: Row) -> None:
    print(f"{r['pools']:>5} {r['nodes']:>6} {r['gangs']:>6} {r['pods']:>7} {r['runs']:>4} {r['p50_s'] * 1e3:>9.1f} "
          f"{r['p99_s'] * 1e3:>9.1f} {r['gangs_per_s']:>8.0f} {r['peak_mib']:>9.1f} {r['Fits']:>5} "
          f"{r['ScaleUp']:>7} {r['Infeasible']:>7}", flush=True)


def print_quality(homogeneous: Row, mixed: Row) -> None:
    h = homogeneous
    print(f"\n(a) homogeneous gangs: {h['gangs']} gangs, planner {h['planner_nodes']} nodes, optimum "
          f"{h['optimal_nodes']} nodes, {len(h['above_optimum'])} above optimum, "
          f"{len(h['invalid_plans'])} invalid plans")
    for line in h["above_optimum"] + h["invalid_plans"]:
        print(f"    {line}")
    m = mixed
    print(f"(b) mixed exact-search suite: {m['instances']} instances ({m['both_feasible']} feasible, "
          f"{m['both_infeasible']} infeasible for both), oracle {m['oracle_seconds']:.2f}s")
    print(f"    planner {m['planner_nodes']} nodes vs optimum {m['optimal_nodes']} nodes: ratio {m['ratio']:.4f}; "
          f"{m['above_optimum']} instances above optimum")
    if m["worst"]:
        print(f"    worst: {m['worst']}")
    for label, key in (("planner Infeasible, oracle found a plan", "planner_infeasible_but_solvable"),
                       ("planner plan where the oracle proves none", "planner_plan_but_oracle_none"),
                       ("invalid planner plans", "invalid_plans")):
        print(f"    {label}: {len(m[key])}")
        for line in m[key]:
            print(f"      {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 50 pools/1,000 nodes/500 gangs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--profile", action="store_true", help="cProfile one plan() at the largest size")
    args = parser.parse_args(argv)
    info = machine()
    print(f"machine: {info['cpus']} CPUs, {info['cpu_model']}; Python {info['python']} ({info['platform']})")
    print(f"mode: {'quick' if args.quick else 'full'}, seed {args.seed}, {ZONES} zones\n")
    sizes = QUICK_SIZES if args.quick else SIZES
    speed: list[Row] = []
    print_header()
    for pools, nodes, count in sizes:
        speed.append(bench_size(pools, nodes, count, args.seed, args.quick))
        print_row(speed[-1])
    homogeneous = homogeneous_quality(args.seed, 200)
    mixed = mixed_quality(args.seed, 150)
    print_quality(homogeneous, mixed)
    if args.profile:
        profile_size(*sizes[-1], seed=args.seed)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "mode": "quick" if args.quick else "full",
                                               "seed": args.seed, "speed": speed, "homogeneous": homogeneous,
                                               "mixed": mixed}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
