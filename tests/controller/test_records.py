"""The records the controller keeps of pods and nodes (issue 27): what they hold, that remembered request shapes are
exactly what reading the spec gives, and that equal values are shared rather than copied."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gangscale.controller.logic.view import ClusterView, PodInfo, parse_node, parse_pod, requests_of
from gangscale.model.pod import PodDemand, pod_requests
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import SpecError
from gangscale.providers.base import NodeRef
from gangscale.sources.provreq import WorkloadRecord, template_demand, workload_record

JSON = dict[str, Any]


def container(requests: JSON | None = None, limits: JSON | None = None, **extra: Any) -> JSON:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": "c", "image": "x", **({"resources": resources} if resources else {}), **extra}


SPECS: list[tuple[str, JSON]] = [
    ("one-container", {"containers": [container({"cpu": "500m", "memory": "1Gi"})]}),
    ("limits-only-gpu", {"containers": [container(limits={"nvidia.com/gpu": "8"})]}),
    ("same-shape-other-order", {"containers": [container({"memory": "1Gi", "cpu": "500m"})]}),
    ("two-containers", {"containers": [container({"cpu": "1"}), container({"cpu": "2", "memory": "2Gi"})]}),
    ("init-peak", {"containers": [container({"cpu": "1"})], "initContainers": [container({"cpu": "4"})]}),
    ("sidecar", {"containers": [container({"cpu": "1"})],
                 "initContainers": [container({"cpu": "4"}, restartPolicy="Always")]}),
    ("pod-level", {"containers": [container({"cpu": "1"})], "resources": {"requests": {"cpu": "3"}}}),
    ("overhead", {"containers": [container({"cpu": "1"})], "overhead": {"cpu": "250m"}}),
    ("no-resources", {"containers": [container()]}),
]


@pytest.mark.parametrize("spec", [spec for _, spec in SPECS], ids=[name for name, _ in SPECS])
def test_remembered_requests_are_what_the_spec_says(spec: JSON) -> None:
    # Twice: the first reads the spec, the second is remembered (and must still be right for this spec).
    assert requests_of(spec) == pod_requests(spec)
    assert requests_of(spec) == pod_requests(spec)


def test_specs_that_differ_only_in_what_requests_do_not_read_share_one_remembered_value() -> None:
    a = {"containers": [container({"cpu": "7"}, env=[{"name": "A", "value": "1"}])]}
    b = {"containers": [container({"cpu": "7"}, env=[{"name": "B", "value": "2"}])], "nodeName": "n"}
    assert requests_of(a) is requests_of(b)
    assert requests_of({"containers": [container({"cpu": "8"})]}) != requests_of(a)


@pytest.mark.parametrize("spec, field", [
    ({"containers": [container({"cpu": "lots"})]}, "spec.containers[0].resources.requests.cpu"),
    ({"containers": [container({"cpu": ["1"]})]}, "spec.containers[0].resources.requests.cpu"),
    ({"containers": "c"}, "spec.containers"),
    ({"containers": [container(limits={"nvidia.com/gpu": "0.5"})]}, "spec.containers[0].resources.limits"),
], ids=["bad-quantity", "unhashable-value", "containers-not-a-list", "fractional-gpu"])
def test_a_malformed_spec_is_reported_as_reading_it_reports_it(spec: JSON, field: str) -> None:
    for _ in range(2):  # an error is never remembered as a value
        with pytest.raises(SpecError) as err:
            requests_of(spec)
        assert field in str(err.value)


def bound(name: str, node: str, namespace: str = "ns", **meta: Any) -> JSON:
    return {"metadata": {"name": name, "namespace": namespace, **meta},
            "spec": {"nodeName": node, "containers": [container({"cpu": "2"})]}, "status": {"phase": "Running"}}


@pytest.mark.parametrize("pod, record", [
    (bound("p", "n1"), PodInfo("n1", pod_requests({"containers": [container({"cpu": "2"})]}), False, None)),
    (bound("p", "n1", ownerReferences=[{"kind": "DaemonSet", "name": "d", "controller": True}]),
     PodInfo("n1", pod_requests({"containers": [container({"cpu": "2"})]}), True, None)),
    (bound("p", "n1", annotations={"kubernetes.io/config.mirror": "x"}),
     PodInfo("n1", pod_requests({"containers": [container({"cpu": "2"})]}), True, None)),
    (bound("p", "n1", annotations={"autoscaling.x-k8s.io/consume-provisioning-request": "pr"}),
     PodInfo("n1", pod_requests({"containers": [container({"cpu": "2"})]}), False, "ns/pr")),
    ({**bound("p", "n1"), "status": {"phase": "Succeeded"}}, None),
    ({**bound("p", "n1"), "spec": {"containers": [container({"cpu": "2"})]}}, None),
], ids=["bound", "daemonset", "mirror", "consumer", "terminated", "pending"])
def test_a_pod_record_holds_what_a_decision_reads(pod: JSON, record: PodInfo | None) -> None:
    assert parse_pod(pod) == record


def test_records_share_equal_strings_and_request_lists() -> None:
    first, second = parse_pod(bound("p1", "node-" + "7")), parse_pod(bound("p2", "".join(["node-", "7"])))
    assert first is not None and second is not None
    assert first.node is second.node and first.requests is second.requests
    nodes = [parse_node({"metadata": {"name": f"n{i}", "labels": {"zone": "".join(["zone-", "a"])}},
                         "status": {"allocatable": {"cpu": "8"}}}) for i in range(2)]
    assert nodes[0] is not None and nodes[1] is not None
    (key0, value0), (key1, value1) = (next(iter(n.state.labels.items())) for n in nodes)
    assert key0 is key1 and value0 is value1


def template(requests: JSON, **extra: Any) -> JSON:
    return {"metadata": {"name": "t", "namespace": "ns", "managedFields": [{"manager": "kubectl"}]},
            "template": {"metadata": {"labels": {"app": "train"}},
                         "spec": {"containers": [container(requests, env=[{"name": "A", "value": "1"}])],
                                  **extra}}}


def test_a_template_is_kept_as_the_pod_it_describes_and_equal_ones_are_one_object() -> None:
    first, second = template_demand(template({"cpu": "2"})), template_demand(template({"cpu": "2"}))
    assert isinstance(first, PodDemand) and first is second
    assert first.requests == pod_requests({"containers": [container({"cpu": "2"})]})
    assert dict(first.labels) == {"app": "train"}


def test_a_template_that_cannot_be_read_keeps_its_error_for_the_requests_that_use_it() -> None:
    bad = template_demand(template({"cpu": "2"}, tolerations="all"))
    assert isinstance(bad, SpecError) and "template.spec.tolerations" in str(bad)


@pytest.mark.parametrize("workload, record", [
    ({"spec": {"priority": 5}}, WorkloadRecord(5, None)),
    ({"spec": {"priority": True}}, WorkloadRecord(0, None)),
    ({"metadata": {"ownerReferences": [{"kind": "RayCluster", "name": "rc", "controller": True}]}},
     WorkloadRecord(0, "rc")),
    ({"metadata": {"ownerReferences": [{"kind": "RayCluster", "name": "rc"}, "junk"]}}, WorkloadRecord(0, None)),
], ids=["priority", "bool-priority", "raycluster-owner", "not-controller"])
def test_a_workload_is_kept_as_its_priority_and_owning_raycluster(workload: JSON, record: WorkloadRecord) -> None:
    assert workload_record(workload) == record


@pytest.mark.parametrize("seed", range(5))
def test_what_a_node_has_requested_is_the_sum_of_its_pods_through_any_changes(seed: int) -> None:
    """Pods bound, moved, resized and removed in a random order, one at a time and in batches: each node's
    ``requested`` is always the sum of the records bound to it now, and a node left with none has none."""
    rng = random.Random(seed)
    view = ClusterView()
    for name in ("n0", "n1", "n2"):
        view.apply_node(name, parse_node({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "64"}}}))
    live: dict[tuple[str, str], PodInfo] = {}
    for _ in range(40):
        batch: dict[tuple[str, str], PodInfo | None] = {}
        for _ in range(rng.choice((1, 1, 5))):
            key = ("ns", f"p{rng.randrange(12)}")
            if rng.random() < 0.3:
                batch[key] = None
            else:
                spec = {"containers": [container({"cpu": f"{rng.randrange(1, 4)}", "memory": f"{rng.randrange(3)}Gi"})]}
                batch[key] = PodInfo(f"n{rng.randrange(3)}", requests_of(spec), False, None)
        view.apply_pods(batch)
        live.update(batch)
        live = {k: v for k, v in live.items() if v is not None}
        for name in ("n0", "n1", "n2"):
            expected = sum((p.requests for p in live.values() if p.node == name), ResourceList())
            assert view.nodes[name].state.requested == expected, name
            assert view.requested.get(name, ResourceList()) == expected


def test_a_node_classified_again_takes_the_providers_answer_now_and_keeps_everything_else() -> None:
    """The aws provider learns a node's instance after the Node arrived (set_reclassify): the same record, with the
    unit and claim it knows now."""
    known: dict[str, NodeRef] = {}
    view = ClusterView(classify=lambda name, labels: known.get(name, NodeRef(labels["pool"])))
    node = {"metadata": {"name": "ip-10-0-0-7.ec2.internal", "labels": {"pool": "gpu"}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    first = view.node_record(node)
    assert first is not None and (first.pool, first.unit, first.claim) == ("gpu", None, None)
    known["ip-10-0-0-7.ec2.internal"] = NodeRef("gpu", "i-0abc", "tok-1")
    again = view.reclassified(first)
    assert (again.pool, again.unit, again.claim) == ("gpu", "i-0abc", "tok-1")
    assert again.state == first.state and again.readiness == first.readiness
    view.apply_node("ip-10-0-0-7.ec2.internal", again)
    assert view.by_claim["tok-1"] == {"ip-10-0-0-7.ec2.internal"}
