"""The ``gke`` node-pool provider: GKE node pools and Compute Engine instance groups, all or nothing.

Each pool of the pool file with a ``gke:`` block is grown in its ``mode``: :mod:`.slices` (``slice``: a node pool
per multi-host TPU slice), :mod:`.resize` (``resize``: named VMs in an existing node pool), :mod:`.flexstart`
(``flex-start``: a MIG resize request on a flex-start node pool) or :mod:`.queued` (``queued-provisioning``: a
``queued-provisioning.gke.io`` ProvisioningRequest). The provider keeps no state a restart would need: every name
derives from the token (:mod:`.names`) and ``lookup`` answers from the cloud's and the cluster's own objects.
``start()`` checks every pool before the first call (:mod:`.checks`).

Nodes are recognised (:meth:`GkeProvider.node_ref`) by the labels a slice's node pool puts on them; for a VM of an
existing node pool, by GKE's node pool label and the zone, then by the VM's name (``resize``) or by the resize
request that made it (``flex-start``, ``queued-provisioning``: GKE's ``autoscaling.gke.io/provisioning-request``
label, or what the provider read from the cloud while the label has not arrived).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from gangscale.clock import Clock
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.providers.base import (
    TOKEN_LABEL,
    UNIT_LABEL,
    ErrorClass,
    Fence,
    NodeRef,
    Obtained,
    ProviderError,
    Reclassify,
    unfenced,
)
from gangscale.providers.gke import checks, names
from gangscale.providers.gke.auth import GoogleAuthTokens, TokenSource
from gangscale.providers.gke.client import Endpoints, GcpError, GcpHttp
from gangscale.providers.gke.errors import from_http
from gangscale.providers.gke.flexstart import FlexStart
from gangscale.providers.gke.groups import InstanceGroups
from gangscale.providers.gke.operations import Waiter
from gangscale.providers.gke.origins import REQUEST_LABEL, Origins
from gangscale.providers.gke.pools import GkePool, gke_pools
from gangscale.providers.gke.queued import Queued, queued_pools
from gangscale.providers.gke.resize import Resize
from gangscale.providers.gke.slices import Slices

GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"


class GkeProvider:
    name = "gke"

    def __init__(self, pools: Sequence[NodePool], clock: Clock, *, tokens: TokenSource | None = None,
                 endpoints: Endpoints | None = None, poll_interval: float = 2.0, fence: Fence = unfenced,
                 user_agent: str = "gangscale", kube: KubeHTTP | None = None, namespace: str = "default") -> None:
        self.clock = clock
        self.pools = gke_pools({pool.name: pool for pool in pools})
        missing = sorted(pool.name for pool in pools if pool.name not in self.pools)
        if missing:
            raise ValueError(f"the gke provider needs a gke: block on every pool; missing on {', '.join(missing)}")
        self.http = GcpHttp(tokens or GoogleAuthTokens(), endpoints, fence=fence, user_agent=user_agent)
        waiter = Waiter(self.http, clock, interval=poll_interval)
        self.groups = InstanceGroups(self.http, waiter)
        self.origins = Origins(self.http)
        self.slices = Slices(self.http, waiter, clock)
        self.resize = Resize(self.http, waiter, clock, self.groups)
        self.flex = FlexStart(self.http, waiter, clock, self.groups, self.origins)
        self.queued = Queued(self.http, waiter, clock, self.groups, self.origins, kube, namespace)
        self._releasing: dict[str, asyncio.Lock] = {}
        #: (GKE node pool, zone) -> gangscale pool, for VMs added to existing node pools.
        self._by_node_pool = {(gp.node_pool, gp.zone): gp for gp in self.pools.values() if gp.mode != "slice"}

    @property
    def calls(self) -> list[tuple[str, str]]:
        return self.http.calls

    # -- NodePoolProvider -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        for gp in self.pools.values():
            try:
                await self._check(gp)
            except GcpError as exc:
                raise from_http(exc, gp.name) from exc

    async def _check(self, gp: GkePool) -> None:
        cluster = await self.http.container("GET", gp.cluster_path)
        if gp.mode == "slice":
            self.slices.channels[gp.cluster_key] = str((cluster.get("releaseChannel") or {}).get("channel") or "")
            if gp.node_pool:
                self.slices.templates[gp.name] = await checks.node_pool(self.http, gp)
            if self.http.fence():
                await self.slices.sweep(gp)
            return
        pool = await checks.node_pool(self.http, gp)
        group = checks.group_in_zone(gp, pool)
        if gp.mode == "queued-provisioning":
            checks.queued(gp, pool, self.queued.kube is not None)
        else:
            checks.not_autoscaled(gp, pool)
        if gp.mode == "flex-start":
            await checks.flex_start(self.http, gp, pool, group)
        self.groups.groups[gp.name] = group

    async def obtain(self, pool: str, units: int, *, token: str, deadline: float) -> Obtained:
        gp = self._pool(pool)
        if units < 1:
            raise ProviderError(ErrorClass.PERMANENT, "INVALID_ARGUMENT", f"asked for {units} units", pool=pool)
        try:
            match gp.mode:
                case "slice":
                    return await self.slices.obtain(gp, units, token, deadline)
                case "flex-start":
                    return await self.flex.obtain(gp, units, token, deadline)
                case "queued-provisioning":
                    return await self.queued.obtain(gp, units, token, deadline)
            return await self.resize.obtain(gp, units, token, deadline)
        except GcpError as exc:  # a call no mode turned into an error class: its outcome is unknown
            raise from_http(exc, gp.name, rolled_back=False) from exc

    async def lookup(self, token: str) -> Obtained | None:
        by_mode = {mode: [gp for gp in self.pools.values() if gp.mode == mode]
                   for mode in ("slice", "resize", "flex-start")}
        try:
            found = await self.resize.lookup(by_mode["resize"], token)
            found = found or await self.flex.lookup(by_mode["flex-start"], token)
            found = found or await self.queued.lookup(queued_pools(self.pools.values()), token)
            if found is None:
                clusters = {gp.cluster_key: gp for gp in by_mode["slice"]}
                found = await self.slices.lookup(clusters, token)
        except GcpError as exc:
            raise from_http(exc, "?", rolled_back=False) from exc
        return found

    async def release(self, pool: str, unit_ids: Sequence[str], *, token: str) -> None:
        gp = self._pool(pool)
        # One release of a pool at a time: each deletes what made its units once none of their units is left, which
        # releases of sibling units running side by side (scale-down removes units one by one) would each miss.
        async with self._releasing.setdefault(pool, asyncio.Lock()):
            try:
                await self._release(gp, unit_ids, token)
            except GcpError as exc:
                raise from_http(exc, gp.name, rolled_back=False) from exc

    async def _release(self, gp: GkePool, unit_ids: Sequence[str], token: str) -> None:
        match gp.mode:
            case "slice":
                await self.slices.release(gp, unit_ids, token)
            case "flex-start":
                await self.flex.release(gp, unit_ids, token)
            case "queued-provisioning":
                await self.queued.release(gp, unit_ids, token)
            case _:
                await self.resize.release(gp, unit_ids, token)

    async def aclose(self) -> None:
        await self.http.aclose()

    def node_ref(self, name: str, labels: Mapping[str, str]) -> NodeRef | None:
        pool, unit, token = labels.get(POOL_LABEL), labels.get(UNIT_LABEL), labels.get(TOKEN_LABEL)
        if pool and unit and token:
            return NodeRef(pool, unit, names.claim(token))  # a node of a slice gangscale made
        gp = self._by_node_pool.get((labels.get(GKE_NODEPOOL_LABEL, ""), labels.get(ZONE_LABEL, "")))
        if gp is None:
            return NodeRef(pool) if pool else None
        claim = self._claim(gp, name, labels)
        return NodeRef(gp.name, name if claim else None, claim)

    def _claim(self, gp: GkePool, name: str, labels: Mapping[str, str]) -> str | None:
        """The claim of the token that made this VM of an existing node pool; None for the pool's other nodes."""
        if gp.mode == "resize":
            return names.claim_of(name)
        request = labels.get(REQUEST_LABEL) or self.origins.requests.get(name, "")
        if gp.mode == "queued-provisioning":
            return self.queued.claim_of(request)
        return names.claim_of_request(request)

    def claim(self, token: str) -> str:
        return names.claim(token)

    def set_reclassify(self, callback: Reclassify) -> None:
        """Not needed: a VM's node is recognised from its name and labels (the resize request's label arrives as a
        change of the Node, which classifies it again)."""

    def _pool(self, pool: str) -> GkePool:
        gp = self.pools.get(pool)
        if gp is None:
            raise ProviderError(ErrorClass.PERMANENT, "UNKNOWN_POOL", f"no gke pool named {pool}", pool=pool)
        return gp


def endpoints_from(container: str | None, compute: str | None) -> Endpoints:
    defaults = Endpoints()
    return Endpoints(container or defaults.container, compute or defaults.compute)
