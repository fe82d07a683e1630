"""Run a scenario on a whole simulated cluster and collect what happened.

``gangscale`` mode: Kueue (queueing and the provisioning admission check), the job emulators, the Ray
autoscaler of autoscaling RayClusters (when the scenario has one), the scheduler and the real gangscale
controller with the simulated cloud. ``baseline`` mode: the same scenario with the
classic setup instead — no admission check on the ClusterQueues (Kueue admits on quota alone) and a per-pod
autoscaler in place of gangscale, so the two can be compared on equal terms.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gangscale.aio import cancel_and_wait
from gangscale.config import parse_pool_file
from gangscale.controller.logic.settings import Settings
from gangscale.kube.errors import ApiError
from gangscale.kube.transport import Resource
from gangscale.providers.base import NodePoolProvider
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim import awsdemo
from gangscale.sim.baseline import PerPodAutoscaler
from gangscale.sim.driver import Action, SimCluster, sim_cluster
from gangscale.sim.gkedemo import gke_pool_specs
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.kueue.core import KueueCore
from gangscale.sim.kueue.provisioning import ProvisioningCheck
from gangscale.sim.manifests import kueue_objects, workload_manifest
from gangscale.sim.observer import NodeLife, Observer
from gangscale.sim.rayautoscaler import RayAutoscaler
from gangscale.sim.rayplan import Demand
from gangscale.sim.scenario import CloudChange, Scenario, Workload
from gangscale.sim.scheduler import Scheduler
from gangscale.sim.world import ARRIVED, FINISHED, Timeline

JSON = dict[str, Any]

GANGSCALE = "gangscale"
BASELINE = "baseline"
SIMULATED, GKE, AWS = "simulated", "gke", "aws"

#: The controller's batch window in the demo: the defaults (1 s idle, 10 s max) unless the scenario says.
#: The simulated Ray clusters have no head process, so there is no GCS to read: Ray demand comes from the
#: RayCluster spec alone (and no poller tries to resolve ``<cluster>-head-svc`` names).
DEMO_SETTINGS = Settings(ray_gcs=False)


@dataclass
class RunResult:
    scenario: Scenario
    mode: str
    start: float
    end: float
    timeline: Timeline
    nodes: dict[str, NodeLife]
    #: Workload subjects (``namespace/name``) in scenario order.
    workloads: list[str] = field(default_factory=list)
    #: Rounds that found no fixed point (an emulator that kept writing); 0 in a healthy run.
    unsettled: int = 0

    @property
    def finished(self) -> bool:
        return not self.unfinished()

    def unfinished(self) -> list[str]:
        """The workloads (``namespace/name``) that did not finish."""
        done = {e.subject for e in self.timeline.of(FINISHED)}
        return [w for w in self.workloads if w not in done]


def controller_settings(scenario: Scenario) -> Settings:
    overrides = {k: v for k, v in scenario.controller.model_dump().items() if v is not None}
    return replace(DEMO_SETTINGS, **overrides)


async def run_scenario(scenario: Scenario, *, mode: str = GANGSCALE, speed: float | None = None,
                       workdir: Path | None = None, provider: str = SIMULATED,
                       watcher: Callable[[SimCluster], Coroutine[Any, Any, None]] | None = None) -> RunResult:
    """Run ``scenario``; ``provider`` ``gke`` runs gangscale's gke provider against the fake GKE control plane
    (:mod:`gangscale.sim.gkedemo`), ``aws`` its aws provider against the fake EC2 (:mod:`gangscale.sim.awsdemo`: TPU
    workloads ask for GPUs there), instead of the simulated provider. ``watcher`` (the demo's progress line)
    runs beside the scenario on the live cluster and is cancelled when the run ends."""
    if provider != SIMULATED and mode == BASELINE:
        raise ValueError("the baseline autoscaler runs only on the simulated provider")
    hosts: dict[str, int] = {}
    if provider == AWS:
        hosts = awsdemo.hosts_per_unit(scenario.node_pools)
        pools = parse_pool_file({"nodePools": awsdemo.aws_pool_specs(scenario.node_pools)}).pools
        scenario = awsdemo.aws_scenario(scenario)
    elif provider == GKE:
        pools = parse_pool_file({"nodePools": gke_pool_specs(scenario.node_pools)}).pools
    else:
        pools = scenario.pools()
    with tempfile.TemporaryDirectory(prefix="gangscale-demo-") as tmp:
        async with sim_cluster(workdir or Path(tmp), pools) as sim:
            watching = None if watcher is None else asyncio.create_task(watcher(sim), name="scenario watcher")
            try:
                return await _run(sim, scenario, mode, speed, provider, hosts)
            finally:
                if watching is not None:
                    await cancel_and_wait((watching,))


async def _run(sim: SimCluster, scenario: Scenario, mode: str, speed: float | None, provider_name: str,
               hosts: dict[str, int]) -> RunResult:
    start = sim.now
    for obj in kueue_objects(scenario, baseline=mode == BASELINE):
        await _create(sim, obj)
    provider: NodePoolProvider
    if provider_name == AWS:
        provider = await sim.start_aws_provider(hosts)
    elif provider_name == GKE:
        provider = await sim.start_gke_provider()
    else:
        provider = await sim.start_provider()
    for change in scenario.cloud:
        sim.schedule(start + change.at, f"cloud change in {change.pool}", _cloud_action(sim, change))
    http = await sim.client("kueue-manager")
    reader = await sim.cache()  # every emulator reads the shared informer cache
    sim.add(KueueCore(http, sim.timeline, reader=reader))
    if mode == GANGSCALE:
        sim.add(ProvisioningCheck(http, sim.timeline, reader=reader))
    sim.add(JobEmulator(await sim.client("job-controllers"), sim.timeline, reader=reader))
    if any(w.autoscales for w in scenario.workloads):
        # Right after the job controllers, so a placement group is seen placed in the round its pods start.
        sim.add(RayAutoscaler(await sim.client("ray-autoscaler"), sim.timeline, ray_scripts(scenario, start),
                              reader=reader))
    sim.add(Scheduler(await sim.client("default-scheduler"), sim.timeline, reader=reader))
    if mode == BASELINE:
        sim.add(PerPodAutoscaler(await sim.client("baseline-autoscaler"), provider, sim.pools, sim.timeline,
                                 reader=reader))
    observer = Observer(sim.http, sim.timeline, reader=reader)
    sim.add(observer)
    if mode == GANGSCALE:
        await sim.start_controller(controller_settings(scenario))
    subjects = []
    for w in scenario.workloads:
        subjects.append(f"{w.namespace}/{w.name}")
        sim.schedule(start + w.at, f"arrival of {w.name}", _arrival(sim, w))
    result = RunResult(scenario, mode, start, start, sim.timeline, observer.nodes, subjects)

    def done() -> bool:
        return result.finished and not any(n.gone is None for n in observer.nodes.values())

    await sim.run_until(start + scenario.until, done=done, speed=speed)
    result.end = sim.now
    result.unsettled = sim.unsettled
    return result


def ray_scripts(scenario: Scenario, start: float) -> dict[tuple[str, str], tuple[Demand, ...]]:
    """Each autoscaling RayCluster's scripted demand, on absolute time; a demand without a duration takes its
    workload's."""
    out = {}
    for w in scenario.workloads:
        if not w.ray_demand:
            continue
        withdrawn = {d.withdraw: start + d.at for d in w.ray_demand if d.withdraw is not None}
        out[(w.namespace, w.name)] = tuple(
            Demand(name=d.name, group=str(d.group), replicas=int(d.replicas or 0), at=start + d.at,
                   withdraw_at=withdrawn.get(d.name), duration=d.duration if d.duration is not None else w.duration)
            for d in w.ray_demand if d.name is not None)
    return out


def _cloud_action(sim: SimCluster, change: CloudChange) -> Action:
    async def act(now: float) -> None:
        provider = sim.provider
        if sim.ec2 is not None:
            _aws_cloud_change(sim, change)
            sim.timeline.add(now, "cloud", change.pool, _describe(change))
            return
        if not isinstance(provider, SimulatedProvider):
            _gke_cloud_change(sim, change)
            sim.timeline.add(now, "cloud", change.pool, _describe(change))
            return
        faults = provider.faults(change.pool)
        if change.unlimited:
            provider.set_stock(change.pool, None)
        elif change.stock is not None:
            provider.set_stock(change.pool, change.stock)
        if change.stockout is not None:
            faults.stockout = change.stockout
        if change.partial_grant is not None:
            faults.partial_grant = change.partial_grant or None
        if change.never_ready is not None:
            faults.never_ready = change.never_ready
        if change.provision_seconds is not None:
            provider.set_provision_seconds(change.pool, change.provision_seconds)
        if change.reclaim:
            faults.reclaim(change.reclaim)
        sim.timeline.add(now, "cloud", change.pool, _describe(change))
    return act


def _gke_cloud_change(sim: SimCluster, change: CloudChange) -> None:
    """A scenario's cloud change on the fake GKE: stock and stockouts of the pool's zone and machine type, and the
    time nodes take to turn Ready; the rest is not modelled there (:mod:`gangscale.sim.gkedemo`)."""
    gcp, capacity = sim.gcp, sim.capacity
    assert gcp is not None and capacity is not None
    if change.unlimited:
        capacity.set(change.pool, None)
    elif change.stock is not None:
        capacity.set(change.pool, change.stock)
    if change.stockout:
        capacity.set(change.pool, 0)
    if change.provision_seconds is not None:
        gcp.faults.ready_seconds = change.provision_seconds


def _aws_cloud_change(sim: SimCluster, change: CloudChange) -> None:
    """A scenario's cloud change on the fake EC2: the pool's share of its (type, zone, lifecycle) stock, stockouts,
    a partial grant as one fleet's stock, the time nodes take to turn Ready, and spot reclaims
    (:mod:`gangscale.sim.awsdemo`)."""
    ec2, capacity = sim.ec2, sim.aws_capacity
    assert ec2 is not None and capacity is not None
    if change.unlimited:
        capacity.set(change.pool, None)
    elif change.stock is not None:
        capacity.set(change.pool, change.stock)
    if change.stockout is not None:
        capacity.stockout(change.pool, change.stockout)
    if change.partial_grant:
        capacity.partial_grant(change.pool, change.partial_grant)
    if change.provision_seconds is not None:
        ec2.faults.ready_seconds = change.provision_seconds
    if change.reclaim:
        ec2.reclaim(change.reclaim)


def _describe(change: CloudChange) -> str:
    parts = []
    if change.stockout is not None:
        parts.append("stockout begins" if change.stockout else "stockout ends")
    if change.unlimited:
        parts.append("stock unlimited")
    elif change.stock is not None:
        parts.append(f"stock {change.stock} units")
    if change.partial_grant:
        parts.append(f"next request granted only {change.partial_grant} unit(s), then out of stock")
    if change.never_ready is not None:
        parts.append("new nodes never turn Ready" if change.never_ready else "new nodes turn Ready again")
    if change.reclaim:
        parts.append(f"reclaims {change.reclaim} spot node(s), with notice (the first that are Ready)")
    if change.provision_seconds is not None:
        parts.append(f"nodes take {change.provision_seconds:g}s to come up")
    return f"{change.pool}: " + ", ".join(parts or ["no change"])


def _arrival(sim: SimCluster, w: Workload) -> Action:
    async def arrive(now: float) -> None:
        obj = workload_manifest(w)
        await _create(sim, obj)
        sim.timeline.add(now, ARRIVED, f"{w.namespace}/{w.name}", f"{obj['kind']} {w.name} submitted")
    return arrive


async def _create(sim: SimCluster, obj: JSON) -> None:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = _PLURALS[obj["kind"]]
    namespaced = obj["kind"] not in _CLUSTER_SCOPED
    resource = Resource(group, version, plural, namespaced=namespaced)
    ns = (obj.get("metadata") or {}).get("namespace") or "default"
    if namespaced:
        await _ensure_namespace(sim, ns)
    await sim.http.request("POST", resource.path(ns if namespaced else None), body=obj)


async def _ensure_namespace(sim: SimCluster, ns: str) -> None:
    try:
        await sim.http.request("POST", "/api/v1/namespaces",
                               body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    except ApiError as exc:
        if exc.status != 409:
            raise


_PLURALS = {
    "ResourceFlavor": "resourceflavors", "WorkloadPriorityClass": "workloadpriorityclasses",
    "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues", "AdmissionCheck": "admissionchecks",
    "ProvisioningRequestConfig": "provisioningrequestconfigs", "Job": "jobs", "JobSet": "jobsets",
    "RayJob": "rayjobs", "RayCluster": "rayclusters", "Namespace": "namespaces", "Node": "nodes",
    "PodTemplate": "podtemplates", "Pod": "pods",
}
_CLUSTER_SCOPED = {"ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "AdmissionCheck",
                   "ProvisioningRequestConfig", "Namespace", "Node"}
