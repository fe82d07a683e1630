"""The parts of a pass that look at many requests at once: plan the pending ones together, re-book the ones a
restart left without a booking, choose the units to scale down. Pure functions of what the loop passes in."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.bookings import consumed_on, live_bookings, planned_booking
from gangscale.controller.logic.holdings import Holding, inflight_by_pool, pool_states, snapshot, unit_count
from gangscale.controller.logic.rebook import rebuild
from gangscale.controller.logic.reconcile import WARNING
from gangscale.controller.logic.request import RequestState
from gangscale.controller.logic.unneeded import broken_units
from gangscale.controller.logic.view import ClusterView, PodInfo
from gangscale.model.decision import Outcome
from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.snapshot import Booking, Snapshot
from gangscale.planner import plan, summarize
from gangscale.timefmt import rfc3339


class GangSource(Protocol):
    """What planning asks of a request's demand source (``demand.DemandSource`` has these)."""

    def gang(self, st: RequestState, *, may_scale: bool | None = None) -> Gang | str | None: ...

    def consumers(self, st: RequestState) -> Iterable[PodInfo]: ...


def gangs_of(states: Iterable[RequestState], sources: Mapping[str, GangSource], now: float,
             on_error: Callable[[RequestState, Exception], None] | None = None) -> dict[str, Gang]:
    """The gangs of the requests to plan. A request whose gang cannot be built fails (``FailedToCreatePods``);
    one whose source is still looking something up waits for it; one whose source raises is handed to
    ``on_error`` (and left out) when it is given."""
    gangs: dict[str, Gang] = {}
    for st in states:
        try:
            got = sources[st.request.source].gang(st)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(st, exc)
            continue
        if got is None:
            continue
        if isinstance(got, str):
            st.gang = None
            st.set(C.FAILED, True, C.R_FAILED_TO_CREATE_PODS, got, rfc3339(now))
            st.event(WARNING, C.R_FAILED_TO_CREATE_PODS, got)
            continue
        st.gang = gangs[st.key] = got
    return gangs


def rebook(lost: Sequence[RequestState], sources: Mapping[str, GangSource], view: ClusterView,
           snapshot: Snapshot, now: float, policy: Policy) -> None:
    """Provisioned requests whose booking was lost (a restart) are booked again, before anybody is planned: on
    their own new nodes when a recorded scale-up made them, else on free capacity (:mod:`rebook`)."""
    bookings: list[Booking] = list(snapshot.bookings)
    on_free: dict[str, Gang] = {}
    own_nodes = {st.key: {name for token in st.record.tokens for name in view.nodes_of(token)}
                 for st in lost if st.record is not None}
    rebuilt_on = set().union(*own_nodes.values())
    for st in sorted(lost, key=lambda st: st.key):
        source = sources[st.request.source]
        got = source.gang(st, may_scale=False)
        gang = got if isinstance(got, Gang) else None
        if gang is not None:
            st.gang = gang
        if st.record is None:
            st.booking = {}
            if gang is not None:
                on_free[st.key] = gang
            continue
        tokens = set(st.record.tokens)
        own = [view.nodes[name].state for token in sorted(tokens) for name in sorted(view.nodes_of(token))
               if not view.nodes[name].deleting]
        consumed = consumed_on((p.node, p.requests) for p in source.consumers(st))
        st.booking, whole = rebuild(gang, own, consumed, replace(snapshot, bookings=tuple(bookings)),
                                    {step.pool for step in st.record.steps}, now, policy,
                                    rebuilt_on - own_nodes[st.key], st.record.nodes)
        if not whole and (gone := lost_for_good(st, view)):
            # The gang no longer fits what is left of its capacity, and nodes it was booked on are gone or being
            # reclaimed: Kueue is told, and the existing nodes the plan used are held with the rest until that is
            # written (chaos seed 19033: a slice half reclaimed while no leader could write was removed as "missing
            # hosts" while still promised).
            st.booking = {**{name: view.nodes[name].state.allocatable for name in st.record.nodes
                             if name in view.nodes}, **st.booking}
            message = (f"after a restart its booking could not be made again: booked nodes are gone or being "
                       f"reclaimed: {', '.join(gone[:10])}" + (f" and {len(gone) - 10} more" if len(gone) > 10 else ""))
            st.set(C.CAPACITY_REVOKED, True, C.R_NODE_REMOVED, message, rfc3339(now))
            st.event(WARNING, "CapacityRevoked", message)
        bookings.extend(live_bookings(st.key, st.booking, consumed, view.nodes))
    if not on_free:
        return
    by_key = {st.key: st for st in lost}
    for decision in plan(replace(snapshot, bookings=tuple(bookings)), on_free.values(), now, policy):
        st = by_key[decision.gang]
        if decision.outcome is Outcome.FITS:
            assert st.gang is not None
            st.booking = planned_booking(st.gang, decision, {})
        else:
            # What it was booked on is gone (a node reclaimed or removed while no process watched): Kueue is told,
            # rather than left counting on capacity that nothing holds (chaos seed 17017).
            message = (f"after a restart its booking on free capacity could not be made again: "
                       f"{summarize(decision)}")
            st.set(C.CAPACITY_REVOKED, True, C.R_BOOKING_LOST, message, rfc3339(now))
            st.event(WARNING, "CapacityRevoked", message)


