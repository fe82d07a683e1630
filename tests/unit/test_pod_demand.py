"""A pod's effective requests and constraints, computed as kube-scheduler computes them."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.model.pod import HOSTNAME_LABEL, pod_demand, pod_requests
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import NodeAffinity, NodeSelectorTerm, Requirement, SpecError, Taint, Toleration


def container(name: str = "c", requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
              restart_policy: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    body: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if restart_policy:
        body["restartPolicy"] = restart_policy
    return body


REQUESTS = [
    ("sum-of-containers", {"containers": [container(requests={"cpu": "1"}), container(requests={"cpu": "500m"})]},
     {"cpu": 1500}),
    ("limits-default-requests", {"containers": [container(limits={"cpu": "2", "nvidia.com/gpu": "8"})]},
     {"cpu": 2000, "nvidia.com/gpu": 8}),
    ("request-wins-over-limit", {"containers": [container(requests={"cpu": "1"}, limits={"cpu": "4"})]},
     {"cpu": 1000}),
    ("init-container-peak-wins", {
        "initContainers": [container(requests={"cpu": "4", "memory": "1Gi"})],
        "containers": [container(requests={"cpu": "1", "memory": "2Gi"})]},
     {"cpu": 4000, "memory": 2 * 2**30}),
    ("sidecar-adds-to-containers", {
        "initContainers": [container(requests={"cpu": "1"}, restart_policy="Always")],
        "containers": [container(requests={"cpu": "2"})]},
     {"cpu": 3000}),
    ("init-after-sidecar-counts-the-sidecar", {
        "initContainers": [container("side", requests={"cpu": "1"}, restart_policy="Always"),
                           container("setup", requests={"cpu": "3"})],
        "containers": [container(requests={"cpu": "1"})]},
     {"cpu": 4000}),
    ("init-before-sidecar-does-not", {
        "initContainers": [container("setup", requests={"cpu": "3"}),
                           container("side", requests={"cpu": "1"}, restart_policy="Always")],
        "containers": [container(requests={"cpu": "1"})]},
     {"cpu": 3000}),
    ("overhead-added", {"containers": [container(requests={"cpu": "1"})], "overhead": {"cpu": "250m"}},
     {"cpu": 1250}),
    ("pod-level-resources-replace-cpu-memory", {
        "containers": [container(requests={"cpu": "1", "nvidia.com/gpu": "1"})],
        "resources": {"requests": {"cpu": "3"}}},
     {"cpu": 3000, "nvidia.com/gpu": 1}),
    ("no-resources", {"containers": [container()]}, {}),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in REQUESTS], ids=[c[0] for c in REQUESTS])
def test_effective_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == ResourceList(expected, pods=1)


MALFORMED = [
    ("bad-quantity", {"containers": [container(requests={"memory": "2Gx"})]},
     r"spec\.containers\[0\]\.resources\.requests\.memory: invalid quantity '2Gx'"),
    ("fractional-gpu", {"containers": [container(limits={"nvidia.com/gpu": "0.5"})]},
     r"spec\.containers\[0\]\.resources\.limits\.nvidia\.com/gpu: .*whole number"),
    ("bad-init", {"containers": [container()], "initContainers": [container(requests={"cpu": "x"})]},
     r"spec\.initContainers\[0\]\.resources\.requests\.cpu"),
    ("resources-not-a-map", {"containers": [{"name": "c", "resources": {"requests": ["cpu"]}}]},
     r"spec\.containers\[0\]\.resources\.requests: expected an object"),
    ("containers-not-a-list", {"containers": "main"}, r"spec\.containers: expected a list"),
]


@pytest.mark.parametrize(("spec", "pattern"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_specs_name_the_field(spec: dict[str, Any], pattern: str) -> None:
    with pytest.raises(SpecError, match=pattern):
        pod_requests(spec)


def test_template_without_containers_is_an_error() -> None:
    with pytest.raises(SpecError, match=r"workers\.spec\.containers: a pod needs at least one container"):
        pod_demand({"spec": {"containers": []}}, "workers")


REQ = [
    ("in-match", Requirement("k", "In", ("a", "b")), {"k": "b"}, True),
    ("in-miss", Requirement("k", "In", ("a",)), {"k": "b"}, False),
    ("in-absent", Requirement("k", "In", ("a",)), {}, False),
    ("notin-absent", Requirement("k", "NotIn", ("a",)), {}, True),
    ("notin-hit", Requirement("k", "NotIn", ("a",)), {"k": "a"}, False),
    ("exists", Requirement("k", "Exists"), {"k": ""}, True),
    ("exists-absent", Requirement("k", "Exists"), {}, False),
    ("doesnotexist", Requirement("k", "DoesNotExist"), {}, True),
    ("doesnotexist-present", Requirement("k", "DoesNotExist"), {"k": "x"}, False),
    ("gt", Requirement("k", "Gt", ("4",)), {"k": "8"}, True),
    ("gt-equal", Requirement("k", "Gt", ("8",)), {"k": "8"}, False),
    ("lt", Requirement("k", "Lt", ("4",)), {"k": "2"}, True),
    ("gt-not-int", Requirement("k", "Gt", ("4",)), {"k": "eight"}, False),
    ("lt-absent", Requirement("k", "Lt", ("4",)), {}, False),
]


@pytest.mark.parametrize(("requirement", "labels", "matches"), [c[1:] for c in REQ], ids=[c[0] for c in REQ])
def test_node_selector_requirements(requirement: Requirement, labels: dict[str, str], matches: bool) -> None:
    assert requirement.matches(labels) is matches


def test_affinity_terms_are_ored_and_empty_terms_match_nothing() -> None:
    a = NodeSelectorTerm((Requirement("zone", "In", ("a",)),))
    b = NodeSelectorTerm((Requirement("gpu", "Exists"),))
    assert NodeAffinity((a, b)).matches({"gpu": "h100"}, None)
    assert not NodeAffinity((a, b)).matches({"zone": "b"}, None)
    assert not NodeAffinity(()).matches({"x": "y"}, None)
    assert not NodeAffinity((NodeSelectorTerm(),)).matches({"x": "y"}, None)


def test_match_fields_need_a_real_node_name() -> None:
    term = NodeSelectorTerm(fields=(Requirement("metadata.name", "In", ("node-1",)),))
    assert term.matches({}, "node-1")
    assert not term.matches({}, "node-2")
    assert not term.matches({}, None)  # a node pool template has no name yet


BAD_AFFINITY = [
    ("unknown-operator", {"key": "k", "operator": "Like", "values": ["a"]}, r"operator: must be one of"),
    ("in-without-values", {"key": "k", "operator": "In"}, r"values: operator In needs at least one value"),
    ("exists-with-values", {"key": "k", "operator": "Exists", "values": ["a"]}, r"values: must be empty"),
    ("gt-two-values", {"key": "k", "operator": "Gt", "values": ["1", "2"]}, r"values: operator Gt needs exactly one"),
    ("gt-not-int", {"key": "k", "operator": "Gt", "values": ["x"]}, r"values: operator Gt needs exactly one"),
    ("no-key", {"operator": "Exists"}, r"key: must be a non-empty string"),
]


@pytest.mark.parametrize(("expression", "pattern"), [c[1:] for c in BAD_AFFINITY], ids=[c[0] for c in BAD_AFFINITY])
def test_malformed_affinity_is_a_clear_error(expression: dict[str, Any], pattern: str) -> None:
    terms = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    template = {"spec": {"containers": [container()], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": terms}}}}
    with pytest.raises(SpecError, match=r"nodeSelectorTerms\[0\]\.matchExpressions\[0\]\." + pattern):
        pod_demand(template)


TOLERATIONS = [
    ("equal-match", Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
    ("equal-other-value", Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "w", "NoSchedule"), False),
    ("exists-any-value", Toleration("k", "Exists", "", "NoSchedule"), Taint("k", "w", "NoSchedule"), True),
    ("empty-effect-any-effect", Toleration("k", "Exists"), Taint("k", "", "NoExecute"), True),
    ("other-effect", Toleration("k", "Exists", "", "NoSchedule"), Taint("k", "", "NoExecute"), False),
    ("empty-key-exists-all", Toleration("", "Exists"), Taint("anything", "x", "NoSchedule"), True),
    ("other-key", Toleration("k", "Exists"), Taint("j", "", "NoSchedule"), False),
]


@pytest.mark.parametrize(("toleration", "taint", "tolerates"), [c[1:] for c in TOLERATIONS],
                         ids=[c[0] for c in TOLERATIONS])
def test_tolerations(toleration: Toleration, taint: Taint, tolerates: bool) -> None:
    assert toleration.tolerates(taint) is tolerates


def test_prefer_no_schedule_never_blocks_and_extended_resources_tolerate_their_taint() -> None:
    gpu_pod = pod_demand({"spec": {"containers": [container(limits={"nvidia.com/gpu": "1"})]}})
    cpu_pod = pod_demand({"spec": {"containers": [container(requests={"cpu": "1"})]}})
    soft = Taint("dedicated", "ml", "PreferNoSchedule")
    gpu_taint = Taint("nvidia.com/gpu", "present", "NoSchedule")
    assert gpu_pod.blocking_taint((soft,)) is None
    assert gpu_pod.blocking_taint((gpu_taint,)) is None
    assert gpu_pod.blocking_taint((gpu_taint,), extended_resource_toleration=False) == gpu_taint
    assert cpu_pod.blocking_taint((gpu_taint,)) == gpu_taint


def test_hostname_anti_affinity_is_kept_and_other_topologies_are_noted() -> None:
    template = {"metadata": {"labels": {"job": "train", "role": "worker"}}, "spec": {
        "containers": [container()],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"job": "train"}},
             "matchLabelKeys": ["role"]},
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {}},
        ]}}}}
    demand = pod_demand(template)
    assert len(demand.anti_affinity) == 1
    assert demand.anti_affinity[0].match_labels == (("job", "train"), ("role", "worker"))
    assert demand.repels(demand)
    assert demand.ignored == ("required pod anti-affinity on 'topology.kubernetes.io/zone' is not planned for",)
    head = {"metadata": {"labels": {"job": "train", "role": "head"}}, "spec": {"containers": [container()]}}
    other = pod_demand(head)
    assert not demand.repels(other)


def test_equal_templates_give_equal_hashable_demands() -> None:
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [container(requests={"cpu": "1"})],
                                                             "nodeSelector": {"x": "y"}}}
    assert pod_demand(template) == pod_demand(template)
    assert len({pod_demand(template), pod_demand(template)}) == 1
