"""Compute-resource names and quantities, validated as ``pkg/apis/core/validation`` does.

Reproduces (Kubernetes 1.36; ``validation.go`` ``validateResourceRequirements``,
``validateContainerResourceName``, ``ValidateResourceQuantityValue``, ``ValidateNodeResources`` and the
helpers of ``pkg/apis/core/helper``):

- resource names: a qualified name; an unprefixed name must be a standard resource
  (``must be a standard resource type or fully qualified``) and, in a container, one of ``cpu``,
  ``memory``, ``ephemeral-storage``, ``hugepages-<size>`` (``must be a standard resource for
  containers``); a prefixed name outside ``kubernetes.io/`` must be an extended resource name;
- quantities: not negative (``must be greater than or equal to 0``); extended and object-count
  resources whole (``must be an integer``); hugepages a multiple of the page size;
- ``requests`` not above ``limits`` (``must be less than or equal to cpu limit of 1``, reported at
  ``...resources.requests`` with the request as the value), and for resources that cannot be
  overcommitted (extended resources, hugepages) a limit (``Limit must be set for non overcommitable
  resources`` at ``...resources.limits``) equal to the request (``must be equal to <name> limit of <q>``);
- hugepages without cpu or memory: ``HugePages require cpu or memory``;
- Node ``status.capacity`` / ``status.allocatable`` quantities (paths ``status.capacity.<name>``).

Go walks the ``limits``/``requests`` maps in random order; we report in document order. Resource claims
(``resources.claims``) and pod-level ``spec.resources`` are not validated.
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.fielderrors import FieldError
from gangscale.sim.apiserver.metavalidation import is_qualified_name
from gangscale.sim.apiserver.quantity import Quantity, QuantityError, decode_quantity, parse_quantity

JSON = dict[str, Any]

NEGATIVE = "must be greater than or equal to 0"
HUGEPAGES = "hugepages-"
_STANDARD_CONTAINER = {"cpu", "memory", "ephemeral-storage"}
_STANDARD = {
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage",
    "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods", "resourcequotas", "services",
    "replicationcontrollers", "secrets", "configmaps", "persistentvolumeclaims", "storage", "requests.storage",
    "services.nodeports", "services.loadbalancers",
}
_INTEGER = {"pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps",
            "persistentvolumeclaims", "services.nodeports", "services.loadbalancers"}


def as_dict(value: Any) -> JSON:
    """``value`` when it is an object, else an empty one (Go decodes a missing struct as its zero value)."""
    return value if isinstance(value, dict) else {}


def is_hugepages(name: str) -> bool:
    return name.startswith(HUGEPAGES)


def is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    return not is_native(name) and not name.startswith("requests.") and not is_qualified_name(f"requests.{name}")


def overcommit_allowed(name: str) -> bool:
    return is_native(name) and not is_hugepages(name)


def _is_standard(name: str) -> bool:
    return name in _STANDARD or is_hugepages(name) or name.startswith("requests.hugepages-")


def resource_name_errors(name: str, path: str) -> list[FieldError]:
    """``validateResourceName``."""
    errs = [fe.invalid(path, name, m) for m in is_qualified_name(name)]
    if not errs and "/" not in name and not _is_standard(name):
        errs.append(fe.invalid(path, name, "must be a standard resource type or fully qualified"))
    return errs


def container_resource_name_errors(name: str, path: str) -> list[FieldError]:
    """``validateContainerResourceName``."""
    errs = resource_name_errors(name, path)
    if "/" not in name:
        if name not in _STANDARD_CONTAINER and not is_hugepages(name):
            errs.append(fe.invalid(path, name, "must be a standard resource for containers"))
    elif not is_native(name) and not is_extended(name):
        errs.append(fe.invalid(path, name, "doesn't follow extended resource name standard"))
    return errs


def quantity_value_errors(name: str, q: Quantity, path: str) -> list[FieldError]:
    """``ValidateResourceQuantityValue``."""
    errs: list[FieldError] = []
    if q.value < 0:
        errs.append(fe.invalid(path, str(q), NEGATIVE))
    if (name in _INTEGER or is_extended(name)) and q.milli_value() % 1000 != 0:
        errs.append(fe.invalid(path, str(q), "must be an integer"))
    return errs


def _hugepage_errors(name: str, q: Quantity, path: str) -> list[FieldError]:
    try:
        page = parse_quantity(name[len(HUGEPAGES):])
    except QuantityError:
        page = None
    ok = page is not None and page.value > 0 and page.milli_value() % 1000 == 0 \
        and q.int_value() % page.int_value() == 0
    if ok:
        return []
    return [fe.invalid(path, str(q), f"{q} is not positive integer multiple of {name}")]


def _quantities(raw: Any) -> dict[str, Quantity]:
    # Decoding already refused malformed quantities (400); anything left parses.
    if not isinstance(raw, dict):
        return {}
    return {str(k): decode_quantity(v) for k, v in raw.items()}


def requirements_errors(resources: Any, path: str) -> list[FieldError]:
    """``ValidateContainerResourceRequirements`` for one container's ``resources`` at ``path``."""
    res = resources if isinstance(resources, dict) else {}
    lim_path, req_path = fe.child(path, "limits"), fe.child(path, "requests")
    limits, requests = _quantities(res.get("limits")), _quantities(res.get("requests"))
    errs: list[FieldError] = []
    hugepages = cpu_or_memory = False
    for name, q in limits.items():
        key = fe.index(lim_path, name)
        errs += container_resource_name_errors(name, key) + quantity_value_errors(name, q, key)
        if is_hugepages(name):
            hugepages = True
            errs += _hugepage_errors(name, q, key)
        cpu_or_memory = cpu_or_memory or name in ("cpu", "memory")
    for name, q in requests.items():
        key = fe.index(req_path, name)
        errs += container_resource_name_errors(name, key) + quantity_value_errors(name, q, key)
        errs += _request_vs_limit(name, q, limits.get(name), lim_path, req_path)
        if is_hugepages(name):
            hugepages = True
            errs += _hugepage_errors(name, q, key)
        cpu_or_memory = cpu_or_memory or name in ("cpu", "memory")
    if hugepages and not cpu_or_memory:
        errs.append(fe.forbidden(path, "HugePages require cpu or memory"))
    return errs


def _request_vs_limit(name: str, q: Quantity, limit: Quantity | None, lim_path: str,
                      req_path: str) -> list[FieldError]:
    if limit is None:
        if overcommit_allowed(name):
            return []
        return [fe.required(lim_path, "Limit must be set for non overcommitable resources")]
    if q.cmp(limit) != 0 and not overcommit_allowed(name):
        return [fe.invalid(req_path, str(q), f"must be equal to {name} limit of {limit}")]
    if q.cmp(limit) > 0:
        return [fe.invalid(req_path, str(q), f"must be less than or equal to {name} limit of {limit}")]
    return []


def node_resource_errors(node: JSON) -> list[FieldError]:
    """``ValidateNodeResources``: capacity and allocatable quantities."""
    status = as_dict(node.get("status"))
    errs: list[FieldError] = []
    for section in ("capacity", "allocatable"):
        for name, q in _quantities(status.get(section)).items():
            errs += quantity_value_errors(name, q, f"status.{section}.{name}")
    return errs
