"""The scheduler's placement constraints: taints and tolerations, node selectors and affinity, label selectors.

Semantics follow kube-scheduler's filters (``TaintToleration``, ``NodeAffinity``) and
``k8s.io/apimachinery`` label selectors:

- A taint with effect ``NoSchedule`` or ``NoExecute`` keeps a pod off unless a toleration matches it;
  ``PreferNoSchedule`` never blocks. A toleration with an empty key and ``Exists`` matches every taint; an
  empty effect matches every effect.
- Required node affinity is an OR of terms, each an AND of requirements. An empty term list, or a term with
  no requirements, matches no node. ``matchFields`` can only name ``metadata.name``, so a node that does
  not exist yet (a node pool's template) never matches it.
- ``Gt``/``Lt`` compare integers; a label that is not an integer does not match.
- A label selector with no requirements matches everything; a missing selector (``None``) matches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"
TAINT_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
#: The effects that keep an untolerating pod off a node.
BLOCKING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})

NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SpecError(ValueError):
    """A pod or pool specification gangscale cannot use; ``path`` says where (``spec.containers[0]...``)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def as_mapping(raw: object, path: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError(path, f"expected an object, got {type(raw).__name__}")
    return raw


def as_sequence(raw: object, path: str) -> Sequence[Any]:
    if raw is None:
        return ()
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise SpecError(path, f"expected a list, got {type(raw).__name__}")
    return raw


def as_string_map(raw: object, path: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for key, value in as_mapping(raw, path).items():
        if not isinstance(value, str):
            raise SpecError(f"{path}.{key}", f"expected a string, got {type(value).__name__}")
        result[str(key)] = value
    return result


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    @classmethod
    def parse(cls, raw: object, path: str) -> Taint:
        data = as_mapping(raw, path)
        key, effect = data.get("key"), data.get("effect")
        if not isinstance(key, str) or not key:
            raise SpecError(f"{path}.key", "a taint needs a non-empty key")
        if effect not in TAINT_EFFECTS:
            raise SpecError(f"{path}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        return cls(key, str(data.get("value") or ""), str(effect))

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def parse(cls, raw: object, path: str) -> Toleration:
        data = as_mapping(raw, path)
        operator = data.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise SpecError(f"{path}.operator", f"must be Equal or Exists, got {operator!r}")
        key, value = str(data.get("key") or ""), str(data.get("value") or "")
        if not key and operator != "Exists":
            raise SpecError(f"{path}.operator", "an empty key needs operator Exists")
        if operator == "Exists" and value:
            raise SpecError(f"{path}.value", "must be empty when operator is Exists")
        effect = str(data.get("effect") or "")
        if effect and effect not in TAINT_EFFECTS:
            raise SpecError(f"{path}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        return cls(key, operator, value, effect)

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def untolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration],
                tolerated_keys: frozenset[str] = frozenset()) -> Taint | None:
    """The first blocking taint no toleration matches; ``tolerated_keys`` are tolerated implicitly."""
    for taint in taints:
        if taint.effect not in BLOCKING_EFFECTS or taint.key in tolerated_keys:
            continue
        if not any(toleration.tolerates(taint) for toleration in tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` (or ``matchFields``) entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: object, path: str, operators: Sequence[str] = NODE_OPERATORS) -> Requirement:
        data = as_mapping(raw, path)
        key, operator = data.get("key"), data.get("operator")
        if not isinstance(key, str) or not key:
            raise SpecError(f"{path}.key", "must be a non-empty string")
        if operator not in operators:
            raise SpecError(f"{path}.operator", f"must be one of {', '.join(operators)}, got {operator!r}")
        values = tuple(str(v) for v in as_sequence(data.get("values"), f"{path}.values"))
        if operator in ("In", "NotIn") and not values:
            raise SpecError(f"{path}.values", f"operator {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SpecError(f"{path}.values", f"must be empty for operator {operator}")
        if operator in ("Gt", "Lt") and (len(values) != 1 or not _is_int(values[0])):
            raise SpecError(f"{path}.values", f"operator {operator} needs exactly one integer value")
        return cls(key, str(operator), values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case "In":
                return present and labels[self.key] in self.values
            case "NotIn":
                return not present or labels[self.key] not in self.values
            case "Exists":
                return present
            case "DoesNotExist":
                return not present
            case "Gt" | "Lt":
                if not present or not _is_int(labels[self.key]):
                    return False
                label, bound = int(labels[self.key]), int(self.values[0])
                return label > bound if self.operator == "Gt" else label < bound
        return False

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        if self.operator in ("Gt", "Lt"):
            return f"{self.key} {'>' if self.operator == 'Gt' else '<'} {self.values[0]}"
        return f"{self.key} {self.operator} ({', '.join(self.values)})"


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, raw: object, path: str) -> NodeSelectorTerm:
        data = as_mapping(raw, path)
        expressions = tuple(Requirement.parse(item, f"{path}.matchExpressions[{i}]")
                            for i, item in enumerate(as_sequence(data.get("matchExpressions"), path)))
        fields = tuple(Requirement.parse(item, f"{path}.matchFields[{i}]", ("In", "NotIn"))
                       for i, item in enumerate(as_sequence(data.get("matchFields"), path)))
        for i, field in enumerate(fields):
            if field.key != "metadata.name":
                raise SpecError(f"{path}.matchFields[{i}].key", f"only metadata.name is supported, got {field.key!r}")
        return cls(expressions, fields)

    def matches(self, labels: Mapping[str, str], node_name: str | None) -> bool:
        if not self.expressions and not self.fields:
            return False
        if not all(requirement.matches(labels) for requirement in self.expressions):
            return False
        if self.fields:
            if node_name is None:
                return False
            return all(field.matches({"metadata.name": node_name}) for field in self.fields)
        return True

    def __str__(self) -> str:
        parts = [str(r) for r in self.expressions] + [str(f) for f in self.fields]
        return " and ".join(parts) if parts else "(empty term)"


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """``requiredDuringSchedulingIgnoredDuringExecution``: the node must match one of the terms."""

    terms: tuple[NodeSelectorTerm, ...]

    def matches(self, labels: Mapping[str, str], node_name: str | None) -> bool:
        return any(term.matches(labels, node_name) for term in self.terms)

    @property
    def names_nodes(self) -> bool:
        """Whether the affinity depends on the node's name (so a pool template cannot be judged by labels)."""
        return any(term.fields for term in self.terms)

    def __str__(self) -> str:
        return " or ".join(f"({term})" for term in self.terms) if self.terms else "(no terms: matches no node)"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, raw: object, path: str) -> LabelSelector:
        data = as_mapping(raw, path)
        labels = tuple(sorted(as_string_map(data.get("matchLabels"), f"{path}.matchLabels").items()))
        expressions = tuple(Requirement.parse(item, f"{path}.matchExpressions[{i}]", LABEL_OPERATORS)
                            for i, item in enumerate(as_sequence(data.get("matchExpressions"), path)))
        return cls(labels, expressions)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return (all(labels.get(key) == value for key, value in self.match_labels)
                and all(requirement.matches(labels) for requirement in self.expressions))

    def with_labels(self, extra: Mapping[str, str]) -> LabelSelector:
        return LabelSelector(tuple(sorted({**dict(self.match_labels), **extra}.items())), self.expressions)


#: The host IP that binds every address: a host port on it conflicts with the same port on any IP.
WILDCARD_HOST_IP = "0.0.0.0"
PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclass(frozen=True, slots=True, order=True)
class HostPort:
    """One ``ports[]`` entry with a ``hostPort``, as kube-scheduler's ``NodePorts`` filter sees it.

    Semantics of ``k8s.io/kubernetes`` ``pkg/scheduler/framework/types.go`` (``HostPortInfo.CheckConflict``): an
    empty ``hostIP`` is ``0.0.0.0`` and an empty protocol ``TCP``; two entries conflict when port and protocol are
    equal and either IP is ``0.0.0.0`` or both IPs are equal. Only ``0.0.0.0`` is a wildcard there (``::`` is not).
    """

    port: int
    protocol: str = "TCP"
    host_ip: str = WILDCARD_HOST_IP

    @classmethod
    def parse(cls, raw: object, path: str) -> HostPort | None:
        """The entry's host port, or ``None`` when it has none (``hostPort`` absent or 0: no node port is taken)."""
        data = as_mapping(raw, path)
        port = data.get("hostPort")
        if port is None or port == 0:
            return None
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise SpecError(f"{path}.hostPort", f"must be an integer between 1 and 65535, got {port!r}")
        protocol = data.get("protocol") or "TCP"
        if protocol not in PROTOCOLS:
            raise SpecError(f"{path}.protocol", f"must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        host_ip = data.get("hostIP") or WILDCARD_HOST_IP
        if not isinstance(host_ip, str):
            raise SpecError(f"{path}.hostIP", f"expected a string, got {type(host_ip).__name__}")
        return cls(port, str(protocol), host_ip)

    def conflicts(self, other: HostPort) -> bool:
        return (self.port == other.port and self.protocol == other.protocol
                and (self.host_ip == other.host_ip or WILDCARD_HOST_IP in (self.host_ip, other.host_ip)))

    def __str__(self) -> str:
        where = "" if self.host_ip == WILDCARD_HOST_IP else f"{self.host_ip}:"
        return f"host port {where}{self.port}/{self.protocol}"


DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A ``topologySpreadConstraints`` entry with ``whenUnsatisfiable: DoNotSchedule``, defaults applied.

    Defaults and the filter's rule follow kube-scheduler's ``PodTopologySpread`` plugin
    (``pkg/scheduler/framework/plugins/podtopologyspread/common.go`` and ``filtering.go``): ``minDomains``
    defaults to 1, ``nodeAffinityPolicy`` to ``Honor`` (only nodes that match the pod's nodeSelector and
    required node affinity are domains), ``nodeTaintsPolicy`` to ``Ignore`` (tainted nodes are domains too).
    A pod may go to a node whose domain holds ``count`` selected pods when ``count + self - min <= maxSkew``,
    where ``self`` is 1 if the selector matches the pod's own labels and ``min`` is the fewest selected pods in
    any eligible domain, or 0 while there are fewer eligible domains than ``minDomains``. A node without the
    topology key takes no pod with the constraint.
    """

    max_skew: int
    topology_key: str
    #: ``labelSelector`` with ``matchLabelKeys`` merged in (the pod's own values of those keys).
    selector: LabelSelector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    def __str__(self) -> str:
        extra = f", minDomains {self.min_domains}" if self.min_domains > 1 else ""
        return f"topology spread maxSkew {self.max_skew} on {self.topology_key}{extra}"
