"""Capacity tiers in the planner (issue 28): a gang is placed whole in the first of its tiers that can hold it, never
across tiers unless its policy lets them mix; wait bounds keep later tiers closed; among pools of one tier the
cheapest wins; infeasible reasons name the tier and why each was skipped."""

from __future__ import annotations

import pytest

from gangscale.model.decision import Outcome, ReasonCode
from gangscale.model.nodepool import POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.model.policy import Policy
from gangscale.model.tiers import (
    FLEX_START,
    ON_DEMAND,
    RESERVATION,
    SPOT,
    TierError,
    TierPolicies,
    TierPolicy,
    parse_tiers,
    tier_of_labels,
)
from gangscale.planner import plan, summarize
from gangscale.planner.diagnose import when
from tests.planner.builders import CPU_NODE, GPU_NODE, H100, gang, node, pod_set, pool, snapshot, state

NOW = 1_700_000_000.0
SPOT_FIRST = TierPolicy((SPOT, ON_DEMAND))


def gpu_pool(name: str, tier: str, *, max_units: int = 20, price: float | None = None,
             reservation: int | None = None, zone: str = "zone-a") -> NodePool:
    return pool(name, GPU_NODE, labels=H100, tier=tier, max_units=max_units, price=price, reservation=reservation,
                zone=zone)


def workers(nodes: int) -> object:
    """A data-parallel gang of ``nodes`` whole 8-GPU nodes."""
    return pod_set("workers", nodes, limits={"nvidia.com/gpu": 8}, selector=H100)


def steps(decision: object) -> dict[str, int]:
    return {s.pool: s.nodes for s in decision.steps}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("policy", "pools", "expected", "tier"), [
    pytest.param(SPOT_FIRST, [gpu_pool("spot", SPOT, max_units=10), gpu_pool("od", ON_DEMAND)], {"od": 16},
                 ON_DEMAND, id="spot-too-small-whole-gang-on-demand"),
    pytest.param(SPOT_FIRST, [gpu_pool("spot", SPOT), gpu_pool("od", ON_DEMAND)], {"spot": 16}, SPOT,
                 id="spot-first-when-it-holds-all"),
    pytest.param(TierPolicy((SPOT, ON_DEMAND), mix=True),
                 [gpu_pool("spot", SPOT, max_units=10, price=10.0), gpu_pool("od", ON_DEMAND, price=88.0)],
                 None, "", id="mixing-allowed-spans-tiers"),
    pytest.param(TierPolicy(), [gpu_pool("spot", SPOT, price=10.0), gpu_pool("od", ON_DEMAND, price=88.0)],
                 {"od": 16}, ON_DEMAND, id="default-order-prefers-on-demand-over-cheaper-spot"),
    pytest.param(TierPolicy(), [gpu_pool("resv", RESERVATION, reservation=16), gpu_pool("od", ON_DEMAND)],
                 {"resv": 16}, RESERVATION, id="reservation-first"),
    pytest.param(TierPolicy(), [gpu_pool("resv", RESERVATION, reservation=12), gpu_pool("od", ON_DEMAND)],
                 {"od": 16}, ON_DEMAND, id="reservation-too-small"),
    pytest.param(TierPolicy((FLEX_START, SPOT)), [gpu_pool("flex", FLEX_START, max_units=4),
                                                   gpu_pool("spot", SPOT)], {"spot": 16}, SPOT,
                 id="flex-start-too-small-then-spot"),
])
def test_a_gang_is_placed_whole_in_the_first_tier_that_holds_it(policy: TierPolicy, pools: list[NodePool],
                                                                 expected: dict[str, int] | None, tier: str) -> None:
    """``expected`` None: the policy lets tiers mix, and the gang, too big for spot alone, spans both."""
    decision, = plan(snapshot(pools), [gang("ns/train", workers(16), tiers=policy)], NOW)
    assert decision.outcome is Outcome.SCALE_UP
    placed = steps(decision)
    if expected is None:
        assert set(placed) == {"spot", "od"} and sum(placed.values()) == 16
    else:
        assert placed == expected
    assert decision.tier == tier


def test_the_class_policy_applies_when_the_gang_has_none() -> None:
    pools = [gpu_pool("spot", SPOT), gpu_pool("od", ON_DEMAND)]
    policy = Policy(tiers=TierPolicies(default=SPOT_FIRST))
    decision, = plan(snapshot(pools), [gang("ns/train", workers(2))], NOW, policy)
    assert steps(decision) == {"spot": 2}


