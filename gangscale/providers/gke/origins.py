"""Which MIG resize request made a VM: the VMs of ``flex-start`` and ``queued-provisioning`` pools are named by their
instance group, not by gangscale, so a unit is tied to the scale-up that made it through the request's name.

Compute Engine marks every VM a resize request creates with the instance metadata item
``google-compute-mig-resize-request`` = the request's name, and GKE copies it onto the VM's Node as the label
``autoscaling.gke.io/provisioning-request`` (GKE's published autoscaler, GoogleCloudPlatform/cluster-autoscaler:
the comments of ``ProvisioningRequestGenerator.UpdateNodePoolSpec`` and ``nodeHasScaleDownImmunity``, which also
note that the label can arrive late). The provider reads the metadata with ``instances.get`` once per VM (a few at a
time) and keeps the answer; it reads the label when it recognises a Node, and falls back on what it has read from
the cloud while the label has not arrived. A VM's origin never changes, so what was read stays true; what is kept is
forgotten all at once when it passes ``REMEMBERED`` VMs (it is read again as needed).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gangscale.providers.gke.client import GcpError, GcpHttp
from gangscale.providers.gke.operations import compute_path

JSON = dict[str, Any]
#: The instance metadata key Compute Engine sets on a VM made by a MIG resize request.
REQUEST_METADATA = "google-compute-mig-resize-request"
#: The Node label GKE sets from it.
REQUEST_LABEL = "autoscaling.gke.io/provisioning-request"
#: ``instances.get`` calls in flight at once when the VMs of a request are looked for.
CONCURRENT_READS = 8
#: VMs whose origin is kept at most.
REMEMBERED = 50_000


class Origins:
    def __init__(self, http: GcpHttp) -> None:
        self.http = http
        #: VM URL path -> the resize request that made it ("" for none).
        self._made_by: dict[str, str] = {}
        #: VM (node) name -> the resize request that made it, for VMs of ours seen so far.
        self.requests: dict[str, str] = {}

    async def made_by(self, managed: JSON) -> str:
        """The resize request that made this managed instance ("" if none, or if the VM is gone)."""
        url = str(managed.get("instance") or "")
        if not url or not managed.get("instanceStatus"):
            return ""  # no VM yet (still being created): nothing to read
        path = compute_path(url)
        found = self._made_by.get(path)
        if found is None:
            try:
                instance = await self.http.compute("GET", path)
            except GcpError as exc:
                if exc.not_found:
                    return ""
                raise
            items = (instance.get("metadata") or {}).get("items") or []
            found = next((str(item.get("value") or "") for item in items if item.get("key") == REQUEST_METADATA), "")
            if len(self._made_by) >= REMEMBERED:
                self._made_by.clear()
                self.requests.clear()
            self._made_by[path] = found
        if found:
            self.requests[str(managed.get("name"))] = found
        return found

    async def of_request(self, managed: list[JSON], request: str) -> list[JSON]:
        """Those of ``managed`` that ``request`` made (the VMs not read yet are read a few at a time)."""
        slots = asyncio.Semaphore(CONCURRENT_READS)

        async def made_by(mi: JSON) -> str:
            async with slots:
                return await self.made_by(mi)

        found = await asyncio.gather(*(made_by(mi) for mi in managed))
        return [mi for mi, by in zip(managed, found, strict=True) if by == request]
