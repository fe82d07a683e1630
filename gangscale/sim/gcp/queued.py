"""GKE's handling of ProvisioningRequests of class ``queued-provisioning.gke.io`` (flex-start with queued
provisioning), played by the fake against the Kubernetes API it registers Nodes in, on the fake's clock.

It does what GKE's published autoscaler (GoogleCloudPlatform/cluster-autoscaler) does for the class, through the
``autoscaling.x-k8s.io/v1`` API it reads and the ``/status`` subresource it writes with ``UpdateStatus``
(``pkg/autoscaler/clients.go``), and through the fake's Compute Engine for the MIG resize requests; rules, reasons
and messages are in :mod:`.queuedstatus`, where a request is queued in :mod:`.queuedplan` (with their sources).
One task (:meth:`QueuedProvisioning.run`), started and stopped with :class:`~gangscale.sim.gcp.server.FakeGcp` when
it has a Kubernetes client, watches the requests (a :class:`~gangscale.kube.reflector.Reflector`) and wakes on a
change of a request, of the cloud (a resize request's state or last-attempt errors, a node pool), or at its next
timer. Each pass, level-triggered:

1. Orphaned resize requests (``gke-`` names in MIGs of queued pools that no live request of the class owns, or owned
   by a Provisioned/Failed one for more than 1 hour) are cancelled if ACCEPTED, then deleted (SUCCEEDED, FAILED,
   CANCELLED); the VMs of a cancelled one are rolled back by Compute Engine, those of a deleted SUCCEEDED one stay
   (``resize_request_reconciler.go``, ``client_v1.go: nextDeletionAction``). Nodes are never deleted by it.
2. A request without conditions gets ``Accepted=False/NotAccepted`` (``provisioning_request_initializer.go``).
3. A Pending one: its PodTemplates must exist (else ``Accepted=False/MissingPodTemplates`` for 2 minutes after its
   creation, then ``Failed=True``); its target is the node pool its template's ``nodeSelector
   ["cloud.google.com/gke-nodepool"]`` names, which must have ``queuedProvisioning.enabled``, in the zone of
   ``nodeSelector["topology.kubernetes.io/zone"]`` or else the pool's first location; its pods must fit a node
   and the pool's autoscaling maximum must allow the nodes (else the reason for 2 minutes, then ``Failed``). Then
   ``status.provisioningClassDetails`` is written, a resize request ``ResizeRequestName(ns, name)`` for the
   bin-packed node count is inserted into that zone's MIG with ``requestedRunDuration`` = ``maxRunDurationSeconds``
   or 7 days, and ``Accepted=True/SuccessfullyQueued`` is written (``manager.go: CreateResizeRequest``). What GKE
   maps from an insert that Compute Engine refuses (``INVALID_ARGUMENT`` → ``Failed=True/InvalidArgument`` with its
   message, ``reconciler/reasons/reasons.go``) covers a run duration outside 10 minutes to 7 days and a queued pool
   whose template takes no resize request (one without ``config.flexStart``; that text is the fake's own).
4. An Accepted one follows its resize request: last-attempt errors → ``Provisioned=False`` with the mapped reason and
   GCE's message; SUCCEEDED → ``Provisioned=True`` at once (GKE does not wait for Nodes); FAILED → ``Failed=True``;
   missing or CANCELLED for 2 minutes → ``Failed=True`` (``resize_request_reconciler.go``).
5. A Provisioned one gets ``BookingExpired=True`` 10 minutes after Provisioned, then ``CapacityRevoked=True`` at
   Provisioned + its run duration (``provisioning_request_finalizer.go``); Compute Engine deletes the VMs then.
6. ``ValidUntilSeconds``: ``Failed=True/WaitTimeExceeded`` once creation + that many seconds is reached, while not
   Provisioned (``valid_until_reconciler.go``).

Simplified, and gaps: it reacts at once instead of in ~10-second autoscaler loops (a problem of a Pending request is
looked at again every 10 s of the clock), with no per-loop limits; only the pool named by the nodeSelector is
considered (GKE also tries every queued pool when the template names none, and can auto-provision one); one pool
name is looked up in every cluster of the fake (the fake does not know which cluster the API server is); no
OBTAINABILITY strategy, bulk MIGs, RecommendLocations or node auto-provisioning; GKE's scale-down of the empty
nodes after the booking (and after a request is deleted) is not modelled, so such nodes stay until their run
duration ends; scale-down immunity, pod events and the deletion of requests 7 days after they ended are left out.
An orphaned ACCEPTED resize request is cancelled and deleted in one pass (GKE deletes it on a later loop, once the
cancel operation is done). Conditions carry the time of what caused them (the resize request's end, the booking's
end) rather than the time of the loop that noticed it; ``ValidUntilSeconds`` fails a request at creation + the
value exactly (GKE: strictly after).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Iterator
from typing import Any

from gangscale.clock import Clock, wait_event
from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector, strip_managed_fields
from gangscale.kube.resources import PODTEMPLATES, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import queuedstatus as Q
from gangscale.sim.gcp.compute import MAX_RUN_SECONDS, MIN_RUN_SECONDS
from gangscale.sim.gcp.engine import Engine
from gangscale.sim.gcp.queuedplan import Plan, accelerator_type, is_queued, make_plan
from gangscale.sim.gcp.state import (
    ACCEPTED,
    ACTIVE_RR_STATES,
    CANCELLED,
    FAILED,
    SUCCEEDED,
    NodePool,
    ResizeRequest,
)
from gangscale.sim.gcp.templates import resize_request_refusal
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)

#: How often a Pending request with a problem is looked at again (the autoscaler's usual scan interval), and how
#: long after a failed API call a pass is retried.
RETRY_SECONDS = 10.0


class QueuedProvisioning:
    def __init__(self, clock: Clock, kube: KubeHTTP, engine: Engine, *, advance: Callable[[float], None],
                 poke: Callable[[], None]) -> None:
        self.clock = clock
        self.kube = kube
        self.engine = engine
        self.state = engine.state
        #: Applies what the cloud has due by a time (and hands on the Node calls it causes).
        self._advance = advance
        #: Tells the fake's ticker that the cloud changed.
        self._poke = poke
        self.reflector = Reflector(kube, PROVREQS, transform=strip_managed_fields)
        self.reflector.add_handler(lambda event: self._wake.set())
        self._wake = asyncio.Event()
        self._busy = False
        self._mark: tuple[Any, ...] = ()
        #: Request uid → when its resize request was first seen missing or CANCELLED.
        self._unreconciled: dict[str, float] = {}
        #: Our last write of each request: newer than the watch cache until the watch catches up.
        self._written: dict[tuple[str, str], JSON] = {}
        #: Unexpected exceptions of passes (tests assert there are none).
        self.failures: list[str] = []

    @property
    def quiet(self) -> bool:
        return not self._busy and not self._wake.is_set()

    def cloud_changed(self) -> None:
        """Called after the cloud moved on: wake if a resize request or a queued pool changed."""
        mark = tuple(self._cloud_mark())
        if mark != self._mark:
            self._mark = mark
            self._wake.set()

    def _cloud_mark(self) -> Iterator[tuple[Any, ...]]:
        for pool in self._pools():
            queued = is_queued(pool)
            yield pool.location, pool.cluster, pool.name, queued
            for mig in pool.migs.values() if queued else ():
                for rr in mig.resize_requests.values():
                    yield mig.zone, rr.name, rr.state, tuple((e.get("code"), e.get("message")) for e in rr.last_errors)

    # --- the loop ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self.kube.request("GET", PROVREQS.path(), query={"limit": 1})
        except ApiError as exc:
            if exc.not_found:
                log.info("fake GCP: the API server serves no %s; queued provisioning is not emulated",
                         PROVREQS.api_version)
                return
        watching = asyncio.create_task(self.reflector.run(), name="fake-gcp-queued-watch")
        try:
            await self.reflector.synced.wait()
            while True:
                self._wake.clear()
                self._busy = True
                now = self.clock.now()
                try:
                    due = await self._pass(now)
                except Exception as exc:  # a bug: keep serving, and let the tests see it
                    log.exception("fake GCP: queued provisioning pass failed")
                    self.failures.append(repr(exc))
                    due = now + RETRY_SECONDS
                finally:
                    self._busy = False
                await wait_event(self.clock, self._wake, due)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    async def _pass(self, now: float) -> float | None:
        self._advance(now)
        prs = [self._latest(obj) for obj in self.reflector.items()
               if (obj.get("spec") or {}).get("provisioningClassName") == Q.CLASS]
        dues = [self._clean(prs, now)]
        for pr in prs:
            try:
                dues.append(await self._reconcile(pr, now))
            except ApiError as exc:
                if exc.conflict:  # written by someone else since our cache saw it: read it and go again
                    await self._refresh(pr)
                elif not exc.not_found:  # a request deleted meanwhile is the next pass's business
                    log.warning("fake GCP: queued provisioning of %s: %s", _key(pr), exc)
                    dues.append(now + RETRY_SECONDS)
        uids = {_uid(pr) for pr in prs}
        self._unreconciled = {uid: t for uid, t in self._unreconciled.items() if uid in uids}
        self._written = {key: obj for key, obj in self._written.items() if key in {_key(pr) for pr in prs}}
        return min((due for due in dues if due is not None), default=None)

    def _latest(self, cached: JSON) -> JSON:
        mine = self._written.get(_key(cached))
        if mine is None or _uid(mine) != _uid(cached) or _rv(mine) <= _rv(cached):
            return cached
        return mine

    # --- one request ------------------------------------------------------------------------------------

    async def _reconcile(self, pr: JSON, now: float) -> float | None:
        if Q.is_true(pr, Q.FAILED) or Q.is_true(pr, Q.CAPACITY_REVOKED):
            return None
        if not (pr.get("status") or {}).get("conditions"):
            pr = await self._set(pr, now, (Q.ACCEPTED, False, Q.NOT_ACCEPTED))
        if Q.is_true(pr, Q.PROVISIONED):
            return await self._provisioned(pr, now)
        created = parse_rfc3339((pr.get("metadata") or {}).get("creationTimestamp")) or now
        valid = Q.int_parameter(pr, Q.VALID_UNTIL_PARAMETER)
        deadline = created + valid if valid is not None and valid > 0 else None
        if deadline is not None and now >= deadline:
            await self._set(pr, now, (Q.FAILED, True, Q.WAIT_TIME_EXCEEDED))
            return None
        if Q.is_true(pr, Q.ACCEPTED):
            due = await self._accepted(pr, now)
        else:
            due = await self._pending(pr, now, created)
        return min((d for d in (due, deadline) if d is not None), default=None)

    async def _pending(self, pr: JSON, now: float, created: float) -> float | None:
        refs = [(int(ps.get("count") or 0), str((ps.get("podTemplateRef") or {}).get("name") or ""))
                for ps in (pr.get("spec") or {}).get("podSets") or []]
        templates = {name: await self._template(pr, name) for _, name in refs}
        missing = [name for _, name in refs if templates[name] is None]
        if missing:
            err = Q.missing_templates(len(refs), missing)
            return await self._not_yet(pr, now, created, ("MissingPodTemplates", f"Provisioning Request will fail "
                                       f"soon as it is {err}"), ("MissingPodTemplates", f"Provisioning Request "
                                       f"failed because there were {err}"))
        plan = make_plan(self._pools(), [(count, templates[name] or {}) for count, name in refs],
                         [name for _, name in refs])
        if not isinstance(plan, Plan):
            return await self._not_yet(pr, now, created, plan, plan)
        return await self._queue(pr, plan, now)

    async def _not_yet(self, pr: JSON, now: float, created: float, meanwhile: tuple[str, str],
                       finally_: tuple[str, str]) -> float | None:
        """Retried for 2 minutes after the request's creation (``Accepted=False`` says why), then ``Failed``."""
        if now < created + Q.RETRY_PERIOD:
            await self._set(pr, now, (Q.ACCEPTED, False, meanwhile))
            return min(created + Q.RETRY_PERIOD, now + RETRY_SECONDS)
        await self._set(pr, now, (Q.FAILED, True, finally_))
        return None

    async def _queue(self, pr: JSON, plan: Plan, now: float) -> float | None:
        meta = pr["metadata"]
        name = Q.resize_request_name(meta["namespace"], meta["name"])
        want = Q.details(mig=plan.mig.name, rr_name=name, pool=plan.pool.name, zone=plan.mig.zone,
                         accelerator=accelerator_type(plan.pool), templates=plan.templates)
        pr = await self._set(pr, now, details=want)
        if name not in plan.mig.resize_requests:
            problem = self._insert(pr, plan, name, now)
            if problem is not None:
                await self._set(pr, now, (Q.FAILED, True, problem))
                return None
        pr = await self._set(pr, now, (Q.ACCEPTED, True, Q.QUEUED))
        return await self._accepted(pr, now)

    def _insert(self, pr: JSON, plan: Plan, name: str, now: float) -> tuple[str, str] | None:
        """Insert the resize request, or say why Compute Engine (or GKE before it) refuses it."""
        raw = ((pr.get("spec") or {}).get("parameters") or {}).get(Q.MRD_PARAMETER)
        seconds = Q.int_parameter(pr, Q.MRD_PARAMETER)
        if raw is not None and seconds is None:
            return Q.MRD_PARSE_ERROR
        seconds = Q.DEFAULT_RUN_SECONDS if seconds is None else seconds
        if not MIN_RUN_SECONDS <= seconds <= MAX_RUN_SECONDS:
            # GCE's INVALID_ARGUMENT (the fake's compute wording) becomes reason InvalidArgument with its message.
            return "InvalidArgument", ("Invalid value for field 'resource.requestedRunDuration': the run duration "
                                       "must be between 10 minutes and 7 days.")
        refusal = resize_request_refusal(plan.pool, plan.mig)
        if refusal is not None:
            return "InvalidArgument", refusal
        self.engine.insert_resize_request(plan.mig, name, plan.nodes, None, {"seconds": str(seconds)},
                                          float(seconds), "", now)
        self._advance(now)  # its first attempt is due now
        self._poke()
        return None

    async def _accepted(self, pr: JSON, now: float) -> float | None:
        found = self._resize_request(pr)
        uid = _uid(pr)
        if found is None or found.state == CANCELLED:
            first = self._unreconciled.setdefault(uid, now)
            if now < first + Q.RETRY_PERIOD:
                return first + Q.RETRY_PERIOD
            await self._set(pr, now, (Q.FAILED, True, Q.MISSING_RR if found is None else Q.RR_CANCELLED))
            return None
        self._unreconciled.pop(uid, None)
        if found.state in ACTIVE_RR_STATES:
            if found.last_errors:
                await self._set(pr, now, (Q.PROVISIONED, False, Q.last_attempt(found.last_errors)))
            return None
        ended = now if found.ended_at is None else found.ended_at
        if found.state == FAILED:
            await self._set(pr, ended, (Q.FAILED, True, Q.failed(found.errors)))
            return None
        pr = await self._set(pr, ended, (Q.PROVISIONED, True, Q.PROVISIONED_OK))
        return await self._provisioned(pr, now)

    async def _provisioned(self, pr: JSON, now: float) -> float | None:
        since = _since(pr, Q.PROVISIONED, now)
        booking_end = since + Q.BOOKING_SECONDS
        if not Q.is_true(pr, Q.BOOKING_EXPIRED):
            if now < booking_end:
                return booking_end
            pr = await self._set(pr, booking_end, (Q.BOOKING_EXPIRED, True, Q.BOOKING_OVER))
        revoked = since + Q.run_seconds(pr)
        if now < revoked:
            return revoked
        await self._set(pr, revoked, (Q.CAPACITY_REVOKED, True, Q.REVOKED))
        return None

    # --- the cloud side ---------------------------------------------------------------------------------

    def _pools(self) -> list[NodePool]:
        return [pool for cluster in self.state.clusters.values() for pool in cluster.pools.values()]

    def _resize_request(self, pr: JSON) -> ResizeRequest | None:
        """The resize request the request's details point at, or None."""
        found = ((pr.get("status") or {}).get("provisioningClassDetails") or {})
        mig = self.state.mig(str(found.get("SelectedZone", "")), str(found.get("NodeGroupName", "")))
        meta = pr["metadata"]
        return None if mig is None else mig.resize_requests.get(Q.resize_request_name(meta["namespace"], meta["name"]))

    def _clean(self, prs: list[JSON], now: float) -> float | None:
        """Cancel and delete the ``gke-`` resize requests of queued pools that no live request owns; those of a
        Provisioned or Failed request are kept for an hour after that condition turned true."""
        keep: set[tuple[str, str]] = set()
        due: float | None = None
        for pr in prs:
            zone = ((pr.get("status") or {}).get("provisioningClassDetails") or {}).get("SelectedZone")
            ended = Q.FAILED if Q.is_true(pr, Q.FAILED) else Q.PROVISIONED if Q.is_true(pr, Q.PROVISIONED) else None
            if ended is not None:
                until = _since(pr, ended, now) + Q.TERMINAL_RR_TTL
                if now >= until:
                    continue
                due = until if due is None else min(due, until)
            meta = pr["metadata"]
            keep.add((str(zone), Q.resize_request_name(meta["namespace"], meta["name"])))
        changed = False
        for pool in self._pools():
            for mig in pool.migs.values() if is_queued(pool) else ():
                for rr in list(mig.resize_requests.values()):
                    if not rr.name.startswith("gke-") or (mig.zone, rr.name) in keep:
                        continue
                    if rr.state == ACCEPTED:
                        self.engine.end_resize_request(mig, rr, CANCELLED, now)
                    if rr.state in (SUCCEEDED, FAILED, CANCELLED):
                        del mig.resize_requests[rr.name]
                        changed = True
        if changed:
            self._poke()
        return due

    # --- the API side -----------------------------------------------------------------------------------

    async def _refresh(self, pr: JSON) -> None:
        namespace, name = _key(pr)
        try:
            fresh = await self.kube.request("GET", PROVREQS.path(namespace, name))
        except ApiError as exc:
            log.warning("fake GCP: queued provisioning of %s/%s: %s", namespace, name, exc)
            return
        self._written[(namespace, name)] = strip_managed_fields(fresh)
        self._wake.set()

    async def _template(self, pr: JSON, name: str) -> JSON | None:
        try:
            return await self.kube.request("GET", PODTEMPLATES.path(pr["metadata"]["namespace"], name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def _set(self, pr: JSON, t: float, *updates: tuple[str, bool, tuple[str, str]],
                   details: dict[str, str] | None = None) -> JSON:
        """Write conditions (and the class details) on ``/status`` if they change anything (``UpdateStatus``)."""
        fresh = copy.deepcopy(pr)
        changed = False
        for kind, status, reason_message in updates:
            changed = Q.set_condition(fresh, kind, status, reason_message, t) or changed
        if details is not None and (fresh.get("status") or {}).get("provisioningClassDetails") != details:
            fresh.setdefault("status", {})["provisioningClassDetails"] = details
            changed = True
        if not changed:
            return pr
        meta = pr["metadata"]
        written = await self.kube.request("PUT", PROVREQS.path(meta["namespace"], meta["name"], "status"),
                                          body=fresh)
        self._written[_key(written)] = strip_managed_fields(written)
        return written


def _since(pr: JSON, kind: str, default: float) -> float:
    found = Q.condition(pr, kind) or {}
    return parse_rfc3339(found.get("lastTransitionTime")) or default


def _key(pr: JSON) -> tuple[str, str]:
    meta = pr.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _uid(pr: JSON) -> str:
    return str((pr.get("metadata") or {}).get("uid", ""))


def _rv(pr: JSON) -> int:
    value = str((pr.get("metadata") or {}).get("resourceVersion", ""))
    return int(value) if value.isdigit() else 0
