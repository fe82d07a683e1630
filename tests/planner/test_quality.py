"""Packing quality of the planner against exact optima, on seeded suites (deterministic; nothing is timed).

- homogeneous gangs (one pod set, one machine type, empty pools with ample headroom) must be exactly optimal;
- small mixed gangs (2-3 pod sets, 4-12 pods, 1-3 pool types) planned for fewest nodes must stay within 5%
  of the exact optimum in total, and every plan must be valid;
- the oracle itself is checked on hand-computed instances and against a naive enumeration.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace
from typing import Any

import pytest

from gangscale.model.decision import Decision, NewNodes, Outcome, ScaleStep
from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.snapshot import PoolState, Snapshot
from gangscale.planner import plan
from gangscale.planner.compat import Compatibility
from gangscale.planner.pack import build_groups, fit
from gangscale.sim.oracle import homogeneous_optimum, min_new_nodes, plan_problems
from gangscale.sim.synth import SYNTH_NOW, empty_pools, synth_cluster, synth_gangs, synth_small
from tests.planner.builders import CPU_NODE, TPU_NODE, TPU_V5E, gang, pod_set, pool

NODES_POLICY = Policy(criteria=("nodes",))
MIXED_INSTANCES = 80
HOMOGENEOUS_GANGS = 60
#: Total planner nodes may exceed the total optimum by at most this factor on the mixed suite.
MIXED_TOLERANCE = 1.05


def planned(g: Gang, pools: list[NodePool], policy: Policy | None = None) -> Decision:
    return plan(Snapshot(tuple(PoolState(p) for p in pools)), [g], SYNTH_NOW, policy)[0]


# --- homogeneous gangs ------------------------------------------------------------------------------------

def test_homogeneous_gangs_are_exactly_optimal() -> None:
    rng = random.Random("homogeneous-quality")
    pools = empty_pools(synth_cluster(16, 0, 2, rng))
    gangs = synth_gangs(HOMOGENEOUS_GANGS, Snapshot(tuple(PoolState(p) for p in pools)), rng, homogeneous=True)
    off: list[str] = []
    for g in gangs:
        optimum = homogeneous_optimum(g, pools)
        decision = planned(g, pools)
        nodes = decision.new_node_count if decision.feasible else None
        assert optimum is not None, f"{g.key}: the suite should only hold feasible gangs"
        if nodes != optimum:
            off.append(f"{g.key} {g.pod_sets[0].count} x {g.pod_sets[0].demand.requests}: "
                       f"planner {nodes}, optimum {optimum}")
        assert plan_problems(decision, g, pools) == [], g.key
    assert not off, "homogeneous gangs off the optimum:\n" + "\n".join(off)


# --- the mixed exact-search suite -------------------------------------------------------------------------

@dataclass(frozen=True)
class Compared:
    gang: Gang
    pools: list[NodePool]
    optimum: int | None
    decision: Decision

    @property
    def nodes(self) -> int | None:
        return self.decision.new_node_count if self.decision.feasible else None

    def __str__(self) -> str:
        sets = ", ".join(f"{ps.name} x{ps.count} {ps.demand.requests}" for ps in self.gang.pod_sets)
        shapes = ", ".join(f"{p.name} {p.allocatable} x{p.nodes_per_unit} max {p.max_units}" for p in self.pools)
        return f"{self.gang.key} [{sets}] on [{shapes}]: planner {self.nodes}, optimum {self.optimum}"


@pytest.fixture(scope="module")
def mixed() -> list[Compared]:
    results: list[Compared] = []
    for i in range(MIXED_INSTANCES):
        g, pools = synth_small(random.Random(f"quality-{i}"), i)
        results.append(Compared(g, pools, min_new_nodes(g, pools), planned(g, pools, NODES_POLICY)))
    return results


def test_mixed_suite_within_five_percent_of_optimum(mixed: list[Compared]) -> None:
    both = [r for r in mixed if r.optimum is not None and r.nodes is not None]
    assert len(both) >= 60, "the suite should hold at least 60 feasible instances"
    planner_total = sum(r.nodes or 0 for r in both)
    optimum_total = sum(r.optimum or 0 for r in both)
    above = "\n".join(str(r) for r in both if (r.nodes or 0) > (r.optimum or 0))
    assert planner_total <= MIXED_TOLERANCE * optimum_total, (
        f"planner {planner_total} nodes vs optimum {optimum_total}; above optimum:\n{above}")


def test_mixed_suite_planner_finds_a_plan_exactly_when_one_exists(mixed: list[Compared]) -> None:
    disagree = [str(r) for r in mixed if (r.optimum is None) != (r.nodes is None)]
    assert not disagree, "planner and oracle disagree on feasibility:\n" + "\n".join(disagree)


def test_mixed_suite_plans_are_valid_and_never_beat_the_optimum(mixed: list[Compared]) -> None:
    for r in mixed:
        if r.nodes is not None:
            assert plan_problems(r.decision, r.gang, r.pools, NODES_POLICY) == [], str(r)
            assert r.optimum is None or r.nodes >= r.optimum, f"better than optimal means an oracle bug: {r}"


# --- the oracle on hand-computed instances ----------------------------------------------------------------

NODE_16 = {"cpu": "16", "memory": "64Gi", "pods": "110"}
GPU_TAINTED = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"}
TPU_TAINT = "google.com/tpu=present:NoSchedule"


def repelling(name: str, other: str, count: int) -> Any:
    """Pods labelled app=name that may not share a node with pods labelled app=other."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": other}}}]}}
    return pod_set(name, count, {"cpu": "4"}, labels={"app": name}, affinity=anti)


