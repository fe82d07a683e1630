"""``RayAutoscaler``: the Ray autoscaler (v2, KubeRay provider) of every autoscaling RayCluster, as one
:class:`~gangscale.sim.world.Component` (component ``ray-autoscaler``).

For each RayCluster with ``enableInTreeAutoscaling: true`` whose head pod runs (the autoscaler is a sidecar
of the head; it starts with it), the emulator:

- follows a scripted demand (:class:`~gangscale.sim.rayplan.Demand`, from the scenario's ``rayDemand``):
  placement groups that appear, are placed once their group runs enough replicas, hold them for their
  duration and are released, or are withdrawn. Each step is a ``ray-demand`` timeline entry; placing one is
  also a ``running`` entry (the gang started), and once every scripted demand is released or withdrawn the
  cluster's work is ``finished``;
- runs one autoscaler iteration every ``AUTOSCALER_UPDATE_INTERVAL_S`` (5 s) from the instant the head was
  first seen running, and only when something is to be done: the decisions are
  :func:`gangscale.sim.rayplan.plan`'s, sent as one JSON patch (``application/json-patch+json``) to the
  RayCluster (field manager ``ray-autoscaler``), each group's change a ``ray-scale`` timeline entry.

A cluster with no script has no demand: the autoscaler keeps its groups at ``minReplicas`` and removes idle
workers, as a real one with no Ray work would.

Simplified (more in :mod:`gangscale.sim.rayplan`): a demand is only seen once the head runs (demands due
earlier are seen then); the autoscaler's memory (the grid origin, idle times, which demands were placed) is
in this object, not recovered from the cluster; no GCS, no Ray node states, no autoscaler Events or status
ConfigMap; a suspended or deleting RayCluster is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import PODS, RAYCLUSTERS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim import rayplan
from gangscale.sim.informers import HttpReader, Reader
from gangscale.sim.jobs.controllers import is_deleting
from gangscale.sim.jobs.kinds import is_suspended, key, meta, uid
from gangscale.sim.jobs.raycontrollers import RAY_CLUSTER, autoscaling_enabled
from gangscale.sim.rayplan import Demand
from gangscale.sim.world import FINISHED, RAY_DEMAND, RAY_SCALE, RUNNING, Timeline

JSON = dict[str, Any]
log = logging.getLogger(__name__)

JSON_PATCH = "application/json-patch+json"
FIELD_MANAGER = "ray-autoscaler"

#: Scripted demand per RayCluster, keyed by (namespace, name).
Scripts = Mapping[tuple[str, str], Sequence[Demand]]


@dataclass
class _Cluster:
    """What one cluster's autoscaler remembers between iterations."""

    origin: float
    last_tick: float | None = None
    idle: dict[str, float] = field(default_factory=dict)
    placed: dict[str, float] = field(default_factory=dict)
    announced: set[str] = field(default_factory=set)
    ended: set[str] = field(default_factory=set)
    finished: bool = False


def _of_a_ray_cluster(pod: JSON) -> bool:
    return RAY_CLUSTER in (meta(pod).get("labels") or {})


