"""A Workload as the emulator reads it: its pod sets' requests and constraints, its conditions, its admission
and admission check states.

Parsing is lenient where Kueue's webhooks would have rejected the object: a Workload whose pod sets cannot be
read parses with no pod sets and the problem as text (``Workload.problem``), which the scheduler reports as
the reason it waits. Quantities are canonical integers (:func:`gangscale.model.quantity.canonical`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangscale.model.pod import pod_demand
from gangscale.model.quantity import QuantityError, canonical
from gangscale.model.resources import PODS, ResourceList
from gangscale.model.scheduling import NodeAffinity, SpecError, Toleration
from gangscale.sim.kueue.objects import (
    ADMITTED,
    CHECK_PENDING,
    EVICTED,
    FINISHED,
    JOB_UID_LABEL,
    QUOTA_RESERVED,
    conditions_of,
    is_true,
    listing,
    mapping,
    meta_of,
)
from gangscale.sim.world import workload_subject
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]


@dataclass(frozen=True)
class PodSet:
    """One ``spec.podSets[]`` entry: per-pod requests (without ``pods``) and placement constraints."""

    name: str
    count: int
    requests: ResourceList
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: NodeAffinity | None = None
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class CheckState:
    """One ``status.admissionChecks[]`` entry."""

    name: str
    state: str
    message: str = ""
    transition: float | None = None
    requeue_after: int | None = None
    retry_count: int | None = None


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str
    uid: str
    created: float
    queue_name: str
    priority: int
    active: bool
    pod_sets: tuple[PodSet, ...]
    conditions: Mapping[str, JSON]
    admission: JSON | None
    checks: tuple[CheckState, ...]
    requeue_at: float | None
    requeue_count: int
    job_uid: str | None
    subject: str
    #: Why the pod sets could not be read, if they could not.
    problem: str | None = None
    raw: JSON = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def reserved(self) -> bool:
        return is_true(self.conditions, QUOTA_RESERVED) and self.admission is not None

    @property
    def admitted(self) -> bool:
        return is_true(self.conditions, ADMITTED)

    @property
    def finished(self) -> bool:
        return is_true(self.conditions, FINISHED)

    @property
    def evicted(self) -> bool:
        return is_true(self.conditions, EVICTED)

    @property
    def reserved_in(self) -> str | None:
        return str(self.admission.get("clusterQueue")) if self.admission else None

    def transition_of(self, kind: str) -> float | None:
        return parse_rfc3339((self.conditions.get(kind) or {}).get("lastTransitionTime"))

    @property
    def assigned_flavors(self) -> set[str]:
        return {str(f) for psa in listing((self.admission or {}).get("podSetAssignments"))
                for f in mapping(mapping(psa).get("flavors")).values()}

    def check(self, name: str) -> CheckState | None:
        return next((c for c in self.checks if c.name == name), None)

    def usage(self) -> dict[tuple[str, str], int]:
        """What the reservation holds, from ``status.admission`` as Kueue accounts it: (flavor, resource) -> amount."""
        out: dict[tuple[str, str], int] = {}
        for raw_psa in listing((self.admission or {}).get("podSetAssignments")):
            psa = mapping(raw_psa)
            flavors = mapping(psa.get("flavors"))
            for resource, amount in mapping(psa.get("resourceUsage")).items():
                flavor = flavors.get(resource)
                if not isinstance(flavor, str):
                    continue
                try:
                    value = canonical(str(resource), amount)
                except QuantityError:
                    continue
                out[(flavor, str(resource))] = out.get((flavor, str(resource)), 0) + value
        return out


def _int(raw: object, default: int | None) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else default


def _parse_pod_sets(spec: Mapping[str, Any]) -> tuple[PodSet, ...]:
    out = []
    for i, raw_ps in enumerate(listing(spec.get("podSets"))):
        raw = mapping(raw_ps)
        path = f"spec.podSets[{i}]"
        demand = pod_demand(mapping(raw.get("template")), f"{path}.template")
        count = _int(raw.get("count"), 1)
        if count is None or count < 0:
            raise SpecError(f"{path}.count", "must be a non-negative integer")
        requests = ResourceList({r: v for r, v in demand.requests.items() if r != PODS})
        out.append(PodSet(str(raw.get("name") or "main"), count, requests, dict(demand.node_selector),
                          demand.affinity, demand.tolerations))
    if not out:
        raise SpecError("spec.podSets", "a Workload needs at least one pod set")
    return tuple(out)


def _parse_check(raw: Mapping[str, Any]) -> CheckState:
    return CheckState(str(raw.get("name", "")), str(raw.get("state") or CHECK_PENDING), str(raw.get("message") or ""),
                      parse_rfc3339(raw.get("lastTransitionTime")), _int(raw.get("requeueAfterSeconds"), None),
                      _int(raw.get("retryCount"), None))


def parse_workload(obj: Mapping[str, Any]) -> Workload:
    meta = meta_of(obj)
    spec = mapping(obj.get("spec"))
    status = mapping(obj.get("status"))
    problem = None
    try:
        pod_sets = _parse_pod_sets(spec)
    except SpecError as exc:
        pod_sets, problem = (), str(exc)
    requeue = mapping(status.get("requeueState"))
    admission = status.get("admission")
    labels = mapping(meta.get("labels"))
    return Workload(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        created=parse_rfc3339(meta.get("creationTimestamp")) or 0.0,
        queue_name=str(spec.get("queueName") or ""), priority=_int(spec.get("priority"), 0) or 0,
        active=spec.get("active") is not False, pod_sets=pod_sets, conditions=conditions_of(obj),
        admission=dict(admission) if isinstance(admission, Mapping) else None,
        checks=tuple(_parse_check(mapping(c)) for c in listing(status.get("admissionChecks"))),
        requeue_at=parse_rfc3339(requeue.get("requeueAt")), requeue_count=_int(requeue.get("count"), 0) or 0,
        job_uid=str(labels[JOB_UID_LABEL]) if labels.get(JOB_UID_LABEL) else None,
        subject=workload_subject(dict(obj)), problem=problem, raw=dict(obj),
    )
