"""An exact solver for small gangs: the fewest new nodes that place every pod, to measure the planner against.

Model (the planner's, with nothing already running): a gang, and pools that each may add up to
``max_units`` units of ``nodes_per_unit`` alike nodes. A pod may use a node of a pool when
:meth:`Compatibility.pool_problem` finds nothing wrong (selectors, affinity, taints, size), when the node
has room in every resource the gang requests, and when no pod already on the node repels it (the
planner's :func:`build_groups` decides which pod sets repel which). Unless the gang may spread, all its
nodes are in one zone. Every node of an opened unit counts, used or not.

Method: depth-first branch and bound over the pods (one-per-node pod sets first, then pod sets in decreasing
size), each pod either joining an open node or opening a unit of a pool. Symmetry is broken three ways, each
keeping at least one optimum reachable: the pods of a pod set are identical, so each goes to a node no
earlier than its predecessor's; open nodes in the same state (pool, free vector, pod sets present) are tried
once; and a pool's unit is opened only when none of its nodes from that position on is still empty. A branch
is pruned when the nodes opened so far plus a lower bound (per resource: demand left over free room, divided
by the largest node that could still be added; per one-per-node pod set: its pods left over the open nodes
that could take one) reaches the best plan found.

Limits: exponential in the worst case. Intended for gangs of up to ~14 pods on 1-3 pool types: on such
instances from :func:`gangscale.sim.synth.synth_small` it typically answers in a few milliseconds and in
about a second at worst. Past ``max_steps`` search steps it raises :class:`OracleLimit` rather than return
an answer it has not proved. It was checked against exhaustive enumeration on instances of up to 9 pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import gcd

from gangscale.model.decision import Decision
from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.planner.compat import Compatibility
from gangscale.planner.pack import Group, build_groups, ceil_div, fit, fit_group

#: Default search budget; far above what 14 pods on a few pools need.
MAX_STEPS = 2_000_000


class OracleLimit(RuntimeError):
    """The search budget ran out before optimality was proved."""


@dataclass(slots=True)
class _Bin:
    pool: int
    free: list[int]
    mask: int = 0  # bit g set: the node holds a pod of group g

    def state(self) -> tuple[int, tuple[int, ...], int]:
        return self.pool, tuple(self.free), self.mask


@dataclass(slots=True)
class _Search:
    """One zone's search. ``pods`` lists group indices in branching order (each group contiguous)."""

    groups: tuple[Group, ...]
    pools: list[NodePool]
    vecs: list[list[int]]  # per pool: allocatable over the gang's dims
    usable: list[list[bool]]  # [group][pool]
    pods: list[int]
    max_steps: int
    headroom: list[int] = field(default_factory=list)
    bins: list[_Bin] = field(default_factory=list)
    best: int | None = None
    cost: int = 0
    steps: int = 0
    suffix: list[list[int]] = field(default_factory=list)  # suffix[k]: requests of pods k.. summed
    left: list[list[int]] = field(default_factory=list)  # left[k][g]: pods of group g from k on
    unit_gcd: int = 1

    def prepare(self) -> None:
        self.headroom = [pool.max_units for pool in self.pools]
        width = len(self.groups[0].vec) if self.groups else 0
        self.suffix = [[0] * width for _ in range(len(self.pods) + 1)]
        self.left = [[0] * len(self.groups) for _ in range(len(self.pods) + 1)]
        for k in range(len(self.pods) - 1, -1, -1):
            vec = self.groups[self.pods[k]].vec
            self.suffix[k] = [a + b for a, b in zip(self.suffix[k + 1], vec, strict=True)]
            self.left[k] = list(self.left[k + 1])
            self.left[k][self.pods[k]] += 1
        # Any number of new nodes is a sum of whole units, so a multiple of this.
        self.unit_gcd = 0
        for pool in self.pools:
            self.unit_gcd = gcd(self.unit_gcd, pool.nodes_per_unit)
        self.unit_gcd = max(1, self.unit_gcd)

    # -- bounds -------------------------------------------------------------------------------------------

    def bound(self, k: int) -> int | None:
        """A lower bound on the nodes still to open for pods ``k..``; ``None`` when they cannot all fit."""
        live = [g for g, count in enumerate(self.left[k]) if count]
        addable = [p for p in range(len(self.pools)) if self.headroom[p] and any(self.usable[g][p] for g in live)]
        extra = 0
        for d, need in enumerate(self.suffix[k]):
            room = sum(b.free[d] for b in self.bins)
            if need <= room:
                continue
            largest = max((self.vecs[p][d] for p in addable), default=0)
            reachable = sum(self.vecs[p][d] * self.pools[p].nodes_per_unit * self.headroom[p] for p in addable)
            if need > room + reachable:
                return None
            extra = max(extra, ceil_div(need - room, largest))
        for g in live:
            group = self.groups[g]
            if group.one_per_node:
                hosts = sum(1 for b in self.bins if self.usable[g][b.pool] and not b.mask & _bits(group.repels))
                extra = max(extra, self.left[k][g] - hosts)
        return ceil_div(extra, self.unit_gcd) * self.unit_gcd if extra else 0

    # -- branching ----------------------------------------------------------------------------------------

    def run(self, k: int = 0, start: int = 0) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise OracleLimit(f"no proof of optimality within {self.max_steps} steps")
        if k == len(self.pods):
            self.best = self.cost
            return
        more = self.bound(k)
        if more is None or (self.best is not None and self.cost + more >= self.best):
            return
        g = self.pods[k]
        group = self.groups[g]
        repels = _bits(group.repels)
        seen: set[tuple[int, tuple[int, ...], int]] = set()
        empty_pools: set[int] = set()
        for b in range(start, len(self.bins)):
            bin_ = self.bins[b]
            if not bin_.mask:
                empty_pools.add(bin_.pool)
            if not self.usable[g][bin_.pool] or bin_.mask & repels or fit(bin_.free, group.vec) < 1:
                continue
            state = bin_.state()
            if state in seen:
                continue
            seen.add(state)
            self._place(k, b)
        for p in range(len(self.pools)):
            if self.usable[g][p] and self.headroom[p] and p not in empty_pools and fit(self.vecs[p], group.vec):
                self._open(k, p)

    def _place(self, k: int, b: int) -> None:
        group, bin_ = self.groups[self.pods[k]], self.bins[b]
        mask = bin_.mask
        for d, need in enumerate(group.vec):
            bin_.free[d] -= need
        bin_.mask |= 1 << group.index
        next_start = b if k + 1 < len(self.pods) and self.pods[k + 1] == self.pods[k] else 0
        self.run(k + 1, next_start)
        for d, need in enumerate(group.vec):
            bin_.free[d] += need
        bin_.mask = mask

    def _open(self, k: int, p: int) -> None:
        pool = self.pools[p]
        first = len(self.bins)
        self.bins.extend(_Bin(p, list(self.vecs[p])) for _ in range(pool.nodes_per_unit))
        self.headroom[p] -= 1
        self.cost += pool.nodes_per_unit
        if self.best is None or self.cost < self.best:
            self._place(k, first)
        self.cost -= pool.nodes_per_unit
        self.headroom[p] += 1
        del self.bins[first:]


