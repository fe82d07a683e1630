"""The Ray autoscaler's decisions for one RayCluster, as pure functions (the I/O is in
:mod:`gangscale.sim.rayautoscaler`).

The facts reproduced (ray-accel-spec §1.3, §1.7; Ray autoscaler v2 with the KubeRay cloud provider):

- Demand is scripted: named placement-group demands of whole replicas of one worker group
  (:class:`Demand`). The target of a group is ``max(minReplicas, sum of live demands)``, capped at
  ``maxReplicas``.
- Launches are rate-limited per iteration as ``_compute_to_launch`` does: over all groups at most
  ``max_concurrent_launches`` (10) pods minus those still *requested* (asked for on the RayCluster, no pod
  yet), and per group ``max(1, ceil(upscaling_speed * max(running pods of the group, 1)))`` pods
  (``upscalingMode: Conservative`` means speed 1, anything else 1000). Multi-host groups launch whole
  replicas only. Groups take their share in ``workerGroupSpecs`` order.
- One iteration sends at most ONE RFC 6902 JSON patch, ops in the order ``KubeRayProvider`` builds them:
  ``replace /spec/workerGroupSpecs/<i>/replicas`` for every group whose target changed, then ``replace
  /spec/workerGroupSpecs/<i>/scaleStrategy`` with the new ``workersToDelete``, then the same with ``[]`` for
  groups whose earlier deletions are complete. The base a target is computed from is ``max(replicas,
  minReplicas)``, raised to the replicas actually observed (Ray PR #57539).
- While a group still has a pod named in ``workersToDelete`` that exists (not being deleted), the iteration
  neither launches nor terminates anything ("Waiting for them to be deleted before creating new workers").
- Scale-down: replicas beyond the target are *surplus*. Replicas are ranked running first, then oldest,
  then by name; the first ``target`` are busy. A surplus replica whose pods are not all running is removed at
  the next iteration; one that runs is removed once it has been surplus for the group's idle timeout
  (``idleTimeoutSeconds`` of the group, else ``autoscalerOptions.idleTimeoutSeconds``, else 60 s). Removal
  lowers ``replicas`` and names every pod of the replica in ``workersToDelete``.

Assumptions and simplifications: removing *pending* workers at once is what v2 does when
``RAY_AUTOSCALER_PENDING_NODE_IDLE_TIMEOUT_S`` is set (it is off by default: then pending workers stay up to the
1-hour allocation timeout); the emulator assumes it is set, at 0. A running replica is idle exactly when no
live demand needs it: Ray's per-node resource accounting, actors and tasks are not modelled, and every
replica of a group is interchangeable. A demand is *placed* (served) when its group runs enough replicas for
it and every demand of the group that came before it (first come, first served), and stays placed. Ray clears
``workersToDelete`` only inside its next launch or terminate patch; the emulator clears it at the first
iteration after the pods are gone, in a patch of its own. No instance-manager states, retries, launch
errors, allocation timeouts, v1 autoscaler, ``request_resources`` or head-node resources.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangscale.sim.jobs.controllers import is_deleting, is_terminal
from gangscale.sim.jobs.kinds import as_int, meta, spec, status
from gangscale.sim.jobs.raycontrollers import (
    INT32_MAX,
    RAY_GROUP,
    RAY_NODE_TYPE,
    REPLICA_NAME,
    num_of_hosts,
    workers_to_delete,
)

JSON = dict[str, Any]

AUTOSCALER_UPDATE_INTERVAL_S = 5.0
MAX_CONCURRENT_LAUNCHES = 10
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_UPSCALING_SPEED = 1000.0
CONSERVATIVE_UPSCALING_SPEED = 1.0


@dataclass(frozen=True, slots=True)
class Demand:
    """A placement group a Ray app asks for: ``replicas`` whole replicas of worker group ``group``.

    It appears at ``at``; it is withdrawn at ``withdraw_at`` (the app gave up or was cancelled); once placed it
    holds its replicas for ``duration`` seconds and is then released (None: until withdrawn). Times are
    absolute simulated times."""

    name: str
    group: str
    replicas: int
    at: float
    withdraw_at: float | None = None
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica of a worker group: a pod, or ``numOfHosts`` pods sharing a replica name."""

    id: str
    pods: tuple[str, ...]
    running: bool
    created: str


