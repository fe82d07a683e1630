"""Whole passes on plain objects (:func:`gangscale.controller.passes.run_pass`), as the cluster-autoscaler tests
``RunOnce``: given these requests, nodes and task results at ``now``, these conditions, ledger entries and effects.

A :class:`~gangscale.controller.core.Core` is built with no API server and no cloud: requests come from
:class:`TableSource`, an implementation of the ``DemandSource`` protocol over a dict; nodes are Node objects handed to
the pass as changes; the effects a pass asks for are looked at by name and their coroutines closed unrun; a task's
result is built here and handed to the next pass with the effect's own callback.

Transitions covered here that were tested only over HTTP before (``tests/controller/test_atomic.py``,
``test_conformance.py``, ``test_scaledown.py``):

- ``fits-free-room``: a new request that fits existing nodes is Provisioned in its first pass, with one status write
  and no provider call.
- ``scale-up-whole``: a request that needs new nodes gets one scale-up effect; its claims are in progress in the
  ledger; the result (every unit obtained) and the nodes turning Ready make it Provisioned; the ledger lets go.
- ``nodes-before-the-answer``: nodes of a scale-up whose provider calls still run are no free room for another
  gang (hack/chaos.py seeds 2013, 3147).
- ``scale-up-failed``: a stockout rolls the scale-up back: the pool backs off, the request waits out its retry, the
  claim departs (its lingering nodes are no room).
- ``batched``: while a scale-up calls the provider, a new request is held for the next batch and planned at the
  batch's deadline, not before.
- ``deleted-while-obtaining``: a request deleted while its units are obtained gets them released once the obtain
  returns; it is not planned again.
- ``intent-conflict``: a 409 on the intent retries after ``WRITE_RETRY`` without calling the provider.
- ``lost-lease``: a scale-up stopped by a lost lease keeps its record for the next leader.
- ``one-bad-request``: a request whose gang cannot be built (the source raises) fails alone; the others are planned
  in the same pass.
- ``slice-coming-up``: a slice Provisioned on request (``provisionedWhen: Requested``) whose second host has not
  registered yet is neither taken for a half-removed slice nor scaled down (issue 26).
- ``booking-consumed``: a booked request whose pods have arrived (the source says so) ends its booking; a request
  waiting out a retry for lack of room is planned in that same pass.
- ``booked-node-removed``: a node of a booking deleted → ``CapacityRevoked`` (``BookedNodeRemoved``).
- ``provision-timeout``: new nodes not Ready within ``--max-node-provision-time`` → the scale-up is released, the
  pool backs off, and the request is not planned again until the release returned.
- ``check-capacity``: a request that may not scale and finds no room is ``CapacityIsNotFound`` with no effect but
  its status write.
- ``resume``: a request with a recorded ``obtaining`` intent (a restart, a new leader) resumes it with its own
  tokens in the first pass.
- ``booking-ttl``: a booking whose pods never came ends at ``--booking-ttl`` by itself (the request is due then,
  nothing marks it), and the room is free for the next pass's plan.
- ``booked-node-not-ready``: a booked node not Ready for ``--booked-node-unready-grace`` → ``CapacityRevoked``
  (``BookedNodeNotReady``), at the grace and not before.
- ``expired-and-deleted``: a request never provisioned fails ``Expired`` at ``--expiry``; a deletable one is
  deleted ``--terminal-ttl`` after its outcome (a delete effect).
- ``scale-down``: an empty unit is removed after ``--scale-down-unneeded-time``, once; the ledger counts it as
  going until the removal returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gangscale.controller.actuator import Actuator, NotLeader
from gangscale.controller.core import Core, Effect, Hooks
from gangscale.controller.effects import Effects, Released, ScaledUp, Written
from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.reconcile import Consumed
from gangscale.controller.logic.request import Request, RequestState
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.view import ClusterView, PodInfo
from gangscale.controller.passes import Changes, run_pass
from gangscale.controller.writer import WRITE_RETRY
from gangscale.kube.errors import ApiError
from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.resources import ResourceList
from gangscale.observe.metrics import Metrics
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL, ErrorClass, Obtained, ProviderError, Unit
from gangscale.timefmt import rfc3339
from tests.planner.builders import CPU_NODE, TPU_NODE, gang, pod_set, pool

NOW = 1_795_000_000.0
POOL = pool("cpu", CPU_NODE, max_units=10)
SLICE = pool("tpu", TPU_NODE, max_units=4, nodes_per_unit=2)
#: A node's allocatable as its Node object says it (the pools keep it parsed).
ALLOCATABLE = {"cpu": CPU_NODE, "tpu": TPU_NODE}
SOURCE = "table"


class Clock:
    """The time of the pass under way (what the core reads outside a pass, e.g. when a source forgets a request)."""

    at = NOW

    def now(self) -> float:
        return self.at

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("nothing sleeps in a pass")


class TableSource:
    """A demand source over a dict: ``requests`` are added in the next pass; ``gangs`` are their gangs."""

    name = SOURCE

    def __init__(self) -> None:
        self.host: Core | None = None
        self.pending: list[Request] = []
        self.gangs: dict[str, Gang | Exception] = {}
        #: What ``consumed`` answers per request (the source's say on whether its pods have arrived).
        self.consumed_as: dict[str, Consumed] = {}
        #: Events the writer recorded (the Provisioned ones aside).
        self.told: list[tuple[str, str, str]] = []

    async def start(self) -> list[Any]:
        return []

    def recover(self) -> None: ...

    def recorded_tokens(self) -> set[str]:
        return set()

    def sync(self, now: float) -> None:
        assert self.host is not None
        for request in self.pending:
            self.host.add(RequestState(request))
        self.pending = []

    def gang(self, st: RequestState, *, may_scale: bool | None = None) -> Gang | str | None:
        got = self.gangs[st.key]
        if isinstance(got, Exception):
            raise got
        return replace(got, may_scale=st.request.may_scale if may_scale is None else may_scale)

    def consumed(self, st: RequestState) -> Consumed | None:
        return self.consumed_as.get(st.key)

    def consumers(self, st: RequestState) -> Iterable[PodInfo]:
        return ()

    def status(self, st: RequestState) -> dict[str, Any]:
        return {"conditions": st.owned_conditions()}

    async def write(self, st: RequestState, body: dict[str, Any]) -> str:
        return ""

    async def delete(self, st: RequestState) -> None: ...

    def next_wake(self) -> float | None:
        return None

    def note_events(self, st: RequestState, events: Sequence[tuple[str, str, str]]) -> None:
        self.told += [event for event in events if event[1] != "Provisioned"]

    def forgotten(self, key: str) -> None: ...

    async def aclose(self) -> None: ...


TABLES: list[Table] = []
#: A consumer pod's requests.
C_RESOURCES = ResourceList.parse({"cpu": "4"})


@pytest.fixture(autouse=True)
def _close_unrun_effects() -> Iterator[None]:
    """Effects of a test's last pass are never run: their coroutines are closed (no "never awaited" warning)."""
    yield
    for table in TABLES:
        for effect in table.effects:
            effect.coro.close()
    TABLES.clear()


