"""RayClusters and their worker pods -> how many worker replicas each group still needs a node for.

The facts used (ray-accel-spec §1.2-1.7):

- The operator wants ``clamp(replicas, minReplicas, maxReplicas)`` replicas per worker group (``minReplicas``
  when ``replicas`` is unset; 0 when the group or the cluster is suspended), each of ``numOfHosts`` pods.
- A multi-host replica (a TPU slice) is one atomic unit: it counts as placed only when every one of its pods
  is bound to a node. Its pods share the label ``ray.io/worker-group-replica-name``; a single-host replica is
  one pod.
- The Ray autoscaler expresses scale-down by lowering ``replicas`` and naming pods in
  ``scaleStrategy.workersToDelete``; a pod named there, or being deleted, is not capacity the cluster keeps.

Only clusters with ``enableInTreeAutoscaling: true`` that Kueue does not manage are a demand source here: a
Kueue-managed cluster's pods are gated until Kueue admits them, and Kueue asks for their capacity with a
ProvisioningRequest (the authoritative source, ray-accel-spec §7.2), which gangscale serves on that path.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.model.gang import Gang, PodSet
from gangscale.model.pod import PodDemand, pod_demand
from gangscale.model.scheduling import SpecError
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]

CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
REPLICA_NAME_LABEL = "ray.io/worker-group-replica-name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Where to reach the head's GCS when the default ``<head service>.<namespace>.svc:<gcs-server port>`` does not
#: work from gangscale's pod (another network, a port-forward, a test): ``host:port``.
GCS_ADDRESS_ANNOTATION = "gangscale.io/gcs-address"
GCS_PORT = 6379
INT32_MAX = 2**31 - 1


class RayClusterError(ValueError):
    """A RayCluster whose demand cannot be read: the message names the field."""


@dataclass(frozen=True, slots=True)
class WorkerGroup:
    name: str
    index: int
    replicas: int
    min_replicas: int
    max_replicas: int
    hosts: int
    suspended: bool
    workers_to_delete: frozenset[str]
    demand: PodDemand
    spec: JSON

    @property
    def desired(self) -> int:
        """Replicas the operator keeps (``GetWorkerGroupDesiredReplicas`` divided by ``numOfHosts``)."""
        if self.suspended:
            return 0
        return max(self.min_replicas, min(self.replicas, self.max_replicas))


@dataclass(frozen=True, slots=True)
class RayCluster:
    namespace: str
    name: str
    uid: str
    generation: int
    created: float
    autoscaling: bool
    suspended: bool
    kueue_managed: bool
    groups: tuple[WorkerGroup, ...]
    obj: JSON

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_demand_source(self) -> bool:
        return self.autoscaling and not self.kueue_managed and not self.suspended

    def group(self, name: str) -> WorkerGroup | None:
        return next((g for g in self.groups if g.name == name), None)

    def gcs_address(self) -> str:
        """``host:port`` of the head's GCS: the annotation, else the head Service from the status."""
        meta = self.obj.get("metadata") or {}
        override = str((meta.get("annotations") or {}).get(GCS_ADDRESS_ANNOTATION, "")).strip()
        if override:
            return override
        status = self.obj.get("status") or {}
        service = str((status.get("head") or {}).get("serviceName") or f"{self.name}-head-svc")
        port = str((status.get("endpoints") or {}).get("gcs-server") or GCS_PORT)
        return f"{service}.{self.namespace}.svc:{port}"

    def auth_secret(self) -> str | None:
        """The Secret holding the Ray auth token (key ``auth_token``) when the cluster uses token auth.

        Assumption: without ``authOptions.secretName`` the operator's Secret is named after the cluster.
        """
        auth = (self.obj.get("spec") or {}).get("authOptions") or {}
        if str(auth.get("mode", "")).lower() != "token":
            return None
        return str(auth.get("secretName") or self.name)


