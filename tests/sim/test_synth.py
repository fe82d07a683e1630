"""The synthetic input generators: deterministic for a seed, the sizes asked for, shaped as GKE shapes them."""

from __future__ import annotations

import random

import pytest

from gangscale.model.policy import Policy
from gangscale.model.snapshot import PoolState, Snapshot
from gangscale.planner.compat import Compatibility
from gangscale.sim.synth import (
    GPU,
    GPU_LABEL,
    GPU_TAINT,
    MACHINES,
    SYNTH_NOW,
    TPU,
    TPU_LABEL,
    TPU_TAINT,
    empty_pools,
    synth_cluster,
    synth_gangs,
    synth_small,
)

SIZES = [(1, 0, 1), (10, 100, 3), (50, 1000, 3), (200, 5000, 4)]


@pytest.mark.parametrize(("pools", "nodes", "zones"), SIZES, ids=[f"{p}p-{n}n-{z}z" for p, n, z in SIZES])
def test_cluster_has_the_requested_sizes(pools: int, nodes: int, zones: int) -> None:
    snapshot = synth_cluster(pools, nodes, zones, random.Random(7))
    assert len(snapshot.pools) == pools
    assert len(snapshot.nodes) == nodes
    assert len({s.pool.name for s in snapshot.pools}) == pools
    assert len({n.name for n in snapshot.nodes}) == nodes
    assert len({s.pool.zone for s in snapshot.pools}) == min(pools, zones)


def test_cluster_is_deterministic_for_a_seed() -> None:
    assert synth_cluster(30, 400, 3, random.Random(11)) == synth_cluster(30, 400, 3, random.Random(11))
    assert synth_cluster(30, 400, 3, random.Random(11)) != synth_cluster(30, 400, 3, random.Random(12))


def test_gangs_are_deterministic_for_a_seed() -> None:
    snapshot = synth_cluster(20, 200, 3, random.Random(1))
    for homogeneous in (False, True):
        first = synth_gangs(50, snapshot, random.Random(5), homogeneous)
        assert first == synth_gangs(50, snapshot, random.Random(5), homogeneous)
        assert first != synth_gangs(50, snapshot, random.Random(6), homogeneous)


def test_cluster_looks_like_gke() -> None:
    snapshot = synth_cluster(60, 1200, 3, random.Random(3))
    for state in snapshot.pools:
        pool = state.pool
        if GPU in pool.allocatable:
            assert pool.taints == (GPU_TAINT,) and GPU_LABEL in pool.labels
        elif TPU in pool.allocatable:
            assert pool.taints == (TPU_TAINT,) and TPU_LABEL in pool.labels
            assert pool.nodes_per_unit in (1, 2, 4)
        else:
            assert pool.taints == ()
        assert state.units + state.inflight_units <= pool.max_units
    by_pool: dict[str, int] = {}
    for node in snapshot.nodes:
        assert node.requested.fits_in(node.allocatable)
        by_pool[node.pool or ""] = by_pool.get(node.pool or "", 0) + 1
    for state in snapshot.pools:
        assert by_pool.get(state.pool.name, 0) == state.units * state.pool.nodes_per_unit
    assert any(state.inflight_units for state in snapshot.pools)
    assert 1 <= sum(state.backed_off(SYNTH_NOW) for state in snapshot.pools) <= 2
    assert any(node.requested.get("cpu") > node.allocatable.get("cpu") // 2 for node in snapshot.nodes)
    assert any(state.headroom == 0 for state in snapshot.pools)


@pytest.mark.parametrize("count", [0, 1, 10, 500])
def test_gangs_have_the_requested_count_and_shape(count: int) -> None:
    snapshot = synth_cluster(20, 200, 3, random.Random(2))
    gangs = synth_gangs(count, snapshot, random.Random(count), homogeneous=False)
    assert len(gangs) == count
    assert len({g.key for g in gangs}) == count
    for g in gangs:
        assert 1 <= len(g.pod_sets) <= 3
        assert g.pods >= 1
        assert g.created <= SYNTH_NOW


def test_homogeneous_gangs_admit_exactly_one_machine_shape() -> None:
    snapshot = synth_cluster(16, 0, 2, random.Random(4))
    pools = empty_pools(snapshot)
    compat = Compatibility(Policy())
    gangs = synth_gangs(100, Snapshot(tuple(PoolState(p) for p in pools)), random.Random(9), homogeneous=True)
    kinds = set()
    for g in gangs:
        (pod_set,) = g.pod_sets
        usable = [p for p in pools if compat.pool_problem(pod_set.demand, p) is None]
        assert usable, g.key
        assert len({(p.allocatable, p.nodes_per_unit) for p in usable}) == 1, g.key
        kinds.add(usable[0].machine_type)
    assert len(kinds) == len({m.machine_type for m in MACHINES})


@pytest.mark.parametrize("seed", range(30))
def test_small_instances_have_the_promised_sizes(seed: int) -> None:
    g, pools = synth_small(random.Random(seed), seed)
    assert synth_small(random.Random(seed), seed) == (g, pools)
    assert 2 <= len(g.pod_sets) <= 3
    assert 4 <= g.pods <= 12
    assert all(ps.count >= 1 for ps in g.pod_sets)
    assert 1 <= len(pools) <= 3
    assert {p.nodes_per_unit for p in pools} <= {1, 2}
