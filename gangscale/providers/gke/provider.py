"""The ``gke`` node-pool provider: GKE node pools and Compute Engine instance groups, all or nothing.

Each pool of the pool file with a ``gke:`` block is grown in its ``mode`` (:mod:`.slices`, :mod:`.migs`); the
provider keeps no state of its own that a restart would need: every name derives from the token
(:mod:`.names`), and ``lookup`` answers from the cloud's objects.

``start()`` checks every pool before the first call: the cluster answers, a ``resize-request``/``resize``
pool's node pool exists with a managed instance group in the pool's zone and is not autoscaled by GKE (two
autoscalers on one pool undo each other's work: refused with a clear error), and a ``slice`` pool's template
node pool, if it names one, exists (its node config is copied into every slice it makes).

Nodes are recognised (:meth:`GkeProvider.node_ref`) by the labels a slice's node pool puts on them, or, for a
VM added to an existing node pool, by the node pool label GKE sets and the VM's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangscale.clock import Clock
from gangscale.model.nodepool import POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.providers.base import (
    TOKEN_LABEL,
    UNIT_LABEL,
    ErrorClass,
    Fence,
    NodeRef,
    Obtained,
    ProviderError,
    unfenced,
)
from gangscale.providers.gke import names
from gangscale.providers.gke.auth import GoogleAuthTokens, TokenSource
from gangscale.providers.gke.client import Endpoints, GcpError, GcpHttp
from gangscale.providers.gke.errors import from_http
from gangscale.providers.gke.migs import Migs
from gangscale.providers.gke.operations import Waiter, compute_path
from gangscale.providers.gke.pools import GkePool, gke_pools
from gangscale.providers.gke.slices import Slices

GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"


class GkeProvider:
    name = "gke"

    def __init__(self, pools: Sequence[NodePool], clock: Clock, *, tokens: TokenSource | None = None,
                 endpoints: Endpoints | None = None, poll_interval: float = 2.0, fence: Fence = unfenced,
                 user_agent: str = "gangscale") -> None:
        self.clock = clock
        self.pools = gke_pools({pool.name: pool for pool in pools})
        missing = sorted(pool.name for pool in pools if pool.name not in self.pools)
        if missing:
            raise ValueError(f"the gke provider needs a gke: block on every pool; missing on {', '.join(missing)}")
        self.http = GcpHttp(tokens or GoogleAuthTokens(), endpoints, fence=fence, user_agent=user_agent)
        waiter = Waiter(self.http, clock, interval=poll_interval)
        self.slices = Slices(self.http, waiter, clock)
        self.migs = Migs(self.http, waiter, clock)
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
                self.slices.templates[gp.name] = await self.http.container(
                    "GET", f"{gp.cluster_path}/nodePools/{gp.node_pool}")
            return
        pool = await self.http.container("GET", f"{gp.cluster_path}/nodePools/{gp.node_pool}")
        if (pool.get("autoscaling") or {}).get("enabled"):
            raise ProviderError(ErrorClass.PERMANENT, "AUTOSCALED_BY_GKE",
                                f"node pool {gp.node_pool} has GKE's cluster autoscaler enabled; two autoscalers on "
                                "one pool undo each other's work. Disable it (gcloud container node-pools update "
                                f"{gp.node_pool} --no-enable-autoscaling) or give gangscale a pool of its own",
                                pool=gp.name)
        for url in pool.get("instanceGroupUrls") or []:
            if f"/zones/{gp.zone}/" in str(url):
                self.migs.groups[gp.name] = compute_path(str(url))
        if gp.name not in self.migs.groups:
            raise ProviderError(ErrorClass.PERMANENT, "NO_INSTANCE_GROUP",
                                f"node pool {gp.node_pool} has no instance group in zone {gp.zone} (its locations: "
                                f"{', '.join(pool.get('locations') or []) or '?'})", pool=gp.name)

    async def obtain(self, pool: str, units: int, *, token: str, deadline: float) -> Obtained:
        gp = self._pool(pool)
        if units < 1:
            raise ProviderError(ErrorClass.PERMANENT, "INVALID_ARGUMENT", f"asked for {units} units", pool=pool)
        if gp.mode == "slice":
            return await self.slices.obtain(gp, units, token, deadline)
        return await self.migs.obtain(gp, units, token, deadline)

    async def lookup(self, token: str) -> Obtained | None:
        try:
            found = await self.migs.lookup([gp for gp in self.pools.values() if gp.mode != "slice"], token)
            if found is None:
                clusters = {gp.cluster_key: gp for gp in self.pools.values() if gp.mode == "slice"}
                found = await self.slices.lookup(clusters, token)
        except GcpError as exc:
            raise from_http(exc, "?", rolled_back=False) from exc
        return found

    async def release(self, pool: str, unit_ids: Sequence[str], *, token: str) -> None:
        gp = self._pool(pool)
        if gp.mode == "slice":
            await self.slices.release(gp, unit_ids, token)
        else:
            await self.migs.release(gp, unit_ids, token)

    async def aclose(self) -> None:
        await self.http.aclose()

    def node_ref(self, name: str, labels: Mapping[str, str]) -> NodeRef | None:
        pool, unit, token = labels.get(POOL_LABEL), labels.get(UNIT_LABEL), labels.get(TOKEN_LABEL)
        if pool and unit and token:
            return NodeRef(pool, unit, names.claim(token))  # a node of a slice gangscale made
        gp = self._by_node_pool.get((labels.get(GKE_NODEPOOL_LABEL, ""), labels.get(ZONE_LABEL, "")))
        if gp is not None:
            claim = names.claim_of(name)
            return NodeRef(gp.name, name if claim else None, claim)
        return NodeRef(pool) if pool else None

    def claim(self, token: str) -> str:
        return names.claim(token)

    def _pool(self, pool: str) -> GkePool:
        gp = self.pools.get(pool)
        if gp is None:
            raise ProviderError(ErrorClass.PERMANENT, "UNKNOWN_POOL", f"no gke pool named {pool}", pool=pool)
        return gp


def endpoints_from(container: str | None, compute: str | None) -> Endpoints:
    defaults = Endpoints()
    return Endpoints(container or defaults.container, compute or defaults.compute)
