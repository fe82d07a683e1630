"""reqIsNeeded, managedResources and mergePodSets under both merge policies."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.sim.kueue.prmerge import (
    IDENTICAL_POD_TEMPLATES,
    IDENTICAL_SCHEDULING_REQUIREMENTS,
    InconsistentAssignments,
    merge_pod_sets,
    request_needed,
    required_pod_sets,
    semantic_equal,
)
from tests.sim.kueue.test_prov_support import assignment, container, pod_set

JSON = dict[str, Any]
GPU = "example.org/gpu"


def wl(*sets: JSON, assignments: list[JSON] | None = None) -> JSON:
    psa = assignments if assignments is not None else [assignment(s["name"]) for s in sets]
    return {"spec": {"podSets": list(sets)}, "status": {"admission": {"podSetAssignments": psa}}}


def merged(workload: JSON, **spec: Any) -> list[tuple[str, int]]:
    return [(m.name, m.count) for m in merge_pod_sets(workload, spec)]


@pytest.mark.parametrize(("workload", "managed", "needed", "required"), [
    (wl(pod_set("a", 1), pod_set("b", 2)), [], True, ["a", "b"]),
    (wl(pod_set("a", 1), pod_set("b", 2)), [GPU], False, []),
    (wl(pod_set("a", 1), pod_set("b", 2, container({"cpu": "1", GPU: "1"}))), [GPU], True, ["b"]),
    (wl(pod_set("a", 1), pod_set("b", 2, container({"cpu": "1"}, {GPU: "2"}))), [GPU], True, ["b"]),
    (wl(pod_set("a", 1, initContainers=[container({GPU: "1"}, name="init")])), [GPU], True, ["a"]),
    (wl(pod_set("a", 0)), [], False, []),
    (wl(pod_set("a", 2), assignments=[assignment("a", 0)]), [], False, ["a"]),
], ids=["all-managed", "resource-unused", "used-by-request", "used-by-limit", "used-by-init-container",
        "zero-count", "zero-admitted"])
def test_request_needed(workload: JSON, managed: list[str], needed: bool, required: list[str]) -> None:
    assert request_needed(workload, managed) is needed
    assert required_pod_sets(workload, managed) == required


def test_needed_pod_set_without_assignment_is_an_error() -> None:
    with pytest.raises(InconsistentAssignments, match="missing assignment for PodSet 'b'"):
        request_needed(wl(pod_set("a", 1), pod_set("b", 1), assignments=[assignment("a", 0)]), [])


def test_admitted_counts_are_used_and_zero_ones_skipped() -> None:
    workload = wl(pod_set("a", 4), pod_set("b", 3), pod_set("c", 2),
                  assignments=[assignment("a", 2), assignment("b"), assignment("c", 0)])
    assert merged(workload) == [("a", 2), ("b", 3)]


def test_managed_resources_filter_pod_sets() -> None:
    workload = wl(pod_set("head", 1), pod_set("workers", 8, container({"cpu": "1"}, {GPU: "8"})))
    assert merged(workload, managedResources=[GPU]) == [("workers", 8)]


SAME_REQS = [container({"cpu": "2", "memory": "1Gi"})]
CASES = [
    ("no-policy", {}, [pod_set("a", 1, *SAME_REQS), pod_set("b", 2, *SAME_REQS)], [("a", 1), ("b", 2)]),
    ("templates-equal", {"podSetMergePolicy": IDENTICAL_POD_TEMPLATES},
     [pod_set("a", 1, *SAME_REQS), pod_set("b", 2, *SAME_REQS), pod_set("c", 4, *SAME_REQS)], [("a", 7)]),
    ("templates-differ-in-labels", {"podSetMergePolicy": IDENTICAL_POD_TEMPLATES},
     [pod_set("a", 1, *SAME_REQS, labels={"role": "x"}), pod_set("b", 2, *SAME_REQS, labels={"role": "y"})],
     [("a", 1), ("b", 2)]),
    ("scheduling-ignores-labels-and-images", {"podSetMergePolicy": IDENTICAL_SCHEDULING_REQUIREMENTS},
     [pod_set("a", 1, *SAME_REQS, labels={"role": "x"}),
      pod_set("b", 2, {**container({"cpu": "2000m", "memory": "1024Mi"}), "image": "other"},
              labels={"role": "y"})],
     [("a", 3)]),
    ("scheduling-differs-in-requests", {"podSetMergePolicy": IDENTICAL_SCHEDULING_REQUIREMENTS},
     [pod_set("a", 1, container({"cpu": "1"})), pod_set("b", 2, container({"cpu": "2"}))], [("a", 1), ("b", 2)]),
    ("scheduling-differs-in-selector", {"podSetMergePolicy": IDENTICAL_SCHEDULING_REQUIREMENTS},
     [pod_set("a", 1, *SAME_REQS, nodeSelector={"zone": "a"}), pod_set("b", 2, *SAME_REQS)],
     [("a", 1), ("b", 2)]),
    ("scheduling-differs-in-tolerations", {"podSetMergePolicy": IDENTICAL_SCHEDULING_REQUIREMENTS},
     [pod_set("a", 1, *SAME_REQS, tolerations=[{"key": "k", "operator": "Exists"}]), pod_set("b", 2, *SAME_REQS)],
     [("a", 1), ("b", 2)]),
    ("scheduling-container-count-differs", {"podSetMergePolicy": IDENTICAL_SCHEDULING_REQUIREMENTS},
     [pod_set("a", 1, *SAME_REQS), pod_set("b", 2, *SAME_REQS, container({"cpu": "1"}, name="side"))],
     [("a", 1), ("b", 2)]),
    ("merges-into-first-match", {"podSetMergePolicy": IDENTICAL_SCHEDULING_REQUIREMENTS},
     [pod_set("a", 1, container({"cpu": "1"})), pod_set("b", 2, container({"cpu": "2"})),
      pod_set("c", 4, container({"cpu": "2"})), pod_set("d", 8, container({"cpu": "1"}))],
     [("a", 9), ("b", 6)]),
]


@pytest.mark.parametrize(("spec", "sets", "want"), [(s, p, w) for _, s, p, w in CASES], ids=[c[0] for c in CASES])
def test_merge_pod_sets(spec: JSON, sets: list[JSON], want: list[tuple[str, int]]) -> None:
    assert merged(wl(*sets), **spec) == want


@pytest.mark.parametrize(("a", "b", "equal"), [
    ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1000m"}}, True),
    ({"limits": {"memory": "1Gi"}}, {"limits": {"memory": "1073741824"}}, True),
    ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1001m"}}, False),
    ({"nodeSelector": {"cpu": "1"}}, {"nodeSelector": {"cpu": "1000m"}}, False),
    ({"nodeSelector": {}}, {}, True),
    (None, [], True),
    ({"tolerations": [{"key": "a"}]}, {"tolerations": [{"key": "b"}]}, False),
], ids=["cpu-units", "memory-units", "different-quantity", "only-quantity-maps-by-value", "empty-map-is-absent",
        "none-is-empty", "lists"])
def test_semantic_equal(a: Any, b: Any, equal: bool) -> None:
    assert semantic_equal(a, b) is equal
