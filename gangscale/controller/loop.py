"""The controller: reflectors and demand sources in, one pass per batch of change, side effects out.

Life of the loop (DESIGN decisions 7, 12, 14):

1. Start the reflectors (Nodes, Pods, and each demand source's: ProvisioningRequests, PodTemplates, Workloads,
   RayClusters) and wait until every one has finished its first LIST: nothing is decided on a partial view.
2. Reconcile every recorded scale-up intent with the provider before planning anything new: look up what an
   ``obtained`` intent got (not whole any more: released and re-planned), count the nodes of a Provisioned
   request's scale-up as booked nodes seen, and release units whose request no longer exists while they were
   still coming up. An ``obtaining`` intent is resumed, with its own tokens, by the first pass (the provider
   makes exactly the units of the intent still missing).
3. Then loop: wait for a change or a due time, and run one pass (:meth:`Controller.run_once`).

A pass is level-triggered and proportional to what changed. Reflector handlers only note the names of the
objects that changed; a background task's result is queued (:mod:`tasks`). The pass applies those (the cluster
view is updated object by object, each demand source turns its changed objects into requests), reconciles exactly
the requests that are dirty or due (:mod:`reconcile`), plans every pending gang that is due in one ``plan()``
call, chooses units to scale down when nodes, pods or bookings moved (:mod:`scaledowns`), starts the side effects
(:mod:`effects`) and writes the status of every request that changed (:mod:`writer`). Nothing outside the loop
changes a request: its helpers act only when the pass calls them, or when it hands them a task's result.

Batching without waiting (:mod:`batching`): when the controller is idle, new demand is planned in the pass its
event wakes. While scale-ups of earlier batches are calling the provider, requests ready to plan are held for the
next batch (group commit), at most ``--batch-idle`` after the last arrival or ``--batch-max`` after the first;
every other change (a node turned Ready, a provider call returned) is handled at once.

What a restart reproduces, and what it resets (the audit; the README's "What survives a restart" has the
table): rebuilt from the cluster and the cloud: owned conditions and scale-up records (the PR, or the
RayCluster annotation), the units each token designates (the provider's own objects), attempt numbers (the
record), bookings of Provisioned requests (on their own new nodes, ``rebook.py``), booked nodes seen (the
scale-up's nodes), slices left half-removed (``scaledown.broken_units``), Ray gangs in flight (annotations;
new gang ids skip theirs). Reset, because a fresh start is safe: a pending request's re-planning backoff (it
is planned at once; an infeasible plan calls nothing), pool backoffs (the first new attempt fails
all-or-nothing and backs off again), scale-down timers (removal comes later, never earlier), Ray demand being
batched (a gang forms later, never twice), unsent events and metrics (informational).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from functools import partial
from typing import Any, Protocol, overload

from gangscale.clock import Clock, SystemClock, wait_event
from gangscale.controller import conditions as C
from gangscale.controller.actuator import Actuator, NotLeader, always
from gangscale.controller.backoffs import PoolBackoffs
from gangscale.controller.batching import Batching
from gangscale.controller.demand import DemandSource
from gangscale.controller.effects import Effects, Released, ScaledUp
from gangscale.controller.indices import RequestIndex
from gangscale.controller.isolation import failed, succeeded, waiting
from gangscale.controller.ledger import Ledger
from gangscale.controller.planning import (
    Units,
    gangs_of,
    obtained_nodes_seen,
    planning_snapshot,
    rebook,
    units_of,
)
from gangscale.controller.prsource import ProvReqSource
from gangscale.controller.raysource import RaySource
from gangscale.controller.reconcile import (
    Actions,
    Consumed,
    Context,
    Failure,
    Release,
    carried_over,
    decided,
    obtained,
    reconcile,
    scale_up_failed,
)
from gangscale.controller.recovery import recover_intents, release_orphans
from gangscale.controller.report import debug_document, explain_document, export_gauges, record_plans
from gangscale.controller.request import Phase, Request, RequestState, phase
from gangscale.controller.scaledown import IdleUnits
from gangscale.controller.scaledowns import ScaleDowns
from gangscale.controller.settings import Settings
from gangscale.controller.snapshot import held, unit_count
from gangscale.controller.tasks import Tasks
from gangscale.controller.view import ClusterView, Readiness
from gangscale.controller.workqueue import WorkQueue
from gangscale.controller.writer import WRITE_RETRY, StatusWriter
from gangscale.kube.reflector import Reflector, ReflectorEvent, object_key, strip_managed_fields
from gangscale.kube.resources import NODES, PODS
from gangscale.kube.transport import KubeHTTP
from gangscale.kube.writes import EventRecorder
from gangscale.model.decision import Decision
from gangscale.model.gang import Gang
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.snapshot import Snapshot
from gangscale.observe.metrics import Metrics
from gangscale.planner import plan
from gangscale.providers.base import ErrorClass, NodePoolProvider, ProviderError
from gangscale.timefmt import rfc3339

log = logging.getLogger(__name__)

#: Every request is reconciled at least this often even when nothing happens (a safety net, as informers resync).
RESYNC = 60.0
#: How often a loop that stopped deciding on a stale cache looks at the watches again.
STALE_RECHECK = 1.0


class Leadership(Protocol):
    """What the loop needs of leader election (``gangscale.kube.lease.LeaseElector``)."""

    leading: asyncio.Event
    #: Who holds the lease, as last seen.
    holder: str

    def valid(self) -> bool:
        """Whether this process may act now."""
        ...

    def trouble(self) -> str | None:
        """Why this process cannot take part in the election (None: it can)."""
        ...


def slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    """A Node as the controller keeps it: without managedFields and the list of images on it (neither is read;
    on a real node the image list is often most of the object)."""
    status = obj.get("status")
    if isinstance(status, dict):
        status.pop("images", None)
    return strip_managed_fields(obj)


class Controller:
    def __init__(self, http: KubeHTTP, provider: NodePoolProvider, pools: Sequence[NodePool], *,
                 settings: Settings | None = None, policy: Policy | None = None, clock: Clock | None = None,
                 metrics: Metrics | None = None, leader: Leadership | None = None) -> None:
        self.http, self.provider = http, provider
        #: The leader lease, when several replicas run: nothing is decided or done before it is held, and every
        #: provider call and status write is fenced by it (``Actuator.fence``).
        self.leader = leader
        self.settings = settings or Settings()
        self.clock = clock or SystemClock()
        self.metrics = metrics or Metrics(dry_run=self.settings.dry_run)
        self.metrics.on_render = self._export_gauges
        self.pools = {pool.name: pool for pool in pools}
        self.policy = policy or Policy()
        s = self.settings
        self.backoffs = PoolBackoffs(s.pool_backoff_initial, s.pool_backoff_max, s.pool_backoff_reset)
        self.actuator = Actuator(provider, self.clock, self.metrics, self.pools, attempts=s.provider_attempts,
                                 fence=leader.valid if leader is not None else always)
        self.recorder = EventRecorder(http)
        self.effects = Effects(self.actuator, self.recorder, self.clock, dry_run=s.dry_run)
        self.view = ClusterView(provider.node_ref, provider.claim)
        self.nodes = Reflector(http, NODES, transform=slim_node)
        self.pods = Reflector(http, PODS, transform=strip_managed_fields)
        self.nodes.add_handler(self._on_node)
        self.pods.add_handler(self._on_pod)
        self.ray = RaySource(http, self)
        self.provreqs = ProvReqSource(http, self, raycluster=self.ray.raycluster)
        self.sources: dict[str, DemandSource] = {self.provreqs.name: self.provreqs, self.ray.name: self.ray}
        self.reflectors: tuple[Reflector, ...] = (self.nodes, self.pods)
        self.states: dict[str, RequestState] = {}
        self._by_source: dict[str, dict[str, RequestState]] = {}
        self.queue = WorkQueue()
        self.wakeup = asyncio.Event()
        self.ready = False
        #: Every reflector has listed (a standby replica is synced but not ready to act).
        self.synced = False
        #: Capacity in flight: being obtained, coming up, handed back, going away (:mod:`ledger`).
        self.ledger = Ledger()
        #: Gang -> (its misses so far, when it may be decided again), left by a request that failed for lack of
        #: capacity, for the gang's next request (``_continue_gang``).
        self._gang_misses: dict[str, tuple[int, float]] = {}
        self.passes = 0
        self.pass_seconds = 0.0
        self.last_pass: float | None = None
        self.plans: dict[str, dict[str, Any]] = {}
        self._settled = asyncio.Event()
        self.tasks = Tasks(on_done=self._task_done)
        self._init_indices()
        self.scaledowns = ScaleDowns(self.view, self.pools, self.index, self.actuator, settings=s, metrics=self.metrics,
                                     ledger=self.ledger, spawn=self.spawn)
        self.writer = StatusWriter(self.states, self.sources, self.effects, self.queue, self.index, settings=s,
                                   clock=self.clock, metrics=self.metrics, spawn=self.spawn, forget=self.forget)

    def _init_indices(self) -> None:
        self.index = RequestIndex(self._touch_nodes, self._touch_claims, self.provider.claim, self.ledger)
        self._changed_nodes: set[str] = set()
        self._changed_pods: set[tuple[str, str]] = set()
        self._freed = False
        #: The stale caches last logged (:meth:`_wait_out_stale_watches`).
        self._stale_told: list[str] = []
        #: Requests a step of this pass failed on (:meth:`_request_failed`), and those it reconciled.
        self._failed_now: set[str] = set()
        self._reconciled_now: set[str] = set()
        self.batching = Batching(self.settings.batch_idle, self.settings.batch_max)
        self._resync_at = 0.0
        self._pass_now = 0.0
        self._failed: BaseException | None = None

    @property
    def idle(self) -> IdleUnits:
        """The units scale-down finds unneeded, and since when (:attr:`ScaleDowns.idle`)."""
        return self.scaledowns.idle

    @property
    def releasing(self) -> set[str]:
        """The units being removed by scale-down."""
        return self.ledger.removing()

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
            self._start_release(Release(st, st.record.steps, tuple(self._nodes_of(st)), why))
        if phase(st) is Phase.BOOKED:
            self._freed = True

    def mark(self, key: str) -> None:
        self.queue.mark(key)

    def wake(self) -> None:
        self.wakeup.set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, then: Callable[[Any], None] | None = None) -> None:
        """A guarded background task: kept until done, cancelled when the loop stops. Its result (or exception)
        is handed to ``then`` by the loop, at the start of the next pass."""
        self.tasks.spawn(coro, name, then)

    def run_background(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A task that runs until its owner cancels it or the loop stops (a source's poller), guarded like the
        reflectors."""
        return self.tasks.run_background(coro, name)

    def _task_done(self) -> None:
        self.wakeup.set()
        self._settled.set()

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

    # -- reflector handlers: note what changed ----------------------------------------------------------------------

    def _on_node(self, event: ReflectorEvent) -> None:
        self._changed_nodes.add(str((event.obj.get("metadata") or {}).get("name", "")))
        self.wakeup.set()

    def _on_pod(self, event: ReflectorEvent) -> None:
        self._changed_pods.add(object_key(event.obj))
        self.wakeup.set()

    # -- lifecycle --------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        try:
            for source in self.sources.values():
                self.reflectors = (*self.reflectors, *await source.start())
            for reflector in self.reflectors:
                self.tasks.run_background(reflector.run(), f"reflector {reflector.resource.plural}")
            await asyncio.gather(*(r.synced.wait() for r in self.reflectors))
            self.synced = True
            if self.leader is not None and not self.leader.leading.is_set():
                # Hot standby: the caches stay current, nothing is decided until the lease is held.
                log.info("standby: the leader lease is held by %s", self.leader.holder or "nobody yet")
                await self.leader.leading.wait()
                log.info("leading: taking over (recorded scale-ups of earlier leaders are adopted)")
                # A standby's watches may be behind (dropped, backing off): nothing is decided on a stale cache
                # (found by hack/chaos.py, seed 4190: booked nodes the cache had not seen yet were taken as removed).
                await asyncio.gather(*(reflector.relist() for reflector in self.reflectors))
            await self._start_provider()
            self._apply_cluster_changes()
            for source in self.sources.values():
                source.recover()
            await self._reconcile_intents()
            self.ready = True
            log.info("synced and reconciled; serving classes %s%s", ", ".join(self.settings.classes),
                     " (dry run)" if self.settings.dry_run else "")
            while True:
                if self._stale_watches():
                    await self._wait_out_stale_watches()
                    continue
                self.run_guarded()
                await self.wait_for_work()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            await self.aclose()

    async def _start_provider(self) -> None:
        """Start the provider, retrying transient failures (the API server or the cloud briefly unavailable: a new
        leader must not exit on one 500); a refusal (credentials, configuration) stops the controller with it."""
        delay = self.settings.retry_initial
        while True:
            try:
                await self.provider.start()
                return
            except ProviderError as exc:
                if exc.error_class is not ErrorClass.TRANSIENT:
                    raise
                log.warning("the %s provider could not start (retrying in %.1fs): %s", self.provider.name, delay, exc)
            await self.clock.sleep(delay)
            delay = min(self.settings.retry_max, delay * 2)

    async def aclose(self) -> None:
        for source in self.sources.values():
            await source.aclose()
        await self.tasks.aclose()

    def _stale_watches(self) -> list[str]:
        """Why a cache the decisions read is stale: a reflector that stopped, or has failed for longer than
        ``--api-unreachable-timeout`` without progress (while the other watches keep the API server's last answer
        fresh, so nothing else would notice)."""
        bound = self.settings.api_unreachable_timeout
        return [why for reflector in self.reflectors if (why := reflector.trouble(bound)) is not None]

    async def _wait_out_stale_watches(self) -> None:
        """No pass while a cache is stale: a plan on it could scale up for capacity that exists, or down a node
        that is booked. Looked at again every second or at the next change."""
        stale = self._stale_watches()
        if stale != self._stale_told:
            log.error("not deciding: %s", "; ".join(stale))
            self._stale_told = stale
        self.wakeup.clear()
        await wait_event(self.clock, self.wakeup, self.clock.now() + STALE_RECHECK)
        if not self._stale_watches():
            log.info("deciding again: every watch is current")
            self._stale_told = []

    def run_guarded(self) -> None:
        started = time.perf_counter()
        try:
            self.run_once()
        except Exception:
            # One bad pass must not stop the controller: log it and try again at the next wake-up.
            log.exception("pass failed")
        self.passes += 1
        self.pass_seconds += time.perf_counter() - started  # real time spent, for benchmarks
        self.last_pass = self.clock.now()
        self.metrics.pass_finished(self.last_pass)  # the clock is unix time in production (SystemClock)
        self._settled.set()

    async def wait_for_work(self) -> None:
        """Until something changed or is due (requests held for the next batch are due at its deadline)."""
        if not self.wakeup.is_set():
            await wait_event(self.clock, self.wakeup, self._next_time(self._pass_now))

    def _next_time(self, now: float) -> float:
        """The earliest time after ``now`` (the last pass's time) at which something is due. A time due by then
        was handled by that pass: waking for it again would spin."""
        times = [self.queue.next_time(), self.scaledowns.due(),
                 self.batching.deadline() if self.batching.held else None,
                 *(source.next_wake() for source in self.sources.values()), self._resync_at or now + RESYNC]
        return min((t for t in times if t is not None and t > now), default=now + RESYNC)

    @property
    def quiet(self) -> bool:
        """Nothing to do and nothing under way: no change or result waiting, no task running, nothing due."""
        return not self.busy_with()

    def busy_with(self) -> list[str]:
        """What keeps the controller from being :attr:`quiet` (for diagnostics)."""
        due = self.queue.next_time()
        running = self.tasks.running()
        reasons = [
            ("not ready", not self.ready), ("woken", self.wakeup.is_set()),
            (f"{len(running)} task(s): {sorted(t.get_name() for t in running)[:3]}", bool(running)),
            (f"{len(self.tasks.results)} result(s)", bool(self.tasks.results)), ("dirty keys", self.queue.has_dirty),
            (f"due at {due}", due is not None and due <= self.clock.now())]
        return [text for text, busy in reasons if busy]

    async def wait_quiet(self) -> None:
        """Until :attr:`quiet`. Quiet only changes when a pass or a task ends, which sets ``_settled``: no clock,
        no polling."""
        while not self.quiet:
            self._settled.clear()
            await self._settled.wait()

    # -- health -----------------------------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        if self._failed is not None:
            return False, f"the loop stopped: {self._failed}"
        if self.ready and self.last_pass is not None and \
                self.clock.now() - self.last_pass > max(self.settings.max_inactivity, RESYNC * 2):
            return False, f"no pass since {rfc3339(self.last_pass)}"
        return True, "ok"

    def is_ready(self) -> tuple[bool, str]:
        silent = time.monotonic() - self.http.last_ok
        if silent > self.settings.api_unreachable_timeout:
            return False, f"the API server has not answered for {silent:.0f}s"
        if stale := self._stale_watches():
            return False, "; ".join(stale) + " (nothing is decided on a stale cache)"
        if self.ready:
            return True, "ok (leader)" if self.leader is not None else "ok"
        if self.synced and self.leader is not None and not self.leader.leading.is_set():
            trouble = self.leader.trouble()
            if trouble is not None:
                return False, trouble
            return True, f"standby: {self.leader.holder or 'nobody'} holds the leader lease"
        waiting = [r.resource.plural for r in self.reflectors if not r.synced.is_set()]
        return False, ("waiting for the first list of " + ", ".join(waiting)) if waiting else \
            "reconciling recorded scale-ups"

    # -- the pass ---------------------------------------------------------------------------------------------------

    def run_once(self, now: float | None = None) -> None:
        """One pass at ``now`` (default: the clock): apply what changed and what tasks returned, reconcile the
        requests that are dirty or due, plan the pending ones together, scale down, start effects, write."""
        now = self.clock.now() if now is None else now
        self._pass_now = now
        self.wakeup.clear()
        for then, result in self.tasks.take_results():
            then(result)
        self._apply_cluster_changes()
        self._settle(now)
        for source in self.sources.values():
            source.sync(now)
        if now >= self._resync_at:
            self.queue.mark_all(self.states)
            self._resync_at = now + RESYNC
        released = self.batching.release(now)
        keys = self.queue.take(now) | released
        ctx = Context(now, self.settings, self.pools, self.backoffs, self)
        acts = Actions()
        to_plan = []
        holding = not released and self.batching.holding(now)
        self._failed_now, self._reconciled_now = set(), set()
        for key in sorted(keys):
            st = self.states.get(key)
            if st is None or waiting(st, now):
                continue
            if holding and phase(st) is Phase.PENDING and not st.busy:
                self.batching.hold(key, now)  # reconciled with its batch: Accepted and the decision in one write
                continue
            if self._reconciled(st, ctx, acts) and not self.ledger.releasing(key):
                to_plan.append(st)
        if acts.capacity_freed or self._freed:
            self._freed = False
            to_plan += self._retry_waiting(ctx, keys, holding)
        touched = {st.key for st in to_plan} | {k for k in keys if k in self.states}
        self._refresh(touched)
        self._rebook(touched, now)
        if to_plan:
            self._plan(to_plan, ctx, acts)
            self._refresh({st.key for st in to_plan})
        try:
            self.scaledowns.scale_down(now)
        except Exception:
            log.exception("scale-down failed in this pass; the pass goes on")  # it concerns no one request
        self._act(acts)
        # Only a request that went through this pass without a failure has recovered (one that waited out its backoff
        # was not looked at: found by CI, the reset let it fail again at once with its count back at 1).
        for key in self._reconciled_now - self._failed_now:
            if (st := self.states.get(key)) is not None and st.failures:
                succeeded(st)
        self.writer.finish(touched, now)

    # -- isolation: one request's failure is that request's (:mod:`isolation`) ------------------------------------

    def _request_failed(self, st: RequestState, stage: str, exc: Exception) -> None:
        failed(st, stage, exc, self._pass_now, self.settings)
        self._failed_now.add(st.key)

    def _reconciled(self, st: RequestState, ctx: Context, acts: Actions) -> bool:
        """``reconcile`` with this request's actions kept only if it did not raise."""
        mine = Actions()
        try:
            wants_plan = reconcile(st, ctx, mine)
        except Exception as exc:
            self._request_failed(st, "reconcile", exc)
            return False
        acts.extend(mine)
        self._reconciled_now.add(st.key)
        return wants_plan

    def _apply_cluster_changes(self) -> None:
        nodes, self._changed_nodes = self._changed_nodes, set()
        for name in nodes:
            touched = self.view.apply_node(name, self.nodes.get("", name))
            self.queue.mark_all(self.index.token_owner[c] for c in touched.claims if c in self.index.token_owner)
            self.queue.mark_all(self.index.booked_on.get(name, ()))
            self.scaledowns.idle.mark(touched.units)
        pods, self._changed_pods = self._changed_pods, set()
        for key in pods:
            touched = self.view.apply_pod(key, self.pods.get(*key))
            self.queue.mark_all(k for k in touched.consumers if k in self.states)
            self.scaledowns.idle.mark(touched.units)

    def _retry_waiting(self, ctx: Context, done: set[str], holding: bool) -> list[RequestState]:
        """Capacity was handed back: requests waiting out a retry backoff are planned now (or with the next
        batch)."""
        again = []
        for key in sorted(self.index.retrying):
            st = self.states[key]
            if phase(st) is not Phase.PENDING or st.retry_at is None or st.busy:
                continue
            st.retry_at = None
            if holding:
                self.batching.hold(key, ctx.now)
            elif key not in done and not waiting(st, ctx.now) and self._reconciled(st, ctx, Actions()) \
                    and not self.ledger.releasing(key):
                again.append(st)
        return again

    def _plan(self, to_plan: list[RequestState], ctx: Context, acts: Actions) -> None:
        started = time.perf_counter()
        gangs = gangs_of(to_plan, self.sources, ctx.now, on_error=lambda st, exc: self._request_failed(st, "plan", exc))
        if not gangs:
            return
        by_key = {st.key: st for st in to_plan}
        snapshot = self._snapshot(ctx.now, self._units())
        decisions: Sequence[Decision]
        try:
            decisions = plan(snapshot, gangs.values(), ctx.now, self.policy)
        except Exception:
            decisions = self._plan_alone(snapshot, gangs, by_key, ctx.now)
        for decision in decisions:
            st = by_key[decision.gang]
            mine = Actions()
            try:
                decided(st, decision, ctx, mine)
            except Exception as exc:
                self._request_failed(st, "apply the plan of", exc)
                continue
            acts.extend(mine)
        self._record_plans(decisions, by_key, ctx.now)
        self.metrics.plan_pass(time.perf_counter() - started, len(gangs))

    def _plan_alone(self, snapshot: Snapshot, gangs: dict[str, Gang], by_key: dict[str, RequestState],
                    now: float) -> Sequence[Decision]:
        """The planner raised on the batch: gangs are planned alone, in the batch's order, until one is decided; those
        that raise before it fail. Two gangs planned alone on one snapshot could be given the same free room, so the
        rest wait for the next pass, which plans them together again without the failed ones."""
        keys = list(gangs)
        for i, key in enumerate(keys):
            try:
                decisions = plan(snapshot, [gangs[key]], now, self.policy)
            except Exception as exc:
                self._request_failed(by_key[key], "plan", exc)
                continue
            self.queue.mark_all(keys[i + 1:])
            return decisions
        return ()

    def _rebook(self, candidates: set[str], now: float) -> None:
        lost = [st for key in candidates if (st := self.states.get(key)) is not None
                and phase(st) is Phase.BOOKED and st.booking is None and not st.deleted and not waiting(st, now)
                # Rebuilt before every obtained node is seen, the others would be left unprotected (found by a
                # fault campaign, provisionedWhen: Requested after a restart); snapshot.held holds them meanwhile.
                and obtained_nodes_seen(st, self.view)]
        if lost:
            try:
                rebook(lost, self.sources, self.view, self._snapshot(now, self._units()), now, self.policy)
            except Exception:
                for st in lost:  # one at a time, to find the one that raises
                    try:
                        rebook([st], self.sources, self.view, self._snapshot(now, self._units()), now, self.policy)
                    except Exception as exc:
                        self._request_failed(st, "rebuild the booking of", exc)
                        st.booking = None  # rebuilt when it is tried again
            for st in lost:
                if st.record is not None:
                    log.info("%s: booking rebuilt on its own new node(s) after a restart", st.key,
                             extra={"pr": st.key})
            self._refresh({st.key for st in lost})

    def _settle(self, now: float) -> None:
        """The ledger catches up with the actuator's releases and with the view (:meth:`Ledger.settle`); units whose
        scale-down state changed are looked at again."""
        released = self.ledger.units_released(self.actuator.take_released())
        gone = self.ledger.settle(now, claim_has_nodes=lambda claim: bool(self.view.by_claim.get(claim)),
                                  unit_present=lambda unit: unit in self.view.unit_pool)
        self.scaledowns.idle.mark(released | gone)

    def _units(self) -> Units:
        return units_of(self.view, self.pools, self.ledger.coming_up_claims(self.view.nodes.__contains__),
                        self.ledger.going_units())

    def _claim_nodes(self, claim: str) -> set[str]:
        return self.view.by_claim.get(claim, set())

    def _snapshot(self, now: float, units: Units) -> Snapshot:
        coming = {node for claim in self.ledger.in_progress_claims() for node in self._claim_nodes(claim)}
        return planning_snapshot(self.pools, self.view, units, self.index.holdings.values(), self.backoffs, now,
                                 going=self.ledger.going_units(), leaving=self.ledger.leaving_nodes(self._claim_nodes),
                                 coming=coming)

    # -- effects ----------------------------------------------------------------------------------------------------

    def _act(self, acts: Actions) -> None:
        for st in acts.scale_up:
            self._isolated(st, "start the scale-up of", partial(self._start_scale_up, st, resume=False))
        for st in acts.resume:
            holder = st.record.holder if st.record else ""
            adopted = f"; adopted from leader {holder}" if holder and holder != self.settings.identity else ""
            log.info("resuming the recorded scale-up of %s (%s)%s", st.key, st.record.tokens if st.record else (),
                     adopted)
            self._isolated(st, "resume the scale-up of", partial(self._start_scale_up, st, resume=True))
        for release in acts.release:
            self._isolated(release.st, "start the release for", partial(self._start_release, release))
        for st in acts.delete:
            if not self.settings.dry_run:
                self.spawn(self.sources[st.request.source].delete(st), f"delete {st.key}")

    def _isolated(self, st: RequestState, stage: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:
            self._request_failed(st, stage, exc)

    def _start_scale_up(self, st: RequestState, *, resume: bool) -> None:
        record = st.record
        assert record is not None
        source = self.sources[st.request.source]
        intent = None
        events: list[tuple[str, str, str]] = []
        if not resume:
            body = source.status(st)
            intent = (body, repr(body))
            events, st.events = st.events, []
            source.note_events(st, events)
        st.task = "scale-up"
        self.ledger.start_obtain(map(self.view.claim, record.tokens))
        self.batching.started(st.key)
        self._touch_tokens(record.tokens)
        self.spawn(self.effects.scale_up(source, st, record, intent, events), f"scale-up {st.key}",
                   then=lambda result: self._scaled_up(st, result))

    def _scaled_up(self, st: RequestState, result: ScaledUp | BaseException) -> None:
        st.task = None
        self.batching.finished(st.key)
        now = self.clock.now()
        if isinstance(result, NotLeader):
            # The lease was lost: the record stays as written, for the next leader to adopt.
            log.warning("the scale-up of %s stopped: %s", st.key, result)
            return
        if isinstance(result, BaseException):
            log.error("the scale-up of %s failed unexpectedly", st.key, exc_info=result)
            self.ledger.obtain_returned(map(self.view.claim, st.record.tokens if st.record else ()))
            self._touch_tokens(st.record.tokens if st.record else ())
            st.record, st.retry_at = None, now + self.settings.retry_initial
            self.queue.mark(st.key)
            return
        record = result.record
        self.ledger.obtain_returned(map(self.view.claim, record.tokens))
        self._touch_tokens(record.tokens)
        if result.intent_error is not None:
            if result.intent_error.not_found:
                self.forget(st.key, f"its {st.request.kind} is gone")
                return
            # A conflict included: the watch, not a write's answer, says whether the object was replaced (the
            # source then forgets this request); until then the request is planned again later. A conflict means
            # the object changed since the version the decision saw: it is decided again as soon as the watch has
            # brought the change, not after the retry backoff.
            log.warning("could not record the scale-up intent of %s: %s", st.key, result.intent_error)
            st.record = None  # the intent is not on the object: the provider was not called
            wait = WRITE_RETRY if result.intent_error.status == 409 else self.settings.retry_initial
            st.retry_at = now + max(wait, result.intent_error.retry_after or 0.0)
        else:
            if result.intent_body is not None:
                st.version = result.intent_version or st.version
                self.writer.observe_written(st, result.intent_body, now)
            ctx = Context(now, self.settings, self.pools, self.backoffs, self)
            if result.failures:
                failures = [Failure(error, self._asked(record, error.pool), self._held_units(error.pool, st.key))
                            for error in result.failures]
                st.record = None
                self.ledger.rolled_back(map(self.view.claim, record.tokens), now)
                for pool in scale_up_failed(st, failures, ctx):
                    self.metrics.backoff(pool, next(f.error.error_class.value for f in failures
                                                    if f.error.pool == pool))
            else:
                assert result.obtained is not None
                for step in record.steps:
                    self.metrics.scaled(step.pool, "up", step.units)
                obtained(st, record, result.obtained, now, self.settings)
            if st.deleted and result.obtained is not None:
                # Deleted while its units were obtained: hand back whatever was obtained.
                self._start_release(Release(st, record.steps, tuple(self._nodes_of(st)),
                                            f"its {st.request.kind} was deleted while the units were obtained"))
        self.index.index(st)
        self.queue.mark(st.key)

    def _asked(self, record: Any, pool: str) -> int:
        return sum(step.units for step in record.steps if step.pool == pool)

    def _held_units(self, pool: str, but: str) -> int:
        units = self.view.units(self.pools).get(pool, {})
        count = unit_count(self.view, self.pools[pool], units, self.ledger.going_units(),
                           self.ledger.leaving_nodes(self._claim_nodes))
        coming = sum(n for key, holding in self.index.holdings.items() if key != but for p, n in holding.inflight
                     if p == pool)
        return count + coming

    def _start_release(self, release: Release) -> None:
        key = release.st.key
        self.ledger.start_release(key, release.nodes, [self.view.claim(step.token) for step in release.steps],
                                  self.clock.now())
        self._touch_nodes(release.nodes)
        self.spawn(self.effects.release(key, release.steps, release.nodes, release.why), f"release {key}",
                   then=lambda result: self._released(release.st, release, result))

    def _released(self, st: RequestState, release: Release, result: Released | BaseException) -> None:
        self.ledger.release_returned(st.key, release.nodes)
        self._touch_nodes(release.nodes)
        if st.deleted:
            return
        # Only the record of the scale-up released here: the request may have been re-planned meanwhile.
        if st.record is not None and set(st.record.tokens) <= {step.token for step in release.steps}:
            st.record, st.obtained = None, {}
            self.index.index(st)
        self.queue.mark(st.key)

    # -- indices and counts -----------------------------------------------------------------------------------------

    def _refresh(self, keys: Iterable[str]) -> None:
        for key in keys:
            st = self.states.get(key)
            if st is None:
                continue
            self.index.hold(key, held(st, self.view, self.sources[st.request.source].consumers(st)))

    def _touch_nodes(self, nodes: Iterable[str]) -> None:
        """Scale-down looks at the units of these nodes again (their protection changed)."""
        self.scaledowns.idle.mark(unit for node in nodes if (unit := self.view.unit_of(node)) is not None)

    def _touch_tokens(self, tokens: Iterable[str]) -> None:
        for token in tokens:
            self._touch_nodes(self.view.nodes_of(token))

    def _touch_claims(self, claims: Iterable[str]) -> None:
        for claim in claims:
            self._touch_nodes(self._claim_nodes(claim))

    def _nodes_of(self, st: RequestState) -> list[str]:
        return [name for got in st.obtained.values() for name in got.node_names]

    # -- startup ----------------------------------------------------------------------------------------------------

    async def _reconcile_intents(self) -> None:
        """Before the first plan: settle every recorded intent with the provider (:mod:`recovery`)."""
        known = set(self.provreqs.recorded_tokens())
        for st in self.states.values():
            if st.record is not None:
                known.update(st.record.tokens)
        lookup = functools.partial(self.actuator.lookup, until_answered=True)
        for release in await recover_intents(self.states.values(), lookup, self.pools, self.clock.now()):
            self._start_release(release)
        await release_orphans(self.view, known, self.actuator.release)

    # -- reporting --------------------------------------------------------------------------------------------------

    def _record_plans(self, decisions: Sequence[Decision], by_key: dict[str, RequestState], now: float) -> None:
        record_plans(self.plans, decisions, by_key, now, dry_run=self.settings.dry_run, metrics=self.metrics)

    def _export_gauges(self) -> None:
        """The gauges, computed when they are read (``Metrics.on_render``)."""
        bound = self.settings.api_unreachable_timeout
        self.metrics.set_watches({r.resource.plural: r.trouble(bound) is None for r in self.reflectors})
        export_gauges(self.metrics, leading=self.leader is None or self.leader.leading.is_set(),
                      counts=self.index.counts, backed_off=self.backoffs.active(self.clock.now()), view=self.view,
                      pools=self.pools, states=self.states.values())

    @overload
    def debug_plans(self) -> dict[str, Any]: ...

    @overload
    def debug_plans(self, pr: str) -> dict[str, Any] | None: ...

    def debug_plans(self, pr: str | None = None) -> dict[str, Any] | None:
        """What ``GET /debug/plans`` shows (:func:`report.debug_document`); with ``pr`` (``namespace/name``), what
        ``GET /debug/plans?pr=`` shows: that request's document (:func:`report.explain_document`), None when the
        controller knows no such request."""
        now = self.clock.now()
        backed_off = self.backoffs.active(now)
        if pr is None:
            return debug_document(dry_run=self.settings.dry_run, passes=self.passes, last_pass=self.last_pass,
                                  plans=self.plans, scale_downs=self.scaledowns.history, backed_off=backed_off,
                                  states=self.states)
        st = self.states.get(pr)
        if st is None:
            return None
        return explain_document(st, self.view, self.settings, now, passes=self.passes, last_pass=self.last_pass,
                                decided_at=self.plans.get(pr, {}).get("at"), backed_off=backed_off)