def _int(value: Any, default: int, where: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RayClusterError(f"{where} must be a whole number of at least 0, got {value!r}")
    return value


def _group(raw: Any, index: int) -> WorkerGroup:
    where = f"spec.workerGroupSpecs[{index}]"
    if not isinstance(raw, Mapping):
        raise RayClusterError(f"{where} is not an object")
    name = str(raw.get("groupName") or "")
    if not name:
        raise RayClusterError(f"{where}.groupName is missing")
    min_replicas = _int(raw.get("minReplicas"), 0, f"{where}.minReplicas")
    max_replicas = _int(raw.get("maxReplicas"), INT32_MAX, f"{where}.maxReplicas")
    hosts = _int(raw.get("numOfHosts"), 1, f"{where}.numOfHosts")
    if hosts < 1:
        raise RayClusterError(f"{where}.numOfHosts must be at least 1, got {hosts}")
    try:
        demand = pod_demand((raw.get("template") or {}), f"{where}.template")
    except SpecError as exc:
        raise RayClusterError(str(exc)) from exc
    strategy = raw.get("scaleStrategy") or {}
    return WorkerGroup(
        name=name, index=index, replicas=_int(raw.get("replicas"), min_replicas, f"{where}.replicas"),
        min_replicas=min_replicas, max_replicas=max_replicas, hosts=hosts, suspended=bool(raw.get("suspend")),
        workers_to_delete=frozenset(str(p) for p in strategy.get("workersToDelete") or ()), demand=demand,
        spec=dict(raw))


def parse_raycluster(obj: JSON) -> RayCluster:
    """The RayCluster as gangscale reads it; raises :class:`RayClusterError` naming the bad field."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    groups = tuple(_group(raw, i) for i, raw in enumerate(spec.get("workerGroupSpecs") or ()))
    names = [g.name for g in groups]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RayClusterError(f"spec.workerGroupSpecs: group names must be unique, repeated: {', '.join(dupes)}")
    return RayCluster(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 1), created=parse_rfc3339(meta.get("creationTimestamp")) or 0.0,
        autoscaling=spec.get("enableInTreeAutoscaling") is True, suspended=bool(spec.get("suspend")),
        kueue_managed=QUEUE_LABEL in (meta.get("labels") or {}), groups=groups, obj=obj)


# -- worker pods ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerPod:
    name: str
    group: str
    replica: str
    node: str | None
    #: Being deleted, terminated, or named in ``workersToDelete``: not capacity the cluster keeps.
    leaving: bool


#: A Ray worker pod's record: ``((namespace, cluster), worker)``.
RayWorker = tuple[tuple[str, str], WorkerPod]
#: The label selector of Ray worker pods, bound or not (:func:`worker_pod` keeps nothing of any other pod).
WORKER_PODS = f"{NODE_TYPE_LABEL}=worker,{CLUSTER_LABEL}"


def worker_pod(pod: JSON) -> RayWorker | None:
    """``((namespace, cluster), worker)`` for a Ray worker pod, None for any other pod. The transform of the Ray
    worker pods' reflector."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    cluster = labels.get(CLUSTER_LABEL)
    if not cluster or labels.get(NODE_TYPE_LABEL) != "worker":
        return None
    name = str(meta.get("name", ""))
    terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    node = (pod.get("spec") or {}).get("nodeName") or None
    worker = WorkerPod(name=name, group=sys.intern(str(labels.get(GROUP_LABEL, ""))),
                       replica=str(labels.get(REPLICA_NAME_LABEL) or name),
                       node=sys.intern(str(node)) if node else None,
                       leaving=bool(meta.get("deletionTimestamp")) or terminal)
    return (sys.intern(str(meta.get("namespace", ""))), sys.intern(str(cluster))), worker


def workers_by_cluster(pods: Iterable[JSON]) -> dict[tuple[str, str], list[WorkerPod]]:
    out: dict[tuple[str, str], list[WorkerPod]] = defaultdict(list)
    for pod in pods:
        got = worker_pod(pod)
        if got is not None:
            out[got[0]].append(got[1])
    return dict(out)


def kept(group: WorkerGroup, workers: Iterable[WorkerPod]) -> list[WorkerPod]:
    return [w for w in workers if w.group == group.name and not w.leaving and w.name not in group.workers_to_delete]


def placed_replicas(group: WorkerGroup, workers: Iterable[WorkerPod]) -> int:
    """Replicas of the group whose every pod is bound to a node (a slice with one host missing is not placed)."""
    pods: dict[str, list[WorkerPod]] = defaultdict(list)
    for w in kept(group, workers):
        pods[w.replica].append(w)
    return sum(1 for members in pods.values()
               if len(members) >= group.hosts and all(m.node is not None for m in members))


def replica_gang(cluster: RayCluster, replicas: Mapping[str, int], key: str, created: float,
                 priority: int = 0) -> Gang:
    """The gang of ``replicas[group]`` new replicas per group: one pod set per group, ``replicas * numOfHosts``
    pods shaped like the group's template."""
    pod_sets = []
    for group in cluster.groups:
        count = replicas.get(group.name, 0)
        if count > 0:
            pod_sets.append(PodSet(group.name, count * group.hosts, group.demand))
    return Gang(key, tuple(pod_sets), priority=priority, created=created)


def describe(replicas: Mapping[str, int], cluster: RayCluster) -> str:
    """``gpu: 16 replicas, tpu: 2 replicas of 4 hosts``."""
    parts = []
    for group in cluster.groups:
        count = replicas.get(group.name, 0)
        if count > 0:
            hosts = f" of {group.hosts} hosts" if group.hosts > 1 else ""
            parts.append(f"{group.name}: {count} replica{'s' if count != 1 else ''}{hosts}")
    return ", ".join(parts) or "nothing"


def landed_replicas(group: WorkerGroup, workers: Iterable[WorkerPod], nodes: Iterable[str]) -> int:
    """Replicas of the group whose pods were bound onto ``nodes`` (a gang's new or booked nodes)."""
    on = set(nodes)
    return sum(1 for w in kept(group, workers) if w.node in on) // group.hosts


def missing_replicas(cluster: RayCluster, workers: Iterable[WorkerPod], targets: Mapping[str, int],
                     coming: Mapping[str, int]) -> dict[str, int]:
    """Per group, replicas the cluster wants (``targets``) that have no node and none on its way.

    ``coming``: replicas whose nodes gangscale is obtaining or holds booked for the cluster's pods (each gang's
    replicas less those already landed on its nodes). Whole replicas: a slice with a host unplaced counts as
    missing whole.
    """
    workers = list(workers)
    out = {}
    for group in cluster.groups:
        want = min(targets.get(group.name, group.desired), group.max_replicas)
        have = placed_replicas(group, workers) + coming.get(group.name, 0)
        if want > have:
            out[group.name] = want - have
    return out


def bound_pods(gang: Gang, pr_name: str, cluster: RayCluster, workers: Iterable[WorkerPod]) -> Gang:
    """``gang`` (a Kueue ProvisioningRequest's, for a Workload of ``cluster``) less the pods of replicas already
    on nodes.

    Kueue names each PR podSet's PodTemplate ``ppt-<pr>-<podSet>`` and a RayCluster's podSets after its worker
    groups, so the group is the name's suffix. A template whose name does not have that form (Kueue shortens
    names past 253 characters) is left as it is: provisioning too much is safer than too little.
    """
    workers = list(workers)
    prefix = f"ppt-{pr_name}-"
    pod_sets = []
    for pod_set in gang.pod_sets:
        group = cluster.group(pod_set.name[len(prefix):]) if pod_set.name.startswith(prefix) else None
        if group is None:
            pod_sets.append(pod_set)
            continue
        on_nodes = placed_replicas(group, workers) * group.hosts
        pod_sets.append(PodSet(pod_set.name, max(0, pod_set.count - on_nodes), pod_set.demand))
    return Gang(gang.key, tuple(pod_sets), priority=gang.priority, created=gang.created,
                spread_zones=gang.spread_zones, may_scale=gang.may_scale)
