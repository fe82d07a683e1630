"""The four job kinds Kueue manages here (batch/v1 Job, JobSet, RayCluster, RayJob), seen the way Kueue's
per-integration adapters see them: their pod sets (name, count, pod template and where that template lives in
the object), whether they are suspended, and whether they have finished.

Pod set facts follow Kueue's integrations: a Job is one pod set ``main`` of ``min(parallelism, completions)``
pods with the Job controller's own labels removed from the template except ``batch.kubernetes.io/job-name``
(``pkg/controller/jobs/job/job_controller.go`` ``cleanLabels``) and ``topologyRequest.podIndexLabel:
batch.kubernetes.io/job-completion-index``; a JobSet has one pod set per replicated job, named after it, of
``replicas * min(parallelism, completions)`` pods, with ``topologyRequest`` ``podIndexLabel`` as a Job's,
``subGroupIndexLabel: jobset.sigs.k8s.io/job-index`` and ``subGroupCount`` = the replicas
(``jobset_controller.go`` ``PodSets``; both only because feature gate ``TopologyAwareScheduling`` is on by
default, through ``jobframework.NewPodSetTopologyRequest``, whose TAS annotations are not read here); a
RayCluster has ``head`` (1 pod)
and one pod set per worker group, named by the lowercased ``groupName``, of ``(replicas or 1) * numOfHosts``
pods; a RayJob has the pod sets of its ``rayClusterSpec`` plus, in ``K8sJobMode`` (the default), a
``submitter`` pod set of 1 whose template is ``submitterPodTemplate`` or KubeRay's default submitter.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.config import parse_duration
from gangscale.kube.resources import JOBS, JOBSETS, RAYCLUSTERS, RAYJOBS
from gangscale.kube.transport import Resource

JSON = dict[str, Any]
Path = tuple[str | int, ...]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PROVREQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
#: The simulation's own knob: how long a job's work takes once all its pods run ("90s", "2h"; none: forever).
DURATION_ANNOTATION = "sim.gangscale.io/duration"

# Labels the batch Job controller manages on pod templates (Kueue's ``managedLabels``).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_MANAGED_LABELS = ("job-name", "controller-uid", JOB_NAME_LABEL, "batch.kubernetes.io/controller-uid")
#: What Kueue's ``cleanLabels`` drops from the Workload's copy of a Job's template: all but the job name.
JOB_CLEANED_LABELS = tuple(label for label in JOB_MANAGED_LABELS if label != JOB_NAME_LABEL)
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"

HEAD_POD_SET = "head"
SUBMITTER_POD_SET = "submitter"
MAIN_POD_SET = "main"


@dataclass(frozen=True)
class KindInfo:
    kind: str
    resource: Resource

    @property
    def group(self) -> str:
        return self.resource.group

    @property
    def api_version(self) -> str:
        return self.resource.api_version


JOB = KindInfo("Job", JOBS)
JOBSET = KindInfo("JobSet", JOBSETS)
RAYCLUSTER = KindInfo("RayCluster", RAYCLUSTERS)
RAYJOB = KindInfo("RayJob", RAYJOBS)
KINDS: dict[str, KindInfo] = {k.kind: k for k in (JOB, JOBSET, RAYCLUSTER, RAYJOB)}


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    template: JSON
    #: Where the template lives in the job object; None for a template the object does not hold (KubeRay's
    #: default submitter), which admission leaves alone.
    path: Path | None
    #: Whether this pod set's pods exist in the simulation (the RayJob submitter's do not).
    has_pods: bool = True
    #: The Workload pod set's ``topologyRequest`` (None: not set).
    topology: JSON | None = None


# --- small JSON helpers -----------------------------------------------------------------------------------

def get_in(obj: Any, path: Path) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, list) or key >= len(obj):
                return None
            obj = obj[key]
        else:
            if not isinstance(obj, dict):
                return None
            obj = obj.get(key)
    return obj


def set_in(obj: JSON, path: Path, value: Any) -> None:
    cur: Any = obj
    for key in path[:-1]:
        cur = cur[key] if isinstance(key, int) else cur.setdefault(key, {})
    last = path[-1]
    cur[last] = value


def meta(obj: JSON) -> JSON:
    out = obj.get("metadata")
    return out if isinstance(out, dict) else {}


def spec(obj: JSON) -> JSON:
    out = obj.get("spec")
    return out if isinstance(out, dict) else {}


def status(obj: JSON) -> JSON:
    out = obj.get("status")
    return out if isinstance(out, dict) else {}


def key(obj: JSON) -> tuple[str, str]:
    m = meta(obj)
    return str(m.get("namespace", "")), str(m.get("name", ""))


def uid(obj: JSON) -> str:
    return str(meta(obj).get("uid", ""))


def as_int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def true_condition(obj: JSON, cond_type: str) -> JSON | None:
    for c in status(obj).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == cond_type and c.get("status") == "True":
            return c
    return None


def controller_ref(owner: JSON, info: KindInfo) -> JSON:
    return {"apiVersion": info.api_version, "kind": info.kind, "name": meta(owner).get("name", ""),
            "uid": uid(owner), "controller": True, "blockOwnerDeletion": True}


# --- pod sets per kind ------------------------------------------------------------------------------------

def job_pod_count(job_spec: JSON) -> int:
    """Kueue's ``podsCount``: parallelism (default 1), capped by completions when set."""
    count = as_int(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    if completions is not None:
        count = min(count, as_int(completions, count))
    return max(count, 0)


def worker_group_pods(group: JSON) -> int:
    count = as_int(group.get("replicas"), 1)
    hosts = as_int(group.get("numOfHosts"), 1)
    return count * hosts if hosts > 1 else count


def _template(obj: JSON, path: Path) -> JSON:
    found = get_in(obj, path)
    return copy.deepcopy(found) if isinstance(found, dict) else {}


def _ray_pod_sets(obj: JSON, base: Path) -> list[PodSet]:
    cluster = get_in(obj, base) or {}
    out = [PodSet(HEAD_POD_SET, 1, _template(obj, (*base, "headGroupSpec", "template")),
                  (*base, "headGroupSpec", "template"))]
    for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
        path: Path = (*base, "workerGroupSpecs", i, "template")
        out.append(PodSet(str(group.get("groupName", "")).lower(), worker_group_pods(group), _template(obj, path),
                          path))
    return out


def default_submitter_template(rayjob: JSON) -> JSON:
    """KubeRay's default submitter pod (as Kueue accounts for it): the head's image, 500m/200Mi requests."""
    containers = get_in(rayjob, ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers"))
    image = containers[0].get("image", "") if isinstance(containers, list) and containers else ""
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": image,
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}}]}}


