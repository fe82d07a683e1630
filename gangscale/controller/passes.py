"""One planning pass: move every request on, plan the pending ones together, act, write, scale down.

Order inside a pass:

1. Each served request moves on by phase (``transitions``): booked ones may end (consumed, TTL, revoked),
   provisioning ones may become Provisioned or time out, pending ones are accepted (or expire).
2. Pending requests become gangs (templates from the cache, or a live GET for one the cache has not seen;
   the owning Workload's ``spec.priority``). A request that cannot become a gang fails (``FailedToCreatePods``).
3. Requests that are Provisioned but whose booking was lost with a restart are re-booked first, on free
   capacity only, so nothing else takes their nodes.
4. ``plan(snapshot, gangs, now)`` decides for all pending gangs at once; each decision is applied.
5. Units of managed pools that stayed empty long enough are released.
6. Every changed status is written (concurrently, at most ``concurrency`` at once), then the events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gangscale.clock import parse_rfc3339, rfc3339
from gangscale.controller import conditions as C
from gangscale.controller.actuator import ScaleUpFailed
from gangscale.controller.bookings import consumed_on, live_bookings, planned_booking
from gangscale.controller.raystate import RayGangState
from gangscale.controller.rebook import rebuilt_booking
from gangscale.controller.requests import Phase, RequestState, phase
from gangscale.controller.scaledown import broken_units, next_due, plan_scale_down
from gangscale.controller.transitions import WARNING, Actions
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import PODTEMPLATES, WORKLOADS
from gangscale.model.decision import Decision, Outcome
from gangscale.model.gang import Gang
from gangscale.model.snapshot import Booking, PoolState, Snapshot
from gangscale.planner import explain, plan, summarize
from gangscale.providers.base import ErrorClass
from gangscale.sources.provreq import CHECK_CAPACITY_CLASSES, PodSetError, build_gang, template_names
from gangscale.sources.raycluster import (
    RayClusterError,
    WorkerPod,
    bound_pods,
    parse_raycluster,
    workers_by_cluster,
)

if TYPE_CHECKING:
    from gangscale.controller.loop import Controller

JSON = dict[str, Any]
log = logging.getLogger(__name__)


class Pass:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        #: The latest decision per request, kept until it is re-planned or the request is gone.
        self.latest: dict[str, JSON] = {}
        self.scale_downs: list[JSON] = []
        #: (namespace, workload) -> (spec.priority, the RayCluster owning the Workload if any).
        self._workloads: dict[tuple[str, str], tuple[int, str | None]] = {}
        self._workers: dict[tuple[str, str], list[WorkerPod]] | None = None
        #: Clock time of the last pass: what was due by then, it handled.
        self.ran_at = ctl.clock.now()

    # -- the pass ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        ctl = self.ctl
        started = time.perf_counter()
        now = self.ran_at = ctl.clock.now()
        self._workers = None
        ctl.refresh_states()
        ctl.view.refresh(ctl.nodes.cache.values(), ctl.pods.cache.values())
        ctl.ray.refresh(now)
        acts = Actions()
        pending = self.advance(now, acts)
        gangs = await self.gangs(pending, now)
        await self.rebook(now)
        snapshot = self.snapshot(now)
        decisions = plan(snapshot, gangs.values(), now, ctl.policy)
        by_key = {st.key: st for st in pending}
        for decision in decisions:
            ctl.transitions.decided(by_key[decision.gang], decision, now, acts)
        self.record_plans(decisions, by_key, now)
        self.scale_down(now, snapshot, decisions)
        await self.act(acts)
        await self.write_all()
        ctl.metrics.plan_pass(time.perf_counter() - started, len(gangs))
        self.export(now)

    def advance(self, now: float, acts: Actions) -> list[RequestState]:
        ctl, tr = self.ctl, self.ctl.transitions
        pending = []
        for st in sorted(ctl.states.values(), key=lambda s: s.key):
            if st.busy or st.deleted:
                continue
            match phase(st):
                case Phase.DONE:
                    tr.done(st, now, acts)
                case Phase.BOOKED:
                    tr.booked(st, now, ctl.view, acts)
                case Phase.PROVISIONING if st.record is not None and st.record.phase == "obtaining":
                    st.task = ctl.spawn(ctl.scale_up(st, resume=True), f"scale-up {st.key}")
                case Phase.PROVISIONING:
                    tr.provisioning(st, now, ctl.view, acts)
                case Phase.PENDING:
                    if tr.pending(st, now):
                        pending.append(st)
        if acts.capacity_freed:
            for st in pending:
                st.retry_at = None
        return pending

    async def act(self, acts: Actions) -> None:
        ctl = self.ctl
        for st in acts.scale_up:
            st.task = ctl.spawn(ctl.scale_up(st), f"scale-up {st.key}")
        for st, steps, nodes, why in acts.release:
            ctl.leaving.update(nodes)
            ctl.spawn(ctl.release(st, why, steps, nodes), f"release {st.key}")
        for st in acts.delete:
            ctl.spawn(ctl.delete(st), f"delete {st.key}")
        if acts.capacity_freed:
            ctl.capacity_freed()

    async def write_all(self) -> None:
        ctl = self.ctl
        todo = [st for st in ctl.states.values() if not st.busy and (st.events or st.body_key() != st.applied)]

        async def one(st: RequestState) -> None:
            await ctl.sync(st)
            await ctl.flush_events(st)

        await asyncio.gather(*(one(st) for st in todo))

    # -- gangs --------------------------------------------------------------------------------------------------

    async def gangs(self, pending: list[RequestState], now: float) -> dict[str, Gang]:
        results = await asyncio.gather(*(self.gang_of(st) for st in pending))
        gangs: dict[str, Gang] = {}
        for st, result in zip(pending, results, strict=True):
            if isinstance(result, Gang):
                st.gang = gangs[st.key] = result
                continue
            st.gang = None
            st.set(C.FAILED, True, C.R_FAILED_TO_CREATE_PODS, result, rfc3339(now))
            st.event(WARNING, C.R_FAILED_TO_CREATE_PODS, result)
        return gangs

    async def gang_of(self, st: RequestState, *, may_scale: bool | None = None) -> Gang | str:
        """The request's gang, or the reason it has none."""
        if isinstance(st, RayGangState):
            if st.gang is None:
                return "the gang's worker groups are gone from the RayCluster"
            return st.gang if may_scale is None else replace(st.gang, may_scale=may_scale)
        ctl, pr = self.ctl, st.pr
        found: dict[str, JSON | None] = {}
        for name in dict.fromkeys(template_names(pr)):
            found[name] = ctl.templates.get(pr.namespace, name) or await self.live_template(pr.namespace, name)
        priority, raycluster = await self.workload(pr.namespace, pr.workload_owner())
        scale = pr.class_name not in CHECK_CAPACITY_CLASSES if may_scale is None else may_scale
        try:
            gang = build_gang(pr, found.get, priority=priority, may_scale=scale)
        except PodSetError as exc:
            return str(exc)
        return self.less_bound(gang, pr.namespace, pr.name, raycluster) if raycluster else gang

    def less_bound(self, gang: Gang, namespace: str, pr_name: str, raycluster: str) -> Gang:
        """A PR of a RayCluster's Workload (an elastic slice counts every pod the cluster should have): the
        replicas already on nodes keep their capacity, so only the rest is provisioned (decision 10)."""
        ray = self.ctl.ray.reflector
        obj = ray.get(namespace, raycluster) if ray is not None else None
        if obj is None:
            return gang
        try:
            cluster = parse_raycluster(obj)
        except RayClusterError:
            return gang
        if self._workers is None:
            self._workers = workers_by_cluster(self.ctl.pods.cache.values())
        less = bound_pods(gang, pr_name, cluster, self._workers.get((namespace, raycluster), []))
        if less != gang:
            log.info("%s: %s of its pods belong to replicas of RayCluster %s already on nodes; provisioning the rest",
                     gang.key, gang.pods - less.pods, raycluster, extra={"pr": gang.key})
        return less

    async def live_template(self, namespace: str, name: str) -> JSON | None:
        """A template the cache has not seen: the watch of PodTemplates may lag the watch of requests."""
        if not name:
            return None
        try:
            return await self.ctl.http.request("GET", PODTEMPLATES.path(namespace, name))
        except ApiError as exc:
            if not exc.not_found:
                log.warning("could not read podtemplate %s/%s: %s", namespace, name, exc)
            return None

    async def workload(self, namespace: str, workload: str | None) -> tuple[int, str | None]:
        """The owning Workload's ``spec.priority`` (0 without one, or when Kueue is not installed) and the
        RayCluster that owns the Workload, if one does."""
        if workload is None:
            return 0, None
        key = (namespace, workload)
        if key not in self._workloads:
            try:
                obj = await self.ctl.http.request("GET", WORKLOADS.path(namespace, workload))
            except ApiError as exc:
                if not exc.not_found:
                    log.warning("could not read workload %s/%s for its priority: %s", namespace, workload, exc)
                    return 0, None
                self._workloads[key] = (0, None)
            else:
                value = (obj.get("spec") or {}).get("priority")
                owner = next((str(ref.get("name")) for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
                              if ref.get("kind") == "RayCluster" and ref.get("controller")), None)
                self._workloads[key] = (int(value) if isinstance(value, int) else 0, owner)
        return self._workloads[key]

    async def rebook(self, now: float) -> None:
        """Provisioned requests whose booking was lost (a restart) are booked again before anybody is planned:
        on their own new nodes when a recorded scale-up made them, else on free capacity (:mod:`rebook`)."""
        ctl, view = self.ctl, self.ctl.view
        lost = sorted((st for st in ctl.states.values() if phase(st) is Phase.BOOKED and st.booking is None
                       and not st.deleted), key=lambda st: st.key)
        if not lost:
            return
        snapshot = self.snapshot(now)
        bookings = list(snapshot.bookings)
        on_free: dict[str, Gang] = {}
        for st in lost:
            got = await self.gang_of(st, may_scale=False)
            gang = got if isinstance(got, Gang) else None
            if gang is not None:
                st.gang = gang
            if st.record is None:
                st.booking = {}
                if gang is not None:
                    on_free[st.key] = gang
                continue
            tokens = set(st.record.tokens)
            own = [info.state for _, info in sorted(view.nodes.items())
                   if info.token in tokens and not info.deleting]
            consumed = consumed_on((p.node, p.requests) for p in view.consumers.get(st.key, ()))
            st.booking = rebuilt_booking(gang, own, consumed, replace(snapshot, bookings=tuple(bookings)),
                                         {step.pool for step in st.record.steps}, now, ctl.policy)
            bookings.extend(live_bookings(st.key, st.booking, consumed, view.nodes))
            log.info("%s: booking rebuilt on its own %d new node(s) after a restart", st.key, len(own),
                     extra={"pr": st.key})
        if not on_free:
            return
        by_key = {st.key: st for st in lost}
        for decision in plan(replace(snapshot, bookings=tuple(bookings)), on_free.values(), now, ctl.policy):
            if decision.outcome is Outcome.FITS:
                st = by_key[decision.gang]
                assert st.gang is not None
                st.booking = planned_booking(st.gang, decision, {})

    # -- the snapshot -------------------------------------------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        ctl, view = self.ctl, self.ctl.view
        registered: dict[str, set[str]] = defaultdict(set)
        for name, info in view.nodes.items():
            if info.token:
                registered[info.token].add(info.unit or name)
        inflight: dict[str, int] = defaultdict(int)
        bookings: list[Booking] = []
        for st in ctl.states.values():
            bookings.extend(self.held(st, inflight, registered))
        pools = []
        for name, pool in sorted(ctl.pools.items()):
            backoff = ctl.backoffs.get(name, now)
            pools.append(PoolState(pool, self.unit_count(name), inflight[name],
                                   backoff.until if backoff else None, backoff.reason if backoff else ""))
        # Nodes being released are on their way out, and a slice missing a host serves no slice workload: nobody
        # may be planned onto them.
        out = ctl.leaving | self.broken_nodes()
        nodes = tuple(info.state for name, info in view.nodes.items() if name not in out)
        return Snapshot(tuple(pools), nodes, tuple(bookings))

    def unit_count(self, pool: str) -> int:
        """Units of ``pool`` that stay: those being released no longer count (minUnits, maxUnits)."""
        ctl = self.ctl
        units = {unit: nodes for unit, nodes in ctl.view.units(ctl.pools).get(pool, {}).items()
                 if unit not in ctl.releasing and not set(nodes) & ctl.leaving}
        return ctl.view.unit_count(ctl.pools[pool], units)

    def held(self, st: RequestState, inflight: dict[str, int], registered: dict[str, set[str]]) -> list[Booking]:
        """What a request holds: booked pods, or whole new nodes (and planned pods) while provisioning."""
        view = self.ctl.view
        consumed = consumed_on((p.node, p.requests) for p in view.consumers.get(st.key, ()))
        match phase(st):
            case Phase.BOOKED if st.booking:
                return live_bookings(st.key, st.booking, consumed, view.nodes)
            case Phase.PROVISIONING if st.record is not None:
                for step in st.record.steps:
                    inflight[step.pool] += max(0, step.units - len(registered.get(step.token, ())))
                held = [Booking(st.key, name, view.nodes[name].state.allocatable)
                        for got in st.obtained.values() for name in got.node_names if name in view.nodes]
                if st.gang is not None and st.decision is not None:
                    held += live_bookings(st.key, planned_booking(st.gang, st.decision, {}), consumed, view.nodes)
                return held
        return []

    # -- failures, scale-down, reporting ------------------------------------------------------------------------

    def scale_up_failed(self, st: RequestState, exc: ScaleUpFailed) -> None:
        ctl = self.ctl
        now = ctl.clock.now()
        parts = []
        for failure in exc.failures:
            if failure.pool in ctl.pools:
                until = ctl.backoffs.fail(failure.pool, f"{failure.error_class.value} ({failure.code})", now,
                                          at_least=failure.retry_after)
                ctl.metrics.backoff(failure.pool, failure.error_class.value)
                parts.append(f"pool {failure.pool}: {failure.error_class.value} ({failure.code}: "
                             f"{failure.message}); not used until {rfc3339(until)}")
            else:
                parts.append(str(failure))
        permanent = all(f.error_class is ErrorClass.PERMANENT for f in exc.failures)
        message = ("scale-up failed and every unit it obtained was released: " + "; ".join(parts)
                   + ("" if permanent else "; re-planning with the other pools"))
        st.record, st.obtained = None, {}
        st.set(C.PROVISIONED, False, C.R_NOT_FOUND, message, rfc3339(now))
        st.event(WARNING, "ScaleUpFailed", message)
        st.retry_at = now + ctl.settings.retry_initial if permanent else None

    def scale_down(self, now: float, snapshot: Snapshot, decisions: tuple[Decision, ...]) -> None:
        ctl, view = self.ctl, self.ctl.view
        units = view.units(ctl.pools)
        # Units released whose deletion the cache has not fully shown yet are gone already.
        ctl.actuator.released &= {unit for pool_units in units.values() for unit in pool_units}
        protected = {b.node for b in snapshot.bookings} | ctl.leaving
        protected |= {node for pool_units in units.values() for unit, nodes in pool_units.items()
                      if unit in ctl.releasing or unit in ctl.actuator.released for node in nodes}
        protected |= {p.node for d in decisions for p in d.placements}
        protected |= {name for st in ctl.states.values() for got in st.obtained.values() for name in got.node_names
                      if phase(st) is Phase.PROVISIONING}
        # By token too: a scale-up resumed after a restart knows its nodes only once its obtain has returned.
        in_flight = self.in_flight_tokens()
        protected |= {name for name, info in view.nodes.items() if info.token in in_flight}
        counts = {name: self.unit_count(name) for name in ctl.pools}
        removals = plan_scale_down(
            ctl.pools, units, counts, empty=view.empty, protected=frozenset(protected),
            labelled=lambda node: view.nodes[node].unit is not None and not view.nodes[node].deleting,
            idle_since=ctl.idle_since, now=now, unneeded_time=ctl.settings.scale_down_unneeded_time)
        for removal in removals:
            self.scale_downs = [*self.scale_downs[-49:], {
                "at": rfc3339(now), "pool": removal.pool, "unit": removal.unit, "nodes": list(removal.nodes),
                "idleSince": rfc3339(removal.idle_since), "dryRun": ctl.settings.dry_run}]
            ctl.metrics.scaled(removal.pool, "down", 1)
            broken = len(removal.nodes) < ctl.pools[removal.pool].nodes_per_unit
            log.info("scale down %s: unit %s (%s) %s since %s", removal.pool, removal.unit, ", ".join(removal.nodes),
                     "missing hosts, empty" if broken else "empty", rfc3339(removal.idle_since),
                     extra={"pool": removal.pool, "unit": removal.unit, "dry_run": ctl.settings.dry_run})
            if not ctl.settings.dry_run:
                ctl.idle_since.pop(removal.unit, None)
                ctl.releasing.add(removal.unit)
                ctl.spawn(self.remove_unit(removal.pool, removal.unit), f"scale-down {removal.unit}")

    def in_flight_tokens(self) -> set[str]:
        """Tokens of scale-ups not finished: recorded and not Provisioned yet, or with provider calls running."""
        return self.ctl.obtaining | {token for st in self.ctl.states.values()
                                     if phase(st) is Phase.PROVISIONING and st.record is not None
                                     for token in st.record.tokens}

    def broken_nodes(self) -> set[str]:
        """Nodes of units missing hosts that no scale-up in progress completes: no gang may be planned there."""
        ctl, view = self.ctl, self.ctl.view
        in_flight = self.in_flight_tokens()
        broken = broken_units(ctl.pools, view.units(ctl.pools), lambda node: view.nodes[node].unit is not None,
                              lambda node: view.nodes[node].token in in_flight)
        return {node for unit, nodes in broken.items() if unit not in ctl.actuator.released for node in nodes}

    async def remove_unit(self, pool: str, unit: str) -> None:
        try:
            await self.ctl.actuator.release(pool, [unit], f"scale-down-{unit}")
        finally:
            self.ctl.releasing.discard(unit)

    @property
    def plans(self) -> list[JSON]:
        return [self.latest[key] for key in sorted(self.latest)]

    def record_plans(self, decisions: tuple[Decision, ...], by_key: dict[str, RequestState], now: float) -> None:
        dry = self.ctl.settings.dry_run
        live = {st.key for st in self.ctl.states.values()}
        self.latest = {key: entry for key, entry in self.latest.items() if key in live}
        for d in decisions:
            self.latest[d.gang] = {"at": rfc3339(now), "request": d.gang, "class": by_key[d.gang].pr.class_name,
                                   "outcome": d.outcome.value, "summary": summarize(d), "explain": explain(d),
                                   "dryRun": dry}
        for d in decisions:
            if dry or d.outcome is not Outcome.FITS:
                log.info("%s %s", "would" if dry and d.outcome is Outcome.SCALE_UP else "decided", explain(d),
                         extra={"pr": d.gang, "outcome": d.outcome.value, "dry_run": dry})
                if dry and d.outcome is Outcome.SCALE_UP:
                    for step in d.steps:
                        self.ctl.metrics.scaled(step.pool, "up", step.units)

    def export(self, now: float) -> None:
        ctl = self.ctl
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for st in ctl.states.values():
            counts[(st.pr.class_name, phase(st).value.lower())] += 1
        ctl.metrics.set_requests(counts)
        ctl.metrics.set_bookings(sum(1 for st in ctl.states.values() if phase(st) is Phase.BOOKED))
        ctl.metrics.set_backed_off(ctl.backoffs.active(now))
        units = ctl.view.units(ctl.pools)
        inflight: dict[str, int] = defaultdict(int)
        booked = {name for st in ctl.states.values() if phase(st) is Phase.BOOKED for name in (st.booking or {})}
        by_state: dict[tuple[str, str], int] = defaultdict(int)
        for st in ctl.states.values():
            if phase(st) is Phase.PROVISIONING and st.record is not None:
                for step in st.record.steps:
                    inflight[step.pool] += step.units
        for pool, pool_units in units.items():
            for nodes in pool_units.values():
                if not all(ctl.view.nodes[n].state.ready for n in nodes):
                    continue
                state = "booked" if booked & set(nodes) else "idle" if all(map(ctl.view.empty, nodes)) else "busy"
                by_state[(pool, state)] += 1
                by_state[(pool, "ready")] += 1
        for pool, count in inflight.items():
            by_state[(pool, "provisioning")] += count
        ctl.metrics.set_pool_units(by_state)

    def next_wake(self, now: float) -> float:
        """The earliest deadline after ``now`` (the last pass's time) at which some request moves on."""
        ctl, s = self.ctl, self.ctl.settings
        times: list[float] = []
        for st in ctl.states.values():
            if st.busy:
                continue  # its task wakes the loop when it ends
            match phase(st):
                case Phase.PENDING:
                    times.append(st.pr.created + s.expiry)
                    if st.retry_at is not None:
                        times.append(st.retry_at)
                case Phase.PROVISIONING if st.record is not None:
                    times.append(st.record.deadline)
                case Phase.BOOKED:
                    prov = st.conditions.get(C.PROVISIONED)
                    start = (prov and parse_rfc3339(prov.last_transition)) or now
                    times.append(start + ctl.transitions.booking_ttl(st))
                case Phase.DONE if s.terminal_ttl:
                    stamps = [parse_rfc3339(c.last_transition) or now for c in st.conditions.values()]
                    times.append(max(stamps, default=now) + s.terminal_ttl)
        for extra in (ctl.backoffs.next_expiry(now), next_due(ctl.idle_since, s.scale_down_unneeded_time),
                      ctl.ray.next_wake()):
            if extra is not None:
                times.append(extra)
        # A time due by ``now`` was handled by the pass at ``now`` (or waits on a task or an event): waking
        # for it again would spin.
        return min((t for t in times if t > now), default=float("inf"))
