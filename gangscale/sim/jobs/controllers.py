"""The batch Job controller and the JobSet controller, as pure functions: which pods (or child Jobs) to
create, with their real names, labels and owners, and the status each controller writes.

Job controller (kube-controller-manager): a running Job has ``min(parallelism, completions)`` pods named by
its ``generateName`` pattern, ``<job>-<5 random>`` (``<job>-<index>-<5 random>`` for ``Indexed`` Jobs, which
also get the ``batch.kubernetes.io/job-completion-index`` label and annotation and the ``<job>-<index>``
hostname); pods carry the template's labels (so the selector labels ``batch.kubernetes.io/job-name``,
``job-name``, ``controller-uid``... the API server put there) and a controller ownerReference. A suspended
Job has its running pods deleted. Status: ``active``, ``ready``, ``succeeded``, ``startTime`` (reset while
suspended), ``Suspended`` True/False (``JobSuspended``/``JobResumed``), and on completion
``SuccessCriteriaMet`` and ``Complete`` (``CompletionsReached``, "Reached expected number of succeeded
pods") with ``completionTime``.

JobSet controller: one child Job ``<jobset>-<replicatedJob>-<index>`` per replica, owned by the JobSet,
labelled and annotated with ``jobset.sigs.k8s.io/{jobset-name, replicatedjob-name, replicatedjob-replicas,
global-replicas, job-index, job-key, job-global-index, restart-attempt}`` (pod template too), with the JobSet
webhook's defaults (``completionMode: Indexed``, ``restartPolicy: OnFailure``, DNS hostnames: the pods'
``subdomain`` is the JobSet name). Status: ``replicatedJobsStatus``, ``Suspended``
(``SuspendedJobs``/``ResumeJobs``) and ``Completed`` (``AllJobsCompleted``, "jobset completed
successfully") with ``terminalState: Completed``.

Simplified: no pod failures, retries, backoffLimit, pod finalizers (``batch.kubernetes.io/job-tracking``) or
headless Services; a Job whose ``completions`` exceed ``parallelism`` completes after its first wave; a
suspended JobSet has its child Jobs deleted (upstream suspends them and updates their templates on resume;
the pods end the same way); no JobSet restarts, failure/success/startup policies or coordinator.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Iterable
from typing import Any

from gangscale.sim.jobs.kinds import (
    JOB,
    JOBSET,
    as_int,
    controller_ref,
    get_in,
    is_suspended,
    job_pod_count,
    meta,
    spec,
    status,
    true_condition,
)
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]

#: The alphabet of Kubernetes' ``generateName`` suffixes (``k8s.io/apimachinery/pkg/util/rand``).
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"

COMPLETE_MESSAGE = "Reached expected number of succeeded pods"
JOBSET_COMPLETE_MESSAGE = "jobset completed successfully"


def random_name(prefix: str, rng: random.Random, taken: set[str], *, max_prefix: int = 58) -> str:
    """``generateName``: the prefix (cut as the API server cuts it) and 5 random characters, unused so far."""
    while True:
        name = prefix[:max_prefix] + "".join(rng.choice(NAME_CHARS) for _ in range(5))
        if name not in taken:
            taken.add(name)
            return name


def phase(pod: JSON) -> str:
    return str(status(pod).get("phase", "Pending"))


def is_terminal(pod: JSON) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def is_deleting(obj: JSON) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def pod_ready(pod: JSON) -> bool:
    return true_condition(pod, "Ready") is not None


# --- Job ----------------------------------------------------------------------------------------------------

def job_pods_to_create(job: JSON, pods: Iterable[JSON], rng: random.Random, taken: set[str]) -> list[JSON]:
    """New pods for a running Job: the missing ones up to its pod count (nothing once it is complete)."""
    if is_suspended(job) or true_condition(job, "Complete") or is_deleting(job):
        return []
    count = job_pod_count(spec(job))
    live = [p for p in pods if not is_deleting(p) and phase(p) != "Failed"]
    name = str(meta(job).get("name", ""))
    if spec(job).get("completionMode") == "Indexed":
        have = {(meta(p).get("labels") or {}).get(COMPLETION_INDEX) for p in live}
        return [_job_pod(job, random_name(f"{name}-{i}-", rng, taken), i)
                for i in range(count) if str(i) not in have]
    return [_job_pod(job, random_name(f"{name}-", rng, taken), None) for _ in range(count - len(live))]


def _job_pod(job: JSON, name: str, index: int | None) -> JSON:
    template = get_in(job, ("spec", "template")) or {}
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    annotations = dict(tmeta.get("annotations") or {})
    pod_spec = copy.deepcopy(template.get("spec") or {})
    if index is not None:
        labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        pod_spec.setdefault("hostname", f"{meta(job).get('name', '')}-{index}")
    pod_meta: JSON = {"name": name, "namespace": meta(job).get("namespace", ""), "labels": labels,
                      "ownerReferences": [controller_ref(job, JOB)]}
    if annotations:
        pod_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def job_pods_to_delete(job: JSON, pods: Iterable[JSON]) -> list[JSON]:
    """A suspended Job's running pods."""
    if not is_suspended(job):
        return []
    return [p for p in pods if not is_deleting(p) and not is_terminal(p)]


