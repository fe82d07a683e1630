"""Bookings rebuilt after a restart (DESIGN decisions 8 and 12): pure functions of the cluster and the record.

A booking lives in memory, so a restarted process has none for a request that is (or becomes) Provisioned.
For a request whose capacity came from a recorded scale-up, the capacity is the request's *own* new nodes (the
nodes labelled with the record's tokens), and the booking is rebuilt there, never on whatever other capacity
happens to be free: those nodes were made for it, Kueue may pin its pods to the pool named in
``provisioningClassDetails``, and only a booking keeps scale-down off them.

1. Every own node is held whole: the floor, so no own node is ever left unbooked; the plans below replace
   that with the gang's pods on the nodes they use.
2. The gang is planned onto its own nodes alone, as if none of its pods had arrived yet (the consumer pods
   already bound there are taken out of the node's requests; a booking shrinks by them later, see
   :func:`~gangscale.controller.logic.bookings.live_bookings`) and with the node lifecycle taints lifted (a node
   that just turned Ready may still carry ``not-ready`` for a moment). If it fits, that plan is the booking,
   exactly as the original decision's was.
3. Otherwise the original plan also used free room on nodes it did not make: the gang is planned onto its own
   nodes plus as little of the free capacity of the pools its scale-up used (and of the existing nodes the record
   names, held while the scale-up came up) as it can do with, and own nodes
   that plan does not use stay held whole. The own nodes of every other request rebuilt in the same pass are
   not free capacity, though no booking holds them yet: taking them would leave the free node this request had
   booked unprotected, for scale-down to remove while Kueue counts on it (found by ``hack/chaos.py``).

A request provisioned without a scale-up (check-capacity, or a gang that fit on free capacity) has no own
nodes: its booking is re-planned on free capacity, before any new request is planned.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from gangscale.controller.logic.bookings import Booked, planned_booking
from gangscale.model.decision import Decision, Outcome
from gangscale.model.gang import Gang
from gangscale.model.policy import Policy
from gangscale.model.resources import EMPTY, ResourceList
from gangscale.model.snapshot import NodeState, Snapshot
from gangscale.planner import plan

#: Taints the node lifecycle controller puts on and lifts by itself; a booking outlives them.
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def as_booked_for(node: NodeState, consumed: ResourceList) -> NodeState:
    """``node`` as its booking owner planned it: before the owner's pods arrived, lifecycle taints aside."""
    return replace(node, requested=node.requested - consumed, ready=True,
                   taints=tuple(t for t in node.taints if t.key not in LIFECYCLE_TAINTS))


def rebuilt_booking(gang: Gang | None, own: Iterable[NodeState], consumed: Mapping[str, ResourceList],
                    snapshot: Snapshot, pools: Iterable[str], now: float, policy: Policy,
                    taken: Collection[str] = (), recorded: Collection[str] = ()) -> Booked:
    """The booking of a request whose scale-up made ``own``; see the module docstring.

    ``snapshot`` is the cluster with every other booking in it; ``pools`` are the pools the scale-up used;
    ``taken`` are nodes that other requests' bookings are being rebuilt on; ``recorded`` are the existing nodes
    the scale-up's record says the plan used.
    """
    return rebuild(gang, own, consumed, snapshot, pools, now, policy, taken, recorded)[0]


def rebuild(gang: Gang | None, own: Iterable[NodeState], consumed: Mapping[str, ResourceList],
            snapshot: Snapshot, pools: Iterable[str], now: float, policy: Policy,
            taken: Collection[str] = (), recorded: Collection[str] = ()) -> tuple[Booked, bool]:
    """:func:`rebuilt_booking`, and whether it holds the gang whole (True without a gang: nothing to tell)."""
    mine = [as_booked_for(node, consumed.get(node.name, EMPTY)) for node in own]
    held: Booked = {node.name: node.allocatable for node in mine}
    if gang is None:
        return held, True
    if not mine:
        return held, False
    alone = plan(Snapshot((), tuple(mine), ()), [gang], now, policy)[0]
    if alone.outcome is Outcome.FITS:
        return {**held, **planned_booking(gang, alone, {})}, True
    names, used = set(held) | set(taken), set(pools)
    others = [node for node in snapshot.nodes
              if node.name not in names and (node.pool in used or node.name in recorded)]
    wider = _fewest_others(gang, mine, others, snapshot, now, policy)
    if wider is not None:
        return {**held, **planned_booking(gang, wider, {})}, True
    return held, False


def _fewest_others(gang: Gang, mine: list[NodeState], others: list[NodeState], snapshot: Snapshot, now: float,
                   policy: Policy) -> Decision | None:
    """The gang planned onto its own nodes plus as little of the free room as it can do with: own nodes are held
    whole in any case, so free nodes the plan can do without would be booked for nothing (found by
    ``hack/chaos.py``: a 2-pod gang held its new node and two free ones, and the spare was never scaled down).

    The planner has no notion of "own" nodes, so free nodes are taken away one at a time while the gang still
    fits; each is tried once, which bounds the plans by the number of free nodes the plans use."""
    def attempt(pool_nodes: list[NodeState]) -> Decision | None:
        decided = plan(replace(snapshot, pools=(), nodes=(*mine, *pool_nodes)), [gang], now, policy)[0]
        return decided if decided.outcome is Outcome.FITS else None

    best = attempt(others)
    needed: set[str] = set()
    while best is not None:
        own = {node.name for node in mine}
        spare = next((p.node for p in best.placements if p.node not in own and p.node not in needed), None)
        if spare is None:
            return best
        without = [node for node in others if node.name != spare]
        fewer = attempt(without)
        if fewer is None:
            needed.add(spare)
        else:
            best, others = fewer, without
    return None
