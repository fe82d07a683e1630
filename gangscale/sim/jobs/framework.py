"""Kueue's job framework (``pkg/controller/jobframework``) as pure functions: a job's Workload, what the job
reconciler does next, and the pod template changes of starting and stopping a job.

Reproduced from upstream:

- Workload name ``<lowercased kind>-<job name>-<5 hex>``: the prefix cut to 247 characters, the suffix the
  first 5 hex digits of SHA-1 over ``Kind\\nGroup\\nname\\nuid`` (``GetWorkloadNameForOwnerWithGVK``).
- Workload metadata: label ``kueue.x-k8s.io/job-uid``, the job's ``provreq.kueue.x-k8s.io/*`` annotations,
  a controller ownerReference to the job, finalizer ``kueue.x-k8s.io/resource-in-use``
  (``jobframework.NewWorkload``); spec: ``queueName`` from the job's queue label, the kind's pod sets (with
  their ``topologyRequest``, :mod:`~gangscale.sim.jobs.kinds`), ``priority`` (the WorkloadPriorityClass
  ``value`` named by ``kueue.x-k8s.io/priority-class``, else 0) and ``priorityClassRef``.
- The reconciler's order (``ReconcileGenericJob``): a finished Workload ends it, once its finalizer is
  removed; a Workload being deleted stops the job and loses the finalizer; a finished job gets
  ``Finished=True`` (reason ``Succeeded``/``Failed``, the job's own message); no Workload → suspend the job and
  create one; then the Workload's ``PodsReady`` condition (``generatePodsReadyCondition``: ``False/
  WaitForStart`` until admitted and ready, ``True/Started`` or ``Recovered``, ``False/WaitForRecovery``;
  manager ``kueue-job-controller-PodsReady``), written for every job because Kueue v0.19.2's configuration
  defaults ``waitForPodsReady`` to present; an evicted Workload, or a running job whose Workload is not
  admitted, stops the job; a suspended job whose Workload is admitted starts. Workloads being deleted whose job
  is gone lose the finalizer too (``finalizeWorkloads``).
- Start (``RunWithPodSetsInfo`` with ``getPodSetsInfoFromStatus``): per pod set, annotation
  ``kueue.x-k8s.io/workload``, labels ``kueue.x-k8s.io/podset``, ``kueue.x-k8s.io/local-queue-name`` and
  ``kueue.x-k8s.io/cluster-queue-name`` (when a DNS-1123 label), the ResourceFlavor ``nodeLabels`` (as
  nodeSelector) and ``tolerations`` of the flavors assigned in ``status.admission``, plus every admission
  check's ``podSetUpdates`` for it (labels, annotations, nodeSelector, tolerations), merged into the template;
  a key set twice to different values is a permanent error and the Workload finishes with reason
  ``FailedToStart``. Stop (``RestorePodSetsInfo``): labels, annotations, nodeSelector, tolerations and
  schedulingGates go back to the Workload's copy of the template (which is how the originals survive a
  restart); a Job keeps the Job controller's own labels.

Simplified: a job changed after its Workload was created keeps the old Workload (no equivalence check, no
re-creation); only WorkloadPriorityClass priorities (a pod ``priorityClassName`` does not set the Workload
priority); no partial admission, no prebuilt Workloads, no elastic jobs; the PodsReady timeout eviction is the
workload controller's and is not emulated (``reconcileNotReadyTimeout``, 30 minutes by default); the Workload of
a deleted job is not first marked ``Finished=True/OwnerNotFound`` (``FinishOrphanedWorkloads``) before its
finalizer goes, as the garbage collector deletes it anyway; ``FailedToStart`` messages are close to, not
exactly, upstream's.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangscale.kube.resources import WORKLOADS
from gangscale.sim.jobs.kinds import (
    JOB,
    JOB_MANAGED_LABELS,
    JOB_UID_LABEL,
    PRIORITY_CLASS_LABEL,
    PROVREQ_ANNOTATION_PREFIX,
    QUEUE_LABEL,
    KindInfo,
    controller_ref,
    finished,
    get_in,
    is_suspended,
    meta,
    pod_sets,
    set_in,
    spec,
    status,
    true_condition,
    uid,
)
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]

FIELD_MANAGER = "kueue-job-controller"
#: Field manager of the PodsReady condition (``workload.SetConditionAndUpdate``: ``<JobControllerName>-<type>``).
PODS_READY_MANAGER = "kueue-job-controller-PodsReady"
#: Kueue's finalizer on the Workloads its job framework creates (``jobframework.NewWorkload``).
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
#: What starting a job puts on its pod templates (``getPodSetsInfoFromStatus``; ``pkg/constants``).
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
HASH_LENGTH = 5
MAX_NAME = 253
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def workload_name(info: KindInfo, name: str, job_uid: str) -> str:
    prefix = f"{info.kind.lower()}-{name}"[:MAX_NAME - 1 - HASH_LENGTH]
    digest = hashlib.sha1(f"{info.kind}\n{info.group}\n{name}\n{job_uid}".encode()).hexdigest()
    return f"{prefix}-{digest[:HASH_LENGTH]}"


def queue_name(job: JSON) -> str:
    return str((meta(job).get("labels") or {}).get(QUEUE_LABEL, ""))


def priority_class(job: JSON) -> str | None:
    name = (meta(job).get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    return str(name) if name else None


def build_workload(info: KindInfo, job: JSON, priority: int) -> JSON:
    """The Workload Kueue creates for ``job``; ``priority`` is the resolved WorkloadPriorityClass value."""
    m = meta(job)
    job_uid = uid(job)
    labels = {JOB_UID_LABEL: job_uid} if len(job_uid) <= 63 and _LABEL_VALUE.match(job_uid) else {}
    annotations = {k: v for k, v in (m.get("annotations") or {}).items() if k.startswith(PROVREQ_ANNOTATION_PREFIX)}
    wl_meta: JSON = {"name": workload_name(info, str(m.get("name", "")), job_uid),
                     "namespace": m.get("namespace", ""), "ownerReferences": [controller_ref(job, info)]}
    if labels:
        wl_meta["labels"] = labels
    if annotations:
        wl_meta["annotations"] = annotations
    wl_meta["finalizers"] = [RESOURCE_IN_USE]
    wl_spec: JSON = {
        "queueName": queue_name(job),
        "podSets": [{"name": ps.name, "count": ps.count, "template": ps.template,
                     **({"topologyRequest": dict(ps.topology)} if ps.topology else {})}
                    for ps in pod_sets(info.kind, job)],
        "priority": priority,
        "active": True,
    }
    pc = priority_class(job)
    if pc:
        wl_spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": pc}
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": wl_meta, "spec": wl_spec}


# --- what to do next -------------------------------------------------------------------------------------

class Step(enum.Enum):
    NONE = "none"
    CREATE = "create"          # suspend the job if needed, create its Workload
    FINISH = "finish"          # write Finished=True on the Workload
    START = "start"            # merge admission into the templates, unsuspend
    STOP = "stop"              # suspend, restore the templates (no write if nothing differs)
    UPDATE_QUEUE = "queue"     # the job moved to another LocalQueue while pending
    FINALIZE = "finalize"      # the Workload finished: drop Kueue's finalizer from it
    RELEASE = "release"        # the Workload is being deleted: stop the job, then drop the finalizer
    PODS_READY = "podsready"   # write the Workload's PodsReady condition


def has_finalizer(wl: JSON) -> bool:
    return RESOURCE_IN_USE in (meta(wl).get("finalizers") or [])


def decide(kind: str, job: JSON, wl: JSON | None, pods_ready: bool | None = None) -> Step:
    """The job reconciler's next step (``JobReconciler.ReconcileGenericJob``, in its order). ``pods_ready`` is the
    job's ``PodsReady()``; None leaves the PodsReady condition alone."""
    if wl is not None and true_condition(wl, "Finished"):
        return Step.FINALIZE if has_finalizer(wl) else Step.NONE
    if wl is not None and meta(wl).get("deletionTimestamp"):
        return Step.RELEASE
    if finished(kind, job) is not None:
        return Step.FINISH if wl is not None else Step.NONE
    if wl is None:
        return Step.CREATE
    evicted = true_condition(wl, "Evicted") is not None
    if evicted and not is_suspended(job):
        # Upstream writes PodsReady first (step 5), but there an evicted Workload stays Admitted until its job has
        # stopped, so PodsReady does not change before the stop. The emulated Kueue releases the quota (and
        # Admitted) in the eviction's own write; stopping first keeps the stop as prompt as upstream's.
        return Step.STOP
    if pods_ready is not None and pods_ready_condition(wl, pods_ready) is not None:
        return Step.PODS_READY
    if evicted:
        return Step.STOP
    admitted = true_condition(wl, "Admitted") is not None
    if is_suspended(job):
        if admitted:
            return Step.START
        if not status(wl).get("admission") and spec(wl).get("queueName") != queue_name(job):
            return Step.UPDATE_QUEUE
        return Step.STOP
    return Step.NONE if admitted else Step.STOP