@dataclass(frozen=True, slots=True)
class Group:
    """A worker group as the autoscaler sees it: its spec and its live (not being deleted) pods."""

    index: int
    name: str
    hosts: int
    replicas: int
    min_replicas: int
    max_replicas: int
    idle_timeout: float
    workers_to_delete: tuple[str, ...]
    live: tuple[Replica, ...]
    pods: frozenset[str]
    running_pods: int

    @property
    def pending_deletes(self) -> bool:
        """A pod named in ``workersToDelete`` still exists."""
        return any(name in self.pods for name in self.workers_to_delete)

    @property
    def kept(self) -> tuple[Replica, ...]:
        """Live replicas not named for deletion, busy-first (see :func:`rank`)."""
        listed = set(self.workers_to_delete)
        return rank(r for r in self.live if not listed.intersection(r.pods))


def rank(replicas: Iterable[Replica]) -> tuple[Replica, ...]:
    return tuple(sorted(replicas, key=lambda r: (not r.running, r.created, r.id)))


def _container_running(pod: JSON) -> bool:
    # KubeRayProvider._is_running: the first container status says running.
    statuses = status(pod).get("containerStatuses") or []
    return bool(statuses) and "running" in ((statuses[0] or {}).get("state") or {})


def _labels(pod: JSON) -> Mapping[str, str]:
    return meta(pod).get("labels") or {}


def head_running(pods: Iterable[JSON]) -> bool:
    """The autoscaler is a sidecar of the head pod: it acts only while the head runs."""
    return any(_labels(p).get(RAY_NODE_TYPE) == "head" and not is_deleting(p) and _container_running(p)
               for p in pods)


def _idle_timeout(rc: JSON, group: JSON) -> float:
    for raw in (group.get("idleTimeoutSeconds"), (spec(rc).get("autoscalerOptions") or {}).get("idleTimeoutSeconds")):
        if raw is not None:
            return float(as_int(raw, int(DEFAULT_IDLE_TIMEOUT_S)))
    return DEFAULT_IDLE_TIMEOUT_S


def upscaling_speed(rc: JSON) -> float:
    mode = (spec(rc).get("autoscalerOptions") or {}).get("upscalingMode")
    return CONSERVATIVE_UPSCALING_SPEED if mode == "Conservative" else DEFAULT_UPSCALING_SPEED


def groups_of(rc: JSON, pods: Iterable[JSON]) -> list[Group]:
    live = [p for p in pods if not is_deleting(p) and not is_terminal(p) and _labels(p).get(RAY_NODE_TYPE) == "worker"]
    out = []
    for index, group in enumerate(spec(rc).get("workerGroupSpecs") or []):
        name, hosts = str(group.get("groupName", "")), num_of_hosts(group)
        mine = [p for p in live if _labels(p).get(RAY_GROUP) == name]
        members: dict[str, list[JSON]] = {}
        for pod in mine:
            rid = (_labels(pod).get(REPLICA_NAME) if hosts > 1 else None) or str(meta(pod).get("name", ""))
            members.setdefault(rid, []).append(pod)
        replicas = tuple(Replica(rid, tuple(sorted(str(meta(p).get("name", "")) for p in ps)),
                                 len(ps) >= hosts and all(_container_running(p) for p in ps),
                                 min(str(meta(p).get("creationTimestamp", "")) for p in ps))
                         for rid, ps in members.items())
        out.append(Group(index=index, name=name, hosts=hosts, replicas=max(as_int(group.get("replicas"), 0), 0),
                         min_replicas=max(as_int(group.get("minReplicas"), 0), 0),
                         max_replicas=as_int(group.get("maxReplicas"), INT32_MAX),
                         idle_timeout=_idle_timeout(rc, group), workers_to_delete=tuple(workers_to_delete(group)),
                         live=replicas, pods=frozenset(str(meta(p).get("name", "")) for p in mine),
                         running_pods=sum(1 for p in mine if _container_running(p))))
    return out


