"""Kueue's queue-side objects as the emulator reads them (ResourceFlavor, AdmissionCheck, ClusterQueue,
LocalQueue: parsed, immutable views), and Kueue's vocabulary. Workloads are in
:mod:`~gangscale.sim.kueue.workload`.

Parsing is lenient where Kueue's webhooks would have rejected the object (the embedded server serves Kueue's
CRDs with loose schemas): a ClusterQueue with a malformed quota or selector parses into a view that carries
the problem as text (``ClusterQueue.problem``), so the component can report it where a user looks and go on.

Quantities are canonical integers (:func:`gangscale.model.quantity.canonical`: CPU in millicores, everything
else in whole units). The vocabulary (condition types, reasons, messages, event reasons) is Kueue v1beta2's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangscale.model.quantity import QuantityError, canonical
from gangscale.model.scheduling import LabelSelector, SpecError, Taint, Toleration, as_sequence, as_string_map

JSON = dict[str, Any]

#: Field manager of every status write (Kueue's admission and workload controller writes use it).
FIELD_MANAGER = "kueue-admission"
#: The label Kueue's job integrations put on a Workload with the owning job's UID.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

# Workload condition types.
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
#: ClusterQueue / AdmissionCheck condition type.
ACTIVE = "Active"

# Admission check states.
CHECK_PENDING = "Pending"
CHECK_READY = "Ready"
CHECK_RETRY = "Retry"
CHECK_REJECTED = "Rejected"

# Queueing strategies and withinClusterQueue preemption policies.
STRICT_FIFO = "StrictFIFO"
BEST_EFFORT_FIFO = "BestEffortFIFO"
NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
PREEMPTION_POLICIES = (NEVER, LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY)

# Reasons (conditions, events).
REASON_PENDING = "Pending"
REASON_INADMISSIBLE = "Inadmissible"
REASON_QUOTA_RESERVED = "QuotaReserved"
REASON_ADMITTED = "Admitted"
REASON_PREEMPTED = "Preempted"
REASON_IN_CLUSTER_QUEUE = "InClusterQueue"
REASON_ADMISSION_CHECK = "AdmissionCheck"
REASON_DEACTIVATED = "Deactivated"
REASON_BACKOFF_FINISHED = "BackoffFinished"
REASON_ADMISSION_CHECK_REJECTED = "AdmissionCheckRejected"

# ClusterQueue Active condition (reason, message) pairs.
CQ_READY = ("Ready", "Can admit new workloads")
CQ_FLAVOR_NOT_FOUND = "FlavorNotFound"
CQ_CHECK_NOT_FOUND = "AdmissionCheckNotFound"
CQ_CHECK_INACTIVE = "AdmissionCheckInactive"
CQ_INVALID = "Invalid"  # not an upstream reason: upstream's webhook rejects such a queue

NAMESPACE_MISMATCH = "Workload namespace doesn't match ClusterQueue selector"
QUOTA_RESERVED_MESSAGE = "Quota reserved in ClusterQueue {cq}"
ADMITTED_MESSAGE = "The workload is admitted"
BACKOFF_FINISHED_MESSAGE = "The workload backoff was finished"
DEACTIVATED_MESSAGE = "The workload is deactivated"
RESET_MESSAGE = "Reset to Pending after eviction. Previously: {state}"
PREEMPTION_MESSAGE = ("Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) "
                      "due to prioritization in the ClusterQueue")


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def listing(raw: object) -> list[Any]:
    return list(raw) if isinstance(raw, list) else []


def conditions_of(obj: Mapping[str, Any]) -> dict[str, JSON]:
    """``status.conditions`` by type (the last one wins if a type repeats)."""
    out: dict[str, JSON] = {}
    for cond in listing(mapping(obj.get("status")).get("conditions")):
        if isinstance(cond, Mapping) and isinstance(cond.get("type"), str):
            out[cond["type"]] = dict(cond)
    return out


def is_true(conditions: Mapping[str, JSON], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


# --- ResourceFlavor, AdmissionCheck, LocalQueue --------------------------------------------------------------

@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


def parse_flavor(obj: Mapping[str, Any]) -> Flavor:
    spec = mapping(obj.get("spec"))
    name = str(meta_of(obj).get("name", ""))
    try:
        labels = as_string_map(spec.get("nodeLabels"), "spec.nodeLabels")
        taints = tuple(Taint.parse(t, f"spec.nodeTaints[{i}]")
                       for i, t in enumerate(as_sequence(spec.get("nodeTaints"), "spec.nodeTaints")))
        tolerations = tuple(Toleration.parse(t, f"spec.tolerations[{i}]")
                            for i, t in enumerate(as_sequence(spec.get("tolerations"), "spec.tolerations")))
    except SpecError:
        # A flavor Kueue's webhook would have refused: usable by name, without placement constraints.
        return Flavor(name)
    return Flavor(name, labels, taints, tolerations)


def check_is_active(obj: Mapping[str, Any]) -> bool:
    """An AdmissionCheck counts as active when its ``Active`` condition is True (its controller sets it)."""
    return is_true(conditions_of(obj), ACTIVE)


@dataclass(frozen=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str


def parse_local_queue(obj: Mapping[str, Any]) -> LocalQueue:
    meta = meta_of(obj)
    return LocalQueue(str(meta.get("namespace", "")), str(meta.get("name", "")),
                      str(mapping(obj.get("spec")).get("clusterQueue") or ""))


# --- ClusterQueue ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FlavorQuotas:
    """One flavor of a resource group: resource -> nominal quota."""

    name: str
    nominal: Mapping[str, int]


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True)
class CheckRule:
    """``spec.admissionChecksStrategy.admissionChecks[]``: a check, and the flavors it runs for (empty: all)."""

    name: str
    on_flavors: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterQueue:
    name: str
    groups: tuple[ResourceGroup, ...] = ()
    strategy: str = BEST_EFFORT_FIFO
    within_cluster_queue: str = NEVER
    checks: tuple[CheckRule, ...] = ()
    #: None is upstream's null selector, which admits no namespace; an empty selector admits all.
    namespace_selector: LabelSelector | None = None
    #: What makes the spec unusable (a quota that is not a quantity, an unknown policy), if anything.
    problem: str | None = None
    raw: JSON = field(default_factory=dict, compare=False, repr=False)

    def group_for(self, resource: str) -> ResourceGroup | None:
        return next((g for g in self.groups if resource in g.covered), None)

    @property
    def flavor_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.name for g in self.groups for f in g.flavors))

    def nominal(self, flavor: str, resource: str) -> int:
        for group in self.groups:
            for quotas in group.flavors:
                if quotas.name == flavor:
                    return quotas.nominal.get(resource, 0)
        return 0

    def checks_for(self, flavors: set[str]) -> tuple[str, ...]:
        """The checks a Workload assigned ``flavors`` needs (a rule with ``onFlavors`` runs only for those)."""
        return tuple(rule.name for rule in self.checks if not rule.on_flavors or flavors & set(rule.on_flavors))


def _parse_groups(spec: Mapping[str, Any]) -> tuple[ResourceGroup, ...]:
    groups = []
    for i, raw_group in enumerate(listing(spec.get("resourceGroups"))):
        group = mapping(raw_group)
        covered = tuple(str(r) for r in listing(group.get("coveredResources")))
        flavors = []
        for j, raw_flavor in enumerate(listing(group.get("flavors"))):
            flv = mapping(raw_flavor)
            nominal: dict[str, int] = {}
            for k, raw_res in enumerate(listing(flv.get("resources"))):
                res = mapping(raw_res)
                where = f"spec.resourceGroups[{i}].flavors[{j}].resources[{k}].nominalQuota"
                try:
                    nominal[str(res.get("name"))] = canonical(str(res.get("name")), res.get("nominalQuota", 0))
                except QuantityError as exc:
                    raise SpecError(where, str(exc)) from None
            flavors.append(FlavorQuotas(str(flv.get("name", "")), nominal))
        groups.append(ResourceGroup(covered, tuple(flavors)))
    return tuple(groups)


def parse_cluster_queue(obj: Mapping[str, Any]) -> ClusterQueue:
    name = str(meta_of(obj).get("name", ""))
    spec = mapping(obj.get("spec"))
    strategy = spec.get("queueingStrategy") or BEST_EFFORT_FIFO
    policy = mapping(spec.get("preemption")).get("withinClusterQueue") or NEVER
    rules = tuple(CheckRule(str(mapping(r).get("name", "")),
                            tuple(str(f) for f in listing(mapping(r).get("onFlavors"))))
                  for r in listing(mapping(spec.get("admissionChecksStrategy")).get("admissionChecks")))
    try:
        groups = _parse_groups(spec)
        raw_selector = spec.get("namespaceSelector")
        selector = None if raw_selector is None else LabelSelector.parse(raw_selector, "spec.namespaceSelector")
    except SpecError as exc:
        return ClusterQueue(name, checks=rules, problem=str(exc), raw=dict(obj))
    problem = None
    if strategy not in (STRICT_FIFO, BEST_EFFORT_FIFO):
        problem = f"spec.queueingStrategy: unsupported value {strategy!r}"
    elif policy not in PREEMPTION_POLICIES:
        problem = f"spec.preemption.withinClusterQueue: unsupported value {policy!r}"
    return ClusterQueue(name, groups, str(strategy), str(policy), rules, selector, problem, raw=dict(obj))