def pod_sets(kind: str, obj: JSON) -> list[PodSet]:
    if kind == JOB.kind:
        template = _template(obj, ("spec", "template"))
        tmeta = template.get("metadata")
        labels = tmeta.get("labels") if isinstance(tmeta, dict) else None
        if isinstance(tmeta, dict) and isinstance(labels, dict):
            for label in JOB_CLEANED_LABELS:
                labels.pop(label, None)
            if not labels:  # an emptied Go map is omitted
                del tmeta["labels"]
        return [PodSet(MAIN_POD_SET, job_pod_count(spec(obj)), template, ("spec", "template"),
                       topology={"podIndexLabel": COMPLETION_INDEX})]
    if kind == JOBSET.kind:
        out = []
        for i, rjob in enumerate(spec(obj).get("replicatedJobs") or []):
            job_spec = get_in(rjob, ("template", "spec")) or {}
            path: Path = ("spec", "replicatedJobs", i, "template", "spec", "template")
            replicas = as_int(rjob.get("replicas"), 1)
            out.append(PodSet(str(rjob.get("name", "")), replicas * job_pod_count(job_spec), _template(obj, path),
                              path, topology={"podIndexLabel": COMPLETION_INDEX,
                                              "subGroupIndexLabel": JOBSET_JOB_INDEX, "subGroupCount": replicas}))
        return out
    if kind == RAYCLUSTER.kind:
        return _ray_pod_sets(obj, ("spec",))
    if kind == RAYJOB.kind:
        out = _ray_pod_sets(obj, ("spec", "rayClusterSpec"))
        if spec(obj).get("submissionMode") in (None, "", "K8sJobMode"):
            submitter = spec(obj).get("submitterPodTemplate")
            if isinstance(submitter, dict):
                out.append(PodSet(SUBMITTER_POD_SET, 1, copy.deepcopy(submitter), ("spec", "submitterPodTemplate"),
                                  has_pods=False))
            else:
                out.append(PodSet(SUBMITTER_POD_SET, 1, default_submitter_template(obj), None, has_pods=False))
        return out
    raise ValueError(f"unknown job kind {kind!r}")


