"""``plan(snapshot, gangs, now) -> decisions``: the pure decision function at the heart of gangscale.

Gangs are planned one at a time in order (higher priority, then older, then by key). Each gets all of
its capacity or none: free capacity and pool headroom given to one gang are taken out of what the next
gang sees, and a gang that cannot be placed takes nothing, so it never blocks smaller gangs behind it.
New nodes opened for one gang are never offered to another (that would tie two gangs' fates together).
Each gang is placed whole in one capacity tier, the first of its tiers that can hold it (:func:`plan_gang`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from gangscale.model.decision import Decision, Hint, NewNodes, Outcome, Placement, PoolReason, ReasonCode, ScaleStep
from gangscale.model.gang import Gang
from gangscale.model.policy import Policy
from gangscale.model.snapshot import Snapshot
from gangscale.model.tiers import Opening, TierPolicy
from gangscale.planner.compat import Compatibility
from gangscale.planner.diagnose import diagnose, when
from gangscale.planner.search import GangSearch, Packing
from gangscale.planner.state import ClusterState


def plan(snapshot: Snapshot, gangs: Iterable[Gang], now: float, policy: Policy | None = None) -> tuple[Decision, ...]:
    """Decide, for each gang, fits / scale up / infeasible. Decisions come back in planning order.

    ``now`` (seconds since the epoch) decides which pool backoffs have expired. Same input, same output.
    """
    policy = policy or Policy()
    state = ClusterState(snapshot, now)
    compat = Compatibility(policy)
    return tuple(plan_gang(state, compat, policy, gang) for gang in sorted(gangs, key=lambda gang: gang.order))


def plan_gang(state: ClusterState, compat: Compatibility, policy: Policy, gang: Gang) -> Decision:
    """The gang's first tier that holds all of it now (all its open tiers as one, when they may mix); reasons for
    every tier tried when none does (:mod:`gangscale.model.tiers`)."""
    if gang.pods == 0:
        return Decision(gang.key, Outcome.FITS)
    tiers = gang.tiers or policy.tiers.for_class("")
    opening = tiers.opening(gang.created, state.now)
    present = state.tiers_present()
    tried = [tier for tier in opening.open if tier in present]
    # No open tier has a pool or node: one search of them all, so the reasons say what is missing as before.
    attempts = ([frozenset(opening.open)] if not tried or tiers.mix else [frozenset({tier}) for tier in tried])
    # Reasons name their tier where the cluster has several (a cluster of one tier reads as it always did).
    labelled = len(present) > 1 and not tiers.mix and bool(tried)
    state.lend_bookings(gang.key)
    reasons: list[PoolReason] = []
    for allowed in attempts:
        search = GangSearch(state, compat, policy, gang, allowed, loose=frozenset(opening.open))
        packing = search.run()
        if packing is not None:
            tier = next(iter(allowed)) if len(allowed) == 1 and len(present) > 1 else ""
            decision = to_decision(state, search, packing, tier)
            taken = {node: dict(zip(search.dims, amounts, strict=True))
                     for node, amounts in packing.existing.taken.items()}
            state.consume(taken, packing.new.units)
            return decision
        # Before reclaiming: the search's node indexes must not move.
        found = diagnose(state, compat, search)
        reasons += [replace(reason, tier=next(iter(allowed))) for reason in found] if labelled else found
    state.reclaim_bookings(gang.key)
    reasons += tier_reasons(tiers, opening, present, several=len(present) > 1 or not tried)
    return Decision(gang.key, Outcome.INFEASIBLE, reasons=tuple(reasons), wait_until=opening.until)


def tier_reasons(tiers: TierPolicy, opening: Opening, present: set[str], *, several: bool) -> list[PoolReason]:
    """Why tiers were not tried: not open yet (a wait bound); no pool or node of theirs, said where it matters (the
    cluster has several tiers, or none of the gang's) and not in an empty cluster (the other reasons say so)."""
    reasons = []
    absent = [tier for tier in opening.open if tier not in present]
    if absent and several and present:
        reasons.append(PoolReason("", ReasonCode.TIER, f"no pool or Ready node of capacity type {_or(absent)}"))
    if opening.waiting_for is not None and opening.until is not None:
        later = tiers.order[len(opening.open):]
        reasons.append(PoolReason("", ReasonCode.TIER, f"waiting for {opening.waiting_for} capacity until "
                                                       f"{when(opening.until)} before trying {_or(list(later))}",
                                  Hint(until=opening.until)))
    return reasons


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def to_decision(state: ClusterState, search: GangSearch, packing: Packing, tier: str = "") -> Decision:
    groups = search.groups
    on_nodes: dict[tuple[str, str], int] = defaultdict(int)
    for g, node, count in packing.existing.placements:
        on_nodes[(groups[g].name, state.nodes[node].name)] += count
    placements = tuple(Placement(pod_set, node, count) for (pod_set, node), count in sorted(on_nodes.items()))
    steps = tuple(ScaleStep(name, units, units * state.pool(name).nodes_per_unit)
                  for name, units in sorted(packing.new.units.items()))
    alike: dict[tuple[str, tuple[tuple[str, int], ...]], int] = defaultdict(int)
    for bin_ in packing.new.bins:
        pods = tuple(sorted((groups[g].name, count) for g, count in bin_.pods.items() if count))
        alike[(bin_.pool, pods)] += bin_.mult
    new_nodes = tuple(NewNodes(pool, nodes, pods) for (pool, pods), nodes in sorted(alike.items()))
    outcome = Outcome.SCALE_UP if steps else Outcome.FITS
    return Decision(search.gang.key, outcome, zone=packing.zone, placements=placements, steps=steps,
                    new_nodes=new_nodes, cost=packing.cost, tier=tier)