def test_a_backed_off_tier_moves_the_gang_whole_to_the_next() -> None:
    spot = state(gpu_pool("spot", SPOT), backoff_until=NOW + 300,
                 backoff_reason="stockout (ZONE_RESOURCE_POOL_EXHAUSTED)")
    decision, = plan(snapshot([spot, gpu_pool("od", ON_DEMAND)]), [gang("ns/train", workers(8), tiers=SPOT_FIRST)],
                     NOW)
    assert steps(decision) == {"od": 8} and decision.tier == ON_DEMAND
    assert summarize(decision) == "scale up od +8 units in zone zone-a on on-demand capacity"


@pytest.mark.parametrize(("elapsed", "outcome", "placed"), [
    pytest.param(0.0, Outcome.INFEASIBLE, {}, id="just-created-waits-for-spot"),
    pytest.param(599.0, Outcome.INFEASIBLE, {}, id="one-second-before-the-bound"),
    pytest.param(600.0, Outcome.SCALE_UP, {"od": 4}, id="at-the-bound-on-demand-opens"),
])
def test_a_wait_bound_keeps_the_next_tier_closed(elapsed: float, outcome: Outcome, placed: dict[str, int]) -> None:
    created = NOW - elapsed
    spot = state(gpu_pool("spot", SPOT), backoff_until=NOW + 3600, backoff_reason="a stockout")
    policy = TierPolicy((SPOT, ON_DEMAND), wait={SPOT: 600})
    decision, = plan(snapshot([spot, gpu_pool("od", ON_DEMAND)]),
                     [gang("ns/train", workers(4), created=created, tiers=policy)], NOW)
    assert decision.outcome is outcome and steps(decision) == placed
    if outcome is Outcome.INFEASIBLE:
        assert decision.wait_until == created + 600
        waiting = [r for r in decision.reasons if r.code is ReasonCode.TIER]
        assert [r.message for r in waiting] == ["waiting for spot capacity until "
                                                f"{when(created + 600)} before trying on-demand"]
    else:
        assert decision.wait_until is None


def test_waits_add_up_along_the_order() -> None:
    policy = TierPolicy((RESERVATION, SPOT, ON_DEMAND), wait={RESERVATION: 60, SPOT: 600})
    assert policy.opening(0, 30).open == (RESERVATION,)
    assert policy.opening(0, 60).open == (RESERVATION, SPOT)
    assert policy.opening(0, 659).until == 660
    assert policy.opening(0, 660).open == (RESERVATION, SPOT, ON_DEMAND)
    assert policy.opening(0, 660).waiting_for is None


def test_cheapest_pool_first_within_a_tier() -> None:
    pools = [gpu_pool("spot-b", SPOT, price=30.0), gpu_pool("spot-a", SPOT, price=35.0), gpu_pool("od", ON_DEMAND)]
    decision, = plan(snapshot(pools), [gang("ns/train", workers(2), tiers=SPOT_FIRST)], NOW)
    assert steps(decision) == {"spot-b": 2}


def test_existing_free_capacity_is_not_shared_across_tiers() -> None:
    """One free spot node and one free on-demand node: the two-node gang does not take both; it takes the
    on-demand node and one new on-demand node (default order)."""
    od = gpu_pool("od", ON_DEMAND)
    spot_labels = {**H100, "cloud.google.com/gke-spot": "true", ZONE_LABEL: "zone-a"}
    nodes = [node("spot-1", allocatable=GPU_NODE, labels=spot_labels),
             node("od-1", od)]
    decision, = plan(snapshot([state(od, units=1)], nodes), [gang("ns/train", workers(2))], NOW)
    assert decision.outcome is Outcome.SCALE_UP
    assert {p.node for p in decision.placements} == {"od-1"} and steps(decision) == {"od": 1}
    spot_only, = plan(snapshot([state(od, units=1)], nodes), [gang("ns/train", workers(1), tiers=TierPolicy((SPOT,)))],
                      NOW)
    assert spot_only.outcome is Outcome.FITS and {p.node for p in spot_only.placements} == {"spot-1"}


def test_infeasible_reasons_name_each_tier_and_why() -> None:
    spot = state(gpu_pool("a3-spot", SPOT), backoff_until=NOW + 90, backoff_reason="a stockout")
    od = gpu_pool("a3", ON_DEMAND, max_units=2)
    decision, = plan(snapshot([spot, od]), [gang("ns/train", workers(4), tiers=SPOT_FIRST)], NOW)
    assert decision.outcome is Outcome.INFEASIBLE
    text = summarize(decision)
    assert "spot pool a3-spot: backed off until 2023-11-14T22:14:50Z after a stockout" in text
    assert "on-demand pool a3: needs 4 nodes for pod set 'workers', maxUnits leaves 2" in text
    assert {r.tier for r in decision.reasons if r.pool} == {SPOT, ON_DEMAND}


