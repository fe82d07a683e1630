"""Builders and drivers for the job emulator tests: job objects of each kind, Kueue's side of admission
(written with SSA as Kueue would), binding pods as the scheduler would, and settling the emulator."""

from __future__ import annotations

from typing import Any

from gangscale.kube.resources import (
    JOBS,
    JOBSETS,
    NODES,
    PODS,
    RAYCLUSTERS,
    RAYJOBS,
    RESOURCEFLAVORS,
    WORKLOADPRIORITYCLASSES,
    WORKLOADS,
)
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.jobs import JobEmulator
from tests.builders import requirements

JSON = dict[str, Any]
NS = "default"
T0 = 1_795_000_000.0
APPLY = "application/apply-patch+yaml"
QUEUE = {"kueue.x-k8s.io/queue-name": "team"}
TS = "2026-11-18T00:00:00Z"


def container(requests: dict[str, str] | None = None, name: str = "main") -> JSON:
    out: JSON = {"name": name, "image": "trainer:1.0"}
    if requests:
        out["resources"] = requirements(requests)
    return out


def pod_template(requests: dict[str, str] | None = None, **spec: Any) -> JSON:
    return {"spec": {"restartPolicy": "Never", "containers": [container(requests)], **spec}}


def job(name: str, *, parallelism: int = 2, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, suspend: bool | None = None, **spec: Any) -> JSON:
    body: JSON = {"apiVersion": "batch/v1", "kind": "Job",
                  "metadata": {"name": name, "labels": dict(QUEUE if labels is None else labels)},
                  "spec": {"parallelism": parallelism, "completions": parallelism,
                           "template": pod_template({"nvidia.com/gpu": "8"}), **spec}}
    if annotations:
        body["metadata"]["annotations"] = annotations
    if suspend is not None:
        body["spec"]["suspend"] = suspend
    return body


def jobset(name: str, *, replicated: list[tuple[str, int, int]], labels: dict[str, str] | None = None,
           annotations: dict[str, str] | None = None) -> JSON:
    """``replicated``: (name, replicas, parallelism) per replicated job."""
    rjobs = [{"name": rname, "replicas": replicas,
              "template": {"spec": {"parallelism": par, "completions": par,
                                    "template": {"spec": {"containers": [container({"google.com/tpu": "4"})]}}}}}
             for rname, replicas, par in replicated]
    body: JSON = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                  "metadata": {"name": name, "labels": dict(QUEUE if labels is None else labels)},
                  "spec": {"replicatedJobs": rjobs}}
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def ray_cluster_spec(groups: list[tuple[str, int, int]]) -> JSON:
    """``groups``: (groupName, replicas, numOfHosts) per worker group."""
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
            container({"cpu": "2"}, "ray-head")]}}},
        "workerGroupSpecs": [{"groupName": g, "replicas": r, "numOfHosts": h, "rayStartParams": {},
                              "template": {"spec": {"containers": [container({"google.com/tpu": "4"}, "ray-worker")]}}}
                             for g, r, h in groups],
    }


def raycluster(name: str, groups: list[tuple[str, int, int]], *, labels: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None) -> JSON:
    meta: JSON = {"name": name, "labels": dict(QUEUE if labels is None else labels)}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": ray_cluster_spec(groups)}


def rayjob(name: str, groups: list[tuple[str, int, int]], *, labels: dict[str, str] | None = None,
           annotations: dict[str, str] | None = None, **spec: Any) -> JSON:
    meta: JSON = {"name": name, "labels": dict(QUEUE if labels is None else labels)}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
            "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": ray_cluster_spec(groups), **spec}}


RESOURCES = {"Job": JOBS, "JobSet": JOBSETS, "RayCluster": RAYCLUSTERS, "RayJob": RAYJOBS}


async def create(http: KubeHTTP, body: JSON) -> JSON:
    return await http.request("POST", RESOURCES[body["kind"]].path(NS), body=body)


async def get(http: KubeHTTP, kind: str, name: str) -> JSON:
    return await http.request("GET", RESOURCES[kind].path(NS, name))


