"""The Kueue emulator component: reads Kueue's objects over HTTP, decides with the pure modules, writes.

One :meth:`KueueCore.sync` is one pass of Kueue's controllers, in this order, each on the state the
previous step left (every write's answer replaces the object in the pass's snapshot):

1. whether each ClusterQueue is active (:mod:`~gangscale.sim.kueue.clusterqueues`; written in step 4), so
   that an inactive queue reserves nothing in this pass;
2. the workload controller, per Workload (:mod:`~gangscale.sim.kueue.lifecycle`): release the quota of a
   Workload someone else evicted; turn a ``Retry`` check's retry time into ``requeueState.requeueAt`` and
   leave an active Workload alone (holding its quota) until then; evict on a ``Retry`` check, deactivate on
   a ``Rejected`` one, evict a deactivated Workload, admit when every check is ``Ready``, end a backoff, say
   why a Workload waits (missing LocalQueue or ClusterQueue, inactive queue);
3. the scheduler, per active ClusterQueue (:mod:`~gangscale.sim.kueue.quota`): preempt, reserve, say why
   the others wait;
4. ClusterQueue status: ``Active``, counters and flavor usage, written when any of it changed.

Reads: ResourceFlavors, AdmissionChecks, ClusterQueues, LocalQueues, Workloads (all namespaces), and
Namespaces when a ClusterQueue's ``namespaceSelector`` has terms. Writes: Workload status (server-side
apply on ``/status``, field manager ``kueue-admission``, ``force``, only the fields it owns — see
:mod:`~gangscale.sim.kueue.ssa` — with uid and resourceVersion preconditions; a JSON patch afterwards only
for what another manager's ownership kept), ``spec.active=false`` (merge patch), ClusterQueue status
(apply), ``events.k8s.io/v1`` Events from ``kueue-admission`` (the scheduler's) and ``kueue-workload-controller``
(:mod:`~gangscale.sim.kueue.events`). A failed write is logged and retried on the next pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import (
    ADMISSIONCHECKS,
    CLUSTERQUEUES,
    LOCALQUEUES,
    NAMESPACES,
    RESOURCEFLAVORS,
    WORKLOADS,
)
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.informers import HttpReader, Reader
from gangscale.sim.kueue import lifecycle
from gangscale.sim.kueue.clusterqueues import active_state, desired_status, status_differs
from gangscale.sim.kueue.events import SCHEDULER, WORKLOAD_CONTROLLER, KueueEventRecorder
from gangscale.sim.kueue.lifecycle import StatusEdit
from gangscale.sim.kueue.objects import (
    FIELD_MANAGER,
    REASON_INADMISSIBLE,
    REASON_PENDING,
    ClusterQueue,
    Flavor,
    LocalQueue,
    check_is_active,
    parse_cluster_queue,
    parse_flavor,
    parse_local_queue,
)
from gangscale.sim.kueue.quota import plan_queue
from gangscale.sim.kueue.ssa import APPLY, JSON_PATCH, MERGE_PATCH, apply_body, leftovers, owned
from gangscale.sim.kueue.workload import Workload, parse_workload
from gangscale.sim.world import Timeline

JSON = dict[str, Any]
log = logging.getLogger(__name__)


@dataclass
class Snapshot:
    """Everything one pass reads; Workloads are replaced by each write's answer as the pass goes."""

    flavors: dict[str, Flavor]
    checks: dict[str, bool]
    cluster_queues: dict[str, ClusterQueue]
    local_queues: dict[tuple[str, str], LocalQueue]
    workloads: dict[str, Workload]
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    active: dict[str, tuple[bool, str, str]] = field(default_factory=dict)

    def queue_of(self, wl: Workload) -> tuple[LocalQueue | None, ClusterQueue | None]:
        lq = self.local_queues.get((wl.namespace, wl.queue_name))
        return lq, (self.cluster_queues.get(lq.cluster_queue) if lq else None)

    def is_active(self, cq: ClusterQueue) -> bool:
        return self.active.get(cq.name, (False, "", ""))[0]


def _with_kind(items: list[JSON], api_version: str, kind: str) -> list[JSON]:
    # Lists leave apiVersion/kind off their items; apply bodies and events need them.
    return [{**i, "apiVersion": i.get("apiVersion") or api_version, "kind": i.get("kind") or kind} for i in items]


