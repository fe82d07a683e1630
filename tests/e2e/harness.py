"""A whole simulated cluster for the Kueue conformance tests: the embedded API server, the Kueue emulators (core
and the provisioning admission check), the simulated cloud and the real gangscale controller, on one
:class:`~gangscale.clock.ManualClock`, driven by :mod:`gangscale.sim.driver`.

The tests create Kueue's objects and Workloads directly (as a user and Kueue's job integrations would), move
simulated time with :meth:`E2E.settle`, :meth:`E2E.advance` and :meth:`E2E.until`, and read every outcome back
over HTTP. There are no jobs or pods unless a test adds them: a Workload's ``Finished`` condition, where a test
needs it, is written by the test as Kueue's job framework would.

Simplified: one namespace (``default``), one ResourceFlavor (``gpu``, pinned to the ``gpu`` node pool by its
``gangscale.io/node-pool`` node label), one ClusterQueue and one LocalQueue unless a test builds its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gangscale.config import parse_pool_yaml
from gangscale.controller.logic.settings import Settings
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import (
    ADMISSIONCHECKS,
    CLUSTERQUEUES,
    EVENTS,
    LOCALQUEUES,
    NODES,
    PODTEMPLATES,
    PROVREQCONFIGS,
    PROVREQS,
    RESOURCEFLAVORS,
    WORKLOADS,
)
from gangscale.kube.transport import Resource
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.driver import SimCluster, sim_cluster
from gangscale.sim.kueue.core import KueueCore
from gangscale.sim.kueue.provisioning import ProvisioningCheck
from gangscale.sim.world import CHECK

JSON = dict[str, Any]
NS = "default"
KUEUE = "kueue.x-k8s.io/v1beta2"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"

ATOMIC = "atomic-scale-up.gangscale.io"
CHECK_CAPACITY = "check-capacity.gangscale.io"
#: A class the controller does not serve: its requests get no conditions from gangscale.
FOREIGN_CLASS = "queued-provisioning.example.com"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"

CHECK_NAME = "prov"
PRC_NAME = "prc"
FLAVOR = "gpu"
CQ = "cq"
LQ = "lq"
GPU = "nvidia.com/gpu"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
PARAM_PREFIX = "provreq.kueue.x-k8s.io/"

#: The flavor's toleration: Kueue copies it into every PodTemplate of a request.
TOLERATION: JSON = {"key": "example.com/reserved", "operator": "Exists", "effect": "NoSchedule"}

#: One GPU pool (a3-highgpu-8g: 8 GPUs a node, one node a unit) of at most 4 units, nodes Ready 30 s after the
#: scale-up; a gang of more than 32 GPUs can never be placed.
POOLS_YAML = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 4
    simulated: {provisionSeconds: 30}
"""

#: The controller without a batch window (the window is not what these tests are about).
FAST = Settings(batch_idle=0.0, batch_max=0.0)


# --- builders ------------------------------------------------------------------------------------------------

def flavor(name: str = FLAVOR, labels: dict[str, str] | None = None,
           tolerations: Sequence[JSON] = (TOLERATION,)) -> JSON:
    spec: JSON = {"nodeLabels": labels if labels is not None else {"gangscale.io/node-pool": "gpu"}}
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str = CQ, checks: Sequence[str] = (CHECK_NAME,), *, gpus: int = 64,
                  preemption: str = "Never") -> JSON:
    spec: JSON = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [
            {"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": "1000"},
                                           {"name": "memory", "nominalQuota": "10Ti"},
                                           {"name": GPU, "nominalQuota": str(gpus)}]}]}],
        "preemption": {"withinClusterQueue": preemption},
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str = LQ, cq: str = CQ) -> JSON:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterQueue": cq}}


def config_ref(name: str = PRC_NAME, *, group: str = "kueue.x-k8s.io",
               kind: str = "ProvisioningRequestConfig") -> JSON:
    return {"apiGroup": group, "kind": kind, "name": name}


def admission_check(name: str = CHECK_NAME, ref: JSON | None = None, *,
                    controller: str = PROVISIONING_CONTROLLER) -> JSON:
    spec: JSON = {"controllerName": controller}
    if controller == PROVISIONING_CONTROLLER:
        spec["parameters"] = ref if ref is not None else config_ref()
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": spec}


