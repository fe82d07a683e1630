"""Which Workload podSets a ProvisioningRequest asks for, and how ``podSetMergePolicy`` folds them together.

Reproduced (Kueue ``provisioning/controller.go`` ``reqIsNeeded``, ``requiredPodSets``, ``mergePodSets``,
``canMergePodSets``):

- a podSet *uses* the managed resources when any container or init container names one of them in its requests
  or limits; an empty ``managedResources`` means every resource is managed;
- a request is needed when some podSet with ``count > 0`` uses a managed resource and is admitted with a count
  above zero (``podSetAssignments[].count``, defaulting to the podSet's count); a podSet that needs provisioning
  but has no assignment is an error (``inconsistent podSet assignments``);
- the request's podSets are those podSets, in Workload order, with their admitted counts (non-positive ones
  skipped). With ``IdenticalPodTemplates`` a podSet whose template equals an earlier one's is folded into it
  (counts add, the first name and template stay); with ``IdenticalWorkloadSchedulingRequirements`` the test is
  equal container and init container requests (by position), pod-level ``resources``, ``nodeSelector``,
  ``tolerations``, ``affinity`` and ``resourceClaims``.

Equality follows Kubernetes' semantic equality: quantities compare by value (``1`` == ``1000m``) and an empty
list or map equals an absent one. Left out: elastic Workload slices (only the increment over the previous slice
is requested upstream); no Workload here has a previous slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.model.quantity import QuantityError, parse_quantity

JSON = dict[str, Any]

IDENTICAL_POD_TEMPLATES = "IdenticalPodTemplates"
IDENTICAL_SCHEDULING_REQUIREMENTS = "IdenticalWorkloadSchedulingRequirements"
_QUANTITY_MAPS = frozenset({"requests", "limits", "overhead"})


class InconsistentAssignments(ValueError):
    """A podSet that needs provisioning has no podSet assignment."""


@dataclass(frozen=True)
class MergedPodSet:
    """One podSet of the ProvisioningRequest: the Workload podSet it is named after, its assignment, and the
    total count of every podSet folded into it."""

    name: str
    pod_set: JSON
    assignment: JSON
    count: int


def pod_sets(workload: Mapping[str, Any]) -> list[JSON]:
    return list((workload.get("spec") or {}).get("podSets") or [])


def pod_set_count(pod_set: Mapping[str, Any]) -> int:
    """``count`` with the CRD default of 1."""
    return int(pod_set.get("count", 1))


def assignments(workload: Mapping[str, Any]) -> dict[str, JSON]:
    """``status.admission.podSetAssignments`` by podSet name."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {a.get("name", "main"): a for a in admission.get("podSetAssignments") or []}


def admitted_count(pod_set: Mapping[str, Any], assignment: Mapping[str, Any]) -> int:
    count = assignment.get("count")
    return pod_set_count(pod_set) if count is None else int(count)


def _pod_spec(pod_set: Mapping[str, Any]) -> JSON:
    return dict((pod_set.get("template") or {}).get("spec") or {})


def _containers(spec: Mapping[str, Any], key: str) -> list[JSON]:
    return list(spec.get(key) or [])


def uses(pod_set: Mapping[str, Any], managed: Iterable[str]) -> bool:
    """Whether any (init) container of the podSet names a managed resource in its requests or limits."""
    wanted = set(managed)
    spec = _pod_spec(pod_set)
    for container in _containers(spec, "initContainers") + _containers(spec, "containers"):
        resources = container.get("resources") or {}
        if wanted & (set(resources.get("requests") or {}) | set(resources.get("limits") or {})):
            return True
    return False


def _wants(pod_set: Mapping[str, Any], managed: list[str]) -> bool:
    return pod_set_count(pod_set) > 0 and (not managed or uses(pod_set, managed))


