"""``plan(snapshot, gangs, now) -> decisions``: the pure decision function at the heart of gangscale.

Gangs are planned one at a time in order (higher priority, then older, then by key). Each gets all of
its capacity or none: free capacity and pool headroom given to one gang are taken out of what the next
gang sees, and a gang that cannot be placed takes nothing, so it never blocks smaller gangs behind it.
New nodes opened for one gang are never offered to another (that would tie two gangs' fates together).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from gangscale.model.decision import Decision, NewNodes, Outcome, Placement, ScaleStep
from gangscale.model.gang import Gang
from gangscale.model.policy import Policy
from gangscale.model.snapshot import Snapshot
from gangscale.planner.compat import Compatibility
from gangscale.planner.diagnose import diagnose
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
    if gang.pods == 0:
        return Decision(gang.key, Outcome.FITS)
    state.lend_bookings(gang.key)
    search = GangSearch(state, compat, policy, gang)
    packing = search.run()
    if packing is None:
        reasons = diagnose(state, compat, search)  # before reclaiming: the search's node indexes must not move
        state.reclaim_bookings(gang.key)
        return Decision(gang.key, Outcome.INFEASIBLE, reasons=reasons)
    decision = to_decision(state, search, packing)
    taken = {node: dict(zip(search.dims, amounts, strict=True)) for node, amounts in packing.existing.taken.items()}
    state.consume(taken, packing.new.units)
    return decision


def to_decision(state: ClusterState, search: GangSearch, packing: Packing) -> Decision:
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
                    new_nodes=new_nodes, cost=packing.cost)
