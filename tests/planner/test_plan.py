"""plan(snapshot, gangs, now): table-driven cases for every kind of decision the planner makes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from gangscale.model.decision import Decision, Outcome, ReasonCode
from gangscale.model.gang import Gang
from gangscale.model.policy import Policy
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import SpecError
from gangscale.model.snapshot import Booking, Quota, Snapshot
from gangscale.planner import plan
from tests.planner.builders import (
    CPU_NODE,
    GPU_NODE,
    H100,
    L4,
    L4_NODE,
    TPU_NODE,
    TPU_V5E,
    gang,
    node,
    pod_set,
    pool,
    snapshot,
    state,
)

NOW = 1_000_000.0
TPU = {"google.com/tpu": 4}
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"


def tpu_pools(count: int = 3, max_units: int = 1) -> list:
    return [pool(f"tpu-{chr(97 + i)}", TPU_NODE, max_units=max_units, nodes_per_unit=2, labels=TPU_V5E)
            for i in range(count)]


def jobset(slices: int, created: float = 0.0, priority: int = 0) -> Gang:
    """The seed tutorial's JobSet: ``slices`` replicated jobs of 2 pods, 4 chips each, one pod per host."""
    return gang(f"multislice-{slices}slice", pod_set("slice", 2 * slices, limits=TPU, selector=TPU_V5E),
                created=created, priority=priority)


def steps(decision: Decision) -> dict[str, int]:
    return {step.pool: step.units for step in decision.steps}


def by_gang(decisions: tuple[Decision, ...]) -> dict[str, Decision]:
    return {decision.gang: decision for decision in decisions}


@dataclass
class Case:
    id: str
    snapshot: Snapshot
    gangs: list[Gang]
    #: gang key -> expected outcome and, for scale-ups, pool -> units
    expect: dict[str, tuple[Outcome, dict[str, int]]]
    policy: Policy = field(default_factory=Policy)
    now: float = NOW
    #: gang key -> reason codes that must appear (infeasible gangs)
    reasons: dict[str, set[ReasonCode]] = field(default_factory=dict)


H100_POOL = pool("a3-h100", GPU_NODE, labels=H100, taints=[GPU_TAINT], max_units=4)
L4_POOL = pool("g2-l4", L4_NODE, labels=L4, taints=[GPU_TAINT], max_units=8)
CPU_POOL = pool("cpu", CPU_NODE, max_units=10)