@dataclass
class Table:
    """A core, its source and the effects of the last pass."""

    settings: Settings = field(default_factory=lambda: Settings(batch_idle=0.0, batch_max=0.0))
    pools: tuple[NodePool, ...] = (POOL,)
    source: TableSource = field(default_factory=TableSource)
    effects: list[Effect] = field(default_factory=list)
    results: list[tuple[Any, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        TABLES.append(self)
        clock, metrics = Clock(), Metrics()
        actuator = Actuator(None, clock, metrics, {p.name: p for p in self.pools})  # type: ignore[arg-type]  # never called
        effects = Effects(actuator, None, clock, dry_run=False)  # type: ignore[arg-type]
        self.clock = clock
        self.core = Core(self.pools, actuator, effects, ClusterView(), claim=lambda token: token,
                         settings=self.settings, policy=Policy(), clock=clock, metrics=metrics,
                         hooks=Hooks(lambda: None, lambda c, n: None))
        self.source.host = self.core
        self.core.add_sources([self.source])

    def request(self, key: str, pods: int = 2, cpu: str = "4", *, requests: dict[str, str] | None = None,
                on_request: bool = False, may_scale: bool = True) -> None:
        self.source.pending.append(Request(key, f"uid-{key}", SOURCE, "c", {"kind": "Table"}, created=NOW,
                                           pods=pods, provisioned_when_requested=on_request, may_scale=may_scale))
        self.source.gangs[key] = gang(key, pod_set("w", pods, requests or {"cpu": cpu}))

    def run(self, at: float = 0.0, nodes: dict[str, dict[str, Any] | None] | None = None,
            pods: dict[tuple[str, str], PodInfo | None] | None = None) -> list[str]:
        """A pass at NOW + ``at``: the results waiting, the node changes given; returns the effects' names. Status
        writes of the last pass that the test did not answer landed."""
        self.clock.at = NOW + at
        answered = {id(then) for then, _ in self.results}
        for effect in self.effects:
            effect.coro.close()
            key = effect.name.removeprefix("write ")
            if effect.name.startswith("write ") and id(effect.then) not in answered and key in self.core.states:
                body = repr(self.source.status(self.core.states[key]))
                self.results.append((effect.then, Written(key, body)))
        results, self.results = self.results, []
        records = {name: None if obj is None else self.core.view.node_record(obj)
                   for name, obj in (nodes or {}).items()}
        self.effects = run_pass(self.core, Changes(nodes=records, pods=pods or {}), results, NOW + at)
        return sorted(e.name for e in self.effects)

    def answer(self, name: str, result: Any) -> None:
        """The effect ``name`` of the last pass ended with ``result`` (handed to the next pass)."""
        effect = next(e for e in self.effects if e.name == name)
        self.results.append((effect.then, result))

    def st(self, key: str) -> RequestState:
        return self.core.states[key]

    def provisioned(self, key: str) -> tuple[str, str] | None:
        cond = self.st(key).conditions.get(C.PROVISIONED)
        return None if cond is None else (cond.status, cond.reason)


def node(name: str, *, token: str | None = None, ready: bool = True, pool: NodePool = POOL,
         unit: str | None = None, since: float | None = None) -> dict[str, Any]:
    labels = {"gangscale.io/node-pool": pool.name}
    if token is not None:
        labels |= {UNIT_LABEL: unit or name, TOKEN_LABEL: token}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": dict(ALLOCATABLE[pool.name]),
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       **({"lastTransitionTime": rfc3339(since)} if since is not None else {})}]}}


