"""How one request moves on (``gangscale.controller.logic.reconcile``), on plain objects: a fake world, a fixed time,
and the conditions, events, actions and due times each transition must produce."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.reconcile import (
    Actions,
    Consumed,
    Context,
    Release,
    booked,
    carried_over,
    deadline,
    provisioning,
    reconcile,
    retry_delay,
)
from gangscale.controller.logic.record import OBTAINED, OBTAINING, RELEASING, Record, Step, parse_detail, step_token
from gangscale.controller.logic.request import Phase, Request, RequestState, phase
from gangscale.controller.logic.scaleup import decided, obtained
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.view import Readiness
from gangscale.model.decision import Decision, NewNodes, Outcome, Placement, PoolReason, ReasonCode, ScaleStep
from gangscale.model.resources import ResourceList
from gangscale.providers.base import Obtained, Unit
from gangscale.timefmt import rfc3339
from tests.planner.builders import gang, pod_set, pool

NOW = 1_700_000_000.0
SETTINGS = Settings()  # retry 60 s..600 s, booking TTL 600 s, expiry 7 d, provision time 900 s, pool backoff 180 s
POOLS = {"a": pool("a"), "b": pool("b")}
BASE = Request("ns/pr", "uid-1", "provreq", "c", {"kind": "ProvisioningRequest"}, created=NOW - 100)
GANG = gang("ns/pr", pod_set("w", 2, {"cpu": "4"}))
INFEASIBLE = Decision("ns/pr", Outcome.INFEASIBLE, reasons=(PoolReason("a", ReasonCode.CAPACITY, "no room"),))
SCALE_UP = Decision("ns/pr", Outcome.SCALE_UP, steps=(ScaleStep("a", 1, 1), ScaleStep("b", 1, 1)),
                    new_nodes=(NewNodes("a", 1, (("w", 1),)), NewNodes("b", 1, (("w", 1),))))


@dataclass
class World:
    present: set[str] = field(default_factory=set)
    ready: set[str] = field(default_factory=set)
    consumed_as: Consumed | None = None
    #: Ready conditions by node; a present node not named here is Ready=True/False by ``ready``, with no time.
    readiness: dict[str, Readiness] = field(default_factory=dict)
    tiers: dict[str, str] = field(default_factory=dict)
    #: The nodes the request's consumer pods run on.
    gang: set[str] = field(default_factory=set)
    #: Tokens whose units still have a node in the view.
    with_nodes: set[str] = field(default_factory=set)

    def node_present(self, name: str) -> bool:
        return name in self.present

    def node_ready(self, name: str) -> bool:
        return name in self.ready

    def node_readiness(self, name: str) -> Readiness | None:
        if name not in self.present:
            return None
        return self.readiness.get(name) or Readiness("True" if name in self.ready else "False", None)

    def consumed(self, st: RequestState) -> Consumed | None:
        return self.consumed_as

    def node_tier(self, name: str) -> str:
        return self.tiers.get(name, "on-demand")

    def gang_nodes(self, st: RequestState) -> set[str]:
        return set(self.gang)

    def claims_gone(self, tokens: Sequence[str]) -> bool:
        return not set(tokens) & self.with_nodes


def state(**changes: Any) -> RequestState:
    return RequestState(replace(BASE, **changes))


def ctx(world: World | None = None, settings: Settings = SETTINGS, now: float = NOW) -> Context:
    backoffs = PoolBackoffs(settings.pool_backoff_initial, settings.pool_backoff_max, settings.pool_backoff_reset)
    return Context(now, settings, POOLS, backoffs, world or World())


def res(cpu: str, pods: int) -> ResourceList:
    return ResourceList.parse({"cpu": cpu, "pods": pods})


def got(pool_name: str, units: int, token: str) -> Obtained:
    return Obtained(token, pool_name, tuple(Unit(f"{pool_name}-u{i}", (f"{pool_name}-n{i}",)) for i in range(units)))


def scaled_up(units: dict[str, int] | None = None, asked: int = 1, **changes: Any) -> RequestState:
    """A request whose scale-up obtained ``units`` per pool (``asked`` each), waiting for Ready until NOW."""
    units = units if units is not None else {"a": 1, "b": 1}
    st = state(**changes)
    st.gang, st.decision = GANG, SCALE_UP
    st.record = Record(1, OBTAINED, NOW, tuple(Step(name, asked, f"tok-{name}") for name in units))
    st.obtained = {f"tok-{name}": got(name, n, f"tok-{name}") for name, n in units.items()}
    return st


def cond(ctype: str, status: bool, reason: str, message: str, at: float = NOW) -> C.Condition:
    """The condition as ``RequestState.set`` writes it at ``at`` (generation 1)."""
    return C.Condition(ctype, "True" if status else "False", reason, message, rfc3339(at), 1)


def with_condition(st: RequestState, ctype: str, status: bool, at: float) -> RequestState:
    st.set(ctype, status, "Some", "some", rfc3339(at))
    return st


@dataclass(frozen=True)
class PendingCase:
    id: str
    planned: bool
    age: float = 100.0
    retry_at: float | None = None
    expires: bool = True
    expired: bool = False


PENDING = [
    PendingCase("new", True),
    PendingCase("retry-in-the-future-waits", False, retry_at=NOW + 1),
    PendingCase("retry-in-the-past-is-planned", True, retry_at=NOW - 1),
    PendingCase("retry-due-now-is-planned", True, retry_at=NOW),
    PendingCase("one-second-before-expiry", True, age=SETTINGS.expiry - 1),
    PendingCase("expired", False, age=SETTINGS.expiry, expired=True),
    PendingCase("expired-even-if-a-retry-is-due", False, age=SETTINGS.expiry + 5, retry_at=NOW - 1, expired=True),
    PendingCase("old-but-does-not-expire", True, age=SETTINGS.expiry * 2, expires=False),
]


@pytest.mark.parametrize("case", PENDING, ids=[c.id for c in PENDING])
def test_pending(case: PendingCase) -> None:
    """A pending request is Accepted; it is planned unless expired or waiting out a retry."""
    st = state(created=NOW - case.age, expires=case.expires)
    st.retry_at = case.retry_at
    assert reconcile(st, ctx(), Actions()) is case.planned
    assert st.conditions[C.ACCEPTED] == cond(C.ACCEPTED, True, C.R_ACCEPTED, C.M_ACCEPTED)
    if case.expired:
        message = "ProvisioningRequest is expired: not provisioned within 7d of its creation"
        assert st.conditions[C.FAILED] == cond(C.FAILED, True, C.R_EXPIRED, message)
        assert st.events == [("Warning", "Expired", message)]
        assert phase(st) is Phase.DONE
    else:
        assert C.FAILED not in st.conditions and st.events == []


def test_a_busy_or_deleted_request_is_left_alone() -> None:
    """A request whose task runs, or whose object is gone, is neither accepted nor planned."""
    busy, gone = state(), state()
    busy.task, gone.deleted = "write", True
    for st in (busy, gone):
        assert reconcile(st, ctx(), Actions()) is False
        assert st.conditions == {}


def test_fits_books_the_placements_and_is_provisioned() -> None:
    st = state()
    st.gang, st.retries, st.retry_at = GANG, 3, NOW - 5
    decision = Decision("ns/pr", Outcome.FITS, placements=(Placement("w", "n1", 2),))
    decided(st, decision, ctx(), Actions())
    summary = "fits on free capacity: 2 pods on 1 existing node"
    message = f"{summary}; capacity booked until {rfc3339(NOW + 600)} or until every pod is scheduled"
    assert st.conditions[C.PROVISIONED] == cond(C.PROVISIONED, True, C.R_FOUND, message)
    assert st.booking == {"n1": res("8", 2)}
    assert (st.retries, st.decision) == (0, decision)
    assert st.retry_at is None
    assert st.events == [("Normal", "Provisioned", summary)]
    assert phase(st) is Phase.BOOKED


def test_scale_up_records_the_intent_and_asks_for_the_units() -> None:
    st, acts = state(version="42"), Actions()
    decided(st, SCALE_UP, ctx(), acts)
    tokens = [step_token("uid-1", 1, i, NOW, "42") for i in range(2)]
    assert st.record == Record(1, OBTAINING, NOW + 900, (Step("a", 1, tokens[0]), Step("b", 1, tokens[1])))
    assert st.attempts == 1
    assert st.conditions[C.PROVISIONED] == cond(
        C.PROVISIONED, False, C.R_IN_PROGRESS, "scale up a +1 unit, b +1 unit: obtaining the units")
    assert acts.scale_up == [st]
    assert st.events == [("Normal", "ScaleUp", "scale up a +1 unit, b +1 unit")]
    resumed = Actions()
    assert phase(st) is Phase.PROVISIONING and reconcile(st, ctx(), resumed) is False
    assert resumed.resume == [st]


def test_scale_up_in_dry_run_records_nothing_and_retries() -> None:
    st, acts = state(), Actions()
    decided(st, SCALE_UP, ctx(settings=Settings(dry_run=True)), acts)
    assert (st.record, st.attempts, st.retry_at, acts.scale_up) == (None, 0, NOW + 60, [])
    assert st.conditions == {} and st.events == []


@pytest.mark.parametrize(("failures", "delay"), [(1, 60), (2, 120), (3, 240), (4, 480), (5, 600), (9, 600)],
                         ids=["first", "second", "third", "fourth", "capped", "long-capped"])
def test_infeasible_retries_with_an_exponential_backoff(failures: int, delay: float) -> None:
    """The n-th failure waits retry_initial * 2^(n-1), at most retry_max; only the first one sends an Event."""
    st = state()
    st.retries = failures - 1
    decided(st, INFEASIBLE, ctx(), Actions())
    assert (st.retries, st.retry_at) == (failures, NOW + delay)
    cond = st.conditions[C.PROVISIONED]
    assert (cond.status, cond.reason) == ("False", C.R_NOT_FOUND)
    assert cond.message == f"cannot place every pod: pool a: no room. Next attempt at {rfc3339(NOW + delay)}"
    events = [("Warning", "CapacityNotFound", "cannot place every pod: pool a: no room")] if failures == 1 else []
    assert st.events == events
    assert phase(st) is Phase.PENDING


def test_repeated_infeasible_decisions_send_one_event_and_keep_the_transition_time() -> None:
    st = state()
    for i in range(3):
        decided(st, INFEASIBLE, ctx(now=NOW + i), Actions())
    assert [reason for _, reason, _ in st.events] == ["CapacityNotFound"]
    assert st.conditions[C.PROVISIONED].last_transition == rfc3339(NOW)
    assert st.retry_at == NOW + 2 + 240


def test_infeasible_without_retry_fails() -> None:
    st = state(no_retry=True)
    decided(st, INFEASIBLE, ctx(), Actions())
    message = "cannot place every pod: pool a: no room"
    assert st.conditions[C.FAILED] == cond(C.FAILED, True, C.R_NOT_FOUND, message)
    assert (st.retries, st.retry_at, st.events) == (0, None, [("Warning", "CapacityNotFound", message)])
    assert phase(st) is Phase.DONE


def test_obtained_waits_for_ready_nodes() -> None:
    st = scaled_up()
    record = Record(1, OBTAINING, NOW, (Step("a", 1, "tok-a"), Step("b", 1, "tok-b")))
    units, st.obtained, st.record = st.obtained, {}, record
    obtained(st, record, units, NOW, SETTINGS)
    assert st.record == record.with_phase(OBTAINED) and st.obtained == units
    message = f"obtained a +1 unit, b +1 unit; waiting for the new nodes to be Ready (giving up at {rfc3339(NOW)})"
    assert st.conditions[C.PROVISIONED] == cond(C.PROVISIONED, False, C.R_IN_PROGRESS, message)
    assert st.booking is None and st.events == []


def test_obtained_is_provisioned_at_once_when_the_request_asks_for_it() -> None:
    st = scaled_up(provisioned_when_requested=True)
    record, units = st.record, st.obtained
    assert record is not None
    obtained(st, record, units, NOW, SETTINGS)
    cond = st.conditions[C.PROVISIONED]
    assert (cond.status, cond.reason) == ("True", C.R_PROVISIONED)
    assert cond.message.startswith("obtained a +1 unit, b +1 unit; the nodes are coming up; capacity booked until ")
    assert st.booking == {"a-n0": res("4", 1), "b-n0": res("4", 1)}
    assert phase(st) is Phase.BOOKED


def test_provisioned_once_every_node_is_ready() -> None:
    st = scaled_up()
    st.retries, st.booking_seen = 2, {"stale"}
    reconcile(st, ctx(World(ready={"a-n0", "b-n0"})), Actions())
    cond = st.conditions[C.PROVISIONED]
    assert (cond.status, cond.reason) == ("True", C.R_PROVISIONED)
    assert cond.message.startswith("2 new nodes are Ready (a +1 unit, b +1 unit); capacity booked until ")
    assert st.booking == {"a-n0": res("4", 1), "b-n0": res("4", 1)}
    assert (st.booking_seen, st.retries) == (set(), 0)


def test_before_the_deadline_a_scale_up_waits_for_its_nodes() -> None:
    st, acts = scaled_up(), Actions()
    provisioning(st, ctx(World(ready={"a-n0"}), now=NOW - 1), acts)
    assert st.conditions == {} and acts == Actions() and st.record is not None


def test_nodes_not_ready_by_the_deadline_are_released_and_their_pool_backed_off() -> None:
    st, acts, context = scaled_up(), Actions(), ctx(World(ready={"a-n0"}))
    steps = st.record.steps  # type: ignore[union-attr]
    provisioning(st, context, acts)
    why = ("1 of 2 new nodes were not Ready within 15m (pools b); every unit of the scale-up is released and the "
           "request re-planned once they are gone")
    assert acts.release == [Release(st, steps, ("a-n0", "b-n0"), why)]
    assert context.backoffs.get("a", NOW) is None
    late = context.backoffs.get("b", NOW)
    assert late is not None and (late.until, late.reason) == (NOW + 180, "nodes that did not become Ready in time")
    assert st.conditions[C.PROVISIONED] == cond(C.PROVISIONED, False, C.R_NOT_FOUND, why)
    assert st.record is not None and (st.record.phase, st.record.steps) == (RELEASING, steps)
    assert (st.obtained, st.events) == ({}, [("Warning", "ScaleUpTimedOut", why)])
    assert phase(st) is Phase.PENDING


def test_a_node_that_was_ready_and_lost_readiness_by_the_deadline_backs_no_pool_off() -> None:
    st, world = scaled_up(), World(ready={"b-n0"})
    provisioning(st, ctx(world, now=NOW - 600), Actions())  # b-n0 Ready while a-n0 is not yet ...
    assert st.ready_seen == {"b-n0"}
    world.ready = {"a-n0"}  # ... then b-n0's kubelet stopped
    acts, context = Actions(), ctx(world)
    provisioning(st, context, acts)
    why = ("1 of 2 new nodes were not Ready within 15m (pools b; 1 of them were Ready and lost readiness); every unit "
           "of the scale-up is released and the request re-planned once they are gone")
    assert [r.why for r in acts.release] == [why]
    assert context.backoffs.active(NOW) == {}
    assert st.ready_seen == set()


def test_an_incomplete_scale_up_is_released_not_provisioned() -> None:
    """Fewer units than the step asked for: released and re-planned even though every node is Ready."""
    st, acts, context = scaled_up({"a": 1}, asked=2), Actions(), ctx(World(ready={"a-n0"}))
    provisioning(st, context, acts)
    why = ("the scale-up is not whole (a: the provider has 1 of the 2 units asked for); every unit of it is "
           "released and the request re-planned once they are gone")
    assert [(r.nodes, r.why) for r in acts.release] == [(("a-n0",), why)]
    assert st.conditions[C.PROVISIONED].status == "False" and st.conditions[C.PROVISIONED].message == why
    assert st.events == [("Warning", "ScaleUpIncomplete", why)]
    assert context.backoffs.active(NOW) == {}


def provisioned_state(since: float = NOW - 100, **changes: Any) -> RequestState:
    st = with_condition(state(**changes), C.PROVISIONED, True, since)
    st.booking = {"n1": res("8", 2)}
    return st


@pytest.mark.parametrize(("event", "events"), [
    ("PodsScheduled", [("Normal", "PodsScheduled", "all in; the booking ends")]), (None, [])],
    ids=["event", "no-event"])
def test_a_consumed_booking_ends(event: str | None, events: list[tuple[str, str, str]]) -> None:
    st, acts = provisioned_state(), Actions()
    reconcile(st, ctx(World(present={"n1"}, consumed_as=Consumed("all in", event))), acts)
    assert st.conditions[C.BOOKING_EXPIRED] == cond(C.BOOKING_EXPIRED, True, C.R_BOOKING_CONSUMED, "all in")
    assert (st.events, acts.capacity_freed, phase(st)) == (events, True, Phase.DONE)


@pytest.mark.parametrize(("since", "ttl", "expired"), [
    (NOW - 600, None, True), (NOW - 599, None, False), (NOW - 30, 30.0, True), (NOW - 29, 30.0, False),
    (NOW - 599, -1.0, False)], ids=["default-ttl-passed", "default-ttl-not-yet", "own-ttl-passed", "own-ttl-not-yet",
                                   "negative-ttl-is-the-default"])
def test_a_booking_expires_after_its_ttl(since: float, ttl: float | None, expired: bool) -> None:
    st, acts = provisioned_state(since, booking_ttl=ttl), Actions()
    booked(st, ctx(World(present={"n1"})), acts)
    if expired:
        assert st.conditions[C.BOOKING_EXPIRED] == cond(
            C.BOOKING_EXPIRED, True, C.R_BOOKING_TIME_EXPIRED, C.M_BOOKING_TIME_EXPIRED)
    else:
        assert C.BOOKING_EXPIRED not in st.conditions and st.booking_seen == {"n1"}
    assert acts.capacity_freed is expired


def test_nodes_with_a_run_duration_say_when_they_end_and_the_booking_ends_then() -> None:
    """Capacity the cloud deletes by itself (GKE flex-start, queued provisioning): the obtain says when; the record
    keeps it, the Provisioned message tells the request, and the booking ends no later."""
    st = scaled_up(provisioned_when_requested=True)
    record = st.record
    assert record is not None
    units = {token: replace(got_, expires_at=NOW + 300 + i) for i, (token, got_) in enumerate(st.obtained.items())}
    obtained(st, record, units, NOW, SETTINGS)
    assert st.record is not None and st.record.reclaim == NOW + 300
    message = st.conditions[C.PROVISIONED].message
    assert f"capacity booked until {rfc3339(NOW + 300)} or until every pod is scheduled" in message
    assert message.endswith(f"the cloud deletes them at {rfc3339(NOW + 300)}, with whatever runs on them")
    assert deadline(st, SETTINGS, NOW) == NOW + 300  # before the 600 s booking TTL

    acts = Actions()
    booked(st, ctx(World(present={"a-n0", "b-n0"}), now=NOW + 299), acts)
    assert C.BOOKING_EXPIRED not in st.conditions
    booked(st, ctx(World(present={"a-n0", "b-n0"}), now=NOW + 300), acts)
    assert st.conditions[C.BOOKING_EXPIRED] == cond(C.BOOKING_EXPIRED, True, C.R_BOOKING_TIME_EXPIRED,
                                                    C.M_BOOKING_RECLAIMED, NOW + 300)
    assert acts.capacity_freed


def test_a_run_duration_longer_than_the_booking_changes_nothing_but_the_message() -> None:
    st = scaled_up(provisioned_when_requested=True)
    record = st.record
    assert record is not None
    obtained(st, record, {t: replace(g, expires_at=NOW + 86400) for t, g in st.obtained.items()}, NOW, SETTINGS)
    assert deadline(st, SETTINGS, NOW) == NOW + 600
    assert f"capacity booked until {rfc3339(NOW + 600)}" in st.conditions[C.PROVISIONED].message


@pytest.mark.parametrize(("reclaim", "kept"), [(NOW + 5.5, NOW + 5.5), (None, None), (float("inf"), None)],
                         ids=["time", "none", "not-finite"])
def test_the_reclaim_time_survives_the_record(reclaim: float | None, kept: float | None) -> None:
    record = Record(1, OBTAINED, NOW, (Step("a", 1, "tok-a"),), "", reclaim)
    assert parse_detail(record.to_detail()) == replace(record, reclaim=kept)


def test_a_scale_up_that_also_uses_existing_nodes_records_them_for_a_restart() -> None:
    st = state(version="42")
    decision = replace(SCALE_UP, placements=(Placement("w", "n2", 1), Placement("w", "n1", 1)))
    decided(st, decision, ctx(), Actions())
    assert st.record is not None and st.record.nodes == ("n1", "n2")
    assert parse_detail(st.record.to_detail()) == st.record


def test_a_booked_node_seen_then_removed_revokes_the_booking() -> None:
    st, world = provisioned_state(), World(present={"n1"})
    acts = Actions()
    booked(st, ctx(world), acts)
    assert (st.booking_seen, st.conditions.keys() - {C.PROVISIONED}, acts.capacity_freed) == ({"n1"}, set(), False)
    world.present.clear()
    booked(st, ctx(world, now=NOW + 1), acts)
    message = "booked nodes were removed before every pod was scheduled: n1"
    assert st.conditions[C.CAPACITY_REVOKED] == cond(C.CAPACITY_REVOKED, True, C.R_NODE_REMOVED, message, NOW + 1)
    assert (st.events, acts.capacity_freed) == ([("Warning", "CapacityRevoked", message)], True)


GRACE = SETTINGS.booked_node_unready_grace


@dataclass(frozen=True)
class Unready:
    id: str
    #: The booked node n1's Ready condition at the pass (None: a Ready node with no time).
    readiness: Readiness
    #: Whether this process saw n1 Ready before.
    seen_ready: bool = False
    grace: float = GRACE
    #: Expected: revoked, and the request's next due time when it is not.
    revoked: bool = False
    due: float | None = None


UNREADY = [
    Unready("ready", Readiness("True", NOW - 3600), due=NOW + 500),
    Unready("unknown-within-the-grace", Readiness("Unknown", NOW - 60), due=NOW - 60 + GRACE),
    Unready("unknown-for-the-grace", Readiness("Unknown", NOW - GRACE), revoked=True),
    Unready("false-after-ready-for-the-grace", Readiness("False", NOW - GRACE), seen_ready=True, revoked=True),
    Unready("false-never-ready-is-coming-up", Readiness("False", NOW - 2 * GRACE), due=NOW + 500),
    Unready("no-transition-time-is-never-held-against-it", Readiness("Unknown", None), due=NOW + 500),
    Unready("grace-0-turns-it-off", Readiness("Unknown", NOW - 2 * GRACE), grace=0, due=NOW + 500),
    Unready("the-booking-ends-first", Readiness("Unknown", NOW - 10), grace=3600, due=NOW + 500),
]


@pytest.mark.parametrize("case", UNREADY, ids=[c.id for c in UNREADY])
def test_a_booked_node_that_lost_readiness_for_the_grace_revokes_the_booking(case: Unready) -> None:
    settings = replace(SETTINGS, booked_node_unready_grace=case.grace)
    st, acts = provisioned_state(), Actions()
    if case.seen_ready:
        st.ready_seen.add("n1")
    reconcile(st, ctx(World(present={"n1"}, readiness={"n1": case.readiness}), settings), acts)
    revoked = st.conditions.get(C.CAPACITY_REVOKED)
    assert (revoked is not None, acts.capacity_freed) == (case.revoked, case.revoked)
    if case.revoked:
        assert revoked is not None
        message = (f"booked nodes have not been Ready for 5m before every pod was scheduled: n1 "
                   f"(Ready={case.readiness.status} since {rfc3339(NOW - GRACE)})")
        assert revoked == cond(C.CAPACITY_REVOKED, True, C.R_NODE_NOT_READY, message)
        assert st.events == [("Warning", "CapacityRevoked", message)]
        assert phase(st) is Phase.DONE
    else:
        assert deadline(st, settings, NOW) == case.due


def test_a_booked_node_seen_ready_and_then_false_counts_from_its_transition() -> None:
    st, world = provisioned_state(), World(present={"n1"}, ready={"n1"})
    reconcile(st, ctx(world), Actions())
    assert st.ready_seen == {"n1"}
    world.readiness["n1"] = Readiness("False", NOW + 10)
    reconcile(st, ctx(world, now=NOW + 20), Actions())
    assert deadline(st, SETTINGS, NOW + 20) == NOW + 10 + GRACE
    acts = Actions()
    reconcile(st, ctx(world, now=NOW + 10 + GRACE), acts)
    assert st.conditions[C.CAPACITY_REVOKED].reason == C.R_NODE_NOT_READY and acts.capacity_freed


def test_a_booked_node_never_seen_revokes_nothing_and_many_lost_nodes_are_counted() -> None:
    st = provisioned_state()
    booked(st, ctx(), Actions())
    assert C.CAPACITY_REVOKED not in st.conditions
    st.booking_seen = {f"n{i:02}" for i in range(12)}
    booked(st, ctx(), Actions())
    assert st.conditions[C.CAPACITY_REVOKED].message.endswith("n07, n08, n09 and 2 more")


TTL = SETTINGS.terminal_ttl


@pytest.mark.parametrize(("age", "ttl", "deletable", "deleted"), [
    (TTL, TTL, True, True), (TTL - 1, TTL, True, False), (TTL, TTL, False, False), (10.0, 0.0, True, False)],
    ids=["after-the-ttl", "before-the-ttl", "not-deletable", "ttl-zero-never"])
def test_done_deletes_after_the_terminal_ttl(age: float, ttl: float, deletable: bool, deleted: bool) -> None:
    """A finished request is deleted terminal_ttl after its outcome, and only if it is deletable."""
    st, acts = with_condition(state(deletable=deletable), C.FAILED, True, NOW - age), Actions()
    reconcile(st, ctx(settings=Settings(terminal_ttl=ttl)), acts)
    assert acts.delete == ([st] if deleted else [])
    assert (acts.release, acts.scale_up, acts.capacity_freed) == ([], [], False)


def test_the_terminal_ttl_counts_from_the_last_outcome() -> None:
    st = with_condition(state(deletable=True), C.PROVISIONED, True, NOW - 2 * TTL)
    with_condition(st, C.BOOKING_EXPIRED, True, NOW - TTL + 1)
    acts = Actions()
    reconcile(st, ctx(), acts)
    assert acts.delete == []


def deadline_states() -> list[tuple[str, RequestState, float | None]]:
    retrying, late_retry, forever, obtaining = state(), state(), state(expires=False), scaled_up()
    retrying.retry_at, late_retry.retry_at = NOW + 60, NOW + SETTINGS.expiry
    obtaining.record = obtaining.record.with_phase(OBTAINING)  # type: ignore[union-attr]
    done_at = with_condition(with_condition(state(deletable=True), C.PROVISIONED, True, NOW - 50),
                             C.BOOKING_EXPIRED, True, NOW - 10)
    gone = state()
    gone.deleted = True
    return [
        ("pending-new-expires", state(), NOW - 100 + SETTINGS.expiry),
        ("pending-retry-first", retrying, NOW + 60),
        ("pending-expiry-first", late_retry, NOW - 100 + SETTINGS.expiry),
        ("pending-forever", forever, None),
        ("provisioning-obtained", scaled_up(), NOW),
        ("provisioning-obtaining", obtaining, None),
        ("booked-default-ttl", provisioned_state(NOW - 100), NOW - 100 + 600),
        ("booked-own-ttl", provisioned_state(NOW - 100, booking_ttl=30.0), NOW - 70),
        ("done-deletable", done_at, NOW - 10 + SETTINGS.terminal_ttl),
        ("done-kept", with_condition(state(), C.FAILED, True, NOW), None),
        ("deleted", gone, None),
    ]


@pytest.mark.parametrize(("st", "want"), [c[1:] for c in deadline_states()], ids=[c[0] for c in deadline_states()])
def test_deadline(st: RequestState, want: float | None) -> None:
    """The time a request moves on by itself, per phase."""
    assert deadline(st, SETTINGS, NOW) == want


@pytest.mark.parametrize(("conds", "record", "want"), [
    ((), False, Phase.PENDING), ((), True, Phase.PROVISIONING), (((C.PROVISIONED, False),), True, Phase.PROVISIONING),
    (((C.PROVISIONED, True),), True, Phase.BOOKED), (((C.FAILED, False), (C.PROVISIONED, True)), False, Phase.BOOKED),
    (((C.PROVISIONED, True), (C.BOOKING_EXPIRED, True)), True, Phase.DONE),
    (((C.CAPACITY_REVOKED, True),), True, Phase.DONE), (((C.FAILED, True),), False, Phase.DONE)],
    ids=["nothing", "record", "record-not-provisioned", "provisioned", "false-terminal-is-no-end",
         "booking-expired-wins", "revoked-wins-over-record", "failed"])
def test_phase(conds: tuple[tuple[str, bool], ...], record: bool, want: Phase) -> None:
    st = scaled_up() if record else state()
    for ctype, status in conds:
        with_condition(st, ctype, status, NOW)
    assert phase(st) is want


def test_the_transition_time_moves_only_with_the_status() -> None:
    st = state()
    assert st.set(C.PROVISIONED, False, "A", "one", "t1") is True
    assert st.set(C.PROVISIONED, False, "B", "two", "t2") is True
    assert st.conditions[C.PROVISIONED] == C.Condition(C.PROVISIONED, "False", "B", "two", "t1", 1)
    assert st.set(C.PROVISIONED, False, "B", "two", "t3") is False
    assert st.set(C.PROVISIONED, True, "B", "two", "t4") is True
    assert st.conditions[C.PROVISIONED].last_transition == "t4"
    conds = {C.ACCEPTED: C.Condition(C.ACCEPTED, "True", "X", "x")}  # read without a time: it gets one
    assert C.with_condition(conds, C.Condition(C.ACCEPTED, "True", "Y", "y"), "t5") is True
    assert conds[C.ACCEPTED].last_transition == "t5"


@pytest.mark.parametrize(("conds", "retries", "want"), [
    (((C.FAILED, True, C.R_NOT_FOUND),), 0, (1, NOW + 60)),
    (((C.FAILED, True, C.R_NOT_FOUND),), 2, (3, NOW + 240)),
    (((C.FAILED, True, C.R_NOT_FOUND),), 9, (10, NOW + 600)),
    (((C.FAILED, True, C.R_EXPIRED),), 0, None),
    (((C.FAILED, True, C.R_FAILED_TO_CREATE_PODS),), 0, None),
    (((C.PROVISIONED, False, C.R_NOT_FOUND),), 1, None),
    (((C.BOOKING_EXPIRED, True, C.R_BOOKING_TIME_EXPIRED),), 0, None),
], ids=["first-miss", "third-miss", "capped", "expired", "no-pods", "not-failed", "booking-expired"])
def test_a_gang_whose_request_failed_for_capacity_carries_its_misses_to_its_next_request(
        conds: tuple[tuple[str, bool, str], ...], retries: int, want: tuple[int, float] | None) -> None:
    """Kueue makes a gang's next request at once after a failure when it measures its backoff from an old time;
    gangscale then decides that request no sooner than its own backoff for the gang (retry 60 s doubling to 600 s)."""
    st = state()
    st.retries = retries
    for ctype, status, reason in conds:
        st.set(ctype, status, reason, "m", rfc3339(NOW))
    assert carried_over(st, NOW, SETTINGS) == want
    assert [retry_delay(n, SETTINGS) for n in (0, 1, 2, 5)] == [60.0, 60.0, 120.0, 600.0]


@pytest.mark.parametrize(("nodes_left", "planned"), [({"tok-a"}, False), (set(), True)], ids=["nodes-left", "gone"])
def test_a_request_handing_back_its_scale_up_is_planned_once_no_node_of_it_is_left(nodes_left: set[str],
                                                                                  planned: bool) -> None:
    """Planned beside the units it hands back (a VM's deletion outlasts the call), a gang could hold twice the
    nodes it needs (hack/chaos.py, seed 11109)."""
    st = state()
    st.record = Record(1, RELEASING, NOW, (Step("a", 1, "tok-a"),))
    assert phase(st) is Phase.PENDING
    assert reconcile(st, ctx(World(with_nodes=nodes_left)), Actions()) is planned
    assert (st.record is None) is planned
