"""The simulated kube-scheduler's filters, message and scoring, as tables (pure functions, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.sim.filters import (
    ANTI_AFFINITY,
    EXISTING_ANTI_AFFINITY,
    NO_NODES,
    NODE_AFFINITY,
    NOT_READY,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    NodeInfo,
    PodInfo,
    effective_requests,
    filter_node,
    node_affinity_matches,
    node_info,
    pod_info,
    preference,
    requirement_matches,
    resource_reasons,
    term_matches,
    tolerates,
    unschedulable_message,
)

JSON = dict[str, Any]
GIB = 2**30
TPU_TAINT = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}


def make_pod(name: str = "p", *, namespace: str = "default", labels: dict[str, str] | None = None,
             requests: dict[str, str] | None = None, **spec: Any) -> JSON:
    container: JSON = {"name": "main", "image": "x", "resources": {"requests": requests or {}}}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"containers": [container], **spec}}


def make_node(name: str = "n", *, labels: dict[str, str] | None = None, taints: list[JSON] | None = None,
              unschedulable: bool = False, ready: bool = True, allocatable: dict[str, str] | None = None) -> NodeInfo:
    return node_info({
        "metadata": {"name": name, "labels": labels if labels is not None else {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def reasons(pod: JSON, node: NodeInfo, *, requested: dict[str, int] | None = None, pod_count: int = 0,
            neighbours: list[PodInfo] | None = None, ert: bool = False,
            namespace_labels: dict[str, dict[str, str]] | None = None) -> list[str]:
    return filter_node(pod_info(pod, extended_resource_toleration=ert), node, requested or {}, pod_count,
                       neighbours or [], namespace_labels)


# --- taints and tolerations ----------------------------------------------------------------------------

TOLERATES = [
    ("equal-match", {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, True),
    ("operator-defaults-to-equal", {"key": "k", "value": "v"}, True),
    ("equal-other-value", {"key": "k", "operator": "Equal", "value": "w"}, False),
    ("equal-empty-value-vs-value", {"key": "k"}, False),
    ("exists-any-value", {"key": "k", "operator": "Exists"}, True),
    ("other-key", {"key": "j", "operator": "Exists"}, False),
    ("empty-key-exists-tolerates-all", {"operator": "Exists"}, True),
    ("empty-key-exists-other-effect", {"operator": "Exists", "effect": "NoExecute"}, False),
    ("effect-matches", {"key": "k", "operator": "Exists", "effect": "NoSchedule"}, True),
    ("effect-differs", {"key": "k", "operator": "Exists", "effect": "PreferNoSchedule"}, False),
    ("unknown-operator", {"key": "k", "operator": "Gt", "value": "v"}, False),
]


@pytest.mark.parametrize(("toleration", "expected"), [(t, e) for _, t, e in TOLERATES],
                         ids=[i for i, _, _ in TOLERATES])
def test_toleration_matches_taint_k_v_noschedule(toleration: JSON, expected: bool) -> None:
    assert tolerates(toleration, {"key": "k", "value": "v", "effect": "NoSchedule"}) is expected


TAINTS = [
    ("no-taints", [], [], []),
    ("prefer-no-schedule-is-not-a-filter", [{"key": "a", "effect": "PreferNoSchedule"}], [], []),
    ("noschedule-untolerated", [{"key": "a", "value": "1", "effect": "NoSchedule"}], [],
     ["node(s) had untolerated taint {a: 1}"]),
    ("noexecute-untolerated", [{"key": "a", "value": "1", "effect": "NoExecute"}], [],
     ["node(s) had untolerated taint {a: 1}"]),
    ("empty-value-printed-empty", [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], [],
     ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"]),
    ("first-untolerated-in-node-order",
     [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}],
     [{"key": "a", "operator": "Exists"}], ["node(s) had untolerated taint {b: }"]),
    ("noexecute-toleration-does-not-cover-noschedule", [{"key": "a", "effect": "NoSchedule"}],
     [{"key": "a", "operator": "Exists", "effect": "NoExecute"}], ["node(s) had untolerated taint {a: }"]),
    ("tolerate-everything", [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}],
     [{"operator": "Exists"}], []),
]


@pytest.mark.parametrize(("taints", "tolerations", "expected"), [t[1:] for t in TAINTS], ids=[t[0] for t in TAINTS])
def test_taint_toleration_filter(taints: list[JSON], tolerations: list[JSON], expected: list[str]) -> None:
    assert reasons(make_pod(tolerations=tolerations), make_node(taints=taints)) == expected


@pytest.mark.parametrize(("ert", "effect", "expected"), [
    (False, "NoSchedule", ["node(s) had untolerated taint {google.com/tpu: present}"]),
    (True, "NoSchedule", []),
    (True, "NoExecute", ["node(s) had untolerated taint {google.com/tpu: present}"]),
], ids=["without-plugin", "plugin-tolerates-noschedule", "plugin-not-noexecute"])
def test_extended_resource_toleration(ert: bool, effect: str, expected: list[str]) -> None:
    node = make_node(taints=[{**TPU_TAINT, "effect": effect}],
                     allocatable={"cpu": "8", "memory": "32Gi", "pods": "110", "google.com/tpu": "4"})
    assert reasons(make_pod(requests={"google.com/tpu": "4"}), node, ert=ert) == expected


@pytest.mark.parametrize(("tolerations", "expected"), [
    ([], [UNSCHEDULABLE]),
    ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}], []),
    ([{"operator": "Exists"}], []),
    ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}], [UNSCHEDULABLE]),
], ids=["cordoned", "tolerated", "tolerate-all", "wrong-effect"])
def test_unschedulable_node(tolerations: list[JSON], expected: list[str]) -> None:
    assert reasons(make_pod(tolerations=tolerations), make_node(unschedulable=True)) == expected


def test_first_failing_filter_decides() -> None:
    node = make_node(unschedulable=True, taints=[{"key": "a", "effect": "NoSchedule"}], ready=False,
                     allocatable={"pods": "0"})
    assert reasons(make_pod(), node) == [UNSCHEDULABLE]
    assert reasons(make_pod(), make_node(taints=[{"key": "a", "effect": "NoSchedule"}], ready=False)) == \
        ["node(s) had untolerated taint {a: }"]
    assert reasons(make_pod(nodeSelector={"x": "y"}), make_node(ready=False)) == [NOT_READY]


# --- node affinity ----------------------------------------------------------------------------------------

LABELS = {"zone": "a", "gen": "5", "name": "n1"}
REQUIREMENTS = [
    ("in-match", {"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
    ("in-other", {"key": "zone", "operator": "In", "values": ["b"]}, False),
    ("in-absent", {"key": "rack", "operator": "In", "values": ["a"]}, False),
    ("notin-other", {"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
    ("notin-match", {"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
    ("notin-absent", {"key": "rack", "operator": "NotIn", "values": ["a"]}, True),
    ("exists", {"key": "zone", "operator": "Exists"}, True),
    ("exists-absent", {"key": "rack", "operator": "Exists"}, False),
    ("doesnotexist", {"key": "rack", "operator": "DoesNotExist"}, True),
    ("doesnotexist-present", {"key": "zone", "operator": "DoesNotExist"}, False),
    ("gt", {"key": "gen", "operator": "Gt", "values": ["4"]}, True),
    ("gt-equal", {"key": "gen", "operator": "Gt", "values": ["5"]}, False),
    ("lt", {"key": "gen", "operator": "Lt", "values": ["6"]}, True),
    ("lt-not", {"key": "gen", "operator": "Lt", "values": ["5"]}, False),
    ("gt-not-an-integer", {"key": "zone", "operator": "Gt", "values": ["1"]}, False),
    ("gt-absent", {"key": "rack", "operator": "Gt", "values": ["1"]}, False),
    ("gt-two-values", {"key": "gen", "operator": "Gt", "values": ["1", "2"]}, False),
    ("unknown-operator", {"key": "zone", "operator": "Equals", "values": ["a"]}, False),
]


@pytest.mark.parametrize(("requirement", "expected"), [r[1:] for r in REQUIREMENTS], ids=[r[0] for r in REQUIREMENTS])
def test_node_selector_requirement(requirement: JSON, expected: bool) -> None:
    assert requirement_matches(requirement, LABELS) is expected


TERMS = [
    ("empty-term-matches-nothing", {}, False),
    ("expressions-anded", {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                                {"key": "gen", "operator": "Gt", "values": ["7"]}]}, False),
    ("expressions-all-true", {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                                   {"key": "gen", "operator": "Lt", "values": ["7"]}]}, True),
    ("match-fields-name", {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}, True),
    ("match-fields-not-name", {"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                                "values": ["node-1"]}]}, False),
    ("match-fields-other-key", {"matchFields": [{"key": "spec.x", "operator": "Exists"}]}, False),
    ("fields-and-expressions", {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}],
                                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}, False),
    # The label "name" is not the node's name: matchExpressions never look at metadata.name.
    ("label-is-not-field", {"matchExpressions": [{"key": "metadata.name", "operator": "Exists"}]}, False),
]


@pytest.mark.parametrize(("term", "expected"), [t[1:] for t in TERMS], ids=[t[0] for t in TERMS])
def test_node_selector_term(term: JSON, expected: bool) -> None:
    assert term_matches(term, LABELS, "node-1") is expected


def _affinity(*terms: JSON) -> JSON:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


ZONE_B = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
ZONE_A = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
AFFINITY = [
    ("nothing-required", {}, True),
    ("node-selector-match", {"nodeSelector": {"zone": "a"}}, True),
    ("node-selector-mismatch", {"nodeSelector": {"zone": "a", "gen": "6"}}, False),
    ("terms-ored", {"affinity": _affinity(ZONE_B, ZONE_A)}, True),
    ("no-term-matches", {"affinity": _affinity(ZONE_B)}, False),
    ("empty-term-list", {"affinity": _affinity()}, False),
    ("selector-and-affinity-anded", {"nodeSelector": {"zone": "b"}, "affinity": _affinity(ZONE_A)}, False),
    ("preferred-only-ignored", {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": ZONE_B}]}}}, True),
]


@pytest.mark.parametrize(("spec", "expected"), [a[1:] for a in AFFINITY], ids=[a[0] for a in AFFINITY])
def test_node_affinity(spec: JSON, expected: bool) -> None:
    node = make_node("node-1", labels=LABELS)
    assert node_affinity_matches(pod_info(make_pod(**spec)), node) is expected
    assert reasons(make_pod(**spec), node) == ([] if expected else [NODE_AFFINITY])


# --- resources --------------------------------------------------------------------------------------------

def _c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any) -> JSON:
    resources: JSON = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "image": "x", "resources": resources, **extra}


REQUESTS = [
    ("containers-summed", {"containers": [_c({"cpu": "1"}), _c({"cpu": "500m", "memory": "1Gi"})]},
     {"cpu": 1500, "memory": GIB}),
    ("limit-without-request", {"containers": [_c(limits={"nvidia.com/gpu": "2", "cpu": "2"}, requests={"cpu": "1"})]},
     {"cpu": 1000, "nvidia.com/gpu": 2}),
    ("init-larger-than-sum", {"containers": [_c({"cpu": "1"})], "initContainers": [_c({"cpu": "3"}), _c({"cpu": "2"})]},
     {"cpu": 3000}),
    ("init-smaller-than-sum", {"containers": [_c({"cpu": "4"})], "initContainers": [_c({"cpu": "3", "memory": "2Gi"})]},
     {"cpu": 4000, "memory": 2 * GIB}),
    ("sidecar-adds-to-sum", {"containers": [_c({"cpu": "1"})],
                             "initContainers": [_c({"cpu": "1"}, restartPolicy="Always")]}, {"cpu": 2000}),
    ("init-after-sidecar-needs-both", {"containers": [_c({"cpu": "1"})],
                                       "initContainers": [_c({"cpu": "1"}, restartPolicy="Always"), _c({"cpu": "3"})]},
     {"cpu": 4000}),
    ("overhead-added", {"containers": [_c({"cpu": "1"})], "initContainers": [_c({"cpu": "2"})],
                        "overhead": {"cpu": "250m", "memory": "100Mi"}}, {"cpu": 2250, "memory": 100 * 2**20}),
    ("pod-level-replaces-cpu", {"containers": [_c({"cpu": "1", "nvidia.com/gpu": "1"})],
                                "resources": {"requests": {"cpu": "3"}}}, {"cpu": 3000, "nvidia.com/gpu": 1}),
    ("nothing", {"containers": [_c()]}, {}),
]


@pytest.mark.parametrize(("spec", "expected"), [r[1:] for r in REQUESTS], ids=[r[0] for r in REQUESTS])
def test_effective_requests(spec: JSON, expected: dict[str, int]) -> None:
    assert effective_requests(spec) == expected


NODE = {"cpu": 8000, "memory": 32 * GIB, "pods": 3, "google.com/tpu": 4}
FIT = [
    ("fits-exactly", {"cpu": 6000, "google.com/tpu": 4}, {"cpu": 2000}, 2, []),
    ("cpu-short", {"cpu": 6001}, {"cpu": 2000}, 0, ["Insufficient cpu"]),
    ("every-short-resource", {"cpu": 9000, "memory": 33 * GIB}, {}, 0, ["Insufficient cpu", "Insufficient memory"]),
    ("extended-not-on-node", {"nvidia.com/gpu": 1}, {}, 0, ["Insufficient nvidia.com/gpu"]),
    ("extended-used", {"google.com/tpu": 1}, {"google.com/tpu": 4}, 1, ["Insufficient google.com/tpu"]),
    ("too-many-pods", {}, {}, 3, [TOO_MANY_PODS]),
    ("pods-and-cpu", {"cpu": 9000}, {}, 3, [TOO_MANY_PODS, "Insufficient cpu"]),
    # A node over-committed on cpu still takes a pod that asks for none.
    ("zero-request-on-overcommitted-node", {"memory": 1}, {"cpu": 9000}, 0, []),
]


@pytest.mark.parametrize(("requests", "requested", "pods", "expected"), [f[1:] for f in FIT], ids=[f[0] for f in FIT])
def test_resources_fit(requests: dict[str, int], requested: dict[str, int], pods: int, expected: list[str]) -> None:
    assert resource_reasons(requests, NODE, requested, pods) == expected


def test_node_without_pods_allocatable_takes_none() -> None:
    assert reasons(make_pod(), make_node(allocatable={"cpu": "8"})) == [TOO_MANY_PODS]


def test_init_container_request_decides_the_fit() -> None:
    pod = make_pod(requests={"cpu": "1"}, initContainers=[_c({"cpu": "9"})])
    assert reasons(pod, make_node()) == ["Insufficient cpu"]
    assert reasons(make_pod(requests={"cpu": "7"}, overhead={"cpu": "1001m"}), make_node()) == ["Insufficient cpu"]


# --- anti-affinity ----------------------------------------------------------------------------------------

def _anti(selector: JSON | None, *, topology: str = "kubernetes.io/hostname", **extra: Any) -> JSON:
    term: JSON = {"topologyKey": topology, **extra}
    if selector is not None:
        term["labelSelector"] = selector
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


WORKER = {"matchLabels": {"app": "w"}}
ANTI = [
    ("own-term-selects-neighbour", _anti(WORKER), "default", {"app": "w"}, None, ANTI_AFFINITY),
    ("neighbour-not-selected", _anti(WORKER), "default", {"app": "other"}, None, None),
    ("neighbour-in-other-namespace", _anti(WORKER), "team", {"app": "w"}, None, None),
    ("namespaces-list", _anti(WORKER, namespaces=["team"]), "team", {"app": "w"}, None, ANTI_AFFINITY),
    ("empty-namespace-selector-all", _anti(WORKER, namespaceSelector={}), "team", {"app": "w"}, None, ANTI_AFFINITY),
    ("namespace-selector-labels", _anti(WORKER, namespaceSelector={"matchLabels": {"tier": "ml"}}), "team",
     {"app": "w"}, None, ANTI_AFFINITY),
    ("null-selector-selects-nothing", _anti(None), "default", {"app": "w"}, None, None),
    ("empty-selector-selects-all", _anti({}), "default", {"app": "x"}, None, ANTI_AFFINITY),
    ("expressions", _anti({"matchExpressions": [{"key": "app", "operator": "In", "values": ["w", "v"]}]}),
     "default", {"app": "v"}, None, ANTI_AFFINITY),
    ("zone-topology-not-emulated", _anti(WORKER, topology="topology.kubernetes.io/zone"), "default", {"app": "w"},
     None, None),
    ("match-label-keys-same-job", _anti(WORKER, matchLabelKeys=["job"]), "default", {"app": "w", "job": "1"},
     None, ANTI_AFFINITY),
    ("match-label-keys-other-job", _anti(WORKER, matchLabelKeys=["job"]), "default", {"app": "w", "job": "2"},
     None, None),
    ("existing-pod-repels", None, "default", {"app": "x"}, _anti({"matchLabels": {"role": "me"}}),
     EXISTING_ANTI_AFFINITY),
    ("existing-pod-other-selector", None, "default", {"app": "x"}, _anti({"matchLabels": {"role": "else"}}), None),
]


@pytest.mark.parametrize(("affinity", "ns", "labels", "their_affinity", "expected"), [a[1:] for a in ANTI],
                         ids=[a[0] for a in ANTI])
def test_hostname_anti_affinity(affinity: JSON | None, ns: str, labels: dict[str, str], their_affinity: JSON | None,
                                expected: str | None) -> None:
    spec: JSON = {"affinity": affinity} if affinity else {}
    pod = make_pod("new", labels={"app": "w", "role": "me", "job": "1"}, **spec)
    their_spec: JSON = {"affinity": their_affinity} if their_affinity else {}
    neighbour = pod_info(make_pod("old", namespace=ns, labels=labels, **their_spec))
    got = reasons(pod, make_node(), pod_count=1, neighbours=[neighbour], namespace_labels={"team": {"tier": "ml"}})
    assert got == ([expected] if expected else [])


def test_anti_affinity_without_neighbours_passes() -> None:
    assert reasons(make_pod(labels={"app": "w"}, affinity=_anti(WORKER)), make_node()) == []


# --- the message ------------------------------------------------------------------------------------------

MESSAGES = [
    ("upstream-example", 3, [["Insufficient google.com/tpu"], [NODE_AFFINITY], [NODE_AFFINITY]],
     "0/3 nodes are available: 1 Insufficient google.com/tpu, 2 node(s) didn't match Pod's node affinity/selector."),
    ("several-reasons-on-one-node", 1, [["Insufficient cpu", "Insufficient memory"]],
     "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."),
    # Sorted as strings, as Go's sort.Strings does: "10 ..." before "2 ...".
    ("sorted-as-strings", 12, [[UNSCHEDULABLE]] * 2 + [[NODE_AFFINITY]] * 10,
     "0/12 nodes are available: 10 node(s) didn't match Pod's node affinity/selector, "
     "2 node(s) were unschedulable."),
    ("no-nodes", 0, [], NO_NODES),
]


@pytest.mark.parametrize(("nodes", "node_reasons", "expected"), [m[1:] for m in MESSAGES], ids=[m[0] for m in MESSAGES])
def test_unschedulable_message(nodes: int, node_reasons: list[list[str]], expected: str) -> None:
    assert unschedulable_message(nodes, node_reasons) == expected


# --- scoring ----------------------------------------------------------------------------------------------

def _tpu_node(name: str, token: str | None = None) -> NodeInfo:
    labels = {"gangscale.io/token": token} if token else {}
    return make_node(name, labels=labels, allocatable={"cpu": "100", "pods": "110", "google.com/tpu": "4"})


def _best(pod: PodInfo, nodes: list[NodeInfo], used: dict[str, dict[str, int]], own: frozenset[str],
          booked: frozenset[str]) -> str:
    return min(nodes, key=lambda n: preference(pod, n, used.get(n.name, {}), own, booked)).name


SCORES = [
    ("own-booking-first", frozenset({"t1"}), frozenset({"t1", "t2"}), {}, "c-own"),
    ("unbooked-before-other-booking", frozenset(), frozenset({"t1", "t2"}), {}, "a-free"),
    ("booked-only-when-nothing-else", frozenset(), frozenset({"t1", "t2"}),
     {"a-free": {"google.com/tpu": 4}, "d-free": {"google.com/tpu": 4}}, "b-other"),
    ("tighter-fit-first", frozenset(), frozenset(), {"d-free": {"google.com/tpu": 2}}, "d-free"),
    ("name-breaks-ties", frozenset(), frozenset(), {}, "a-free"),
]


@pytest.mark.parametrize(("own", "booked", "used", "expected"), [s[1:] for s in SCORES], ids=[s[0] for s in SCORES])
def test_preference(own: frozenset[str], booked: frozenset[str], used: dict[str, dict[str, int]],
                    expected: str) -> None:
    nodes = [_tpu_node("d-free"), _tpu_node("c-own", "t1"), _tpu_node("b-other", "t2"), _tpu_node("a-free")]
    pod = pod_info(make_pod(requests={"google.com/tpu": "2"}))
    # A full node is not feasible; the table passes only the feasible ones.
    feasible = [n for n in nodes if not reasons(make_pod(requests={"google.com/tpu": "2"}), n,
                                                requested=used.get(n.name, {}))]
    assert _best(pod, feasible, used, own, booked) == expected
