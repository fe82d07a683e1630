"""What the embedded API server serves: resource types, their scope, verbs and subresources.

A :class:`ResourceType` is one served (group, version, plural). Versions of one group/plural share one
storage (``StorageKey``): an object written as ``v1beta1`` is read back as ``v1`` and the other way round.
Custom resources convert between versions the way a CRD with ``conversion.strategy: None`` does: only
``apiVersion`` changes. Core ``v1`` Events and ``events.k8s.io/v1`` Events share storage and convert field
by field, as the real registry does.

Custom resources are served from ``apiextensions.k8s.io/v1`` CustomResourceDefinition objects: the
built-in ones (ProvisioningRequest, Kueue, Ray, JobSet) are CRD objects created at start-up, so
``kubectl get crd`` lists them, and applying another CRD serves a new resource.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gangscale.sim.apiserver.shapes import SchemaShape, Shape, builtin_shape

JSON = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class StorageKey:
    """Where objects of a resource live, whatever version they are read or written in."""

    group: str
    plural: str


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    status_subresource: bool = False
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    custom: bool = False
    # OpenAPI v3 schema of this version (custom resources); None means "not validated by schema".
    schema: JSON | None = field(default=None, compare=False, hash=False)
    storage_version: str = ""
    deprecated: bool = False
    deprecation_warning: str | None = None
    # Fields usable in fieldSelector besides metadata.name/namespace (CRD selectableFields).
    selectable_fields: tuple[str, ...] = ()
    # CRs, pods track metadata.generation; most other built-ins do not.
    has_generation: bool = False
    # Whether DELETE answers with the deleted object (pods, custom resources) or a Status.
    returns_deleted_object: bool = False
    shape: Shape = field(default_factory=lambda: builtin_shape(""), compare=False, hash=False)
    # CRD additionalPrinterColumns, for server-side printing.
    printer_columns: tuple[JSON, ...] = field(default=(), compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage(self) -> StorageKey:
        return StorageKey(self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def describe(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _core(kind: str, plural: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType(group="", version="v1", kind=kind, plural=plural, singular=kind.lower(),
                        namespaced=namespaced, storage_version="v1", shape=builtin_shape(kind), **kw)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _core("Namespace", "namespaces", False, status_subresource=True, short_names=("ns",)),
    _core("Node", "nodes", False, status_subresource=True, short_names=("no",)),
    _core("Pod", "pods", True, status_subresource=True, short_names=("po",), categories=("all",),
          has_generation=True, returns_deleted_object=True),
    _core("PodTemplate", "podtemplates", True),
    _core("Secret", "secrets", True),
    _core("Event", "events", True, short_names=("ev",)),
    # batch/v1 Jobs have no short name upstream (``kubectl get job`` resolves through the singular name).
    ResourceType(group="batch", version="v1", kind="Job", plural="jobs", singular="job", namespaced=True,
                 status_subresource=True, categories=("all",), storage_version="v1", has_generation=True,
                 shape=builtin_shape("Job")),
    ResourceType(group="events.k8s.io", version="v1", kind="Event", plural="events", singular="event",
                 namespaced=True, short_names=("ev",), storage_version="v1", shape=builtin_shape("Event")),
    ResourceType(group="coordination.k8s.io", version="v1", kind="Lease", plural="leases", singular="lease",
                 namespaced=True, storage_version="v1", shape=builtin_shape("Lease")),
    ResourceType(group="apiextensions.k8s.io", version="v1", kind="CustomResourceDefinition",
                 plural="customresourcedefinitions", singular="customresourcedefinition",
                 namespaced=False, status_subresource=True, short_names=("crd", "crds"),
                 categories=("api-extensions",), storage_version="v1", has_generation=True,
                 shape=builtin_shape("CustomResourceDefinition")),
)

# Core v1 Events and events.k8s.io/v1 Events are one resource stored once (in the core shape).
_EVENT_STORAGE = StorageKey("", "events")


def storage_key(rt: ResourceType) -> StorageKey:
    if rt.kind == "Event":
        return _EVENT_STORAGE
    return rt.storage


def types_from_crd(crd: JSON) -> list[ResourceType]:
    """The resource types a CRD object serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group", "")
    storage_version = next((v["name"] for v in spec.get("versions", []) if v.get("storage")), "")
    out: list[ResourceType] = []
    for ver in spec.get("versions", []):
        if not ver.get("served", False):
            continue
        schema = ((ver.get("schema") or {}).get("openAPIV3Schema")) or None
        subresources = ver.get("subresources") or {}
        selectable = tuple(f.get("jsonPath", "").lstrip(".") for f in ver.get("selectableFields") or [])
        out.append(ResourceType(
            group=group, version=ver["name"], kind=names.get("kind", ""), plural=names.get("plural", ""),
            singular=names.get("singular") or names.get("kind", "").lower(),
            namespaced=spec.get("scope") == "Namespaced",
            status_subresource="status" in subresources,
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            custom=True, schema=schema, storage_version=storage_version,
            deprecated=bool(ver.get("deprecated", False)),
            deprecation_warning=ver.get("deprecationWarning"),
            selectable_fields=selectable, has_generation=True, returns_deleted_object=True,
            shape=SchemaShape(schema or {}),
            printer_columns=tuple(ver.get("additionalPrinterColumns") or ()),
        ))
    return out


class Registry:
    """The served resource types, looked up by path or by name as kubectl spells it."""

    def __init__(self, types: Iterable[ResourceType] = BUILTIN_TYPES) -> None:
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_types: dict[str, list[ResourceType]] = {}
        for rt in types:
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        self._by_path[(rt.group, rt.version, rt.plural)] = rt

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def types(self) -> list[ResourceType]:
        return sorted(self._by_path.values(), key=lambda t: (t.group, t.version, t.plural))

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred (storage) version first."""
        out: dict[str, list[str]] = {}
        for t in self.types():
            versions = out.setdefault(t.group, [])
            if t.version not in versions:
                versions.append(t.version)
        for group, versions in out.items():
            preferred = _preferred_version(self, group, versions)
            versions.sort(key=lambda v: (v != preferred, _version_rank(v)))
        return out

    def install_crd(self, crd: JSON) -> list[ResourceType]:
        name = (crd.get("metadata") or {}).get("name", "")
        self.remove_crd(name)
        types = types_from_crd(crd)
        self._crd_types[name] = types
        for rt in types:
            self._add(rt)
        return types

    def remove_crd(self, name: str) -> list[ResourceType]:
        types = self._crd_types.pop(name, [])
        for rt in types:
            self._by_path.pop((rt.group, rt.version, rt.plural), None)
        return types

    def storage_version_type(self, key: StorageKey) -> ResourceType | None:
        for t in self.types():
            if storage_key(t) == key and t.version == t.storage_version and t.group == key.group:
                return t
        return None


def _version_rank(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA > beta > alpha, higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major = int(m.group(1))
    stage = {"alpha": 2, "beta": 1, None: 0}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor)


def _preferred_version(reg: Registry, group: str, versions: list[str]) -> str:
    for t in reg.types():
        if t.group == group and t.storage_version and t.storage_version in versions:
            return t.storage_version
    return sorted(versions, key=_version_rank)[0]