def required_pod_sets(workload: Mapping[str, Any], managed: list[str]) -> list[str]:
    """Names of the podSets that need provisioning, in Workload order."""
    return [ps.get("name", "main") for ps in pod_sets(workload) if _wants(ps, managed)]


def request_needed(workload: Mapping[str, Any], managed: list[str]) -> bool:
    """Kueue's ``reqIsNeeded``; raises :class:`InconsistentAssignments` for a needed podSet with no assignment."""
    by_name = assignments(workload)
    for ps in pod_sets(workload):
        if not _wants(ps, managed):
            continue
        name = ps.get("name", "main")
        if name not in by_name:
            raise InconsistentAssignments(f"inconsistent podSet assignments: missing assignment for PodSet {name!r}")
        if admitted_count(ps, by_name[name]) > 0:
            return True
    return False


def merge_pod_sets(workload: Mapping[str, Any], prc_spec: Mapping[str, Any]) -> list[MergedPodSet]:
    """The ProvisioningRequest's podSets for this Workload under ``prc_spec``."""
    managed = list(prc_spec.get("managedResources") or [])
    policy = prc_spec.get("podSetMergePolicy")
    by_name = {ps.get("name", "main"): ps for ps in pod_sets(workload)}
    by_assignment = assignments(workload)
    merged: list[MergedPodSet] = []
    for name in required_pod_sets(workload, managed):
        if name not in by_name or name not in by_assignment:
            raise InconsistentAssignments("inconsistent podSet assignments")
        ps, psa = by_name[name], by_assignment[name]
        count = admitted_count(ps, psa)
        if count <= 0:
            continue
        into = next((i for i, m in enumerate(merged) if policy and can_merge(m.pod_set, ps, policy)), None)
        if into is None:
            merged.append(MergedPodSet(name, ps, psa, count))
        else:
            first = merged[into]
            merged[into] = MergedPodSet(first.name, first.pod_set, first.assignment, first.count + count)
    return merged


def can_merge(first: Mapping[str, Any], other: Mapping[str, Any], policy: str) -> bool:
    if policy == IDENTICAL_POD_TEMPLATES:
        return semantic_equal(first.get("template"), other.get("template"))
    if policy == IDENTICAL_SCHEDULING_REQUIREMENTS:
        return same_scheduling_requirements(first, other)
    return False


def same_scheduling_requirements(first: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    a, b = _pod_spec(first), _pod_spec(other)
    for key in ("containers", "initContainers"):
        ca, cb = _containers(a, key), _containers(b, key)
        if len(ca) != len(cb):
            return False
        for x, y in zip(ca, cb, strict=True):
            if not semantic_equal((x.get("resources") or {}).get("requests"),
                                  (y.get("resources") or {}).get("requests"), key="requests"):
                return False
    return all(semantic_equal(a.get(key), b.get(key), key=key)
               for key in ("resources", "nodeSelector", "tolerations", "affinity", "resourceClaims"))


def semantic_equal(a: Any, b: Any, key: str = "") -> bool:
    """Kubernetes' ``equality.Semantic.DeepEqual`` on JSON: quantities by value, empty equals absent. ``key`` is
    the field the values sit under (a quantity map is recognised by it: ``requests``, ``limits``...)."""
    return bool(_normal(a, key) == _normal(b, key))


_EMPTY: tuple[Any, ...] = (None, {}, [], "")


def _quantity(value: Any) -> Any:
    try:
        return ("quantity", parse_quantity(value))
    except (QuantityError, ValueError, TypeError):
        return value


def _normal(value: Any, key: str = "") -> Any:
    """A canonical form: empty values become None and vanish from maps; quantity maps hold exact values."""
    if isinstance(value, Mapping):
        out = {k: n for k, v in value.items() if (n := _normal(v, k)) is not None}
        if key in _QUANTITY_MAPS:
            out = {k: _quantity(v) for k, v in out.items()}
        return out or None
    if isinstance(value, list):
        return [_normal(v) for v in value] or None
    return None if value in _EMPTY else value