# --- demand ---------------------------------------------------------------------------------------------

def appeared(demands: Sequence[Demand], now: float) -> list[Demand]:
    return [d for d in demands if d.at <= now]


def is_withdrawn(demand: Demand, now: float) -> bool:
    return demand.withdraw_at is not None and demand.withdraw_at <= now


def release_time(demand: Demand, placed: Mapping[str, float]) -> float | None:
    """When a placed demand is released (its work done), or None."""
    at = placed.get(demand.name)
    return None if at is None or demand.duration is None else at + demand.duration


def live_demands(demands: Sequence[Demand], placed: Mapping[str, float], now: float) -> list[Demand]:
    """Demands that hold (or want) replicas now: appeared, not withdrawn, not released."""
    out = []
    for d in appeared(demands, now):
        released = release_time(d, placed)
        if not is_withdrawn(d, now) and (released is None or released > now):
            out.append(d)
    return out


def newly_placed(live: Sequence[Demand], groups: Sequence[Group], placed: Mapping[str, float]) -> list[Demand]:
    """Live demands not yet placed that the running replicas now cover (first come, first served per group)."""
    running = {g.name: sum(1 for r in g.kept if r.running) for g in groups}
    used: dict[str, int] = {}
    out = []
    for d in sorted(live, key=lambda d: d.at):
        used[d.group] = used.get(d.group, 0) + d.replicas
        if d.name not in placed and used[d.group] <= running.get(d.group, 0):
            out.append(d)
    return out


def targets(groups: Sequence[Group], live: Sequence[Demand]) -> dict[str, int]:
    wanted = {g.name: 0 for g in groups}
    for d in live:
        if d.group in wanted:
            wanted[d.group] += d.replicas
    return {g.name: min(max(g.min_replicas, wanted[g.name]), g.max_replicas) for g in groups}


def surplus(group: Group, target: int) -> tuple[Replica, ...]:
    return group.kept[max(target, 0):]


def idle_since(groups: Sequence[Group], target: Mapping[str, int], previous: Mapping[str, float],
               now: float) -> dict[str, float]:
    """Since when each surplus *running* replica has been idle (kept from ``previous``, else now)."""
    out = {}
    for g in groups:
        for r in surplus(g, target[g.name]):
            if r.running:
                out[r.id] = previous.get(r.id, now)
    return out


# --- one iteration ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Change:
    """What one iteration does to one group, for the patch and the timeline."""

    group: str
    old: int
    new: int
    wanted: int
    delete: tuple[str, ...] = ()
    cleared: bool = False
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Iteration:
    ops: tuple[JSON, ...] = ()
    changes: tuple[Change, ...] = ()
    #: Launches and terminations refused because named pods still exist.
    blocked: bool = False
    #: Surplus running replicas whose idle timeout has not run out, with when it does.
    idle_until: tuple[float, ...] = field(default_factory=tuple)


def _victims(group: Group, target: int, idle: Mapping[str, float], now: float) -> tuple[list[Replica], str]:
    gone, reasons = [], set()
    for r in surplus(group, target):
        if not r.running:
            gone.append(r)
            reasons.add("not running, no longer needed")
        elif now - idle.get(r.id, now) >= group.idle_timeout:
            gone.append(r)
            reasons.add(f"idle for {group.idle_timeout:g}s")
    return gone, "; ".join(sorted(reasons))