def prc(name: str = PRC_NAME, cls: str = ATOMIC, params: dict[str, str] | None = None, *,
        limit: int | None = None, base: int = 60, **spec: Any) -> JSON:
    body: JSON = {"provisioningClassName": cls, **spec}
    if params is not None:
        body["parameters"] = params
    if limit is not None:
        body["retryStrategy"] = {"backoffLimitCount": limit, "backoffBaseSeconds": base, "backoffMaxSeconds": 1800}
    return {"apiVersion": KUEUE, "kind": "ProvisioningRequestConfig", "metadata": {"name": name}, "spec": body}


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> JSON:
    resources: JSON = {}
    if requests:
        resources["requests"] = requests
    # An extended resource cannot be overcommitted: a real API server wants it in limits too.
    extended = {k: v for k, v in (requests or {}).items() if "/" in k}
    if limits or extended:
        resources["limits"] = {**extended, **(limits or {})}
    return {"name": "main", "image": "registry.example/train:latest", "resources": resources}


def pod_set(name: str, count: int, requests: dict[str, str] | None = None, *,
            limits: dict[str, str] | None = None) -> JSON:
    """A pod set of ``count`` pods; by default each takes a whole GPU node (8 GPUs)."""
    if requests is None and limits is None:
        requests = {"cpu": "4", GPU: "8"}
    return {"name": name, "count": count,
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"restartPolicy": "Never", "containers": [container(requests, limits)]}}}


def workload(name: str = "wl", pod_sets: Sequence[JSON] | None = None, *, queue: str = LQ,
             annotations: dict[str, str] | None = None, priority: int | None = None) -> JSON:
    meta: JSON = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: JSON = {"queueName": queue, "podSets": list(pod_sets) if pod_sets is not None else [pod_set("main", 2)]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta, "spec": spec}


# --- reading ---------------------------------------------------------------------------------------------------