_NOT_READY = "Not all pods are ready or succeeded"
_RECOVERING = "At least one pod has failed, waiting for recovery"
_READY = "All pods reached readiness and the workload is running"


def pods_ready_condition(wl: JSON, pods_ready: bool) -> tuple[str, str, str] | None:
    """``generatePodsReadyCondition``: (status, reason, message) of the PodsReady condition the Workload should
    have, or None when it has one of that status and reason already (``HasConditionWithTypeAndReason``).

    Written for every job because Kueue v0.19.2's configuration API defaults ``waitForPodsReady`` to present
    (``apis/config/v1beta2/defaults.go``), which ``waitforpodsready.Enabled`` reads as on."""
    current = next((c for c in status(wl).get("conditions") or []
                    if isinstance(c, dict) and c.get("type") == "PodsReady"), None)
    if true_condition(wl, "Admitted") is None:
        wanted = ("False", "WaitForStart", _NOT_READY)
    elif pods_ready:
        recovered = current is not None and current.get("reason") in ("WaitForRecovery", "Recovered")
        wanted = ("True", "Recovered" if recovered else "Started", _READY)
    elif current is None:
        wanted = ("False", "WaitForStart", _NOT_READY)
    elif current.get("status") == "True" or current.get("reason") == "WaitForRecovery":
        wanted = ("False", "WaitForRecovery", _RECOVERING)
    else:
        wanted = ("False", "WaitForStart", _NOT_READY)
    if current is not None and (current.get("status"), current.get("reason")) == wanted[:2]:
        return None
    return wanted


