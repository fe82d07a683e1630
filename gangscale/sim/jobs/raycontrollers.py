"""The KubeRay operator's RayCluster and RayJob controllers, as pure functions.

RayCluster: a head pod ``<cluster>-head-<5 random>`` and, per worker group, ``replicas * numOfHosts`` worker
pods ``<cluster>-<group>-worker-<5 random>`` (prefixes cut to 50 characters and lowercased, as KubeRay's
``PodGenerateName``), built from the group's template with the labels ``ray.io/cluster``,
``ray.io/node-type`` (``head``/``worker``), ``ray.io/group`` (``headgroup`` for the head),
``ray.io/is-ray-node: yes``, ``ray.io/identifier``, ``app.kubernetes.io/{name: kuberay, created-by:
kuberay-operator}``, the multi-host indexing labels (``ray.io/worker-group-replica-index`` on every worker;
``ray.io/worker-group-replica-name`` and ``ray.io/replica-host-index`` when ``numOfHosts > 1``) and a
controller ownerReference. A suspended RayCluster has its pods deleted. Status: ``state`` (``ready`` once
every pod runs, ``suspended``), ``desiredWorkerReplicas``, ``availableWorkerReplicas``,
``readyWorkerReplicas``.

RayJob: while not suspended, a RayCluster ``<rayjob>-<5 random>`` (name recorded first in
``status.rayClusterName``) with the RayJob's labels plus ``ray.io/originated-from-crd: RayJob`` and
``ray.io/originated-from-cr-name``, its spec the RayJob's ``rayClusterSpec``, owned by the RayJob.
``jobDeploymentStatus`` goes ``Initializing`` → ``Running`` (every cluster pod runs; ``jobStatus:
RUNNING``) → ``Complete`` (``jobStatus: SUCCEEDED``, message "Job finished successfully.", ``endTime``),
at which point the cluster is deleted (``shutdownAfterJobFinishes``). Suspending deletes the cluster and
resets the status to ``Suspended``.

Simplified: the worker count is ``(replicas or 1) * numOfHosts`` (no min/max clamping, no autoscaler, no
``workersToDelete``, no per-group suspend); no head Service, no Ray processes; a RayJob's submission (the
submitter Job of ``K8sJobMode``, HTTP submission) is not modelled: the job "runs" for its simulated
duration once the cluster is up.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable
from typing import Any

from gangscale.clock import rfc3339
from gangscale.sim.jobs.controllers import is_deleting, is_terminal, phase, pod_ready, random_name
from gangscale.sim.jobs.kinds import (
    RAYCLUSTER,
    RAYJOB,
    as_int,
    controller_ref,
    is_suspended,
    meta,
    spec,
    status,
)

JSON = dict[str, Any]

RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
RAY_IS_NODE = "ray.io/is-ray-node"
RAY_IDENTIFIER = "ray.io/identifier"
REPLICA_INDEX = "ray.io/worker-group-replica-index"
REPLICA_NAME = "ray.io/worker-group-replica-name"
HOST_INDEX = "ray.io/replica-host-index"
ORIGINATED_FROM_CRD = "ray.io/originated-from-crd"
ORIGINATED_FROM_NAME = "ray.io/originated-from-cr-name"
HEAD_GROUP = "headgroup"
JOB_SUCCEEDED_MESSAGE = "Job finished successfully."
_POD_PREFIX_MAX = 50


def _labels(pod: JSON) -> dict[str, str]:
    return {str(k): str(v) for k, v in (meta(pod).get("labels") or {}).items()}


def _ray_pod(rc: JSON, template: JSON, name: str, extra: dict[str, str]) -> JSON:
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), **extra,
              "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
    pod_meta: JSON = {"name": name, "namespace": meta(rc).get("namespace", ""), "labels": labels,
                      "ownerReferences": [controller_ref(rc, RAYCLUSTER)]}
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
            "spec": copy.deepcopy(template.get("spec") or {})}


def _generate(prefix: str, node_type: str, rng: random.Random, taken: set[str]) -> str:
    return random_name(f"{prefix[:_POD_PREFIX_MAX]}-{node_type}-".lower(), rng, taken, max_prefix=63)


def raycluster_pods_to_create(rc: JSON, pods: Iterable[JSON], rng: random.Random, taken: set[str]) -> list[JSON]:
    """The head and worker pods a running RayCluster lacks."""
    if is_suspended(rc) or is_deleting(rc):
        return []
    name = str(meta(rc).get("name", ""))
    live = [p for p in pods if not is_deleting(p) and not is_terminal(p)]
    out: list[JSON] = []
    base = {RAY_CLUSTER: name, RAY_IS_NODE: "yes"}
    if not any(_labels(p).get(RAY_NODE_TYPE) == "head" for p in live):
        head = (spec(rc).get("headGroupSpec") or {}).get("template") or {}
        out.append(_ray_pod(rc, head, _generate(name, "head", rng, taken),
                            {**base, RAY_NODE_TYPE: "head", RAY_GROUP: HEAD_GROUP, RAY_IDENTIFIER: f"{name}-head"}))
    for group in spec(rc).get("workerGroupSpecs") or []:
        group_name = str(group.get("groupName", ""))
        replicas = as_int(group.get("replicas"), 1)
        hosts = max(as_int(group.get("numOfHosts"), 1), 1)
        mine = [p for p in live if _labels(p).get(RAY_NODE_TYPE) == "worker"
                and _labels(p).get(RAY_GROUP) == group_name]
        existing = {(_labels(p).get(REPLICA_INDEX), _labels(p).get(HOST_INDEX, "0")) for p in mine}
        replica_names = {_labels(p).get(REPLICA_INDEX): _labels(p).get(REPLICA_NAME) for p in mine}
        for r in range(replicas):
            replica_name = replica_names.get(str(r)) or f"{group_name}-{random_name('', rng, set())}"
            for h in range(hosts):
                if (str(r), str(h)) in existing:
                    continue
                extra = {**base, RAY_NODE_TYPE: "worker", RAY_GROUP: group_name,
                         RAY_IDENTIFIER: f"{name}-worker", REPLICA_INDEX: str(r)}
                if hosts > 1:
                    extra.update({REPLICA_NAME: replica_name, HOST_INDEX: str(h)})
                out.append(_ray_pod(rc, group.get("template") or {},
                                    _generate(f"{name}-{group_name}", "worker", rng, taken), extra))
    return out


def raycluster_pods_to_delete(rc: JSON, pods: Iterable[JSON]) -> list[JSON]:
    if not is_suspended(rc):
        return []
    return [p for p in pods if not is_deleting(p)]


def desired_workers(rc: JSON) -> int:
    total = 0
    for group in spec(rc).get("workerGroupSpecs") or []:
        total += as_int(group.get("replicas"), 1) * max(as_int(group.get("numOfHosts"), 1), 1)
    return total


def raycluster_status(rc: JSON, pods: Iterable[JSON]) -> JSON:
    out = copy.deepcopy(status(rc))
    live = [p for p in pods if not is_deleting(p) and not is_terminal(p)]
    workers = [p for p in live if _labels(p).get(RAY_NODE_TYPE) == "worker"]
    head_running = any(_labels(p).get(RAY_NODE_TYPE) == "head" and phase(p) == "Running" for p in live)
    running = sum(1 for p in workers if phase(p) == "Running")
    desired = desired_workers(rc)
    out.update({"desiredWorkerReplicas": desired, "availableWorkerReplicas": running,
                "readyWorkerReplicas": sum(1 for p in workers if pod_ready(p))})
    if is_suspended(rc):
        out["state"] = "suspended"
    elif head_running and running >= desired:
        out["state"] = "ready"
    elif out.get("state") == "suspended":
        out.pop("state")
    return out


# --- RayJob -------------------------------------------------------------------------------------------------

def rayjob_cluster(rayjob: JSON, name: str) -> JSON:
    rj_name = str(meta(rayjob).get("name", ""))
    labels = {**(meta(rayjob).get("labels") or {}), ORIGINATED_FROM_NAME: rj_name, ORIGINATED_FROM_CRD: "RayJob"}
    return {"apiVersion": RAYCLUSTER.api_version, "kind": "RayCluster",
            "metadata": {"name": name, "namespace": meta(rayjob).get("namespace", ""), "labels": labels,
                         "ownerReferences": [controller_ref(rayjob, RAYJOB)]},
            "spec": copy.deepcopy(spec(rayjob).get("rayClusterSpec") or {})}


def rayjob_cluster_name(rayjob: JSON, rng: random.Random, taken: set[str]) -> str:
    return random_name(f"{meta(rayjob).get('name', '')}-", rng, taken, max_prefix=47)


def rayjob_finished(rayjob: JSON) -> bool:
    return status(rayjob).get("jobDeploymentStatus") in ("Complete", "Failed")


def rayjob_status(rayjob: JSON, cluster_name: str | None, gang_running: bool, now: float) -> JSON:
    """The status KubeRay would write now (a finished RayJob keeps its status)."""
    out = copy.deepcopy(status(rayjob))
    if rayjob_finished(rayjob):
        return out
    if is_suspended(rayjob):
        for gone in ("rayClusterName", "jobStatus", "startTime", "endTime", "message", "rayClusterStatus"):
            out.pop(gone, None)
        out["jobDeploymentStatus"] = "Suspended"
        return out
    if cluster_name:
        out["rayClusterName"] = cluster_name
    out.setdefault("startTime", rfc3339(now))
    if gang_running or out.get("jobDeploymentStatus") == "Running":
        out.update({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    else:
        out["jobDeploymentStatus"] = "Initializing"
    return out


def rayjob_completed_status(rayjob: JSON, now: float) -> JSON:
    out = copy.deepcopy(status(rayjob))
    out.update({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": rfc3339(now),
                "message": JOB_SUCCEEDED_MESSAGE})
    return out