class RayAutoscaler:
    name = "ray-autoscaler"

    def __init__(self, http: KubeHTTP, timeline: Timeline, scripts: Scripts | None = None, *,
                 interval: float = rayplan.AUTOSCALER_UPDATE_INTERVAL_S,
                 max_launches: int = rayplan.MAX_CONCURRENT_LAUNCHES, reader: Reader | None = None) -> None:
        self.http = http
        #: Where the reads come from: the driver's informer cache, else a LIST per read.
        self.reader = reader or HttpReader(http)
        self.timeline = timeline
        self.scripts: dict[tuple[str, str], tuple[Demand, ...]] = {k: tuple(v) for k, v in (scripts or {}).items()}
        self.interval = interval
        self.max_launches = max_launches
        self._clusters: dict[str, _Cluster] = {}
        self._wake: float | None = None

    def next_wake(self) -> float | None:
        return self._wake

    async def sync(self, now: float) -> bool:
        try:
            clusters = await self.reader.items(RAYCLUSTERS)
            pods = await self.reader.items(PODS, _of_a_ray_cluster)
        except ApiError as exc:
            if exc.not_found:  # RayClusters not served here
                return False
            log.warning("ray-autoscaler: cannot read the cluster: %s", exc)
            return False
        by_cluster: dict[tuple[str, str], list[JSON]] = {}
        for pod in pods:
            by_cluster.setdefault((key(pod)[0], (meta(pod).get("labels") or {}).get(RAY_CLUSTER, "")), []).append(pod)
        wrote, seen = False, set()
        wakes: list[float] = []
        for rc in sorted(clusters, key=key):
            if not autoscaling_enabled(rc) or is_suspended(rc) or is_deleting(rc):
                continue
            seen.add(uid(rc))
            try:
                wrote = await self._reconcile(rc, by_cluster.get(key(rc), []), now, wakes) or wrote
            except ApiError as exc:
                log.warning("ray-autoscaler: RayCluster %s/%s: %s", *key(rc), exc)
                wakes.append(now + self.interval)
        self._clusters = {k: v for k, v in self._clusters.items() if k in seen}
        self._wake = min(wakes) if wakes else None
        return wrote

    async def _reconcile(self, rc: JSON, pods: list[JSON], now: float, wakes: list[float]) -> bool:
        if not rayplan.head_running(pods):
            return False
        state = self._clusters.setdefault(uid(rc), _Cluster(origin=now))
        subject = "/".join(key(rc))
        script = self.scripts.get(key(rc), ())
        groups = rayplan.groups_of(rc, pods)
        self._follow_demand(state, script, groups, subject, now, wakes)
        live = rayplan.live_demands(script, state.placed, now)
        target = rayplan.targets(groups, live)
        state.idle = rayplan.idle_since(groups, target, state.idle, now)
        step = rayplan.plan(groups, target, state.idle, now, speed=rayplan.upscaling_speed(rc),
                            max_launches=self.max_launches)
        wakes.extend(rayplan.tick_at_or_after(state.origin, t, self.interval) for t in step.idle_until)
        if step.ops or step.blocked:  # an iteration has work: the next one on the grid, unless it is now
            wakes.append(rayplan.tick_after(state.origin, now, self.interval))
        if not rayplan.is_tick(state.origin, now, self.interval) or state.last_tick == now:
            return False
        state.last_tick = now  # one iteration per tick, however many rounds the driver runs at this instant
        if not step.ops:
            return False
        ns, name = key(rc)
        await self.http.request("PATCH", RAYCLUSTERS.path(ns, name), body=list(step.ops), content_type=JSON_PATCH,
                                query={"fieldManager": FIELD_MANAGER})
        for change in step.changes:
            self.timeline.add(now, RAY_SCALE, subject, rayplan.describe(change), group=change.group, old=change.old,
                              new=change.new, workersToDelete=list(change.delete))
        return True

    def _follow_demand(self, state: _Cluster, script: Sequence[Demand], groups: Sequence[rayplan.Group],
                       subject: str, now: float, wakes: list[float]) -> None:
        """Timeline entries for demand that appeared, was placed, released or withdrawn; wakes for what is due."""
        for d in rayplan.appeared(script, now):
            if d.name not in state.announced:
                state.announced.add(d.name)
                self._demand(now, subject, d, "requested",
                             f"placement group {d.name} asks for {d.replicas} {d.group} replica(s)")
        live = rayplan.live_demands(script, state.placed, now)
        for d in rayplan.newly_placed(live, groups, state.placed):
            state.placed[d.name] = now
            self._demand(now, subject, d, "placed", f"placement group {d.name} placed on {d.replicas} running "
                         f"{d.group} replica(s)")
            self.timeline.add(now, RUNNING, subject, f"placement group {d.name}: all {d.replicas} {d.group} "
                              "replica(s) running", demand=d.name, pods=d.replicas)
        for d in rayplan.appeared(script, now):
            if d.name in state.ended:
                continue
            released = rayplan.release_time(d, state.placed)
            if rayplan.is_withdrawn(d, now) and (released is None or released > now):
                state.ended.add(d.name)
                self._demand(now, subject, d, "withdrawn", f"placement group {d.name} withdrawn"
                             + ("" if d.name in state.placed else " before it was placed"))
            elif released is not None and released <= now:
                state.ended.add(d.name)
                self._demand(now, subject, d, "released", f"placement group {d.name} released after "
                             f"{d.duration:g}s of work")
        if script and len(state.ended) == len(script) and not state.finished:
            state.finished = True
            done = sum(1 for d in script if d.name in state.placed)
            self.timeline.add(now, FINISHED, subject, f"all Ray demand over: {done} placement group(s) served, "
                              f"{len(script) - done} withdrawn unplaced", seconds=now - min(d.at for d in script))
        for d in script:
            released = rayplan.release_time(d, state.placed)
            wakes.extend(t for t in (d.at, d.withdraw_at, released) if t is not None and t > now)

    def _demand(self, now: float, subject: str, d: Demand, event: str, text: str) -> None:
        self.timeline.add(now, RAY_DEMAND, subject, text, demand=d.name, group=d.group, replicas=d.replicas,
                          event=event)
