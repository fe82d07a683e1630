"""One Workload's reconcile by the emulated provisioning admission check (Kueue's ``Controller.Reconcile``).

The steps and their order are Kueue's: skip a Workload without quota reservation that is neither finished nor
evicted; for a finished or evicted one delete every owned ProvisioningRequest and stop; otherwise resolve the
relevant checks and their configs, pick each check's current request (``activeOrLastPRForChecks``), write the
check states (:mod:`gangscale.sim.kueue.checkstate`), delete every other owned request, and create what is
missing (PodTemplates first, then the request, then the templates' ownership moves to the request). The
module docstring of :mod:`gangscale.sim.kueue.provisioning` lists what is simplified.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import PODTEMPLATES, PROVREQS, WORKLOADS
from gangscale.sim.kueue.checkstate import (
    BOOKING_EXPIRED,
    FAILED,
    PENDING,
    READY,
    CheckFacts,
    CheckOutcome,
    Condition,
    decide,
)
from gangscale.sim.kueue.prconfig import config_from_ref, config_spec, retry_strategy, synced_with_config
from gangscale.sim.kueue.prmerge import InconsistentAssignments, merge_pod_sets, request_needed
from gangscale.sim.kueue.prnames import CONTROLLER_NAME, attempt_of, matches, request_name, template_name
from gangscale.sim.kueue.provisioningcontext import Env, Snapshot, condition_true, request_conditions
from gangscale.sim.kueue.prtemplates import (
    REQUEST_API_VERSION,
    WORKLOAD_API_VERSION,
    TemplateError,
    controller_reference,
    pod_template_body,
    ready_pod_set_updates,
    request_body,
)
from gangscale.sim.world import CHECK, PR_CREATED, workload_subject
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
APPLY = "application/apply-patch+yaml"
MAX_MESSAGE = 32768
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckPlan:
    """A relevant check: its config (None: missing, the check is inactive), whether a request is needed, and
    its current request (None: none)."""

    name: str
    config: JSON | None
    needed: bool
    request: JSON | None


def _meta(obj: Mapping[str, Any]) -> JSON:
    return dict(obj.get("metadata") or {})


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _same_object(ref: Mapping[str, Any], api_version: str, kind: str, name: str) -> bool:
    """controller-runtime's ``referSameObject``: same group, kind and name (uid and version ignored)."""
    return (_group(str(ref.get("apiVersion", ""))) == _group(api_version) and ref.get("kind") == kind
            and ref.get("name") == name)


def _entry_outcome(entry: Mapping[str, Any]) -> CheckOutcome:
    updates = entry.get("podSetUpdates")
    return CheckOutcome(str(entry.get("state", PENDING)), str(entry.get("message") or ""),
                        entry.get("requeueAfterSeconds"), list(updates) if updates else None)


