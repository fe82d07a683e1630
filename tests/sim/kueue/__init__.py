"""Builders and a small harness shared by the Kueue emulator's tests.

Object builders return plain dicts as a user (or a job integration) would write them. :func:`kueue_cluster`
starts an embedded API server on a settable clock, a client over real HTTP and a :class:`KueueCore`;
:class:`Env` creates objects, plays the other parties (an admission check controller writing its
``status.admissionChecks`` entry under its own field manager, the job emulator writing ``Finished``) and
runs passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gangscale.kube.client import make_http
from gangscale.kube.resources import (
    ADMISSIONCHECKS,
    CLUSTERQUEUES,
    EVENTS,
    LOCALQUEUES,
    RESOURCEFLAVORS,
    WORKLOADS,
)
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.kueue import KueueCore
from gangscale.sim.world import Timeline
from gangscale.timefmt import rfc3339, to_datetime

JSON = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
NS = "default"
T0 = 1_795_000_000.0
APPLY = "application/apply-patch+yaml"
CHECK_MANAGER = "kueue.x-k8s.io/provisioning-request"
TPU = "google.com/tpu"

PodSetSpec = tuple[str, int, Mapping[str, Any]]  # (name, count, per-pod requests)


def pod_template(requests: Mapping[str, Any], *, limits: Mapping[str, Any] | None = None,
                 node_selector: Mapping[str, str] | None = None) -> JSON:
    resources: JSON = {}
    if requests:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
    if limits:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    spec: JSON = {"containers": [{"name": "main", "image": "train", "resources": resources}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"spec": spec}


def flavor(name: str, labels: Mapping[str, str] | None = None, taints: Sequence[JSON] = ()) -> JSON:
    spec: JSON = {"nodeLabels": dict(labels or {})}
    if taints:
        spec["nodeTaints"] = list(taints)
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, quotas: Mapping[str, Mapping[str, Any]], *, strategy: str | None = None,
                  preemption: str | None = None, checks: Sequence[str | JSON] = (),
                  namespace_selector: JSON | None = None, selector_unset: bool = False) -> JSON:
    """One resource group covering every resource named in ``quotas`` (flavor -> resource -> nominal)."""
    covered = list(dict.fromkeys(r for q in quotas.values() for r in q))
    spec: JSON = {"resourceGroups": [{"coveredResources": covered, "flavors": [
        {"name": f, "resources": [{"name": r, "nominalQuota": q.get(r, 0)} for r in covered]}
        for f, q in quotas.items()]}]}
    if not selector_unset:
        spec["namespaceSelector"] = namespace_selector if namespace_selector is not None else {}
    if strategy:
        spec["queueingStrategy"] = strategy
    if preemption:
        spec["preemption"] = {"withinClusterQueue": preemption}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [c if isinstance(c, dict) else {"name": c}
                                                               for c in checks]}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cq: str, namespace: str = NS) -> JSON:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq}}


def admission_check(name: str) -> JSON:
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}}


def workload(name: str, pod_sets: Sequence[PodSetSpec], *, queue: str = "lq", namespace: str = NS,
             priority: int | None = None, active: bool | None = None, job_uid: str | None = None,
             owner: str | None = None, uid: str | None = None, created: float | None = None,
             status: JSON | None = None) -> JSON:
    """A Workload; ``uid``/``created``/``status`` are for the pure tests (the server sets its own)."""
    meta: JSON = {"name": name, "namespace": namespace}
    if job_uid:
        meta["labels"] = {"kueue.x-k8s.io/job-uid": job_uid}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": f"{owner}-uid",
                                    "controller": True}]
    if uid:
        meta["uid"] = uid
    if created is not None:
        meta["creationTimestamp"] = rfc3339(created)
    spec: JSON = {"queueName": queue, "podSets": [{"name": n, "count": c, "template": pod_template(r)}
                                                  for n, c, r in pod_sets]}
    if priority is not None:
        spec["priority"] = priority
    if active is not None:
        spec["active"] = active
    obj: JSON = {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def reserved_status(cq: str, assignments: Sequence[tuple[str, int, Mapping[str, str], Mapping[str, Any]]], *,
                    at: float = T0, admitted: bool = False) -> JSON:
    """A status holding quota: ``assignments`` are (pod set, count, resource -> flavor, resource -> usage)."""
    conds = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
              "lastTransitionTime": rfc3339(at)}]
    if admitted:
        conds.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                      "lastTransitionTime": rfc3339(at)})
    return {"admission": {"clusterQueue": cq, "podSetAssignments": [
        {"name": n, "count": c, "flavors": dict(f), "resourceUsage": {k: str(v) for k, v in u.items()}}
        for n, c, f, u in assignments]}, "conditions": conds}


def condition(obj: Mapping[str, Any], kind: str) -> JSON:
    return next((dict(c) for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def check_entry(obj: Mapping[str, Any], name: str) -> JSON:
    return next((dict(c) for c in (obj.get("status") or {}).get("admissionChecks") or [] if c.get("name") == name),
                {})


class Env:
    """The embedded cluster, its clock and the Kueue emulator; helpers play the other components."""

    def __init__(self, server: EmbeddedAPIServer, http: KubeHTTP, clock: list[float]) -> None:
        self.server = server
        self.http = http
        self._clock = clock
        self.timeline = Timeline(start=T0)
        self.kueue = KueueCore(http, self.timeline)

    @property
    def now(self) -> float:
        return self._clock[0]

    def advance(self, seconds: float) -> None:
        self._clock[0] += seconds

    def set_time(self, at: float) -> None:
        self._clock[0] = at

    async def create(self, resource: Resource, obj: JSON) -> JSON:
        ns = (obj.get("metadata") or {}).get("namespace")
        return await self.http.request("POST", resource.path(ns), body=obj)

    async def setup(self, *objs: JSON) -> None:
        kinds = {"ResourceFlavor": RESOURCEFLAVORS, "ClusterQueue": CLUSTERQUEUES, "LocalQueue": LOCALQUEUES,
                 "AdmissionCheck": ADMISSIONCHECKS, "Workload": WORKLOADS}
        for obj in objs:
            created = await self.create(kinds[obj["kind"]], obj)
            if obj["kind"] == "AdmissionCheck":
                await self.set_check_active(created["metadata"]["name"], True)

    async def set_check_active(self, name: str, active: bool) -> None:
        cond = {"type": "Active", "status": "True" if active else "False", "reason": "Active" if active else "Bad",
                "message": "", "lastTransitionTime": rfc3339(self.now)}
        await self.http.request("PATCH", ADMISSIONCHECKS.path(name=name, sub="status"), content_type=APPLY,
                                query={"fieldManager": CHECK_MANAGER, "force": True},
                                body={"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name},
                                      "status": {"conditions": [cond]}})

    async def add_workload(self, obj: JSON, *, step: float = 1.0) -> JSON:
        """Create a Workload, then move the clock so the next one is strictly newer (timestamps are seconds)."""
        created = await self.create(WORKLOADS, obj)
        self.advance(step)
        return created

    async def sync(self) -> bool:
        return await self.kueue.sync(self.now)

    async def settle(self, limit: int = 10) -> int:
        """Run passes until one writes nothing; returns how many wrote."""
        for wrote in range(limit):
            if not await self.sync():
                return wrote
        raise AssertionError(f"the emulator still writes after {limit} passes")

    async def wl(self, name: str, namespace: str = NS) -> JSON:
        return await self.http.request("GET", WORKLOADS.path(namespace, name))

    async def cq(self, name: str) -> JSON:
        return await self.http.request("GET", CLUSTERQUEUES.path(name=name))

    async def reserved(self) -> list[str]:
        items = (await self.http.request("GET", WORKLOADS.path()))["items"]
        return sorted(i["metadata"]["name"] for i in items if condition(i, "QuotaReserved").get("status") == "True")

    async def set_check(self, wl_name: str, check: str, state: str, message: str = "", *,
                        requeue_after: int | None = None, pod_set_updates: list[JSON] | None = None,
                        retry_count: int | None = None, namespace: str = NS) -> JSON:
        """What the provisioning admission check writes: its own entry, by apply, under its own manager."""
        entry: JSON = {"name": check, "state": state, "message": message, "lastTransitionTime": rfc3339(self.now)}
        if requeue_after is not None:
            entry["requeueAfterSeconds"] = requeue_after
        if retry_count is not None:
            entry["retryCount"] = retry_count
        if pod_set_updates is not None:
            entry["podSetUpdates"] = pod_set_updates
        return await self.http.request(
            "PATCH", WORKLOADS.path(namespace, wl_name, "status"), content_type=APPLY,
            query={"fieldManager": CHECK_MANAGER, "force": True},
            body={"apiVersion": KUEUE, "kind": "Workload", "metadata": {"name": wl_name, "namespace": namespace},
                  "status": {"admissionChecks": [entry]}})

    async def finish(self, wl_name: str, namespace: str = NS) -> None:
        """What the job emulator writes when the job completes."""
        cond = {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished successfully",
                "lastTransitionTime": rfc3339(self.now)}
        await self.http.request("PATCH", WORKLOADS.path(namespace, wl_name, "status"), content_type=APPLY,
                                query={"fieldManager": "kueue-job-controller-Finished", "force": True},
                                body={"apiVersion": KUEUE, "kind": "Workload",
                                      "metadata": {"name": wl_name, "namespace": namespace},
                                      "status": {"conditions": [cond]}})

    async def events(self, wl_name: str, namespace: str = NS) -> list[tuple[str, str, str]]:
        items = (await self.http.request("GET", EVENTS.path(namespace)))["items"]
        return [(e["type"], e["reason"], e["message"]) for e in items
                if e["involvedObject"]["name"] == wl_name and e["involvedObject"]["kind"] == "Workload"]


@contextlib.asynccontextmanager
async def kueue_cluster(tmp_path: Path) -> AsyncIterator[Env]:
    clock = [T0]
    server = EmbeddedAPIServer(clock=lambda: to_datetime(clock[0]), bookmark_interval=60.0, seed=1)
    await server.start()
    try:
        http = await make_http(str(server.write_kubeconfig(tmp_path / "kubeconfig")), user_agent="kueue-tests")
        try:
            yield Env(server, http, clock)
        finally:
            await http.api_client.close()
    finally:
        await server.stop()
