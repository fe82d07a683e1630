"""The baseline: a per-pod autoscaler, standing in for the cluster-autoscaler without ProvisioningRequest support.

It shows what gang-unaware autoscaling costs. Every ``scan_interval`` of simulated time it reads the pods
the simulated scheduler marked unschedulable (``PodScheduled=False``, reason ``Unschedulable``) and plans
new units pod by pod (:func:`gangscale.sim.baselineplan.plan_scale_up`). It then asks the provider for them
**one unit at a time** (``obtain(pool, 1)``) and keeps whatever it gets: a stockout or quota error stops
that pool and backs it off as the cluster-autoscaler backs off a node group (5 minutes, doubling up to 30,
forgotten after 3 hours without failure), so that later scans move on to the next pool; nothing obtained is
given back. A job that needs eight nodes may so
get five, hold them idle, and wait — which gangscale's all-or-nothing scale-up exists to prevent.

What it reads and writes: Nodes (units are counted from the labels ``gangscale.io/node-pool`` and
``gangscale.io/unit``, so nothing is kept in memory that a restart would lose) and Pods, over HTTP;
units are created and deleted only through the provider (``obtain`` / ``release``), which writes the Node
objects. Units asked for and not Ready yet are coming capacity and are not asked for again. Scale-down
(:func:`gangscale.sim.baselineplan.plan_scale_down`): a unit empty for ``unneeded_time`` is released, and
so is a unit not Ready ``max_provision_time`` after it was created, never below the pool's ``minUnits``.
The timeline's capacity entries come from the driver's observer, not from here.

Time: scans happen on a fixed grid (the first :meth:`sync`, then every ``scan_interval``), as the
cluster-autoscaler's loop runs; :meth:`next_wake` names the next grid point only while something may be
done (new unschedulable pods since the last scan, a failed obtain to retry, a unit due for release), so an
idle cluster does not tick forever. How long a unit has been empty is measured from the first
:meth:`sync` that saw it empty (kept in memory: a restart starts the count again).

Simplified (see also :mod:`gangscale.sim.baselineplan`): provider calls are awaited inline, so a pool with
simulated ``call_latency`` would stall the driver (the clock cannot move while a component runs); tokens are
unique per instance and per second, not across restarts within the same second; no Events, no status.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.kube.resources import NODES, PODS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.providers.base import UNIT_LABEL, NodePoolProvider, ProviderError
from gangscale.sim.baselineplan import (
    Bin,
    UnitState,
    plan_scale_down,
    plan_scale_up,
    release_due,
    track_empty,
)
from gangscale.sim.filters import NodeInfo, PodInfo, node_info, pod_info
from gangscale.sim.informers import HttpReader, Reader
from gangscale.sim.scheduler import condition, is_assigned, is_pending, queue_key
from gangscale.sim.world import Timeline
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)

#: How long one obtain call may take (clock seconds); the simulated cloud answers at once without latency.
OBTAIN_TIMEOUT = 60.0
#: Taints a coming node carries only until it is Ready: not held against the pods planned onto it.
STARTUP_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_GRID_SLACK = 1e-6
#: The cluster-autoscaler's node-group backoff defaults (initial, maximum, reset after).
BACKOFF_INITIAL = 300.0
BACKOFF_MAX = 1800.0
BACKOFF_RESET = 3 * 3600.0


@dataclass(frozen=True, slots=True)
class Observed:
    units: tuple[UnitState, ...]
    bins: tuple[Bin, ...]
    #: Unschedulable pods, in scheduling-queue order.
    pending: tuple[PodInfo, ...]


def is_unschedulable(pod: JSON) -> bool:
    found = condition(pod, "PodScheduled") or {}
    return is_pending(pod) and found.get("status") == "False" and found.get("reason") == "Unschedulable"


class PerPodAutoscaler:
    """A Component: see the module docstring. The provider must be started."""

    name = "baseline-autoscaler"

    def __init__(self, http: KubeHTTP, provider: NodePoolProvider, pools: Sequence[NodePool], timeline: Timeline,
                 *, scan_interval: float = 10.0, unneeded_time: float = 600.0, max_provision_time: float = 900.0,
                 extended_resource_toleration: bool = True, reader: Reader | None = None) -> None:
        if scan_interval <= 0:
            raise ValueError("scan_interval must be positive")
        self.http = http
        #: Where the reads come from: the driver's informer cache, else a LIST per read.
        self.reader = reader or HttpReader(http)
        self.provider = provider
        self.pools = tuple(pools)
        self._by_name = {pool.name: pool for pool in self.pools}
        self.timeline = timeline
        self.scan_interval = scan_interval
        self.unneeded_time = unneeded_time
        self.max_provision_time = max_provision_time
        self.extended_resource_toleration = extended_resource_toleration
        self._anchor: float | None = None
        self._scanned: int | None = None
        self._empty_since: dict[str, float] = {}
        self._seen_at_scan: frozenset[str] = frozenset()
        self._unmet = False
        self._wake: float | None = None
        self._seq = 0
        #: Per pool: (skip until, last backoff length), as the cluster-autoscaler backs off a node group whose
        #: scale-up failed (5 min, doubling to 30 min) so that its expander moves on to another group.
        self._backoff: dict[str, tuple[float, float]] = {}

    def next_wake(self) -> float | None:
        return self._wake

    async def sync(self, now: float) -> bool:
        if self._anchor is None:
            self._anchor = now
        seen = await self._observe(now)
        self._empty_since = track_empty(now, seen.units, self._empty_since)
        wrote = False
        index = self._grid_index(now)
        if index is not None and index != self._scanned:
            self._scanned = index
            wrote = await self._scan(now, seen)
            if wrote:
                seen = await self._observe(now)
                self._empty_since = track_empty(now, seen.units, self._empty_since)
        self._wake = self._next_wake(now, seen)
        return wrote

    # --- one scan -------------------------------------------------------------------------------------------

    async def _scan(self, now: float, seen: Observed) -> bool:
        wrote = False
        releases = plan_scale_down(now, seen.units, self._by_name, self._empty_since,
                                   unneeded_time=self.unneeded_time, max_provision_time=self.max_provision_time)
        gone: set[str] = set()
        for unit in releases:
            try:
                await self.provider.release(unit.pool, [unit.unit_id], token=f"baseline-release-{unit.unit_id}")
            except ProviderError as exc:
                log.warning("baseline: releasing unit %s of %s failed: %s", unit.unit_id, unit.pool, exc)
                continue
            log.info("baseline: released unit %s of %s (%s)", unit.unit_id, unit.pool,
                     "never became Ready" if not unit.ready else "empty")
            gone.add(unit.unit_id)
            wrote = True
        units = Counter(u.pool for u in seen.units if u.unit_id not in gone)
        bins = [b for b in seen.bins if b.unit is None or b.unit not in gone]
        usable = [pool for pool in self.pools if self._backoff.get(pool.name, (0.0, 0.0))[0] <= now]
        plan = plan_scale_up(seen.pending, usable, bins, units)
        failed: set[str] = set()
        for pool in plan.units:
            if pool in failed:
                continue  # no rollback and no retry until the next scan
            self._seq += 1
            token = f"baseline-{pool[:30]}-{int(now):x}-{self._seq}"
            try:
                await self.provider.obtain(pool, 1, token=token, deadline=now + OBTAIN_TIMEOUT)
            except ProviderError as exc:
                log.info("baseline: pool %s: %s; keeping what this scan got", pool, exc)
                failed.add(pool)
                self._back_off(pool, now)
                wrote = wrote or not exc.rolled_back
                continue
            wrote = True
        self._unmet = bool(failed)
        self._seen_at_scan = frozenset(p.uid for p in seen.pending)
        return wrote

    def _back_off(self, pool: str, now: float) -> None:
        until, length = self._backoff.get(pool, (0.0, 0.0))
        if now - until > BACKOFF_RESET:
            length = 0.0
        length = min(BACKOFF_MAX, length * 2 if length else BACKOFF_INITIAL)
        self._backoff[pool] = (now + length, length)

    # --- time -----------------------------------------------------------------------------------------------

    def _grid_index(self, at: float) -> int | None:
        assert self._anchor is not None
        index = round((at - self._anchor) / self.scan_interval)
        return index if abs(self._anchor + index * self.scan_interval - at) <= _GRID_SLACK else None

    def _grid_at_or_after(self, at: float) -> float:
        assert self._anchor is not None
        index = max(0, math.ceil((at - self._anchor) / self.scan_interval - _GRID_SLACK))
        if self._scanned is not None and index <= self._scanned:
            index = self._scanned + 1
        return self._anchor + index * self.scan_interval

    def _next_wake(self, now: float, seen: Observed) -> float | None:
        times: list[float] = []
        if self._unmet or frozenset(p.uid for p in seen.pending) - self._seen_at_scan:
            times.append(self._grid_at_or_after(now))
        left = Counter(u.pool for u in seen.units)
        for unit in seen.units:
            due = release_due(unit, self._empty_since, unneeded_time=self.unneeded_time,
                              max_provision_time=self.max_provision_time)
            if due is not None and left[unit.pool] > self._by_name[unit.pool].min_units:
                times.append(self._grid_at_or_after(max(due, now)))
        return min(times) if times else None

    # --- reading --------------------------------------------------------------------------------------------

    async def _observe(self, now: float) -> Observed:
        nodes = await self.reader.items(NODES)
        pending: list[PodInfo] = []
        on_node: dict[str, list[PodInfo]] = {}
        for pod in await self.reader.items(PODS):
            assigned, waiting = is_assigned(pod), is_unschedulable(pod)
            if not (assigned or waiting):
                continue
            try:
                parsed = pod_info(pod, extended_resource_toleration=self.extended_resource_toleration)
            except ValueError:
                continue  # the scheduler logs it
            if assigned:
                on_node.setdefault(str(pod["spec"]["nodeName"]), []).append(parsed)
            else:
                pending.append(parsed)
        pending.sort(key=queue_key)
        bins: list[Bin] = []
        members: dict[tuple[str, str], list[tuple[NodeInfo, float]]] = {}
        for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name"))):
            meta = node.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            labels = meta.get("labels") or {}
            pool, unit = str(labels.get(POOL_LABEL, "")), str(labels.get(UNIT_LABEL, ""))
            managed = pool in self._by_name and bool(unit)
            info = node_info(node)
            if managed:
                created = parse_rfc3339(meta.get("creationTimestamp"))
                members.setdefault((pool, unit), []).append((info, now if created is None else created))
            if managed or info.ready:
                bins.append(_bin(info, on_node.get(info.name, ()), unit if managed else None))
        units = tuple(
            UnitState(pool, unit, tuple(n.name for n, _ in group), all(n.ready for n, _ in group),
                      min(c for _, c in group), any(on_node.get(n.name) for n, _ in group))
            for (pool, unit), group in sorted(members.items()))
        return Observed(units, tuple(bins), tuple(pending))


def _bin(node: NodeInfo, pods: Sequence[PodInfo], unit: str | None) -> Bin:
    """A node as room for pods; a coming node (not Ready yet) is judged as it will be once Ready."""
    if not node.ready:
        node = NodeInfo(node.name, node.labels, tuple(t for t in node.taints if t.get("key") not in STARTUP_TAINTS),
                        node.unschedulable, True, node.allocatable)
    room = Bin(node, unit=unit)
    for pod in pods:
        room.add(pod)
    return room
