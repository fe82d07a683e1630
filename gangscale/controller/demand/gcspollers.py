"""The head's GCS as a second, earlier Ray demand source (optional: ``pip install gangscale[ray]``).

For every RayCluster that is a demand source, a poller (one of the loop's guarded background tasks,
:meth:`~.demand.Host.run_background`: its failure is logged, it is cancelled when the loop stops) reads
``AutoscalerStateService.GetClusterResourceState`` from the head every ``ray_gcs_interval`` (the address from
the cluster's status or the ``gangscale.io/gcs-address`` annotation; ``authorization: Bearer`` with the token
from the cluster's auth Secret when ``authOptions.mode`` is ``token``). The latest answer gives, per worker
group, the replicas the pending placement groups and ``request_resources`` constraints need beyond the Ray
nodes the cluster already has (:mod:`gangscale.sources.raydemand`). :meth:`RayGcs.targets` merges that with the
spec's replicas: the larger wins, so the whole gang is known before the autoscaler's first launch step.

When the extra is not installed, the source is off, or the head does not answer (not started, a NetworkPolicy,
a wrong token), the targets are the spec's replicas alone: the RayCluster source works without the GCS. Each
change of reachability is logged once and exported as ``gangscale_ray_gcs_reachable``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gangscale.aio import cancel_and_wait
from gangscale.controller.demand.protocol import Host
from gangscale.controller.logic.reconcile import WARNING
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import SECRETS
from gangscale.kube.transport import KubeHTTP
from gangscale.sources.gcsreader import GcsReader, GcsUnavailable, ResourceState, grpc_available
from gangscale.sources.raycluster import RayCluster
from gangscale.sources.raydemand import GroupShape, constraint_needs, gang_needs, group_ray_resources

log = logging.getLogger(__name__)
TOKEN_KEY = "auth_token"
DEAD = "DEAD"


@dataclass(frozen=True, slots=True)
class Endpoint:
    address: str
    secret: str | None


class RayGcs:
    """The GCS pollers of the Ray source; ``changed(cluster uid)`` is called (by a poller) when what a cluster's
    head reports changed."""

    def __init__(self, http: KubeHTTP, host: Host, changed: Callable[[str], None]) -> None:
        self.http = http
        self.host = host
        self.changed = changed
        self.on = host.settings.ray_gcs and grpc_available()
        #: Asked for (``--ray-gcs``) but impossible: the image has no ``gangscale[ray]`` extra.
        self.missing_extra = host.settings.ray_gcs and not self.on
        self._told_missing = False
        self.reader: GcsReader | None = None
        self.latest: dict[str, ResourceState] = {}
        self.errors: dict[str, str] = {}
        self._polls: dict[str, tuple[Endpoint, asyncio.Task[Any]]] = {}
        #: Pollers cancelled (their cluster's endpoint changed or it went) that have not ended yet.
        self._stopping: set[asyncio.Task[Any]] = set()
        self._unplaceable: set[tuple[str, str]] = set()

    def track(self, clusters: Iterable[RayCluster]) -> None:
        """One poller per demand-source cluster; restarted when its endpoint changes, stopped when it goes."""
        if not self.on:
            if self.missing_extra:  # no cluster's GCS can be read by this process: say so, once, and in the metric
                clusters = list(clusters)
                if clusters and not self._told_missing:
                    self._told_missing = True
                    log.warning("--ray-gcs is on, but this installation has no grpcio (the gangscale[ray] extra; "
                                "image: docker build --build-arg EXTRAS=ray): no Ray head's GCS is read, the "
                                "RayCluster specs alone are used, and gangscale_ray_gcs_reachable is 0")
                self.host.metrics.set_ray_gcs({(c.namespace, c.name): False for c in clusters})
            return
        want = {c.uid: (c, Endpoint(c.gcs_address(), c.auth_secret())) for c in clusters}
        for uid in list(self._polls):
            if uid not in want or want[uid][1] != self._polls[uid][0]:
                self._stop(self._polls.pop(uid)[1])
                self.latest.pop(uid, None)
        for uid, (cluster, endpoint) in want.items():
            if uid not in self._polls:
                # It runs as long as the cluster is a source with this endpoint (or until the loop stops).
                task = self.host.run_background(self.poll(cluster, endpoint), f"gcs {cluster.key}")
                self._polls[uid] = (endpoint, task)
        reachable = {(c.namespace, c.name): c.uid in self.latest for c, _ in want.values()}
        self.host.metrics.set_ray_gcs(reachable)

    def _stop(self, task: asyncio.Task[Any]) -> None:
        """Cancel a poller; it is awaited by :meth:`aclose` if it has not ended by then."""
        task.cancel()
        if not task.done():
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def poll(self, cluster: RayCluster, endpoint: Endpoint) -> None:
        settings, clock = self.host.settings, self.host.clock
        if self.reader is None:
            self.reader = GcsReader()
        while True:
            try:
                token = await self.token(cluster, endpoint.secret)
                state = await self.reader.read(endpoint.address, token=token, timeout=settings.ray_gcs_timeout)
            except (GcsUnavailable, ValueError) as exc:
                if self.errors.get(cluster.uid) != str(exc):
                    log.warning("%s: cannot read the Ray GCS at %s (%s); using the spec's replicas only",
                                cluster.key, endpoint.address, exc)
                self.errors[cluster.uid] = str(exc)
                if self.latest.pop(cluster.uid, None) is not None:
                    self.changed(cluster.uid)
            else:
                if cluster.uid in self.errors:
                    log.info("%s: reading the Ray GCS at %s", cluster.key, endpoint.address)
                    del self.errors[cluster.uid]
                before = self.latest.get(cluster.uid)
                self.latest[cluster.uid] = state
                if before is None or (before.gangs, before.constraints, len(before.nodes)) != \
                        (state.gangs, state.constraints, len(state.nodes)):
                    self.changed(cluster.uid)
            await clock.sleep(settings.ray_gcs_interval)

    async def token(self, cluster: RayCluster, secret: str | None) -> str | None:
        if secret is None:
            return None
        try:
            obj = await self.http.request("GET", SECRETS.path(cluster.namespace, secret))
        except ApiError as exc:
            if exc.status == 403:
                # Expected when RBAC grants no `secrets: get` in this namespace (deploy/base grants none): one
                # message that names the fix; the poller logs it once and serves the cluster from its spec.
                raise GcsUnavailable(
                    f"forbidden to read Secret {cluster.namespace}/{secret} (the auth token): grant gangscale "
                    f"`get` on secrets in namespace {cluster.namespace} (deploy/overlays/ray-gcs, or the chart's "
                    f"ray.gcs.namespaces)") from exc
            raise GcsUnavailable(f"cannot read the auth token from Secret {cluster.namespace}/{secret}: {exc}") \
                from exc
        raw = (obj.get("data") or {}).get(TOKEN_KEY)
        if not raw:
            raise GcsUnavailable(f"Secret {cluster.namespace}/{secret} has no {TOKEN_KEY!r} key")
        return base64.b64decode(raw).decode().strip()

    def targets(self, cluster: RayCluster) -> tuple[dict[str, int], bool]:
        """Replicas per group the cluster should have, and whether the GCS raised any beyond the spec's."""
        spec = {g.name: g.desired for g in cluster.groups}
        state = self.latest.get(cluster.uid)
        if state is None:
            return spec, False
        ray_nodes: dict[str, int] = {}
        for node in state.nodes:
            if node.status != DEAD:
                ray_nodes[node.node_type] = ray_nodes.get(node.node_type, 0) + 1
        have = {g.name: math.ceil(ray_nodes.get(g.name, 0) / g.hosts) for g in cluster.groups}
        try:
            shapes = [GroupShape(g.name, group_ray_resources(g.spec), g.hosts,
                                 max(0, g.max_replicas - max(have[g.name], g.desired)),
                                 int(g.spec.get("priority") or 0)) for g in cluster.groups]
        except ValueError as exc:  # a group whose Ray resources cannot be read: the spec's replicas only
            log.debug("%s: cannot map the GCS demand onto the worker groups: %s", cluster.key, exc)
            return spec, False
        # request_resources() is a floor on the whole cluster, pending placement groups are demand beyond the
        # nodes there are: the larger of the two, not their sum.
        floor = constraint_needs(state, shapes)
        need: dict[str, int] = {}
        for gang in gang_needs(state, shapes):
            if gang.unplaceable:
                self.report_unplaceable(cluster, gang.pg_id, gang.unplaceable)
                continue
            for group, count in gang.replicas.items():
                need[group] = need.get(group, 0) + count
        out, raised = {}, False
        for g in cluster.groups:
            extra = max(need.get(g.name, 0), floor.get(g.name, 0))
            gcs = min(g.max_replicas, have[g.name] + extra)
            out[g.name] = max(spec[g.name], gcs)
            raised = raised or gcs > spec[g.name]
        return out, raised

    def report_unplaceable(self, cluster: RayCluster, pg_id: str, why: str) -> None:
        if (cluster.uid, pg_id) in self._unplaceable:
            return
        self._unplaceable.add((cluster.uid, pg_id))
        self.host.metrics.ray_event(cluster.namespace, cluster.name, "GangUnplaceable")
        self.host.emit(cluster.obj, WARNING, "GangUnplaceable",
                       f"placement group {pg_id} cannot be placed on any worker group: {why}")

    async def aclose(self) -> None:
        """Stop every poller, those cancelled earlier included, and wait until each has ended before the reader
        they share is closed."""
        tasks = [task for _, task in self._polls.values()] + list(self._stopping)
        self._polls.clear()
        self._stopping.clear()
        await cancel_and_wait(tasks)
        if self.reader is not None:
            await self.reader.aclose()
