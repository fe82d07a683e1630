"""``resize-request`` and ``resize`` modes: single VMs added to an existing node pool's managed instance group.

The MIG is the node pool's group in the pool's zone (the node pool's ``instanceGroupUrls``). Each unit is one VM
named ``gs-<claim>-<i>``, so the whole intent is fixed by the first call and a restarted provider finds it.

- ``resize-request`` inserts one MIG resize request ``gs-<claim>`` naming every VM (``instances[]``; the token
  is in its description). Compute Engine creates them all at once when it has the capacity, or fails the request
  and removes any VM it made (``SUCCEEDED`` / ``FAILED``). A request still waiting at the deadline is cancelled
  and deleted, and whatever VM of it exists is deleted.
- ``resize`` calls ``createInstances`` with the same names (what a plain resize does to the target size, with
  names that identify the VMs); VMs are then watched in ``listManagedInstances`` until all run. A VM whose last
  creation attempt failed for lack of capacity or quota, or VMs not all running by the deadline, fail the obtain,
  and every VM of it is deleted.

Mutating Compute calls carry a ``requestId`` derived from the token, so a call repeated after a lost answer is
one call. ``lookup`` answers from the resize request and the MIG's instances alone.
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
from gangscale.providers.gke.operations import OperationTimeout, Waiter, compute_errors, compute_path
from gangscale.providers.gke.pools import GkePool

JSON = dict[str, Any]
log = logging.getLogger(__name__)
CLEANUP_SECONDS = 1800.0
WAITING_STATES = ("CREATING", "ACCEPTED")
#: A resize request may wait for capacity for a long time: its polls grow to this (seconds).
REQUEST_POLL_MAX = 30.0


class Migs:
    def __init__(self, http: GcpHttp, waiter: Waiter, clock: Clock) -> None:
        self.http, self.waiter, self.clock = http, waiter, clock
        #: gangscale pool -> ``/projects/P/zones/Z/instanceGroupManagers/M`` (resolved by the provider's start).
        self.groups: dict[str, str] = {}

    def group(self, gp: GkePool) -> str:
        found = self.groups.get(gp.name)
        if found is None:
            raise ProviderError(ErrorClass.PERMANENT, "NO_INSTANCE_GROUP",
                                f"node pool {gp.node_pool} has no managed instance group in zone {gp.zone}",
                                pool=gp.name)
        return found

    # -- obtain -----------------------------------------------------------------------------------------------------

    async def obtain(self, gp: GkePool, units: int, token: str, deadline: float) -> Obtained:
        vms = [names.unit_name(token, i) for i in range(units)]
        try:
            if gp.mode == "resize-request":
                await self._resize_request(gp, vms, token, deadline)
            else:
                await self._create_instances(gp, vms, token, deadline)
        except ProviderError as exc:
            if exc.error_class is ErrorClass.TRANSIENT:
                raise
            log.warning("gke: VMs of %s (token %s) failed (%s); deleting every VM of the token", gp.name, token,
                        exc.message)
            raise with_rollback(exc, await self._delete(gp, vms, token, deadline + CLEANUP_SECONDS)) from exc
        return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms))

    async def _resize_request(self, gp: GkePool, vms: Sequence[str], token: str, deadline: float) -> None:
        path = f"{self.group(gp)}/resizeRequests"
        name = names.resize_request_name(token)
        body = {"name": name, "instances": [{"name": vm} for vm in vms], "description": f"gangscale token {token}"}
        try:
            op = await self.http.compute("POST", path, body=body,
                                         params={"requestId": names.request_id(token, "resize-request")})
            op = await self.waiter.compute(op, deadline)
            if errors := compute_errors(op):
                raise from_compute_errors(errors, gp.name)
        except GcpError as exc:
            if not exc.conflict:
                raise from_http(exc, gp.name, rolled_back=False) from exc
        except OperationTimeout as exc:
            raise timed_out(gp.name, f"inserting resize request {name}") from exc
        try:
            request = await self._settled(f"{path}/{name}", token, gp, deadline)
        except OperationTimeout as exc:
            await self._cancel(f"{path}/{name}", token)
            raise timed_out(gp.name, f"resize request {name}") from exc
        except GcpError as exc:
            raise from_http(exc, gp.name, rolled_back=False) from exc
        if request.get("state") != "SUCCEEDED":
            errors = ((request.get("status") or {}).get("error") or {}).get("errors") or []
            raise from_compute_errors(errors or [{"code": str(request.get("state")),
                                                  "message": f"resize request {name} is {request.get('state')}"}],
                                      gp.name)

    async def _settled(self, url: str, token: str, gp: GkePool, deadline: float) -> JSON:
        request = await self.http.compute("GET", url)
        if token not in str(request.get("description", "")):
            raise ProviderError(ErrorClass.PERMANENT, "RESIZE_REQUEST_NAME_TAKEN",
                                f"resize request {request.get('name')} exists and was not made for token {token}",
                                pool=gp.name, rolled_back=False)
        polls = self.waiter.schedule(REQUEST_POLL_MAX)
        while request.get("state") in WAITING_STATES:
            await polls.pause(deadline, request)
            request = await self.http.compute("GET", url)
        return request

    async def _cancel(self, url: str, token: str) -> None:
        try:
            await self.http.compute("POST", f"{url}/cancel", params={"requestId": names.request_id(token, "cancel")})
        except GcpError as exc:
            log.info("gke: cancelling %s: %s", url, exc)

    async def _create_instances(self, gp: GkePool, vms: Sequence[str], token: str, deadline: float) -> None:
        group = self.group(gp)
        try:
            op = await self.http.compute("POST", f"{group}/createInstances",
                                         body={"instances": [{"name": vm} for vm in vms]},
                                         params={"requestId": names.request_id(token, "create-instances")})
            op = await self.waiter.compute(op, deadline)
            if errors := compute_errors(op):
                raise from_compute_errors(errors, gp.name)
            await self._running(gp, group, set(vms), deadline)
        except GcpError as exc:
            raise from_http(exc, gp.name, rolled_back=False) from exc
        except OperationTimeout as exc:
            raise timed_out(gp.name, f"creating {len(vms)} VM(s) in node pool {gp.node_pool}") from exc

    async def _running(self, gp: GkePool, group: str, vms: set[str], deadline: float) -> None:
        """Until every VM runs; a VM whose last attempt failed for lack of capacity or quota fails them all."""
        polls = self.waiter.schedule()
        while True:
            found = {str(mi.get("name")): mi for mi in await self._instances(group) if mi.get("name") in vms}
            failed = [e for mi in found.values() for e in
                      ((mi.get("lastAttempt") or {}).get("errors") or {}).get("errors") or []]
            if failed:
                raise from_compute_errors(failed, gp.name)
            if len(found) == len(vms) and all(mi.get("instanceStatus") == "RUNNING" for mi in found.values()):
                return
            await polls.pause(deadline, {"name": f"VMs of {gp.node_pool}"})

    async def _instances(self, group: str) -> list[JSON]:
        out: list[JSON] = []
        token = ""
        while True:
            page = await self.http.compute("POST", f"{group}/listManagedInstances",
                                           params={"pageToken": token} if token else None)
            out.extend(page.get("managedInstances") or [])
            token = str(page.get("nextPageToken") or "")
            if not token:
                return out

    # -- lookup and release -----------------------------------------------------------------------------------------

    async def lookup(self, pools: Iterable[GkePool], token: str) -> Obtained | None:
        claim = names.claim(token)
        for gp in pools:
            group = self.groups.get(gp.name)
            if group is None:
                continue
            present = {str(mi.get("name")): mi for mi in await self._instances(group)
                       if names.claim_of(str(mi.get("name", ""))) == claim}
            count = len(present)
            if gp.mode == "resize-request":
                try:
                    request = await self.http.compute("GET", f"{group}/resizeRequests/"
                                                             f"{names.resize_request_name(token)}")
                    count = max(count, len(request.get("instances") or []) or int(request.get("resizeBy") or 0))
                except GcpError as exc:
                    if not exc.not_found:
                        raise from_http(exc, gp.name) from exc
            if count:
                vms = [names.unit_name(token, i) for i in range(count)]
                incomplete = tuple(vm for vm in vms if (present.get(vm) or {}).get("instanceStatus") != "RUNNING")
                return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms), incomplete)
        return None

    async def release(self, gp: GkePool, unit_ids: Sequence[str], token: str) -> None:
        if not await self._delete(gp, unit_ids, token, self.clock.now() + CLEANUP_SECONDS):
            raise ProviderError(ErrorClass.TRANSIENT, "DELETE_INCOMPLETE",
                                f"not every VM of {', '.join(unit_ids)} could be deleted", pool=gp.name)

    async def _delete(self, gp: GkePool, vms: Sequence[str], token: str, deadline: float) -> bool:
        """Delete these VMs (one that is gone counts as deleted) and, in ``resize-request`` mode, the resize requests
        that made them once none of their VMs is left; True if done. What made a VM is found from the VM's own name
        (``gs-<claim>-<i>`` was made by the request ``gs-<claim>``), so a release by unit, whatever token names it,
        leaves no request behind."""
        group = self.group(gp)
        try:
            present = {str(mi.get("name")): mi for mi in await self._instances(group)}
            doomed = [vm for vm in vms if vm in present and present[vm].get("currentAction") != "DELETING"]
            if doomed:
                op = await self.http.compute(
                    "POST", f"{group}/deleteInstances",
                    body={"instances": [instance_url(present[vm], group) for vm in doomed],
                          "skipInstancesOnValidationError": True},
                    params={"requestId": names.request_id(token, "delete:" + ",".join(sorted(doomed)))})
                op = await self.waiter.compute(op, deadline)
                if errors := compute_errors(op):
                    log.warning("gke: deleting VMs %s failed: %s", doomed, errors)
                    return False
            if gp.mode == "resize-request":
                await self._delete_requests(group, vms, token, deadline)
        except (GcpError, OperationTimeout) as exc:
            log.warning("gke: could not delete VMs %s of %s: %s", list(vms), gp.node_pool, exc)
            return False
        return True

    async def _delete_requests(self, group: str, vms: Sequence[str], token: str, deadline: float) -> None:
        """Delete the resize request of each claim among ``vms`` that has no VM left (those being deleted count as
        gone)."""
        claims = {claim for vm in vms if (claim := names.claim_of(vm)) is not None}
        if not claims:
            return
        left = {names.claim_of(str(mi.get("name", ""))) for mi in await self._instances(group)
                if mi.get("currentAction") != "DELETING"}
        for claim in sorted(claims - left):
            await self._delete_request(f"{group}/resizeRequests/{names.PREFIX}{claim}", token, deadline)

    async def _delete_request(self, url: str, token: str, deadline: float) -> None:
        try:
            op = await self.http.compute("DELETE", url, params={"requestId": names.request_id(token, f"delete:{url}")})
        except GcpError as exc:
            if exc.not_found:
                return
            raise
        await self.waiter.compute(op, deadline)


def group_path(url: str) -> str:
    return compute_path(url)


def instance_url(managed: JSON, group: str) -> str:
    """How ``deleteInstances`` names a VM: its full URL as ``listManagedInstances`` gave it, else the partial
    ``zones/Z/instances/N`` (the forms the compute v1 discovery document gives for the field)."""
    url = str(managed.get("instance") or "")
    if url.startswith("https://"):
        return url
    zone = group.split("/zones/", 1)[1].split("/", 1)[0]
    return f"zones/{zone}/instances/{managed.get('name')}"