class WorkloadReconcile:
    """One pass over one Workload; ``wrote`` says whether anything was written, even if the pass then failed."""

    def __init__(self, env: Env, snap: Snapshot, workload: JSON, now: float) -> None:
        self.env = env
        self.snap = snap
        self.wl = workload
        self.now = now
        meta = _meta(workload)
        self.name = str(meta.get("name", ""))
        self.namespace = str(meta.get("namespace", ""))
        self.uid = str(meta.get("uid", ""))
        self.entries: dict[str, JSON] = {str(e.get("name")): dict(e)
                                         for e in (workload.get("status") or {}).get("admissionChecks") or []}
        self.admitted = condition_true(workload, "Admitted")
        self.mine: list[str] = []  # the relevant checks, set by _plans
        self.wrote = False

    async def run(self) -> bool:
        finished = condition_true(self.wl, "Finished")
        evicted = condition_true(self.wl, "Evicted")
        if not condition_true(self.wl, "QuotaReserved") and not finished and not evicted:
            return False
        owned = [pr for pr in self.snap.requests.get(self.namespace, [])
                 if any(ref.get("name") == self.name for ref in _meta(pr).get("ownerReferences") or [])]
        if finished or (evicted and self.env.cleanup_on_eviction):
            for pr in owned:
                await self._delete_request(pr)
            return self.wrote
        if evicted:
            return False
        plans = self._plans(owned)
        if plans is None:
            return False
        await self._sync_check_states(plans)
        keep = {_meta(p.request).get("name") for p in plans if p.request is not None}
        for pr in owned:
            if _meta(pr).get("name") not in keep:
                await self._delete_request(pr)
        await self._sync_owned(plans)
        return self.wrote

    # --- which checks, which configs, which requests ----------------------------------------------------

    def _plans(self, owned: list[JSON]) -> list[CheckPlan] | None:
        """The relevant checks in Workload order; None when Kueue's reconcile would stop with an error."""
        plans = []
        for check in self.entries:
            ac = self.snap.checks.get(check)
            if ac is None or (ac.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
                continue
            lookup = config_from_ref((ac.get("spec") or {}).get("parameters"), self.snap.configs)
            if lookup.config is None and not lookup.missing:
                log.info("workload %s/%s: check %s: %s", self.namespace, self.name, check, lookup.error)
                return None
            needed, current = False, None
            if lookup.config is not None:
                spec = config_spec(lookup.config)
                try:
                    needed = request_needed(self.wl, list(spec.get("managedResources") or []))
                except InconsistentAssignments as exc:
                    log.info("workload %s/%s: %s", self.namespace, self.name, exc)
                    return None
                if needed:
                    current = self._current_request(check, spec, owned)
            plans.append(CheckPlan(check, lookup.config, needed, current))
        self.mine = [p.name for p in plans]
        return plans

    def _current_request(self, check: str, spec: JSON, owned: list[JSON]) -> JSON | None:
        """The in-sync request of ``check`` with the highest attempt (the first one on a tie)."""
        best: JSON | None = None
        for pr in owned:
            name = str(_meta(pr).get("name", ""))
            if not matches(name, self.name, check) or not synced_with_config(pr, spec):
                continue
            if best is None or attempt_of(str(_meta(best).get("name")), self.name, check) < attempt_of(
                    name, self.name, check):
                best = pr
        return best

    # --- check states -----------------------------------------------------------------------------------

    def _facts(self, plan: CheckPlan) -> CheckFacts:
        entry = self.entries[plan.name]
        spec = config_spec(plan.config)
        request = plan.request
        return CheckFacts(
            current=_entry_outcome(entry), retry_count=int(entry.get("retryCount") or 0),
            config_found=plan.config is not None, request_needed=plan.needed,
            attempt=None if request is None else attempt_of(str(_meta(request).get("name")), self.name, plan.name),
            conditions={} if request is None else request_conditions(request), strategy=retry_strategy(spec),
            admitted=self.admitted, active=(self.wl.get("spec") or {}).get("active", True) is not False,
            finished=condition_true(self.wl, "Finished"),
            ready_pod_set_updates=[] if request is None else ready_pod_set_updates(self.wl, request, spec))

    async def _sync_check_states(self, plans: list[CheckPlan]) -> None:
        changes: dict[str, CheckOutcome] = {}
        for plan in plans:
            if plan.config is not None and plan.needed and plan.request is None:
                # Kueue leaves every check of the Workload as it is until the missing request exists.
                return
            outcome = decide(self._facts(plan))
            if outcome is not None:
                changes[plan.name] = outcome
        if changes:
            await self._apply_checks(self.mine, changes)

    async def _apply_checks(self, names: list[str], changes: Mapping[str, CheckOutcome]) -> None:
        """Apply this controller's entries (all of them: an apply drops the fields it no longer sends).

        As Kueue's ``syncCheckStates`` does, each entry is the Workload's copy with the decided state, message,
        requeueAfterSeconds and podSetUpdates set on it by ``patching.SetAdmissionCheckState``: its
        ``retryCount`` goes along (so this manager co-owns it, and it survives Kueue's reset after a Rejected
        check), and ``lastTransitionTime`` is the copy's. ``SetAdmissionCheckState`` takes a non-zero
        ``lastTransitionTime`` from the new state, and the copy always has one, so a state change made here
        does not move it: it stays at the time the entry was added or last reset (a Kueue bug the Retry
        backoff inherits: ``requeueAt`` is counted from that time)."""
        new_entries: dict[str, JSON] = {}
        transitions: list[tuple[str, str, CheckOutcome]] = []
        for name in names:
            entry = self.entries[name]
            outcome = changes.get(name, _entry_outcome(entry))
            ltt = entry.get("lastTransitionTime") or rfc3339(self.now)
            if outcome.state != entry.get("state"):
                transitions.append((name, str(entry.get("state", "")), outcome))
            rendered: JSON = {"name": name, "state": outcome.state, "message": outcome.message[:MAX_MESSAGE],
                              "lastTransitionTime": ltt}
            if outcome.requeue_after_seconds is not None:
                rendered["requeueAfterSeconds"] = outcome.requeue_after_seconds
            if outcome.pod_set_updates:
                rendered["podSetUpdates"] = outcome.pod_set_updates
            if isinstance(entry.get("retryCount"), int):
                rendered["retryCount"] = entry["retryCount"]
            new_entries[name] = rendered
        body = {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "status": {"admissionChecks": list(new_entries.values())}}
        await self.env.http.request("PATCH", WORKLOADS.path(self.namespace, self.name, "status"),
                                    query={"fieldManager": CONTROLLER_NAME, "force": "true"}, body=body,
                                    content_type=APPLY)
        self.wrote = True
        for name, rendered in new_entries.items():
            self.entries[name] = {**self.entries[name], **rendered}
            for key in ("requeueAfterSeconds", "podSetUpdates"):
                if key not in rendered:
                    self.entries[name].pop(key, None)
        subject = workload_subject(self.wl)
        for name, old, outcome in transitions:
            text = f"Admission check {name} updated state from {old} to {outcome.state}"
            if outcome.message:
                text += f" with message: {outcome.message}"
            await self.env.events.record(self.wl, "Normal", "AdmissionCheckUpdated", text, self.now)
            self.env.timeline.add(self.now, CHECK, subject, f"check {name}: {old} -> {outcome.state}",
                                  check=name, state=outcome.state)

    async def _handle_error(self, plan: CheckPlan, message: str) -> None:
        """Kueue's ``handleError``: a FailedCreate event and the error as the check's message."""
        if (self.uid, message) not in self.env.reported:
            if len(self.env.reported) > 1000:
                self.env.reported.clear()
            self.env.reported.add((self.uid, message))
            await self.env.events.record(self.wl, "Warning", "FailedCreate", message, self.now)
        current = _entry_outcome(self.entries[plan.name])
        if current.message != message[:MAX_MESSAGE]:
            outcome = CheckOutcome(current.state, message, current.requeue_after_seconds, current.pod_set_updates)
            await self._apply_checks(self.mine, {plan.name: outcome})

    # --- requests and templates -------------------------------------------------------------------------

    async def _sync_owned(self, plans: list[CheckPlan]) -> None:
        for plan in plans:
            entry = self.entries[plan.name]
            if plan.config is None or not plan.needed or entry.get("state") == READY:
                continue
            request = plan.request
            attempt = int(entry.get("retryCount") or 0) + 1
            create = request is None
            if request is not None and entry.get("state") == PENDING:
                conds = request_conditions(request)
                if _is_true(conds, FAILED) or (_is_true(conds, BOOKING_EXPIRED) and not self.admitted):
                    attempt = attempt_of(str(_meta(request).get("name")), self.name, plan.name) + 1
                    create = True
            if create:
                created, stop = await self._create_request(plan, request_name(self.name, plan.name, attempt))
                if stop:
                    return
                if created is None:
                    continue
                request = created
            assert request is not None
            if not await self._adopt_templates(request):
                return

    async def _create_request(self, plan: CheckPlan, name: str) -> tuple[JSON | None, bool]:
        """Create the templates and the request; (the request or None, whether to stop this reconcile)."""
        spec = config_spec(plan.config)
        try:
            merged = merge_pod_sets(self.wl, spec)
        except InconsistentAssignments as exc:
            log.info("workload %s/%s: %s", self.namespace, self.name, exc)
            return None, True
        if not merged:
            return None, False
        for m in merged:
            pt_name = template_name(name, m.name)
            if await self._get(PODTEMPLATES, pt_name) is not None:
                continue
            try:
                body = pod_template_body(self.wl, pt_name, m, self.snap.flavors)
                await self.env.http.request("POST", PODTEMPLATES.path(self.namespace), body=body)
            except (TemplateError, ApiError) as exc:
                await self._handle_error(plan, f'Error creating PodTemplate "{pt_name}": {_text(exc)}')
                return None, True
            self.wrote = True
        try:
            created = await self.env.http.request("POST", PROVREQS.path(self.namespace),
                                                  body=request_body(self.wl, name, spec, merged))
        except ApiError as exc:
            await self._handle_error(plan, f'Error creating ProvisioningRequest "{name}": {_text(exc)}')
            return None, True
        self.wrote = True
        await self.env.events.record(self.wl, "Normal", "ProvisioningRequestCreated",
                                     f'Created ProvisioningRequest: "{name}"', self.now, action="Created")
        self.env.timeline.add(self.now, PR_CREATED, workload_subject(self.wl), f"ProvisioningRequest {name}",
                              name=name)
        return created, False

    async def _get(self, resource: Any, name: str) -> JSON | None:
        try:
            return await self.env.http.request("GET", resource.path(self.namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def _adopt_templates(self, request: JSON) -> bool:
        """Move each template's controller reference from the Workload to the request; False on a template
        that another controller owns (Kueue's reconcile fails there)."""
        pr = _meta(request)
        for ps in (request.get("spec") or {}).get("podSets") or []:
            pt_name = str((ps.get("podTemplateRef") or {}).get("name", ""))
            listed = self.snap.templates.get((self.namespace, pt_name))
            if listed is not None and [(r.get("uid"), r.get("controller")) for r in
                                       _meta(listed).get("ownerReferences") or []] == [(pr.get("uid"), True)]:
                continue  # already the request's alone: no need to read it again
            pt = await self._get(PODTEMPLATES, pt_name)
            if pt is None:
                continue
            refs = list(_meta(pt).get("ownerReferences") or [])
            changed = False
            if any(r.get("controller") and r.get("uid") == self.uid for r in refs):
                refs = [r for r in refs if not _same_object(r, WORKLOAD_API_VERSION, "Workload", self.name)]
                changed = True
            if not any(r.get("controller") and r.get("uid") == pr.get("uid") for r in refs):
                mine = controller_reference(request, REQUEST_API_VERSION, "ProvisioningRequest")
                same = [i for i, r in enumerate(refs) if _same_object(r, REQUEST_API_VERSION, "ProvisioningRequest",
                                                                         str(pr.get("name")))]
                if any(r.get("controller") for i, r in enumerate(refs) if i not in same):
                    log.info("podtemplate %s/%s is controlled by another object", self.namespace,
                             _meta(pt).get("name"))
                    return False
                refs = [r for i, r in enumerate(refs) if i not in same] + [mine]
                changed = True
            if changed:
                pt["metadata"]["ownerReferences"] = refs
                await self.env.http.request("PUT", PODTEMPLATES.path(self.namespace, _meta(pt).get("name")),
                                            body=pt)
                self.wrote = True
        return True

    async def _delete_request(self, request: JSON) -> None:
        """Delete the request, and at once the templates it alone owns (the garbage collector would, later)."""
        meta = _meta(request)
        uid = meta.get("uid")
        if not await self._delete(PROVREQS, str(meta.get("name")), uid):
            return
        for (ns, name), pt in list(self.snap.templates.items()):
            refs = _meta(pt).get("ownerReferences") or []
            if ns == self.namespace and refs and all(r.get("uid") == uid for r in refs):
                await self._delete(PODTEMPLATES, name, _meta(pt).get("uid"))
                self.snap.templates.pop((ns, name), None)

    async def _delete(self, resource: Any, name: str, uid: Any) -> bool:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}} if uid else None
        try:
            await self.env.http.request("DELETE", resource.path(self.namespace, name), body=body)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
        self.wrote = True
        return True


def _is_true(conds: Mapping[str, Condition], ctype: str) -> bool:
    cond = conds.get(ctype)
    return cond is not None and cond.status == "True"


def _text(exc: Exception) -> str:
    return exc.message if isinstance(exc, ApiError) and exc.message else str(exc)