def obtained(t: Table, key: str) -> ScaledUp:
    """Every unit of ``key``'s recorded scale-up, one node per unit named after its token."""
    record = t.st(key).record
    assert record is not None
    got = {s.token: Obtained(s.token, s.pool, tuple(Unit(f"{s.token}-{i}", (f"{s.token}-{i}",))
                                                       for i in range(s.units))) for s in record.steps}
    return ScaledUp(key, record, intent_body="{}", obtained=got)


def new_nodes(t: Table, key: str, *, ready: bool = True) -> dict[str, dict[str, Any] | None]:
    return {name: node(name, token=token, ready=ready) for token, o in t.st(key).obtained.items()
            for name in o.node_names}


def test_fits_free_room() -> None:
    t = Table()
    t.request("ns/a")
    assert t.run(nodes={"n1": node("n1")}) == ["write ns/a"]
    assert t.provisioned("ns/a") == ("True", C.R_FOUND)


def test_scale_up_whole() -> None:
    t = Table()
    t.request("ns/a", pods=2, cpu="12")  # one pod per 16-CPU node: two new nodes
    assert t.run() == ["scale-up ns/a"]
    tokens = t.st("ns/a").record.tokens  # type: ignore[union-attr]
    assert t.provisioned("ns/a") == ("False", C.R_IN_PROGRESS)
    assert t.core.ledger.in_progress_claims() == set(tokens)
    t.answer("scale-up ns/a", obtained(t, "ns/a"))
    t.run(1)
    assert t.core.ledger.in_progress_claims() == set(tokens)  # obtained, not Provisioned: still in progress
    t.run(2, nodes=new_nodes(t, "ns/a"))
    assert t.provisioned("ns/a") == ("True", C.R_PROVISIONED)
    assert t.core.ledger.in_progress_claims() == set()
    assert t.core.ledger.summary() == dict.fromkeys(t.core.ledger.summary(), 0)


def test_nodes_before_the_answer_are_no_free_room() -> None:
    t = Table()
    t.request("ns/a", pods=2, cpu="12")
    t.run()
    record = t.st("ns/a").record
    assert record is not None
    early = {f"{s.token}-0": node(f"{s.token}-0", token=s.token) for s in record.steps}
    t.request("ns/b", pods=1, cpu="12")
    assert t.run(1, nodes=early) == ["scale-up ns/b"]  # not booked on ns/a's nodes: Accepted with the intent


def test_scale_up_failed() -> None:
    t = Table()
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    record = t.st("ns/a").record
    assert record is not None
    stockout = ProviderError(ErrorClass.STOCKOUT, "ZONE_RESOURCE_POOL_EXHAUSTED", "no cpu", pool=POOL.name)
    t.answer("scale-up ns/a", ScaledUp("ns/a", record, intent_body="{}", failures=(stockout,)))
    assert t.run(1) == ["write ns/a"]
    st = t.st("ns/a")
    assert st.record is None and st.retry_at is not None and st.retry_at > NOW + 1
    assert POOL.name in t.core.backoffs.active(NOW + 1)
    lingering = f"{record.steps[0].token}-0"
    t.run(2, nodes={lingering: node(lingering, token=record.steps[0].token)})
    assert t.core.ledger.leaving_nodes(t.core.claim_nodes) == {lingering}


