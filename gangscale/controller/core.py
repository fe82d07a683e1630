"""The controller's state, and the named operations that change it; no I/O.

:class:`Core` is what one pass (:func:`gangscale.controller.passes.run_pass`) reads and changes: the requests and
their indices, the cluster view, the ledger of capacity in flight, the work queue and the batching window, pool
backoffs, scale-down's idle units. It is also what the demand sources and reconciling see of the controller (the
:class:`~.demand.Host` and :class:`~.reconcile.World` protocols).

It does no I/O. Background work it asks for (a status write, an Event, a scale-up, a release) is an
:class:`Effect` put in its outbox; the runtime (:mod:`.loop`) takes the outbox after each pass and starts each
effect as a guarded task, and hands the task's result back to the next pass, which applies it with the callback
the effect carries. So a table test can build a Core on plain objects, run a pass at a given time, look at the
effects it asked for, and feed their results back (``tests/controller/test_pass.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.clock import Clock
from gangscale.controller.actuator import Actuator
from gangscale.controller.demand.protocol import DemandSource
from gangscale.controller.effects import Effects, Released
from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.batching import Batching
from gangscale.controller.logic.holdings import held
from gangscale.controller.logic.indices import RequestIndex
from gangscale.controller.logic.ledger import Ledger
from gangscale.controller.logic.poolhealth import PoolHealth, ScaleUpOutcome, Unhealthy
from gangscale.controller.logic.reconcile import Consumed, Release, carried_over
from gangscale.controller.logic.record import RELEASING
from gangscale.controller.logic.request import Phase, Request, RequestState, phase
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.view import ClusterView, Readiness
from gangscale.controller.logic.workqueue import WorkQueue
from gangscale.controller.removals import Removals
from gangscale.controller.report import debug_document, explain_document, export_gauges
from gangscale.controller.tasks import Then
from gangscale.controller.writer import StatusWriter
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.tiers import tier_of_labels
from gangscale.observe.metrics import Metrics
from gangscale.retry import PROVIDER_CALL
from gangscale.timefmt import rfc3339

log = logging.getLogger(__name__)

#: Every request is reconciled at least this often even when nothing happens (a safety net, as informers resync).
RESYNC = 60.0


@dataclass(frozen=True)
class Effect:
    """Background work a pass asks for: ``coro`` is started by the runtime as a task named ``name``; its result (or
    exception) goes to ``then`` in the next pass."""

    coro: Coroutine[Any, Any, Any]
    name: str
    then: Then | None = None


@dataclass(frozen=True)
class Hooks:
    """What the core asks of the runtime around it, without waiting for it."""

    #: Run a pass soon (something changed outside the reflectors).
    wake: Callable[[], None]
    #: Start a long-running guarded task (a source's poller); cancelled by its owner or when the loop stops.
    run_background: Callable[[Coroutine[Any, Any, Any], str], Any]


class Core:
    def __init__(self, pools: Sequence[NodePool], actuator: Actuator, effects: Effects, view: ClusterView, *,
                 claim: Callable[[str], str], settings: Settings, policy: Policy, clock: Clock, metrics: Metrics,
                 hooks: Hooks) -> None:
        self.settings, self.policy, self.clock, self.metrics, self.hooks = settings, policy, clock, metrics, hooks
        self.pools: dict[str, NodePool] = {pool.name: pool for pool in pools}
        self.actuator, self.effects, self.view = actuator, effects, view
        s = settings
        self.backoffs = PoolBackoffs(s.pool_backoff_initial, s.pool_backoff_max, s.pool_backoff_reset)
        #: Each pool's recent scale-up outcomes; an unhealthy pool is closed through ``backoffs`` (:mod:`.poolhealth`).
        self.health = PoolHealth(s.pool_health_window, s.pool_unhealthy_ratio, s.pool_unhealthy_cooldown,
                                 on_outcome=self._scale_up_outcome)
        #: Capacity in flight: being obtained, coming up, handed back, going away (:mod:`.ledger`).
        self.ledger = Ledger()
        self.sources: dict[str, DemandSource] = {}
        self.states: dict[str, RequestState] = {}
        self._by_source: dict[str, dict[str, RequestState]] = {}
        self.queue = WorkQueue()
        self.batching = Batching(s.batch_idle, s.batch_max)
        self.index = RequestIndex(self.touch_nodes, self.touch_claims, claim, self.ledger)
        self.outbox: list[Effect] = []
        #: Releases of scale-ups that failed: (when to try again, the attempt it will be, the release).
        self._releases_due: list[tuple[float, int, Release]] = []
        #: Gang -> (its misses so far, when it may be decided again), left by a request that failed for lack of
        #: capacity, for the gang's next request (:meth:`_continue_gang`).
        self._gang_misses: dict[str, tuple[int, float]] = {}
        #: A booked request went away: pending requests waiting out a retry may try now.
        self.freed = False
        #: Requests a step of this pass failed on, and those it reconciled (:mod:`.isolation`).
        self.failed_now: set[str] = set()
        self.reconciled_now: set[str] = set()
        self.resync_at = 0.0
        #: The time of the pass under way, or of the last one; whether a pass is under way.
        self.pass_now = 0.0
        self.passing = False
        self.plans: dict[str, dict[str, Any]] = {}
        self.removals = Removals(view, self.pools, self.index, actuator, settings=s, metrics=metrics,
                                 ledger=self.ledger, spawn=self.spawn)
        self.writer = StatusWriter(self.states, self.sources, effects, self.queue, self.index, settings=s,
                                   clock=clock, metrics=metrics, spawn=self.spawn, forget=self.forget)

    def _scale_up_outcome(self, pool: str, outcome: ScaleUpOutcome, became: Unhealthy | None) -> None:
        self.metrics.pool_scale_up_outcome(pool, outcome.value)
        if became is not None:
            log.warning("%s (recent scale-ups, oldest first: %s)", became.message,
                        ", ".join(o.value for o in became.outcomes), extra={"pool": pool})

    def add_sources(self, sources: Iterable[DemandSource]) -> None:
        self.sources.update((source.name, source) for source in sources)

    def next_time(self, now: float) -> float:
        """The earliest time after ``now`` (the last pass's time) at which something is due. A time due by then
        was handled by that pass: waking for it again would spin."""
        times = [self.queue.next_time(), self.removals.due(), *(at for at, _, _ in self._releases_due),
                 self.batching.deadline() if self.batching.held else None,
                 *(source.next_wake() for source in self.sources.values()), self.resync_at or now + RESYNC]
        return min((t for t in times if t is not None and t > now), default=now + RESYNC)

    def take_outbox(self) -> list[Effect]:
        outbox, self.outbox = self.outbox, []
        return outbox

    # -- Host: what the demand sources may do ----------------------------------------------------------------------

    def state(self, key: str) -> RequestState | None:
        return self.states.get(key)

    def requests_of(self, source: str) -> Iterable[RequestState]:
        return list(self._by_source.get(source, {}).values())

    def add(self, st: RequestState) -> None:
        old = self.states.get(st.key)
        if old is not None:
            self.forget(st.key, "replaced by a new object of the same name")
        self._continue_gang(st)
        self.states[st.key] = st
        self._by_source.setdefault(st.request.source, {})[st.key] = st
        self.index.index(st)
        self.queue.mark(st.key)

    def _continue_gang(self, st: RequestState) -> None:
        """A gang's next request after one that failed for lack of capacity waits out gangscale's backoff for the
        gang (``reconcile.carried_over``), however soon Kueue made it."""
        now = self.clock.now()
        self._gang_misses = {gang: (n, at) for gang, (n, at) in self._gang_misses.items() if at > now}
        misses = self._gang_misses.pop(st.request.gang, None) if st.request.gang else None
        if misses is None or st.conditions or st.record is not None:
            return
        st.retries, st.retry_at = misses
        st.set(C.PROVISIONED, False, C.R_NOT_FOUND, f"the last request of this gang found no capacity ({st.retries} "
               f"miss(es)); next attempt at {rfc3339(st.retry_at)}", rfc3339(now))
        log.info("%s: the last request of its gang failed for lack of capacity; decided at %s (gangscale's backoff "
                 "after %d miss(es))", st.key, rfc3339(st.retry_at), st.retries, extra={"pr": st.key})

    def update(self, key: str, request: Request) -> None:
        st = self.states.get(key)
        if st is not None:
            for problem in sorted(set(request.problems) - set(st.request.problems)):
                st.event("Warning", "InvalidParameter", problem)  # a parameter changed to another unusable value
            st.request = request
            st.version = request.version
            self.queue.mark(key)

    def forget(self, key: str, why: str) -> None:
        """The request's object is gone. Units still coming up for it are released; finished ones stay as ordinary
        nodes (scale-down removes them once idle)."""
        st = self.states.pop(key, None)
        if st is None:
            return
        self._by_source.get(st.request.source, {}).pop(key, None)
        st.deleted = True
        if st.request.gang and (misses := carried_over(st, self.clock.now(), self.settings)) is not None:
            self._gang_misses[st.request.gang] = misses
        self.sources[st.request.source].forgotten(key)
        self.queue.forget(key)
        self.batching.forget(key)
        self.index.forget(key)
        self.writer.drop(key)
        self.plans.pop(key, None)
        # Unless the scale-up itself is still running (its result releases what it obtained): a status write in
        # flight does not own the units, so they are released here (found by a test under load: the PR deleted
        # while the "obtained" write was on its way left its new nodes to scale-down).
        if phase(st) is Phase.PROVISIONING and not st.obtaining and st.record is not None:
            self.start_release(Release(st, st.record.steps, tuple(self.nodes_of(st)), why))
        if phase(st) is Phase.BOOKED:
            self.freed = True

    def mark(self, key: str) -> None:
        self.queue.mark(key)

    def wake(self) -> None:
        self.hooks.wake()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, then: Then | None = None) -> None:
        """Background work, started by the runtime when the pass ends; asked for outside a pass (a source's poller
        emitting an Event), the runtime is woken to start it. Its result (or exception) is handed to ``then`` at
        the start of a later pass."""
        self.outbox.append(Effect(coro, name, then))
        if not self.passing:  # waking from inside a pass would cost a second, empty pass
            self.hooks.wake()

    def run_background(self, coro: Coroutine[Any, Any, Any], name: str) -> Any:
        return self.hooks.run_background(coro, name)

    def emit(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        if not self.settings.dry_run:
            self.spawn(self.effects.record(obj, [(event_type, reason, message)]), f"event {reason}")

    # -- World: what reconciling reads ------------------------------------------------------------------------------

    def node_present(self, name: str) -> bool:
        return name in self.view.nodes

    def node_ready(self, name: str) -> bool:
        return self.view.ready(name)

    def node_readiness(self, name: str) -> Readiness | None:
        return self.view.readiness(name)

    def consumed(self, st: RequestState) -> Consumed | None:
        return self.sources[st.request.source].consumed(st)

    def node_tier(self, name: str) -> str:
        info = self.view.nodes.get(name)
        pool = self.pools.get(info.pool) if info is not None and info.pool is not None else None
        if pool is not None:
            return pool.capacity_type
        return tier_of_labels(info.state.labels) if info is not None else ""

    def claims_gone(self, tokens: Sequence[str]) -> bool:
        return not any(self.view.by_claim.get(self.view.claim(token)) for token in tokens)

    def gang_nodes(self, st: RequestState) -> set[str]:
        return {pod.node for pod in self.view.consumers.get(st.key, {}).values()}

    # -- indices: what a change touched -----------------------------------------------------------------------------

    def refresh(self, keys: Iterable[str]) -> None:
        """What each request holds is computed again (after its phase, booking or pods changed). A request done
        whose booking is let go (its end now written: ``holdings.ended_unwritten``) frees room for the waiting."""
        for key in keys:
            st = self.states.get(key)
            if st is None:
                continue
            before = self.index.holdings.get(key)
            self.index.hold(key, held(st, self.view, self.sources[st.request.source].consumers(st)))
            if before is not None and before.bookings and key not in self.index.holdings and phase(st) is Phase.DONE:
                self.freed = True

    def touch_nodes(self, nodes: Iterable[str]) -> None:
        """Scale-down looks at the units of these nodes again (their protection changed)."""
        self.removals.idle.mark(unit for node in nodes if (unit := self.view.unit_of(node)) is not None)

    def touch_tokens(self, tokens: Iterable[str]) -> None:
        self.touch_claims(map(self.view.claim, tokens))

    def touch_claims(self, claims: Iterable[str]) -> None:
        for claim in claims:
            self.touch_nodes(self.claim_nodes(claim))

    def claim_nodes(self, claim: str) -> set[str]:
        return self.view.by_claim.get(claim, set())

    @staticmethod
    def nodes_of(st: RequestState) -> list[str]:
        """The nodes the provider said the request's scale-up made."""
        return [name for got in st.obtained.values() for name in got.node_names]

    def export_gauges(self, *, leading: bool, now: float) -> None:
        export_gauges(self.metrics, leading=leading, counts=self.index.counts, backed_off=self.backoffs.active(now),
                      view=self.view, pools=self.pools, states=self.states.values(),
                      unhealthy=self.health.active(now))

    def debug_document(self, pr: str | None, *, passes: int, last_pass: float | None,
                       now: float) -> dict[str, Any] | None:
        """``GET /debug/plans`` (:func:`report.debug_document`); with ``pr`` (``namespace/name``), that request's
        document (:func:`report.explain_document`), None when no such request is known."""
        backed_off = self.backoffs.active(now)
        unhealthy = {pool: (found, self.health.recent(pool, now)) for pool, found in self.health.active(now).items()}
        if pr is None:
            return debug_document(dry_run=self.settings.dry_run, passes=passes, last_pass=last_pass,
                                  plans=self.plans, scale_downs=self.removals.history, backed_off=backed_off,
                                  states=self.states, unhealthy=unhealthy)
        st = self.states.get(pr)
        if st is None:
            return None
        return explain_document(st, self.view, self.settings, now, passes=passes, last_pass=last_pass,
                                decided_at=self.plans.get(pr, {}).get("at"), backed_off=backed_off,
                                unhealthy=unhealthy)

    # -- releases of a request's scale-up ---------------------------------------------------------------------------

    def start_release(self, release: Release, attempt: int = 1) -> None:
        """Hand back a request's scale-up (its request is gone, or its units are no longer whole). The request is
        not planned again until it returned (:meth:`Ledger.start_release` says why)."""
        key = release.st.key
        if attempt == 1:
            self.ledger.start_release(key, release.nodes, [self.view.claim(step.token) for step in release.steps],
                                      self.clock.now())
        self.touch_nodes(release.nodes)
        self.spawn(self.effects.release(key, release.steps, release.nodes, release.why), f"release {key}",
                   then=lambda result: self._released(release, result, attempt))

    def retry_releases(self, now: float) -> None:
        """Releases that failed and are due again (:meth:`_released`)."""
        due = [entry for entry in self._releases_due if entry[0] <= now]
        self._releases_due = [entry for entry in self._releases_due if entry[0] > now]
        for _, attempt, release in due:
            self.start_release(release, attempt)

    def _released(self, release: Release, result: Released | BaseException, attempt: int) -> None:
        st = release.st
        error = result if isinstance(result, BaseException) else result.error
        if error is not None:
            # The units are still there (the call failed, or this replica had lost the lease): they are handed back
            # later, and meanwhile the request is not planned again, nor are its nodes room. Forgetting them let the
            # request scale up a second time beside them (found by hack/chaos.py, seed 11168: a release fenced by a
            # lost lease, the lease won back a second later).
            at = self.pass_now + PROVIDER_CALL.delay(attempt)
            self._releases_due.append((at, attempt + 1, release))
            log.info("%s: the release of its scale-up failed (%s); trying again at %s", st.key, error, rfc3339(at),
                     extra={"pr": st.key})
            return
        self.ledger.release_returned(st.key, release.nodes)
        self.touch_nodes(release.nodes)
        if st.deleted:
            return
        # Only the record of the scale-up released here: the request may have been re-planned meanwhile. A releasing
        # record stays until no node of it is left (reconcile.pending).
        if st.record is not None and st.record.phase != RELEASING and \
                set(st.record.tokens) <= {step.token for step in release.steps}:
            st.record, st.obtained = None, {}
            self.index.index(st)
        self.queue.mark(st.key)
