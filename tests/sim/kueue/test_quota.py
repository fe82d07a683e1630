"""The scheduler's pure decisions: order, flavors, preemption victims, one queue's plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gangscale.sim.kueue.objects import (
    NAMESPACE_MISMATCH,
    ClusterQueue,
    Flavor,
    parse_cluster_queue,
    parse_flavor,
)
from gangscale.sim.kueue.quota import (
    Mode,
    assign_flavors,
    cluster_queue_usage,
    plan_queue,
    preemption_targets,
    queue_order,
)
from gangscale.sim.kueue.workload import Workload, parse_workload
from gangscale.timefmt import rfc3339
from tests.sim.kueue import T0, TPU, PodSetSpec, cluster_queue, flavor, reserved_status, workload


def cq_of(quotas: Mapping[str, Mapping[str, Any]], **kw: Any) -> ClusterQueue:
    return parse_cluster_queue(cluster_queue("cq", quotas, **kw))


def flavors(*objs: dict[str, Any]) -> dict[str, Flavor]:
    return {f.name: f for f in (parse_flavor(o) for o in objs)}


def pending(name: str, pod_sets: Sequence[PodSetSpec], *, priority: int = 0, created: float = T0,
            namespace: str = "default") -> Workload:
    return parse_workload(workload(name, pod_sets, priority=priority, created=created, uid=f"uid-{name}",
                                   namespace=namespace))


def holding(name: str, chips: int, *, priority: int = 0, at: float = T0, flv: str = "f",
            admitted: bool = False) -> Workload:
    """A Workload reserving ``chips`` TPU chips of flavor ``flv`` in "cq" since ``at``."""
    status = reserved_status("cq", [("main", chips, {TPU: flv}, {TPU: chips})], at=at, admitted=admitted)
    return parse_workload(workload(name, [("main", chips, {TPU: 1})], priority=priority, created=at - 100,
                                   uid=f"uid-{name}", status=status))


def test_queue_order_priority_then_time() -> None:
    evicted = workload("evicted-by-check", [("main", 1, {"cpu": 1})], created=T0, priority=5)
    evicted["status"] = {"conditions": [{"type": "Evicted", "status": "True", "reason": "AdmissionCheck",
                                         "message": "", "lastTransitionTime": rfc3339(T0 + 50)}]}
    workloads = [pending("late", [("main", 1, {"cpu": 1})], created=T0 + 10, priority=5),
                 pending("low", [("main", 1, {"cpu": 1})], created=T0 - 100, priority=0),
                 parse_workload(evicted),
                 pending("early", [("main", 1, {"cpu": 1})], created=T0 + 1, priority=5)]
    assert [w.name for w in queue_order(workloads)] == ["early", "late", "evicted-by-check", "low"]


TWO_FLAVORS = {"small": {TPU: 8}, "big": {TPU: 24}}


@pytest.mark.parametrize(("quotas", "used", "pod_sets", "mode", "chosen", "message"), [
    pytest.param(TWO_FLAVORS, {}, [("main", 2, {TPU: 4})], Mode.FIT, ["small"], "", id="first-flavor-fits"),
    pytest.param(TWO_FLAVORS, {("small", TPU): 4}, [("main", 2, {TPU: 4})], Mode.FIT, ["big"], "",
                 id="next-flavor-when-first-full"),
    pytest.param({"f": {TPU: 24}}, {}, [("main", 1, {TPU: 4, "memory": "1Gi"})], Mode.NO_FIT, [],
                 "couldn't assign flavors to pod set main: resource memory unavailable in ClusterQueue",
                 id="uncovered-resource"),
    pytest.param({"f": {TPU: 24}}, {}, [("main", 8, {TPU: 4})], Mode.NO_FIT, [],
                 "couldn't assign flavors to pod set main: insufficient quota for google.com/tpu in flavor f, "
                 "request > maximum capacity (32 > 24)", id="above-nominal"),
    pytest.param({"f": {TPU: 24}}, {("f", TPU): 16}, [("main", 4, {TPU: 4})], Mode.PREEMPT, ["f"],
                 "couldn't assign flavors to pod set main: insufficient unused quota for google.com/tpu in flavor f, "
                 "8 more needed", id="more-needed"),
    pytest.param({"f": {TPU: 24, "pods": 4}}, {("f", "pods"): 1}, [("main", 4, {TPU: 1})], Mode.PREEMPT, ["f"],
                 "couldn't assign flavors to pod set main: insufficient unused quota for pods in flavor f, "
                 "1 more needed", id="pods-counted-when-covered"),
    pytest.param({"f": {TPU: 24}}, {}, [("main", 1, {TPU: 0, "cpu": 0})], Mode.FIT, [], "",
                 id="zero-request-needs-no-quota"),
    pytest.param({"f": {TPU: 12}}, {}, [("a", 2, {TPU: 4}), ("b", 2, {TPU: 4})], Mode.PREEMPT, ["f", "f"],
                 "couldn't assign flavors to pod set b: insufficient unused quota for google.com/tpu in flavor f, "
                 "4 more needed", id="pod-sets-add-up"),
])
def test_assign_flavors(quotas: Mapping[str, Mapping[str, Any]], used: dict[tuple[str, str], int],
                        pod_sets: Sequence[PodSetSpec], mode: Mode, chosen: list[str], message: str) -> None:
    cq = cq_of(quotas)
    result = assign_flavors(cq, flavors(*(flavor(f) for f in quotas)), pending("w", pod_sets), used)
    assert result.mode == mode
    assert result.message == message
    assert [psa.flavors.get(TPU) for psa in result.pod_sets if TPU in psa.flavors] == chosen


def test_assignment_api_form() -> None:
    cq = cq_of({"f": {TPU: 24, "cpu": 100, "pods": 10}})
    result = assign_flavors(cq, flavors(flavor("f")), pending("w", [("main", 4, {TPU: 4, "cpu": "500m"})]), {})
    assert result.fits
    assert result.to_api() == [{"name": "main", "count": 4, "flavors": {"cpu": "f", "google.com/tpu": "f", "pods": "f"},
                                "resourceUsage": {"cpu": "2", "google.com/tpu": "16", "pods": "4"}}]
    assert result.usage() == {("f", "cpu"): 2000, ("f", TPU): 16, ("f", "pods"): 4}


def test_node_selector_and_taints_choose_the_flavor() -> None:
    cq = cq_of({"tainted": {TPU: 24}, "v5e": {TPU: 24}, "v5p": {TPU: 24}})
    flvs = flavors(flavor("tainted", {"gen": "v5p"}, taints=[{"key": "spot", "effect": "NoSchedule"}]),
                   flavor("v5e", {"gen": "v5e"}), flavor("v5p", {"gen": "v5p"}))
    wl = parse_workload(workload("w", [("main", 1, {TPU: 4})]))
    wl_p = parse_workload({**workload("w", [("main", 1, {TPU: 4})]), "spec": {"queueName": "lq", "podSets": [
        {"name": "main", "count": 1, "template": {"spec": {"nodeSelector": {"gen": "v5p", "other-key": "x"},
                                                             "containers": [{"name": "c", "resources": {
                                                                 "requests": {TPU: "4"}}}]}}}]}})
    assert assign_flavors(cq, flvs, wl, {}).pod_sets[0].flavors[TPU] == "v5e"
    assert assign_flavors(cq, flvs, wl_p, {}).pod_sets[0].flavors[TPU] == "v5p"
    full = {("v5p", TPU): 24}
    result = assign_flavors(cq, flvs, wl_p, full)
    assert result.mode == Mode.PREEMPT
    assert result.message == ("couldn't assign flavors to pod set main: flavor v5e doesn't match node affinity, "
                              "insufficient unused quota for google.com/tpu in flavor v5p, 4 more needed, "
                              "untolerated taint spot:NoSchedule in flavor tainted")


def test_missing_flavor_object_is_skipped() -> None:
    cq = cq_of({"gone": {TPU: 24}, "here": {TPU: 24}})
    result = assign_flavors(cq, flavors(flavor("here")), pending("w", [("main", 1, {TPU: 4})]), {})
    assert result.fits and result.pod_sets[0].flavors[TPU] == "here"


def test_usage_skips_finished_and_other_queues() -> None:
    finished = holding("done", 8)
    finished.conditions["Finished"] = {"type": "Finished", "status": "True"}  # type: ignore[index]
    other = parse_workload(workload("other", [("main", 1, {TPU: 1})],
                                    status=reserved_status("cq2", [("main", 4, {TPU: "f"}, {TPU: 4})])))
    assert cluster_queue_usage([holding("a", 8), finished, other, pending("p", [("main", 1, {TPU: 1})])], "cq") \
        == {("f", TPU): 8}


# --- preemption -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "running", "need", "victims"), [
    pytest.param("LowerPriority", [("low1", 8, 1, 1), ("low2", 8, 1, 2), ("mid", 8, 5, 3)], 16, {"low1", "low2"},
                 id="lowest-priority-first"),
    pytest.param("LowerPriority", [("small", 4, 1, 3), ("big", 16, 1, 1), ("other", 4, 5, 2)], 16, {"big"},
                 id="victims-not-needed-are-put-back"),
    pytest.param("LowerPriority", [("new", 8, 1, 5), ("old", 8, 1, 1), ("mid", 8, 2, 3)], 8, {"new"},
                 id="newest-reservation-first-among-equals"),
    pytest.param("LowerPriority", [("same1", 12, 10, 1), ("same2", 12, 10, 2)], 16, set(),
                 id="equal-priority-is-safe"),
    pytest.param("LowerPriority", [("low", 8, 1, 1), ("high", 16, 20, 2)], 16, set(),
                 id="not-enough-victims"),
    pytest.param("LowerOrNewerEqualPriority", [("older", 8, 10, -500), ("newer", 16, 10, 500)], 16, {"newer"},
                 id="equal-priority-newer-one"),
    pytest.param("LowerOrNewerEqualPriority", [("older", 16, 10, -500), ("newer", 8, 10, 500)], 16, set(),
                 id="equal-priority-older-is-safe"),
    pytest.param("Never", [("low1", 12, 1, 1), ("low2", 12, 1, 2)], 16, set(), id="never"),
])
def test_preemption_targets(policy: str, running: list[tuple[str, int, int, float]], need: int,
                            victims: set[str]) -> None:
    """CQ of 24 chips, all held by ``running`` (name, chips, priority, reserved at); a priority-10 preemptor
    created at T0 needs ``need`` chips."""
    cq = cq_of({"f": {TPU: 24}}, preemption=policy)
    reserving = [holding(n, chips, priority=p, at=T0 + at) for n, chips, p, at in running]
    preemptor = pending("hi", [("main", need // 4, {TPU: 4})], priority=10, created=T0)
    usage = cluster_queue_usage(reserving, "cq")
    assignment = assign_flavors(cq, flavors(flavor("f")), preemptor, usage)
    assert assignment.mode == Mode.PREEMPT
    targets = preemption_targets(cq, preemptor, assignment, reserving, usage)
    assert {t.name for t in targets} == victims
    plan = plan_queue(cq, flavors(flavor("f")), [preemptor], reserving, {})
    assert {v.name for v, by in plan.preempt if by is preemptor} == victims
    assert (preemptor.key in plan.pending) == (not victims)


# --- one queue's plan -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("strategy", "reserved", "waiting"), [
    ("StrictFIFO", [], ["big"]),
    ("BestEffortFIFO", ["small"], ["big"]),
], ids=["strict-head-blocks", "best-effort-skips"])
def test_fifo_strategies(strategy: str, reserved: list[str], waiting: list[str]) -> None:
    cq = cq_of({"f": {TPU: 24}}, strategy=strategy)
    queue = [pending("big", [("main", 4, {TPU: 4})], created=T0), pending("small", [("main", 2, {TPU: 4})],
                                                                          created=T0 + 1)]
    plan = plan_queue(cq, flavors(flavor("f")), queue, [holding("running", 12)], {})
    assert [w.name for w, _ in plan.reserve] == reserved
    assert sorted(k.split("/")[1] for k in plan.pending) == waiting
    assert plan.pending["default/big"].endswith("unused quota for google.com/tpu in flavor f, 4 more needed")


def test_namespace_mismatch_does_not_block_strict_fifo() -> None:
    cq = cq_of({"f": {TPU: 24}}, strategy="StrictFIFO", namespace_selector={"matchLabels": {"team": "ml"}})
    queue = [pending("elsewhere", [("main", 1, {TPU: 4})], created=T0, namespace="other"),
             pending("mine", [("main", 1, {TPU: 4})], created=T0 + 1, namespace="ml")]
    plan = plan_queue(cq, flavors(flavor("f")), queue, [], {"ml": {"team": "ml"}, "other": {}})
    assert [w.name for w, _ in plan.reserve] == ["mine"]
    assert plan.pending == {"other/elsewhere": NAMESPACE_MISMATCH}


def test_null_namespace_selector_admits_nothing() -> None:
    cq = cq_of({"f": {TPU: 24}}, selector_unset=True)
    plan = plan_queue(cq, flavors(flavor("f")), [pending("w", [("main", 1, {TPU: 4})])], [], {})
    assert plan.reserve == [] and plan.pending == {"default/w": NAMESPACE_MISMATCH}


def test_preemption_ends_the_queue_round() -> None:
    cq = cq_of({"f": {TPU: 24}}, preemption="LowerPriority")
    queue = [pending("hi", [("main", 4, {TPU: 4})], priority=10, created=T0),
             pending("tiny", [("main", 1, {TPU: 4})], priority=0, created=T0 + 1)]
    plan = plan_queue(cq, flavors(flavor("f")), queue, [holding("low", 20, priority=1)], {})
    assert [(v.name, by.name) for v, by in plan.preempt] == [("low", "hi")]
    assert plan.reserve == [] and plan.pending == {}


def test_reservations_in_one_round_add_up() -> None:
    cq = cq_of({"f": {TPU: 24}})
    queue = [pending(n, [("main", 2, {TPU: 4})], created=T0 + i) for i, n in enumerate("abcd")]
    plan = plan_queue(cq, flavors(flavor("f")), queue, [], {})
    assert [w.name for w, _ in plan.reserve] == ["a", "b", "c"]
    assert list(plan.pending) == ["default/d"]


def test_unreadable_workload_waits_with_its_problem() -> None:
    cq = cq_of({"f": {TPU: 24}}, strategy="StrictFIFO")
    broken = parse_workload(workload("broken", [("main", 1, {TPU: "x"})], created=T0))
    plan = plan_queue(cq, flavors(flavor("f")), [broken, pending("ok", [("main", 1, {TPU: 4})], created=T0 + 1)],
                      [], {})
    assert plan.pending["default/broken"].startswith("failed to assign flavors: spec.podSets[0].template.spec")
    assert [w.name for w, _ in plan.reserve] == ["ok"]