def test_batched_while_a_scale_up_calls_the_provider() -> None:
    t = Table(Settings(batch_idle=2.0, batch_max=10.0))
    t.request("ns/a", pods=1, cpu="12")
    assert t.run() == ["scale-up ns/a"]
    t.request("ns/b", pods=1, cpu="12")
    assert "scale-up ns/b" not in t.run(1)  # held: ns/a's scale-up is calling the provider
    assert "ns/b" in t.core.batching.held
    assert t.run(3) == ["scale-up ns/b"]  # the batch's idle deadline (1 + 2)


def test_deleted_while_obtaining_is_released_once_obtained() -> None:
    t = Table()
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    st, result = t.st("ns/a"), obtained(t, "ns/a")
    t.core.forget("ns/a", "deleted")
    t.answer("scale-up ns/a", result)
    assert t.run(1) == ["release ns/a"]
    assert t.core.ledger.releasing("ns/a")
    assert "ns/a" not in t.core.states and st.deleted


def test_intent_conflict_retries_soon_without_a_provider_call() -> None:
    t = Table()
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    record = t.st("ns/a").record
    assert record is not None
    conflict = ApiError(409, "Conflict", "the object has been modified")
    t.answer("scale-up ns/a", ScaledUp("ns/a", record, intent_error=conflict))
    t.run(1)
    st = t.st("ns/a")
    assert st.record is None and st.retry_at == NOW + 1 + WRITE_RETRY
    assert t.core.ledger.in_progress_claims() == set()


def test_deleted_while_its_intent_write_failed_leaves_nothing_indexed() -> None:
    """Chaos seed 27070: the intent write was refused (429) and the request deleted meanwhile; the retry time set on
    the forgotten state indexed it again, and every later pass failed on the missing state."""
    t = Table()
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    record = t.st("ns/a").record
    assert record is not None
    t.core.forget("ns/a", "deleted")
    t.answer("scale-up ns/a", ScaledUp("ns/a", record, intent_error=ApiError(429, "TooManyRequests", "slow down")))
    t.run(1)
    assert "ns/a" not in t.core.index.retrying
    t.request("ns/b", pods=1, cpu="12")
    assert "scale-up ns/b" in t.run(2 + WRITE_RETRY)  # passes still run whole


def test_lost_lease_keeps_the_record_for_the_next_leader() -> None:
    t = Table()
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    t.answer("scale-up ns/a", NotLeader("lost"))
    t.run(1)
    assert t.st("ns/a").record is not None and t.st("ns/a").task is None


def test_one_bad_request_fails_alone() -> None:
    t = Table()
    t.request("ns/a")
    t.request("ns/b")
    t.source.gangs["ns/a"] = RuntimeError("a bug in one request's source")
    assert t.run(nodes={"n1": node("n1")}) == ["write ns/a", "write ns/b"]
    assert t.provisioned("ns/b") == ("True", C.R_FOUND)
    assert t.st("ns/a").failures == 1 and t.provisioned("ns/a") == ("False", "ReconcileError")


@pytest.mark.parametrize(("idle_for", "removed"), [(0.0, False), (599.0, False), (601.0, True)],
                         ids=["just-empty", "not-yet", "unneeded-long-enough"])
def test_scale_down_of_an_empty_unit(idle_for: float, removed: bool) -> None:
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, scale_down_unneeded_time=600.0))
    t.run(nodes={"u1": node("u1", token="old")})
    names = t.run(idle_for)
    assert (names == ["scale-down u1"]) is removed
    assert t.core.ledger.is_going("u1") is removed
    if removed:
        t.answer("scale-down u1", None)
        assert t.run(idle_for + 1) == []  # once
        assert not t.core.ledger.is_going("u1")


