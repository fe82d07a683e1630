"""How a request moves on: the conditions to set and the side effects to ask for, as pure functions.

:func:`reconcile` takes one request's state, a read-only view of the world and the time, changes the state in
memory, and appends the side effects the loop must carry out to an :class:`Actions`. Kueue-style, one linear
function per phase; nothing here does I/O or reads a clock. :mod:`.scaleup` applies a plan's decision and a
scale-up's outcome the same way, and :func:`deadline` is the one place a request's next due time is computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.bookings import planned_booking
from gangscale.controller.logic.poolhealth import PoolHealth, ScaleUpOutcome, Unhealthy
from gangscale.controller.logic.record import OBTAINED, OBTAINING, RELEASING, Record, Step
from gangscale.controller.logic.request import Phase, RequestState, phase
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.verify import scale_up_problems
from gangscale.controller.logic.view import Readiness
from gangscale.model.nodepool import NodePool
from gangscale.retry import replanning
from gangscale.timefmt import parse_rfc3339, rfc3339

NORMAL, WARNING = "Normal", "Warning"


@dataclass(frozen=True, slots=True)
class Consumed:
    """A booking that has served its purpose: the condition message, and an Event reason if one is told."""

    message: str
    event: str | None = None


class World(Protocol):
    """What reconciling reads of the cluster (the loop's view and the request's source)."""

    def node_present(self, name: str) -> bool: ...

    def node_ready(self, name: str) -> bool: ...

    def node_readiness(self, name: str) -> Readiness | None:
        """The node's ``Ready`` condition; None when the node is not there."""
        ...

    def consumed(self, st: RequestState) -> Consumed | None:
        """Whether the request's pods have arrived (source-specific: consumer pods, Ray replicas on nodes)."""
        ...

    def node_tier(self, name: str) -> str:
        """The node's capacity tier (its pool's, else what its labels say; :mod:`gangscale.model.tiers`)."""
        ...

    def gang_nodes(self, st: RequestState) -> set[str]:
        """The nodes the request's consumer pods are bound to (its gang, running)."""
        ...

    def claims_gone(self, tokens: Sequence[str]) -> bool:
        """No node of the units made under these tokens is left in the view."""
        ...


@dataclass(frozen=True, slots=True)
class Release:
    st: RequestState
    steps: tuple[Step, ...]
    nodes: tuple[str, ...]
    why: str


@dataclass
class Actions:
    """Side effects a pass asks the loop for."""

    #: Record the intent, then obtain every unit (a new scale-up).
    scale_up: list[RequestState] = field(default_factory=list)
    #: Obtain the units of a recorded ``obtaining`` intent again, with its own tokens (after a restart).
    resume: list[RequestState] = field(default_factory=list)
    release: list[Release] = field(default_factory=list)
    delete: list[RequestState] = field(default_factory=list)
    #: A booking ended or capacity was handed back: pending requests may retry now.
    capacity_freed: bool = False

    def extend(self, other: Actions) -> None:
        self.scale_up += other.scale_up
        self.resume += other.resume
        self.release += other.release
        self.delete += other.delete
        self.capacity_freed = self.capacity_freed or other.capacity_freed


@dataclass(frozen=True)
class Context:
    now: float
    settings: Settings
    pools: Mapping[str, NodePool]
    backoffs: PoolBackoffs
    world: World
    #: Each pool's recent scale-up outcomes (None: not kept, as in tests that build a Context by hand).
    health: PoolHealth | None = None

    def scale_up_outcome(self, pool: str, outcome: ScaleUpOutcome) -> Unhealthy | None:
        """Record how a scale-up went for ``pool``; the pool's verdict while it is unhealthy (None when healthy).

        A pool that just became unhealthy is closed through its backoff until its cooldown ends, with the verdict
        as the reason: the planner skips it and every place that shows backoffs (the ``BackedOff`` reason,
        ``gangscale explain``, ``/debug/plans``, ``gangscale_pool_backed_off``) says why. Called after the
        failure's own backoff, whose reason the verdict replaces."""
        if self.health is None or pool not in self.pools:
            return None
        became = self.health.record(pool, outcome, self.now,
                                    capacity_type=getattr(self.pools[pool], "capacity_type", ""))
        verdict = self.health.unhealthy(pool, self.now)
        if became is not None and verdict is not None:
            self.backoffs.fail(pool, verdict.cause, self.now, at_least=verdict.until - self.now)
        return verdict

    def unhealthy(self, pool: str) -> Unhealthy | None:
        """The pool's verdict while its cooldown lasts. A failure of an unhealthy pool (a scale-up that was in flight
        when the verdict came) leaves the pool's backoff alone: the verdict closes the pool until the cooldown
        ends, and a backoff taken now would outlast it (the verdict made the cooldown the backoff's duration)."""
        return self.health.unhealthy(pool, self.now) if self.health is not None else None