def _job_condition(cond_type: str, state: str, reason: str, message: str, now: float) -> JSON:
    ts = rfc3339(now)
    return {"type": cond_type, "status": state, "lastProbeTime": ts, "lastTransitionTime": ts,
            "reason": reason, "message": message}


def _set_condition(conditions: list[JSON], new: JSON) -> None:
    """Replace the condition of ``new``'s type when its status changes; append it when missing."""
    for i, c in enumerate(conditions):
        if c.get("type") == new["type"]:
            if c.get("status") != new["status"]:
                conditions[i] = new
            return
    conditions.append(new)


def job_status(job: JSON, pods: Iterable[JSON], now: float) -> JSON:
    """The status the Job controller would write now."""
    pods = [p for p in pods if not is_deleting(p)]
    out = copy.deepcopy(status(job))
    conditions: list[JSON] = [dict(c) for c in out.get("conditions") or [] if isinstance(c, dict)]
    active = [p for p in pods if not is_terminal(p)]
    succeeded = sum(1 for p in pods if phase(p) == "Succeeded")
    for name, value in (("active", len(active)), ("succeeded", succeeded)):
        if value:
            out[name] = value
        else:
            out.pop(name, None)
    out["ready"] = sum(1 for p in active if pod_ready(p))
    complete = true_condition(job, "Complete") is not None
    if not complete:
        if is_suspended(job):
            out.pop("startTime", None)
            _set_condition(conditions, _job_condition("Suspended", "True", "JobSuspended", "Job suspended", now))
        else:
            out.setdefault("startTime", rfc3339(now))
            if any(c.get("type") == "Suspended" for c in conditions):
                _set_condition(conditions, _job_condition("Suspended", "False", "JobResumed", "Job resumed", now))
        count = job_pod_count(spec(job))
        if count > 0 and succeeded >= count and not active:
            for cond_type in ("SuccessCriteriaMet", "Complete"):
                _set_condition(conditions, _job_condition(cond_type, "True", "CompletionsReached",
                                                          COMPLETE_MESSAGE, now))
            out["completionTime"] = rfc3339(now)
    if conditions:
        out["conditions"] = conditions
    return out


# --- JobSet -------------------------------------------------------------------------------------------------

def child_job_name(jobset: str, replicated_job: str, index: int) -> str:
    return f"{jobset}-{replicated_job}-{index}"


def _replicated_jobs(js: JSON) -> list[JSON]:
    return [r for r in spec(js).get("replicatedJobs") or [] if isinstance(r, dict)]