def test_a_gang_whose_tiers_have_no_capacity_says_so() -> None:
    decision, = plan(snapshot([gpu_pool("od", ON_DEMAND)]),
                     [gang("ns/train", workers(1), tiers=TierPolicy((SPOT,)))], NOW)
    assert decision.outcome is Outcome.INFEASIBLE
    assert "no pool or Ready node of capacity type spot" in summarize(decision)


def test_a_reservation_bounds_its_pool() -> None:
    resv = gpu_pool("resv", RESERVATION, reservation=4)
    decision, = plan(snapshot([state(resv, units=1)]), [gang("ns/train", workers(4), tiers=TierPolicy((RESERVATION,)))],
                     NOW)
    assert decision.outcome is Outcome.INFEASIBLE
    assert ("pool resv: needs 4 nodes for pod set 'workers', the reservation leaves 3 (its reservation of 4 nodes: "
            "1 in use, 0 in flight)") in summarize(decision)


def test_a_one_tier_cluster_reads_as_before() -> None:
    decision, = plan(snapshot([gpu_pool("od", ON_DEMAND, max_units=1)]), [gang("ns/train", workers(2))], NOW)
    assert all(r.tier == "" for r in decision.reasons)
    assert "on-demand" not in summarize(decision) and decision.tier == ""


@pytest.mark.parametrize(("labels", "tier"), [
    ({}, ON_DEMAND),
    ({"cloud.google.com/gke-spot": "true"}, SPOT),
    ({"cloud.google.com/gke-preemptible": "true"}, SPOT),
    ({"cloud.google.com/gke-flex-start": "true"}, FLEX_START),
    ({"karpenter.sh/capacity-type": "reserved"}, RESERVATION),
    ({"eks.amazonaws.com/capacityType": "SPOT"}, SPOT),
    ({"cloud.google.com/gke-spot": "false"}, ON_DEMAND),
])
def test_unmanaged_nodes_get_their_tier_from_their_labels(labels: dict[str, str], tier: str) -> None:
    assert tier_of_labels(labels) == tier


@pytest.mark.parametrize(("text", "order", "wait"), [
    ("spot,on-demand", (SPOT, ON_DEMAND), {}),
    ("spot:600, on-demand", (SPOT, ON_DEMAND), {SPOT: 600.0}),
    ("Reservation:60s,spot", (RESERVATION, SPOT), {RESERVATION: 60.0}),
])
def test_parameter_tiers_parse(text: str, order: tuple[str, ...], wait: dict[str, float]) -> None:
    assert parse_tiers(text) == (order, wait)


@pytest.mark.parametrize(("text", "problem"), [
    ("spot,cheap", "unknown tier 'cheap'"),
    ("spot,spot", "repeats a tier"),
    ("spot:soon", "the wait for spot must be a number of seconds"),
    ("", "names no tier"),
])
def test_bad_parameter_tiers_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(TierError, match=problem):
        parse_tiers(text)


def test_a_wait_must_be_for_a_tier_of_the_order() -> None:
    with pytest.raises(TierError, match="waits given for tiers not in the order"):
        TierPolicy((SPOT,), wait={ON_DEMAND: 60})



def test_a_cpu_head_may_stay_on_demand_beside_spot_workers() -> None:
    """Tiers keep a gang's accelerator nodes together; a pod set without accelerators (a Ray head, a launcher) may
    use any tier the gang's policy has open."""
    head_pool = pool("cpu", CPU_NODE, tier=ON_DEMAND)
    pools = [head_pool, gpu_pool("spot", SPOT)]
    head = pod_set("head", 1, {"cpu": "8"}, selector={POOL_LABEL: "cpu"})  # the head runs on the CPU pool
    decision, = plan(snapshot(pools), [gang("ns/ray", head, workers(2), tiers=SPOT_FIRST)], NOW)
    assert decision.outcome is Outcome.SCALE_UP and decision.tier == SPOT
    assert steps(decision) == {"cpu": 1, "spot": 2}


def test_a_cpu_only_gang_is_kept_in_one_tier() -> None:
    pools = [pool("cpu-spot", CPU_NODE, tier=SPOT, max_units=1), pool("cpu", CPU_NODE, tier=ON_DEMAND)]
    decision, = plan(snapshot(pools), [gang("ns/batch", pod_set("w", 2, {"cpu": "12"}), tiers=SPOT_FIRST)], NOW)
    assert steps(decision) == {"cpu": 2} and decision.tier == ON_DEMAND