def duration(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def retry_delay(retries: int, settings: Settings) -> float:
    """How long a gang waits after its ``retries``-th miss before it is decided again: doubling from
    ``--retry-initial`` up to ``--retry-max`` (:func:`gangscale.retry.replanning`; 0 misses count as 1)."""
    return replanning(settings).delay(retries)


def carried_over(st: RequestState, now: float, settings: Settings) -> tuple[int, float] | None:
    """A request that ends ``Failed`` for lack of capacity: its gang's misses so far and when the gang may be decided
    again (None for any other end). Kueue makes the gang's next request at once when the check's backoff is
    measured from an old time (its ``SetAdmissionCheckState`` keeps the check's transition time), so gangscale
    spaces the attempts itself, as it does for a request that is not ``noRetry``."""
    failed = st.conditions.get(C.FAILED)
    if failed is None or not failed.true or failed.reason != C.R_NOT_FOUND:
        return None
    misses = st.retries + 1
    return misses, now + retry_delay(misses, settings)


def booking_ttl(st: RequestState, settings: Settings) -> float:
    ttl = st.request.booking_ttl
    return ttl if ttl is not None and ttl >= 0 else settings.booking_ttl


def booking_end(st: RequestState, since: float, settings: Settings) -> float:
    """When the booking of a request provisioned at ``since`` ends by itself: after its TTL, or when the cloud
    reclaims its nodes (a run duration), whichever comes first."""
    end = since + booking_ttl(st, settings)
    reclaim = st.record.reclaim if st.record is not None else None
    return end if reclaim is None else min(end, reclaim)


def provisioned(st: RequestState, reason: str, message: str, now: float, settings: Settings) -> None:
    until = rfc3339(booking_end(st, now, settings))
    text = f"{message}; capacity booked until {until} or until every pod is scheduled"
    if st.record is not None and st.record.reclaim is not None:
        text += (f"; the nodes have a run duration: the cloud deletes them at {rfc3339(st.record.reclaim)}, with "
                 "whatever runs on them")
    st.set(C.PROVISIONED, True, reason, text, rfc3339(now))
    st.retries, st.retry_at = 0, None
    st.event(NORMAL, "Provisioned", message)


# -- per phase ----------------------------------------------------------------------------------------------------


def reconcile(st: RequestState, ctx: Context, acts: Actions) -> bool:
    """Move ``st`` on; True when it is to be planned in this pass. A request whose task runs is left alone."""
    if st.busy or st.deleted:
        return False
    match phase(st):
        case Phase.DONE:
            done(st, ctx, acts)
        case Phase.BOOKED:
            booked(st, ctx, acts)
        case Phase.PROVISIONING if st.record is not None and st.record.phase == OBTAINING:
            acts.resume.append(st)
        case Phase.PROVISIONING:
            provisioning(st, ctx, acts)
        case Phase.PENDING:
            return pending(st, ctx)
    return False


def pending(st: RequestState, ctx: Context) -> bool:
    """Accept the request; expire it when too old; True when it should be planned now."""
    now, stamp = ctx.now, rfc3339(ctx.now)
    st.set(C.ACCEPTED, True, C.R_ACCEPTED, C.M_ACCEPTED, stamp)
    if st.request.expires and now - st.request.created >= ctx.settings.expiry:
        message = (f"ProvisioningRequest is expired: not provisioned within {duration(ctx.settings.expiry)} of its "
                   "creation")
        st.set(C.FAILED, True, C.R_EXPIRED, message, stamp)
        st.event(WARNING, "Expired", message)
        return False
    if st.record is not None and st.record.phase == RELEASING:
        if not ctx.world.claims_gone(st.record.tokens):
            return False  # planned beside the units it hands back, it could hold twice the nodes it needs
        st.record = None
    return st.retry_at is None or now >= st.retry_at


def booked(st: RequestState, ctx: Context, acts: Actions) -> None:
    now, stamp = ctx.now, rfc3339(ctx.now)
    consumed = ctx.world.consumed(st)
    if consumed is not None:
        st.set(C.BOOKING_EXPIRED, True, C.R_BOOKING_CONSUMED, consumed.message, stamp)
        if consumed.event:
            st.event(NORMAL, consumed.event, f"{consumed.message}; the booking ends")
        acts.capacity_freed = True
        return
    since = parse_rfc3339(st.conditions[C.PROVISIONED].last_transition) or now
    if now >= booking_end(st, since, ctx.settings):
        reclaimed = st.record is not None and st.record.reclaim is not None and now >= st.record.reclaim
        st.set(C.BOOKING_EXPIRED, True, C.R_BOOKING_TIME_EXPIRED,
               C.M_BOOKING_RECLAIMED if reclaimed else C.M_BOOKING_TIME_EXPIRED, stamp)
        acts.capacity_freed = True
        return
    if st.booking:
        st.booking_seen |= {node for node in st.booking if ctx.world.node_present(node)}
    if reclaim_revokes(st, ctx, acts):
        return
    # Seeded at a restart with the nodes of the request's scale-up (``Controller.recover_booked``).
    lost = sorted(node for node in st.booking_seen if not ctx.world.node_present(node))
    if lost:
        message = (f"booked nodes were removed before every pod was scheduled: {', '.join(lost[:10])}"
                   + (f" and {len(lost) - 10} more" if len(lost) > 10 else ""))
        st.set(C.CAPACITY_REVOKED, True, C.R_NODE_REMOVED, message, stamp)
        st.event(WARNING, "CapacityRevoked", message)
        acts.capacity_freed = True
        return
    unready_too_long(st, ctx, acts)


def unready_too_long(st: RequestState, ctx: Context, acts: Actions) -> None:
    """A booked node whose kubelet stopped reporting (``Ready=Unknown``), or that turned ``Ready=False`` after it
    was Ready, for ``booked_node_unready_grace``: the gang's pods would be evicted from it as soon as they arrived
    (the ``unreachable``/``not-ready`` NoExecute taints, tolerated 300 s by default), so the booking is revoked and
    Kueue stops counting on it. Not a stockout: the pool is not backed off. A node whose condition has no
    ``lastTransitionTime`` is never held against the booking (there is no telling for how long)."""
    grace = ctx.settings.booked_node_unready_grace
    unready: dict[str, tuple[Readiness, float]] = {}
    for node in sorted(st.booking or ()):
        readiness = ctx.world.node_readiness(node)
        if readiness is None:
            continue
        if readiness.status == "True":
            st.ready_seen.add(node)
        elif readiness.since is not None and (readiness.status == "Unknown" or node in st.ready_seen):
            unready[node] = (readiness, readiness.since)
    st.unready_since = min((since for _, since in unready.values()), default=None) if grace else None
    if st.unready_since is None or ctx.now < st.unready_since + grace:
        return
    late = [f"{node} (Ready={r.status} since {rfc3339(since)})" for node, (r, since) in unready.items()
            if ctx.now >= since + grace]
    message = (f"booked nodes have not been Ready for {duration(grace)} before every pod was scheduled: "
               + ", ".join(late[:10]) + (f" and {len(late) - 10} more" if len(late) > 10 else ""))
    st.set(C.CAPACITY_REVOKED, True, C.R_NODE_NOT_READY, message, rfc3339(ctx.now))
    st.event(WARNING, "CapacityRevoked", message)
    acts.capacity_freed = True


def provisioning(st: RequestState, ctx: Context, acts: Actions) -> None:
    """A recorded scale-up whose provider calls are over: Provisioned once every node is Ready."""
    record = st.record
    assert record is not None
    nodes = node_names(st)
    problems = scale_up_problems(record.steps, st.obtained, ctx.pools)
    if problems:
        # Never reached through the actuator, which checks every result: a last guard before Provisioned=True.
        why = (f"the scale-up is not whole ({'; '.join(problems)}); every unit of it is released and the "
               "request re-planned once they are gone")
        abandon(st, nodes, why, "ScaleUpIncomplete", ctx.now, acts)
        return
    # The existing nodes the plan counts on too (chaos seed 19001: one reclaimed while the new ones came up, and the
    # request was marked Provisioned on a plan that no longer held).
    existing = sorted({p.node for p in st.decision.placements}) if st.decision is not None else []
    if taken := going_away(ctx.world, [*nodes, *existing]):
        # A spot node reclaimed while the new ones come up: waiting out the provisioning deadline for it is waste.
        why = (f"the cloud is taking back {described(taken)} of the scale-up's plan before every new node was Ready; "
               "every unit of the scale-up is released and the request re-planned once they are gone")
        abandon(st, nodes, why, "ScaleUpReclaimed", ctx.now, acts)
        return
    if lost := [node for node in existing if not ctx.world.node_present(node)]:
        why = (f"existing nodes the scale-up's plan counts on were removed before every new node was Ready: "
               f"{', '.join(lost[:10])}; every unit of the scale-up is released and the request re-planned once "
               "they are gone")
        abandon(st, nodes, why, "ScaleUpNodesLost", ctx.now, acts)
        return
    ready = [name for name in nodes if ctx.world.node_ready(name)]
    st.ready_seen.update(ready)
    if len(ready) == len(nodes):
        st.booking = (planned_booking(st.gang, st.decision, new_nodes_by_pool(st))
                      if st.gang is not None and st.decision is not None else None)
        st.booking_seen = set()
        for pool in sorted({step.pool for step in record.steps}):
            ctx.scale_up_outcome(pool, ScaleUpOutcome.SUCCESS)
        provisioned(st, C.R_PROVISIONED, f"{len(nodes)} new nodes are Ready ({steps_text(record)})", ctx.now,
                    ctx.settings)
        return
    if ctx.now < record.deadline:
        return
    late = sorted({got.pool for got in st.obtained.values() if set(got.node_names) - set(ready)})
    # Only nodes that never turned Ready count against their pool: one that was Ready and then lost its kubelet
    # says nothing about whether the pool can deliver. A pool of the scale-up whose every node did turn Ready
    # delivered: that is its outcome, though the scale-up is released for another pool's nodes.
    never = sorted({got.pool for got in st.obtained.values() if set(got.node_names) - st.ready_seen})
    verdicts = []
    for pool in sorted(set(never) | {step.pool for step in record.steps}):
        if pool in never and ctx.unhealthy(pool) is None:
            ctx.backoffs.fail(pool, "nodes that did not become Ready in time", ctx.now)
        verdict = ctx.scale_up_outcome(pool, ScaleUpOutcome.TIMEOUT if pool in never else ScaleUpOutcome.SUCCESS)
        if verdict is not None and pool in never:
            verdicts.append(verdict.message)
    lost = sorted((set(nodes) & st.ready_seen) - set(ready))
    why = (f"{len(nodes) - len(ready)} of {len(nodes)} new nodes were not Ready within "
           f"{duration(ctx.settings.max_node_provision_time)} (pools {', '.join(late) or '?'}"
           + (f"; {len(lost)} of them were Ready and lost readiness" if lost else "")
           + "); every unit of the scale-up is released and the request re-planned once they are gone"
           + "".join(f"; {message}" for message in verdicts))
    abandon(st, nodes, why, "ScaleUpTimedOut", ctx.now, acts)


def abandon(st: RequestState, nodes: Sequence[str], why: str, event: str, now: float, acts: Actions) -> None:
    """Release every unit of the recorded scale-up and send the request back to planning."""
    assert st.record is not None
    acts.release.append(Release(st, st.record.steps, tuple(nodes), why))
    st.record, st.obtained, st.ready_seen = st.record.with_phase(RELEASING), {}, set()
    st.set(C.PROVISIONED, False, C.R_NOT_FOUND, why, rfc3339(now))
    st.event(WARNING, event, why)


def reclaim_revokes(st: RequestState, ctx: Context, acts: Actions) -> bool:
    """A booked node the cloud is taking back (a spot reclaim's notice) revokes the booking at once, with the cause:
    the node will be gone within seconds (30 on GCE), and the gang could not run whole on what is left."""
    taken = going_away(ctx.world, sorted(st.booking or ()))
    if not taken:
        return False
    message = (f"the cloud is taking back booked {described(taken)} before every pod was scheduled; "
               f"{len(taken)} of the {len(st.booking or ())} booked nodes will be gone")
    st.set(C.CAPACITY_REVOKED, True, C.R_NODE_RECLAIMED, message, rfc3339(ctx.now))
    st.event(WARNING, "CapacityRevoked", message)
    acts.capacity_freed = True
    return True


def going_away(world: World, nodes: Sequence[str]) -> list[tuple[str, str, str]]:
    """(node, tier, notice) for each of ``nodes`` that says it is about to go away (:attr:`Readiness.notice`)."""
    found = []
    for node in nodes:
        readiness = world.node_readiness(node)
        if readiness is not None and readiness.notice:
            found.append((node, world.node_tier(node), readiness.notice))
    return found


def described(reclaimed: Sequence[tuple[str, str, str]]) -> str:
    """"spot node n1 (node is shutting down)", "spot nodes n1, n2 (...)": what is being reclaimed, and the signal."""
    tiers = sorted({tier for _, tier, _ in reclaimed})
    names = ", ".join(node for node, _, _ in reclaimed[:10]) + (f" and {len(reclaimed) - 10} more"
                                                                 if len(reclaimed) > 10 else "")
    notices = "; ".join(sorted({notice for _, _, notice in reclaimed}))
    return f"{'/'.join(tiers)} node{'s' if len(reclaimed) > 1 else ''} {names} ({notices})"


def report_reclaims(st: RequestState, ctx: Context) -> None:
    """A running gang whose nodes the cloud is taking back (a spot reclaim): one Warning Event per node, naming what
    is lost, so the job's owner learns why the gang stalls. The booking is over (the pods arrived), so nothing is
    revoked: Kueue's workload runs, or fails, on its own."""
    gang = ctx.world.gang_nodes(st)
    if not gang:
        return
    fresh = going_away(ctx.world, sorted(gang - st.reclaims_told))
    if not fresh:
        return
    st.reclaims_told.update(node for node, _, _ in fresh)
    st.event(WARNING, "NodeReclaimed", f"the cloud is taking back {described(fresh)}, where the gang runs: "
                                       f"{len(fresh)} of its {len(gang)} nodes will be gone")


def done(st: RequestState, ctx: Context, acts: Actions) -> None:
    report_reclaims(st, ctx)
    if not ctx.settings.terminal_ttl or not st.request.deletable:
        return
    times = [parse_rfc3339(c.last_transition) or ctx.now for t, c in st.conditions.items()
             if t in (C.PROVISIONED, *C.TERMINAL_TYPES)]
    if times and ctx.now - max(times) >= ctx.settings.terminal_ttl:
        acts.delete.append(st)


def deadline(st: RequestState, settings: Settings, now: float) -> float | None:
    """When the request moves on by itself (a retry, an expiry, a booking TTL, a provisioning deadline, a deletion
    after the terminal TTL, the next attempt after gangscale failed on it); None when only an event can move it.
    The one place these times are computed."""
    if st.deleted:
        return None
    if st.failing_until is not None and now < st.failing_until:
        return st.failing_until  # nothing else moves it before then (``isolation.waiting``)
    return _phase_deadline(st, settings, now)


def _phase_deadline(st: RequestState, settings: Settings, now: float) -> float | None:
    match phase(st):
        case Phase.PENDING:
            times = [st.retry_at] if st.retry_at is not None else []
            if st.request.expires:
                times.append(st.request.created + settings.expiry)
            return min(times, default=None)
        case Phase.PROVISIONING if st.record is not None and st.record.phase == OBTAINED:
            return st.record.deadline
        case Phase.BOOKED:
            prov = st.conditions.get(C.PROVISIONED)
            start = (prov and parse_rfc3339(prov.last_transition)) or now
            end = booking_end(st, start, settings)
            if st.unready_since is not None and settings.booked_node_unready_grace:
                return min(end, st.unready_since + settings.booked_node_unready_grace)
            return end
        case Phase.DONE if settings.terminal_ttl and st.request.deletable:
            stamps = [parse_rfc3339(c.last_transition) or now for t, c in st.conditions.items()
                      if t in (C.PROVISIONED, *C.TERMINAL_TYPES)]
            return max(stamps, default=now) + settings.terminal_ttl
    return None


# -- decisions and outcomes ---------------------------------------------------------------------------------------


def node_names(st: RequestState) -> list[str]:
    return [name for got in st.obtained.values() for name in got.node_names]


def steps_text(record: Record) -> str:
    return ", ".join(f"{step.pool} +{step.units} unit{'s' if step.units != 1 else ''}" for step in record.steps)


def new_nodes_by_pool(st: RequestState) -> Mapping[str, list[str]]:
    out: dict[str, list[str]] = {}
    for got in st.obtained.values():
        out.setdefault(got.pool, []).extend(got.node_names)
    return out
