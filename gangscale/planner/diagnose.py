"""Why a gang cannot be placed, per pool, in words a person can act on.

Runs only for infeasible gangs, so it may be thorough: each pool is judged against each pod set and the
first obstacle is named (backed off, a selector or taint, a pod bigger than the node, maxUnits, quota);
then the gang as a whole (a pod set no pool can run; no single zone that holds everything).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

from gangscale.model.decision import Hint, PoolReason, ReasonCode
from gangscale.model.nodepool import NodePool
from gangscale.model.snapshot import PoolState
from gangscale.planner.compat import Compatibility
from gangscale.planner.pack import Group, fit, fit_group, units_needed
from gangscale.planner.search import GangSearch, ZoneShortfall
from gangscale.planner.state import ClusterState

#: How the controller's pool health words the backoff reason of an unhealthy pool ("unhealthy: 3 of the last 4
#: scale-ups timed out").
UNHEALTHY = "unhealthy:"


def when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _what(group: Group, vec: list[int]) -> str:
    """The pod set, and what limits its pods a node when that, not room, decides how many nodes it needs."""
    binding = group.limit and fit_group(vec, group) < fit(vec, group.vec)
    return f"pod set {group.name!r}" + (f" ({group.limit})" if binding else "")


def _units_for(pool: NodePool, vec: list[int], group: Group) -> tuple[int, int]:
    """(nodes, units) of ``pool`` that ``group`` alone would need."""
    units = units_needed(group.count, fit_group(vec, group), pool.nodes_per_unit)
    return units * pool.nodes_per_unit, units


def _fits(pool: NodePool, units: int, per_node: int) -> int | None:
    """Pods of one pod set that ``units`` units of ``pool`` hold (None when none would)."""
    return units * pool.nodes_per_unit * per_node or None


def _limits(state: ClusterState, pool_state: PoolState, units: int, nodes: int, what: str,
            group: Group | None = None, per_node: int = 0) -> PoolReason | None:
    """The pool's limit the gang runs into (ceiling, maxUnits, quota). With ``group`` (a reason about one pod set),
    the hint says how many of its pods the pool could still take."""
    pool = pool_state.pool
    headroom = state.headroom.get(pool.name, 0)
    pod_set = group.name if group is not None else ""
    if units > headroom and pool_state.ceiling is not None and pool_state.ceiling < pool_state.max_headroom:
        # The cloud said it could not give more: that, not maxUnits, is what stands in the way.
        size = f" ({units} units of {pool.nodes_per_unit})" if pool.nodes_per_unit > 1 else ""
        until = f" until {when(pool_state.ceiling_until)}" if pool_state.ceiling_until is not None else ""
        taken = pool_state.headroom - headroom
        ahead = f", {taken * pool.nodes_per_unit} of them planned for gangs ahead of this one" if taken else ""
        cause = pool_state.ceiling_reason or "a stockout"
        hint = Hint(until=pool_state.ceiling_until, needed=units, allowed=headroom, of="units", pod_set=pod_set,
                    fits=_fits(pool, headroom, per_node))
        return PoolReason(pool.name, ReasonCode.BACKED_OFF,
                          f"needs {nodes} nodes{size} for {what}, but after {cause} the cloud is taken to have at "
                          f"most {pool_state.ceiling * pool.nodes_per_unit} more{until}{ahead}", hint)
    if units > headroom:
        taken = pool_state.headroom - headroom
        reserved = pool.unit_limit < pool.max_units
        limit = (f"its reservation of {pool.reservation_nodes} nodes" if reserved else f"maxUnits {pool.max_units}")
        detail = f"{limit}: {pool_state.units} in use, {pool_state.inflight_units} in flight"
        if taken:
            detail += f", {taken} planned for gangs ahead of this one"
        size = f" ({units} units of {pool.nodes_per_unit})" if pool.nodes_per_unit > 1 else ""
        hint = Hint(needed=units, allowed=headroom, of="units", pod_set=pod_set, fits=_fits(pool, headroom, per_node))
        return PoolReason(pool.name, ReasonCode.MAX_UNITS,
                          f"needs {nodes} nodes{size} for {what}, {'the reservation' if reserved else 'maxUnits'} "
                          f"leaves {headroom * pool.nodes_per_unit} ({detail})", hint)
    for quota, left in zip(state.quotas, state.quota_left, strict=True):
        per_unit = quota.per_unit(pool) if quota.applies_to(pool.name) else 0
        if per_unit and units * per_unit > left:
            hint = Hint(needed=units * per_unit, allowed=left, of=quota.resource, pod_set=pod_set,
                        fits=_fits(pool, min(headroom, left // per_unit), per_node))
            return PoolReason(pool.name, ReasonCode.QUOTA,
                              f"needs {units * per_unit} {quota.resource} for {what}, quota {quota.name} "
                              f"leaves {left}", hint)
    return None


def _shape_hint(compat: Compatibility, group: Group, pool: NodePool, code: ReasonCode) -> Hint:
    """The data behind a node-shape reason: the taint not tolerated, or the request bigger than a node."""
    if code is ReasonCode.TAINT:
        taint = group.demand.blocking_taint(pool.taints, compat.policy.extended_resource_toleration)
        return Hint(taint=taint, pod_set=group.name)
    if code is ReasonCode.TOO_LARGE:
        for name, (need, have) in group.demand.requests.shortfall(pool.allocatable).items():
            return Hint(needed=need, allowed=have, of=name, pod_set=group.name)
    return Hint(pod_set=group.name)


def _pool_reason(state: ClusterState, compat: Compatibility, search: GangSearch,
                 pool_state: PoolState) -> PoolReason | None:
    pool = pool_state.pool
    if pool_state.backed_off(state.now):
        assert pool_state.backoff_until is not None
        cause = pool_state.backoff_reason or "a failed scale-up"
        # A pool closed for failing too often (the controller's pool health) says so first.
        text = (f"{cause}; skipped until {when(pool_state.backoff_until)}" if cause.startswith(UNHEALTHY) else
                f"backed off until {when(pool_state.backoff_until)} after {cause}")
        return PoolReason(pool.name, ReasonCode.BACKED_OFF, text, Hint(until=pool_state.backoff_until))
    problems = {group.index: compat.pool_problem(group.demand, pool) for group in search.groups}
    fitting = [group for group in search.groups if problems[group.index] is None]
    if not fitting:
        group = search.groups[0]
        problem = problems[group.index]
        assert problem is not None
        return PoolReason(pool.name, problem.code, f"pod set {group.name!r}: {problem.message}",
                          _shape_hint(compat, group, pool, problem.code))
    vec = [pool.allocatable.get(name) for name in search.dims]
    total_nodes = total_units = 0
    for group in fitting:
        nodes, units = _units_for(pool, vec, group)
        total_nodes, total_units = total_nodes + nodes, total_units + units
        limit = _limits(state, pool_state, units, nodes, _what(group, vec), group, fit_group(vec, group))
        if limit is not None:
            return limit
    if len(fitting) > 1:
        limit = _limits(state, pool_state, total_units, total_nodes, "the pod sets it can run")
        if limit is not None:
            return limit
    missing = [group for group in search.groups if problems[group.index] is not None]
    if missing:
        group = missing[0]
        problem = problems[group.index]
        assert problem is not None
        names = ", ".join(repr(g.name) for g in fitting)
        return PoolReason(pool.name, problem.code,
                          f"could run pod set {names} but not {group.name!r}: {problem.message}",
                          _shape_hint(compat, group, pool, problem.code))
    return None


def _gang_reasons(search: GangSearch, per_pool: list[PoolReason]) -> list[PoolReason]:
    reasons: list[PoolReason] = []
    for group in search.groups:
        if search.pool_ok[group.index] or next(iter(search.candidates(None, group)), None) is not None:
            continue
        why: dict[str, list[str]] = defaultdict(list)
        for reason in per_pool:
            why[reason.message.removeprefix(f"pod set {group.name!r}: ")].append(reason.pool)
        detail = "; ".join(f"{', '.join(pools)}: {message}" for message, pools in sorted(why.items()))
        reasons.append(PoolReason("", ReasonCode.NO_POOL, f"no node pool can run pod set {group.name!r}"
                                                          + (f" ({detail})" if detail else "")))
    misses = [s for s in search.shortfalls if s.group >= 0]
    if reasons or not misses:
        return reasons
    closest = max(misses, key=lambda s: (s.placeable / s.needed, s.zone or ""))
    group = search.groups[closest.group]
    room = f"room for {closest.placeable} of {closest.needed} pods of pod set {group.name!r}"
    if group.limit and any(fit_group(search.pool_vecs[pool.name], group) < fit(search.pool_vecs[pool.name], group.vec)
                           for pool in search.pool_ok[group.index]):
        room += f" ({group.limit})"  # on some pool it takes fewer pods a node than room allows
    hint = _room_hint(search, closest)
    if len({s.zone for s in misses}) > 1:
        reasons.append(PoolReason("", ReasonCode.ZONE, f"no single zone can hold the whole gang (its nodes must "
                                                       f"share a zone); closest: zone {closest.zone} has {room}", hint))
    else:
        where = f" in zone {closest.zone}" if closest.zone else ""
        reasons.append(PoolReason("", ReasonCode.CAPACITY, f"free capacity and every pool{where} together have {room}",
                                  hint))
    return reasons


def _room_hint(search: GangSearch, closest: ZoneShortfall) -> Hint:
    """How many pods of the pod set there is room for; a count that fits only for a gang of one pod set (room
    for each pod set alone says nothing about room for all of them together)."""
    fits = (closest.placeable or None) if len(search.groups) == 1 else None
    return Hint(needed=closest.needed, allowed=closest.placeable, of="pods", pod_set=search.groups[closest.group].name,
                fits=fits)


#: Reasons about what a pool's nodes are (not about its capacity): alike pools share one line.
_SHAPE_CODES = frozenset({ReasonCode.SELECTOR, ReasonCode.AFFINITY, ReasonCode.TAINT, ReasonCode.TOO_LARGE})
#: Pools named in one shared line before the rest are counted.
MAX_NAMED_POOLS = 5


def _merge_alike(reasons: list[PoolReason]) -> list[PoolReason]:
    """One line per distinct node-shape reason ("pools a, b, c: ..."), so 150 CPU pools are not 150 lines."""
    alike: dict[tuple[ReasonCode, str], list[str]] = defaultdict(list)
    merged: list[PoolReason] = []
    for reason in reasons:
        if reason.code in _SHAPE_CODES:
            if (reason.code, reason.message) not in alike:
                merged.append(reason)
            alike[(reason.code, reason.message)].append(reason.pool)
        else:
            merged.append(reason)
    result = []
    for reason in merged:
        pools = alike.get((reason.code, reason.message), [reason.pool])
        if len(pools) > 1:
            named = ", ".join(pools[:MAX_NAMED_POOLS])
            more = f" and {len(pools) - MAX_NAMED_POOLS} more" if len(pools) > MAX_NAMED_POOLS else ""
            result.append(replace(reason, pool=named + more))
        else:
            result.append(reason)
    return result


def _no_scale_reasons(search: GangSearch) -> tuple[PoolReason, ...]:
    """A gang that may not scale (check-capacity) fails on free capacity alone: say how short it is."""
    reasons: list[PoolReason] = []
    for group in search.groups:
        if next(iter(search.candidates(None, group)), None) is None:
            reasons.append(PoolReason("", ReasonCode.CAPACITY, f"no Ready node has room for a pod of pod set "
                                                               f"{group.name!r}"))
    misses = [s for s in search.shortfalls if s.group >= 0]
    if not reasons and misses:
        closest = max(misses, key=lambda s: (s.placeable / s.needed, s.zone or ""))
        where = f" in zone {closest.zone}" if closest.zone else ""
        reasons.append(PoolReason("", ReasonCode.CAPACITY,
                                  f"free capacity on Ready nodes{where} has room for {closest.placeable} of "
                                  f"{closest.needed} pods of pod set {search.groups[closest.group].name!r}",
                                  _room_hint(search, closest)))
    reasons.append(PoolReason("", ReasonCode.CAPACITY, "this class checks existing capacity only and never "
                                                       "scales a pool"))
    return tuple(reasons)


#: Distinct spread-check failures reported for one gang.
MAX_SPREAD_REASONS = 3


def _spread_reasons(search: GangSearch) -> list[PoolReason]:
    """What the gang's topology spread constraints ask for, and why the plans found broke them."""
    spread = search.spread
    if spread is None:
        return []
    reasons: list[PoolReason] = []
    for rule in spread.rules:
        nodes = spread.min_nodes(rule)
        if nodes > 1:
            owner = search.groups[rule.owner].name
            reasons.append(PoolReason("", ReasonCode.SPREAD, f"pod set {owner!r}: {rule.constraint} needs the "
                                                             f"{rule.pods} pods it selects on at least {nodes} nodes",
                                      Hint(needed=nodes, of="nodes", pod_set=owner)))
    reasons += [PoolReason("", ReasonCode.SPREAD, f"every plan found breaks a topology spread constraint: {problem}")
                for problem in list(search.spread_misses)[:MAX_SPREAD_REASONS]]
    return reasons


def diagnose(state: ClusterState, compat: Compatibility, search: GangSearch) -> tuple[PoolReason, ...]:
    if not search.gang.may_scale:
        return _no_scale_reasons(search) + tuple(_spread_reasons(search))
    pools = [state.pool_states[name] for name in sorted(state.pool_states)
             if search.all_tiers is None or state.pool_states[name].pool.capacity_type in search.all_tiers]
    per_pool = [reason for pool in pools if (reason := _pool_reason(state, compat, search, pool)) is not None]
    reasons = _gang_reasons(search, per_pool) + _spread_reasons(search) + _merge_alike(per_pool)
    if not reasons:
        reasons.append(PoolReason("", ReasonCode.NO_POOL, "no combination of free capacity and node pools "
                                                          "places every pod"))
    return tuple(reasons)
