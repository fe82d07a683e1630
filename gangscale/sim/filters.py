"""kube-scheduler's default filters and the simulated scheduler's scoring, as pure functions.

This is the simulated cluster's oracle: the scheduler that decides whether the capacity gangscale obtained
really takes the pods. It is written from kube-scheduler's documented semantics and deliberately shares no
code with :mod:`gangscale.planner` or :mod:`gangscale.model.scheduling` (only quantity parsing), so that a
planner mistake shows up as a pod that does not schedule.

Filters, in the default profile's order, each giving kube-scheduler's reason text:

- **NodeUnschedulable**: ``spec.unschedulable`` unless the pod tolerates
  ``node.kubernetes.io/unschedulable:NoSchedule``.
- **TaintToleration**: the first ``NoSchedule``/``NoExecute`` taint no toleration matches (operator
  ``Equal``, the default, or ``Exists``; an empty key matches every key; an empty effect every effect).
- **Ready**: the node's ``Ready`` condition must be ``True``. Not a kube-scheduler filter (a real cluster
  relies on the ``node.kubernetes.io/not-ready`` taint, which the embedded API server also adds and which
  is reported first); kept as a safety net for nodes created without that taint.
- **NodeAffinity**: ``nodeSelector`` (exact matches) and required ``nodeAffinity.nodeSelectorTerms``
  (terms ORed, an empty term matches nothing, expressions and fields ANDed; ``In``, ``NotIn``, ``Exists``,
  ``DoesNotExist``, ``Gt``, ``Lt``; ``matchFields`` on ``metadata.name``).
- **NodePorts**: no host port of the pod may conflict with one a pod on the node (bound, or assumed earlier in
  the pass) takes: same port and protocol (empty is ``TCP``), and the host IPs equal or either ``0.0.0.0``
  (empty is ``0.0.0.0``). Ports of containers and sidecars count, not of regular init containers; with
  ``hostNetwork`` a port without ``hostPort`` is one (API defaulting sets ``hostPort`` to ``containerPort``).
- **NodeResourcesFit**: the pod's effective requests against allocatable minus the requests of the pods
  already on the node, and the ``pods`` count (every failing resource is a reason of its own).
- **PodTopologySpread**, ``whenUnsatisfiable: DoNotSchedule`` constraints only (``ScheduleAnyway`` only
  scores). :func:`spread_state` is the PreFilter: over every node having all the pod's topology keys and
  admitted by the constraint's ``nodeAffinityPolicy`` (``Honor`` by default: the pod's nodeSelector and
  required node affinity) and ``nodeTaintsPolicy`` (``Ignore`` by default), the pods of the pod's namespace,
  not being deleted, that ``labelSelector`` plus ``matchLabelKeys`` selects (an empty selector counts none),
  per topology value. :func:`spread_reason` is the Filter: a node without the key does not fit (``missing
  required label``); else ``count in its domain + (1 if the pod selects itself) - global minimum`` must not
  exceed ``maxSkew``, the minimum being 0 while the eligible domains are fewer than ``minDomains``. No
  system default constraints (they are ``ScheduleAnyway``), and ``filter_node`` skips this filter when
  given no state (:mod:`gangscale.sim.baselineplan` gives none).
- **InterPodAffinity**, required anti-affinity with topology ``kubernetes.io/hostname`` only, both ways
  (the pod's terms against the pods in the node's hostname domain, and those pods' terms against the pod).

Effective requests follow ``resource.PodRequests``: regular containers summed, sidecars (init containers
with ``restartPolicy: Always``) added to that sum, each regular init container needing its own request
plus the sidecars started before it, the larger of the two taken; pod-level ``spec.resources`` replaces
the aggregate for cpu, memory and hugepages; ``spec.overhead`` is added; a limit without a request counts
as the request.

Left out: volumes (VolumeBinding, VolumeZone, limits), PodTopologySpread's scoring (``ScheduleAnyway``
constraints and the system defaults), required *pod affinity* and anti-affinity on any other topology key
(such terms are ignored, so such pods may land where a real scheduler would refuse them), dynamic
resources, and the ``ExtendedResourceToleration`` admission plugin (:func:`pod_info` can add its
tolerations, since the embedded API server does not).

Scoring is the sim's stand-in for a real cluster, where kube-scheduler knows nothing of bookings: a pod
that consumes a ProvisioningRequest prefers nodes created for it (their ``gangscale.io/token`` label is one
of the PR's scale-up tokens); every pod avoids nodes booked for another PR that is ``Provisioned`` and not
yet ``BookingExpired``; then the node left with the fewest free accelerators (bin packing); then the name.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.model.quantity import QuantityError, canonical, is_extended
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]

HOSTNAME_LABEL = "kubernetes.io/hostname"
TOKEN_LABEL = "gangscale.io/token"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
POD_LEVEL = ("cpu", "memory")

NO_NODES = "no nodes available to schedule pods"
UNSCHEDULABLE = "node(s) were unschedulable"
NOT_READY = "node(s) were not ready"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = f"{SPREAD} (missing required label)"
WILDCARD_HOST_IP = "0.0.0.0"


def untolerated_taint(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


# --- what a pod and a node are, to the filters ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AntiTerm:
    """A required anti-affinity term (hostname topology): which pods, in which namespaces, it keeps away."""

    selector: JSON | None  # None selects no pod; {} every pod
    namespaces: frozenset[str]
    namespace_selector: JSON | None

    def selects(self, other: PodInfo, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        in_namespace = other.namespace in self.namespaces or (
            self.namespace_selector is not None
            and selector_matches(self.namespace_selector, namespace_labels.get(other.namespace, {})))
        return in_namespace and self.selector is not None and selector_matches(self.selector, other.labels)


@dataclass(frozen=True, slots=True)
class PortUse:
    """A host port a pod takes on its node: ``hostIP`` (empty is ``0.0.0.0``), protocol (empty is TCP), port."""

    host_ip: str
    protocol: str
    port: int

    def conflicts(self, other: PortUse) -> bool:
        """``HostPortInfo.CheckConflict``: same port and protocol, and the IPs equal or either ``0.0.0.0``."""
        return (self.port == other.port and self.protocol == other.protocol
                and (self.host_ip == other.host_ip or WILDCARD_HOST_IP in (self.host_ip, other.host_ip)))


@dataclass(frozen=True, slots=True)
class SpreadTerm:
    """A ``topologySpreadConstraints`` entry with ``whenUnsatisfiable: DoNotSchedule``, defaults applied."""

    max_skew: int
    topology_key: str
    #: ``labelSelector`` with ``matchLabelKeys`` merged in; None (no selector) selects no pod.
    selector: JSON | None
    min_domains: int
    #: ``nodeAffinityPolicy: Honor`` (the default): only nodes the pod's node affinity/selector accepts count.
    honor_affinity: bool
    #: ``nodeTaintsPolicy: Honor`` (default ``Ignore``): only nodes whose taints the pod tolerates count.
    honor_taints: bool

    def counts(self, other: PodInfo, namespace: str) -> bool:
        """``countPodsMatchSelector``: a pod of the namespace, not being deleted, that a non-empty selector
        matches (an empty selector counts no pod, though it matches the incoming pod itself)."""
        selector = self.selector
        return (other.namespace == namespace and not other.deleting and selector is not None
                and bool(selector.get("matchLabels") or selector.get("matchExpressions"))
                and selector_matches(selector, other.labels))

    def matches_self(self, pod: PodInfo) -> bool:
        return self.selector is not None and selector_matches(self.selector, pod.labels)


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    priority: int
    created: float
    #: Effective requests without ``pods`` (every pod takes one).
    requests: Mapping[str, int]
    node_selector: Mapping[str, str]
    #: Required ``nodeSelectorTerms``; None when the pod has no required node affinity.
    node_terms: tuple[JSON, ...] | None
    tolerations: tuple[JSON, ...]
    anti_affinity: tuple[AntiTerm, ...]
    #: The ProvisioningRequest the pod consumes (annotation), if any.
    consumes: str | None
    #: Host ports of its containers and sidecars (every container port with ``hostNetwork``).
    host_ports: tuple[PortUse, ...] = ()
    #: Its ``DoNotSchedule`` topology spread constraints.
    spread: tuple[SpreadTerm, ...] = ()
    #: ``metadata.deletionTimestamp`` is set (PodTopologySpread does not count it).
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[JSON, ...]
    unschedulable: bool
    ready: bool
    allocatable: Mapping[str, int]

    @property
    def token(self) -> str | None:
        return self.labels.get(TOKEN_LABEL)


def _map(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _list(raw: object) -> list[Any]:
    return list(raw) if isinstance(raw, list) else []


def resource_map(raw: object) -> dict[str, int]:
    return {str(name): canonical(str(name), value) for name, value in _map(raw).items()}


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = _map(container.get("resources"))
    return {**resource_map(resources.get("limits")), **resource_map(resources.get("requests"))}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _peak(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = max(into.get(name, 0), amount)


def effective_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What the scheduler reserves for a pod (see the module docstring); raises QuantityError if malformed."""
    total: dict[str, int] = {}
    for container in _list(spec.get("containers")):
        _add(total, container_requests(_map(container)))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for raw in _list(spec.get("initContainers")):
        own = container_requests(_map(raw))
        if _map(raw).get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _peak(init_peak, sidecars)
        else:
            need = dict(own)
            _add(need, sidecars)
            _peak(init_peak, need)
    _peak(total, init_peak)
    if spec.get("resources"):
        for name, amount in container_requests(spec).items():
            if name in POD_LEVEL or name.startswith("hugepages-"):
                total[name] = amount
    _add(total, resource_map(spec.get("overhead")))
    return {name: amount for name, amount in total.items() if amount and name != "pods"}