def test_a_slice_provisioned_on_request_is_not_scaled_down_while_its_second_host_registers() -> None:
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, scale_down_unneeded_time=1.0), pools=(SLICE,))
    t.request("ns/a", pods=2, requests={"google.com/tpu": "4"}, on_request=True)
    assert t.run() == ["scale-up ns/a"]
    record = t.st("ns/a").record
    assert record is not None and [(s.pool, s.units) for s in record.steps] == [("tpu", 1)]
    token = record.steps[0].token
    hosts = (f"{token}-h0", f"{token}-h1")
    t.answer("scale-up ns/a", ScaledUp("ns/a", record, intent_body="{}",
                                       obtained={token: Obtained(token, "tpu", (Unit("s1", hosts),))}))
    t.run(1)
    assert t.provisioned("ns/a") == ("True", C.R_PROVISIONED)  # on the grant, before any host registered
    first = {hosts[0]: node(hosts[0], token=token, pool=SLICE, unit="s1")}
    assert t.run(2, nodes=first) == []
    assert "scale-down s1" not in t.run(100)  # far past the unneeded time: still coming up, not half removed
    assert t.core.ledger.coming_up_claims(t.core.view.nodes.__contains__) == {token}
    t.run(101, nodes={hosts[1]: node(hosts[1], token=token, pool=SLICE, unit="s1")})
    assert t.core.ledger.coming_up_claims(t.core.view.nodes.__contains__) == set()
    assert "scale-down s1" not in t.run(200)  # booked


def booked_on_one_node(t: Table, key: str = "ns/a") -> None:
    t.request(key)
    t.run(nodes={"n1": node("n1")})
    assert t.provisioned(key) == ("True", C.R_FOUND) and t.st(key).booking


def test_booking_consumed_frees_room_for_a_request_waiting_out_its_retry() -> None:
    t = Table()
    booked_on_one_node(t)
    t.request("ns/b", pods=4, may_scale=False)  # 16 CPUs: the node's room, less ns/a's booking, is not enough
    t.run(1)
    assert t.provisioned("ns/b") == ("False", C.R_NOT_FOUND) and t.st("ns/b").retry_at is not None
    t.source.consumed_as["ns/a"] = Consumed(C.M_BOOKING_CONSUMED)
    t.core.mark("ns/a")  # the source would mark it when the pods arrived
    t.run(2)
    assert t.st("ns/a").conditions[C.BOOKING_EXPIRED].reason == C.R_BOOKING_CONSUMED
    assert t.provisioned("ns/b") == ("True", C.R_FOUND)  # planned in the pass that freed the room


def test_a_booked_node_removed_revokes_the_booking() -> None:
    t = Table()
    booked_on_one_node(t)
    t.core.mark("ns/a")
    t.run(0.5)  # the booking is seen on its node
    t.run(1, nodes={"n1": None})
    revoked = t.st("ns/a").conditions[C.CAPACITY_REVOKED]
    assert (revoked.status, revoked.reason) == ("True", C.R_NODE_REMOVED)


@pytest.mark.parametrize(("change", "reclaimed"), [
    pytest.param({"message": "node is shutting down", "status": "False"}, True, id="kubelet-graceful-shutdown"),
    pytest.param({"taint": "cloud.google.com/impending-node-termination"}, True, id="termination-handler-taint"),
    pytest.param({"message": "container runtime is down", "status": "False"}, False, id="other-not-ready"),
])
def test_a_booked_node_the_cloud_takes_back_revokes_the_booking_at_once(change: dict[str, str],
                                                                       reclaimed: bool) -> None:
    t = Table()
    booked_on_one_node(t)
    t.core.mark("ns/a")
    t.run(0.5)
    going = node("n1", ready=change.get("status") != "False", since=NOW + 1)
    if "message" in change:
        going["status"]["conditions"][0]["message"] = change["message"]
    if "taint" in change:
        going["spec"] = {"taints": [{"key": change["taint"], "effect": "NoSchedule"}]}
    t.run(1, nodes={"n1": going})
    revoked = t.st("ns/a").conditions.get(C.CAPACITY_REVOKED)
    if not reclaimed:
        assert revoked is None  # a node merely not Ready has the unready grace (test below)
        return
    assert revoked is not None and (revoked.status, revoked.reason) == ("True", C.R_NODE_RECLAIMED)
    notice = change.get("message") or f"tainted {change['taint']}"
    assert revoked.message == (f"the cloud is taking back booked on-demand node n1 ({notice}) before every pod was "
                               "scheduled; 1 of the 1 booked nodes will be gone")
    assert t.source.told == [("Warning", "CapacityRevoked", revoked.message)]


