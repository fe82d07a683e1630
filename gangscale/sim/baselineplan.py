"""What the per-pod baseline autoscaler decides, as pure functions: which units to ask for, which to give back.

Scale-up (:func:`plan_scale_up`) looks at unschedulable pods one at a time, in scheduling-queue order. A pod
first goes, first fit, to a node that could already take it: a Ready node with room, a node of a unit that
was asked for and is not Ready yet (coming capacity, judged without its ``not-ready`` taint), or a node
opened earlier in the same plan. Otherwise it opens a unit of the first pool, in the pool file's order,
whose node template (labels, taints, allocatable of :class:`~gangscale.model.nodepool.NodePool`) takes it
and that is below ``maxUnits``. The pod-versus-node test is the simulated scheduler's own
(:func:`gangscale.sim.filters.filter_node`). Nothing here knows about gangs: a job's pods are planned like
any others, which is what makes the baseline a baseline.

Scale-down (:func:`plan_scale_down`): a Ready unit that has held no non-terminal pod for ``unneeded_time``,
and a unit not Ready ``max_provision_time`` after its nodes were created, are released, never taking a
pool below ``minUnits``.

Simplified against the cluster-autoscaler: one estimator (first fit) and one expander (pool order) instead
of the binpacking estimator and configurable expanders; no scale-down of under-used (non-empty) nodes and
no pod eviction; no ``scale-down-delay-after-add``. Node-group backoff after errors is the component's
(:mod:`gangscale.sim.baseline`): pools backed off are simply not offered to :func:`plan_scale_up`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.model.resources import DEFAULT_MAX_PODS, PODS
from gangscale.sim.filters import HOSTNAME_LABEL, NodeInfo, PodInfo, filter_node


@dataclass
class Bin:
    """A node a pod could go to, and what the plan has put on it so far."""

    node: NodeInfo
    requested: dict[str, int] = field(default_factory=dict)
    pods: list[PodInfo] = field(default_factory=list)
    #: The unit the node belongs to (None for a node outside the managed pools).
    unit: str | None = None

    def takes(self, pod: PodInfo) -> bool:
        return not filter_node(pod, self.node, self.requested, len(self.pods), self.pods)

    def add(self, pod: PodInfo) -> None:
        for name, amount in pod.requests.items():
            self.requested[name] = self.requested.get(name, 0) + amount
        self.pods.append(pod)


@dataclass(frozen=True, slots=True)
class UnitState:
    pool: str
    unit_id: str
    nodes: tuple[str, ...]
    #: Every node of the unit is Ready.
    ready: bool
    #: When its first node was created (clock seconds).
    created: float
    #: Some node of the unit holds a non-terminal pod.
    busy: bool


@dataclass(frozen=True, slots=True)
class ScaleUp:
    #: One entry per unit to obtain, the pool's name, in the order the pods asked for them.
    units: tuple[str, ...] = ()
    #: Pods (``namespace/name``) no node and no pool below its maximum can take.
    stranded: tuple[str, ...] = ()


def template_node(pool: NodePool, name: str) -> NodeInfo:
    """A new node of ``pool``, as the simulated cloud registers it, once Ready."""
    allocatable = dict(pool.allocatable)
    allocatable.setdefault(PODS, DEFAULT_MAX_PODS)
    labels = {**pool.labels, POOL_LABEL: pool.name, HOSTNAME_LABEL: name}
    taints = tuple({"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints)
    return NodeInfo(name, labels, taints, False, True, allocatable)


def plan_scale_up(pods: Sequence[PodInfo], pools: Sequence[NodePool], bins: Sequence[Bin],
                  units: Mapping[str, int]) -> ScaleUp:
    """The units to obtain for ``pods`` (in queue order), given the nodes that exist or are coming (``bins``,
    not modified) and the units each pool has now."""
    open_bins = [Bin(b.node, dict(b.requested), list(b.pods), b.unit) for b in bins]
    count = Counter({pool.name: units.get(pool.name, 0) for pool in pools})
    wanted: list[str] = []
    stranded: list[str] = []
    for pod in pods:
        spot = next((b for b in open_bins if b.takes(pod)), None)
        if spot is not None:
            spot.add(pod)
            continue
        for pool in pools:
            if count[pool.name] >= pool.max_units:
                continue
            prefix = f"{pool.name}-planned-{len(wanted)}"
            new = [Bin(template_node(pool, f"{prefix}-{i}")) for i in range(pool.nodes_per_unit)]
            if not new[0].takes(pod):
                continue
            new[0].add(pod)
            open_bins.extend(new)
            count[pool.name] += 1
            wanted.append(pool.name)
            break
        else:
            stranded.append(pod.key)
    return ScaleUp(tuple(wanted), tuple(stranded))


def track_empty(now: float, units: Sequence[UnitState], empty_since: Mapping[str, float]) -> dict[str, float]:
    """Since when each Ready unit has been empty (a unit that held a pod, or is not Ready, starts over)."""
    return {u.unit_id: empty_since.get(u.unit_id, now) for u in units if u.ready and not u.busy}


def release_due(unit: UnitState, empty_since: Mapping[str, float], *, unneeded_time: float,
                max_provision_time: float) -> float | None:
    """When ``unit`` becomes one to release (if nothing changes), or None."""
    if not unit.ready:
        return unit.created + max_provision_time
    since = empty_since.get(unit.unit_id)
    return None if since is None else since + unneeded_time


def plan_scale_down(now: float, units: Sequence[UnitState], pools: Mapping[str, NodePool],
                    empty_since: Mapping[str, float], *, unneeded_time: float,
                    max_provision_time: float) -> tuple[UnitState, ...]:
    """The units to release now: stuck ones first (oldest first), then those empty the longest; every pool
    keeps at least ``min_units``."""
    due: list[tuple[int, float, str, UnitState]] = []
    for unit in units:
        at = release_due(unit, empty_since, unneeded_time=unneeded_time, max_provision_time=max_provision_time)
        if at is not None and at <= now and unit.pool in pools:
            due.append((0 if not unit.ready else 1, at, unit.unit_id, unit))
    left = Counter(unit.pool for unit in units)
    release: list[UnitState] = []
    for _, _, _, unit in sorted(due, key=lambda item: item[:3]):
        if left[unit.pool] > pools[unit.pool].min_units:
            left[unit.pool] -= 1
            release.append(unit)
    return tuple(release)
