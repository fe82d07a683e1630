"""Packing one gang: first onto free capacity of existing nodes, then onto new units of node pools.

Pods of a pod set are identical, so they are placed in bulk: "k pods on each of m alike nodes" is one step,
and new nodes that end up alike are one :class:`NewBin` with a multiplicity. A 2,000-pod gang costs as
much as the number of distinct node states it creates, not 2,000 placements.

The order is first-fit decreasing, as the cluster-autoscaler's estimator and Karpenter's queue use:
pod sets in decreasing size, each filling existing nodes (tightest first, so large holes stay for later
gangs), then the new nodes this gang already opened (first fit), then new units of its preferred pools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.pod import PodDemand
from gangscale.model.resources import CPU

#: More pods than any node could hold: the "no limit" value of :func:`fit`.
_UNBOUNDED = 1 << 62


@dataclass(frozen=True, slots=True)
class NodeCap:
    """On a node holding a pod of group ``owner``, at most ``cap`` pods of the ``members`` groups (a topology
    spread constraint on ``kubernetes.io/hostname``, see :mod:`gangscale.planner.spread`)."""

    owner: int
    members: frozenset[int]
    cap: int


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
    #: The per-node caps this group's pods count against (as owner or member); empty for most gangs.
    caps: tuple[NodeCap, ...] = ()
    #: Why a node takes only so many of its pods, for messages ("" when only resources limit it).
    limit: str = ""
    #: New nodes its pods are spread over at the least when it opens units (a spread constraint's minDomains).
    min_nodes: int = 0

    @property
    def one_per_node(self) -> bool:
        return self.index in self.repels

    @property
    def spreads(self) -> bool:
        """Whether its pods are limited per node by more than resources (they fix how many nodes there must be)."""
        return self.one_per_node or bool(self.caps)


def build_groups(gang: Gang) -> tuple[tuple[str, ...], tuple[Group, ...]]:
    """The gang's resource dimensions (every resource any pod requests) and its non-empty pod sets."""
    pod_sets = [pod_set for pod_set in gang.pod_sets if pod_set.count > 0]
    dims = tuple(sorted({name for pod_set in pod_sets for name in pod_set.demand.requests}))
    groups: list[Group] = []
    for i, pod_set in enumerate(pod_sets):
        repels = frozenset(j for j, other in enumerate(pod_sets) if pod_set.demand.repels(other.demand))
        vec = tuple(pod_set.demand.requests.get(name) for name in dims)
        limit = ""
        if i in repels:
            port = pod_set.demand.port_conflict(pod_set.demand)
            limit = f"one pod a node: {port}" if port is not None else "one pod a node: required pod anti-affinity"
        groups.append(Group(i, pod_set.name, pod_set.count, pod_set.demand, vec, repels, limit=limit))
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


def fit_group(free: Sequence[int], group: Group, held: Mapping[int, int] | None = None) -> int:
    """How many pods of ``group`` a node with ``free`` room takes; ``held`` counts the gang's pods already on it
    per group (only per-node caps read it; ``None``: none)."""
    count = fit(free, group.vec)
    if group.caps:
        count = min(count, cap_room(group, held or {}))
    return min(count, 1) if group.one_per_node else count


def cap_room(group: Group, held: Mapping[int, int]) -> int:
    """How many more pods of ``group`` the per-node caps let onto a node that holds ``held``."""
    room = _UNBOUNDED
    for cap in group.caps:
        if cap.owner != group.index and not held.get(cap.owner):
            continue  # the owner's pods are not there: its constraint says nothing about this node (yet)
        there = sum(held.get(member, 0) for member in cap.members)
        if group.index in cap.members:
            room = min(room, cap.cap - there)
        elif there > cap.cap:
            return 0  # an owner the constraint does not select may come only where the count is within the cap
    return max(room, 0)


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
    held: dict[int, dict[int, int]] = {}  # node -> group -> pods, kept only for gangs with per-node caps
    capped = any(group.caps for group in groups)
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
            count = fit_group(vector, group, held.get(node)) if capped else fit_group(vector, group)
            if count <= 0:
                continue
            count = min(count, remaining)
            if capped:
                on_node = held.setdefault(node, {})
                on_node[g] = on_node.get(g, 0) + count
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
        per_node = fit_group(current.free, group, current.pods)
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
    if group.caps:
        return _open_even(bins, pool, pool_vec, group, remaining, allowed, per_node)
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


def _open_even(bins: list[NewBin], pool: NodePool, pool_vec: list[int], group: Group, remaining: int, allowed: int,
               per_node: int) -> tuple[int, int]:
    """:func:`_open_units` for a group under a topology spread cap: its pods go as evenly as they can over every
    node opened (at least ``group.min_nodes``), since kube-scheduler holds each node to the emptiest one's count
    plus maxSkew, and an empty node of the unit would be that emptiest one (filling nodes up and leaving the
    remainder on the last would not do: 3 + 3 + 1 breaks maxSkew 1 where 3 + 2 + 2 does not)."""
    want = max(ceil_div(remaining, per_node), min(group.min_nodes, remaining))
    units = min(ceil_div(want, pool.nodes_per_unit), allowed)
    nodes = units * pool.nodes_per_unit
    used = min(nodes, remaining)
    placed = min(remaining, used * per_node)
    base, extra = divmod(placed, used)
    for count, mult in ((base + 1, extra), (base, used - extra)):
        if mult and count:
            bin_ = NewBin(pool.name, list(pool_vec), mult, set(), {})
            bin_.add(group, count)
            bins.append(bin_)
    if nodes > used:
        bins.append(NewBin(pool.name, list(pool_vec), nodes - used, set(), {}))
    return units, remaining - placed


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
