"""Kueue's provisioning admission check controller (``pkg/controller/admissionchecks/provisioning``), emulated
as a simulation :class:`~gangscale.sim.world.Component`: it turns Workloads that hold quota into
ProvisioningRequests and the requests' conditions back into admission check states.

Reproduced (facts from research/provreq-spec.md §3 and Kueue's sources; see also the modules it uses):

- **AdmissionChecks** with ``spec.controllerName: kueue.x-k8s.io/provisioning-request`` get condition ``Active``:
  ``True``/``Active``/``The admission check is active`` when ``spec.parameters`` resolves to an existing
  ProvisioningRequestConfig, else ``False``/``BadParametersRef``/<Kueue's error text>
  (:mod:`~gangscale.sim.kueue.prconfig`). Written (a status update) only when the status flips.
- **Workloads** (:mod:`~gangscale.sim.kueue.provisioningworkload`), each sync, in Kueue's order: a Workload
  without ``QuotaReserved=True`` that is neither finished nor evicted is left alone (its requests are kept); a
  finished or evicted one has every owned request deleted (feature gate
  ``CleanupProvisioningRequestsOnEviction`` on, as by default since Kueue 0.19). Otherwise the relevant checks
  are the Workload's ``status.admissionChecks`` entries whose AdmissionCheck has this controller name; a check
  whose config is missing is inactive; a bad parameters reference or a needed podSet without assignment stops
  the Workload's reconcile, writing nothing, as Kueue's reconcile error does. The current request of a check is
  the owned one named ``<wl>-<check>-<n>`` in sync with the config with the highest ``n``; check states are
  decided by :func:`~gangscale.sim.kueue.checkstate.decide` and server-side applied on ``/status`` under
  manager ``kueue.x-k8s.io/provisioning-request`` (force), carrying this controller's entries whole, as the
  Workload has them (``retryCount`` included, so this manager co-owns it and it outlives Kueue's reset of a
  Rejected check), with the ``lastTransitionTime`` they already have: Kueue's ``syncCheckStates`` passes the
  entry's own non-zero time to ``patching.SetAdmissionCheckState``, which keeps it, so no state change made
  here moves it (a Kueue bug: the Retry backoff is then counted from when the entry was added or last reset);
  event ``AdmissionCheckUpdated`` on each state change. Every other owned request is deleted. Then, per check
  that needs a request and is not Ready: with no current request, attempt ``retryCount + 1`` is created; with a
  Failed (or, before admission, BookingExpired) request while the check is Pending, attempt ``n + 1``; never
  while Retry/Rejected, and never again after Ready. PodTemplates are created first (owned by the Workload),
  then the request (event ``ProvisioningRequestCreated``), then the templates' controller reference moves to
  the request. A failed create records ``FailedCreate`` and the error as the check's message, and ends the
  Workload's reconcile.
  Names, bodies and podSetUpdates: :mod:`~gangscale.sim.kueue.prnames`, :mod:`~gangscale.sim.kueue.prtemplates`,
  :mod:`~gangscale.sim.kueue.prmerge`. Kueue never writes a ProvisioningRequest's status, and neither does this.
- Timeline: ``CHECK`` (data ``check``, ``state``) on every state change, ``PR_CREATED`` (data ``name``) on every
  request created.

Simplified or left out:

- Level-triggered: every sync lists AdmissionChecks, configs, ResourceFlavors, Workloads, ProvisioningRequests
  and Kueue-managed PodTemplates and reconciles all of them, instead of watch-driven per-object reconciles with
  error backoff. Nothing is remembered between syncs except a cache that stops repeated ``FailedCreate`` events.
  :meth:`ProvisioningCheck.next_wake` is None: Kueue's controller requeues nothing on a timer either (the Retry
  backoff is the workload controller's, i.e. ``KueueCore``'s, business).
- Only the default feature gates; no Topology Aware Scheduling, no elastic Workload slices, no MultiKueue, no
  ``WorkloadRequestUseMergePatch``.
- ``requeueAfterSeconds`` is deterministic (Kueue's 1e-4 jitter is dropped).
- When a request is deleted here, the PodTemplates it alone owns are deleted at once too, instead of being left to
  the garbage collector. The embedded server's collector runs asynchronously, and a request re-created under the
  same name (a config change keeps the attempt number) could otherwise find, or lose, the old templates
  depending on timing.
- Long names use the fixed attempt suffix of Kueue's main branch (:mod:`~gangscale.sim.kueue.prnames`).
- Kueue's "AlreadyExists but not yet in my cache" suppression of create errors has no counterpart (there is no
  cache). Events are ``events.k8s.io/v1`` from reporting controller ``kueue-provisioning-request-controller``
  (``cmd/kueue/main.go``), as :mod:`~gangscale.sim.kueue.events` writes them; the action of
  ``ProvisioningRequestCreated`` is ``Created``, the others' is their reason.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import ADMISSIONCHECKS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.informers import HttpReader, Reader
from gangscale.sim.kueue.events import PROVISIONING_CONTROLLER, KueueEventRecorder
from gangscale.sim.kueue.prconfig import config_from_ref
from gangscale.sim.kueue.prnames import CONTROLLER_NAME
from gangscale.sim.kueue.provisioningcontext import Env, Snapshot, load_snapshot
from gangscale.sim.kueue.provisioningworkload import WorkloadReconcile
from gangscale.sim.world import Timeline
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
ACTIVE = "Active"
log = logging.getLogger(__name__)


def active_condition(ac: JSON, configs: dict[str, JSON], now: float) -> JSON:
    """The ``Active`` condition the AdmissionCheck should have."""
    lookup = config_from_ref((ac.get("spec") or {}).get("parameters"), configs)
    cond: JSON = {"type": ACTIVE, "status": "True", "reason": "Active", "message": "The admission check is active",
                  "lastTransitionTime": rfc3339(now)}
    if lookup.config is None:
        cond.update(status="False", reason="BadParametersRef", message=lookup.error)
    generation = (ac.get("metadata") or {}).get("generation")
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


class ProvisioningCheck:
    """The provisioning admission check controller. Reads AdmissionChecks, ProvisioningRequestConfigs,
    ResourceFlavors, Workloads, ProvisioningRequests and PodTemplates; writes AdmissionCheck status, Workload
    ``status.admissionChecks`` (its own entries), ProvisioningRequests and PodTemplates (create, delete, owner
    references) and Events on Workloads."""

    name = "provisioning-check"

    def __init__(self, http: KubeHTTP, timeline: Timeline, *, cleanup_on_eviction: bool = True,
                 reader: Reader | None = None) -> None:
        self.http = http
        #: Where the reads come from: the driver's informer cache, else a LIST per read.
        self.reader = reader or HttpReader(http)
        self.timeline = timeline
        self.env = Env(http, timeline, KueueEventRecorder(http, PROVISIONING_CONTROLLER),
                       cleanup_on_eviction=cleanup_on_eviction)

    def next_wake(self) -> float | None:
        return None

    async def sync(self, now: float) -> bool:
        try:
            snap = await load_snapshot(self.reader)
        except ApiError as exc:
            log.warning("provisioning-check: cannot list: %s", exc)
            return False
        wrote = await self._sync_admission_checks(snap, now)
        for workload in snap.workloads:
            reconcile = WorkloadReconcile(self.env, snap, workload, now)
            try:
                await reconcile.run()
            except Exception:  # one bad Workload must not stop the others
                meta = workload.get("metadata") or {}
                log.exception("provisioning-check: workload %s/%s", meta.get("namespace"), meta.get("name"))
            wrote = reconcile.wrote or wrote
        return wrote

    async def _sync_admission_checks(self, snap: Snapshot, now: float) -> bool:
        wrote = False
        for name, ac in snap.checks.items():
            if (ac.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
                continue
            cond = active_condition(ac, snap.configs, now)
            conditions = list((ac.get("status") or {}).get("conditions") or [])
            current = next((c for c in conditions if c.get("type") == ACTIVE), None)
            if current is not None and current.get("status") == cond["status"]:
                continue
            new = copy.deepcopy(ac)
            new.setdefault("status", {})["conditions"] = (
                [cond if c.get("type") == ACTIVE else c for c in conditions] if current else [*conditions, cond])
            try:
                await self.http.request("PUT", ADMISSIONCHECKS.path(name=name, sub="status"), body=new)
            except ApiError as exc:
                log.info("provisioning-check: admission check %s: %s", name, exc)
                continue
            wrote = True
        return wrote