def _anti_terms(spec: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> tuple[AntiTerm, ...]:
    anti = _map(_map(spec.get("affinity")).get("podAntiAffinity"))
    terms = []
    for raw in _list(anti.get("requiredDuringSchedulingIgnoredDuringExecution")):
        term = _map(raw)
        if term.get("topologyKey") != HOSTNAME_LABEL:
            continue  # other topology keys are not emulated (module docstring)
        selector = term.get("labelSelector")
        if isinstance(selector, Mapping):
            selector = _with_label_keys(dict(selector), term, labels)
        namespaces = frozenset(str(n) for n in _list(term.get("namespaces")))
        ns_selector = term.get("namespaceSelector")
        if not namespaces and ns_selector is None:
            namespaces = frozenset({namespace})
        terms.append(AntiTerm(selector if isinstance(selector, dict) else None, namespaces,
                              dict(ns_selector) if isinstance(ns_selector, Mapping) else None))
    return tuple(terms)


def _with_label_keys(selector: JSON, term: Mapping[str, Any], labels: Mapping[str, str]) -> JSON:
    """``matchLabelKeys`` / ``mismatchLabelKeys``: the pod's own label values joined to the selector."""
    extra = [{"key": k, "operator": op, "values": [labels[k]]}
             for field, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
             for k in map(str, _list(term.get(field))) if k in labels]
    if extra:
        selector["matchExpressions"] = _list(selector.get("matchExpressions")) + extra
    return selector


def _host_ports(spec: Mapping[str, Any]) -> tuple[PortUse, ...]:
    """``GetHostPorts``: ``hostPort > 0`` entries of sidecars and containers; with ``hostNetwork`` API
    defaulting has made every ``containerPort`` a host port (a missing ``hostPort`` is the container port)."""
    host_network = spec.get("hostNetwork") is True
    containers = [_map(c) for c in _list(spec.get("initContainers")) if _map(c).get("restartPolicy") == "Always"]
    containers += [_map(c) for c in _list(spec.get("containers"))]
    ports = []
    for container in containers:
        for raw in _list(container.get("ports")):
            entry = _map(raw)
            port = entry.get("hostPort") or (entry.get("containerPort") if host_network else None)
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                ports.append(PortUse(str(entry.get("hostIP") or WILDCARD_HOST_IP), str(entry.get("protocol") or "TCP"),
                                     port))
    return tuple(ports)


def _positive(raw: object, default: int) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else default


def _spread_terms(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[SpreadTerm, ...]:
    terms = []
    for raw in _list(spec.get("topologySpreadConstraints")):
        constraint = _map(raw)
        if constraint.get("whenUnsatisfiable") != "DoNotSchedule":
            continue  # ScheduleAnyway only scores
        selector = constraint.get("labelSelector")
        merged = _with_label_keys(dict(selector), {"matchLabelKeys": constraint.get("matchLabelKeys")}, labels) \
            if isinstance(selector, Mapping) else None
        terms.append(SpreadTerm(
            max_skew=_positive(constraint.get("maxSkew"), 1), topology_key=str(constraint.get("topologyKey") or ""),
            selector=merged, min_domains=_positive(constraint.get("minDomains"), 1),
            honor_affinity=constraint.get("nodeAffinityPolicy") != "Ignore",
            honor_taints=constraint.get("nodeTaintsPolicy") == "Honor"))
    return tuple(terms)


def pod_info(pod: JSON, *, extended_resource_toleration: bool = False) -> PodInfo:
    """The filters' view of a pod; raises ValueError (QuantityError) for requests that do not parse.

    ``extended_resource_toleration`` adds what that admission plugin would have added at creation: an
    ``Exists``/``NoSchedule`` toleration for every extended resource the pod requests.
    """
    meta, spec = _map(pod.get("metadata")), _map(pod.get("spec"))
    namespace = str(meta.get("namespace") or "")
    labels = {str(k): str(v) for k, v in _map(meta.get("labels")).items()}
    requests = effective_requests(spec)
    tolerations = [dict(t) for t in _list(spec.get("tolerations")) if isinstance(t, Mapping)]
    if extended_resource_toleration:
        tolerations += [{"key": name, "operator": "Exists", "effect": "NoSchedule"}
                        for name in sorted(requests) if is_extended(name)]
    required = _map(_map(_map(spec.get("affinity")).get("nodeAffinity"))
                    .get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms") if required else None
    consumes = _map(meta.get("annotations")).get(CONSUME_ANNOTATION)
    priority = spec.get("priority")
    return PodInfo(
        namespace=namespace, name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""), labels=labels,
        priority=priority if isinstance(priority, int) else 0,
        created=parse_rfc3339(meta.get("creationTimestamp")) or 0.0,
        requests=requests,
        node_selector={str(k): str(v) for k, v in _map(spec.get("nodeSelector")).items()},
        node_terms=None if terms is None else tuple(dict(_map(t)) for t in _list(terms)),
        tolerations=tuple(tolerations),
        anti_affinity=_anti_terms(spec, namespace, labels),
        consumes=str(consumes) if consumes else None,
        host_ports=_host_ports(spec),
        spread=_spread_terms(spec, labels),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def node_info(node: JSON) -> NodeInfo:
    meta, spec, status = _map(node.get("metadata")), _map(node.get("spec")), _map(node.get("status"))
    allocatable: dict[str, int] = {}
    for name, value in _map(status.get("allocatable")).items():
        with contextlib.suppress(QuantityError):  # one bad entry makes that resource absent, not the node
            allocatable[str(name)] = canonical(str(name), value)
    ready = any(_map(c).get("type") == "Ready" and _map(c).get("status") == "True"
                for c in _list(status.get("conditions")))
    return NodeInfo(str(meta.get("name") or ""), {str(k): str(v) for k, v in _map(meta.get("labels")).items()},
                    tuple(dict(_map(t)) for t in _list(spec.get("taints"))), bool(spec.get("unschedulable")),
                    ready, allocatable)


# --- matching ---------------------------------------------------------------------------------------------

def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def first_untolerated(taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]) -> JSON | None:
    for taint in taints:
        if taint.get("effect") in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return dict(taint)
    return None


def requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One node selector requirement (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``)."""
    key, operator = str(requirement.get("key") or ""), requirement.get("operator")
    values = [str(v) for v in _list(requirement.get("values"))]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def term_matches(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    expressions, fields = _list(term.get("matchExpressions")), _list(term.get("matchFields"))
    if not expressions and not fields:
        return False  # an empty term selects no node
    return (all(requirement_matches(_map(e), labels) for e in expressions)
            and all(_map(f).get("key") == "metadata.name" and requirement_matches(_map(f), {"metadata.name": node_name})
                    for f in fields))


def node_affinity_matches(pod: PodInfo, node: NodeInfo) -> bool:
    if any(node.labels.get(key) != value for key, value in pod.node_selector.items()):
        return False
    return pod.node_terms is None or any(term_matches(t, node.labels, node.name) for t in pod.node_terms)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (``{}`` matches everything)."""
    if any(labels.get(str(k)) != str(v) for k, v in _map(selector.get("matchLabels")).items()):
        return False
    for raw in _list(selector.get("matchExpressions")):
        expression = _map(raw)
        if expression.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
        if not requirement_matches(expression, labels):
            return False
    return True


def resource_reasons(requests: Mapping[str, int], allocatable: Mapping[str, int], requested: Mapping[str, int],
                     pod_count: int) -> list[str]:
    """NodeResourcesFit: every resource the node lacks (``pod_count``: pods already on the node)."""
    reasons = [TOO_MANY_PODS] if pod_count + 1 > allocatable.get("pods", 0) else []
    reasons += [insufficient(name) for name, amount in requests.items()
                if amount > allocatable.get(name, 0) - requested.get(name, 0)]
    return reasons


def anti_affinity_reason(pod: PodInfo, neighbours: Iterable[PodInfo],
                         namespace_labels: Mapping[str, Mapping[str, str]]) -> str | None:
    """InterPodAffinity for hostname anti-affinity; ``neighbours``: pods in the node's hostname domain."""
    neighbours = list(neighbours)
    if any(term.selects(other, namespace_labels) for term in pod.anti_affinity for other in neighbours):
        return ANTI_AFFINITY
    if any(term.selects(pod, namespace_labels) for other in neighbours for term in other.anti_affinity):
        return EXISTING_ANTI_AFFINITY
    return None


def ports_reason(pod: PodInfo, on_node: Iterable[PodInfo]) -> str | None:
    """NodePorts: a host port of ``pod`` conflicts with one a pod on the node (bound or assumed) takes."""
    if not pod.host_ports:
        return None
    used = [port for other in on_node for port in other.host_ports]
    return NODE_PORTS if any(want.conflicts(have) for want in pod.host_ports for have in used) else None


@dataclass(frozen=True, slots=True)
class SpreadState:
    """PodTopologySpread's PreFilter for one pod: per constraint, its matching pods per eligible domain."""

    counts: tuple[Mapping[str, int], ...] = ()


def spread_state(pod: PodInfo, nodes: Iterable[tuple[NodeInfo, Iterable[PodInfo]]]) -> SpreadState:
    """Count, over every node (with the pods on it) that has all the constraints' topology keys and that each
    constraint's node inclusion policies admit, the pods its selector counts, per topology value."""
    counts: list[dict[str, int]] = [{} for _ in pod.spread]
    if not pod.spread:
        return SpreadState()
    for node, pods in nodes:
        if any(term.topology_key not in node.labels for term in pod.spread):
            continue
        on_node = list(pods)
        for term, into in zip(pod.spread, counts, strict=True):
            if term.honor_affinity and not node_affinity_matches(pod, node):
                continue
            if term.honor_taints and first_untolerated(node.taints, pod.tolerations) is not None:
                continue
            value = node.labels[term.topology_key]
            into[value] = into.get(value, 0) + sum(term.counts(other, pod.namespace) for other in on_node)
    return SpreadState(tuple(counts))


def spread_reason(pod: PodInfo, node: NodeInfo, state: SpreadState) -> str | None:
    """PodTopologySpread's Filter, constraint by constraint: the node needs the topology key, and
    ``matching in its domain + (1 if the pod matches) - global minimum <= maxSkew``; the global minimum is
    the fewest matching pods over the eligible domains, 0 while they are fewer than ``minDomains``."""
    for term, counts in zip(pod.spread, state.counts, strict=False):
        value = node.labels.get(term.topology_key)
        if value is None:
            return SPREAD_MISSING_LABEL
        if len(counts) < term.min_domains:
            floor = 0
        elif counts:
            floor = min(counts.values())
        else:
            continue  # no eligible domain at all: kube-scheduler's minimum is MaxInt32, nothing is skewed
        if counts.get(value, 0) + term.matches_self(pod) - floor > term.max_skew:
            return SPREAD
    return None


def filter_node(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int], pod_count: int,
                neighbours: Iterable[PodInfo], namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
                *, on_node: Iterable[PodInfo] | None = None, spread: SpreadState | None = None) -> list[str]:
    """Why ``pod`` may not go to ``node`` (kube-scheduler's reason texts); empty when it may.

    ``on_node``: the pods on the node, for NodePorts (``neighbours`` when omitted). ``spread``: the pod's
    :func:`spread_state` over the whole cluster; without it PodTopologySpread is not checked.

    Like the scheduling framework, the first filter that fails decides; only NodeResourcesFit may give
    several reasons at once.
    """
    neighbours = list(neighbours)
    unschedulable_taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    if node.unschedulable and not any(tolerates(t, unschedulable_taint) for t in pod.tolerations):
        return [UNSCHEDULABLE]
    taint = first_untolerated(node.taints, pod.tolerations)
    if taint is not None:
        return [untolerated_taint(str(taint.get("key") or ""), str(taint.get("value") or ""))]
    if not node.ready:
        return [NOT_READY]
    if not node_affinity_matches(pod, node):
        return [NODE_AFFINITY]
    reason = ports_reason(pod, neighbours if on_node is None else on_node)
    if reason:
        return [reason]
    reasons = resource_reasons(pod.requests, node.allocatable, requested, pod_count)
    if reasons:
        return reasons
    reason = spread_reason(pod, node, spread) if spread is not None else None
    if reason:
        return [reason]
    reason = anti_affinity_reason(pod, neighbours, namespace_labels or {})
    return [reason] if reason else []


def unschedulable_message(nodes: int, reasons: Iterable[Sequence[str]]) -> str:
    """kube-scheduler's FitError text: ``0/N nodes are available: <count reason>, ... .``, sorted as strings.

    The PostFilter part (`` preemption: ...``) is left out: the sim does not preempt.
    """
    if nodes == 0:
        return NO_NODES
    counts = Counter(reason for node_reasons in reasons for reason in node_reasons)
    return f"0/{nodes} nodes are available: {', '.join(sorted(f'{n} {r}' for r, n in counts.items()))}."


# --- scoring ----------------------------------------------------------------------------------------------

def free_accelerators_after(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int]) -> int:
    return sum(amount - requested.get(name, 0) - pod.requests.get(name, 0)
               for name, amount in node.allocatable.items() if is_extended(name))


def preference(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int], own_tokens: frozenset[str],
               booked_tokens: frozenset[str]) -> tuple[int, int, str]:
    """Sort key among feasible nodes, smallest best: own booking, then unbooked, then another PR's booking;
    then fewest free accelerators left; then the node name."""
    token = node.token
    if token is not None and token in own_tokens:
        booking = 0
    elif token is not None and token in booked_tokens:
        booking = 2
    else:
        booking = 1
    return booking, free_accelerators_after(pod, node, requested), node.name
