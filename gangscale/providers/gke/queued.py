"""``queued-provisioning`` mode: Dynamic Workload Scheduler capacity the way GKE documents it for node pools, through a
ProvisioningRequest of GKE's class ``queued-provisioning.gke.io``.

A node pool with ``queuedProvisioning.enabled`` gets nodes only through such requests ("nodes can be only obtained
through queuing via the Cluster Autoscaler ProvisioningRequest API": ``NodePool.queuedProvisioning`` in the
container v1 discovery document). To obtain N units, gangscale creates, in its own namespace, the PodTemplate and
the ProvisioningRequest ``gs-<claim>`` (``autoscaling.x-k8s.io/v1``): one podSet of N pods, each pinned to the
node pool and zone and asking for a whole node (every accelerator of the machine, or more than half its CPU), so
GKE sizes the request at N nodes; the parameter ``maxRunDurationSeconds`` when the pool file sets one. GKE's
autoscaler (GoogleCloudPlatform/cluster-autoscaler, ``pkg/provisioningrequests``) turns it into a MIG resize
request named :func:`~gangscale.providers.gke.names.gke_resize_request_name` and reports on the request:
``Accepted=True`` once queued, ``Provisioned=False`` with ``ResourcePoolExhausted``/``QuotaExceeded`` while it
waits, ``Provisioned=True`` when every VM was created at once, ``Failed=True`` when it gives up, and later
``BookingExpired`` (10 minutes after Provisioned) and ``CapacityRevoked`` (at the end of the run duration, when
Compute Engine deletes the VMs).

The obtain waits for ``Provisioned=True`` (or ``Failed=True``, or the deadline); the units are the VMs the resize
request made (found by their metadata, :mod:`.origins`), each a node named after its VM; the obtain says when they
end (Provisioned + the run duration). A failure or the deadline deletes the request (GKE then cancels its resize
request) and any VM of it. A release deletes the VMs (``deleteInstances``, as the other MIG modes: GKE itself
never deletes them, its scale-down only removes empty nodes after the booking) and the request once none of its
VMs is left. gangscale's own requests are never mistaken for demand: their class is not one gangscale serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangscale.clock import Clock
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import PODTEMPLATES, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.catalog import CATALOG, GPU_RESOURCE, TPU_RESOURCE
from gangscale.model.nodepool import POOL_LABEL
from gangscale.model.quantity import format_quantity
from gangscale.model.resources import CPU
from gangscale.providers.base import TOKEN_LABEL, ErrorClass, Obtained, ProviderError, Unit, not_leader
from gangscale.providers.gke import names
from gangscale.providers.gke.calls import timed_out, with_rollback
from gangscale.providers.gke.client import GcpError, GcpHttp
from gangscale.providers.gke.errors import from_http
from gangscale.providers.gke.groups import CLEANUP_SECONDS, InstanceGroups, not_all_deleted
from gangscale.providers.gke.operations import OperationTimeout, Waiter
from gangscale.providers.gke.origins import Origins
from gangscale.providers.gke.pools import DEFAULT_RUN_SECONDS, GkePool
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)
CLASS = "queued-provisioning.gke.io"
#: GKE's label on the PodTemplate of such a request, in its documented example.
WARDEN_LABEL = "cloud.google.com/apply-warden-policies"
UNITS_ANNOTATION = "gangscale.io/units"
#: GKE's ``Failed`` reasons that mean "no capacity now" (the pool is backed off and the gang tried elsewhere) or a
#: quota; any other is a problem of the request or the pool (GKE's published autoscaler, ``provreqstate``).
STOCKOUT_REASONS = frozenset({"ResourcePoolExhausted", "WaitTimeExceeded", "QueuingInfeasibleNoCapacity",
                              "OutOfResources", "NodepoolSizeReached", "ZoneNotSupported"})
QUOTA_REASONS = frozenset({"QuotaExceeded"})
#: A request polled this often at most while it waits in the queue (seconds).
POLL_MAX = 30.0


class Queued:
    def __init__(self, http: GcpHttp, waiter: Waiter, clock: Clock, groups: InstanceGroups, origins: Origins,
                 kube: KubeHTTP | None, namespace: str) -> None:
        self.http, self.waiter, self.clock, self.groups, self.origins = http, waiter, clock, groups, origins
        self.kube, self.namespace = kube, namespace

    def _kube(self, pool: str) -> KubeHTTP:
        if self.kube is None:
            raise ProviderError(ErrorClass.PERMANENT, "NO_KUBERNETES_CLIENT", "queued-provisioning pools need the "
                                "provider to reach the Kubernetes API", pool=pool)
        return self.kube

    def claim_of(self, request: str) -> str | None:
        """The claim of the token whose request GKE's resize request ``request`` serves; None if not ours."""
        return names.claim_of_gke_request(self.namespace, request)

    # -- obtain -----------------------------------------------------------------------------------------------------

    async def obtain(self, gp: GkePool, units: int, token: str, deadline: float) -> Obtained:
        name = names.resize_request_name(token)
        try:
            await self._sweep(gp)
            await self._create(gp, name, units, token)
            request = await self._outcome(gp, name, token, deadline)
            made = await self._made(gp, name)
            if len(made) != units:
                raise ProviderError(ErrorClass.STOCKOUT, "VMS_MISSING", f"ProvisioningRequest {name} is provisioned "
                                    f"but {len(made)} of its {units} VMs exist", pool=gp.name)
        except (GcpError, ApiError) as exc:
            raise _transient(exc, gp.name) from exc
        except ProviderError as exc:
            if exc.error_class is ErrorClass.TRANSIENT:
                raise
            log.warning("gke: queued ProvisioningRequest %s of %s failed (%s); deleting it", name, gp.name,
                        exc.message)
            raise with_rollback(exc, await self._undo(gp, name, token, deadline + CLEANUP_SECONDS)) from exc
        vms = sorted(str(mi.get("name")) for mi in made)
        return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms), expires_at=_end(request, gp))

    async def _create(self, gp: GkePool, name: str, units: int, token: str) -> None:
        """The PodTemplate and the request (or those an earlier try made, checked to be this token's)."""
        kube = self._kube(gp.name)
        template = pod_template(gp, name, self.namespace, token)
        request = provisioning_request(gp, name, self.namespace, units, token)
        for resource, body in ((PODTEMPLATES, template), (PROVREQS, request)):
            if not self.http.fence():
                raise not_leader(gp.name)
            try:
                await kube.request("POST", resource.path(self.namespace), body=body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                found = await kube.request("GET", resource.path(self.namespace, name))
                if ((found.get("metadata") or {}).get("labels") or {}).get(TOKEN_LABEL) != token:
                    raise ProviderError(ErrorClass.PERMANENT, "NAME_TAKEN", f"{resource.plural} {self.namespace}/"
                                        f"{name} exists and was not made for token {token}", pool=gp.name,
                                        rolled_back=False) from exc

    async def _outcome(self, gp: GkePool, name: str, token: str, deadline: float) -> JSON:
        """The request once GKE has provisioned it; a failure or the deadline as an error."""
        kube = self._kube(gp.name)
        polls = self.waiter.schedule(POLL_MAX)
        waiting = ""
        while True:
            request = await kube.request("GET", PROVREQS.path(self.namespace, name))
            conditions = conditions_of(request)
            if _true(conditions, "Failed"):
                raise failure(conditions["Failed"], gp.name)
            if _true(conditions, "Provisioned"):
                return request
            note = str((conditions.get("Provisioned") or conditions.get("Accepted") or {}).get("reason") or "")
            if note and note != waiting:
                waiting = note
                log.info("gke: queued ProvisioningRequest %s/%s of %s waits: %s", self.namespace, name, gp.name,
                         (conditions.get("Provisioned") or conditions.get("Accepted") or {}).get("message"))
            try:
                await polls.pause(deadline, {"name": name})
            except OperationTimeout as exc:
                raise timed_out(gp.name, f"queued ProvisioningRequest {name} ({waiting or 'not accepted'})") from exc

    async def _made(self, gp: GkePool, name: str) -> list[JSON]:
        request = names.gke_resize_request_name(self.namespace, name)
        return await self.origins.of_request(await self.groups.instances(self.groups.group(gp)), request)

    # -- undo, release, lookup --------------------------------------------------------------------------------------

    async def _undo(self, gp: GkePool, name: str, token: str, deadline: float) -> bool:
        """Delete the request (GKE cancels its resize request), every VM it made, and its PodTemplate."""
        try:
            made = [str(mi.get("name")) for mi in await self._made(gp, name)]
            await self._delete_request(gp, name)
            return await self.groups.delete(gp, made, token, deadline)
        except (GcpError, ApiError, ProviderError) as exc:
            log.warning("gke: could not undo queued ProvisioningRequest %s of %s: %s", name, gp.name, exc)
            return False

    async def _sweep(self, gp: GkePool) -> None:
        """Delete our provisioned requests of this pool none of whose VMs is left (their run duration ended, or a
        crash came between the release of their last VM and their own deletion)."""
        kube = self._kube(gp.name)
        listed = await kube.request("GET", PROVREQS.path(self.namespace), query={
            "labelSelector": f"app.kubernetes.io/managed-by=gangscale,{POOL_LABEL}={gp.name}"})
        spent = [str(pr["metadata"]["name"]) for pr in listed.get("items") or []
                 if _true(conditions_of(pr), "Provisioned") and names.claim_of_request(str(pr["metadata"]["name"]))]
        for name in spent:
            if not await self._made(gp, name):
                log.info("gke: deleting queued ProvisioningRequest %s/%s: its VMs are gone", self.namespace, name)
                await self._delete_request(gp, name)

    async def _delete_request(self, gp: GkePool, name: str) -> None:
        kube = self._kube(gp.name)
        for resource in (PROVREQS, PODTEMPLATES):
            if not self.http.fence():
                raise not_leader(gp.name)
            try:
                await kube.request("DELETE", resource.path(self.namespace, name))
            except ApiError as exc:
                if exc.status != 404:
                    raise

    async def release(self, gp: GkePool, unit_ids: Sequence[str], token: str) -> None:
        """Delete these VMs, then each request none of whose VMs is left. A placeholder unit
        (``gs-<claim>-<i>``: a VM its request never made) names its request by its claim."""
        deadline = self.clock.now() + CLEANUP_SECONDS
        try:
            managed = await self.groups.instances(self.groups.group(gp))
            by_name = {str(mi.get("name")): mi for mi in managed}
            claims = {claim for unit in unit_ids if (claim := names.claim_of(unit))}
            for unit in unit_ids:
                if unit in by_name and (claim := self.claim_of(await self.origins.made_by(by_name[unit]))):
                    claims.add(claim)
            vms = [unit for unit in unit_ids if unit in by_name]
            if not await self.groups.delete(gp, vms, token, deadline):
                raise not_all_deleted(gp, unit_ids)
            left = [mi for mi in managed if str(mi.get("name")) not in vms and mi.get("currentAction") != "DELETING"]
            for claim in sorted(claims):
                name = f"{names.PREFIX}{claim}"
                if not await self.origins.of_request(left, names.gke_resize_request_name(self.namespace, name)):
                    await self._delete_request(gp, name)
        except (GcpError, ApiError, OperationTimeout) as exc:
            log.warning("gke: releasing %s of %s: %s", list(unit_ids), gp.name, exc)
            raise not_all_deleted(gp, unit_ids) from exc

    async def lookup(self, pools: Mapping[str, GkePool], token: str) -> Obtained | None:
        """The units of ``token``'s request: the VMs GKE made for it, and a placeholder ``gs-<claim>-<i>``
        (incomplete) for each unit asked for that has no VM (still queued, failed, or gone)."""
        if self.kube is None or not pools:
            return None
        name = names.resize_request_name(token)
        try:
            request = await self.kube.request("GET", PROVREQS.path(self.namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise _transient(exc, "?") from exc
        gp = pools.get(str(((request.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)))
        if gp is None:
            return None
        units = int(((request.get("metadata") or {}).get("annotations") or {}).get(UNITS_ANNOTATION) or 0)
        made = await self._made(gp, name) if _true(conditions_of(request), "Provisioned") else []
        vms = sorted(str(mi.get("name")) for mi in made)
        missing = [names.unit_name(token, i) for i in range(max(0, units - len(vms)))]
        return Obtained(token, gp.name, tuple(Unit(vm, (vm,)) for vm in vms) + tuple(Unit(m, ()) for m in missing),
                        tuple(missing), expires_at=_end(request, gp) if made else None)


# -- the objects --------------------------------------------------------------------------------------------------


def pod_template(gp: GkePool, name: str, namespace: str, token: str) -> JSON:
    """One pod per node of the pool, in its zone: GKE sizes the request by packing these pods onto the pool's
    machine. The toleration of GKE's queued taint and the pool's accelerator taints; the flex-start selector of
    GKE's documented example."""
    requests = whole_node(gp)
    tolerations = [{"key": key, "operator": "Exists", "effect": "NoSchedule"}
                   for key in ("cloud.google.com/gke-queued", GPU_RESOURCE, TPU_RESOURCE)]
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": namespace, "labels": _labels(gp, token, {WARDEN_LABEL: "true"})},
            "template": {"spec": {
                "nodeSelector": {"cloud.google.com/gke-nodepool": gp.node_pool, "topology.kubernetes.io/zone": gp.zone,
                                 "cloud.google.com/gke-flex-start": "true"},
                "tolerations": tolerations,
                "containers": [{"name": "capacity", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": requests, "limits": requests}}]}}}


def whole_node(gp: GkePool) -> dict[str, str]:
    """Requests only one pod per node fits: every accelerator of the machine, or more than half its CPU."""
    machine = CATALOG.get(gp.pool.machine_type)
    if machine is not None and machine.gpus:
        return {GPU_RESOURCE: str(machine.gpus)}
    if machine is not None and machine.tpu_chips:
        return {TPU_RESOURCE: str(machine.tpu_chips)}
    return {CPU: format_quantity(CPU, gp.pool.allocatable.get(CPU) // 2 + 1)}


def provisioning_request(gp: GkePool, name: str, namespace: str, units: int, token: str) -> JSON:
    spec: JSON = {"provisioningClassName": CLASS, "podSets": [{"podTemplateRef": {"name": name}, "count": units}]}
    if gp.run_seconds:
        spec["parameters"] = {"maxRunDurationSeconds": str(gp.run_seconds)}
    return {"apiVersion": PROVREQS.api_version, "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": namespace, "labels": _labels(gp, token, {}),
                         "annotations": {UNITS_ANNOTATION: str(units)}},
            "spec": spec}


def _labels(gp: GkePool, token: str, extra: Mapping[str, str]) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "gangscale", POOL_LABEL: gp.name, TOKEN_LABEL: token, **extra}


def conditions_of(request: JSON) -> dict[str, JSON]:
    return {str(c.get("type")): c for c in (request.get("status") or {}).get("conditions") or []
            if isinstance(c, dict)}


def _true(conditions: Mapping[str, JSON], kind: str) -> bool:
    return str((conditions.get(kind) or {}).get("status")) == "True"


def failure(condition: JSON, pool: str) -> ProviderError:
    """GKE's ``Failed=True`` as an error class, by its reason."""
    reason = str(condition.get("reason") or "Failed")
    message = f"GKE failed the queued ProvisioningRequest: {reason}: {condition.get('message', '')}"
    if reason in QUOTA_REASONS:
        return ProviderError(ErrorClass.QUOTA, reason, message, pool=pool)
    if reason in STOCKOUT_REASONS or reason.startswith("InternalError"):
        return ProviderError(ErrorClass.STOCKOUT, reason, message, pool=pool)
    return ProviderError(ErrorClass.PERMANENT, reason, message, pool=pool)


def _end(request: JSON, gp: GkePool) -> float | None:
    """When GKE's run duration ends: Provisioned + ``maxRunDurationSeconds`` (GKE's default: 7 days)."""
    since = parse_rfc3339(str((conditions_of(request).get("Provisioned") or {}).get("lastTransitionTime") or ""))
    return None if since is None else since + (gp.run_seconds or DEFAULT_RUN_SECONDS)


def _transient(exc: GcpError | ApiError, pool: str) -> ProviderError:
    """A Kubernetes or Google API error of a step whose outcome is unknown."""
    if isinstance(exc, GcpError):
        return from_http(exc, pool, rolled_back=False)
    if exc.status in (0, 429) or exc.status >= 500:
        return ProviderError(ErrorClass.TRANSIENT, exc.reason or "UNAVAILABLE", str(exc), pool=pool,
                             retry_after=exc.retry_after, rolled_back=False)
    return ProviderError(ErrorClass.PERMANENT, exc.reason or str(exc.status), str(exc), pool=pool, rolled_back=False)


def queued_pools(pools: Iterable[GkePool]) -> dict[str, GkePool]:
    return {gp.name: gp for gp in pools if gp.mode == "queued-provisioning"}