def conditions(obj: JSON | None) -> dict[str, JSON]:
    return {str(c.get("type")): c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def is_true(obj: JSON | None, ctype: str) -> bool:
    return conditions(obj).get(ctype, {}).get("status") == "True"


def name_of(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


@dataclass
class E2E:
    """The running cluster and the test's own verbs over the API."""

    sim: SimCluster

    @property
    def now(self) -> float:
        return self.sim.now

    @property
    def provider(self) -> SimulatedProvider:
        assert self.sim.provider is not None
        return self.sim.provider

    # --- time --------------------------------------------------------------------------------------------

    async def settle(self) -> None:
        await self.sim.settle()

    async def advance(self, seconds: float) -> None:
        """Run the cluster ``seconds`` of simulated time on, stopping at every timer on the way."""
        await self.sim.run_until(self.now + seconds)

    async def until(self, predicate: Callable[[], Awaitable[bool]], *, within: float, what: str = "") -> None:
        """Run the cluster, one due instant at a time, until ``predicate()`` holds; fail if it does not within
        ``within`` seconds of simulated time."""
        end = self.now + within
        await self.sim.settle()
        while not await predicate():
            due = self.sim.next_due()
            if due is None or due > end:
                raise AssertionError(f"not reached within {within:g}s of simulated time: {what or predicate}")
            await self.sim.clock.set(max(due, self.now))
            await self.sim.settle()

    # --- writing -----------------------------------------------------------------------------------------

    async def create(self, resource: Resource, body: JSON) -> JSON:
        ns = (body.get("metadata") or {}).get("namespace") if resource.namespaced else None
        return await self.sim.http.request("POST", resource.path(ns), body=body)

    async def merge(self, resource: Resource, name: str, patch: JSON, *, ns: str = NS, sub: str | None = None) -> JSON:
        return await self.sim.http.request("PATCH", resource.path(ns if resource.namespaced else None, name, sub),
                                           body=patch, content_type=MERGE)

    async def apply_status(self, resource: Resource, name: str, kind: str, status: JSON, manager: str,
                           *, ns: str = NS) -> JSON:
        """Server-side apply of ``status`` on the object's ``/status`` under field manager ``manager``."""
        meta: JSON = {"name": name}
        if resource.namespaced:
            meta["namespace"] = ns
        body = {"apiVersion": resource.api_version, "kind": kind, "metadata": meta, "status": status}
        return await self.sim.http.request("PATCH", resource.path(ns if resource.namespaced else None, name, "status"),
                                           body=body, query={"fieldManager": manager, "force": "true"},
                                           content_type=APPLY)

    async def delete(self, resource: Resource, name: str, *, ns: str = NS) -> None:
        await self.sim.http.request("DELETE", resource.path(ns if resource.namespaced else None, name))

    async def setup(self, *, config: JSON | None = None, check: JSON | None = None, checks: Sequence[JSON] = (),
                    cq: JSON | None = None, with_config: bool = True) -> None:
        """Flavor, ProvisioningRequestConfig, the provisioning AdmissionCheck (plus ``checks``), ClusterQueue,
        LocalQueue."""
        await self.create(RESOURCEFLAVORS, flavor())
        if with_config:
            await self.create(PROVREQCONFIGS, config or prc())
        await self.create(ADMISSIONCHECKS, check or admission_check())
        for extra in checks:
            await self.create(ADMISSIONCHECKS, extra)
        await self.create(CLUSTERQUEUES, cq or cluster_queue())
        await self.create(LOCALQUEUES, local_queue())

    async def activate_check(self, name: str) -> None:
        """Set ``Active=True`` on an AdmissionCheck, as the controller behind its ``controllerName`` would."""
        await self.apply_status(ADMISSIONCHECKS, name, "AdmissionCheck", {"conditions": [
            {"type": "Active", "status": "True", "reason": "Active", "message": "served by the test",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "example.com/manual-check")

    # --- reading -----------------------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, *, ns: str = NS) -> JSON | None:
        try:
            return await self.sim.http.request("GET", resource.path(ns if resource.namespaced else None, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def workload(self, name: str = "wl") -> JSON:
        obj = await self.get(WORKLOADS, name)
        assert obj is not None, f"Workload {name} is gone"
        return obj

    async def check(self, wl: str = "wl", check: str = CHECK_NAME) -> JSON | None:
        """The Workload's ``status.admissionChecks`` entry of ``check``, or None."""
        entries = ((await self.workload(wl)).get("status") or {}).get("admissionChecks") or []
        return next((dict(e) for e in entries if e.get("name") == check), None)

    async def check_state(self, wl: str = "wl", check: str = CHECK_NAME) -> str | None:
        entry = await self.check(wl, check)
        return None if entry is None else str(entry.get("state"))

    async def requests(self) -> list[JSON]:
        listed = await self.sim.http.request("GET", PROVREQS.path(NS))
        return sorted(listed.get("items") or [], key=name_of)

    async def request(self, name: str) -> JSON | None:
        return await self.get(PROVREQS, name)

    async def templates(self) -> list[JSON]:
        listed = await self.sim.http.request("GET", PODTEMPLATES.path(NS))
        return sorted(listed.get("items") or [], key=name_of)

    async def nodes(self) -> list[JSON]:
        listed = await self.sim.http.request("GET", NODES.path())
        return sorted(listed.get("items") or [], key=name_of)

    async def events(self, reason: str, involved: str | None = None) -> list[str]:
        """Messages of the Events with ``reason`` (about the object named ``involved``), oldest first, each as often
        as it occurred: recorders count a repeat on the earlier Event (``count``) as client-go's does."""
        listed = await self.sim.http.request("GET", EVENTS.path(NS))
        items = [e for e in listed.get("items") or [] if e.get("reason") == reason
                 and (involved is None or (e.get("involvedObject") or {}).get("name") == involved)]
        # Events written through events.k8s.io/v1 (Kueue's) have an eventTime and no lastTimestamp: the write order
        # (resourceVersion, a number on the embedded server) orders them, and breaks ties of the others.
        items.sort(key=lambda e: (str(e.get("lastTimestamp") or e.get("eventTime") or ""),
                                  int((e.get("metadata") or {}).get("resourceVersion") or 0)))
        return [str(e.get("message", "")) for e in items for _ in range(int(e.get("count") or 1))]

    async def ready(self, wl: str = "wl") -> bool:
        """The provisioning check is Ready."""
        return await self.check_state(wl) == "Ready"

    async def admitted(self, wl: str = "wl") -> bool:
        """The provisioning check is Ready and the Workload admitted."""
        return await self.ready(wl) and is_true(await self.workload(wl), "Admitted")

    async def evicted(self, wl: str = "wl") -> bool:
        return is_true(await self.workload(wl), "Evicted")

    async def deactivated(self, wl: str = "wl") -> bool:
        return (await self.workload(wl))["spec"].get("active") is False

    def check_history(self, wl: str = "wl", check: str = CHECK_NAME) -> list[str]:
        """Every state the provisioning check went through, in order (from the emulator's timeline)."""
        return [str(e.data.get("state")) for e in self.sim.timeline.of(CHECK, f"{NS}/{wl}")
                if e.data.get("check") == check]


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, *, settings: Settings = FAST, pools_yaml: str = POOLS_YAML,
                  stock: dict[str, int] | None = None) -> AsyncIterator[E2E]:
    """Kueue (core and provisioning check), the simulated cloud (with ``stock`` units per pool, unlimited
    otherwise) and the real controller, all started, nothing created yet."""
    async with sim_cluster(tmp_path, parse_pool_yaml(pools_yaml).pools) as sim:
        provider = await sim.start_provider()
        for pool, units in (stock or {}).items():
            provider.set_stock(pool, units)
        http = await sim.client("kueue-manager")
        reader = await sim.cache()  # as in the demo: the emulators read the shared informer cache
        sim.add(KueueCore(http, sim.timeline, reader=reader))
        sim.add(ProvisioningCheck(http, sim.timeline, reader=reader))
        await sim.start_controller(settings)
        yield E2E(sim)
