"""Decisions rendered for people: the one-line summary (conditions, events) and the longer explanation."""

from __future__ import annotations

from gangscale.planner import explain, plan, summarize
from tests.planner.builders import (
    CPU_NODE,
    GPU_NODE,
    H100,
    TPU_NODE,
    TPU_V5E,
    gang,
    node,
    pod_set,
    pool,
    snapshot,
    state,
)

NOW = 1_700_000_000.0


def test_scale_up_summary_names_pools_units_nodes_and_zone() -> None:
    pools = [pool(f"tpu-{c}", TPU_NODE, max_units=1, nodes_per_unit=2, labels=TPU_V5E, zone="us-west4-a")
             for c in "ab"]
    decision, = plan(snapshot(pools), [gang("ns/js", pod_set("slice", 4, limits={"google.com/tpu": 4},
                                                             selector=TPU_V5E))], NOW)
    assert summarize(decision) == ("scale up tpu-a +1 unit (2 nodes), tpu-b +1 unit (2 nodes) "
                                   "in zone us-west4-a")
    text = explain(decision)
    assert text.splitlines()[0] == f"ns/js: ScaleUp — {summarize(decision)}"
    assert "    2 nodes of tpu-a, each with 1 x slice" in text
    assert "cost: 0 accelerators and 440 CPU unused on new nodes, 0/h, 4 new nodes" in text


def test_fits_summary_counts_pods_and_nodes() -> None:
    p = pool("cpu", CPU_NODE)
    decision, = plan(snapshot([state(p, units=2)], [node("n1", p), node("n2", p)]),
                     [gang("g", pod_set("w", 3, {"cpu": "8"}))], NOW)
    assert summarize(decision) == "fits on free capacity: 3 pods on 2 existing nodes in zone zone-a"
    assert "    n1: 2 x w" in explain(decision) or "    n2: 2 x w" in explain(decision)


def test_infeasible_summary_lists_every_reason_a_person_can_act_on() -> None:
    h100 = pool("a3-h100", GPU_NODE, labels=H100, max_units=4)
    decision, = plan(snapshot([state(h100, units=2), pool("cpu", CPU_NODE)]),
                     [gang("g", pod_set("workers", 4, limits={"nvidia.com/gpu": 8}, selector=H100))], NOW)
    text = summarize(decision)
    assert text.startswith("cannot place every pod: ")
    assert ("pool a3-h100: needs 4 nodes for pod set 'workers', maxUnits leaves 2 "
            "(maxUnits 4: 2 in use, 0 in flight)") in text
    assert ("pool cpu: pod set 'workers': nodeSelector cloud.google.com/gke-accelerator=nvidia-h100-80gb does not "
            "match (node has no cloud.google.com/gke-accelerator label)") in text
    assert "[MaxUnits] pool a3-h100" in explain(decision)


def test_untolerated_taint_names_the_taint() -> None:
    tainted = pool("ml", CPU_NODE, taints=["dedicated=ml:NoSchedule"])
    decision, = plan(snapshot([tainted]), [gang("g", pod_set("w", 1, {"cpu": "1"}))], NOW)
    assert summarize(decision) == (
        "cannot place every pod: no node pool can run pod set 'w' (ml: does not tolerate taint "
        "dedicated=ml:NoSchedule); pool ml: pod set 'w': does not tolerate taint dedicated=ml:NoSchedule")


def test_backoff_reason_gives_the_time_it_ends() -> None:
    backed = state(pool("h100", GPU_NODE, labels=H100), backoff_until=NOW + 90, backoff_reason="a stockout")
    decision, = plan(snapshot([backed]), [gang("g", pod_set("w", 1, limits={"nvidia.com/gpu": 8}))], NOW)
    assert "pool h100: backed off until 2023-11-14T22:14:50Z after a stockout" in summarize(decision)


def test_empty_gang() -> None:
    decision, = plan(snapshot(), [gang("g", pod_set("w", 0, {"cpu": "1"}))], NOW)
    assert summarize(decision) == "nothing to place: the gang has no pods"


def test_alike_pools_share_one_reason_line() -> None:
    pools = [pool(f"cpu-{i}", CPU_NODE) for i in range(7)]
    decision, = plan(snapshot(pools), [gang("g", pod_set("w", 1, limits={"nvidia.com/gpu": 1}, selector=H100))], NOW)
    shared = [r for r in decision.reasons if r.pool.startswith("cpu-0")]
    assert [r.pool for r in shared] == ["cpu-0, cpu-1, cpu-2, cpu-3, cpu-4 and 2 more"]
