"""The structured hints of infeasible decisions (``PoolReason.hint``): what ``gangscale explain`` says would help."""

from __future__ import annotations

from gangscale.model.decision import Decision, Hint, PoolReason, ReasonCode
from gangscale.model.scheduling import Taint
from gangscale.model.snapshot import Quota
from gangscale.planner import plan
from tests.planner.builders import CPU_NODE, GPU_NODE, gang, node, pod_set, pool, snapshot, state

NOW = 1_700_000_000.0


def reason_of(decision: Decision, pool_name: str) -> PoolReason:
    [found] = [r for r in decision.reasons if r.pool == pool_name]
    return found


def test_max_units_says_how_many_units_are_allowed_and_what_count_fits() -> None:
    gpu = pool("gpu", GPU_NODE, max_units=3)
    decision, = plan(snapshot([state(gpu, units=1)]), [gang("g", pod_set("w", 5, limits={"nvidia.com/gpu": 8}))], NOW)
    hint = reason_of(decision, "gpu").hint
    assert reason_of(decision, "gpu").code is ReasonCode.MAX_UNITS
    assert hint == Hint(needed=5, allowed=2, of="units", pod_set="w", fits=2)


def test_max_units_fits_counts_pods_per_node() -> None:
    cpu = pool("cpu", CPU_NODE, max_units=2)
    decision, = plan(snapshot([cpu]), [gang("g", pod_set("w", 9, {"cpu": "4"}))], NOW)
    hint = reason_of(decision, "cpu").hint
    assert hint is not None and (hint.needed, hint.allowed, hint.fits) == (3, 2, 8)  # 4 pods a node, 2 nodes


def test_backoff_hint_carries_its_end() -> None:
    backed = state(pool("gpu", GPU_NODE), backoff_until=NOW + 90, backoff_reason="STOCKOUT (GCE_STOCKOUT)")
    decision, = plan(snapshot([backed]), [gang("g", pod_set("w", 1, limits={"nvidia.com/gpu": 8}))], NOW)
    assert reason_of(decision, "gpu").hint == Hint(until=NOW + 90)


def test_taint_hint_names_the_taint() -> None:
    tainted = pool("ml", CPU_NODE, taints=["dedicated=ml:NoSchedule"])
    decision, = plan(snapshot([tainted]), [gang("g", pod_set("w", 1, {"cpu": "1"}))], NOW)
    reason = reason_of(decision, "ml")
    assert reason.hint == Hint(taint=Taint("dedicated", "ml", "NoSchedule"), pod_set="w")


def test_too_large_hint_gives_the_request_and_what_a_node_has() -> None:
    gpu = pool("gpu", GPU_NODE)
    decision, = plan(snapshot([gpu]), [gang("g", pod_set("w", 1, limits={"nvidia.com/gpu": 16}))], NOW)
    hint = reason_of(decision, "gpu").hint
    assert hint == Hint(needed=16, allowed=8, of="nvidia.com/gpu", pod_set="w")


def test_quota_hint_gives_what_is_left() -> None:
    gpu = pool("gpu", GPU_NODE)
    three = gang("g", pod_set("w", 3, limits={"nvidia.com/gpu": 8}))
    decision, = plan(snapshot([gpu], quotas=[Quota("gpus", "nvidia.com/gpu", 16)]), [three], NOW)
    hint = reason_of(decision, "gpu").hint
    assert reason_of(decision, "gpu").code is ReasonCode.QUOTA
    assert hint == Hint(needed=24, allowed=16, of="nvidia.com/gpu", pod_set="w", fits=2)


def test_capacity_hint_gives_the_count_that_fits_on_free_nodes() -> None:
    cpu = pool("cpu", CPU_NODE)
    nodes = [node(f"n{i}", cpu, used={"cpu": "8"}) for i in range(2)]
    check_only = gang("g", pod_set("w", 5, {"cpu": "8"}), may_scale=False)
    decision, = plan(snapshot([state(cpu, units=2)], nodes), [check_only], NOW)
    [capacity] = [r for r in decision.reasons if r.hint is not None and r.hint.fits is not None]
    assert capacity.hint == Hint(needed=5, allowed=2, of="pods", pod_set="w", fits=2)


def test_hints_do_not_change_equality_or_messages() -> None:
    plain = PoolReason("a", ReasonCode.CAPACITY, "no room")
    assert plain == PoolReason("a", ReasonCode.CAPACITY, "no room", Hint(fits=3))
