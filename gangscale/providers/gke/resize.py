"""``resize`` mode: single VMs added to an existing node pool's managed instance group with ``createInstances``.

Each unit is one VM named ``gs-<claim>-<i>``, so the whole intent is fixed by the first call and a restarted
provider finds it by name. ``createInstances`` raises the group's target size by the VMs it names (what the
cluster-autoscaler's GCE provider does for a scale-up, with generated names); the VMs are then watched in
``listManagedInstances`` until all run. A VM whose last creation attempt failed for lack of capacity or quota,
or VMs not all running by the deadline, fail the obtain, and every VM of it is deleted: all or nothing by
rollback. The call carries a ``requestId`` derived from the token, so a call repeated after a lost answer is one
call; ``lookup`` answers from the group's instances alone.
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
from gangscale.providers.gke.pools import GkePool

JSON = dict[str, Any]
log = logging.getLogger(__name__)


class Resize:
    def __init__(self, http: GcpHttp, waiter: Waiter, clock: Clock, groups: InstanceGroups) -> None:
        self.http, self.waiter, self.clock, self.groups = http, waiter, clock, groups

    async def obtain(self, gp: GkePool, units: int, token: str, deadline: float) -> Obtained:
        vms = [names.unit_name(token, i) for i in range(units)]
        try:
            await self._create_instances(gp, vms, token, deadline)
        except ProviderError as exc:
            if exc.error_class is ErrorClass.TRANSIENT:
                raise
            log.warning("gke: VMs of %s (token %s) failed (%s); deleting every VM of the token", gp.name, token,
                        exc.message)
            raise with_rollback(exc, await self.groups.delete(gp, vms, token, deadline + CLEANUP_SECONDS)) from exc
        return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms))

    async def _create_instances(self, gp: GkePool, vms: Sequence[str], token: str, deadline: float) -> None:
        group = self.groups.group(gp)
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
            found = {str(mi.get("name")): mi for mi in await self.groups.instances(group) if mi.get("name") in vms}
            failed = [e for mi in found.values() for e in
                      ((mi.get("lastAttempt") or {}).get("errors") or {}).get("errors") or []]
            if failed:
                raise from_compute_errors(failed, gp.name)
            if len(found) == len(vms) and all(mi.get("instanceStatus") == "RUNNING" for mi in found.values()):
                return
            await polls.pause(deadline, {"name": f"VMs of {gp.node_pool}"})

    async def lookup(self, pools: Iterable[GkePool], token: str) -> Obtained | None:
        claim = names.claim(token)
        for gp in pools:
            group = self.groups.groups.get(gp.name)
            if group is None:
                continue
            present = {str(mi.get("name")): mi for mi in await self.groups.instances(group)
                       if names.claim_of(str(mi.get("name", ""))) == claim}
            if present:
                count = 1 + max(names.index_of(vm) for vm in present)
                vms = [names.unit_name(token, i) for i in range(count)]
                incomplete = tuple(vm for vm in vms if (present.get(vm) or {}).get("instanceStatus") != "RUNNING")
                return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms), incomplete)
        return None

    async def release(self, gp: GkePool, unit_ids: Sequence[str], token: str) -> None:
        if not await self.groups.delete(gp, unit_ids, token, self.clock.now() + CLEANUP_SECONDS):
            raise not_all_deleted(gp, unit_ids)
