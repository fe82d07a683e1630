"""What one pod needs from a node, computed from its pod spec as the scheduler computes it.

Effective requests follow ``k8s.io/component-helpers`` ``resource.PodRequests``:

- a container's missing request for a resource it limits takes the limit (API defaulting does this);
- regular containers are summed; a sidecar (an init container with ``restartPolicy: Always``) adds to
  that sum and stays for the pod's life; a regular init container needs its own request plus the
  sidecars started before it; the pod needs the larger of the two;
- pod-level ``spec.resources`` (cpu, memory, hugepages), where set, replace the containers' aggregate;
- ``spec.overhead`` (set by the RuntimeClass admission plugin) is added;
- every pod takes one of the node's ``pods``.

Placement constraints kept: ``nodeSelector``, required node affinity, tolerations, required pod
anti-affinity on ``kubernetes.io/hostname`` (the one-pod-per-node pattern of multi-host jobs), host ports,
and topology spread constraints with ``whenUnsatisfiable: DoNotSchedule`` on ``kubernetes.io/hostname`` or
``topology.kubernetes.io/zone``.

- Host ports are those of the containers and sidecars (``GetHostPorts`` in kube-scheduler's
  ``pkg/scheduler/util/utils.go``: a regular init container's ports are not held while the pod runs); two pods
  whose ports conflict (:class:`~gangscale.model.scheduling.HostPort`) never share a node, as the ``NodePorts``
  filter (``pkg/scheduler/framework/plugins/nodeports/node_ports.go``) enforces.
- Spread constraints keep ``maxSkew``, ``minDomains``, the selector with ``matchLabelKeys`` merged in (the
  template's own values, as the plugin merges the pod's), and both node inclusion policies; see
  :class:`~gangscale.model.scheduling.SpreadConstraint` and :mod:`gangscale.planner.spread` for how the planner
  holds a plan to them.

Assumptions, also in the README: other required inter-pod (anti-)affinity terms (zone topology keys, pod
affinity), spread constraints on other topology keys and ``ScheduleAnyway`` ones are recorded in
:attr:`PodDemand.ignored` and not planned for. Anti-affinity, host ports and spread are judged within the gang
only, not against pods already running (the planner's view of a node holds the sum of its pods' requests, not
their labels or ports; a DaemonSet that takes the same host port on every node is not seen).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangscale.model.nodepool import ZONE_LABEL
from gangscale.model.quantity import QuantityError
from gangscale.model.resources import PODS, ResourceList
from gangscale.model.scheduling import (
    DO_NOT_SCHEDULE,
    HONOR,
    IGNORE,
    SCHEDULE_ANYWAY,
    HostPort,
    LabelSelector,
    NodeAffinity,
    NodeSelectorTerm,
    SpecError,
    SpreadConstraint,
    Taint,
    Toleration,
    as_mapping,
    as_sequence,
    as_string_map,
    untolerated,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The topology keys of spread constraints the planner models (a pool is one zone; every node its own host).
SPREAD_KEYS = (HOSTNAME_LABEL, ZONE_LABEL)
#: Resources that pod-level ``spec.resources`` may set.
POD_LEVEL_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class PodDemand:
    """One pod's requests and placement constraints; equal demands compare and hash equal."""

    requests: ResourceList
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: NodeAffinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    #: Required anti-affinity terms with topology ``kubernetes.io/hostname``: no two pods of the gang that
    #: one of these selects share a node with this pod.
    anti_affinity: tuple[LabelSelector, ...] = ()
    #: The host ports the pod holds while it runs: no other pod with a conflicting one shares its node.
    host_ports: tuple[HostPort, ...] = ()
    #: ``DoNotSchedule`` topology spread constraints on a key in :data:`SPREAD_KEYS`.
    spread: tuple[SpreadConstraint, ...] = ()
    #: Constraints the planner does not model, as human-readable notes.
    ignored: tuple[str, ...] = field(default=(), compare=False)
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    #: What decides which nodes admit the pod (labels and taints), with its hash computed once: many gangs
    #: differ only in labels and share it, so the planner caches compatibility by it.
    placement: object = field(default=None, init=False, repr=False, compare=False)
    names_nodes: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Demands key the planner's caches, so hashing must not re-walk every field each time.
        object.__setattr__(self, "_hash", hash((self.requests, self.node_selector, self.affinity, self.tolerations,
                                                self.labels, self.anti_affinity, self.host_ports, self.spread)))
        extended = tuple(name for name in self.requests if "/" in name)
        object.__setattr__(self, "placement", _Key((self.node_selector, self.affinity, self.tolerations, extended)))
        object.__setattr__(self, "names_nodes", self._names_nodes())

    def __hash__(self) -> int:
        return self._hash

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def repels(self, other: PodDemand) -> bool:
        """Whether a pod of ``self`` and a pod of ``other`` may not share a node (either side's anti-affinity
        terms, or host ports that conflict)."""
        return self.anti_affine(other) or self.port_conflict(other) is not None

    def anti_affine(self, other: PodDemand) -> bool:
        other_labels, own_labels = other.label_map, self.label_map
        return (any(selector.matches(other_labels) for selector in self.anti_affinity)
                or any(selector.matches(own_labels) for selector in other.anti_affinity))

    def port_conflict(self, other: PodDemand) -> HostPort | None:
        """The first of this pod's host ports that one of ``other``'s conflicts with (``None``: they can share)."""
        for mine in self.host_ports:
            if any(mine.conflicts(theirs) for theirs in other.host_ports):
                return mine
        return None

    def _names_nodes(self) -> bool:
        """Whether placement depends on a node's own name, not only its pool's labels."""
        return (any(key == HOSTNAME_LABEL for key, _ in self.node_selector)
                or (self.affinity is not None and (self.affinity.names_nodes or any(
                    r.key == HOSTNAME_LABEL for term in self.affinity.terms for r in term.expressions))))

    def selects(self, labels: Mapping[str, str], node_name: str | None = None) -> str | None:
        """``None`` if a node with these labels passes nodeSelector and affinity, else why not."""
        for key, value in self.node_selector:
            if labels.get(key) != value:
                have = labels.get(key)
                return (f"nodeSelector {key}={value} does not match (node has "
                        f"{f'{key}={have}' if have is not None else f'no {key} label'})")
        if self.affinity is not None and not self.affinity.matches(labels, node_name):
            return f"required node affinity {self.affinity} does not match"
        return None

    def blocking_taint(self, taints: Sequence[Taint], extended_resource_toleration: bool = True) -> Taint | None:
        """The first taint that keeps this pod off; see :func:`gangscale.model.scheduling.untolerated`.

        With ``extended_resource_toleration`` a pod tolerates taints keyed by an extended resource it
        requests, as the ``ExtendedResourceToleration`` admission plugin arranges at pod creation (a
        ProvisioningRequest's PodTemplate never went through admission, so it cannot carry them).
        """
        implicit = frozenset(name for name in self.requests if "/" in name) if extended_resource_toleration \
            else frozenset()
        return untolerated(taints, self.tolerations, implicit)


