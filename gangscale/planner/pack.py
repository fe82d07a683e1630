"""Packing one gang: first onto free capacity of existing nodes, then onto new units of node pools.

Pods of a pod set are identical, so they are placed in bulk: "k pods on each of m alike nodes" is one step,
and new nodes that end up alike are one :class:`NewBin` with a multiplicity. A 2,000-pod gang costs as
much as the number of distinct node states it creates, not 2,000 placements.

The order is first-fit decreasing, as the cluster-autoscaler's estimator and Karpenter's queue use:
pod sets in decreasing size, each filling existing nodes (tightest first, so large holes stay for later
gangs), then the new nodes this gang already opened (first fit), then new units of its preferred pools.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.pod import PodDemand
from gangscale.model.resources import CPU

#: More pods than any node could hold: the "no limit" value of :func:`fit`.
_UNBOUNDED = 1 << 62


@dataclass(frozen=True, slots=True)
class Group:
    """One pod set of the gang, as a request vector over the gang's resource dimensions."""

    index: int
    name: str
    count: int
    demand: PodDemand
    vec: tuple[int, ...]
    #: Indices of the groups whose pods may not share a node with this group's pods (itself included when
    #: its pods are one-per-node).
    repels: frozenset[int]

    @property
    def one_per_node(self) -> bool:
        return self.index in self.repels


def build_groups(gang: Gang) -> tuple[tuple[str, ...], tuple[Group, ...]]:
    """The gang's resource dimensions (every resource any pod requests) and its non-empty pod sets."""
    pod_sets = [pod_set for pod_set in gang.pod_sets if pod_set.count > 0]
    dims = tuple(sorted({name for pod_set in pod_sets for name in pod_set.demand.requests}))
    groups: list[Group] = []
    for i, pod_set in enumerate(pod_sets):
        repels = frozenset(j for j, other in enumerate(pod_sets) if pod_set.demand.repels(other.demand))
        vec = tuple(pod_set.demand.requests.get(name) for name in dims)
        groups.append(Group(i, pod_set.name, pod_set.count, pod_set.demand, vec, repels))
    return dims, tuple(groups)


