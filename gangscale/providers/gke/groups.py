"""The managed instance groups (MIGs) under the node pools that ``resize``, ``flex-start`` and
``queued-provisioning`` pools grow: finding a pool's group, listing its instances, deleting some of its VMs.

A node pool has one MIG per zone of its ``locations`` (``NodePool.instanceGroupUrls``); a gangscale pool lives in
one zone, so its group is the one in that zone, resolved once by the provider's start. ``listManagedInstances`` is
read page by page. ``deleteInstances`` names each VM by the full URL ``listManagedInstances`` gave for it (the
compute v1 discovery document: "a full URL or a partial URL, such as zones/[ZONE]/instances/[INSTANCE_NAME]"),
with ``skipInstancesOnValidationError`` so that a VM already gone does not fail the others, and a ``requestId``
derived from the token and the VMs, so that a repeated call is one call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.gke import names
from gangscale.providers.gke.client import GcpError, GcpHttp
from gangscale.providers.gke.operations import OperationTimeout, Waiter, compute_errors
from gangscale.providers.gke.pools import GkePool

JSON = dict[str, Any]
log = logging.getLogger(__name__)
#: How long a rollback or release may take, beyond the obtain's deadline.
CLEANUP_SECONDS = 1800.0


class InstanceGroups:
    def __init__(self, http: GcpHttp, waiter: Waiter) -> None:
        self.http, self.waiter = http, waiter
        #: gangscale pool -> ``/projects/P/zones/Z/instanceGroupManagers/M`` (resolved by the provider's start).
        self.groups: dict[str, str] = {}

    def group(self, gp: GkePool) -> str:
        found = self.groups.get(gp.name)
        if found is None:
            raise ProviderError(ErrorClass.PERMANENT, "NO_INSTANCE_GROUP",
                                f"node pool {gp.node_pool} has no managed instance group in zone {gp.zone}",
                                pool=gp.name)
        return found

    async def instances(self, group: str) -> list[JSON]:
        """Every managed instance of ``group`` (``listManagedInstances``, page by page)."""
        out: list[JSON] = []
        token = ""
        while True:
            page = await self.http.compute("POST", f"{group}/listManagedInstances",
                                           params={"pageToken": token} if token else None)
            out.extend(page.get("managedInstances") or [])
            token = str(page.get("nextPageToken") or "")
            if not token:
                return out

    async def delete(self, gp: GkePool, vms: Sequence[str], token: str, deadline: float) -> bool:
        """Delete these VMs of the pool's group (one that is gone or going counts as deleted); True once Compute
        Engine has taken the deletion."""
        group = self.group(gp)
        try:
            present = {str(mi.get("name")): mi for mi in await self.instances(group)}
            doomed = [vm for vm in vms if vm in present and present[vm].get("currentAction") != "DELETING"]
            if not doomed:
                return True
            op = await self.http.compute(
                "POST", f"{group}/deleteInstances",
                body={"instances": [instance_url(present[vm], group) for vm in doomed],
                      "skipInstancesOnValidationError": True},
                params={"requestId": names.request_id(token, "delete:" + ",".join(sorted(doomed)))})
            op = await self.waiter.compute(op, deadline)
        except (GcpError, OperationTimeout) as exc:
            log.warning("gke: could not delete VMs %s of %s: %s", list(vms), gp.node_pool, exc)
            return False
        if errors := compute_errors(op):
            log.warning("gke: deleting VMs %s failed: %s", doomed, errors)
            return False
        return True


def instance_url(managed: JSON, group: str) -> str:
    """How ``deleteInstances`` names a VM: its full URL as ``listManagedInstances`` gave it, else the partial
    ``zones/Z/instances/N``."""
    url = str(managed.get("instance") or "")
    if url.startswith("https://"):
        return url
    zone = group.split("/zones/", 1)[1].split("/", 1)[0]
    return f"zones/{zone}/instances/{managed.get('name')}"


def not_all_deleted(gp: GkePool, units: Sequence[str]) -> ProviderError:
    return ProviderError(ErrorClass.TRANSIENT, "DELETE_INCOMPLETE",
                         f"not every VM of {', '.join(units)} could be deleted", pool=gp.name)