def plan(groups: Sequence[Group], target: Mapping[str, int], idle: Mapping[str, float], now: float, *,
         speed: float = DEFAULT_UPSCALING_SPEED, max_launches: int = MAX_CONCURRENT_LAUNCHES) -> Iteration:
    """The patch one autoscaler iteration sends now (no ops: nothing to do, or blocked)."""
    idle_until = tuple(idle[r.id] + g.idle_timeout for g in groups for r in surplus(g, target[g.name])
                       if r.running and r.id in idle and now - idle[r.id] < g.idle_timeout)
    if any(g.pending_deletes for g in groups):
        return Iteration(blocked=True, idle_until=idle_until)
    requested = sum(max(0, g.replicas * g.hosts - len(g.pods)) for g in groups)
    budget = max(0, max_launches - requested)
    replica_ops: list[JSON] = []
    delete_ops: list[JSON] = []
    clear_ops: list[JSON] = []
    changes: list[Change] = []
    for g in groups:
        want = target[g.name]
        base = max(g.replicas, g.min_replicas, len(g.kept))
        new, doomed, reason = base, [], ""
        if want > base:
            per_group = max(1, math.ceil(speed * max(g.running_pods, 1)))
            launch = min(want - base, min(per_group, budget) // g.hosts)
            budget -= launch * g.hosts
            new = base + launch
            if launch < want - base:
                reason = f"at most {max_launches} launches per iteration"
        elif want < base:
            victims, reason = _victims(g, want, idle, now)
            doomed = [pod for r in victims for pod in r.pods]
            new = base - len(victims)
        new = min(new, g.max_replicas)
        if new != g.replicas:
            replica_ops.append({"op": "replace", "path": f"/spec/workerGroupSpecs/{g.index}/replicas", "value": new})
        if doomed:
            delete_ops.append({"op": "replace", "path": f"/spec/workerGroupSpecs/{g.index}/scaleStrategy",
                               "value": {"workersToDelete": doomed}})
        elif g.workers_to_delete:
            clear_ops.append({"op": "replace", "path": f"/spec/workerGroupSpecs/{g.index}/scaleStrategy",
                              "value": {"workersToDelete": []}})
        if new != g.replicas or doomed or g.workers_to_delete:
            changes.append(Change(g.name, g.replicas, new, want, tuple(doomed),
                                  cleared=bool(g.workers_to_delete) and not doomed, reason=reason))
    return Iteration(tuple(replica_ops + delete_ops + clear_ops), tuple(changes), idle_until=idle_until)


def describe(change: Change) -> str:
    """One timeline line for a group's change."""
    parts = []
    if change.new != change.old:
        parts.append(f"{change.group} replicas {change.old} -> {change.new}")
        if change.new < change.wanted:
            parts.append(f"({change.wanted} wanted; {change.reason})" if change.reason else
                         f"({change.wanted} wanted)")
    if change.delete:
        parts.append(f"workersToDelete {', '.join(change.delete)} ({change.reason})")
    if change.cleared:
        parts.append(f"{change.group} workersToDelete cleared (the pods are gone)")
    return "autoscaler: " + " ".join(parts)


# --- the 5-second grid --------------------------------------------------------------------------------

def tick_at_or_after(origin: float, when: float, interval: float = AUTOSCALER_UPDATE_INTERVAL_S) -> float:
    """The first iteration time (``origin + k * interval``) at or after ``when``."""
    if when <= origin:
        return origin
    k = math.ceil((when - origin) / interval - 1e-9)
    return origin + k * interval


def tick_after(origin: float, now: float, interval: float = AUTOSCALER_UPDATE_INTERVAL_S) -> float:
    return tick_at_or_after(origin, now + interval / 2, interval)


def is_tick(origin: float, now: float, interval: float = AUTOSCALER_UPDATE_INTERVAL_S) -> bool:
    return abs(tick_at_or_after(origin, now, interval) - now) < 1e-6
