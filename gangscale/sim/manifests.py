"""The Kubernetes objects a scenario stands for: Kueue's setup and each workload's job, as a user writes them.

``kueue_objects`` gives ResourceFlavors, WorkloadPriorityClasses, ClusterQueues (one resource group per set
of covered resources, flavors in the order written), LocalQueues and, when the scenario asks for
provisioning, the ProvisioningRequestConfig and AdmissionCheck that point Kueue at gangscale's class. With
``baseline=True`` the ClusterQueues carry no admission check: the classic setup where Kueue admits on quota
alone and a per-pod autoscaler reacts to pending pods.

``workload_manifest`` expands a workload's shorthand into a Job, JobSet, RayJob or RayCluster with the
labels Kueue's job integrations read (``kueue.x-k8s.io/queue-name``, ``kueue.x-k8s.io/priority-class``) and
the run time the job emulator reads (annotation ``sim.gangscale.io/duration``). A RayCluster is created
suspended only when it names a queue (Kueue's webhook would suspend it). ``autoscaling: true`` adds
``enableInTreeAutoscaling``, ``autoscalerOptions`` (``upscalingMode: Default``, the workload's
``idleTimeoutSeconds``) and, per worker group, ``scaleStrategy: {}`` (see :func:`_worker_group`); worker
groups get ``minReplicas`` (default 0), ``maxReplicas`` (default: ``replicas`` without autoscaling, the
CRD's 2147483647 with it) and ``idleTimeoutSeconds`` when set.
"""

from __future__ import annotations

import copy
from typing import Any

from gangscale.sim.scenario import (
    CHECK_NAME,
    DURATION_ANNOTATION,
    PRC_NAME,
    PRIORITY_LABEL,
    PROVISIONING_CONTROLLER,
    QUEUE_LABEL,
    ClusterQueue,
    PodSet,
    Scenario,
    Workload,
)

JSON = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
#: The CRD's default ``maxReplicas``.
INT32_MAX = 2**31 - 1