def _bits(indices: frozenset[int]) -> int:
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


def _branch_order(groups: Sequence[Group], pools: Sequence[list[int]]) -> list[int]:
    """Group indices per pod: one-per-node sets first, then by largest share of the roomiest pool."""
    reference = [max([vec[d] for vec in pools] + [1]) for d in range(len(groups[0].vec))] if groups else []

    def size(group: Group) -> tuple[bool, float, float]:
        shares = [need / reference[d] for d, need in enumerate(group.vec)]
        return not group.one_per_node, -max(shares, default=0.0), -sum(shares)

    order = sorted(groups, key=lambda group: (*size(group), group.index))
    return [group.index for group in order for _ in range(group.count)]


def min_new_nodes(gang: Gang, pools: Sequence[NodePool], policy: Policy | None = None,
                  max_steps: int = MAX_STEPS) -> int | None:
    """The fewest new nodes placing every pod of ``gang`` on units of ``pools``; ``None`` if none can.

    Assumes no existing nodes and headroom ``max_units`` per pool. Raises :class:`OracleLimit` if the
    search needs more than ``max_steps`` steps (see the module docstring for sizes it is meant for).
    """
    compat = Compatibility(policy or Policy())
    dims, groups = build_groups(gang)
    if not groups:
        return 0
    zones = [None] if gang.spread_zones else sorted({pool.zone for pool in pools})
    best: int | None = None
    for zone in zones:
        in_zone = [pool for pool in pools if zone is None or pool.zone == zone]
        vecs = [[pool.allocatable.get(name) for name in dims] for pool in in_zone]
        usable = [[compat.pool_problem(group.demand, pool) is None for pool in in_zone] for group in groups]
        search = _Search(groups, in_zone, vecs, usable, _branch_order(groups, vecs), max_steps)
        search.best = best  # a zone only matters if it beats the best so far
        search.prepare()
        search.run()
        if search.best is not None and (best is None or search.best < best):
            best = search.best
    return best


