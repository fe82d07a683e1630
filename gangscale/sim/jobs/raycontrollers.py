"""The KubeRay operator's RayCluster and RayJob controllers, as pure functions.

RayCluster pods: a head pod ``<cluster>-head-<5 random>`` and worker pods ``<cluster>-<group>-worker-<5
random>`` (prefixes cut to 50 characters and lowercased, as KubeRay's ``PodGenerateName``), built from the
group's template with the labels ``ray.io/cluster``, ``ray.io/node-type`` (``head``/``worker``),
``ray.io/group`` (``headgroup`` for the head), ``ray.io/is-ray-node: yes``, ``ray.io/identifier``,
``app.kubernetes.io/{name: kuberay, created-by: kuberay-operator}``, the multi-host indexing labels
(``ray.io/worker-group-replica-index`` on every worker; ``ray.io/worker-group-replica-name`` and
``ray.io/replica-host-index`` when ``numOfHosts > 1``) and a controller ownerReference.

Worker reconciliation per group, in the operator's order (ray-accel-spec §1.6):

- desired pods = 0 when the cluster or the group is suspended, else ``clamp(replicas, minReplicas,
  maxReplicas) * numOfHosts`` (``GetWorkerGroupDesiredReplicas``; unset ``replicas`` means ``minReplicas``,
  unset ``minReplicas`` 0, unset ``maxReplicas`` 2147483647);
- a suspended cluster loses every pod, a suspended group its workers;
- every pod named in ``scaleStrategy.workersToDelete`` is deleted, whatever ``replicas`` says; the operator
  never clears the list (the Ray autoscaler does);
- single-host groups: missing pods are created; surplus pods are deleted (the first ones in name order)
  only when ``enableInTreeAutoscaling`` is off: with it on, the autoscaler alone chooses victims;
- multi-host groups (``numOfHosts > 1``): pods are grouped into replicas by
  ``ray.io/worker-group-replica-name``; a replica with fewer than ``numOfHosts`` live pods is deleted whole
  ("incomplete multi-host replica"), ``workersToDelete`` expands to the whole replica of each pod named,
  missing replicas are created ``numOfHosts`` pods at a time (a new replica name, the lowest free replica
  index), surplus replicas are deleted whole (highest index first) only without autoscaling.

Status: ``state`` (``ready`` once the head and every desired worker run, ``suspended``),
``desiredWorkerReplicas`` (sum of desired pods), ``minWorkerReplicas`` / ``maxWorkerReplicas`` (sums of
``minReplicas * numOfHosts`` / ``maxReplicas * numOfHosts`` over groups not suspended, capped at int32 as the
schema requires), ``availableWorkerReplicas`` (workers running), ``readyWorkerReplicas`` (workers Ready).

RayJob: while not suspended, a RayCluster ``<rayjob>-<5 random>`` (name recorded first in
``status.rayClusterName``) with the RayJob's labels plus ``ray.io/originated-from-crd: RayJob`` and
``ray.io/originated-from-cr-name``, its spec the RayJob's ``rayClusterSpec``, owned by the RayJob.
``jobDeploymentStatus`` goes ``Initializing`` → ``Running`` (every cluster pod runs; ``jobStatus:
RUNNING``) → ``Complete`` (``jobStatus: SUCCEEDED``, message "Job finished successfully.", ``endTime``),
at which point the cluster is deleted (``shutdownAfterJobFinishes``). Suspending deletes the cluster and
resets the status to ``Suspended``.

Simplified: no unhealthy-pod deletion (pods never fail here; a terminal pod is simply replaced), no scale
expectations (the emulator re-reads everything each pass), no head Service, headless Service or Ray
processes, no validation of the spec (KubeRay refuses a suspended group under autoscaling; here the group is
just emptied), the status has no conditions or resource totals; a RayJob's submission (the submitter Job of
``K8sJobMode``, HTTP submission) is not modelled: the job "runs" for its simulated duration once the cluster
is up. Replica names are ``<group>-<5 random>``: unique per cluster, the format is not upstream's.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

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
from gangscale.timefmt import rfc3339

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
INT32_MAX = 2**31 - 1
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


def autoscaling_enabled(rc: JSON) -> bool:
    return spec(rc).get("enableInTreeAutoscaling") is True


def num_of_hosts(group: JSON) -> int:
    return max(as_int(group.get("numOfHosts"), 1), 1)


def group_suspended(rc: JSON, group: JSON) -> bool:
    return is_suspended(rc) or group.get("suspend") is True


def group_desired_replicas(group: JSON) -> int:
    """``GetWorkerGroupDesiredReplicas`` / ``numOfHosts``: replicas clamped to [min, max] (not the suspend)."""
    low = max(as_int(group.get("minReplicas"), 0), 0)
    high = as_int(group.get("maxReplicas"), INT32_MAX)
    replicas = group.get("replicas")
    wanted = low if replicas is None else as_int(replicas, low)
    return max(low, min(wanted, high))


def group_desired_pods(rc: JSON, group: JSON) -> int:
    return 0 if group_suspended(rc, group) else group_desired_replicas(group) * num_of_hosts(group)


def workers_to_delete(group: JSON) -> list[str]:
    names = ((group.get("scaleStrategy") or {}).get("workersToDelete")) or []
    return [str(n) for n in names]


def _live(pods: Iterable[JSON]) -> list[JSON]:
    return [p for p in pods if not is_deleting(p) and not is_terminal(p)]


def group_pods(pods: Iterable[JSON], group_name: str) -> list[JSON]:
    return [p for p in pods if _labels(p).get(RAY_NODE_TYPE) == "worker" and _labels(p).get(RAY_GROUP) == group_name]


@dataclass(frozen=True)
class PodPlan:
    """What the operator does in one reconcile pass: pods to delete, then pods to create."""

    delete: tuple[JSON, ...] = ()
    create: tuple[JSON, ...] = ()


def raycluster_pod_plan(rc: JSON, pods: Iterable[JSON], rng: random.Random, taken: set[str]) -> PodPlan:
    """The pods a RayCluster's operator deletes and creates now (see the module docstring)."""
    if is_deleting(rc):
        return PodPlan()
    live = _live(pods)
    if is_suspended(rc):
        return PodPlan(delete=tuple(live))
    name = str(meta(rc).get("name", ""))
    delete: list[JSON] = []
    create: list[JSON] = []
    if not any(_labels(p).get(RAY_NODE_TYPE) == "head" for p in live):
        head = (spec(rc).get("headGroupSpec") or {}).get("template") or {}
        create.append(_ray_pod(rc, head, _generate(name, "head", rng, taken),
                               {RAY_CLUSTER: name, RAY_IS_NODE: "yes", RAY_NODE_TYPE: "head", RAY_GROUP: HEAD_GROUP,
                                RAY_IDENTIFIER: f"{name}-head"}))
    for group in spec(rc).get("workerGroupSpecs") or []:
        mine = group_pods(live, str(group.get("groupName", "")))
        if group_suspended(rc, group):
            delete.extend(mine)
            continue
        reconcile = _multi_host if num_of_hosts(group) > 1 else _single_host
        gone, new = reconcile(rc, group, mine, rng, taken)
        delete.extend(gone)
        create.extend(new)
    return PodPlan(tuple(delete), tuple(create))


