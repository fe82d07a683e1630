"""The runtime around the pass: reflectors in, one pass per batch of change, effects started as guarded tasks.

Life of the loop (DESIGN decisions 7, 12, 14):

1. Start the reflectors (Nodes, Pods, and each registered demand source's, :mod:`.registry`) and wait until every
   one has finished its first LIST: nothing is decided on a partial view. A standby replica stops here until it
   holds the leader lease, then lists again (its watches may be behind).
2. Reconcile every recorded scale-up intent with the provider before planning anything new (:mod:`.recovery`):
   release what an intent got that is no longer whole or whose request is gone, and units no source knows.
   An ``obtaining`` intent is resumed, with its own tokens, by the first pass.
3. Then loop: wait for a change or a due time, and run one pass (:func:`.passes.run_pass`) on the state the
   :class:`~.core.Core` holds, with the objects that changed and the results of the tasks that ended; start the
   effects it returns. No pass runs while a watch is stale (:meth:`Controller._stale_watches`).

Reflector handlers only note the names of the objects that changed; everything else happens in the pass.

What a restart rebuilds from the cluster and the cloud, and what it resets because a fresh start is safe, is
the README's "What survives a restart".
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Collection, Iterator, Sequence
from typing import Any, overload

from gangscale.clock import Clock, SystemClock, wait_event
from gangscale.controller.actuator import Actuator, always
from gangscale.controller.core import RESYNC, Core, Effect, Hooks
from gangscale.controller.demand.registry import demand_sources
from gangscale.controller.effects import Effects
from gangscale.controller.health import Leadership, liveness, readiness, stale_watches
from gangscale.controller.logic.projections import Node, Pod
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.view import BOUND_PODS, ClusterView, NodeInfo, PodInfo, parse_pod
from gangscale.controller.passes import Changes, apply_changes, run_pass
from gangscale.controller.startup import recover, start_provider
from gangscale.controller.tasks import Tasks
from gangscale.kube.projection import Projection
from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.resources import NODES, PODS
from gangscale.kube.transport import KubeHTTP
from gangscale.kube.writes import EventRecorder
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.observe.metrics import Metrics
from gangscale.providers.base import NodePoolProvider
from gangscale.sources.raycluster import WORKER_PODS, RayWorker, worker_pod

log = logging.getLogger(__name__)

#: How often a loop that stopped deciding on a stale cache looks at the watches again.
STALE_RECHECK = 1.0
#: At most this long with the garbage collector off while the caches fill (:func:`growing_heap`): twice the sync
#: of 150,000 pods on a 2-core machine.
HEAP_GROWTH_BOUND = 60.0


@contextlib.contextmanager
def growing_heap(tune: bool) -> Iterator[None]:
    """With ``tune`` (the process is the controller's own, ``gangscale run``: freezing the heap of a process that
    hosts other things, a test run's many controllers, would keep their garbage for good): while the caches fill
    (the first lists, a new leader's lists, the first pass that builds the view), the cyclic garbage collector is
    off: what is made is records and indices, without cycles, and each full collection over a heap that grows by a
    million objects walks all of it (11.7 → 9.8 s of CPU to sync 60,000 pods). Afterwards what the caches hold is
    frozen out of later collections (``gc.freeze``), so that a full collection in a pass does not walk every record
    of the cluster (at 60,000 pods a planning pass took 100-250 ms in such a collection, against 25 ms at most)."""
    if not tune:
        yield
        return
    collecting = gc.isenabled()
    gc.disable()
    # Not for ever: a first list that cannot finish (the API server down at start) must not leave the collector off
    # while failed requests pile up their garbage.
    back_on = asyncio.get_running_loop().call_later(HEAP_GROWTH_BOUND, gc.enable) if collecting else None
    try:
        yield
    finally:
        if back_on is not None:
            back_on.cancel()
            gc.enable()
        gc.collect()
        gc.freeze()


class Controller:
    def __init__(self, http: KubeHTTP, provider: NodePoolProvider, pools: Sequence[NodePool], *,
                 settings: Settings | None = None, policy: Policy | None = None, clock: Clock | None = None,
                 metrics: Metrics | None = None, leader: Leadership | None = None, tune_gc: bool = False) -> None:
        self.http, self.provider = http, provider
        #: The process is this controller's own: the garbage collector is tuned for its caches (:func:`growing_heap`).
        self.tune_gc = tune_gc
        #: The leader lease, when several replicas run: nothing is decided or done before it is held, and every
        #: provider call and status write is fenced by it (``Actuator.fence``).
        self.leader = leader
        self.settings = s = settings or Settings()
        self.clock = clock or SystemClock()
        self.metrics = metrics or Metrics(dry_run=s.dry_run)
        self.metrics.on_render = self._export_gauges
        self.actuator = Actuator(provider, self.clock, self.metrics, {p.name: p for p in pools},
                                 attempts=s.provider_attempts, fence=leader.valid if leader is not None else always)
        self.effects = Effects(self.actuator, EventRecorder(http), self.clock, dry_run=s.dry_run)
        self.wakeup = asyncio.Event()
        self.tasks = Tasks(on_done=self._task_done)
        self.core = Core(pools, self.actuator, self.effects, ClusterView(provider.node_ref, provider.claim),
                         claim=provider.claim, settings=s, policy=policy or Policy(), clock=self.clock,
                         metrics=self.metrics, hooks=Hooks(self.wakeup.set, self.tasks.run_background))
        self.core.add_sources(demand_sources(http, self.core))
        # Records, not objects (the view's module docstring): what a decision reads of each node and pod.
        # Only the fields they read are decoded (logic/projections.py).
        self.nodes = Reflector(http, NODES, transform=self.core.view.node_record, projection=Projection(Node))
        self.pods = Reflector(http, PODS, field_selector=BOUND_PODS, transform=parse_pod, projection=Projection(Pod))
        self.nodes.add_handler(self._on_node)
        provider.set_reclassify(self._reclassify)
        self.pods.add_handler(self._on_pod)
        self.reflectors: tuple[Reflector[Any], ...] = (self.nodes, self.pods)
        self._changed_nodes: set[str] = set()
        self._changed_pods: set[tuple[str, str]] = set()
        self._changed_workers: set[tuple[str, str]] = set()
        #: Ray worker pods, pending ones too (the Ray source counts the replicas that exist): only when Ray is on.
        self.workers: Reflector[RayWorker] | None = None
        if s.ray:
            self.workers = Reflector(http, PODS, label_selector=WORKER_PODS, transform=worker_pod,
                                     projection=Projection(Pod))
            self.workers.add_handler(self._on_worker)
            self.reflectors += (self.workers,)
        self._settled = asyncio.Event()
        #: Every reflector has listed (a standby replica is synced but not ready to act).
        self.synced = self.ready = False
        self.passes, self.pass_seconds = 0, 0.0
        self.last_pass: float | None = None
        self._stale_told: list[str] = []
        self._failed: BaseException | None = None

    def _task_done(self) -> None:
        self.wakeup.set()
        self._settled.set()

    def _on_node(self, event: ReflectorEvent[NodeInfo]) -> None:
        self._changed_nodes.add(event.key[1])
        self.wakeup.set()

    def _reclassify(self, names: Collection[str]) -> None:
        """The provider now recognises these nodes differently (:meth:`NodePoolProvider.set_reclassify`): their
        records are made again from the labels they keep, and the next pass applies them as changes."""
        for name in names:
            if (old := self.nodes.get("", name)) is not None:
                self.nodes.cache[("", name)] = self.core.view.reclassified(old)
                self._changed_nodes.add(name)
        self.wakeup.set()

    def _on_pod(self, event: ReflectorEvent[PodInfo]) -> None:
        self._changed_pods.add(event.key)
        self.wakeup.set()

    def _on_worker(self, event: ReflectorEvent[RayWorker]) -> None:
        self._changed_workers.add(event.key)
        self.wakeup.set()

    # -- lifecycle --------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        try:
            for source in self.core.sources.values():
                self.reflectors = (*self.reflectors, *await source.start())
            for reflector in self.reflectors:
                self.tasks.run_background(reflector.run(), f"reflector {reflector.resource.plural}")
            with growing_heap(self.tune_gc):
                await asyncio.gather(*(r.synced.wait() for r in self.reflectors))
            self.synced = True
            if self.leader is not None and not self.leader.leading.is_set():
                log.info("standby: the leader lease is held by %s", self.leader.holder or "nobody yet")
                await self.leader.leading.wait()
                log.info("leading: taking over (recorded scale-ups of earlier leaders are adopted)")
                # A standby's watches may be behind (dropped, backing off): nothing is decided on a stale cache
                # (found by hack/chaos.py, seed 4190: booked nodes the cache had not seen yet were taken as removed).
                with growing_heap(self.tune_gc):
                    await asyncio.gather(*(reflector.relist() for reflector in self.reflectors))
            await start_provider(self.provider, self.settings, self.clock)
            with growing_heap(self.tune_gc):
                await self._recover()
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

    async def _recover(self) -> None:
        self.core.pass_now = now = self.clock.now()
        apply_changes(self.core, self._changes())
        await recover(self.core, self.actuator, now)
        self._start(self.core.take_outbox())

    async def aclose(self) -> None:
        for source in self.core.sources.values():
            await source.aclose()
        await self.tasks.aclose()

    def _stale_watches(self) -> list[str]:
        return stale_watches(self.reflectors, self.settings.api_unreachable_timeout)

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

    # -- the pass ---------------------------------------------------------------------------------------------------

    def _changes(self) -> Changes:
        nodes, self._changed_nodes = self._changed_nodes, set()
        pods, self._changed_pods = self._changed_pods, set()
        workers, self._changed_workers = self._changed_workers, set()
        return Changes({name: self.nodes.get("", name) for name in nodes}, {key: self.pods.get(*key) for key in pods},
                       {key: self.workers.get(*key) for key in workers} if self.workers is not None else {})

    def _start(self, effects: list[Effect]) -> None:
        for effect in effects:
            self.tasks.spawn(effect.coro, effect.name, effect.then)

    def run_guarded(self) -> None:
        started = time.perf_counter()
        self.wakeup.clear()
        try:
            self._start(run_pass(self.core, self._changes(), self.tasks.take_results(), self.clock.now()))
        except Exception:
            # One bad pass must not stop the controller: log it and try again at the next wake-up.
            log.exception("pass failed")
            self._start(self.core.take_outbox())
        self.passes += 1
        spent = time.perf_counter() - started  # real time spent: a metric, not a planning input
        self.pass_seconds += spent
        self.last_pass = self.clock.now()
        self.metrics.pass_finished(self.last_pass, spent)  # the clock is unix time in production (SystemClock)
        self._settled.set()

    async def wait_for_work(self) -> None:
        """Until something changed or is due (requests held for the next batch are due at its deadline)."""
        if not self.wakeup.is_set():
            await wait_event(self.clock, self.wakeup, self.core.next_time(self.core.pass_now))

    @property
    def quiet(self) -> bool:
        """Nothing to do and nothing under way: no change or result waiting, no task running, nothing due."""
        return not self.busy_with()

    def busy_with(self) -> list[str]:
        """What keeps the controller from being :attr:`quiet` (for diagnostics)."""
        due = self.core.queue.next_time()
        running = self.tasks.running()
        reasons = [
            ("not ready", not self.ready), ("woken", self.wakeup.is_set()),
            (f"{len(running)} task(s): {sorted(t.get_name() for t in running)[:3]}", bool(running)),
            (f"{len(self.tasks.results)} result(s)", bool(self.tasks.results)),
            ("dirty keys", self.core.queue.has_dirty), (f"due at {due}", due is not None and due <= self.clock.now())]
        return [text for text, busy in reasons if busy]

    async def wait_quiet(self) -> None:
        """Until :attr:`quiet`. Quiet only changes when a pass or a task ends, which sets ``_settled``."""
        while not self.quiet:
            self._settled.clear()
            await self._settled.wait()

    # -- health and reporting ---------------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        return liveness(failed=self._failed, ready=self.ready, last_pass=self.last_pass, now=self.clock.now(),
                        max_silence=max(self.settings.max_inactivity, RESYNC * 2))

    def is_ready(self) -> tuple[bool, str]:
        return readiness(api_silent=time.monotonic() - self.http.last_ok,
                         api_timeout=self.settings.api_unreachable_timeout, stale=self._stale_watches(),
                         ready=self.ready, synced=self.synced, leader=self.leader,
                         not_listed=[r.resource.plural for r in self.reflectors if not r.synced.is_set()])

    def _export_gauges(self) -> None:
        """The gauges, computed when they are read (``Metrics.on_render``)."""
        bound = self.settings.api_unreachable_timeout
        self.metrics.set_watches({r.resource.plural: r.trouble(bound) is None for r in self.reflectors})
        self.core.export_gauges(leading=self.leader is None or self.leader.leading.is_set(), now=self.clock.now())

    @overload
    def debug_plans(self) -> dict[str, Any]: ...

    @overload
    def debug_plans(self, pr: str) -> dict[str, Any] | None: ...

    def debug_plans(self, pr: str | None = None) -> dict[str, Any] | None:
        """What ``GET /debug/plans`` shows; with ``pr`` (``namespace/name``), what ``GET /debug/plans?pr=`` shows."""
        return self.core.debug_document(pr, passes=self.passes, last_pass=self.last_pass, now=self.clock.now())
