"""How the lists and maps of each served kind merge: the schema facts that server-side apply and
strategic merge patch read.

Reproduces, for the kinds the simulator serves, the markers the real API types carry:

* SSA (structured-merge-diff): ``+listType`` atomic/set/map with ``+listMapKey`` (key defaults such as
  a container port's ``protocol: TCP``), ``+mapType=atomic`` / ``+structType=atomic``, and which map keys
  are declared struct fields (owned through their children) versus keys of a granular map (each key is
  owned itself).
* Strategic merge patch: ``patchStrategy`` / ``patchMergeKey`` tags.
* The Go zero value of the typed object (fields serialised without ``omitempty``, e.g. a Pod's
  ``spec.containers: null`` or a condition's ``lastProbeTime: null``), which the real field manager
  sees because it converts typed objects; it decides whether an added node is recorded as ``.``.
* CRDs: a version's structural schema; lists without ``x-kubernetes-list-type`` are atomic, unknown or
  ``x-kubernetes-preserve-unknown-fields`` parts are granular maps with atomic lists; ``metadata``
  always follows ObjectMeta.

Not reproduced:

* Builtin kinds are described by tables of the paths that matter, not full schemas: a field missing
  from a table is a granular struct field and its lists are atomic/replace, and unknown fields are
  accepted instead of failing with ``field not declared in schema``.
* Only Pod, PodTemplate, Job (batch/v1: its pod template and status conditions), Node, Namespace, Event
  (core and events.k8s.io), Lease and ObjectMeta carry type-specific facts; any other kind gets ObjectMeta
  facts only.
* CRD schemas: ``x-kubernetes-embedded-resource`` objects do not get ObjectMeta facts for their own
  ``metadata``; ``allOf``/``anyOf``/``oneOf`` branches are ignored.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Path = tuple[str, ...]
Strategy = tuple[str | None, str | None]


class ListType(enum.Enum):
    ATOMIC = "atomic"
    MAP = "map"
    SET = "set"


@dataclass(frozen=True)
class ListShape:
    type: ListType
    keys: tuple[str, ...] = ()
    # Values SSA uses for a key field an item omits (the schema's ``default``).
    key_defaults: tuple[tuple[str, Any], ...] = ()


ATOMIC = ListShape(ListType.ATOMIC)
SET = ListShape(ListType.SET)


def keyed(*keys: str, defaults: tuple[tuple[str, Any], ...] = ()) -> ListShape:
    return ListShape(ListType.MAP, keys, defaults)


class Shape(Protocol):
    """Schema questions, asked with the field names of a path (list elements skipped)."""

    def list_shape(self, path: Path) -> ListShape: ...

    def smp_strategy(self, path: Path) -> Strategy: ...

    def map_atomic(self, path: Path) -> bool: ...

    def is_field(self, path: Path) -> bool:
        """True if the last name is a declared struct field of its parent (not a granular map key)."""
        ...

    def zero_fields(self, path: Path) -> Mapping[str, Any]:
        """Fields the Go zero value of the struct at ``path`` serialises (empty for CRDs)."""
        ...


@dataclass(frozen=True)
class _Table:
    lists: Mapping[Path, ListShape]
    smp: Mapping[Path, Strategy]
    atomic_maps: frozenset[Path]
    granular_maps: frozenset[Path]
    zero: Mapping[Path, Mapping[str, Any]]


def _mount(prefix: Path, table: _Table) -> _Table:
    return _Table(
        {prefix + p: v for p, v in table.lists.items()},
        {prefix + p: v for p, v in table.smp.items()},
        frozenset(prefix + p for p in table.atomic_maps),
        frozenset(prefix + p for p in table.granular_maps),
        {prefix + p: v for p, v in table.zero.items()},
    )


def _join(*tables: _Table) -> _Table:
    return _Table(
        {p: v for t in tables for p, v in t.lists.items()},
        {p: v for t in tables for p, v in t.smp.items()},
        frozenset().union(*(t.atomic_maps for t in tables)),
        frozenset().union(*(t.granular_maps for t in tables)),
        {p: v for t in tables for p, v in t.zero.items()},
    )


def _t(lists: Mapping[Path, ListShape] | None = None, smp: Mapping[Path, Strategy] | None = None,
       atomic_maps: tuple[Path, ...] = (), granular_maps: tuple[Path, ...] = (),
       zero: Mapping[Path, Mapping[str, Any]] | None = None) -> _Table:
    return _Table(lists or {}, smp or {}, frozenset(atomic_maps), frozenset(granular_maps), zero or {})


_MERGE = "merge"

# k8s.io/apimachinery/pkg/apis/meta/v1 ObjectMeta.
OBJECT_META = _t(
    lists={("finalizers",): SET, ("ownerReferences",): keyed("uid"), ("managedFields",): ATOMIC},
    smp={("finalizers",): (_MERGE, None), ("ownerReferences",): (_MERGE, "uid")},
    granular_maps=(("labels",), ("annotations",)),
)

_CONTAINER = _t(
    lists={
        ("ports",): keyed("containerPort", "protocol", defaults=(("protocol", "TCP"),)),
        ("env",): keyed("name"), ("envFrom",): ATOMIC, ("volumeMounts",): keyed("mountPath"),
        ("volumeDevices",): keyed("devicePath"), ("command",): ATOMIC, ("args",): ATOMIC,
        ("resizePolicy",): ATOMIC, ("resources", "claims"): keyed("name"),
        ("securityContext", "capabilities", "add"): ATOMIC,
        ("securityContext", "capabilities", "drop"): ATOMIC,
    },
    smp={("ports",): (_MERGE, "containerPort"), ("env",): (_MERGE, "name"),
         ("volumeMounts",): (_MERGE, "mountPath"), ("volumeDevices",): (_MERGE, "devicePath")},
    atomic_maps=(("env", "valueFrom", "configMapKeyRef"), ("env", "valueFrom", "secretKeyRef"),
                 ("env", "valueFrom", "fieldRef"), ("env", "valueFrom", "resourceFieldRef")),
    granular_maps=(("resources", "limits"), ("resources", "requests")),
    zero={(): {"name": "", "resources": {}}, ("ports",): {"containerPort": 0}, ("env",): {"name": ""},
          ("volumeMounts",): {"name": "", "mountPath": ""}},
)

_AFFINITY_LISTS: dict[Path, ListShape] = {
    ("affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): ATOMIC,
    ("affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"): ATOMIC,
    ("affinity", "podAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): ATOMIC,
    ("affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"): ATOMIC,
    ("affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): ATOMIC,
}

_POD_SPEC = _join(
    _t(
        lists={
            ("volumes",): keyed("name"), ("initContainers",): keyed("name"),
            ("containers",): keyed("name"), ("ephemeralContainers",): keyed("name"),
            ("imagePullSecrets",): keyed("name"), ("tolerations",): ATOMIC, ("hostAliases",): keyed("ip"),
            ("hostAliases", "hostnames"): ATOMIC, ("readinessGates",): ATOMIC,
            ("topologySpreadConstraints",): keyed("topologyKey", "whenUnsatisfiable"),
            ("topologySpreadConstraints", "matchLabelKeys"): ATOMIC,
            ("schedulingGates",): keyed("name"), ("resourceClaims",): keyed("name"),
            ("securityContext", "supplementalGroups"): ATOMIC, ("securityContext", "sysctls"): ATOMIC,
            ("dnsConfig", "nameservers"): ATOMIC, ("dnsConfig", "searches"): ATOMIC,
            ("dnsConfig", "options"): ATOMIC, ("volumes", "configMap", "items"): ATOMIC,
            ("volumes", "secret", "items"): ATOMIC, ("volumes", "projected", "sources"): ATOMIC,
            ("volumes", "downwardAPI", "items"): ATOMIC, **_AFFINITY_LISTS,
        },
        smp={("volumes",): ("merge,retainKeys", "name"), ("initContainers",): (_MERGE, "name"),
             ("containers",): (_MERGE, "name"), ("ephemeralContainers",): (_MERGE, "name"),
             ("imagePullSecrets",): (_MERGE, "name"), ("hostAliases",): (_MERGE, "ip"),
             ("topologySpreadConstraints",): (_MERGE, "topologyKey"),
             ("schedulingGates",): (_MERGE, "name"), ("resourceClaims",): ("merge,retainKeys", "name")},
        atomic_maps=(("nodeSelector",), ("imagePullSecrets",),
                     ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
                     ("topologySpreadConstraints", "labelSelector")),
        granular_maps=(("overhead",), ("volumes", "csi", "volumeAttributes")),
        zero={(): {"containers": None}, ("volumes",): {"name": ""}},
    ),
    _mount(("initContainers",), _CONTAINER), _mount(("containers",), _CONTAINER),
    _mount(("ephemeralContainers",), _CONTAINER),
)

_POD_STATUS = _t(
    lists={("conditions",): keyed("type"), ("podIPs",): keyed("ip"), ("hostIPs",): ATOMIC,
           ("initContainerStatuses",): ATOMIC, ("containerStatuses",): ATOMIC,
           ("ephemeralContainerStatuses",): ATOMIC, ("resourceClaimStatuses",): keyed("name")},
    smp={("conditions",): (_MERGE, "type"), ("podIPs",): (_MERGE, "ip"), ("hostIPs",): (_MERGE, "ip"),
         ("resourceClaimStatuses",): ("merge,retainKeys", "name")},
    zero={("conditions",): {"type": "", "status": "", "lastProbeTime": None, "lastTransitionTime": None}},
)

_TEMPLATE_META_ZERO = _t(zero={(): {"creationTimestamp": None}})

_NODE_INFO_KEYS = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                   "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")

_KINDS: dict[str, _Table] = {
    "Pod": _join(_mount(("spec",), _POD_SPEC), _mount(("status",), _POD_STATUS),
                 _t(zero={(): {"spec": {}, "status": {}}})),
    "PodTemplate": _join(_mount(("template", "spec"), _POD_SPEC),
                         _mount(("template", "metadata"), OBJECT_META),
                         _mount(("template", "metadata"), _TEMPLATE_META_ZERO),
                         _t(zero={(): {"template": {"metadata": {}, "spec": {}}}})),
    "Node": _t(
        lists={("spec", "podCIDRs"): SET, ("spec", "taints"): ATOMIC, ("status", "conditions"): keyed("type"),
               ("status", "addresses"): keyed("type"), ("status", "images"): ATOMIC,
               ("status", "images", "names"): ATOMIC, ("status", "volumesInUse"): ATOMIC,
               ("status", "volumesAttached"): ATOMIC},
        smp={("spec", "podCIDRs"): (_MERGE, None), ("status", "conditions"): (_MERGE, "type"),
             ("status", "addresses"): (_MERGE, "type")},
        granular_maps=(("status", "capacity"), ("status", "allocatable")),
        zero={(): {"spec": {}, "status": {}},
              ("status",): {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
                            "nodeInfo": dict.fromkeys(_NODE_INFO_KEYS, "")},
              ("status", "conditions"): {"type": "", "status": "", "lastHeartbeatTime": None,
                                         "lastTransitionTime": None},
              ("status", "addresses"): {"type": "", "address": ""}},
    ),
    "Namespace": _t(
        lists={("spec", "finalizers"): ATOMIC, ("status", "conditions"): keyed("type")},
        smp={("status", "conditions"): (_MERGE, "type")},
        zero={(): {"spec": {}, "status": {}},
              ("status", "conditions"): {"type": "", "status": "", "lastTransitionTime": None}},
    ),
    "Job": _join(
        _mount(("spec", "template", "spec"), _POD_SPEC),
        _mount(("spec", "template", "metadata"), OBJECT_META),
        _mount(("spec", "template", "metadata"), _TEMPLATE_META_ZERO),
        _t(
            # JobStatus.conditions is atomic for SSA but merges by type in strategic merge patch.
            lists={("status", "conditions"): ATOMIC, ("spec", "selector", "matchExpressions"): ATOMIC,
                   ("spec", "podFailurePolicy", "rules"): ATOMIC, ("spec", "successPolicy", "rules"): ATOMIC},
            smp={("status", "conditions"): (_MERGE, "type")},
            granular_maps=(("spec", "selector", "matchLabels"),),
            zero={(): {"spec": {}, "status": {}}, ("spec",): {"template": {"metadata": {}, "spec": {}}},
                  ("status", "conditions"): {"type": "", "status": "", "lastProbeTime": None,
                                             "lastTransitionTime": None}},
        ),
    ),
    "Lease": _t(zero={(): {"spec": {}}}),
    "Event": _t(
        atomic_maps=(("involvedObject",), ("related",)),
        zero={(): {"involvedObject": {}, "source": {}, "firstTimestamp": None, "lastTimestamp": None,
                   "eventTime": None, "reportingComponent": "", "reportingInstance": ""}},
    ),
    "events.k8s.io/Event": _t(
        atomic_maps=(("regarding",), ("related",)),
        zero={(): {"eventTime": None, "deprecatedSource": {}, "deprecatedFirstTimestamp": None,
                   "deprecatedLastTimestamp": None, "regarding": {}}},
    ),
}


class TableShape:
    """A builtin kind: its table plus ObjectMeta under ``metadata``; anything unlisted is granular."""

    def __init__(self, table: _Table) -> None:
        self._t = _join(_mount(("metadata",), OBJECT_META), table)

    def list_shape(self, path: Path) -> ListShape:
        return self._t.lists.get(path, ATOMIC)

    def smp_strategy(self, path: Path) -> Strategy:
        return self._t.smp.get(path, (None, None))

    def map_atomic(self, path: Path) -> bool:
        return path in self._t.atomic_maps

    def is_field(self, path: Path) -> bool:
        return bool(path) and path[:-1] not in self._t.granular_maps and path[:-1] not in self._t.atomic_maps

    def zero_fields(self, path: Path) -> Mapping[str, Any]:
        return self._t.zero.get(path, {})


def builtin_shape(kind: str, group: str = "") -> Shape:
    """The shape of a builtin kind (``group`` tells events.k8s.io Events from core ones)."""
    key = f"{group}/{kind}" if group and f"{group}/{kind}" in _KINDS else kind
    return TableShape(_KINDS.get(key, _t()))


_META_SHAPE = TableShape(_t())


class SchemaShape:
    """A CRD version, from its ``openAPIV3Schema`` (structural schema)."""

    def __init__(self, openapi_v3_schema: Mapping[str, Any]) -> None:
        self._root = openapi_v3_schema

    def _node(self, path: Path) -> Mapping[str, Any] | None:
        """The schema of the value at ``path`` (stepping through ``items``); None where unknown."""
        node: Mapping[str, Any] | None = self._root
        for name in path:
            node = _element(node)
            if node is None:
                return None
            props = node.get("properties") or {}
            extra = node.get("additionalProperties")
            if name in props:
                node = props[name]
            elif isinstance(extra, Mapping):
                node = extra
            else:
                return None
        return node

    def list_shape(self, path: Path) -> ListShape:
        if path[:1] == ("metadata",):
            return _META_SHAPE.list_shape(path)
        node = self._node(path)
        kind = (node or {}).get("x-kubernetes-list-type")
        if kind == "map":
            props = ((node or {}).get("items") or {}).get("properties") or {}
            keys = tuple((node or {}).get("x-kubernetes-list-map-keys") or ())
            defaults = tuple((k, props[k]["default"]) for k in keys if "default" in (props.get(k) or {}))
            return keyed(*keys, defaults=defaults)
        return SET if kind == "set" else ATOMIC

    def smp_strategy(self, path: Path) -> Strategy:
        # CRDs do not accept strategic merge patch; only ObjectMeta answers, for completeness.
        return _META_SHAPE.smp_strategy(path) if path[:1] == ("metadata",) else (None, None)

    def map_atomic(self, path: Path) -> bool:
        if path[:1] == ("metadata",):
            return _META_SHAPE.map_atomic(path)
        node = self._node(path)
        return bool(node) and (node or {}).get("x-kubernetes-map-type") == "atomic"

    def is_field(self, path: Path) -> bool:
        if path[:1] == ("metadata",) and len(path) > 1:
            return _META_SHAPE.is_field(path)
        if path in (("apiVersion",), ("kind",), ("metadata",)):
            return True
        parent = _element(self._node(path[:-1]))
        return parent is not None and path[-1] in (parent.get("properties") or {})

    def zero_fields(self, path: Path) -> Mapping[str, Any]:
        return {}


def _element(node: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Lists are skipped in paths, so a name under an array addresses its items."""
    while node is not None and node.get("type") == "array":
        node = node.get("items")
    return node