def child_jobs(js: JSON) -> list[JSON]:
    """Every child Job the JobSet should have, in spec order."""
    rjobs = _replicated_jobs(js)
    total = sum(as_int(r.get("replicas"), 1) for r in rjobs)
    name, ns = str(meta(js).get("name", "")), str(meta(js).get("namespace", ""))
    network = spec(js).get("network") or {}
    subdomain = (network.get("subdomain") or name) if network.get("enableDNSHostnames", True) else None
    out: list[JSON] = []
    global_index = 0
    for rjob in rjobs:
        replicas = as_int(rjob.get("replicas"), 1)
        for i in range(replicas):
            job_name = child_job_name(name, str(rjob.get("name", "")), i)
            marks = {JOBSET_NAME: name, REPLICATED_JOB_NAME: str(rjob.get("name", "")),
                     RESTART_ATTEMPT: str(as_int(status(js).get("restarts"), 0)),
                     REPLICATED_JOB_REPLICAS: str(replicas), GLOBAL_REPLICAS: str(total), JOB_INDEX: str(i),
                     JOB_KEY: hashlib.sha1(f"{ns}/{job_name}".encode()).hexdigest(),
                     JOB_GLOBAL_INDEX: str(global_index + i)}
            out.append(_child_job(js, rjob, job_name, marks, subdomain))
        global_index += replicas
    return out


def _child_job(js: JSON, rjob: JSON, name: str, marks: dict[str, str], subdomain: str | None) -> JSON:
    template = copy.deepcopy(rjob.get("template") or {})
    tmeta = template.get("metadata") or {}
    job_spec = template.get("spec") or {}
    job_spec.setdefault("completionMode", "Indexed")
    job_spec["suspend"] = False
    pod_template = job_spec.setdefault("template", {})
    pod_meta = pod_template.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **marks}
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **marks}
    pod_spec = pod_template.setdefault("spec", {})
    pod_spec.setdefault("restartPolicy", "OnFailure")
    if subdomain:
        pod_spec["subdomain"] = subdomain
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": meta(js).get("namespace", ""),
                         "labels": {**(tmeta.get("labels") or {}), **marks},
                         "annotations": {**(tmeta.get("annotations") or {}), **marks},
                         "ownerReferences": [controller_ref(js, JOBSET)]},
            "spec": job_spec}


def _metav1_condition(cond_type: str, state: str, reason: str, message: str, now: float) -> JSON:
    return {"type": cond_type, "status": state, "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(now)}


def jobset_status(js: JSON, children: Iterable[JSON], now: float) -> JSON:
    """The status the JobSet controller would write now."""
    out = copy.deepcopy(status(js))
    children = [c for c in children if not is_deleting(c)]
    conditions: list[JSON] = [dict(c) for c in out.get("conditions") or [] if isinstance(c, dict)]
    rows, total, done = [], 0, 0
    for rjob in _replicated_jobs(js):
        name = str(rjob.get("name", ""))
        jobs = [c for c in children if (meta(c).get("labels") or {}).get(REPLICATED_JOB_NAME) == name]
        per_job = job_pod_count(get_in(rjob, ("template", "spec")) or {})
        succeeded = sum(1 for j in jobs if true_condition(j, "Complete"))
        ready = sum(1 for j in jobs
                    if as_int(status(j).get("ready"), 0) + as_int(status(j).get("succeeded"), 0) >= per_job)
        rows.append({"name": name, "active": sum(1 for j in jobs if as_int(status(j).get("active"), 0) > 0),
                     "failed": 0, "ready": ready, "succeeded": succeeded,
                     "suspended": sum(1 for j in jobs if is_suspended(j))})
        total += as_int(rjob.get("replicas"), 1)
        done += succeeded
    out["replicatedJobsStatus"] = rows
    if true_condition(js, "Completed") is None:
        if is_suspended(js):
            _set_condition(conditions, _metav1_condition("Suspended", "True", "SuspendedJobs",
                                                         "jobset is suspended", now))
        elif any(c.get("type") == "Suspended" for c in conditions):
            _set_condition(conditions, _metav1_condition("Suspended", "False", "ResumeJobs",
                                                         "jobset is resumed", now))
        if total > 0 and done >= total:
            _set_condition(conditions, _metav1_condition("Completed", "True", "AllJobsCompleted",
                                                         JOBSET_COMPLETE_MESSAGE, now))
            out["terminalState"] = "Completed"
    if conditions:
        out["conditions"] = conditions
    return out
