"""Finding the best plan for one gang: every zone, a few packing orders and pool preferences, then tightening.

Greedy packing is fast but not optimal on mixed gangs, so each zone is packed several ways and the
cheapest result (by the policy) wins:

- pod sets in two decreasing orders (largest single dimension first; largest sum of dimensions first);
- pools ranked per pod set by the cost of serving that pod set alone, and, for gangs with several pod
  sets, the same ranking with each of the best few pools forced first (so one pool can host everything);
- the winner is then *tightened*: each pool it uses is offered one unit fewer, and the packing is redone,
  for as long as that makes it cheaper (greedy packing often opens one node too many).

Existing nodes are filled before any new unit is opened, and that fill depends only on the pod-set order,
so it is computed once per order and shared by every pool preference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gangscale.model.decision import Cost
from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.resources import CPU
from gangscale.planner.compat import Compatibility
from gangscale.planner.pack import (
    ExistingFill,
    Group,
    NewFill,
    PoolBudget,
    Shortfall,
    build_groups,
    ceil_div,
    fill_existing,
    fill_new,
    fit_group,
    scarce_dim,
)
from gangscale.planner.state import ClusterState

#: How many pools are tried "forced first" for a gang with several pod sets.
FORCED_POOLS = 4
#: Upper bound on tightening rounds (each removes at least one unit).
TIGHTEN_ROUNDS = 8


@dataclass(slots=True)
class Packing:
    zone: str | None
    existing: ExistingFill
    new: NewFill
    cost: Cost
    key: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class ZoneShortfall:
    """In ``zone``, at most ``placeable`` of the ``needed`` pods of pod set ``group`` could be placed."""

    zone: str | None
    group: int
    placeable: int
    needed: int


class GangSearch:
    """Plans one gang against the current :class:`ClusterState`; see the module docstring."""

    def __init__(self, state: ClusterState, compat: Compatibility, policy: Policy, gang: Gang) -> None:
        self.state, self.compat, self.policy, self.gang = state, compat, policy, gang
        self.dims, self.groups = build_groups(gang)
        self.shortfalls: list[ZoneShortfall] = []
        self.pools = state.available_pools()
        self.pool_ok: list[list[NodePool]] = [
            [s.pool for s in self.pools if compat.pool_problem(group.demand, s.pool) is None] for group in self.groups]
        self.pool_vecs = {s.pool.name: [s.pool.allocatable.get(name) for name in self.dims] for s in self.pools}

    # -- zones ------------------------------------------------------------------------------------------

    def zones(self) -> list[str | None]:
        if self.gang.spread_zones:
            return [None]
        zones: set[str | None] = {pool.zone for pools in self.pool_ok for pool in pools}
        zones.update(self.state.shapes_by_zone)
        return sorted(zones, key=lambda zone: zone or "")

    def candidates(self, zone: str | None, group: Group) -> list[int]:
        """Existing nodes in ``zone`` that group may use and that have room for one of its pods, tightest first."""
        state, demand = self.state, group.demand
        zones = self.state.shapes_by_zone.values() if zone is None else [self.state.shapes_by_zone.get(zone, {})]
        nodes: list[int] = []
        for shapes in zones:
            for shape, members in shapes.items():
                if demand.names_nodes:
                    nodes.extend(i for i in members if self.compat.node_ok(demand, state.nodes[i], shape))
                elif self.compat.node_ok(demand, state.nodes[members[0]], shape):
                    nodes.extend(members)
        dims, vec = self.dims, group.vec
        needs = [(name, need) for name, need in zip(dims, vec, strict=True) if need]
        roomy = [i for i in nodes if all(state.free[i].get(name, 0) >= need for name, need in needs)]
        key_name = dims[scarce_dim(dims, vec)]
        roomy.sort(key=lambda i: (state.free[i].get(key_name, 0), state.nodes[i].name))
        return roomy

    # -- orders and preferences -------------------------------------------------------------------------

    def orders(self, pools: Sequence[NodePool]) -> list[tuple[int, ...]]:
        if len(self.groups) == 1:
            return [(0,)]
        reference = [max([pool.allocatable.get(name) for pool in pools] + [1]) for name in self.dims]
        shares = [[need / reference[d] for d, need in enumerate(group.vec) if self.dims[d] != "pods"]
                  for group in self.groups]
        by_max = tuple(sorted(range(len(self.groups)), key=lambda g: (-max(shares[g] + [0]), -sum(shares[g]), g)))
        by_sum = tuple(sorted(range(len(self.groups)), key=lambda g: (-sum(shares[g]), -max(shares[g] + [0]), g)))
        return [by_max] if by_max == by_sum else [by_max, by_sum]

    def _solo_cost(self, pool: NodePool, group: Group, pods: int, budget: PoolBudget) -> tuple[object, ...]:
        per_node = fit_group(self.pool_vecs[pool.name], group)
        units = ceil_div(ceil_div(pods, per_node), pool.nodes_per_unit)
        allowed = budget.allowed(pool.name)
        cost = self._cost_of_units(pool, group, pods, units)
        return (units > allowed, cost.key(self.policy.criteria), pool.name)

    def _cost_of_units(self, pool: NodePool, group: Group, pods: int, units: int) -> Cost:
        nodes = units * pool.nodes_per_unit
        used = dict(zip(self.dims, (need * pods for need in group.vec), strict=True))
        accelerators = sum(nodes * pool.allocatable.get(name) - used.get(name, 0) for name in pool.accelerators)
        cpu = nodes * pool.allocatable.get(CPU) - used.get(CPU, 0)
        return Cost(accelerators, cpu, units * (pool.price_per_unit_hour or 0.0), nodes)

    def preferences(self, zone: str | None, remaining: Sequence[int], budget: PoolBudget) -> list[list[NodePool]]:
        prefs: list[list[NodePool]] = []
        for group, pools in zip(self.groups, self.pool_ok, strict=True):
            in_zone = [pool for pool in pools if zone is None or pool.zone == zone]
            pods = max(1, remaining[group.index])
            prefs.append(sorted(in_zone, key=lambda pool: self._solo_cost(pool, group, pods, budget)))
        return prefs

    def variants(self, prefs: list[list[NodePool]]) -> list[list[list[NodePool]]]:
        variants = [prefs]
        if len(self.groups) == 1:
            return variants
        leaders: list[NodePool] = []
        for ranked in prefs:
            for pool in ranked:
                if pool not in leaders:
                    leaders.append(pool)
        for leader in leaders[:FORCED_POOLS]:
            forced = [[leader, *[p for p in ranked if p != leader]] if leader in ranked else ranked
                      for ranked in prefs]
            if forced not in variants:
                variants.append(forced)
        return variants

    # -- costs ------------------------------------------------------------------------------------------

    def cost(self, fill: NewFill) -> Cost:
        dim_of = {name: d for d, name in enumerate(self.dims)}
        accelerators = cpu = nodes = 0
        price = 0.0
        for bin_ in fill.bins:
            pool = self.state.pool(bin_.pool)
            for name in pool.accelerators:
                accelerators += bin_.mult * (bin_.free[dim_of[name]] if name in dim_of else pool.allocatable[name])
            cpu += bin_.mult * (bin_.free[dim_of[CPU]] if CPU in dim_of else pool.allocatable.get(CPU))
            nodes += bin_.mult
        for name, units in fill.units.items():
            price += units * (self.state.pool(name).price_per_unit_hour or 0.0)
        return Cost(accelerators, cpu, price, nodes)

    def packing(self, zone: str | None, existing: ExistingFill, fill: NewFill) -> Packing:
        cost = self.cost(fill)
        key = (cost.key(self.policy.criteria), tuple(sorted(fill.units.items())), zone or "")
        return Packing(zone, existing, fill, cost, key)

    # -- the search -------------------------------------------------------------------------------------

    def budget(self) -> PoolBudget:
        state = self.state
        quota_cost: dict[str, list[tuple[int, int]]] = {}
        for s in self.pools:
            costs = [(q, quota.per_unit(s.pool)) for q, quota in enumerate(state.quotas)
                     if quota.applies_to(s.pool.name) and quota.per_unit(s.pool)]
            if costs:
                quota_cost[s.pool.name] = costs
        return PoolBudget(dict(state.headroom), list(state.quota_left), quota_cost)

    def _capacity_short(self, zone: str | None, candidates: list[list[int]], budget: PoolBudget) -> bool:
        """Record and report a pod set that cannot fit in ``zone`` even with every pool to itself."""
        for group, nodes in zip(self.groups, candidates, strict=True):
            placeable = 0
            for i in nodes:
                free = self.state.free[i]
                placeable += fit_group([free.get(name, 0) for name in self.dims], group)
                if placeable >= group.count:
                    break
            for pool in self.pool_ok[group.index]:
                if placeable >= group.count:
                    break
                if zone is None or pool.zone == zone:
                    per_node = fit_group(self.pool_vecs[pool.name], group)
                    placeable += per_node * pool.nodes_per_unit * budget.allowed(pool.name)
            if placeable < group.count:
                self.shortfalls.append(ZoneShortfall(zone, group.index, placeable, group.count))
                return True
        return False

    def run(self) -> Packing | None:
        best: Packing | None = None
        for zone in self.zones():
            candidates = [self.candidates(zone, group) for group in self.groups]
            budget = self.budget()
            if self._capacity_short(zone, candidates, budget):
                continue
            found = self._best_in_zone(zone, candidates, budget)
            if found is not None and (best is None or found.key < best.key):
                best = found
            if best is not None and not best.new.units:
                break  # free capacity alone places the gang: nothing can be cheaper
        return best

    def _best_in_zone(self, zone: str | None, candidates: list[list[int]], budget: PoolBudget) -> Packing | None:
        zone_pools = [s.pool for s in self.pools if zone is None or s.pool.zone == zone]
        best: tuple[Packing, tuple[int, ...], list[list[NodePool]]] | None = None
        for order in self.orders(zone_pools):
            existing = fill_existing(self.groups, order, candidates, self.state.free, self.dims)
            if existing.done:
                return self.packing(zone, existing, NewFill([], {}))
            prefs = self.preferences(zone, existing.remaining, budget)
            for variant in self.variants(prefs):
                fill = fill_new(self.groups, order, existing.remaining, variant, self.pool_vecs, budget.copy())
                if isinstance(fill, Shortfall):
                    continue
                packing = self.packing(zone, existing, fill)
                if best is None or packing.key < best[0].key:
                    best = (packing, order, variant)
        if best is None:
            self.shortfalls.append(ZoneShortfall(zone, -1, 0, self.gang.pods))
            return None
        return self._tighten(*best, budget)

    def _tighten(self, packing: Packing, order: tuple[int, ...], variant: list[list[NodePool]],
                 budget: PoolBudget) -> Packing:
        for _ in range(TIGHTEN_ROUNDS):
            improved = False
            for pool_name, units in sorted(packing.new.units.items()):
                trial = budget.copy()
                trial.headroom[pool_name] = min(trial.headroom[pool_name], units - 1)
                fill = fill_new(self.groups, order, packing.existing.remaining, variant, self.pool_vecs, trial)
                if isinstance(fill, Shortfall):
                    continue
                candidate = self.packing(packing.zone, packing.existing, fill)
                if candidate.key < packing.key:
                    packing, improved = candidate, True
                    break
            if not improved:
                break
        return packing