ORACLE_CASES = [
    # FFD opens 3 nodes (6+3 | 3+2+2+2 | 2); 6+2+2 and 3+3+2+2 fill two.
    pytest.param(gang("g/a", pod_set("six", 1, {"cpu": "6"}), pod_set("three", 2, {"cpu": "3"}),
                      pod_set("two", 4, {"cpu": "2"})),
                 [pool("p", {"cpu": "10", "memory": "64Gi", "pods": "110"})], 2, id="ffd-suboptimal"),
    pytest.param(gang("g/a", pod_set("cpu-heavy", 2, {"cpu": "6", "memory": "2Gi"}),
                      pod_set("mem-heavy", 2, {"cpu": "2", "memory": "6Gi"})),
                 [pool("p", {"cpu": "8", "memory": "8Gi", "pods": "110"})], 2, id="complementary-dimensions"),
    pytest.param(gang("g/a", pod_set("w", 5, {"cpu": "1"}, one_per_node=True)), [pool("p", NODE_16)], 5,
                 id="one-per-node"),
    pytest.param(gang("g/a", pod_set("w", 3, {"cpu": "16"})), [pool("p", NODE_16, nodes_per_unit=2)], 4,
                 id="whole-units"),
    pytest.param(gang("g/a", pod_set("slice", 5, {"google.com/tpu": "4"}, selector=TPU_V5E, one_per_node=True)),
                 [pool("v5e", TPU_NODE, nodes_per_unit=4, labels=TPU_V5E, taints=[TPU_TAINT])],
                 8, id="tpu-slices-of-four-hosts"),
    pytest.param(gang("g/a", pod_set("w", 5, {"cpu": "8"})),
                 [pool("big", {"cpu": "32", "memory": "64Gi", "pods": "110"}, max_units=1), pool("small", CPU_NODE)],
                 2, id="headroom-spills-to-second-pool"),
    pytest.param(gang("g/a", pod_set("w", 3, {"cpu": "16"})), [pool("p", NODE_16, max_units=2)], None,
                 id="headroom-too-small"),
    pytest.param(gang("g/a", pod_set("w", 1, {"cpu": "1"})),
                 [pool("gpu", GPU_TAINTED, taints=["nvidia.com/gpu=present:NoSchedule"])], None,
                 id="taint-not-tolerated"),
    pytest.param(gang("g/a", pod_set("w", 2, {"cpu": "8", "nvidia.com/gpu": "2"})),
                 [pool("gpu", GPU_TAINTED, taints=["nvidia.com/gpu=present:NoSchedule"])], 1,
                 id="extended-resource-toleration"),
    pytest.param(gang("g/a", pod_set("pinned", 2, {"cpu": "8"}, selector={"shape": "y"}),
                      pod_set("free", 2, {"cpu": "8"})),
                 [pool("x", NODE_16), pool("y", NODE_16, labels={"shape": "y"})], 2, id="selector-pins-one-set"),
    pytest.param(gang("g/a", repelling("a", "b", 2), repelling("b", "x", 2)), [pool("p", NODE_16)], 2,
                 id="sets-repel-each-other"),
    pytest.param(gang("g/a", pod_set("w", 2, {"cpu": "16"})),
                 [pool("a", NODE_16, max_units=1, zone="a"), pool("b", NODE_16, max_units=1, zone="b")], None,
                 id="zones-not-combined"),
    pytest.param(gang("g/a", pod_set("w", 2, {"cpu": "16"}), spread=True),
                 [pool("a", NODE_16, max_units=1, zone="a"), pool("b", NODE_16, max_units=1, zone="b")], 2,
                 id="spread-gang-combines-zones"),
    pytest.param(gang("g/a", pod_set("w", 0, {"cpu": "1"})), [pool("p", NODE_16)], 0, id="empty-gang"),
]