def fit(free: Sequence[int], vec: Sequence[int]) -> int:
    """How many pods with requests ``vec`` fit in ``free``."""
    best = _UNBOUNDED
    for have, need in zip(free, vec, strict=True):
        if need:
            best = min(best, have // need)
    return best


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def units_needed(pods: int, per_node: int, nodes_per_unit: int) -> int:
    """Whole units that hold ``pods`` pods at ``per_node`` pods a node."""
    return ceil_div(ceil_div(pods, per_node), nodes_per_unit)


def fit_group(free: Sequence[int], group: Group) -> int:
    count = fit(free, group.vec)
    return min(count, 1) if group.one_per_node else count


# --- existing nodes ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class ExistingFill:
    """The part of a gang placed on existing nodes, and what is left for new nodes, per group."""

    remaining: list[int]
    placements: list[tuple[int, int, int]] = field(default_factory=list)  # (group, node index, pods)
    taken: dict[int, list[int]] = field(default_factory=dict)  # node index -> requests over the dims

    @property
    def done(self) -> bool:
        return not any(self.remaining)


def fill_existing(groups: Sequence[Group], order: Sequence[int], candidates: Sequence[Iterable[int]],
                  free: Sequence[dict[str, int]], dims: tuple[str, ...]) -> ExistingFill:
    """Place as many pods as possible on existing nodes, group by group in ``order``.

    ``candidates[g]`` lists the nodes group ``g`` may use, tightest first.
    """
    result = ExistingFill(remaining=[group.count for group in groups])
    vectors: dict[int, list[int]] = {}
    present: dict[int, set[int]] = {}
    for g in order:
        group = groups[g]
        remaining = group.count
        for node in candidates[g]:
            if remaining == 0:
                break
            if group.repels and present.get(node, set()) & group.repels:
                continue
            vector = vectors.get(node)
            if vector is None:
                node_free = free[node]
                vector = vectors[node] = [node_free.get(name, 0) for name in dims]
            count = fit_group(vector, group)
            if count <= 0:
                continue
            count = min(count, remaining)
            for d, need in enumerate(group.vec):
                vector[d] -= need * count
            taken = result.taken.setdefault(node, [0] * len(dims))
            for d, need in enumerate(group.vec):
                taken[d] += need * count
            present.setdefault(node, set()).add(g)
            result.placements.append((g, node, count))
            remaining -= count
        result.remaining[g] = remaining
    return result


# --- new nodes --------------------------------------------------------------------------------------------

@dataclass(slots=True)
class NewBin:
    """``mult`` alike new nodes of ``pool``: what each has left, which groups it holds, pods per group."""

    pool: str
    free: list[int]
    mult: int
    groups: set[int]
    pods: dict[int, int]

    def split(self, count: int) -> NewBin:
        """Detach ``count`` of the alike nodes into a bin of their own (they are about to diverge)."""
        self.mult -= count
        return NewBin(self.pool, list(self.free), count, set(self.groups), dict(self.pods))

    def add(self, group: Group, per_node: int) -> None:
        for d, need in enumerate(group.vec):
            self.free[d] -= need * per_node
        self.groups.add(group.index)
        self.pods[group.index] = self.pods.get(group.index, 0) + per_node


@dataclass(slots=True)
class NewFill:
    bins: list[NewBin]
    units: dict[str, int]


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Packing stopped: ``group`` still had ``remaining`` pods and no pool could take them."""

    group: int
    remaining: int


def _into_bins(bins: list[NewBin], group: Group, remaining: int, pools: frozenset[str]) -> int:
    i = 0
    while i < len(bins) and remaining:
        current = bins[i]
        if current.pool not in pools or (current.groups & group.repels):
            i += 1
            continue
        per_node = fit_group(current.free, group)
        if per_node <= 0:
            i += 1
            continue
        full = min(current.mult, remaining // per_node)
        if full == current.mult:
            current.add(group, per_node)
            remaining -= per_node * full
            i += 1
            continue
        if full:
            filled = current.split(full)
            filled.add(group, per_node)
            bins.insert(i, filled)
            remaining -= per_node * full
            i += 1
            if not remaining:
                return 0
        # Fewer than per_node pods are left: one more node of this bin takes them.
        if current.mult == 1:
            current.add(group, remaining)
        else:
            partial = current.split(1)
            partial.add(group, remaining)
            bins.insert(i, partial)
        return 0
    return remaining


def _open_units(bins: list[NewBin], pool: NodePool, pool_vec: list[int], group: Group, remaining: int,
                allowed: int) -> tuple[int, int]:
    """Open up to ``allowed`` units of ``pool`` for ``group``; returns (units opened, pods still left)."""
    per_node = fit_group(pool_vec, group)
    if per_node <= 0 or allowed <= 0:
        return 0, remaining
    units = min(units_needed(remaining, per_node, pool.nodes_per_unit), allowed)
    nodes = units * pool.nodes_per_unit
    full = min(nodes, remaining // per_node)
    if full:
        bin_ = NewBin(pool.name, list(pool_vec), full, set(), {})
        bin_.add(group, per_node)
        bins.append(bin_)
    remaining -= full * per_node
    used = full
    if remaining and full < nodes:
        partial = NewBin(pool.name, list(pool_vec), 1, set(), {})
        partial.add(group, remaining)
        bins.append(partial)
        remaining, used = 0, used + 1
    if nodes > used:
        bins.append(NewBin(pool.name, list(pool_vec), nodes - used, set(), {}))
    return units, remaining


@dataclass(slots=True)
class PoolBudget:
    """Units each pool may still add during one packing attempt (headroom and quota, shared)."""

    headroom: dict[str, int]
    quota_left: list[int]
    quota_cost: dict[str, list[tuple[int, int]]]  # pool -> [(quota index, cost per unit)]

    def allowed(self, pool: str) -> int:
        allowed = self.headroom.get(pool, 0)
        for q, per_unit in self.quota_cost.get(pool, ()):
            allowed = min(allowed, self.quota_left[q] // per_unit)
        return allowed

    def spend(self, pool: str, units: int) -> None:
        self.headroom[pool] -= units
        for q, per_unit in self.quota_cost.get(pool, ()):
            self.quota_left[q] -= per_unit * units

    def copy(self) -> PoolBudget:
        return PoolBudget(dict(self.headroom), list(self.quota_left), self.quota_cost)


def fill_new(groups: Sequence[Group], order: Sequence[int], remaining: Sequence[int],
             preferences: Sequence[Sequence[NodePool]], pool_vecs: dict[str, list[int]],
             budget: PoolBudget) -> NewFill | Shortfall:
    """Place what existing nodes could not hold on new units, pools tried in ``preferences[g]`` order."""
    bins: list[NewBin] = []
    units: dict[str, int] = {}
    for g in order:
        group = groups[g]
        left = remaining[g]
        if not left:
            continue
        compatible = frozenset(pool.name for pool in preferences[g])
        left = _into_bins(bins, group, left, compatible)
        for pool in preferences[g]:
            if not left:
                break
            opened, left = _open_units(bins, pool, pool_vecs[pool.name], group, left, budget.allowed(pool.name))
            if opened:
                budget.spend(pool.name, opened)
                units[pool.name] = units.get(pool.name, 0) + opened
        if left:
            return Shortfall(g, left)
    return NewFill(bins, units)


def scarce_dim(dims: tuple[str, ...], vec: Sequence[int]) -> int:
    """The dimension a group is sorted and best-fitted by: its first accelerator, else CPU, else pods."""
    for d, name in enumerate(dims):
        if vec[d] and "/" in name:
            return d
    return dims.index(CPU) if CPU in dims and vec[dims.index(CPU)] else dims.index("pods")