def _worker(rc: JSON, group: JSON, rng: random.Random, taken: set[str], index: int,
            replica: tuple[str, int] | None = None) -> JSON:
    name, group_name = str(meta(rc).get("name", "")), str(group.get("groupName", ""))
    extra = {RAY_CLUSTER: name, RAY_IS_NODE: "yes", RAY_NODE_TYPE: "worker", RAY_GROUP: group_name,
             RAY_IDENTIFIER: f"{name}-worker", REPLICA_INDEX: str(index)}
    if replica is not None:
        extra.update({REPLICA_NAME: replica[0], HOST_INDEX: str(replica[1])})
    return _ray_pod(rc, group.get("template") or {}, _generate(f"{name}-{group_name}", "worker", rng, taken), extra)


def _free_indexes(used: Iterable[str]) -> Iterator[int]:
    taken = {int(i) for i in used if i.isdigit()}
    i = 0
    while True:
        if i not in taken:
            yield i
        i += 1


def _single_host(rc: JSON, group: JSON, pods: list[JSON], rng: random.Random,
                 taken: set[str]) -> tuple[list[JSON], list[JSON]]:
    listed = set(workers_to_delete(group))
    delete = [p for p in pods if meta(p).get("name") in listed]
    remaining = [p for p in pods if meta(p).get("name") not in listed]
    diff = group_desired_pods(rc, group) - len(remaining)
    if diff < 0 and not autoscaling_enabled(rc):
        delete.extend(remaining[:-diff])
    indexes = _free_indexes(_labels(p).get(REPLICA_INDEX, "") for p in remaining)
    return delete, [_worker(rc, group, rng, taken, next(indexes)) for _ in range(diff)]