def kueue_objects(scenario: Scenario, *, baseline: bool = False) -> list[JSON]:
    k = scenario.kueue
    out: list[JSON] = []
    for flavor in k.flavors:
        spec: JSON = {"nodeLabels": dict(flavor.node_labels)}
        if flavor.tolerations:
            spec["tolerations"] = copy.deepcopy(flavor.tolerations)
        out.append({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": flavor.name}, "spec": spec})
    for pc in k.priority_classes:
        out.append({"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": pc.name},
                    "value": pc.value, "description": pc.description})
    checks = [] if baseline or k.provisioning is None else [CHECK_NAME]
    if checks and k.provisioning is not None:
        prov = k.provisioning
        prc: JSON = {"provisioningClassName": prov.class_name, "parameters": dict(prov.parameters),
                     "retryStrategy": {"backoffLimitCount": prov.retry.backoff_limit_count,
                                       "backoffBaseSeconds": prov.retry.backoff_base_seconds,
                                       "backoffMaxSeconds": prov.retry.backoff_max_seconds}}
        if prov.managed_resources:
            prc["managedResources"] = list(prov.managed_resources)
        out.append({"apiVersion": KUEUE, "kind": "ProvisioningRequestConfig", "metadata": {"name": PRC_NAME},
                    "spec": prc})
        out.append({"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": CHECK_NAME},
                    "spec": {"controllerName": PROVISIONING_CONTROLLER,
                             "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                            "name": PRC_NAME}}})
    for cq in k.cluster_queues:
        out.append(cluster_queue(cq, checks))
        for lq in cq.local_queues:
            namespace, _, name = lq.rpartition("/")
            out.append({"apiVersion": KUEUE, "kind": "LocalQueue",
                        "metadata": {"name": name, "namespace": namespace or "default"},
                        "spec": {"clusterQueue": cq.name}})
    out.extend(copy.deepcopy(k.objects))
    return out


def cluster_queue(cq: ClusterQueue, checks: list[str]) -> JSON:
    groups: dict[tuple[str, ...], list[JSON]] = {}
    for flavor, quota in cq.quota.items():
        covered = tuple(quota)
        groups.setdefault(covered, []).append(
            {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]})
    spec: JSON = {
        "namespaceSelector": {},
        "queueingStrategy": cq.queueing_strategy,
        "resourceGroups": [{"coveredResources": list(covered), "flavors": flavors}
                           for covered, flavors in groups.items()],
        "preemption": {"withinClusterQueue": cq.preemption},
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": cq.name}, "spec": spec}


def workload_manifest(w: Workload) -> JSON:
    if w.manifest is not None:
        obj = copy.deepcopy(w.manifest)
    else:
        obj = {"Job": _job, "JobSet": _jobset, "RayJob": _rayjob, "RayCluster": _raycluster}[w.kind](w)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("name", w.name)
    meta.setdefault("namespace", w.namespace)
    labels = meta.setdefault("labels", {})
    if w.queue:
        labels[QUEUE_LABEL] = w.queue
    if w.priority_class:
        labels[PRIORITY_LABEL] = w.priority_class
    annotations = meta.setdefault("annotations", {})
    annotations.update(w.annotations)
    if w.duration is not None:
        annotations[DURATION_ANNOTATION] = f"{w.duration:g}s"
    return obj


def pod_template(ps: PodSet, app: str) -> JSON:
    resources: JSON = {}
    if ps.requests:
        resources["requests"] = {k: str(v) for k, v in ps.requests.items()}
    if ps.limits:
        resources["limits"] = {k: str(v) for k, v in ps.limits.items()}
    spec: JSON = {"restartPolicy": "Never",
                  "containers": [{"name": "main", "image": "registry.example/train:latest", "resources": resources}]}
    if ps.node_selector:
        spec["nodeSelector"] = dict(ps.node_selector)
    if ps.tolerations:
        spec["tolerations"] = copy.deepcopy(ps.tolerations)
    return {"metadata": {"labels": {"app": app}}, "spec": spec}


def _job(w: Workload) -> JSON:
    ps = w.pod_sets[0]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {},
            "spec": {"parallelism": ps.parallelism, "completions": ps.parallelism, "backoffLimit": 0,
                     "suspend": True, "template": pod_template(ps, w.name)}}


def _jobset(w: Workload) -> JSON:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {},
            "spec": {"suspend": True, "failurePolicy": {"maxRestarts": 4}, "replicatedJobs": [
                {"name": ps.name, "replicas": ps.replicas,
                 "template": {"spec": {"parallelism": ps.parallelism, "completions": ps.parallelism,
                                       "backoffLimit": 0, "template": pod_template(ps, w.name)}}}
                for ps in w.pod_sets]}}


def _ray_cluster_spec(w: Workload) -> JSON:
    head = next((ps for ps in w.pod_sets if ps.head), None)
    spec: JSON = {"headGroupSpec": {"rayStartParams": {}, "template": pod_template(head, w.name) if head else
                                    pod_template(PodSet(name="head", requests={"cpu": "1"}), w.name)},
                  "workerGroupSpecs": []}
    if w.autoscaling:
        spec["enableInTreeAutoscaling"] = True
        options: JSON = {"upscalingMode": "Default"}
        if w.idle_timeout_seconds is not None:
            options["idleTimeoutSeconds"] = w.idle_timeout_seconds
        spec["autoscalerOptions"] = options
    for ps in w.pod_sets:
        if not ps.head:
            spec["workerGroupSpecs"].append(_worker_group(ps, w))
    return spec


def _worker_group(ps: PodSet, w: Workload) -> JSON:
    low = ps.min_replicas or 0
    if w.autoscaling:
        # Unset: the group starts at its minimum and may grow as far as the CRD's default allows.
        replicas = ps.replicas if "replicas" in ps.model_fields_set else low
        high = ps.max_replicas if ps.max_replicas is not None else INT32_MAX
    else:
        replicas = ps.replicas
        high = ps.max_replicas if ps.max_replicas is not None else max(ps.replicas, 1)
    group: JSON = {"groupName": ps.name, "replicas": replicas, "minReplicas": low, "maxReplicas": high,
                   "numOfHosts": ps.num_of_hosts, "rayStartParams": {}, "template": pod_template(ps, w.name)}
    if ps.idle_timeout_seconds is not None:
        group["idleTimeoutSeconds"] = ps.idle_timeout_seconds
    if w.autoscaling:
        # The Ray autoscaler writes workersToDelete with a JSON patch `replace`. kube-apiserver (evanphx/json-patch
        # v4) also replaces a missing member, but the embedded API server refuses to, so the member is written.
        group["scaleStrategy"] = {}
    return group


def _rayjob(w: Workload) -> JSON:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {},
            "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True, "suspend": True,
                     "rayClusterSpec": _ray_cluster_spec(w)}}


def _raycluster(w: Workload) -> JSON:
    # Kueue's webhook suspends a queued RayCluster; one without a queue runs as created.
    suspend = {"suspend": True} if w.queue else {}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {},
            "spec": {**suspend, **_ray_cluster_spec(w)}}
