"""``flex-start`` mode: Dynamic Workload Scheduler capacity from a flex-start node pool, one MIG resize request
per obtain.

Compute Engine's resize requests are its all-or-nothing, queued way of adding VMs to a managed instance group, for
the flex-start and reservation-bound provisioning models (Google's "About resize requests in a MIG"): a request
asks for ``resizeBy`` VMs for a ``requestedRunDuration`` (10 minutes to 7 days); it waits (``ACCEPTED``) until
Compute Engine can create them all at once, then ``SUCCEEDED``, or ``FAILED`` (whatever it made rolled back), or
``CANCELLED``; Compute Engine deletes the VMs at the end of the run duration. The pool's node pool must be a GKE
flex-start node pool (``config.flexStart``; its instance template's ``scheduling.provisioningModel`` is
``FLEX_START``), which the provider checks at start.

An obtain inserts the request ``gs-<claim>`` (``resizeBy`` = the units, ``requestedRunDuration`` = the pool's
``maxRunDurationSeconds`` or GKE's default of 7 days, the token in its description, a token-derived
``requestId``), waits for it until the deadline (then cancels it), and on ``SUCCEEDED`` finds its VMs by the
metadata item Compute Engine puts on them (:mod:`.origins`). The units are those VMs; the obtain says when they
will be deleted (their ``scheduling.terminationTimestamp``). A failure cancels and deletes the request and any
VM of it. A release is by VM: it deletes the VMs, then each request none of whose VMs is left, so scale-down
leaves no request behind; a request whose VMs all reached the end of their run duration is deleted by the next
obtain in its group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from gangscale.clock import Clock
from gangscale.providers.base import ErrorClass, Obtained, ProviderError, Unit
from gangscale.providers.gke import names
from gangscale.providers.gke.calls import timed_out, with_rollback
from gangscale.providers.gke.client import GcpError, GcpHttp
from gangscale.providers.gke.errors import from_compute_errors, from_http
from gangscale.providers.gke.groups import CLEANUP_SECONDS, InstanceGroups, not_all_deleted
from gangscale.providers.gke.operations import OperationTimeout, Waiter, compute_errors
from gangscale.providers.gke.origins import Origins
from gangscale.providers.gke.pools import DEFAULT_RUN_SECONDS, GkePool
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)
#: Request states that are over (compute v1 ``InstanceGroupManagerResizeRequest.state``); any other is waiting.
DONE_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: A resize request may wait for capacity for a long time: its polls grow to this (seconds).
REQUEST_POLL_MAX = 30.0


class FlexStart:
    def __init__(self, http: GcpHttp, waiter: Waiter, clock: Clock, groups: InstanceGroups,
                 origins: Origins) -> None:
        self.http, self.waiter, self.clock, self.groups, self.origins = http, waiter, clock, groups, origins

    # -- obtain -----------------------------------------------------------------------------------------------------

    async def obtain(self, gp: GkePool, units: int, token: str, deadline: float) -> Obtained:
        group = self.groups.group(gp)
        name = names.resize_request_name(token)
        try:
            await self._sweep(group, token)
            request = await self._settled(gp, group, name, units, token, deadline)
            if request.get("state") != "SUCCEEDED":
                raise _failure(request, gp)
            made = await self.origins.of_request(await self.groups.instances(group), name)
            if len(made) != units:
                raise ProviderError(ErrorClass.STOCKOUT, "VMS_MISSING", f"resize request {name} succeeded but "
                                    f"{len(made)} of its {units} VMs are left", pool=gp.name)
        except GcpError as exc:
            raise from_http(exc, gp.name, rolled_back=False) from exc
        except ProviderError as exc:
            if exc.error_class is ErrorClass.TRANSIENT:
                raise  # outcome unknown: the caller repeats the obtain with the same token
            log.warning("gke: resize request %s of %s failed (%s); undoing it", name, gp.name, exc.message)
            raise with_rollback(exc, await self._undo(gp, [name], token, deadline + CLEANUP_SECONDS)) from exc
        vms = sorted(str(mi.get("name")) for mi in made)
        return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms),
                        expires_at=self._end(made, gp))

    async def _settled(self, gp: GkePool, group: str, name: str, units: int, token: str, deadline: float) -> JSON:
        """Insert the request (or adopt the one an earlier try made) and wait until it is over or the deadline."""
        url = f"{group}/resizeRequests/{name}"
        body = {"name": name, "resizeBy": units, "description": f"gangscale token {token}",
                "requestedRunDuration": {"seconds": str(gp.run_seconds or DEFAULT_RUN_SECONDS)}}
        try:
            op = await self.http.compute("POST", f"{group}/resizeRequests", body=body,
                                         params={"requestId": names.request_id(token, "resize-request")})
            op = await self.waiter.compute(op, deadline)
            if errors := compute_errors(op):
                raise from_compute_errors(errors, gp.name)
        except GcpError as exc:
            if not exc.conflict:
                raise from_http(exc, gp.name, rolled_back=False) from exc
        except OperationTimeout as exc:
            raise timed_out(gp.name, f"inserting resize request {name}") from exc
        request = await self.http.compute("GET", url)
        if f"gangscale token {token}" != str(request.get("description", "")):
            raise ProviderError(ErrorClass.PERMANENT, "RESIZE_REQUEST_NAME_TAKEN",
                                f"resize request {name} exists and was not made for token {token}", pool=gp.name,
                                rolled_back=False)
        polls = self.waiter.schedule(REQUEST_POLL_MAX)
        while request.get("state") not in DONE_STATES:
            try:
                await polls.pause(deadline, request)
            except OperationTimeout as exc:
                raise timed_out(gp.name, f"resize request {name} (still {request.get('state')})") from exc
            request = await self.http.compute("GET", url)
        return request

    def _end(self, made: Sequence[JSON], gp: GkePool) -> float:
        """When Compute Engine deletes these VMs: the earliest ``scheduling.terminationTimestamp``, or the run
        duration from now."""
        stamps = [parse_rfc3339(str((mi.get("scheduling") or {}).get("terminationTimestamp") or "")) for mi in made]
        known = [stamp for stamp in stamps if stamp is not None]
        return min(known) if known else self.clock.now() + (gp.run_seconds or DEFAULT_RUN_SECONDS)

    # -- undo, release, lookup --------------------------------------------------------------------------------------

    async def _undo(self, gp: GkePool, requests: Iterable[str], token: str, deadline: float) -> bool:
        """Cancel these requests if they still wait, delete every VM they made, and delete them; True if done."""
        group = self.groups.group(gp)
        try:
            managed = await self.groups.instances(group)
            ok = True
            for name in sorted(set(requests)):
                made = [str(mi.get("name")) for mi in await self.origins.of_request(managed, name)]
                exists = await self._cancel(f"{group}/resizeRequests/{name}", token, deadline)
                if made:
                    ok = await self.groups.delete(gp, made, token, deadline) and ok
                if exists:
                    await self._delete(f"{group}/resizeRequests/{name}", token, deadline)
        except (GcpError, OperationTimeout, ProviderError) as exc:
            log.warning("gke: could not undo resize requests %s of %s: %s", sorted(set(requests)), gp.name, exc)
            return False
        return ok

    async def _forget(self, gp: GkePool, requests: Iterable[str], gone: set[str], token: str,
                      deadline: float) -> None:
        """Cancel and delete each of these requests none of whose VMs is left (``gone`` are being deleted)."""
        group = self.groups.group(gp)
        managed = [mi for mi in await self.groups.instances(group)
                   if str(mi.get("name")) not in gone and mi.get("currentAction") != "DELETING"]
        for name in sorted(set(requests)):
            if not await self.origins.of_request(managed, name):
                url = f"{group}/resizeRequests/{name}"
                if await self._cancel(url, token, deadline):
                    await self._delete(url, token, deadline)

    async def _cancel(self, url: str, token: str, deadline: float) -> bool:
        """Cancel the request if it is still waiting (only ACCEPTED can be); True if it exists."""
        try:
            request = await self.http.compute("GET", url)
        except GcpError as exc:
            if exc.not_found:
                return False
            raise
        if request.get("state") == "ACCEPTED":
            try:
                op = await self.http.compute("POST", f"{url}/cancel",
                                             params={"requestId": names.request_id(token, f"cancel:{url}")})
                await self.waiter.compute(op, deadline)
            except GcpError as exc:
                log.info("gke: cancelling %s: %s", url, exc)
        return True

    async def _delete(self, url: str, token: str, deadline: float) -> None:
        try:
            op = await self.http.compute("DELETE", url, params={"requestId": names.request_id(token, f"delete:{url}")})
        except GcpError as exc:
            if exc.not_found:
                return
            raise
        await self.waiter.compute(op, deadline)

    async def release(self, gp: GkePool, unit_ids: Sequence[str], token: str) -> None:
        """Delete these VMs, then every request that made them once none of its VMs is left. A unit that is a
        placeholder (``gs-<claim>-<i>``: a VM its request never made) names its request by its claim."""
        deadline = self.clock.now() + CLEANUP_SECONDS
        group = self.groups.group(gp)
        try:
            by_name = {str(mi.get("name")): mi for mi in await self.groups.instances(group)}
            requests = {f"{names.PREFIX}{claim}" for unit in unit_ids if (claim := names.claim_of(unit))}
            for unit in unit_ids:
                if unit in by_name and (made_by := await self.origins.made_by(by_name[unit])):
                    requests.add(made_by)
            vms = [unit for unit in unit_ids if unit in by_name]
            if not await self.groups.delete(gp, vms, token, deadline):
                raise not_all_deleted(gp, unit_ids)
            await self._forget(gp, {r for r in requests if names.claim_of_request(r)}, set(vms), token, deadline)
        except (GcpError, OperationTimeout) as exc:
            log.warning("gke: releasing %s of %s: %s", list(unit_ids), gp.name, exc)
            raise not_all_deleted(gp, unit_ids) from exc

    async def lookup(self, pools: Iterable[GkePool], token: str) -> Obtained | None:
        """The units of ``token``'s request: its VMs, and a placeholder ``gs-<claim>-<i>`` (incomplete) for each VM
        it asked for that does not exist (not made yet, failed, or gone)."""
        name = names.resize_request_name(token)
        for gp in pools:
            group = self.groups.groups.get(gp.name)
            if group is None:
                continue
            try:
                request = await self.http.compute("GET", f"{group}/resizeRequests/{name}")
            except GcpError as exc:
                if exc.not_found:
                    continue
                raise
            made = await self.origins.of_request(await self.groups.instances(group), name)
            vms = sorted(str(mi.get("name")) for mi in made)
            missing = [names.unit_name(token, i) for i in range(max(0, int(request.get("resizeBy") or 0) - len(vms)))]
            return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms) + tuple(Unit(m, ()) for m in missing),
                            tuple(missing), expires_at=self._end(made, gp) if made else None)
        return None

    async def _sweep(self, group: str, token: str) -> None:
        """Delete our requests of this group that SUCCEEDED and have no VM left (their run duration ended)."""
        listed = await self.http.compute("GET", f"{group}/resizeRequests")
        done = [str(rr.get("name")) for rr in listed.get("items") or [] if rr.get("state") == "SUCCEEDED"
                and names.claim_of_request(str(rr.get("name"))) and "gangscale token" in str(rr.get("description"))]
        if not done:
            return
        managed = await self.groups.instances(group)
        for name in done:
            if not await self.origins.of_request(managed, name):
                log.info("gke: deleting resize request %s: its VMs are gone", name)
                await self._delete(f"{group}/resizeRequests/{name}", token, self.clock.now() + CLEANUP_SECONDS)


def _failure(request: JSON, gp: GkePool) -> ProviderError:
    """A request that is over without SUCCEEDED: its final errors (``status.error.errors[]``)."""
    errors = ((request.get("status") or {}).get("error") or {}).get("errors") or []
    state = request.get("state")
    return from_compute_errors(errors or [{"code": str(state), "message": f"resize request {request.get('name')} "
                                                                          f"is {state}"}], gp.name)