@pytest.mark.parametrize(("g", "pools", "expected"), ORACLE_CASES)
def test_oracle_on_hand_computed_instances(g: Gang, pools: list[NodePool], expected: int | None) -> None:
    assert min_new_nodes(g, pools) == expected


@pytest.mark.parametrize(("count", "cpu", "nodes_per_unit", "expected"), [
    pytest.param(10, "3", 1, 2, id="five-per-node"),
    pytest.param(11, "3", 2, 4, id="rounded-to-units"),
    pytest.param(7, "16", 1, 7, id="whole-node-pods"),
])
def test_homogeneous_optimum_formula(count: int, cpu: str, nodes_per_unit: int, expected: int) -> None:
    g = gang("g/a", pod_set("w", count, {"cpu": cpu}))
    assert homogeneous_optimum(g, [pool("p", NODE_16, nodes_per_unit=nodes_per_unit, max_units=100)]) == expected


def brute_force(g: Gang, pools: list[NodePool], max_nodes: int) -> int | None:
    """Fewest nodes by trying every unit count and every pod-to-node assignment; no cleverness at all."""
    compat = Compatibility(Policy())
    dims, groups = build_groups(g)
    pods = [group for group in groups for _ in range(group.count)]
    vectors = itertools.product(*(range(p.max_units + 1) for p in pools))
    for units in sorted(vectors, key=lambda u: sum(n * p.nodes_per_unit for n, p in zip(u, pools, strict=True))):
        total = sum(n * p.nodes_per_unit for n, p in zip(units, pools, strict=True))
        if total > max_nodes:
            return None
        nodes = [(p, [p.allocatable.get(d) for d in dims], []) for p, n in zip(pools, units, strict=True)
                 for _ in range(n * p.nodes_per_unit)]

        def place(i: int, nodes: list[tuple[NodePool, list[int], list[int]]] = nodes) -> bool:
            if i == len(pods):
                return True
            group = pods[i]
            for p, free, present in nodes:
                if compat.pool_problem(group.demand, p) or group.repels & set(present) or fit(free, group.vec) < 1:
                    continue
                free[:] = [have - need for have, need in zip(free, group.vec, strict=True)]
                present.append(group.index)
                if place(i + 1):
                    return True
                present.pop()
                free[:] = [have + need for have, need in zip(free, group.vec, strict=True)]
            return False

        if place(0):
            return total
    return None


@pytest.mark.parametrize("seed", range(60))
def test_oracle_agrees_with_brute_force(seed: int) -> None:
    g, pools = synth_small(random.Random(f"brute-{seed}"), seed)
    left, sets = 6, []
    for ps in g.pod_sets:  # at most six pods, so that trying every assignment stays cheap
        sets.append(replace(ps, count=min(ps.count, left)))
        left -= sets[-1].count
    g = Gang(g.key, tuple(s for s in sets if s.count))
    pools = [replace(p, max_units=min(p.max_units, 3)) for p in pools]
    expected = brute_force(g, pools, max_nodes=12)
    assert min_new_nodes(g, pools) == expected


def test_plan_problems_catches_an_overfilled_node() -> None:
    p = pool("p", NODE_16)
    g = gang("g/a", pod_set("w", 3, {"cpu": "6"}))
    wrong = Decision(g.key, Outcome.SCALE_UP, steps=(ScaleStep("p", 1, 1),), new_nodes=(NewNodes("p", 1, (("w", 3),)),))
    assert plan_problems(wrong, g, [p]) == ["(('w', 3),) overfill a p node"]
