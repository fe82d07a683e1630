"""ProvisioningRequests -> gangs (provreq-spec §1.4).

A PR of a served class becomes one :class:`Gang`: each ``podSets[i]`` is ``count`` pods built from the
PodTemplate ``podTemplateRef.name`` in the PR's namespace, as the cluster-autoscaler builds its in-memory pods.
Templates are resolved through a lookup function so that the caller decides where they come from (the
reflector cache, then a live GET for a template the cache has not seen yet).

Problems that make the PR unusable raise :class:`PodSetError` with the message the ``Failed`` condition
carries; the missing-template message keeps upstream's wording (``missing pod templates, ...``) so that tools
matching on it keep working.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.model.gang import Gang, PodSet
from gangscale.model.interning import Interned
from gangscale.model.pod import PodDemand, pod_demand
from gangscale.model.scheduling import SpecError
from gangscale.model.tiers import TierPolicy
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]

ATOMIC_CLASS = "atomic-scale-up.gangscale.io"
CHECK_CAPACITY_CLASS = "check-capacity.gangscale.io"
UPSTREAM_ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
UPSTREAM_CHECK_CAPACITY_CLASS = "check-capacity.autoscaling.x-k8s.io"
DEFAULT_CLASSES = (ATOMIC_CLASS, CHECK_CAPACITY_CLASS)
#: Classes that only check (and book) existing capacity and never scale a pool.
CHECK_CAPACITY_CLASSES = frozenset({CHECK_CAPACITY_CLASS, UPSTREAM_CHECK_CAPACITY_CLASS})

CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
DEPRECATED_CONSUME_ANNOTATION = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"

# Parameters gangscale reads (spec.parameters; Kueue fills them from the ProvisioningRequestConfig and from
# ``provreq.kueue.x-k8s.io/<name>`` annotations on the job).
NO_RETRY = "noRetry"
PROCESSOR_INSTANCE = "processorInstance"
#: ``Requested``: Provisioned=True once the provider granted every unit (upstream best-effort behaviour);
#: ``Ready`` (default): once every new node is registered and Ready.
PROVISIONED_WHEN = "provisionedWhen"
#: Seconds the capacity stays booked after Provisioned=True, overriding the class default.
BOOKING_SECONDS = "bookingSeconds"
#: Let the gang's nodes span zones (default: one zone).
SPREAD_ZONES = "spreadZones"
#: The capacity tiers the gang may use, in order, with waits (``spot:600,on-demand``), and whether it may span them.
CAPACITY_TIERS = "capacityTiers"
MIX_CAPACITY_TIERS = "mixCapacityTiers"

WORKLOAD_KIND = "Workload"


class PodSetError(Exception):
    """The PR cannot be turned into pods: the ``Failed=True/FailedToCreatePods`` message."""


@dataclass(frozen=True, slots=True)
class ProvReq:
    """The fields of a ProvisioningRequest that gangscale reads, parsed once."""

    namespace: str
    name: str
    uid: str
    generation: int
    class_name: str
    parameters: Mapping[str, str]
    created: float
    obj: JSON

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pod_sets(self) -> list[JSON]:
        return list(((self.obj.get("spec") or {}).get("podSets")) or [])

    @property
    def pods(self) -> int:
        return sum(int(ps.get("count") or 0) for ps in self.pod_sets if isinstance(ps, Mapping))

    @property
    def status(self) -> JSON:
        return self.obj.get("status") or {}

    @property
    def resource_version(self) -> str:
        return str((self.obj.get("metadata") or {}).get("resourceVersion", ""))

    def flag(self, name: str) -> bool:
        return str(self.parameters.get(name, "")).strip().lower() == "true"

    def workload_owner_uid(self) -> str | None:
        """The uid of the controlling Workload, if any."""
        for ref in (self.obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == WORKLOAD_KIND and str(ref.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
                return str(ref.get("uid", "")) or None
        return None

    def workload_owner(self) -> str | None:
        """The name of the controlling Workload (Kueue creates PRs with one), if any."""
        for ref in (self.obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == WORKLOAD_KIND and str(ref.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
                return str(ref.get("name", "")) or None
        return None


def parse(obj: JSON) -> ProvReq:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    params = spec.get("parameters") or {}
    return ProvReq(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 1), class_name=str(spec.get("provisioningClassName", "")),
        parameters={str(k): str(v) for k, v in params.items()} if isinstance(params, Mapping) else {},
        created=parse_rfc3339(meta.get("creationTimestamp")) or 0.0, obj=obj)


def template_names(pr: ProvReq) -> list[str]:
    return [str(((ps or {}).get("podTemplateRef") or {}).get("name", "")) for ps in pr.pod_sets]


#: What is kept of a PodTemplate (:func:`template_demand`): the pod it describes, or why it cannot be read.
TemplateDemand = PodDemand | SpecError
#: Equal demands kept as one object: the templates of a job's many requests describe the same pod.
_shared_demand: Interned[PodDemand] = Interned()


def template_demand(obj: JSON) -> TemplateDemand:
    """The PodTemplate's pod as the planner reads it (the transform of the PodTemplates reflector): a template's
    containers, env, volumes and the rest are not kept; a template that cannot be read keeps its error, which the PRs
    that use it report."""
    try:
        demand = pod_demand(obj.get("template") or {}, "template")
    except SpecError as exc:
        return exc
    return _shared_demand(demand)


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """What is kept of a Kueue Workload (the transform of the Workloads reflector): its ``spec.priority`` and the
    RayCluster that owns it, if one does."""

    priority: int
    raycluster: str | None


def workload_record(obj: JSON) -> WorkloadRecord:
    value = (obj.get("spec") or {}).get("priority")
    raycluster = next((str(ref.get("name")) for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
                       if isinstance(ref, dict) and ref.get("kind") == "RayCluster" and ref.get("controller")), None)
    return WorkloadRecord(int(value) if isinstance(value, int) and not isinstance(value, bool) else 0, raycluster)


def build_gang(pr: ProvReq, template: Callable[[str], TemplateDemand | None], *, priority: int = 0,
               may_scale: bool = True, tiers: TierPolicy | None = None) -> Gang:
    """The PR's gang from its templates' demands (:func:`template_demand`; None: no such template); raises
    :class:`PodSetError` when a template is missing or unusable."""
    names = template_names(pr)
    if not names:
        raise PodSetError("spec.podSets is empty: there are no pods to provision")
    templates = {name: template(name) for name in dict.fromkeys(names)}
    missing = [name for name, found in templates.items() if found is None]
    if missing:
        raise PodSetError(f"missing pod templates, {len(templates)} pod templates were referenced, "
                          f"{len(missing)} templates were missing: {', '.join(missing)}")
    pod_sets = []
    for i, (raw, name) in enumerate(zip(pr.pod_sets, names, strict=True)):
        count = raw.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise PodSetError(f"spec.podSets[{i}].count must be a whole number of at least 1, got {count!r}")
        demand = templates[name]
        assert demand is not None
        if isinstance(demand, SpecError):
            raise PodSetError(f"invalid pod template {name} (spec.podSets[{i}]): {demand}") from demand
        # The template's name is what a user recognises in messages; two podSets sharing a template are told
        # apart by their index.
        pod_sets.append(PodSet(name if names.count(name) == 1 else f"{name}[{i}]", count, demand))
    return Gang(pr.key, tuple(pod_sets), priority=priority, created=pr.created,
                spread_zones=pr.flag(SPREAD_ZONES), may_scale=may_scale, tiers=tiers)


def consumed_pr(pod: JSON) -> str | None:
    """The name of the PR a pod consumes (new annotation first, then the deprecated one), or None."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(CONSUME_ANNOTATION) or annotations.get(DEPRECATED_CONSUME_ANNOTATION) or None