def test_a_revoked_booking_holds_its_nodes_until_the_revocation_is_written() -> None:
    """Kueue counts on a booking until the object says otherwise (hack/chaos.py, seed 15027: a revocation's write
    refused with a 409, and scale-down removed a booked node meanwhile)."""
    t = Table()
    booked_on_one_node(t)
    t.core.mark("ns/a")
    t.run(0.5)
    going = node("n1", ready=False, since=NOW + 1)
    going["status"]["conditions"][0]["message"] = "node is shutting down"
    t.run(1, nodes={"n1": going})
    assert t.st("ns/a").true(C.CAPACITY_REVOKED)
    t.answer("write ns/a", Written("ns/a", "", error=ApiError(409, "Conflict", "the object has been modified")))
    t.run(2)
    assert [b.node for b in t.core.index.holdings["ns/a"].bookings] == ["n1"]  # still held: not written
    t.run(4)  # the write is tried again and lands
    t.run(5)
    assert "ns/a" not in t.core.index.holdings


def test_a_running_gang_is_told_once_of_each_node_the_cloud_takes_back() -> None:
    """Its pods run on n1 (booked) and n2 (not: the scheduler put one there); n2 is reclaimed."""
    t = Table()
    booked_on_one_node(t)
    t.source.consumed_as["ns/a"] = Consumed(C.M_BOOKING_CONSUMED)
    t.run(1, nodes={"n2": node("n2")}, pods={("ns", "a-0"): PodInfo("n1", C_RESOURCES, False, "ns/a"),
                                              ("ns", "a-1"): PodInfo("n2", C_RESOURCES, False, "ns/a")})
    assert t.st("ns/a").true(C.BOOKING_EXPIRED)
    t.run(1.5)  # its write lands: nothing else brings the request up again
    assert "write ns/a" not in t.run(1.7)
    going = node("n2", ready=False, since=NOW + 2)
    going["status"]["conditions"][0]["message"] = "node is shutting down"
    t.source.told.clear()
    t.run(2, nodes={"n2": going})
    assert t.source.told == [("Warning", "NodeReclaimed", "the cloud is taking back on-demand node n2 (node is "
                                                          "shutting down), where the gang runs: 1 of its 2 nodes will "
                                                          "be gone")]
    assert not t.st("ns/a").true(C.CAPACITY_REVOKED)  # the booking is over: nothing to revoke
    t.core.mark("ns/a")
    t.run(3)
    assert len(t.source.told) == 1  # told once


def test_provision_timeout_releases_the_scale_up_and_waits_for_the_release() -> None:
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, max_node_provision_time=60.0))
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    t.answer("scale-up ns/a", obtained(t, "ns/a"))
    t.run(1)
    t.run(2, nodes=new_nodes(t, "ns/a", ready=False))
    assert t.run(30) == []
    assert t.run(61) == ["release ns/a", "write ns/a"]
    release = next(e for e in t.effects if e.name == "release ns/a")
    assert t.provisioned("ns/a") == ("False", C.R_NOT_FOUND)
    assert POOL.name in t.core.backoffs.active(NOW + 61)
    assert t.core.ledger.releasing("ns/a")
    t.core.mark("ns/a")
    assert "scale-up ns/a" not in t.run(62)  # not planned again while its release is under way
    t.results.append((release.then, Released("ns/a", (), (), units=1)))
    t.run(63)
    assert not t.core.ledger.releasing("ns/a")


def test_a_new_node_the_cloud_takes_back_releases_the_scale_up_at_once() -> None:
    """Not at the provisioning deadline: the node will not come back, and the rest of the gang's units wait."""
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, max_node_provision_time=900.0))
    t.request("ns/a", pods=2, cpu="12")
    t.run()
    t.answer("scale-up ns/a", obtained(t, "ns/a"))
    t.run(1)
    coming = new_nodes(t, "ns/a", ready=False)
    t.run(2, nodes=coming)
    first = sorted(coming)[0]
    going = dict(coming[first] or {})
    going["status"] = {**going["status"], "conditions": [{"type": "Ready", "status": "False",
                                                          "message": "node is shutting down"}]}
    assert t.run(30, nodes={first: going}) == ["release ns/a", "write ns/a"]
    message = t.st("ns/a").conditions[C.PROVISIONED].message
    assert message.startswith(f"the cloud is taking back on-demand node {first} (node is shutting down) of the "
                              "scale-up's plan before every new node was Ready; every unit of the scale-up is released")
    assert ("Warning", "ScaleUpReclaimed", message) in t.source.told


def zoned(name: str) -> dict[str, Any]:
    """A free node in the pool's zone, where a gang that also needs new nodes may use it."""
    free = node(name)
    free["metadata"]["labels"]["topology.kubernetes.io/zone"] = POOL.zone
    return free