def pods_ready(kind: str, obj: JSON, cluster: JSON | None = None) -> bool:
    """Kueue's ``PodsReady()`` per integration: a Job's ``ready + succeeded >= podsCount``; a JobSet's replicated
    jobs all ready or succeeded; a RayCluster's ``state: ready``; a RayJob's ``rayClusterStatus.state: ready``
    (``cluster`` is its RayCluster, whose status KubeRay copies there; the emulated KubeRay does not copy it)."""
    st = status(obj)
    if kind == JOB.kind:
        return as_int(st.get("ready"), 0) + as_int(st.get("succeeded"), 0) >= job_pod_count(spec(obj))
    if kind == JOBSET.kind:
        replicas = sum(as_int(r.get("replicas"), 1) for r in spec(obj).get("replicatedJobs") or [])
        done = sum(as_int(r.get("ready"), 0) + as_int(r.get("succeeded"), 0)
                   for r in st.get("replicatedJobsStatus") or [] if isinstance(r, dict))
        return replicas == done
    if kind == RAYCLUSTER.kind:
        return st.get("state") == "ready"
    if kind == RAYJOB.kind:
        cluster_state = (st.get("rayClusterStatus") or {}).get("state") or status(cluster or {}).get("state")
        return cluster_state == "ready"
    return False


def expected_pods(kind: str, obj: JSON) -> int:
    """How many pods the job runs at once in the simulation (its gang)."""
    return sum(ps.count for ps in pod_sets(kind, obj) if ps.has_pods)


# --- state per kind ---------------------------------------------------------------------------------------

def is_suspended(obj: JSON) -> bool:
    return bool(spec(obj).get("suspend"))


def finished(kind: str, obj: JSON) -> tuple[str, bool] | None:
    """Kueue's ``Finished()``: (message, success) once the job is over, else None. A RayCluster never is."""
    if kind == JOB.kind:
        for cond_type, success in (("Complete", True), ("Failed", False)):
            c = true_condition(obj, cond_type)
            if c is not None:
                return str(c.get("message", "")), success
        return None
    if kind == JOBSET.kind:
        for cond_type, success in (("Completed", True), ("Failed", False)):
            c = true_condition(obj, cond_type)
            if c is not None:
                return str(c.get("message", "")), success
        return None
    if kind == RAYJOB.kind:
        st = status(obj)
        if st.get("jobDeploymentStatus") in ("Complete", "Failed"):
            return str(st.get("message", "")), st.get("jobStatus") == "SUCCEEDED"
        return None
    return None


def duration_of(obj: JSON) -> float | None:
    """The simulated run time from the duration annotation (None, or unparsable: runs until stopped)."""
    raw = (meta(obj).get("annotations") or {}).get(DURATION_ANNOTATION)
    if raw is None:
        return None
    try:
        return parse_duration(str(raw))
    except ValueError:
        return None


def owner_kind_is(obj: JSON, kinds: Sequence[str]) -> bool:
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") in kinds:
            return True
    return False


def is_top_level(kind: str, obj: JSON) -> bool:
    """A Job run by a JobSet, or a RayCluster run by a RayJob, belongs to its parent."""
    if kind == JOB.kind:
        return not owner_kind_is(obj, (JOBSET.kind,))
    if kind == RAYCLUSTER.kind:
        return not owner_kind_is(obj, (RAYJOB.kind,))
    return True


def is_managed(kind: str, obj: JSON) -> bool:
    """Kueue manages a top-level job that names a LocalQueue."""
    return bool((meta(obj).get("labels") or {}).get(QUEUE_LABEL)) and is_top_level(kind, obj)