CASES = [
    # -- the seed tutorial: three v5e 2x4 slice pools (2 hosts x 4 chips each) -----------------------------
    Case("tutorial-1-slice", snapshot(tpu_pools()), [jobset(1)],
         {"multislice-1slice": (Outcome.SCALE_UP, {"tpu-a": 1})}),
    Case("tutorial-2-slices-span-two-pools", snapshot(tpu_pools()), [jobset(2)],
         {"multislice-2slice": (Outcome.SCALE_UP, {"tpu-a": 1, "tpu-b": 1})}),
    Case("tutorial-3-slices-take-every-pool", snapshot(tpu_pools()), [jobset(3)],
         {"multislice-3slice": (Outcome.SCALE_UP, {"tpu-a": 1, "tpu-b": 1, "tpu-c": 1})}),
    Case("tutorial-3-first-then-1-and-2-wait", snapshot(tpu_pools()), [jobset(1, 2), jobset(2, 3), jobset(3, 1)],
         {"multislice-3slice": (Outcome.SCALE_UP, {"tpu-a": 1, "tpu-b": 1, "tpu-c": 1}),
          "multislice-1slice": (Outcome.INFEASIBLE, {}), "multislice-2slice": (Outcome.INFEASIBLE, {})},
         reasons={"multislice-1slice": {ReasonCode.MAX_UNITS, ReasonCode.CAPACITY}}),
    Case("tutorial-1-and-2-together", snapshot(tpu_pools()), [jobset(1, 1), jobset(2, 2)],
         {"multislice-1slice": (Outcome.SCALE_UP, {"tpu-a": 1}),
          "multislice-2slice": (Outcome.SCALE_UP, {"tpu-b": 1, "tpu-c": 1})}),
    Case("tutorial-4-slices-is-too-big", snapshot(tpu_pools()), [jobset(4)],
         {"multislice-4slice": (Outcome.INFEASIBLE, {})}, reasons={"multislice-4slice": {ReasonCode.CAPACITY}}),
    # -- a Ray head on CPU plus GPU workers, across two pools -------------------------------------------
    Case("ray-head-cpu-workers-gpu", snapshot([H100_POOL, CPU_POOL]),
         [gang("ray", pod_set("head", 1, {"cpu": "4", "memory": "16Gi"}),
               pod_set("workers", 4, limits={"nvidia.com/gpu": 8}, requests={"cpu": "100", "memory": "800Gi"},
                       selector=H100))],
         {"ray": (Outcome.SCALE_UP, {"a3-h100": 4, "cpu": 1})}),
    # -- zones ------------------------------------------------------------------------------------------
    Case("fits-only-if-split-across-zones", snapshot([
            pool("h100-a", GPU_NODE, zone="zone-a", max_units=2, labels=H100),
            pool("h100-b", GPU_NODE, zone="zone-b", max_units=2, labels=H100)]),
         [gang("dp", pod_set("w", 4, limits={"nvidia.com/gpu": 8}, selector=H100))],
         {"dp": (Outcome.INFEASIBLE, {})}, reasons={"dp": {ReasonCode.ZONE}}),
    Case("split-across-zones-when-allowed", snapshot([
            pool("h100-a", GPU_NODE, zone="zone-a", max_units=2, labels=H100),
            pool("h100-b", GPU_NODE, zone="zone-b", max_units=2, labels=H100)]),
         [gang("dp", pod_set("w", 4, limits={"nvidia.com/gpu": 8}, selector=H100), spread=True)],
         {"dp": (Outcome.SCALE_UP, {"h100-a": 2, "h100-b": 2})}),
    Case("one-zone-chosen-for-everything", snapshot([
            pool("cpu-a", CPU_NODE, zone="zone-a"),
            pool("h100-b", GPU_NODE, zone="zone-b", labels=H100, taints=[GPU_TAINT]),
            pool("cpu-b", CPU_NODE, zone="zone-b")]),
         [gang("ray", pod_set("head", 1, {"cpu": "15"}), pod_set("w", 2, limits={"nvidia.com/gpu": 8},
                                                                 selector=H100))],
         {"ray": (Outcome.SCALE_UP, {"cpu-b": 1, "h100-b": 2})}),
    # -- taints, tolerations, affinity ------------------------------------------------------------------
    Case("untolerated-taint-excludes-pool", snapshot([pool("ml", CPU_NODE, taints=["dedicated=ml:NoSchedule"])]),
         [gang("g", pod_set("w", 2, {"cpu": "8"}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.NO_POOL, ReasonCode.TAINT}}),
    Case("toleration-admits-pool", snapshot([pool("ml", CPU_NODE, taints=["dedicated=ml:NoSchedule"])]),
         [gang("g", pod_set("w", 2, {"cpu": "8"}, tolerations=[
             {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]))],
         {"g": (Outcome.SCALE_UP, {"ml": 1})}),
    Case("gpu-taint-tolerated-for-gpu-pods", snapshot([H100_POOL]),
         [gang("g", pod_set("w", 1, limits={"nvidia.com/gpu": 1}))],
         {"g": (Outcome.SCALE_UP, {"a3-h100": 1})}),
    Case("node-affinity-picks-the-pool", snapshot([H100_POOL, L4_POOL]),
         [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 4}, affinity={"nodeAffinity": {
             "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                 {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-l4"]}]}]}}}))],
         {"g": (Outcome.SCALE_UP, {"g2-l4": 2})}),
    Case("node-affinity-matches-nothing", snapshot([H100_POOL, L4_POOL]),
         [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 4}, affinity={"nodeAffinity": {
             "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                 {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-b200"]}]}]}}}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.AFFINITY, ReasonCode.NO_POOL}}),
    Case("anti-affinity-one-pod-per-node", snapshot([H100_POOL]),
         [gang("g", pod_set("w", 4, limits={"nvidia.com/gpu": 1}, one_per_node=True))],
         {"g": (Outcome.SCALE_UP, {"a3-h100": 4})}),
    Case("without-anti-affinity-one-node-holds-four", snapshot([H100_POOL]),
         [gang("g", pod_set("w", 4, limits={"nvidia.com/gpu": 1}))],
         {"g": (Outcome.SCALE_UP, {"a3-h100": 1})}),
    # -- limits: maxUnits, quotas, in-flight ------------------------------------------------------------
    Case("max-units-short", snapshot([H100_POOL]),
         [gang("g", pod_set("w", 5, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.MAX_UNITS}}),
    Case("in-flight-units-count-against-max", snapshot([state(H100_POOL, units=2, inflight=1)]),
         [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.MAX_UNITS}}),
    Case("quota-limits-units", snapshot([H100_POOL], quotas=[Quota("H100_GPUS", "nvidia.com/gpu", 16)]),
         [gang("g", pod_set("w", 3, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.QUOTA}}),
    Case("quota-of-one-pool-leaves-the-other", snapshot(
            [H100_POOL, pool("h100-spot", GPU_NODE, labels=H100, taints=[GPU_TAINT], max_units=4)],
            quotas=[Quota("on-demand", "nvidia.com/gpu", 8, frozenset({"a3-h100"}))]),
         [gang("g", pod_set("w", 3, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.SCALE_UP, {"a3-h100": 1, "h100-spot": 2})}),
    Case("nodes-quota", snapshot([CPU_POOL], quotas=[Quota("max-nodes", "nodes", 1)]),
         [gang("g", pod_set("w", 2, {"cpu": "10"}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.QUOTA}}),
    # -- backoff after a stockout -----------------------------------------------------------------------
    Case("backed-off-pool-falls-back", snapshot([
            state(pool("h100-cheap", GPU_NODE, labels=H100, price=10), backoff_until=NOW + 60,
                  backoff_reason="a stockout"),
            pool("h100-dear", GPU_NODE, labels=H100, price=30)]),
         [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.SCALE_UP, {"h100-dear": 2})}),
    Case("backoff-expired-pool-is-back", snapshot([
            state(pool("h100-cheap", GPU_NODE, labels=H100, price=10), backoff_until=NOW - 1),
            pool("h100-dear", GPU_NODE, labels=H100, price=30)]),
         [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.SCALE_UP, {"h100-cheap": 2})}),
    Case("every-pool-backed-off", snapshot([
            state(pool("h100", GPU_NODE, labels=H100), backoff_until=NOW + 60, backoff_reason="a stockout")]),
         [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.BACKED_OFF}}),
    # -- sizes ------------------------------------------------------------------------------------------
    Case("gang-bigger-than-any-pool", snapshot([H100_POOL, L4_POOL]),
         [gang("g", pod_set("w", 64, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.MAX_UNITS, ReasonCode.CAPACITY}}),
    Case("pod-bigger-than-any-node", snapshot([H100_POOL, L4_POOL]),
         [gang("g", pod_set("w", 1, limits={"nvidia.com/gpu": 16}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.TOO_LARGE, ReasonCode.NO_POOL}}),
    Case("zero-count", snapshot([H100_POOL]), [gang("g", pod_set("w", 0, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.FITS, {})}),
    Case("huge-count", snapshot([H100_POOL, CPU_POOL]),
         [gang("g", pod_set("w", 10**12, {"cpu": "1"}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.CAPACITY}}),
    Case("no-pools-at-all", snapshot(), [gang("g", pod_set("w", 1, {"cpu": "1"}))],
         {"g": (Outcome.INFEASIBLE, {})}, reasons={"g": {ReasonCode.NO_POOL}}),
    Case("multi-host-units-round-up", snapshot(tpu_pools(1, max_units=4)),
         [gang("g", pod_set("w", 3, limits=TPU, selector=TPU_V5E))],
         {"g": (Outcome.SCALE_UP, {"tpu-a": 2})}),
    # -- policy -----------------------------------------------------------------------------------------
    Case("least-waste-by-default", snapshot([pool("g8", GPU_NODE, labels=H100), pool("g4", L4_NODE, labels=H100)]),
         [gang("g", pod_set("w", 12, limits={"nvidia.com/gpu": 1}, requests={"cpu": "1"}))],
         {"g": (Outcome.SCALE_UP, {"g4": 3})}),
    Case("fewest-nodes-policy", snapshot([pool("g8", GPU_NODE, labels=H100), pool("g4", L4_NODE, labels=H100)]),
         [gang("g", pod_set("w", 16, limits={"nvidia.com/gpu": 1}, requests={"cpu": "1"}))],
         {"g": (Outcome.SCALE_UP, {"g8": 2})}, policy=Policy(("nodes",))),
    Case("cheapest-policy", snapshot([pool("g8", GPU_NODE, labels=H100, price=20),
                                      pool("g4", L4_NODE, labels=H100, price=8)]),
         [gang("g", pod_set("w", 8, limits={"nvidia.com/gpu": 1}))],
         {"g": (Outcome.SCALE_UP, {"g4": 2})}, policy=Policy(("price", "nodes"))),
    Case("price-breaks-a-waste-tie", snapshot([pool("h100-b", GPU_NODE, labels=H100, price=30),
                                               pool("h100-a", GPU_NODE, labels=H100, price=40)]),
         [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 8}))],
         {"g": (Outcome.SCALE_UP, {"h100-b": 2})}),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_plan(case: Case) -> None:
    decisions = by_gang(plan(case.snapshot, case.gangs, case.now, case.policy))
    assert set(decisions) == set(case.expect)
    for key, (outcome, expected_steps) in case.expect.items():
        decision = decisions[key]
        assert decision.outcome is outcome, decision
        assert steps(decision) == expected_steps, decision
        codes = {reason.code for reason in decision.reasons}
        assert case.reasons.get(key, set()) <= codes, decision.reasons
        if outcome is Outcome.INFEASIBLE:
            assert decision.reasons and all(reason.message for reason in decision.reasons)


# -- existing capacity --------------------------------------------------------------------------------------

def test_fits_on_free_capacity_and_names_the_nodes() -> None:
    p = pool("cpu", CPU_NODE)
    nodes = [node("n1", p, used={"cpu": "12"}), node("n2", p, used={"cpu": "4"})]
    decision, = plan(snapshot([state(p, units=2)], nodes), [gang("g", pod_set("w", 3, {"cpu": "4"}))], NOW)
    assert decision.outcome is Outcome.FITS and not decision.steps
    # Tightest node first: n1 has room for one pod, n2 for the other two.
    assert {(p.node, p.count) for p in decision.placements} == {("n1", 1), ("n2", 2)}


def test_existing_capacity_is_used_before_new_units() -> None:
    p = pool("h100", GPU_NODE, labels=H100)
    nodes = [node("n1", p, used={"nvidia.com/gpu": "4", "cpu": "8"})]
    decision, = plan(snapshot([state(p, units=1)], nodes),
                     [gang("g", pod_set("w", 12, limits={"nvidia.com/gpu": 1}))], NOW)
    assert decision.outcome is Outcome.SCALE_UP
    assert steps(decision) == {"h100": 1}
    assert sum(p.count for p in decision.placements) == 4


def test_capacity_given_to_one_gang_is_not_given_to_the_next() -> None:
    p = pool("cpu", CPU_NODE, max_units=0)
    nodes = [node("n1", p)]
    first, second = plan(snapshot([state(p, units=1)], nodes),
                         [gang("a", pod_set("w", 1, {"cpu": "10"}), created=1),
                          gang("b", pod_set("w", 1, {"cpu": "10"}), created=2)], NOW)
    assert (first.gang, first.outcome) == ("a", Outcome.FITS)
    assert (second.gang, second.outcome) == ("b", Outcome.INFEASIBLE)


def test_higher_priority_goes_first_and_a_blocked_gang_does_not_block_smaller_ones() -> None:
    p = pool("cpu", CPU_NODE, max_units=2)
    gangs = [gang("old-small", pod_set("w", 1, {"cpu": "8"}), created=1),
             gang("huge", pod_set("w", 10, {"cpu": "8"}), created=0),
             gang("urgent", pod_set("w", 2, {"cpu": "8"}), created=5, priority=100)]
    decisions = plan(snapshot([p]), gangs, NOW)
    assert [(d.gang, d.outcome) for d in decisions] == [
        ("urgent", Outcome.SCALE_UP), ("huge", Outcome.INFEASIBLE), ("old-small", Outcome.SCALE_UP)]


def test_unready_and_cordoned_nodes_offer_nothing() -> None:
    p = pool("cpu", CPU_NODE, max_units=0)
    nodes = [node("unready", p, ready=False), node("cordoned", p, unschedulable=True)]
    decision, = plan(snapshot([state(p, units=2)], nodes), [gang("g", pod_set("w", 1, {"cpu": "1"}))], NOW)
    assert decision.outcome is Outcome.INFEASIBLE


def test_booked_capacity_is_held_for_its_owner_only() -> None:
    p = pool("cpu", CPU_NODE, max_units=0)
    nodes = [node("n1", p)]
    booking = Booking("owner", "n1", ResourceList.parse({"cpu": "12", "pods": 1}))
    snap = snapshot([state(p, units=1)], nodes, bookings=[booking])
    other, = plan(snap, [gang("other", pod_set("w", 1, {"cpu": "8"}))], NOW)
    assert other.outcome is Outcome.INFEASIBLE
    owner, = plan(snap, [gang("owner", pod_set("w", 1, {"cpu": "12"}))], NOW)
    assert owner.outcome is Outcome.FITS and owner.placements[0].node == "n1"
    # A booking the owner cannot use (it now wants more) goes back to being held: others still cannot take it.
    decisions = plan(snap, [gang("owner", pod_set("w", 2, {"cpu": "12"}), created=1),
                            gang("other", pod_set("w", 1, {"cpu": "8"}), created=2)], NOW)
    assert [d.outcome for d in decisions] == [Outcome.INFEASIBLE, Outcome.INFEASIBLE]


def test_new_nodes_of_one_gang_are_not_offered_to_the_next() -> None:
    p = pool("cpu", CPU_NODE, max_units=1)
    first, second = plan(snapshot([p]), [gang("a", pod_set("w", 1, {"cpu": "2"}), created=1),
                                         gang("b", pod_set("w", 1, {"cpu": "2"}), created=2)], NOW)
    assert first.outcome is Outcome.SCALE_UP and second.outcome is Outcome.INFEASIBLE


def test_same_input_same_plan_whatever_the_order() -> None:
    pools = [*tpu_pools(3, max_units=2), H100_POOL, L4_POOL, CPU_POOL]
    gangs = [jobset(1, 1), jobset(2, 2), jobset(3, 3),
             gang("ray", pod_set("head", 1, {"cpu": "4"}), pod_set("w", 6, limits={"nvidia.com/gpu": 4}), created=4)]
    reference = plan(snapshot(pools), gangs, NOW)
    for seed in range(5):
        shuffled = list(gangs)
        random.Random(seed).shuffle(shuffled)
        assert plan(snapshot(pools), shuffled, NOW) == reference


def test_malformed_quantity_is_a_clear_error_when_the_gang_is_built() -> None:
    with pytest.raises(SpecError, match=r"workers\.spec\.containers\[0\]\.resources\.limits\.nvidia\.com/gpu: "
                                        r"invalid quantity '8x'"):
        pod_set("workers", 2, limits={"nvidia.com/gpu": "8x"})


def test_mixed_gang_shares_new_nodes_between_pod_sets() -> None:
    """A small pod set rides on the spare CPU of the big pod set's nodes instead of opening its own."""
    gpu = pool("h100", GPU_NODE, labels=H100)
    decision, = plan(snapshot([gpu, CPU_POOL]), [gang("g", pod_set("w", 2, limits={"nvidia.com/gpu": 8},
                                                                   requests={"cpu": "100"}),
                                                      pod_set("sidecar", 2, {"cpu": "60"}, selector=H100))], NOW)
    assert steps(decision) == {"h100": 2}
    assert {(n.nodes, n.pods) for n in decision.new_nodes} == {(2, (("sidecar", 1), ("w", 1)))}


def test_a_tight_fit_greedy_order_misses_is_still_found() -> None:
    """Big pods first leave a small one stranded; the fallback orders find the 4-node packing."""
    p = pool("p", {"cpu": "32", "memory": "128Gi", "pods": "110"}, max_units=4)
    g = gang("ns/a", pod_set("big", 6, {"cpu": "15500m", "memory": "34Gi"}),
             pod_set("small", 3, {"cpu": "4500m", "memory": "46Gi"}))
    for policy in (Policy(), Policy(("nodes",))):
        decision, = plan(snapshot([p]), [g], NOW, policy)
        assert decision.outcome is Outcome.SCALE_UP and steps(decision) == {"p": 4}


def test_one_per_node_pod_sets_are_laid_out_first_and_others_fill_in_beside_them() -> None:
    p = pool("p", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8", "pods": "110"}, max_units=10)
    g = gang("ns/b", pod_set("gpu", 2, {"cpu": "1", "memory": "6Gi", "nvidia.com/gpu": "4"}),
             pod_set("cpu", 2, {"cpu": "3", "memory": "10Gi"}),
             pod_set("spread", 4, {"cpu": "1", "memory": "12Gi"}, one_per_node=True))
    decision, = plan(snapshot([p]), [g], NOW, Policy(("nodes",)))
    assert steps(decision) == {"p": 4}


def test_the_node_pod_limit_caps_pods_per_node() -> None:
    small = pool("small", {"cpu": "64", "memory": "256Gi", "pods": "2"}, max_units=5)
    decision, = plan(snapshot([small]), [gang("g", pod_set("w", 5, {"cpu": "100m"}))], NOW)
    assert steps(decision) == {"small": 3}


def test_a_gang_that_may_not_scale_fits_on_free_capacity_or_nowhere() -> None:
    """check-capacity: free capacity places the gang; when it is short, no pool is grown and the reason says so."""
    cpu = pool("cpu", CPU_NODE)
    snap = snapshot([cpu], [node("n1", cpu, used={"cpu": "8"}), node("n2", cpu)])
    fits = gang("fits", pod_set("w", 3, {"cpu": "6"}))
    short = gang("short", pod_set("w", 3, {"cpu": "6"}), created=1.0)
    for g in (fits, short):
        object.__setattr__(g, "may_scale", False)
    decided = by_gang(plan(snap, [fits, short], NOW))
    assert decided["fits"].outcome is Outcome.FITS
    assert decided["short"].outcome is Outcome.INFEASIBLE and not decided["short"].steps
    messages = [reason.message for reason in decided["short"].reasons]
    assert messages == ["no Ready node has room for a pod of pod set 'w'",
                        "this class checks existing capacity only and never scales a pool"]
    alone = plan(snapshot([cpu], [node("n1", cpu, used={"cpu": "8"})]), [short], NOW)[0]
    assert "has room for 1 of 3 pods of pod set 'w'" in alone.reasons[0].message
    # Allowed to scale, the same two gangs both get capacity: the second one from a new node.
    scaled = by_gang(plan(snap, [gang("fits", pod_set("w", 3, {"cpu": "6"})),
                                 gang("short", pod_set("w", 3, {"cpu": "6"}), created=1.0)], NOW))
    assert scaled["short"].outcome is Outcome.SCALE_UP


@pytest.mark.parametrize("check_first", [True, False], ids=["check-capacity-first", "atomic-first"])
def test_a_check_capacity_gang_and_a_scaling_gang_of_the_same_shape_get_their_own_pool_lists(
        check_first: bool) -> None:
    """The pools a pod shape may use are cached per plan; the cache must not hand the check-capacity gang's empty
    list to the atomic gang, nor the atomic gang's pools to the check-capacity gang."""
    gpu = pool("gpu", GPU_NODE, max_units=6)
    check = gang("check", pod_set("w", 3, {"nvidia.com/gpu": "8"}), created=0.0 if check_first else 1.0,
                 may_scale=False)
    atomic = gang("atomic", pod_set("w", 3, {"nvidia.com/gpu": "8"}), created=1.0 if check_first else 0.0)
    decided = by_gang(plan(snapshot([gpu]), [check, atomic], NOW))
    assert decided["check"].outcome is Outcome.INFEASIBLE and not decided["check"].steps
    assert decided["atomic"].outcome is Outcome.SCALE_UP and steps(decided["atomic"]) == {"gpu": 3}