def shutting_down(name: str) -> dict[str, Any]:
    going = zoned(name)
    going["status"] = {**going["status"], "conditions": [{"type": "Ready", "status": "False",
                                                          "message": "node is shutting down"}]}
    return going


@pytest.mark.parametrize(("change", "event", "start"), [
    (shutting_down, "ScaleUpReclaimed", "the cloud is taking back on-demand node n1 (node is shutting down) of the "
                                        "scale-up's plan before every new node was Ready"),
    (lambda name: None, "ScaleUpNodesLost", "existing nodes the scale-up's plan counts on were removed before every "
                                            "new node was Ready: n1"),
], ids=["reclaimed", "removed"])
def test_an_existing_node_the_plan_counts_on_lost_while_the_new_ones_come_up_releases_the_scale_up(
        change: Any, event: str, start: str) -> None:
    """Chaos seed 19001: the plan put one pod on a free node and one on a new node; the free node was reclaimed while
    the new one came up, and the request was marked Provisioned on a plan that no longer held. Now the scale-up is
    released and the request planned again; never Provisioned."""
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, max_node_provision_time=900.0))
    t.run(nodes={"n1": zoned("n1")})
    t.request("ns/a", pods=2, cpu="12")
    t.run()
    decision = t.st("ns/a").decision
    assert decision is not None and [p.node for p in decision.placements] == ["n1"]
    t.answer("scale-up ns/a", obtained(t, "ns/a"))
    t.run(1)
    assert t.run(2, nodes={"n1": change("n1"), **new_nodes(t, "ns/a")}) == ["release ns/a", "write ns/a"]
    assert t.provisioned("ns/a") == ("False", C.R_NOT_FOUND)
    message = t.st("ns/a").conditions[C.PROVISIONED].message
    assert message.startswith(start)
    assert ("Warning", event, message) in t.source.told


@pytest.mark.parametrize("failure", [
    NotLeader("this process does not hold the leader lease: no provider call"),
    ProviderError(ErrorClass.TRANSIENT, "UNAVAILABLE", "try again", pool="gpu"),
], ids=["lease-lost", "provider-error"])
def test_a_release_that_failed_is_tried_again_and_the_request_waits_for_it(failure: Exception) -> None:
    """The units of a failed release are still there: the request is not planned beside them, and the release is
    tried again after a backoff until it returns (found by hack/chaos.py, seed 11168: a release fenced by a lost
    lease, the lease won back a second later, and the request scaled up a second time beside its first nodes)."""
    # The pool's backoff is shorter than the release's, so that only the release keeps the request from planning.
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, max_node_provision_time=60.0, pool_backoff_initial=0.1,
                       pool_backoff_max=0.1))
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    t.answer("scale-up ns/a", obtained(t, "ns/a"))
    t.run(1)
    t.run(2, nodes=new_nodes(t, "ns/a", ready=False))
    assert t.run(61) == ["release ns/a", "write ns/a"]
    t.answer("release ns/a", Released("ns/a", (), (), error=failure))
    assert t.run(61.5) == []  # the failure is learnt; the release is due again after PROVIDER_CALL (1 s, ±20 %)
    assert t.core.ledger.releasing("ns/a")
    due = t.core.next_time(NOW + 61.5)
    assert NOW + 61.5 + 0.8 <= due <= NOW + 61.5 + 1.2  # from the pass that learnt of the failure
    t.core.mark("ns/a")
    assert t.run(due - NOW) == ["release ns/a"]  # tried again, and still not planned beside its units
    t.answer("release ns/a", Released("ns/a", (), (), units=1))
    t.run(due - NOW + 0.1)
    assert not t.core.ledger.releasing("ns/a")


def test_check_capacity_without_room_asks_for_nothing_but_its_status() -> None:
    t = Table()
    t.request("ns/a", pods=1, cpu="12", may_scale=False)
    assert t.run() == ["write ns/a"]
    assert t.provisioned("ns/a") == ("False", C.R_NOT_FOUND)


def test_a_recorded_obtaining_intent_is_resumed_with_its_own_tokens() -> None:
    t = Table()
    t.request("ns/a", pods=1, cpu="12")
    t.run()
    record = t.st("ns/a").record
    assert record is not None
    # A new process: the request comes back from its object with the intent recorded on it.
    fresh = Table()
    fresh.source.gangs["ns/a"] = t.source.gangs["ns/a"]
    fresh.core.add(RequestState(t.st("ns/a").request, record=record, attempts=record.attempt))
    assert fresh.run(5) == ["scale-up ns/a"]
    assert fresh.st("ns/a").record == record
    assert fresh.core.ledger.in_progress_claims() == set(record.tokens)


