"""The controller: reflectors in, one planning pass per batch, provider calls and status writes out.

Life of the loop (DESIGN decisions 7, 12, 14):

1. Start the reflectors (ProvisioningRequests, PodTemplates, Nodes, Pods) and wait until every one has
   finished its first LIST: nothing is decided on a partial view.
2. Reconcile every recorded scale-up intent with the provider before planning anything new: resume an
   ``obtaining`` intent with its own tokens (the provider makes exactly the units of the intent still
   missing), look up what an ``obtained`` one got (not whole any more: released and re-planned), count the
   nodes of a Provisioned request's scale-up as booked nodes seen, and release units whose PR no longer
   exists while they were still coming up.
3. Then loop: wait for an event (batched: ~1 s idle, ~10 s at most) or the next deadline (a retry, a booking
   TTL, a provisioning deadline, a scale-down, a pool backoff ending), and run one pass (``passes.py``).

Side effects run in guarded background tasks (every task is kept, its failure logged, all cancelled on
exit), so a slow cloud call never stalls planning. ``--dry-run`` plans everything and writes nothing.

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
import contextlib
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from gangscale.clock import Clock, SystemClock, rfc3339, wait_event
from gangscale.controller import conditions as C
from gangscale.controller.actuator import Actuator, ScaleUpFailed
from gangscale.controller.backoffs import PoolBackoffs
from gangscale.controller.cluster import ClusterView
from gangscale.controller.passes import Pass
from gangscale.controller.raysource import RaySource
from gangscale.controller.raystate import RayGangState
from gangscale.controller.record import OBTAINED, OBTAINING, Record, from_status
from gangscale.controller.requests import Phase, RequestState, phase, served
from gangscale.controller.settings import Settings
from gangscale.controller.transitions import Transitions
from gangscale.controller.verify import scale_up_problems
from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.resources import NODES, PODS, PODTEMPLATES, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.kube.writes import EventRecorder, apply_provreq_status, delete_provreq
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.observe.metrics import Metrics
from gangscale.providers.base import TOKEN_LABEL, NodePoolProvider
from gangscale.sources.provreq import PROVISIONED_WHEN, parse

log = logging.getLogger(__name__)

#: A pass runs at least this often even when nothing happens (a safety net, as informers resync).
RESYNC = 60.0


class Controller:
    def __init__(self, http: KubeHTTP, provider: NodePoolProvider, pools: Sequence[NodePool], *,
                 settings: Settings | None = None, policy: Policy | None = None, clock: Clock | None = None,
                 metrics: Metrics | None = None) -> None:
        self.http, self.provider = http, provider
        self.settings = settings or Settings()
        self.clock = clock or SystemClock()
        self.metrics = metrics or Metrics(dry_run=self.settings.dry_run)
        self.pools = {pool.name: pool for pool in pools}
        self.policy = policy or Policy()
        s = self.settings
        self.backoffs = PoolBackoffs(s.pool_backoff_initial, s.pool_backoff_max, s.pool_backoff_reset)
        self.transitions = Transitions(s, self.backoffs, self.pools)
        self.actuator = Actuator(provider, self.clock, self.metrics, self.pools, attempts=s.provider_attempts)
        self.recorder = EventRecorder(http)
        self.prs = Reflector(http, PROVREQS)
        self.templates = Reflector(http, PODTEMPLATES)
        self.nodes = Reflector(http, NODES)
        self.pods = Reflector(http, PODS)
        self.reflectors: tuple[Reflector, ...] = (self.prs, self.templates, self.nodes, self.pods)
        for reflector in self.reflectors:
            reflector.add_handler(self._on_event)
        self.ray = RaySource(self)
        self.states: dict[str, RequestState] = {}
        self.view = ClusterView()
        self.idle_since: dict[str, float] = {}
        #: Units being removed by scale-down, and nodes of scale-ups being rolled back: not capacity any more.
        self.releasing: set[str] = set()
        self.leaving: set[str] = set()
        #: Tokens of scale-up tasks running now, even for a request deleted meanwhile (its units are half made).
        self.obtaining: set[str] = set()
        self.kick = asyncio.Event()
        self.ready = False
        #: Set with ``kick`` when the event is progress of decided work (skips the batch window).
        self.progress = False
        self.passes = 0
        self.pass_seconds = 0.0
        self.last_pass: float | None = None
        self.pass_runner = Pass(self)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._write_slots = asyncio.Semaphore(s.concurrency)
        self._failed: BaseException | None = None

    # -- tasks ----------------------------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, progress: bool = True) -> asyncio.Task[Any]:
        """A guarded background task: kept until done, its failure logged, cancelled when the loop stops.

        Its end wakes the loop; with ``progress`` the next pass skips the batch window."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task %s failed", t.get_name(), exc_info=t.exception())
            self.progress = self.progress or progress
            self.kick.set()

        task.add_done_callback(done)
        return task

    async def aclose(self) -> None:
        await self.ray.gcs.aclose()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- health -------------------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        if self._failed is not None:
            return False, f"the loop stopped: {self._failed}"
        if self.ready and self.last_pass is not None and \
                self.clock.now() - self.last_pass > max(self.settings.max_inactivity, RESYNC * 2):
            return False, f"no pass since {rfc3339(self.last_pass)}"
        return True, "ok"

    def is_ready(self) -> tuple[bool, str]:
        if self.ready:
            return True, "ok"
        waiting = [r.resource.plural for r in self.reflectors if not r.synced.is_set()]
        return False, ("waiting for the first list of " + ", ".join(waiting)) if waiting else \
            "reconciling recorded scale-ups"

    # -- the loop -------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        try:
            ray = await self.ray.detect()
            if ray is not None:
                ray.add_handler(self._on_event)
                self.reflectors = (*self.reflectors, ray)
            for reflector in self.reflectors:
                self.spawn(reflector.run(), f"reflector {reflector.resource.plural}")
            await asyncio.gather(*(r.synced.wait() for r in self.reflectors))
            await self.provider.start()
            self.ray.recover()
            await self.reconcile()
            self.ready = True
            log.info("synced and reconciled; serving classes %s%s", ", ".join(self.settings.classes),
                     " (dry run)" if self.settings.dry_run else "")
            while True:
                await self.pass_guarded()
                await self.wait_for_work()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            await self.aclose()

    async def pass_guarded(self) -> None:
        started = time.perf_counter()
        try:
            await self.pass_runner.run()
        except Exception:
            # One bad pass must not stop the controller: log it and try again at the next wake-up.
            log.exception("planning pass failed")
        self.passes += 1
        self.pass_seconds += time.perf_counter() - started  # real time spent, for benchmarks
        self.last_pass = self.clock.now()

    async def wait_for_work(self) -> None:
        # Deadlines are absolute: one that passed while the pass ran (or while a test moved the clock) wakes
        # the loop at once instead of being re-armed from a later "now".
        ran_at = self.pass_runner.ran_at
        kicked = await wait_event(self.clock, self.kick, min(self.pass_runner.next_wake(ran_at), ran_at + RESYNC))
        # The batch window gathers new demand (Karpenter-style); progress of work already decided (a node
        # turned Ready, a provider call returned) needs no gathering and is handled at once.
        if kicked and self.settings.batch_idle > 0 and not self.progress:
            first = self.clock.now()
            while True:
                self.kick.clear()
                deadline = min(self.clock.now() + self.settings.batch_idle, first + self.settings.batch_max)
                if not await wait_event(self.clock, self.kick, deadline) or self.progress:
                    break
        self.kick.clear()
        self.progress = False

    def _on_event(self, event: ReflectorEvent) -> None:
        self.kick.set()
        obj = event.obj
        if obj.get("kind") == "Node" and self._awaited(obj):
            self.progress = True
        if obj.get("kind") != "ProvisioningRequest" and "provisioningClassName" not in (obj.get("spec") or {}):
            return
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        st = self.states.get(uid)
        if event.type == "DELETED" and st is not None:
            self.forget(st)
        elif event.type == "ADDED" and st is None:
            pr = parse(obj)
            if served(pr, self.settings.classes, self.settings.processor_instance):
                st = self.states[uid] = RequestState.from_object(pr)
                if not st.conditions.get(C.ACCEPTED):
                    # Accepted at once, outside the batch window: the requester learns in milliseconds that
                    # gangscale owns the request.
                    st.set(C.ACCEPTED, True, C.R_ACCEPTED, C.M_ACCEPTED, rfc3339(self.clock.now()))
                    self.spawn(self.sync(st), f"accept {st.key}", progress=False)

    def _awaited(self, node: dict[str, Any]) -> bool:
        """Could a scale-up in progress be waiting for this node? (Cheap: called for every node event.)"""
        return TOKEN_LABEL in ((node.get("metadata") or {}).get("labels") or {})

    def forget(self, st: RequestState) -> None:
        """The PR (or RayCluster) is gone. Units still coming up for it are released; finished ones stay as
        ordinary nodes."""
        st.deleted = True
        self.states.pop(st.pr.uid, None)
        if phase(st) is Phase.PROVISIONING and not st.busy and st.record is not None:
            self.spawn(self.release(st, f"its {self.kind(st)} was deleted"), f"release {st.key}")
        if phase(st) is Phase.BOOKED:
            self.capacity_freed()

    def capacity_freed(self) -> None:
        """Capacity was handed back: requests waiting out a retry backoff may be planned at once."""
        for st in self.states.values():
            if phase(st) is Phase.PENDING:
                st.retry_at = None
        self.kick.set()

    # -- state from the caches ----------------------------------------------------------------------------------

    def refresh_states(self) -> None:
        live: set[str] = set()
        for obj in self.prs.cache.values():
            pr = parse(obj)
            if not served(pr, self.settings.classes, self.settings.processor_instance):
                continue
            live.add(pr.uid)
            st = self.states.get(pr.uid)
            if st is None:
                self.states[pr.uid] = RequestState.from_object(pr)
            else:
                st.pr = pr
        for uid in set(self.states) - live:
            if not isinstance(self.states[uid], RayGangState):  # the Ray source keeps those
                self.forget(self.states[uid])

    async def reconcile(self) -> None:
        """Before the first plan: settle every recorded intent with the provider (DESIGN decision 12)."""
        self.refresh_states()
        self.view.refresh(self.nodes.cache.values(), self.pods.cache.values())
        known: set[str] = set()
        for obj in self.prs.cache.values():
            record = from_status(obj.get("status") or {})
            if record is not None:
                known.update(record.tokens)
        for st in self.states.values():
            if st.record is not None:
                known.update(st.record.tokens)
        for st in sorted(self.states.values(), key=lambda s: s.key):
            if phase(st) is Phase.BOOKED and st.record is not None:
                await self.recover_booked(st)
            if phase(st) is not Phase.PROVISIONING or st.record is None:
                continue
            if st.record.phase == OBTAINING:
                log.info("resuming the recorded scale-up of %s (%s)", st.key, st.record.tokens)
                st.task = self.spawn(self.scale_up(st, resume=True), f"scale-up {st.key}")
            elif st.record.phase == OBTAINED:
                await self.recover_obtained(st)
        await self.release_orphans(known)

    async def recover_obtained(self, st: RequestState) -> None:
        """A scale-up whose units were all granted before the restart: the provider must still have every one of
        them, whole; otherwise what is left is released and the request re-planned."""
        assert st.record is not None
        for step in st.record.steps:
            got = await self.provider.lookup(step.token)
            if got is not None:
                st.obtained[step.token] = got
        problems = scale_up_problems(st.record.steps, st.obtained, self.pools)
        if problems:
            why = (f"after a restart the provider no longer has every unit of this scale-up ({'; '.join(problems)}); "
                   "released the rest and re-planning")
            st.set(C.PROVISIONED, False, C.R_NOT_FOUND, why, rfc3339(self.clock.now()))
            await self.release(st, why)

    async def recover_booked(self, st: RequestState) -> None:
        """A request Provisioned before the restart had every node of its scale-up Ready then: each counts as a
        booked node seen, so one removed while gangscale was down revokes the booking (``CapacityRevoked``)
        instead of going unnoticed. Not with ``provisionedWhen: requested``, whose nodes may never have
        registered before Provisioned=True."""
        assert st.record is not None
        if st.pr.parameters.get(PROVISIONED_WHEN, "").lower() == "requested":
            return
        for step in st.record.steps:
            got = await self.provider.lookup(step.token)
            if got is not None:
                st.booking_seen.update(got.node_names)

    async def release_orphans(self, known: set[str]) -> None:
        """Units that were coming up for a PR deleted while gangscale was down."""
        orphans: dict[tuple[str, str], set[str]] = {}
        for name, info in self.view.nodes.items():
            if info.token and info.token not in known and info.pool and not info.state.ready \
                    and self.view.empty(name):
                orphans.setdefault((info.pool, info.token), set()).add(info.unit or name)
        for (pool, token), units in sorted(orphans.items()):
            log.warning("releasing %d unit(s) of pool %s left coming up by a deleted request (token %s)",
                        len(units), pool, token)
            try:
                await self.actuator.release(pool, sorted(units), token)
            except Exception:
                log.exception("could not release orphaned units of pool %s", pool)

    # -- side effects ------------------------------------------------------------------------------------------

    async def scale_up(self, st: RequestState, *, resume: bool = False) -> None:
        """Record the intent, obtain every unit or none, then say so on the PR."""
        record = st.record
        assert record is not None
        if not resume and not await self.sync(st):
            st.record = None  # the intent is not on the PR: the provider must not be called
            st.retry_at = self.clock.now() + self.settings.retry_initial
            return
        self.obtaining.update(record.tokens)
        try:
            await self._obtain(st, record)
        finally:
            self.obtaining.difference_update(record.tokens)

    async def _obtain(self, st: RequestState, record: Record) -> None:
        try:
            st.obtained = await self.actuator.obtain_all(record.steps, record.deadline)
        except ScaleUpFailed as exc:
            self.pass_runner.scale_up_failed(st, exc)
        else:
            for step in record.steps:
                self.metrics.scaled(step.pool, "up", step.units)
            st.record = record.with_phase(OBTAINED)
            self.transitions.obtained(st, self.clock.now())
        if not st.deleted:
            await self.sync(st)
            await self.flush_events(st)
        if st.deleted:
            # Deleted at any point of the scale-up (forget() leaves a busy request to its task): hand back
            # whatever was obtained.
            await self.release(st, f"its {self.kind(st)} was deleted while the units were obtained")

    async def release(self, st: RequestState, why: str, steps: Sequence[Any] | None = None,
                      nodes: Sequence[str] = ()) -> None:
        steps = tuple(steps if steps is not None else (st.record.steps if st.record else ()))
        nodes = tuple(nodes) or tuple(name for got in st.obtained.values() for name in got.node_names)
        if not steps:
            return
        self.leaving.update(nodes)
        try:
            log.info("releasing the scale-up of %s: %s", st.key, why)
            released = await self.actuator.release_steps(steps)
        finally:
            self.leaving.difference_update(nodes)
        if not st.deleted:
            # Only the record of the scale-up released here: the request may have been re-planned meanwhile.
            if st.record is not None and set(st.record.tokens) <= {step.token for step in steps}:
                st.record, st.obtained = None, {}
            await self.sync(st)
        log.info("released %d unit(s) of %s", released, st.key)

    async def sync(self, st: RequestState) -> bool:
        """Apply the request's status as gangscale sees it, if it changed; False if it could not be written."""
        async with st.lock:
            body = st.status_body()
            key = repr(body)
            if key == st.applied:
                return True
            now = self.clock.now()
            if not self.settings.dry_run:
                try:
                    async with self._write_slots:
                        if isinstance(st, RayGangState):
                            await self.ray.write(st)
                        else:
                            await apply_provreq_status(self.http, st.pr.namespace, st.pr.name, body, uid=st.pr.uid)
                except ApiError as exc:
                    if exc.not_found or exc.conflict:
                        st.deleted = True
                    else:
                        log.warning("could not write the status of %s: %s", st.key, exc)
                    return False
            self.observe_written(st, now)
            st.applied = key
            return True

    def observe_written(self, st: RequestState, now: float) -> None:
        before = st.reported
        st.reported = {ctype: (cond.status, cond.reason) for ctype, cond in st.conditions.items()}
        for ctype, cond in st.conditions.items():
            if before.get(ctype) != (cond.status, cond.reason):
                self.metrics.outcome(st.pr.class_name, cond.reason)
                if ctype not in before:
                    self.metrics.condition_latency(st.pr.class_name, ctype, now - st.pr.created)
                log.info("%s: %s=%s (%s) %s", st.key, ctype, cond.status, cond.reason, cond.message,
                         extra={"pr": st.key, "condition": ctype, "reason": cond.reason,
                                "dry_run": self.settings.dry_run})

    async def flush_events(self, st: RequestState) -> None:
        events, st.events = st.events, []
        if isinstance(st, RayGangState):
            for _, reason, _ in events:
                self.metrics.ray_event(st.pr.namespace, st.pr.name, reason)
        if self.settings.dry_run or st.deleted:
            return
        for event_type, reason, message in events:
            await self.recorder.record(st.pr.obj, event_type, reason, message, self.clock.now())

    async def delete(self, st: RequestState) -> None:
        if self.settings.dry_run or isinstance(st, RayGangState):
            return
        try:
            await delete_provreq(self.http, st.pr.namespace, st.pr.name, st.pr.uid)
            log.info("deleted %s: its outcome is older than %ss", st.key, self.settings.terminal_ttl)
        except ApiError as exc:
            log.warning("could not delete %s: %s", st.key, exc)

    @staticmethod
    def kind(st: RequestState) -> str:
        return "RayCluster" if isinstance(st, RayGangState) else "ProvisioningRequest"

    def debug_plans(self) -> dict[str, Any]:
        """What ``GET /debug/plans`` shows: the last pass's decisions, recent scale-downs, every request's phase."""
        now = self.clock.now()
        return {
            "dryRun": self.settings.dry_run,
            "passes": self.passes,
            "lastPass": rfc3339(self.last_pass) if self.last_pass is not None else None,
            "decisions": self.pass_runner.plans,
            "scaleDowns": self.pass_runner.scale_downs,
            "backedOffPools": {pool: {"until": rfc3339(b.until), "reason": b.reason}
                               for pool, b in self.backoffs.active(now).items()},
            "requests": [{"request": st.key, "class": st.pr.class_name, "phase": phase(st).value,
                          "conditions": {t: f"{c.status}/{c.reason}: {c.message}" for t, c in st.conditions.items()},
                          "retryAt": rfc3339(st.retry_at) if st.retry_at else None}
                         for st in sorted(self.states.values(), key=lambda s: s.key)],
        }