class _Key:
    """A hashable value that computes its hash once (it keys hot caches)."""

    __slots__ = ("_hash", "items")

    def __init__(self, items: tuple[object, ...]) -> None:
        self.items = items
        self._hash = hash(items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and (self is other or self.items == other.items)


def container_requests(container: Mapping[str, Any], path: str) -> ResourceList:
    resources = as_mapping(container.get("resources"), f"{path}.resources")
    limits = ResourceList.parse(as_mapping(resources.get("limits"), f"{path}.resources.limits"),
                                f"{path}.resources.limits")
    requests = ResourceList.parse(as_mapping(resources.get("requests"), f"{path}.resources.requests"),
                                  f"{path}.resources.requests")
    # API defaulting: a limit without a request sets the request.
    return ResourceList({**dict(limits), **dict(requests)})


def pod_requests(spec: Mapping[str, Any], path: str = "spec") -> ResourceList:
    """The pod's effective requests (see the module docstring), ``pods: 1`` included."""
    try:
        return _pod_requests(spec, path)
    except QuantityError as exc:
        # The message already starts with the field's full path ("spec.containers[0]...cpu: problem").
        field, _, problem = str(exc).partition(": ")
        raise SpecError(field, problem) if problem else SpecError(path, str(exc)) from None


def _pod_requests(spec: Mapping[str, Any], path: str) -> ResourceList:
    containers = as_sequence(spec.get("containers"), f"{path}.containers")
    total = ResourceList()
    for i, container in enumerate(containers):
        total = total + container_requests(as_mapping(container, f"{path}.containers[{i}]"), f"{path}.containers[{i}]")
    sidecars = ResourceList()
    init_peak = ResourceList()
    for i, raw in enumerate(as_sequence(spec.get("initContainers"), f"{path}.initContainers")):
        where = f"{path}.initContainers[{i}]"
        container = as_mapping(raw, where)
        own = container_requests(container, where)
        if container.get("restartPolicy") == "Always":
            total = total + own
            sidecars = sidecars + own
            init_peak = init_peak.max_with(sidecars)
        else:
            init_peak = init_peak.max_with(own + sidecars)
    effective = dict(total.max_with(init_peak))
    pod_level = as_mapping(spec.get("resources"), f"{path}.resources")
    if pod_level:
        level = container_requests(spec, path)
        for name, value in level.items():
            if name in POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
                effective[name] = value
    overhead = ResourceList.parse(as_mapping(spec.get("overhead"), f"{path}.overhead"), f"{path}.overhead")
    result = ResourceList(effective) + overhead
    return result + {PODS: 1}


def _anti_affinity(spec: Mapping[str, Any], labels: Mapping[str, str], path: str,
                   ignored: list[str]) -> tuple[LabelSelector, ...]:
    affinity = as_mapping(spec.get("affinity"), f"{path}.affinity")
    selectors: list[LabelSelector] = []
    anti = as_mapping(affinity.get("podAntiAffinity"), f"{path}.affinity.podAntiAffinity")
    where = f"{path}.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    for i, raw in enumerate(as_sequence(anti.get("requiredDuringSchedulingIgnoredDuringExecution"), where)):
        term = as_mapping(raw, f"{where}[{i}]")
        topology = term.get("topologyKey")
        if topology != HOSTNAME_LABEL:
            ignored.append(f"required pod anti-affinity on {topology!r} is not planned for")
            continue
        if term.get("labelSelector") is None:
            continue  # a null selector matches no pod
        selector = LabelSelector.parse(term["labelSelector"], f"{where}[{i}].labelSelector")
        keys = as_sequence(term.get("matchLabelKeys"), f"{where}[{i}].matchLabelKeys")
        selectors.append(selector.with_labels({str(k): labels[str(k)] for k in keys if str(k) in labels}))
    pod_affinity = as_mapping(affinity.get("podAffinity"), f"{path}.affinity.podAffinity")
    if pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"):
        ignored.append("required pod affinity is not planned for")
    return tuple(selectors)


def _host_ports(spec: Mapping[str, Any], path: str, ignored: list[str]) -> tuple[HostPort, ...]:
    """The host ports held while the pod runs: its containers' and sidecars' (see the module docstring).

    With ``hostNetwork`` every container port is a host port: API defaulting sets a missing ``hostPort`` to the
    ``containerPort`` when the pod is created (``defaultHostNetworkPorts`` in ``pkg/apis/core/v1/defaults.go``).
    """
    host_network = spec.get("hostNetwork") is True
    ports: set[HostPort] = set()
    for kind in ("initContainers", "containers"):
        for i, raw in enumerate(as_sequence(spec.get(kind), f"{path}.{kind}")):
            container = as_mapping(raw, f"{path}.{kind}[{i}]")
            if kind == "initContainers" and container.get("restartPolicy") != "Always":
                continue  # it exits before the pod runs: kube-scheduler does not hold its ports
            where = f"{path}.{kind}[{i}].ports"
            for j, raw_port in enumerate(as_sequence(container.get("ports"), where)):
                entry = as_mapping(raw_port, f"{where}[{j}]")
                if host_network and not entry.get("hostPort"):
                    entry = {**entry, "hostPort": entry.get("containerPort")}
                port = HostPort.parse(entry, f"{where}[{j}]")
                if port is not None:
                    ports.add(port)
    if ports:
        ignored.append("host ports are checked between the gang's own pods only: the host ports that running pods "
                       "(DaemonSets included) hold on existing and new nodes are not seen")
    return tuple(sorted(ports))


def _spread(spec: Mapping[str, Any], labels: Mapping[str, str], path: str,
            ignored: list[str]) -> tuple[SpreadConstraint, ...]:
    where = f"{path}.topologySpreadConstraints"
    constraints: list[SpreadConstraint] = []
    for i, raw in enumerate(as_sequence(spec.get("topologySpreadConstraints"), where)):
        constraint = _spread_constraint(as_mapping(raw, f"{where}[{i}]"), labels, f"{where}[{i}]", ignored)
        if constraint is not None:
            constraints.append(constraint)
    if constraints:
        ignored.append("topology spread is judged against the gang's own pods: running pods its selector matches "
                       "are not counted")
    return tuple(constraints)


def _positive(data: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{path}.{key}", f"must be an integer of at least 1, got {value!r}")
    return value


def _policy(data: Mapping[str, Any], key: str, path: str, default: str) -> str:
    value = data.get(key) or default
    if value not in (HONOR, IGNORE):
        raise SpecError(f"{path}.{key}", f"must be {HONOR} or {IGNORE}, got {value!r}")
    return str(value)


def _spread_constraint(data: Mapping[str, Any], labels: Mapping[str, str], path: str,
                       ignored: list[str]) -> SpreadConstraint | None:
    """One constraint, or ``None`` (with a note in ``ignored`` when that leaves something unplanned)."""
    max_skew = _positive(data, "maxSkew", path)
    key, when = data.get("topologyKey"), data.get("whenUnsatisfiable")
    if not isinstance(key, str) or not key:
        raise SpecError(f"{path}.topologyKey", "must be a non-empty string")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise SpecError(f"{path}.whenUnsatisfiable", f"must be {DO_NOT_SCHEDULE} or {SCHEDULE_ANYWAY}, got {when!r}")
    min_domains = _positive(data, "minDomains", path, 1)
    if when == SCHEDULE_ANYWAY:
        ignored.append(f"topology spread on {key!r} with ScheduleAnyway is a preference: not planned for")
        return None
    if key not in SPREAD_KEYS:
        ignored.append(f"topology spread on {key!r} is not planned for (only {' and '.join(SPREAD_KEYS)} are)")
        return None
    keys = [str(k) for k in as_sequence(data.get("matchLabelKeys"), f"{path}.matchLabelKeys")]
    if data.get("labelSelector") is None and not any(k in labels for k in keys):
        return None  # a null selector matches no pod (matchLabelKeys found in the labels would be its terms)
    selector = LabelSelector.parse(data.get("labelSelector"), f"{path}.labelSelector")
    selector = selector.with_labels({k: labels[k] for k in keys if k in labels})
    if missing := [k for k in keys if k not in labels]:
        ignored.append(f"topology spread on {key!r}: matchLabelKeys {', '.join(missing)} not in the template's "
                       f"labels; planned as if the pods lacked them (if their controller adds them, the pods are "
                       f"spread in smaller groups than planned)")
    if not selector.matches(labels):
        ignored.append(f"topology spread on {key!r} does not select the pod's own labels: judged only against the "
                       f"gang's other pod sets")
    return SpreadConstraint(max_skew, key, selector, min_domains,
                            _policy(data, "nodeAffinityPolicy", path, HONOR),
                            _policy(data, "nodeTaintsPolicy", path, IGNORE))


def _node_affinity(spec: Mapping[str, Any], path: str) -> NodeAffinity | None:
    affinity = as_mapping(spec.get("affinity"), f"{path}.affinity")
    node = as_mapping(affinity.get("nodeAffinity"), f"{path}.affinity.nodeAffinity")
    where = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = as_sequence(as_mapping(required, where).get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    return NodeAffinity(tuple(NodeSelectorTerm.parse(term, f"{where}.nodeSelectorTerms[{i}]")
                              for i, term in enumerate(terms)))


def pod_demand(template: Mapping[str, Any], path: str = "template") -> PodDemand:
    """A :class:`PodDemand` from a pod template (``{"metadata": {...}, "spec": {...}}``).

    Raises :class:`SpecError` naming the field for anything malformed (a bad quantity, an unknown operator).
    """
    template = as_mapping(template, path)
    metadata = as_mapping(template.get("metadata"), f"{path}.metadata")
    labels = as_string_map(metadata.get("labels"), f"{path}.metadata.labels")
    spec = as_mapping(template.get("spec"), f"{path}.spec")
    if not as_sequence(spec.get("containers"), f"{path}.spec.containers"):
        raise SpecError(f"{path}.spec.containers", "a pod needs at least one container")
    ignored: list[str] = []
    spec_path = f"{path}.spec"
    tolerations = tuple(Toleration.parse(item, f"{path}.spec.tolerations[{i}]")
                        for i, item in enumerate(as_sequence(spec.get("tolerations"), f"{path}.spec.tolerations")))
    return PodDemand(
        requests=pod_requests(spec, f"{path}.spec"),
        node_selector=tuple(sorted(as_string_map(spec.get("nodeSelector"), f"{path}.spec.nodeSelector").items())),
        affinity=_node_affinity(spec, f"{path}.spec"),
        tolerations=tolerations,
        labels=tuple(sorted(labels.items())),
        anti_affinity=_anti_affinity(spec, labels, spec_path, ignored),
        host_ports=_host_ports(spec, spec_path, ignored),
        spread=_spread(spec, labels, spec_path, ignored),
        ignored=tuple(ignored),
    )