def pods_ready_patch(wl: JSON, wanted: tuple[str, str, str], now: float) -> JSON:
    """The SSA body ``workload.SetConditionAndUpdate`` sends (manager :data:`PODS_READY_MANAGER`): the condition
    alone, its transition time now."""
    m = meta(wl)
    cond = {"type": "PodsReady", "status": wanted[0], "reason": wanted[1], "message": wanted[2],
            "lastTransitionTime": rfc3339(now), "observedGeneration": int(m.get("generation", 1) or 1)}
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": m.get("name", ""), "namespace": m.get("namespace", "")},
            "status": {"conditions": [cond]}}


def finished_patch(wl: JSON, message: str, success: bool, now: float, reason: str | None = None) -> JSON:
    """The SSA body for ``Finished=True`` on the Workload's status."""
    m = meta(wl)
    cond = {"type": "Finished", "status": "True", "reason": reason or ("Succeeded" if success else "Failed"),
            "message": message, "lastTransitionTime": rfc3339(now),
            "observedGeneration": int(m.get("generation", 1) or 1)}
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": m.get("name", ""), "namespace": m.get("namespace", "")},
            "status": {"conditions": [cond]}}


# --- admission into templates ----------------------------------------------------------------------------

class AdmissionError(Exception):
    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass
class PodSetInfo:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[JSON] = field(default_factory=list)

    def merge(self, other: PodSetInfo) -> None:
        for what, mine, theirs in (("labels", self.labels, other.labels),
                                   ("annotations", self.annotations, other.annotations),
                                   ("nodeSelector", self.node_selector, other.node_selector)):
            _merge_map(what, mine, theirs)
        _add_tolerations(self.tolerations, other.tolerations)


def _conflict(what: str, k: str, a: Any, b: Any) -> AdmissionError:
    return AdmissionError(f"invalid admission check PodSetUpdate: conflict for {what}: "
                          f"conflict for key={k}, value1={a}, value2={b}", permanent=True)


def _merge_map(what: str, into: dict[str, str], extra: Mapping[str, Any]) -> None:
    for k, v in extra.items():
        if k in into and into[k] != v:
            raise _conflict(what, k, into[k], v)
        into[k] = str(v)


def _add_tolerations(into: list[JSON], extra: list[JSON]) -> None:
    for t in extra:
        if t not in into:
            into.append(copy.deepcopy(t))


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _dict_list(value: Any) -> list[JSON]:
    return [dict(t) for t in value if isinstance(t, dict)] if isinstance(value, list) else []


def admission_infos(wl: JSON, flavors: Mapping[str, JSON]) -> dict[str, PodSetInfo]:
    """Per pod set: what admission adds (flavor node labels/tolerations, admission checks' podSetUpdates)."""
    infos: dict[str, PodSetInfo] = {}
    admission = status(wl).get("admission") or {}
    cq = str(admission.get("clusterQueue") or "")
    for psa in admission.get("podSetAssignments") or []:
        info = PodSetInfo(str(psa.get("name", "main")))
        # getPodSetsInfoFromStatus: the Workload's name (TopologyAwareScheduling, on by default), the pod set,
        # and the queues (AssignQueueLabelsForPods, on by default; the ClusterQueue only if a DNS-1123 label)
        info.annotations[WORKLOAD_ANNOTATION] = str(meta(wl).get("name", ""))
        info.labels[PODSET_LABEL] = info.name
        info.labels[LOCAL_QUEUE_LABEL] = str(spec(wl).get("queueName") or "")
        if len(cq) <= 63 and _DNS1123_LABEL.match(cq):
            info.labels[CLUSTER_QUEUE_LABEL] = cq
        for flavor_name in sorted({str(f) for f in (psa.get("flavors") or {}).values()}):
            flavor = flavors.get(flavor_name)
            if flavor is None:
                raise AdmissionError(f'ResourceFlavor "{flavor_name}" not found', permanent=False)
            info.node_selector.update(_str_map(spec(flavor).get("nodeLabels")))
            _add_tolerations(info.tolerations, _dict_list(spec(flavor).get("tolerations")))
        infos[info.name] = info
    for ps in spec(wl).get("podSets") or []:
        if str(ps.get("name", "main")) not in infos:
            raise AdmissionError(f"no admission for pod set {ps.get('name', 'main')}", permanent=False)
    for check in status(wl).get("admissionChecks") or []:
        for update in check.get("podSetUpdates") or []:
            target = infos.get(str(update.get("name", "")))
            if target is not None:
                target.merge(PodSetInfo(target.name, _str_map(update.get("labels")),
                                        _str_map(update.get("annotations")),
                                        _str_map(update.get("nodeSelector")),
                                        _dict_list(update.get("tolerations"))))
    return infos