def lost_for_good(st: RequestState, view: ClusterView) -> list[str]:
    """The nodes a Provisioned request's booking stood on that are gone or under a reclaim notice: the existing nodes
    its plan used (the record's) and its own new nodes the provider still reported (``booking_seen``, seeded by
    recovery)."""
    assert st.record is not None
    names = sorted({*st.record.nodes, *st.booking_seen})
    return [name for name in names
            if (info := view.nodes.get(name)) is None or info.deleting or info.readiness.notice]


@dataclass(frozen=True)
class Units:
    """The managed pools' units as the loop sees them in one pass."""

    by_pool: Mapping[str, Mapping[str, list[str]]]
    #: Units missing hosts that no scale-up in progress is completing: unit -> nodes.
    broken: Mapping[str, tuple[str, ...]]


def obtained_nodes_seen(st: RequestState, view: ClusterView) -> bool:
    """Every node the provider said the request's scale-up made is in the view."""
    return all(name in view.nodes for got in st.obtained.values() for name in got.node_names)


def units_of(view: ClusterView, pools: Mapping[str, NodePool], coming_up: set[str], going: set[str]) -> Units:
    """The pools' units; broken ones are those missing hosts whose claim is not coming up (``Ledger.coming_up_claims``)
    and that are not going already (``Ledger.going_units``)."""
    by_pool = view.units(pools)
    broken = broken_units(pools, by_pool, lambda node: view.nodes[node].unit is not None,
                          lambda node: view.nodes[node].claim in coming_up)
    return Units(by_pool, {unit: nodes for unit, nodes in broken.items() if unit not in going})


def planning_snapshot(pools: Mapping[str, NodePool], view: ClusterView, units: Units, holdings: Iterable[Holding],
                      backoffs: PoolBackoffs, now: float, *, going: set[str], leaving: set[str],
                      coming: set[str]) -> Snapshot:
    """The planner's input (the loop's, and ``gangscale explain --offline``'s): every pool's units, what the
    requests hold, and the nodes that are no room to plan on.

    ``going``: units being removed (scale-down, the actuator's releases); ``leaving``: nodes of scale-ups being
    rolled back; ``coming``: nodes that scale-ups in progress made already.
    """
    holdings = list(holdings)
    counts = {name: unit_count(view, pool, units.by_pool.get(name, {}), going, leaving) for name, pool in pools.items()}
    # Nodes on their way out are no capacity: a plan onto a unit that scale-down is removing would be told
    # Provisioned on nodes about to vanish (found by hack/chaos.py).
    removing = {node for unit in going if (found := view.unit_nodes(unit)) is not None for node in found[1]}
    # Nodes that a scale-up in progress made already are its request's, not free room, though no booking holds
    # them until its obtain answers: one being retried, or recorded and about to be resumed after a restart or
    # a handover (found by hack/chaos.py, seeds 2013 and 3147: another gang was planned onto such nodes).
    unusable = leaving | removing | coming | {node for nodes in units.broken.values() for node in nodes}
    return snapshot(pool_states(pools, counts, inflight_by_pool(holdings), backoffs, now), view, holdings, unusable)
