"""Parsing Kueue's objects into the emulator's views."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.model.resources import ResourceList
from gangscale.sim.kueue.objects import (
    BEST_EFFORT_FIFO,
    NEVER,
    check_is_active,
    parse_cluster_queue,
    parse_flavor,
)
from gangscale.sim.kueue.workload import parse_workload
from tests.sim.kueue import KUEUE, T0, TPU, cluster_queue, reserved_status, workload


def test_cluster_queue_defaults_and_groups() -> None:
    cq = parse_cluster_queue(cluster_queue("cq", {"a": {"cpu": "1500m", TPU: 8}, "b": {"cpu": 4, TPU: 16}}))
    assert cq.problem is None
    assert (cq.strategy, cq.within_cluster_queue) == (BEST_EFFORT_FIFO, NEVER)
    assert cq.flavor_names == ("a", "b")
    assert cq.nominal("a", "cpu") == 1500 and cq.nominal("b", TPU) == 16
    assert cq.nominal("a", "memory") == 0 and cq.nominal("missing", "cpu") == 0
    assert cq.group_for(TPU) is cq.groups[0] and cq.group_for("memory") is None


@pytest.mark.parametrize(("spec_selector", "unset", "expect"), [
    ({}, False, "all"),
    ({"matchLabels": {"team": "a"}}, False, "some"),
    (None, True, "none"),
], ids=["empty-selector-admits-all", "labels", "null-selector-admits-none"])
def test_namespace_selector(spec_selector: Any, unset: bool, expect: str) -> None:
    cq = parse_cluster_queue(cluster_queue("cq", {"f": {"cpu": 1}}, namespace_selector=spec_selector,
                                           selector_unset=unset))
    if expect == "none":
        assert cq.namespace_selector is None
    else:
        assert cq.namespace_selector is not None
        assert cq.namespace_selector.matches({"team": "a"})
        assert cq.namespace_selector.matches({}) == (expect == "all")


@pytest.mark.parametrize(("patch", "problem"), [
    ({"queueingStrategy": "Random"}, "spec.queueingStrategy: unsupported value 'Random'"),
    ({"preemption": {"withinClusterQueue": "Any"}}, "spec.preemption.withinClusterQueue: unsupported value 'Any'"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "Bogus"}]}}, "spec.namespaceSelector"),
], ids=["strategy", "policy", "selector"])
def test_cluster_queue_problems(patch: dict[str, Any], problem: str) -> None:
    obj = cluster_queue("cq", {"f": {"cpu": 1}})
    obj["spec"].update(patch)
    cq = parse_cluster_queue(obj)
    assert cq.problem is not None and cq.problem.startswith(problem)


def test_bad_quota_is_a_problem() -> None:
    obj = cluster_queue("cq", {"f": {"cpu": "lots"}})
    assert "nominalQuota" in (parse_cluster_queue(obj).problem or "")


def test_checks_for_flavors() -> None:
    cq = parse_cluster_queue(cluster_queue("cq", {"a": {"cpu": 1}, "b": {"cpu": 1}},
                                           checks=["all", {"name": "only-b", "onFlavors": ["b"]}]))
    assert cq.checks_for({"a"}) == ("all",)
    assert cq.checks_for({"a", "b"}) == ("all", "only-b")


def test_workload_requests_defaults_and_limits() -> None:
    obj = workload("w", [("main", 3, {"cpu": "500m"})], created=T0, uid="u1", job_uid="job-1")
    obj["spec"]["podSets"].append({"name": "workers", "count": 2, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {TPU: "4", "cpu": "2"}, "requests": {"cpu": "1"}}}]}}})
    wl = parse_workload(obj)
    assert wl.problem is None
    assert (wl.priority, wl.active, wl.queue_name, wl.job_uid, wl.created) == (0, True, "lq", "job-1", T0)
    main, workers = wl.pod_sets
    assert (main.count, main.requests) == (3, ResourceList(cpu=500))
    # a limit without a request counts as the request; `pods` is not part of the per-pod requests
    assert (workers.count, workers.requests) == (2, ResourceList({"cpu": 1000, TPU: 4}))
    assert not wl.reserved and not wl.admitted and not wl.finished


def test_workload_with_unreadable_pod_sets_carries_the_problem() -> None:
    obj = workload("w", [("main", 1, {"cpu": "many"})])
    wl = parse_workload(obj)
    assert wl.pod_sets == () and "cpu" in (wl.problem or "")
    assert "at least one pod set" in (parse_workload(workload("w", [])).problem or "")


def test_reserved_workload_usage_comes_from_the_admission() -> None:
    status = reserved_status("cq", [("main", 2, {TPU: "v5e", "cpu": "cpu-flv"}, {TPU: 8, "cpu": "1500m"}),
                                    ("aux", 1, {TPU: "v5e"}, {TPU: 4})], admitted=True)
    wl = parse_workload(workload("w", [("main", 2, {TPU: 4}), ("aux", 1, {TPU: 4})], status=status, priority=5,
                                 active=False))
    assert wl.reserved and wl.admitted and wl.reserved_in == "cq" and not wl.active and wl.priority == 5
    assert wl.usage() == {("v5e", TPU): 12, ("cpu-flv", "cpu"): 1500}
    assert wl.assigned_flavors == {"v5e", "cpu-flv"}


def test_check_states_and_requeue_state() -> None:
    status = {"admissionChecks": [{"name": "prov", "state": "Retry", "message": "m",
                                   "lastTransitionTime": "2026-11-18T11:06:40Z", "requeueAfterSeconds": 60,
                                   "retryCount": 2}],
              "requeueState": {"count": 3, "requeueAt": "2026-11-18T11:07:40Z"}}
    wl = parse_workload(workload("w", [("main", 1, {"cpu": 1})], status=status))
    check = wl.check("prov")
    assert check is not None
    assert (check.state, check.message, check.requeue_after, check.retry_count) == ("Retry", "m", 60, 2)
    assert check.transition == T0 and wl.requeue_at == T0 + 60 and wl.requeue_count == 3
    assert wl.check("other") is None


def test_flavor_and_admission_check_views() -> None:
    flv = parse_flavor({"metadata": {"name": "spot"}, "spec": {
        "nodeLabels": {"pool": "spot"}, "nodeTaints": [{"key": "spot", "effect": "NoSchedule"}]}})
    assert flv.node_labels == {"pool": "spot"} and str(flv.node_taints[0]) == "spot:NoSchedule"
    assert parse_flavor({"metadata": {"name": "bad"}, "spec": {"nodeTaints": [{"key": ""}]}}).node_taints == ()
    active = {"apiVersion": KUEUE, "status": {"conditions": [{"type": "Active", "status": "True"}]}}
    assert check_is_active(active) and not check_is_active({"status": {}})