def _replicas(pods: list[JSON]) -> dict[str, list[JSON]]:
    """Pods by replica name; a pod without one is a replica of its own (and an incomplete one)."""
    out: dict[str, list[JSON]] = {}
    for pod in pods:
        out.setdefault(_labels(pod).get(REPLICA_NAME) or f"pod:{meta(pod).get('name')}", []).append(pod)
    return out


def _multi_host(rc: JSON, group: JSON, pods: list[JSON], rng: random.Random,
                taken: set[str]) -> tuple[list[JSON], list[JSON]]:
    hosts = num_of_hosts(group)
    listed = set(workers_to_delete(group))
    delete: list[JSON] = []
    kept: list[list[JSON]] = []
    for members in _replicas(pods).values():
        if len(members) < hosts or any(meta(p).get("name") in listed for p in members):
            delete.extend(members)
        else:
            kept.append(members)
    kept.sort(key=lambda members: (as_int(_labels(members[0]).get(REPLICA_INDEX), 0),
                                   _labels(members[0]).get(REPLICA_NAME, "")))
    diff = group_desired_pods(rc, group) // hosts - len(kept)
    if diff < 0 and not autoscaling_enabled(rc):
        for members in kept[diff:]:
            delete.extend(members)
        kept = kept[:diff]
    create: list[JSON] = []
    indexes = _free_indexes(_labels(members[0]).get(REPLICA_INDEX, "") for members in kept)
    replica_names = {_labels(p).get(REPLICA_NAME, "") for p in pods}
    for _ in range(diff):
        index = next(indexes)
        replica = random_name(f"{group.get('groupName', '')}-", rng, replica_names)
        create.extend(_worker(rc, group, rng, taken, index, (replica, host)) for host in range(hosts))
    return delete, create


def desired_workers(rc: JSON) -> int:
    return sum(group_desired_pods(rc, g) for g in spec(rc).get("workerGroupSpecs") or [])


def raycluster_status(rc: JSON, pods: Iterable[JSON]) -> JSON:
    out = copy.deepcopy(status(rc))
    live = _live(pods)
    workers = [p for p in live if _labels(p).get(RAY_NODE_TYPE) == "worker"]
    head_running = any(_labels(p).get(RAY_NODE_TYPE) == "head" and phase(p) == "Running" for p in live)
    running = sum(1 for p in workers if phase(p) == "Running")
    desired = desired_workers(rc)
    groups = [g for g in spec(rc).get("workerGroupSpecs") or [] if not group_suspended(rc, g)]
    low = sum(max(as_int(g.get("minReplicas"), 0), 0) * num_of_hosts(g) for g in groups)
    high = sum(as_int(g.get("maxReplicas"), INT32_MAX) * num_of_hosts(g) for g in groups)
    out.update({"desiredWorkerReplicas": desired, "minWorkerReplicas": min(low, INT32_MAX),
                "maxWorkerReplicas": min(high, INT32_MAX), "availableWorkerReplicas": running,
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
