"""Autoscaling RayClusters as a demand source: their missing worker replicas become whole gangs.

For each RayCluster that changed since the last pass (its object, its worker pods, what its head's GCS reports,
the life of one of its gangs), and that is a demand source (``enableInTreeAutoscaling`` and not managed by
Kueue, see :mod:`gangscale.sources.raycluster`):

1. The target replicas per worker group: what the spec asks for (clamped to min/max) or, when the head's GCS is
   read (``gangscale[ray]``), the Ray nodes the cluster has plus what its pending placement groups and
   resource constraints need, whichever is more (:mod:`gangscale.controller.demand.gcspollers`).
2. Missing replicas = target - replicas whose pods are all on nodes - replicas of gangs already being
   provisioned or booked for the cluster (less those that landed on their nodes).
3. Missing replicas *form* a gang: the Ray autoscaler raises ``replicas`` in steps (at most 10 nodes per
   5-s iteration), so the demand is held until it has not changed for ``ray_batch_idle`` or has been forming
   for ``ray_batch_max`` (the window of the loop's batching, :class:`~.batching.Window`); what the GCS reports
   is complete at once and is not held. A formed gang is a request (:mod:`raygangrequest`), planned, scaled up and
   booked like a ProvisioningRequest (all-or-nothing).
4. A gang not provisioned yet follows the demand: it grows or shrinks with it, and is withdrawn (an Event says
   so, nothing is obtained) when Ray no longer asks for it (``replicas`` lowered, ``workersToDelete``). A gang
   already obtaining units is not cancelled: the units come up, and the normal scale-down removes what stays
   empty (decision 9).
5. A booked gang ends when its pods are on its nodes, when the cluster has no unplaced replica left in the
   gang's groups (:meth:`RaySource.consumed`), or when the booking TTL passes.

A RayCluster that cannot be read (a bad worker group) gets one Warning Event per change and is skipped;
everything else goes on. If the API does not serve ``ray.io/v1`` RayClusters, the source is off (checked once at
start; install the CRD and restart to turn it on).
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gangscale.controller.demand.gcspollers import RayGcs
from gangscale.controller.demand.protocol import Host
from gangscale.controller.demand.raygangrequest import (
    NAME,
    Forming,
    RayGang,
    annotation_body,
    formed,
    gang_consumed,
    gang_uid,
    in_flight_replicas,
    new_gang_id,
    recorded_gangs,
    recovered,
    request_of,
)
from gangscale.controller.logic.reconcile import NORMAL, WARNING, Consumed
from gangscale.controller.logic.request import Phase, RequestState, phase
from gangscale.controller.logic.view import PodInfo
from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector, ReflectorEvent, strip_managed_fields
from gangscale.kube.resources import RAYCLUSTERS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.gang import Gang
from gangscale.sources.raycluster import (
    RayCluster,
    RayClusterError,
    WorkerPod,
    describe,
    missing_replicas,
    parse_raycluster,
    replica_gang,
)

JSON = dict[str, Any]
log = logging.getLogger(__name__)
MERGE = "application/merge-patch+json"


class RaySource:
    name = NAME

    def __init__(self, http: KubeHTTP, host: Host) -> None:
        self.http = http
        self.host = host
        self.reflector: Reflector[JSON] | None = None
        self.gcs = RayGcs(http, host, self._gcs_changed)
        self.gangs: dict[str, RayGang] = {}
        self.forming: dict[str, Forming] = {}
        self._seq = itertools.count()
        #: Clusters to look at in the next pass, by uid (``*`` for every one).
        self._dirty: set[str] = set()
        self._changed_objects: set[tuple[str, str]] = set()
        self._parsed: dict[str, tuple[str, RayCluster]] = {}
        self._uid_of: dict[tuple[str, str], str] = {}
        self._phases: dict[str, Phase] = {}
        #: cluster uid -> the problem last reported, so a broken RayCluster is reported once per change.
        self._reported: dict[str, str] = {}
        self._missing: dict[str, dict[str, int]] = {}

    # -- start ------------------------------------------------------------------------------------------------------

    async def start(self) -> list[Reflector[Any]]:
        """The RayCluster reflector, if the API serves ``ray.io/v1`` RayClusters and the source is on."""
        if not self.host.settings.ray:
            return []
        try:
            found = await self.http.request("GET", f"/apis/{RAYCLUSTERS.group}/{RAYCLUSTERS.version}")
        except ApiError as exc:
            if not exc.not_found:
                log.warning("could not discover ray.io/v1 (%s); Ray demand is off until a restart", exc)
            else:
                log.info("the API does not serve ray.io/v1 RayClusters; Ray demand is off")
            return []
        if not any(r.get("name") == RAYCLUSTERS.plural for r in found.get("resources") or ()):
            log.info("ray.io/v1 has no rayclusters resource; Ray demand is off")
            return []
        self.reflector = Reflector(self.http, RAYCLUSTERS, transform=strip_managed_fields)
        self.reflector.add_handler(self._on_cluster)
        return [self.reflector]

    def raycluster(self, namespace: str, name: str) -> JSON | None:
        """A RayCluster from the cache (for the elastic-slice ProvisioningRequests of Kueue-managed clusters)."""
        return self.reflector.get(namespace, name) if self.reflector is not None else None

    def recover(self) -> None:
        """Before the first plan: a gang for every intent recorded on a RayCluster, for the loop to reconcile."""
        if self.reflector is None:
            return
        now = self.host.clock.now()
        for obj in self.reflector.cache.values():
            cluster = self._parse(obj)
            if cluster is None:
                continue
            for st, gang in recovered(cluster, now):
                self.gangs[st.key] = gang
                self.host.add(st)
                log.info("%s: found the recorded scale-up of gang %s (%s)", cluster.key, gang.gang_id, gang.description)
        self._dirty.add("*")

    def recorded_tokens(self) -> set[str]:
        """Tokens recorded in the scale-up annotations of any RayCluster, readable or not, a demand source or not
        (their units are not orphans). :meth:`recover` makes a request of every recorded gang of a RayCluster it
        can read, so their tokens are in the requests' records too; the intents on a RayCluster it cannot read
        (a bad worker group) become no request, and only this keeps their units from being released as orphans
        (they stay as ordinary nodes; scale-down removes them once idle)."""
        if self.reflector is None:
            return set()
        return {token for obj in self.reflector.cache.values() for _, _, record in recorded_gangs(obj)
                for token in record.tokens}

    async def aclose(self) -> None:
        await self.gcs.aclose()

    # -- changes ----------------------------------------------------------------------------------------------------

    def _on_cluster(self, event: ReflectorEvent[JSON]) -> None:
        meta = event.obj.get("metadata") or {}
        self._changed_objects.add((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        self.host.wake()

    def _gcs_changed(self, uid: str) -> None:
        self._dirty.add(uid)
        self.host.wake()

    def _parse(self, obj: JSON) -> RayCluster | None:
        meta = obj.get("metadata") or {}
        uid, rv = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        cached = self._parsed.get(uid)
        if cached is not None and cached[0] == rv:
            return cached[1]
        try:
            cluster = parse_raycluster(obj)
        except RayClusterError as exc:
            self._report_bad(obj, uid, str(exc))
            self._parsed.pop(uid, None)
            return None
        self._reported.pop(uid, None)
        self._parsed[uid] = (rv, cluster)
        self._uid_of[(cluster.namespace, cluster.name)] = uid
        return cluster

    def sync(self, now: float) -> None:
        if self.reflector is None:
            return
        dirty = self._take_dirty(now)
        if not dirty:
            return
        clusters = self._clusters(dirty)
        mine: dict[str, list[RequestState]] = defaultdict(list)
        for st in list(self.host.requests_of(self.name)):
            gang = self.gangs.get(st.key)
            if gang is None or (gang.cluster_uid not in dirty and "*" not in dirty):
                continue
            cluster = clusters.get(gang.cluster_uid)
            if cluster is None:
                self.host.forget(st.key, "its RayCluster was deleted")
                continue
            self.host.update(st.key, request_of(cluster, gang))  # events name the cluster's latest version
            mine[gang.cluster_uid].append(st)
        sources = {uid: c for uid, c in clusters.items() if c.is_demand_source}
        for uid in sources.keys() | mine.keys():
            cluster = clusters[uid]
            workers = list(self.host.view.workers.get((cluster.namespace, cluster.name), {}).values())
            self._missing[uid] = self._cluster_pass(cluster, workers, mine[uid], now)
        for uid in set(self.forming) - set(sources):
            if uid in clusters or uid not in self._parsed:
                del self.forming[uid]
        self.gcs.track(c for c in self._all_clusters() if c.is_demand_source)
        self.host.metrics.set_ray_missing({
            (c.namespace, c.name, group): n for uid, missing in self._missing.items()
            if (c := self._cluster(uid)) is not None for group, n in missing.items()})

    def _take_dirty(self, now: float) -> set[str]:
        dirty, self._dirty = self._dirty, set()
        for key in self._changed_objects:
            obj = self.reflector.get(*key) if self.reflector is not None else None
            uid = str((obj.get("metadata") or {}).get("uid", "")) if obj is not None else self._uid_of.get(key, "")
            if obj is None:
                self._forget_cluster(key, uid)
            if uid:
                dirty.add(uid)
        self._changed_objects.clear()
        for namespace, name in self.host.view.take_changed_clusters():
            worker_of = self._uid_of.get((namespace, name))
            if worker_of:
                dirty.add(worker_of)
        # A gang whose phase moved changes what its cluster has coming.
        for st in self.host.requests_of(self.name):
            gang = self.gangs.get(st.key)
            now_phase = phase(st)
            if gang is not None and self._phases.get(st.key) != now_phase:
                self._phases[st.key] = now_phase
                dirty.add(gang.cluster_uid)
        for uid, seen in self.forming.items():
            if seen.window.due(now):
                dirty.add(uid)
        return dirty

    def _forget_cluster(self, key: tuple[str, str], uid: str) -> None:
        self._uid_of.pop(key, None)
        self._parsed.pop(uid, None)
        self._reported.pop(uid, None)
        self._missing.pop(uid, None)
        self.forming.pop(uid, None)

    def _clusters(self, dirty: set[str]) -> dict[str, RayCluster]:
        out = {}
        for cluster in self._all_clusters():
            if "*" in dirty or cluster.uid in dirty:
                out[cluster.uid] = cluster
        return out

    def _all_clusters(self) -> Iterable[RayCluster]:
        assert self.reflector is not None
        for obj in self.reflector.cache.values():
            cluster = self._parse(obj)
            if cluster is not None:
                yield cluster

    def _cluster(self, uid: str) -> RayCluster | None:
        cached = self._parsed.get(uid)
        return cached[1] if cached is not None else None

    # -- one cluster ------------------------------------------------------------------------------------------------

    def _cluster_pass(self, cluster: RayCluster, workers: list[WorkerPod], states: list[RequestState],
                      now: float) -> dict[str, int]:
        """Move the cluster's gangs on; returns its missing replicas per group (for the metrics)."""
        targets, from_gcs = self.gcs.targets(cluster) if cluster.is_demand_source else \
            ({g.name: 0 for g in cluster.groups}, False)
        coming: dict[str, int] = defaultdict(int)
        pending: list[RequestState] = []
        for st in states:
            match phase(st):
                case Phase.PENDING if not st.busy:
                    pending.append(st)
                case Phase.PROVISIONING | Phase.BOOKED:
                    for group, count in in_flight_replicas(self.gangs[st.key], st, cluster, workers).items():
                        coming[group] += count
            self.host.mark(st.key)
        missing = missing_replicas(cluster, workers, targets, coming)
        if pending:
            first, *extra = sorted(pending, key=lambda st: st.key)
            for st in extra:  # never more than one pending gang per cluster; surplus ones merge into the first
                self._withdraw(st, "merged into another pending gang of the cluster")
            self.forming.pop(cluster.uid, None)
            self._follow(cluster, first, missing)
            return missing
        self._form(cluster, missing, from_gcs, now)
        return missing

    def _follow(self, cluster: RayCluster, st: RequestState, missing: Mapping[str, int]) -> None:
        """A gang not provisioned yet tracks the demand: it grows, shrinks, or is withdrawn."""
        gang = self.gangs[st.key]
        if not missing:
            self._withdraw(st, "Ray no longer asks for these replicas (replicas lowered or workers deleted) before "
                               "any unit was obtained; nothing was provisioned")
        elif dict(missing) != gang.replicas:
            before = gang.description
            gang.replicas = dict(missing)
            gang.description = describe(missing, cluster)
            gang.gang = replica_gang(cluster, missing, st.key, gang.created)
            self.host.update(st.key, request_of(cluster, gang))
            log.info("%s: gang %s now asks for %s (was %s)", cluster.key, gang.gang_id, gang.description, before)

    def _withdraw(self, st: RequestState, why: str) -> None:
        """Drop a gang nothing was obtained for; the Event outlives it."""
        gang = self.gangs[st.key]
        self._emit(st.request.obj, NORMAL, "GangWithdrawn", f"gang {gang.gang_id} ({gang.description}): {why}")
        log.info("%s: %s", st.key, why)
        self.host.forget(st.key, why)

    def _form(self, cluster: RayCluster, missing: Mapping[str, int], complete: bool, now: float) -> None:
        window = self.host.settings.ray_batch_idle, self.host.settings.ray_batch_max
        gang = formed(self.forming, cluster, missing, complete, now, window,
                      lambda: new_gang_id(cluster, now, self._seq, taken=self.gangs.keys()))
        if gang is None:
            return
        st = RequestState(request_of(cluster, gang))
        st.written = repr(annotation_body(st, gang))
        self.gangs[st.key] = gang
        self.host.add(st)
        log.info("%s: gang %s formed from %s: %s", cluster.key, gang.gang_id, gang.origin, gang.description,
                 extra={"raycluster": cluster.key, "gang": gang.gang_id})

    def next_wake(self) -> float | None:
        return min((due for f in self.forming.values() if (due := f.window.deadline()) is not None), default=None)

    def forgotten(self, key: str) -> None:
        gang = self.gangs.pop(key, None)
        self._phases.pop(key, None)
        if gang is not None:
            self._dirty.add(gang.cluster_uid)

    # -- gangs and outcomes -----------------------------------------------------------------------------------------

    def gang(self, st: RequestState, *, may_scale: bool | None = None) -> Gang | str | None:
        gang = self.gangs.get(st.key)
        if gang is None:
            return "the gang's worker groups are gone from the RayCluster"
        return gang.gang if may_scale is None else replace(gang.gang, may_scale=may_scale)

    def consumers(self, st: RequestState) -> Iterable[PodInfo]:
        gang = self.gangs.get(st.key)
        return gang.consumers if gang is not None else ()

    def consumed(self, st: RequestState) -> Consumed | None:
        """Pods of the cluster may bind elsewhere than the booked nodes, or Ray may stop wanting them: once no
        replica of the gang's groups is left without a node, the booking has served its purpose."""
        gang = self.gangs.get(st.key)
        cluster = self._cluster(gang.cluster_uid) if gang is not None else None
        if gang is None or cluster is None:
            return None
        workers = list(self.host.view.workers.get((cluster.namespace, cluster.name), {}).values())
        targets = self.gcs.targets(cluster)[0] if cluster.is_demand_source else {g.name: 0 for g in cluster.groups}
        return gang_consumed(gang, st, cluster, workers, targets)

    def status(self, st: RequestState) -> JSON:
        gang = self.gangs.get(st.key)
        return annotation_body(st, gang) if gang is not None else {"annotation": None}

    async def write(self, st: RequestState, body: JSON) -> str:
        """Record (or remove) the gang's scale-up intent on its RayCluster (a merge patch of one annotation: no
        version precondition, the RayCluster's other writers change it all the time)."""
        gang = self.gangs.get(st.key)
        if gang is None:
            return ""
        patch = {"metadata": {"annotations": {gang.annotation: body["annotation"]}}}
        await self.http.request("PATCH", RAYCLUSTERS.path(st.request.namespace, st.request.name), body=patch,
                                content_type=MERGE)
        return ""

    async def delete(self, st: RequestState) -> None:
        return None

    def note_events(self, st: RequestState, events: Sequence[tuple[str, str, str]]) -> None:
        for _, reason, _ in events:
            self.host.metrics.ray_event(st.request.namespace, st.request.name, reason)

    # -- events outside a gang's life ---------------------------------------------------------------------------------

    def _report_bad(self, obj: JSON, uid: str, problem: str) -> None:
        if self._reported.get(uid) == problem:
            return
        self._reported[uid] = problem
        meta = obj.get("metadata") or {}
        log.warning("RayCluster %s/%s: %s; its demand is ignored until it is fixed", meta.get("namespace"),
                    meta.get("name"), problem)
        self._emit(obj, WARNING, "InvalidRayCluster", f"gangscale cannot read this RayCluster's demand: {problem}")

    def _emit(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        self.host.metrics.ray_event(str(meta.get("namespace", "")), str(meta.get("name", "")), reason)
        self.host.emit(obj, event_type, reason, message)


__all__ = ["RaySource", "gang_uid"]
