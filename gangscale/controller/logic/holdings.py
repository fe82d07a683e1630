"""The planner's input, from the loop's view and requests: pools, usable nodes, what every request holds.

What a request holds (:func:`held`) is computed when the request changes and kept by the loop, so building a
snapshot for a plan only gathers what is already there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.bookings import consumed_on, live_bookings, planned_booking
from gangscale.controller.logic.request import Phase, RequestState, phase
from gangscale.controller.logic.view import ClusterView, PodInfo
from gangscale.model.nodepool import NodePool
from gangscale.model.snapshot import Booking, PoolState, Snapshot


@dataclass(frozen=True, slots=True)
class Holding:
    """What one request holds: bookings on nodes, and units asked for whose nodes have not registered yet."""

    bookings: tuple[Booking, ...] = ()
    inflight: tuple[tuple[str, int], ...] = ()


NOTHING = Holding()


def _whole(st: RequestState, view: ClusterView) -> tuple[Booking, ...]:
    """Every registered node of the request's recorded scale-up, held whole."""
    assert st.record is not None
    return tuple(Booking(st.key, name, view.nodes[name].state.allocatable)
                 for token in st.record.tokens for name in sorted(view.nodes_of(token)))


def ended_unwritten(st: RequestState) -> bool:
    """The booking was taken back here (revoked, or its time ran out) and that is not yet written on the object.
    A booking consumed by its pods is not held: the pods hold the room themselves."""
    return any(st.true(ctype) and st.reported.get(ctype) != ("True", st.conditions[ctype].reason)
               and st.conditions[ctype].reason != C.R_BOOKING_CONSUMED for ctype in C.TERMINAL_TYPES)


def held(st: RequestState, view: ClusterView, consumers: Iterable[PodInfo]) -> Holding:
    """Booked pods while booked; while provisioning, whole new nodes (and the planned pods on existing ones)."""
    consumed = consumed_on((p.node, p.requests) for p in consumers)
    match phase(st):
        case Phase.DONE if st.booking and ended_unwritten(st):
            # The booking ended here (revoked, expired), not yet on the object: Kueue still counts on it, so its nodes
            # stay held until the write lands. Found by hack/chaos.py, seed 15027: a revocation's status write was
            # refused (409) and retried, and meanwhile scale-down removed the other booked node of the request that
            # Kueue still saw Provisioned.
            return Holding(tuple(live_bookings(st.key, st.booking, consumed, view.nodes)))
        case Phase.DONE if st.booking is None and st.record is not None and ended_unwritten(st):
            # The same after a restart, before the booking was rebuilt (seed 15007: a new leader revoked for a
            # reclaimed host and removed the slice's other host as a broken unit before the revocation was written).
            return Holding(_whole(st, view))
        case Phase.BOOKED if st.booking:
            return Holding(tuple(live_bookings(st.key, st.booking, consumed, view.nodes)))
        case Phase.BOOKED if st.booking is None and st.record is not None:
            # Provisioned, its booking not rebuilt yet (a restart; the loop waits until every node the scale-up
            # obtained is in the view): every registered node of its scale-up is held whole meanwhile.
            return Holding(_whole(st, view))
        case Phase.PROVISIONING if st.record is not None:
            inflight = []
            for step in st.record.steps:
                registered = {view.nodes[name].unit or name for name in view.nodes_of(step.token)}
                if step.units > len(registered):
                    inflight.append((step.pool, step.units - len(registered)))
            bookings = [Booking(st.key, name, view.nodes[name].state.allocatable)
                        for got in st.obtained.values() for name in got.node_names if name in view.nodes]
            if st.gang is not None and st.decision is not None:
                bookings += live_bookings(st.key, planned_booking(st.gang, st.decision, {}), consumed, view.nodes)
            else:
                # Resumed after a restart: the plan is not known, only which existing nodes it used; held whole.
                bookings += [Booking(st.key, name, view.nodes[name].state.allocatable)
                             for name in st.record.nodes if name in view.nodes]
            return Holding(tuple(bookings), tuple(inflight))
    return NOTHING


def unit_count(view: ClusterView, pool: NodePool, units: Mapping[str, Sequence[str]], going: set[str],
               leaving: set[str]) -> int:
    """Units of ``pool`` that stay: those being released no longer count (minUnits, maxUnits)."""
    staying = {unit: list(nodes) for unit, nodes in units.items() if unit not in going and not set(nodes) & leaving}
    return view.unit_count(pool, staying)


def pool_states(pools: Mapping[str, NodePool], units: Mapping[str, int], inflight: Mapping[str, int],
                backoffs: PoolBackoffs, now: float) -> tuple[PoolState, ...]:
    out = []
    for name, pool in sorted(pools.items()):
        count, coming = units.get(name, 0), inflight.get(name, 0)
        backoff = backoffs.get(name, now)
        if backoff is None:
            out.append(PoolState(pool, count, coming))
            continue
        ceiling = backoffs.ceiling(name, now, count + coming)
        if ceiling:
            # Open for fewer units than the failure asked for (a stockout or quota error).
            out.append(PoolState(pool, count, coming, ceiling=ceiling, ceiling_until=backoff.until,
                                 ceiling_reason=backoff.reason))
        else:
            out.append(PoolState(pool, count, coming, backoff.until, backoff.reason))
    return tuple(out)


def snapshot(pools: tuple[PoolState, ...], view: ClusterView, holdings: Iterable[Holding],
             unusable: set[str]) -> Snapshot:
    bookings = tuple(b for holding in holdings for b in holding.bookings)
    return Snapshot(pools, tuple(view.snapshot_nodes(unusable)), bookings)


def inflight_by_pool(holdings: Iterable[Holding]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for holding in holdings:
        for pool, units in holding.inflight:
            out[pool] += units
    return out
