"""How each ProvisioningRequest moves on in a pass: the conditions to set and the side effects to run.

Pure with respect to I/O: these functions change the in-memory :class:`RequestState` and return the
:class:`Action` s the loop must carry out (start a scale-up, release units, delete a finished PR). The loop
writes the resulting status afterwards, so one pass means at most one status write per PR.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gangscale.clock import parse_rfc3339, rfc3339
from gangscale.controller import conditions as C
from gangscale.controller.backoffs import PoolBackoffs
from gangscale.controller.bookings import planned_booking
from gangscale.controller.cluster import ClusterView
from gangscale.controller.record import OBTAINING, Record, Step, step_token
from gangscale.controller.requests import RequestState
from gangscale.controller.settings import Settings
from gangscale.controller.verify import scale_up_problems
from gangscale.model.decision import Decision, Outcome
from gangscale.model.nodepool import NodePool
from gangscale.planner import summarize
from gangscale.sources.provreq import BOOKING_SECONDS, NO_RETRY, PROVISIONED_WHEN

NORMAL, WARNING = "Normal", "Warning"


@dataclass
class Actions:
    scale_up: list[RequestState] = field(default_factory=list)
    #: Scale-ups to undo: (request, steps, their nodes, why).
    release: list[tuple[RequestState, tuple[Step, ...], tuple[str, ...], str]] = field(default_factory=list)
    delete: list[RequestState] = field(default_factory=list)
    #: A booking ended or capacity was handed back: pending requests may retry now.
    capacity_freed: bool = False


def duration(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class Transitions:
    def __init__(self, settings: Settings, backoffs: PoolBackoffs, pools: Mapping[str, NodePool]) -> None:
        self.settings = settings
        self.backoffs = backoffs
        self.pools = pools

    # -- helpers ------------------------------------------------------------------------------------------

    def booking_ttl(self, st: RequestState) -> float:
        raw = st.pr.parameters.get(BOOKING_SECONDS)
        try:
            return float(raw) if raw is not None and float(raw) >= 0 else self.settings.booking_ttl
        except ValueError:
            return self.settings.booking_ttl

    def provisioned(self, st: RequestState, reason: str, message: str, now: float) -> None:
        until = rfc3339(now + self.booking_ttl(st))
        st.set(C.PROVISIONED, True, reason, f"{message}; capacity booked until {until} or until every pod "
                                            f"is scheduled", rfc3339(now))
        st.retries, st.retry_at = 0, None
        st.event(NORMAL, "Provisioned", message)

    # -- per phase ----------------------------------------------------------------------------------------

    def pending(self, st: RequestState, now: float) -> bool:
        """Accept the request; expire it when too old; True when it should be planned in this pass."""
        stamp = rfc3339(now)
        st.set(C.ACCEPTED, True, C.R_ACCEPTED, C.M_ACCEPTED, stamp)
        if now - st.pr.created >= self.settings.expiry:
            message = (f"ProvisioningRequest is expired: not provisioned within "
                       f"{duration(self.settings.expiry)} of its creation")
            st.set(C.FAILED, True, C.R_EXPIRED, message, stamp)
            st.event(WARNING, "Expired", message)
            return False
        return st.retry_at is None or now >= st.retry_at

    def booked(self, st: RequestState, now: float, view: ClusterView, acts: Actions) -> None:
        stamp = rfc3339(now)
        if len(view.consumers.get(st.key, ())) >= st.pr.pods:
            st.set(C.BOOKING_EXPIRED, True, C.R_BOOKING_CONSUMED, C.M_BOOKING_CONSUMED, stamp)
            return
        since = parse_rfc3339(st.conditions[C.PROVISIONED].last_transition) or now
        if now >= since + self.booking_ttl(st):
            st.set(C.BOOKING_EXPIRED, True, C.R_BOOKING_TIME_EXPIRED, C.M_BOOKING_TIME_EXPIRED, stamp)
            acts.capacity_freed = True
            return
        if st.booking:
            st.booking_seen |= set(st.booking) & view.nodes.keys()
        # Seeded at a restart with the nodes of the request's scale-up (``Controller.recover_booked``).
        if st.booking_seen:
            lost = sorted(st.booking_seen - view.nodes.keys())
            if lost:
                message = (f"booked nodes were removed before every pod was scheduled: {', '.join(lost[:10])}"
                           + (f" and {len(lost) - 10} more" if len(lost) > 10 else ""))
                st.set(C.CAPACITY_REVOKED, True, C.R_NODE_REMOVED, message, stamp)
                st.event(WARNING, "CapacityRevoked", message)
                acts.capacity_freed = True

    def provisioning(self, st: RequestState, now: float, view: ClusterView, acts: Actions) -> None:
        """A recorded scale-up whose provider calls are over: Provisioned once every node is Ready."""
        record = st.record
        assert record is not None
        nodes = [name for got in st.obtained.values() for name in got.node_names]
        problems = scale_up_problems(record.steps, st.obtained, self.pools)
        if problems:
            # Never reached through the actuator, which checks every result: a last guard before Provisioned=True.
            why = (f"the scale-up is not whole ({'; '.join(problems)}); every unit of it was released and the "
                   "request is re-planned")
            self.abandon(st, nodes, why, "ScaleUpIncomplete", now, acts)
            return
        ready = [name for name in nodes if name in view.nodes and view.nodes[name].state.ready]
        if len(ready) == len(nodes):
            st.booking = (planned_booking(st.gang, st.decision, new_nodes_by_pool(st))
                          if st.gang is not None and st.decision is not None else None)
            st.booking_seen = set()
            self.provisioned(st, C.R_PROVISIONED, f"{len(nodes)} new nodes are Ready ({steps_text(record)})", now)
            return
        if now < record.deadline:
            return
        late = sorted({got.pool for got in st.obtained.values() if set(got.node_names) - set(ready)})
        for pool in late:
            self.backoffs.fail(pool, "nodes that did not become Ready in time", now)
        why = (f"{len(nodes) - len(ready)} of {len(nodes)} new nodes were not Ready within "
               f"{duration(self.settings.max_node_provision_time)} (pools {', '.join(late) or '?'}); every unit of "
               f"the scale-up was released and the request is re-planned")
        self.abandon(st, nodes, why, "ScaleUpTimedOut", now, acts)

    @staticmethod
    def abandon(st: RequestState, nodes: list[str], why: str, event: str, now: float, acts: Actions) -> None:
        """Release every unit of the recorded scale-up and send the request back to planning."""
        assert st.record is not None
        acts.release.append((st, st.record.steps, tuple(nodes), why))
        st.record, st.obtained = None, {}
        st.set(C.PROVISIONED, False, C.R_NOT_FOUND, why, rfc3339(now))
        st.event(WARNING, event, why)

    def done(self, st: RequestState, now: float, acts: Actions) -> None:
        if not self.settings.terminal_ttl:
            return
        times = [parse_rfc3339(c.last_transition) or now for t, c in st.conditions.items()
                 if t in (C.PROVISIONED, *C.TERMINAL_TYPES)]
        if times and now - max(times) >= self.settings.terminal_ttl:
            acts.delete.append(st)

    # -- decisions ------------------------------------------------------------------------------------------

    def decided(self, st: RequestState, decision: Decision, now: float, acts: Actions) -> None:
        stamp = rfc3339(now)
        st.decision = decision
        match decision.outcome:
            case Outcome.FITS:
                assert st.gang is not None
                st.booking, st.booking_seen = planned_booking(st.gang, decision, {}), set()
                self.provisioned(st, C.R_FOUND, summarize(decision), now)
            case Outcome.SCALE_UP if self.settings.dry_run:
                st.retry_at = now + self.settings.retry_initial
            case Outcome.SCALE_UP:
                st.attempts += 1
                steps = tuple(Step(s.pool, s.units, step_token(st.pr.uid, st.attempts, i, now, st.pr.resource_version))
                              for i, s in enumerate(decision.steps))
                st.record = Record(st.attempts, OBTAINING, now + self.settings.max_node_provision_time, steps)
                st.set(C.PROVISIONED, False, C.R_IN_PROGRESS, f"{summarize(decision)}: obtaining the units", stamp)
                st.event(NORMAL, "ScaleUp", summarize(decision))
                acts.scale_up.append(st)
            case Outcome.INFEASIBLE:
                message = summarize(decision)
                if st.pr.flag(NO_RETRY):
                    st.set(C.FAILED, True, C.R_NOT_FOUND, message, stamp)
                    st.event(WARNING, "CapacityNotFound", message)
                    return
                st.retries += 1
                delay = min(self.settings.retry_initial * 2 ** (st.retries - 1), self.settings.retry_max)
                st.retry_at = now + delay
                st.set(C.PROVISIONED, False, C.R_NOT_FOUND, f"{message}. Next attempt at {rfc3339(st.retry_at)}",
                       stamp)
                if st.retries == 1:
                    st.event(WARNING, "CapacityNotFound", message)

    def obtained(self, st: RequestState, now: float) -> None:
        """Every unit was granted: wait for Ready, or report success at once if the PR asks for that."""
        assert st.record is not None
        text = steps_text(st.record)
        if st.pr.parameters.get(PROVISIONED_WHEN, "").lower() == "requested":
            st.booking = (planned_booking(st.gang, st.decision, new_nodes_by_pool(st))
                          if st.gang is not None and st.decision is not None else None)
            self.provisioned(st, C.R_PROVISIONED, f"obtained {text}; the nodes are coming up", now)
            return
        deadline = rfc3339(st.record.deadline)
        st.set(C.PROVISIONED, False, C.R_IN_PROGRESS,
               f"obtained {text}; waiting for the new nodes to be Ready (giving up at {deadline})", rfc3339(now))


def steps_text(record: Record) -> str:
    return ", ".join(f"{step.pool} +{step.units} unit{'s' if step.units != 1 else ''}" for step in record.steps)


def new_nodes_by_pool(st: RequestState) -> Mapping[str, list[str]]:
    out: dict[str, list[str]] = {}
    for got in st.obtained.values():
        out.setdefault(got.pool, []).extend(got.node_names)
    return out