@pytest.mark.parametrize(("room", "revoked"), [("16", False), ("2", True)], ids=["still-fits", "gone"])
def test_after_a_restart_a_booking_on_free_capacity_is_made_again_or_revoked(room: str, revoked: bool) -> None:
    """A request Provisioned on free capacity (no scale-up, no record) has its booking re-planned after a restart;
    when what it was booked on is gone, Kueue is told (hack/chaos.py, seed 17017: a booked node reclaimed during a
    handover, the booking silently empty, its other nodes scaled down)."""
    t = Table()
    t.source.gangs["ns/a"] = gang("ns/a", pod_set("w", 2, {"cpu": "4"}))
    st = RequestState(Request("ns/a", "uid-ns/a", SOURCE, "c", {"kind": "Table"}, created=NOW, pods=2))
    st.set(C.ACCEPTED, True, C.R_ACCEPTED, C.M_ACCEPTED, rfc3339(NOW))
    st.set(C.PROVISIONED, True, C.R_FOUND, "fits on free capacity", rfc3339(NOW))
    t.core.add(st)
    free = node("n1")
    free["status"]["allocatable"] = {**free["status"]["allocatable"], "cpu": room}
    t.run(1, nodes={"n1": free})
    cond = t.st("ns/a").conditions.get(C.CAPACITY_REVOKED)
    assert (cond is not None and cond.true and cond.reason == C.R_BOOKING_LOST) is revoked
    assert bool(t.st("ns/a").booking) is not revoked


def test_a_booking_ends_at_its_ttl_by_itself() -> None:
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, booking_ttl=300.0))
    booked_on_one_node(t)
    t.run(299)
    assert C.BOOKING_EXPIRED not in t.st("ns/a").conditions
    assert t.core.next_time(NOW + 299) == NOW + 300  # due at the TTL: nothing else will wake the loop for it
    t.run(300)
    assert t.st("ns/a").conditions[C.BOOKING_EXPIRED].reason == C.R_BOOKING_TIME_EXPIRED
    t.request("ns/b", pods=4, may_scale=False)  # the whole node: fits only once the booking is gone
    t.run(301)
    assert t.provisioned("ns/b") == ("True", C.R_FOUND)


@pytest.mark.parametrize(("unready_for", "revoked"), [(299.0, False), (300.0, True)], ids=["within-grace", "past"])
def test_a_booked_node_not_ready_past_the_grace_revokes_the_booking(unready_for: float, revoked: bool) -> None:
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, booked_node_unready_grace=300.0))
    booked_on_one_node(t)
    t.core.mark("ns/a")
    t.run(0.5)  # the booking is seen on its Ready node
    t.run(1, nodes={"n1": node("n1", ready=False, since=NOW + 1)})
    t.run(1 + unready_for)
    cond = t.st("ns/a").conditions.get(C.CAPACITY_REVOKED)
    assert (cond is not None and cond.reason == C.R_NODE_NOT_READY) is revoked


def test_a_request_never_provisioned_expires_and_a_deletable_one_is_deleted_after_the_terminal_ttl() -> None:
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, expiry=3600.0, terminal_ttl=600.0))
    t.request("ns/a", pods=1, cpu="12", may_scale=False)
    t.source.pending[-1] = replace(t.source.pending[-1], deletable=True)
    t.run()
    assert t.provisioned("ns/a") == ("False", C.R_NOT_FOUND)
    t.run(3600)
    failed = t.st("ns/a").conditions[C.FAILED]
    assert (failed.status, failed.reason) == ("True", C.R_EXPIRED)
    assert "delete ns/a" not in t.run(3600 + 599)
    assert "delete ns/a" in t.run(3600 + 600)


def test_an_idle_unit_a_gang_is_planned_on_is_not_scaled_down_in_that_pass() -> None:
    # From hack/chaos.py seed 9915: a request planned onto an idle slice in the pass its unneeded time ran out.
    t = Table(Settings(batch_idle=0.0, batch_max=0.0, scale_down_unneeded_time=1.0))
    t.run(nodes={"u1": node("u1", token="old")})
    t.request("ns/a", pods=1, cpu="12")
    names = t.run(1)  # u1 has been unneeded for exactly the unneeded time: ripe, unless the new booking holds it
    assert t.provisioned("ns/a") == ("True", C.R_FOUND)
    assert "scale-down u1" not in names
    assert "scale-down u1" not in t.run(5)