class KueueCore:
    """Kueue's scheduler and workload controller (see the package docstring for what is left out)."""

    name = "kueue"

    def __init__(self, http: KubeHTTP, timeline: Timeline, *, reader: Reader | None = None) -> None:
        self.http = http
        #: Where the reads come from: the driver's informer cache, else a LIST per read.
        self.reader = reader or HttpReader(http)
        self.timeline = timeline
        #: One events.k8s.io/v1 recorder per Kueue controller whose part this component plays.
        self.recorders = {name: KueueEventRecorder(http, name) for name in (SCHEDULER, WORKLOAD_CONTROLLER)}
        self._wake: float | None = None
        self._wrote = False

    def next_wake(self) -> float | None:
        return self._wake

    async def sync(self, now: float) -> bool:
        self._wrote = False
        try:
            snap = await self._read()
        except ApiError as exc:
            log.warning("kueue: could not read the cluster: %s", exc)
            return False
        self._decide_active(snap)
        for key in sorted(snap.workloads):
            try:
                await self._reconcile(snap, snap.workloads[key], now)
            except Exception:  # one bad Workload must not stop the others
                log.exception("kueue: Workload %s", key)
        for name in sorted(snap.cluster_queues):
            try:
                await self._schedule(snap, snap.cluster_queues[name], now)
            except Exception:  # nor one bad ClusterQueue the others
                log.exception("kueue: ClusterQueue %s", name)
        await self._cluster_queue_status(snap, now)
        waits = [w.requeue_at for w in snap.workloads.values()
                 if w.requeue_at is not None and w.requeue_at > now and w.active and not w.finished]
        self._wake = min(waits, default=None)
        return self._wrote

    # --- reading ---------------------------------------------------------------------------------------------

    async def _list(self, resource: Resource, api_version: str, kind: str) -> list[JSON]:
        return _with_kind(await self.reader.items(resource), api_version, kind)

    async def _read(self) -> Snapshot:
        kq = WORKLOADS.api_version
        flavors = [parse_flavor(o) for o in await self._list(RESOURCEFLAVORS, kq, "ResourceFlavor")]
        checks = {str((o.get("metadata") or {}).get("name")): check_is_active(o)
                  for o in await self._list(ADMISSIONCHECKS, kq, "AdmissionCheck")}
        cqs = [parse_cluster_queue(o) for o in await self._list(CLUSTERQUEUES, kq, "ClusterQueue")]
        lqs = [parse_local_queue(o) for o in await self._list(LOCALQUEUES, kq, "LocalQueue")]
        workloads = [parse_workload(o) for o in await self._list(WORKLOADS, kq, "Workload")]
        snap = Snapshot({f.name: f for f in flavors}, checks, {c.name: c for c in cqs},
                        {(q.namespace, q.name): q for q in lqs}, {w.key: w for w in workloads})
        if any(c.namespace_selector and (c.namespace_selector.match_labels or c.namespace_selector.expressions)
               for c in cqs):
            for ns in await self.reader.items(NAMESPACES):
                meta = ns.get("metadata") or {}
                snap.namespace_labels[str(meta.get("name"))] = dict(meta.get("labels") or {})
        return snap

    # --- writing ---------------------------------------------------------------------------------------------

    async def _write(self, snap: Snapshot, wl: Workload, edit: StatusEdit, now: float) -> None:
        obj = wl.raw
        ns, name = wl.namespace, wl.name
        try:
            if edit.spec_active is not None:
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                obj = await self.http.request("PATCH", WORKLOADS.path(ns, name), content_type=MERGE_PATCH,
                                              body={"metadata": {"resourceVersion": rv},
                                                    "spec": {"active": edit.spec_active}})
                self._wrote = True
                generation = (obj.get("metadata") or {}).get("generation")
                for cond in edit.conditions.values():  # decided before the spec write moved the generation
                    if isinstance(generation, int):
                        cond["observedGeneration"] = generation
            if edit.writes_status:
                status = lifecycle.compose(owned(obj, FIELD_MANAGER).get("status") or {}, edit)
                obj = await self.http.request("PATCH", WORKLOADS.path(ns, name, "status"), content_type=APPLY,
                                              query={"fieldManager": FIELD_MANAGER, "force": True},
                                              body=apply_body(obj, {"status": status}))
                self._wrote = True
                # Entry fields the apply left out stay if another manager owns them, as on a real server
                # (Kueue's eviction reset is one apply, with no follow-up); whole fields and entries go.
                ops = leftovers(obj, lifecycle.must_be_gone(edit), {}, edit.drop_checks)
                if ops:
                    obj = await self.http.request("PATCH", WORKLOADS.path(ns, name, "status"), body=ops,
                                                  query={"fieldManager": FIELD_MANAGER}, content_type=JSON_PATCH)
        except ApiError as exc:
            log.warning("kueue: could not update Workload %s/%s: %s", ns, name, exc)
            if obj is not wl.raw:
                snap.workloads[wl.key] = parse_workload(obj)
            return
        for event_type, reason, message in edit.events:
            await self.recorders[edit.reporter].record(obj, event_type, reason, message, now)
            self._wrote = True
        for kind, text, data in edit.timeline:
            self.timeline.add(now, kind, wl.subject, text, **data)
        snap.workloads[wl.key] = parse_workload(obj)

    # --- the passes ------------------------------------------------------------------------------------------

    def _decide_active(self, snap: Snapshot) -> None:
        for cq in snap.cluster_queues.values():
            snap.active[cq.name] = active_state(cq, snap.flavors, snap.checks)

    async def _reconcile(self, snap: Snapshot, wl: Workload, now: float) -> None:
        """The workload controller's part for one Workload (and the job framework's quota release)."""
        if wl.finished or not wl.queue_name:
            return
        edit = lifecycle.release_evicted(wl, now) if wl.reserved else None
        if edit is None:
            # Kueue's Reconcile: a Retry check's retry time first becomes requeueAt, and while that is ahead
            # an active Workload is left alone, holding its quota if it has any.
            edit = lifecycle.requeue_at_update(wl, now)
            if edit is None and lifecycle.holds_for_backoff(wl, now):
                return
        if edit is None:
            edit = self._decide(snap, wl, now)
        if edit is not None:
            await self._write(snap, wl, edit, now)

    def _decide(self, snap: Snapshot, wl: Workload, now: float) -> StatusEdit | None:
        if wl.reserved:
            edit = (lifecycle.deactivated_eviction(wl, now) if not wl.active
                    else lifecycle.check_based_eviction(wl, now))
            if edit is None:
                cq = snap.cluster_queues.get(wl.reserved_in or "")
                wanted = cq.checks_for(wl.assigned_flavors) if cq else tuple(c.name for c in wl.checks)
                edit = lifecycle.admission(wl, wanted, now)
            return edit
        if not wl.active:
            return None
        return lifecycle.backoff_finished(wl, now) or self._waiting(snap, wl, now)

    def _waiting(self, snap: Snapshot, wl: Workload, now: float) -> StatusEdit | None:
        lq, cq = snap.queue_of(wl)
        if lq is None:
            message = f"LocalQueue {wl.queue_name} doesn't exist"
        elif cq is None:
            message = f"ClusterQueue {lq.cluster_queue} doesn't exist"
        elif not snap.is_active(cq):
            message = f"ClusterQueue {cq.name} is inactive"
        else:
            return None
        return lifecycle.waiting(wl, REASON_INADMISSIBLE, message, now)

    def _eligible(self, snap: Snapshot, wl: Workload, cq: ClusterQueue, now: float) -> bool:
        return (bool(wl.queue_name) and wl.active and not wl.finished and not wl.reserved
                and lifecycle.backoff_expired(wl, now) and snap.queue_of(wl)[1] is cq)

    async def _schedule(self, snap: Snapshot, cq: ClusterQueue, now: float) -> None:
        if not snap.is_active(cq):
            return
        workloads = list(snap.workloads.values())
        pending = [w for w in workloads if self._eligible(snap, w, cq, now)]
        if not pending:
            return
        reserving = [w for w in workloads if w.reserved and not w.finished and w.reserved_in == cq.name]
        plan = plan_queue(cq, snap.flavors, pending, reserving, snap.namespace_labels)
        for victim, preemptor in plan.preempt:
            await self._write(snap, victim, lifecycle.preemption(snap.workloads[victim.key], preemptor, now), now)
        for wl, assignment in plan.reserve:
            await self._write(snap, wl, lifecycle.reservation(snap.workloads[wl.key], cq, assignment, now), now)
        for key, message in plan.pending.items():
            edit = lifecycle.waiting(snap.workloads[key], REASON_PENDING, message, now)
            if edit is not None:
                await self._write(snap, snap.workloads[key], edit, now)

    async def _cluster_queue_status(self, snap: Snapshot, now: float) -> None:
        workloads = list(snap.workloads.values())
        for cq in snap.cluster_queues.values():
            pending = sum(1 for w in workloads if w.queue_name and w.active and not w.finished and not w.reserved
                          and snap.queue_of(w)[1] is cq)
            desired = desired_status(cq, snap.active[cq.name], workloads, pending, now)
            if not status_differs(cq, desired):
                continue
            try:
                await self.http.request("PATCH", CLUSTERQUEUES.path(name=cq.name, sub="status"), content_type=APPLY,
                                        query={"fieldManager": FIELD_MANAGER, "force": True},
                                        body=apply_body({**cq.raw, "metadata": {"name": cq.name}},
                                                        {"status": desired}))
                self._wrote = True
            except ApiError as exc:
                log.warning("kueue: could not update ClusterQueue %s status: %s", cq.name, exc)