def homogeneous_optimum(gang: Gang, pools: Sequence[NodePool], policy: Policy | None = None) -> int | None:
    """The fewest new nodes for a gang of one pod set: ``ceil(n / k)`` rounded up to whole units.

    ``k`` is how many pods one node takes (the least over resources of ``floor(allocatable / request)``,
    1 for one-per-node pods). Exact when every pool the pods may use has the same shape and unit size
    (which is checked: :class:`ValueError` otherwise) and enough ``max_units`` headroom (else ``None``).
    """
    compat = Compatibility(policy or Policy())
    dims, groups = build_groups(gang)
    if len(groups) != 1:
        raise ValueError(f"gang {gang.key}: expected one non-empty pod set, got {len(groups)}")
    group = groups[0]
    usable = [pool for pool in pools if compat.pool_problem(group.demand, pool) is None]
    shapes = {(tuple(pool.allocatable.get(name) for name in dims), pool.nodes_per_unit) for pool in usable}
    if len(shapes) > 1:
        raise ValueError(f"gang {gang.key}: the pools it may use differ in shape: {sorted(shapes)}")
    best: int | None = None
    for pool in usable:
        per_node = fit_group([pool.allocatable.get(name) for name in dims], group)
        units = ceil_div(ceil_div(group.count, per_node), pool.nodes_per_unit)
        if units <= pool.max_units and (best is None or units * pool.nodes_per_unit < best):
            best = units * pool.nodes_per_unit
    return best


def plan_problems(decision: Decision, gang: Gang, pools: Sequence[NodePool], policy: Policy | None = None) -> list[str]:
    """What is wrong with the new nodes of ``decision`` for ``gang`` (no existing nodes); empty if nothing.

    Checks every new node against its pool's allocatable, compatibility and anti-affinity, that the new
    nodes add up to the scale steps, and that every pod is placed exactly once.
    """
    compat = Compatibility(policy or Policy())
    dims, groups = build_groups(gang)
    by_name = {group.name: group for group in groups}
    by_pool = {pool.name: pool for pool in pools}
    problems: list[str] = []
    placed = dict.fromkeys(by_name, 0)
    nodes = dict.fromkeys(by_pool, 0)
    for new in decision.new_nodes:
        pool = by_pool[new.pool]
        nodes[new.pool] += new.nodes
        free = [pool.allocatable.get(name) for name in dims]
        present = {by_name[name].index for name, _ in new.pods}
        for name, count in new.pods:
            group = by_name[name]
            placed[name] += count * new.nodes
            free = [have - need * count for have, need in zip(free, group.vec, strict=True)]
            if compat.pool_problem(group.demand, pool) is not None:
                problems.append(f"{name} may not run on {pool.name}")
            if (group.repels & present) - {group.index} or (group.one_per_node and count > 1):
                problems.append(f"{name} shares a {pool.name} node with pods it repels")
        if min(free, default=0) < 0:
            problems.append(f"{new.pods} overfill a {pool.name} node")
    steps = {step.pool: step.nodes for step in decision.steps}
    if any(nodes[name] != steps.get(name, 0) for name in nodes):
        problems.append(f"new nodes {nodes} do not add up to the steps {steps}")
    for placement in decision.placements:
        placed[placement.pod_set] += placement.count
    problems.extend(f"{name}: {placed[name]} of {group.count} pods placed"
                    for name, group in by_name.items() if placed[name] != group.count)
    return problems