async def items(http: KubeHTTP, resource: Any, **query: str) -> list[JSON]:
    listing = await http.request("GET", resource.path(NS if resource.namespaced else None), query=query or None)
    return list(listing["items"])


async def pods(http: KubeHTTP) -> list[JSON]:
    return await items(http, PODS)


async def workload_of(http: KubeHTTP, owner: str) -> JSON:
    found = [w for w in await items(http, WORKLOADS)
             if any(r.get("name") == owner for r in w["metadata"].get("ownerReferences") or [])]
    assert len(found) == 1, f"{len(found)} Workloads owned by {owner}"
    return found[0]


async def flavor(http: KubeHTTP, name: str, node_labels: dict[str, str],
                 tolerations: list[JSON] | None = None) -> None:
    spec: JSON = {"nodeLabels": node_labels}
    if tolerations:
        spec["tolerations"] = tolerations
    await http.request("POST", RESOURCEFLAVORS.path(), body={
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec})


async def priority_class(http: KubeHTTP, name: str, value: int) -> None:
    await http.request("POST", WORKLOADPRIORITYCLASSES.path(), body={
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
        "value": value})


def cond(cond_type: str, state: str, reason: str, message: str = "") -> JSON:
    return {"type": cond_type, "status": state, "reason": reason, "message": message, "lastTransitionTime": TS}


async def apply_status(http: KubeHTTP, wl: JSON, status: JSON) -> None:
    name = wl["metadata"]["name"]
    await http.request("PATCH", WORKLOADS.path(NS, name, "status"), content_type=APPLY,
                       query={"fieldManager": "kueue-admission", "force": "true"},
                       body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                             "metadata": {"name": name, "namespace": NS}, "status": status})


async def admit(http: KubeHTTP, wl: JSON, flavors: dict[str, str] | None = None,
                updates: list[JSON] | None = None) -> None:
    """Reserve quota and admit as Kueue does: one flavor per pod set (all its resources), optional
    podSetUpdates from an admission check named ``prov``."""
    assignments = [{"name": ps["name"], "count": ps.get("count", 1),
                    "flavors": {"cpu": (flavors or {}).get(ps["name"], "default")}}
                   for ps in wl["spec"]["podSets"]]
    status: JSON = {"admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
                    "conditions": [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                                   cond("Admitted", "True", "Admitted", "The workload is admitted")]}
    if updates is not None:
        status["admissionChecks"] = [{"name": "prov", "state": "Ready", "message": "", "lastTransitionTime": TS,
                                      "podSetUpdates": updates}]
    await apply_status(http, wl, status)


async def evict(http: KubeHTTP, wl: JSON) -> None:
    """Kueue's eviction with the quota released at once (the admission fields the manager owned go away)."""
    await apply_status(http, wl, {"conditions": [
        cond("QuotaReserved", "False", "Pending", "Preempted"),
        cond("Admitted", "False", "NoReservation", "The workload has no reservation"),
        cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload")]})


async def ready_node(http: KubeHTTP, name: str, ready: str = "True") -> None:
    await http.request("POST", NODES.path(), body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": ""}]}})


async def bind(http: KubeHTTP, pod: str, node: str) -> None:
    await http.request("POST", PODS.path(NS, pod, "binding"), body={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


async def settle(em: JobEmulator, now: float, limit: int = 30) -> int:
    """Sync until a call writes nothing; the number of calls that wrote."""
    for i in range(limit):
        if not await em.sync(now):
            return i
    raise AssertionError("the emulator did not settle")


async def bind_all(http: KubeHTTP, node_prefix: str = "node") -> list[str]:
    """Bind every unbound pod to its own Ready node (created here)."""
    names = []
    for i, pod in enumerate(p for p in await pods(http) if not p["spec"].get("nodeName")):
        node = f"{node_prefix}-{pod['metadata']['name']}"
        await ready_node(http, node)
        await bind(http, pod["metadata"]["name"], node)
        names.append(node)
        del i
    return names
