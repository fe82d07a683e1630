"""Finding the best plan for one gang: every zone, a few packing orders and pool preferences, then tightening.

Greedy packing is fast but not optimal on mixed gangs, so each zone is packed several ways and the
cheapest result (by the policy) wins:

- pod sets in up to three orders: largest single dimension first; largest sum of dimensions first;
  one-pod-per-node pod sets first (they fix how many nodes there must be, and the others fill in beside
  them). If none of these packs, every other order of up to four pod sets is tried before giving up;
- pools ranked per pod set by the cost of serving that pod set alone, and, for gangs with several pod
  sets, the same ranking with each of the best few pools forced first (so one pool can host everything);
- the winner is then *tightened*: each pool it uses is offered one unit fewer, and the packing is redone,
  for as long as that makes it cheaper (greedy packing often opens one node too many).

A gang with topology spread constraints is searched once per set of per-node caps
(:meth:`GangSpread.variants`, loosest first) until one gives a plan, and every plan must pass
:meth:`GangSpread.violation`; gangs without them pay one attribute test.

Existing nodes are filled before any new unit is opened, and that fill depends only on the pod-set order,
so it is computed once per order and shared by every pool preference.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gangscale.model.decision import Cost
from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.quantity import is_extended
from gangscale.model.resources import CPU
from gangscale.planner.compat import Compatibility
from gangscale.planner.pack import (
    ExistingFill,
    Group,
    NewFill,
    PoolBudget,
    Shortfall,
    build_groups,
    fill_existing,
    fill_new,
    fit_group,
    scarce_dim,
    units_needed,
)
from gangscale.planner.spread import GangSpread
from gangscale.planner.state import ClusterState

#: How many pools are tried "forced first" for a gang with several pod sets.
FORCED_POOLS = 4
#: Upper bound on tightening rounds (each removes at least one unit).
TIGHTEN_ROUNDS = 8
#: Gangs with at most this many pod sets get every order tried before they are called infeasible.
PERMUTE_GROUPS = 4


class Lazy:
    """A memoising view of an iterator: candidate nodes are produced only as far as packing reads them."""

    def __init__(self, source: Iterator[int]) -> None:
        self._source: Iterator[int] | None = source
        self._seen: list[int] = []

    def __iter__(self) -> Iterator[int]:
        i = 0
        while True:
            if i < len(self._seen):
                yield self._seen[i]
                i += 1
            elif self._source is None or not self._pull():
                return

    def _pull(self) -> bool:
        assert self._source is not None
        item = next(self._source, None)
        if item is None:
            self._source = None
            return False
        self._seen.append(item)
        return True


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

    def __init__(self, state: ClusterState, compat: Compatibility, policy: Policy, gang: Gang,
                 tiers: frozenset[str] | None = None, loose: frozenset[str] | None = None) -> None:
        self.state, self.compat, self.policy, self.gang = state, compat, policy, gang
        #: The capacity tiers this search may use (pools and existing nodes) for pod sets that ask for accelerators;
        #: None: every tier. Pod sets that ask for none (a CPU head, a launcher) may use ``loose`` as well: the tier
        #: keeps the accelerator nodes of a gang together, and a head on on-demand CPU beside spot or flex-start
        #: workers is what users run (:mod:`gangscale.model.tiers`).
        self.tiers = tiers
        self.dims, self.groups = build_groups(gang)
        accelerated = any(map(self._needs_accelerators, self.groups))  # a CPU-only gang is kept whole too
        self.group_tiers = [tiers if tiers is None or not accelerated or self._needs_accelerators(group)
                            else tiers | (loose or tiers) for group in self.groups]
        every = [t for t in self.group_tiers if t is not None]
        #: Every tier some pod set may use (None: every tier).
        self.all_tiers: frozenset[str] | None = frozenset().union(*every) if len(every) == len(self.groups) else None
        self.shortfalls: list[ZoneShortfall] = []
        self.spread = (GangSpread(state, compat, self.groups) if any(g.demand.spread for g in self.groups)
                       else None)
        #: Why plans were rejected by the spread check (distinct messages, in the order met).
        self.spread_misses: dict[str, None] = {}
        self._candidates: dict[tuple[str | None, int], Lazy] = {}
        self.pools = [s for s in state.available_pools()
                      if self.all_tiers is None or s.pool.capacity_type in self.all_tiers] if gang.may_scale else []
        available = [s.pool for s in self.pools]
        self.pool_ok: list[list[NodePool]] = [
            compat.usable_pools(group.demand, [p for p in available if allowed is None or p.capacity_type in allowed])
            for group, allowed in zip(self.groups, self.group_tiers, strict=True)]
        used = {pool.name: pool for pools in self.pool_ok for pool in pools}
        self.pool_vecs = {name: [pool.allocatable.get(dim) for dim in self.dims] for name, pool in used.items()}

    def _needs_accelerators(self, group: Group) -> bool:
        return any(need and is_extended(name) for name, need in zip(self.dims, group.vec, strict=True))

    # -- zones ------------------------------------------------------------------------------------------

    def zones(self) -> list[str | None]:
        if self.gang.spread_zones:
            return [None]
        zones: set[str | None] = {pool.zone for pools in self.pool_ok for pool in pools}
        zones.update(self.state.zones_of_nodes())
        return sorted(zones, key=lambda zone: zone or "")

    def candidates(self, zone: str | None, group: Group) -> Lazy:
        """Existing nodes in ``zone`` that the group may use and that have room for one of its pods, tightest first
        (ascending free amount of the group's scarce resource, then name), produced lazily."""
        key = (zone, group.index)
        cached = self._candidates.get(key)
        if cached is None:
            cached = self._candidates[key] = Lazy(self._candidate_stream(zone, group))
        return cached

    def _candidate_stream(self, zone: str | None, group: Group) -> Iterator[int]:
        state, demand, dims, vec = self.state, group.demand, self.dims, group.vec
        key_dim = scarce_dim(dims, vec)
        key_name, key_need = dims[key_dim], vec[key_dim]
        zones = list(state.zone_shapes) if zone is None else [zone] if zone in state.zone_shapes else []
        streams = []
        for z in zones:
            for shape, members in state.zone_shapes[z].items():
                allowed = self.group_tiers[group.index]
                if allowed is not None and state.shape_tier(shape, members[0]) not in allowed:
                    continue
                if not demand.names_nodes and not self.compat.node_ok(demand, state.nodes[members[0]], shape):
                    continue
                entries = state.sorted_by(z, shape, key_name)
                start = bisect_left(entries, (key_need,))
                if start < len(entries):
                    streams.append(itertools.islice(entries, start, None))
        needs = [(name, need) for name, need in zip(dims, vec, strict=True) if need and name != key_name]
        for _, _, i in heapq.merge(*streams):
            free = state.free[i]
            if all(free.get(name, 0) >= need for name, need in needs) and (
                    not demand.names_nodes or self.compat.node_ok(demand, state.nodes[i], state.shape_of[i])):
                yield i

    # -- orders and preferences -------------------------------------------------------------------------

    def orders(self, pools: Sequence[NodePool]) -> list[tuple[int, ...]]:
        if len(self.groups) == 1:
            return [(0,)]
        reference = [max([pool.allocatable.get(name) for pool in pools] + [1]) for name in self.dims]
        shares = [[need / reference[d] for d, need in enumerate(group.vec) if self.dims[d] != "pods"]
                  for group in self.groups]
        by_max = tuple(sorted(range(len(self.groups)), key=lambda g: (-max(shares[g] + [0]), -sum(shares[g]), g)))
        by_sum = tuple(sorted(range(len(self.groups)), key=lambda g: (-sum(shares[g]), -max(shares[g] + [0]), g)))
        spread_first = tuple(sorted(by_max, key=lambda g: not self.groups[g].spreads))
        return list(dict.fromkeys((by_max, by_sum, spread_first)))

    def fallback_orders(self, tried: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Every order not tried yet, for gangs small enough (greedy packing can miss a tight fit)."""
        if len(self.groups) > PERMUTE_GROUPS:
            return []
        return [order for order in itertools.permutations(range(len(self.groups))) if order not in tried]

    def _solo_cost(self, pool: NodePool, group: Group, pods: int, budget: PoolBudget) -> tuple[object, ...]:
        per_node = fit_group(self.pool_vecs[pool.name], group)
        units = units_needed(pods, per_node, pool.nodes_per_unit)
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
        return PoolBudget(dict(state.headroom), list(state.quota_left), state.quota_cost)

    def _capacity_short(self, zone: str | None, candidates: list[Lazy], budget: PoolBudget) -> bool:
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
        if self.spread is None or not self.spread.rules:
            return self._run()
        variants = self.spread.variants(self.groups)
        for groups in variants:
            self.groups = groups
            found = self._run()
            if found is not None:
                return found
        self.groups = variants[0]  # the loosest: what diagnose reports the gang's needs against
        return None

    def rejects(self, packing: Packing) -> bool:
        """Whether the plan breaks one of the gang's spread constraints (the reason is kept for diagnose)."""
        if self.spread is None:
            return False
        problem = self.spread.violation(packing.existing.placements, packing.new.bins)
        if problem is not None:
            self.spread_misses.setdefault(problem)
        return problem is not None

    def _run(self) -> Packing | None:
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

    def _best_in_zone(self, zone: str | None, candidates: list[Lazy], budget: PoolBudget) -> Packing | None:
        zone_pools = [pool for pool in {p.name: p for pools in self.pool_ok for p in pools}.values()
                      if zone is None or pool.zone == zone]
        best: tuple[Packing, tuple[int, ...], list[list[NodePool]]] | None = None
        orders = self.orders(zone_pools)
        for batch in (orders, None):
            for order in batch if batch is not None else self.fallback_orders(orders):
                existing = fill_existing(self.groups, order, candidates, self.state.free, self.dims)
                if existing.done:
                    packing = self.packing(zone, existing, NewFill([], {}))
                    if self.rejects(packing):
                        continue
                    return packing
                prefs = self.preferences(zone, existing.remaining, budget)
                for variant in self.variants(prefs):
                    fill = fill_new(self.groups, order, existing.remaining, variant, self.pool_vecs, budget.copy())
                    if isinstance(fill, Shortfall):
                        continue
                    packing = self.packing(zone, existing, fill)
                    if (best is None or packing.key < best[0].key) and not self.rejects(packing):
                        best = (packing, order, variant)
            if best is not None:
                break
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
                if candidate.key < packing.key and not self.rejects(candidate):
                    packing, improved = candidate, True
                    break
            if not improved:
                break
        return packing