def merge_into(template: JSON, info: PodSetInfo) -> JSON:
    """``podset.Merge``: additive; a key the template already sets to another value is a conflict."""
    out = copy.deepcopy(template)
    for what, part, extra in (("labels", "metadata", info.labels), ("annotations", "metadata", info.annotations),
                              ("nodeSelector", "spec", info.node_selector)):
        if extra:
            holder = out.setdefault(part, {})
            current = _str_map(holder.get(what))
            _merge_map(what, current, extra)
            holder[what] = current
    if info.tolerations:
        tspec = out.setdefault("spec", {})
        tolerations = _dict_list(tspec.get("tolerations"))
        _add_tolerations(tolerations, info.tolerations)
        tspec["tolerations"] = tolerations
    return out


_RESTORED: tuple[tuple[str, str], ...] = (("metadata", "labels"), ("metadata", "annotations"),
                                          ("spec", "nodeSelector"), ("spec", "tolerations"),
                                          ("spec", "schedulingGates"))


def restore(template: JSON, original: JSON, keep_labels: tuple[str, ...] = ()) -> JSON:
    """``RestorePodSpec``: the scheduling directives back to ``original``'s; ``keep_labels`` stay as they are."""
    out = copy.deepcopy(template)
    for part, name in _RESTORED:
        value = copy.deepcopy((original.get(part) or {}).get(name))
        if part == "metadata" and name == "labels":
            kept = {k: v for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
                    if k in keep_labels}
            value = {**(value or {}), **kept}
        holder = out.get(part)
        if value:
            out.setdefault(part, {})[name] = value
        elif isinstance(holder, dict):
            holder.pop(name, None)
            if not holder and part not in original:  # merging created it; the original had none
                del out[part]
    return out


def started(kind_info: KindInfo, job: JSON, infos: Mapping[str, PodSetInfo]) -> JSON:
    """The job as Kueue's ``RunWithPodSetsInfo`` leaves it: templates merged, ``suspend: false``."""
    out = copy.deepcopy(job)
    for ps in pod_sets(kind_info.kind, job):
        info = infos.get(ps.name)
        if ps.path is None or info is None:
            continue
        set_in(out, ps.path, merge_into(get_in(job, ps.path) or {}, info))
    out.setdefault("spec", {})["suspend"] = False
    return out


def stopped(kind_info: KindInfo, job: JSON, wl: JSON | None) -> JSON:
    """The job suspended, its templates restored from the Workload (left alone when there is none)."""
    out = copy.deepcopy(job)
    out.setdefault("spec", {})["suspend"] = True
    if wl is None:
        return out
    originals = {str(ps.get("name", "main")): ps.get("template") or {} for ps in spec(wl).get("podSets") or []}
    keep = JOB_MANAGED_LABELS if kind_info.kind == JOB.kind else ()
    for ps in pod_sets(kind_info.kind, job):
        if ps.path is None or ps.name not in originals:
            continue
        set_in(out, ps.path, restore(get_in(job, ps.path) or {}, originals[ps.name], keep))
    return out


def merge_patch_diff(old: Any, new: Any) -> JSON:
    """An RFC 7386 merge patch taking ``old`` to ``new`` (lists replaced whole, removed keys as null)."""
    out: JSON = {}
    if not isinstance(old, dict) or not isinstance(new, dict):
        return out
    for k in sorted(old.keys() | new.keys()):
        if k not in new:
            out[k] = None
        elif k not in old:
            out[k] = copy.deepcopy(new[k])
        elif old[k] != new[k]:
            if isinstance(old[k], dict) and isinstance(new[k], dict):
                out[k] = merge_patch_diff(old[k], new[k])
            else:
                out[k] = copy.deepcopy(new[k])
    return out
