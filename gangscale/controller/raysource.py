"""Ray demand in the loop: autoscaling RayClusters -> Ray gangs, planned with the ProvisioningRequests.

Each pass (:meth:`RaySource.refresh`, before the transitions run) does, per RayCluster that is a demand source
(``enableInTreeAutoscaling`` and not managed by Kueue, see :mod:`gangscale.sources.raycluster`):

1. The target replicas per worker group: what the spec asks for (clamped to min/max) or, when the head's GCS is
   read (``gangscale[ray]``), the Ray nodes the cluster has plus what its pending placement groups and
   resource constraints need, whichever is more (:mod:`gangscale.controller.raygcs`).
2. Missing replicas = target - replicas whose pods are all on nodes - replicas of gangs already being
   provisioned or booked for the cluster (less those that landed on their nodes).
3. Missing replicas *form* a gang: the Ray autoscaler raises ``replicas`` in steps (at most 10 nodes per
   5-s iteration), so the demand is held until it has not changed for ``ray_batch_idle`` or has been forming
   for ``ray_batch_max``; what the GCS reports is complete at once and is not held. A formed gang is a
   :class:`RayGangState`, planned, scaled up and booked like a ProvisioningRequest (all-or-nothing).
4. A gang not provisioned yet follows the demand: it grows or shrinks with it, and is withdrawn (an Event
   says so, nothing is obtained) when Ray no longer asks for it (``replicas`` lowered, ``workersToDelete``).
   A gang already obtaining units is not cancelled: the units come up, and the normal scale-down removes what
   stays empty (decision 9).
5. A booked gang ends when its pods are on its nodes, when the cluster has no unplaced replica left in the
   gang's groups, or when the booking TTL passes.

A RayCluster that cannot be read (a bad worker group) gets one Warning Event per generation and is skipped;
everything else goes on. If the API does not serve ``ray.io/v1`` RayClusters, the source is off (checked once
at start; install the CRD and restart to turn it on).
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gangscale.clock import rfc3339
from gangscale.controller import conditions as C
from gangscale.controller.cluster import PodInfo
from gangscale.controller.raygcs import RayGcs
from gangscale.controller.raystate import ANNOTATION_PREFIX, RayGangState, gang_key, gang_uid, recorded_gangs
from gangscale.controller.requests import Phase, phase
from gangscale.controller.transitions import NORMAL, WARNING
from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector
from gangscale.kube.resources import RAYCLUSTERS
from gangscale.sources.raycluster import (
    RayCluster,
    RayClusterError,
    WorkerPod,
    describe,
    kept,
    landed_replicas,
    missing_replicas,
    parse_raycluster,
    placed_replicas,
    replica_gang,
    workers_by_cluster,
)

if TYPE_CHECKING:
    from gangscale.controller.loop import Controller

log = logging.getLogger(__name__)
MERGE = "application/merge-patch+json"


@dataclass
class Forming:
    """Demand seen but not yet a gang: the autoscaler may still be raising it step by step."""

    replicas: dict[str, int]
    first: float
    changed: float


class RaySource:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.reflector: Reflector | None = None
        self.gcs = RayGcs(ctl)
        self.forming: dict[str, Forming] = {}
        self._seq = itertools.count()
        #: cluster uid -> the problem last reported, so a broken RayCluster is reported once per change.
        self._reported: dict[str, str] = {}

    # -- start -------------------------------------------------------------------------------------------------

    async def detect(self) -> Reflector | None:
        """The RayCluster reflector, if the API serves ``ray.io/v1`` RayClusters and the source is on."""
        if not self.ctl.settings.ray:
            return None
        try:
            found = await self.ctl.http.request("GET", f"/apis/{RAYCLUSTERS.group}/{RAYCLUSTERS.version}")
        except ApiError as exc:
            if not exc.not_found:
                log.warning("could not discover ray.io/v1 (%s); Ray demand is off until a restart", exc)
            else:
                log.info("the API does not serve ray.io/v1 RayClusters; Ray demand is off")
            return None
        if not any(r.get("name") == RAYCLUSTERS.plural for r in found.get("resources") or ()):
            log.info("ray.io/v1 has no rayclusters resource; Ray demand is off")
            return None
        self.reflector = Reflector(self.ctl.http, RAYCLUSTERS)
        return self.reflector

    def recover(self) -> None:
        """Before the first plan: a gang for every intent recorded on a RayCluster, for the loop to reconcile."""
        if self.reflector is None:
            return
        for obj in self.reflector.cache.values():
            try:
                cluster = parse_raycluster(obj)
            except RayClusterError:
                continue
            for gang_id, replicas, record in recorded_gangs(obj):
                now = self.ctl.clock.now()
                gang = replica_gang(cluster, replicas, gang_key(cluster, gang_id), now)
                st = RayGangState.new(cluster, gang_id, replicas, gang, now, "recorded")
                st.record = record
                st.applied = st.body_key()
                self.ctl.states[st.pr.uid] = st
                log.info("%s: found the recorded scale-up of gang %s (%s)", cluster.key, gang_id,
                         describe(replicas, cluster))

    # -- each pass ---------------------------------------------------------------------------------------------

    def states(self) -> list[RayGangState]:
        return [st for st in self.ctl.states.values() if isinstance(st, RayGangState)]

    def clusters(self) -> dict[str, RayCluster]:
        assert self.reflector is not None
        out = {}
        for obj in self.reflector.cache.values():
            meta = obj.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            try:
                out[uid] = parse_raycluster(obj)
                self._reported.pop(uid, None)
            except RayClusterError as exc:
                self.report_bad(obj, uid, str(exc))
        return out

    def refresh(self, now: float) -> None:
        if self.reflector is None:
            return
        ctl = self.ctl
        clusters = self.clusters()
        workers = workers_by_cluster(ctl.pods.cache.values())
        mine: dict[str, list[RayGangState]] = defaultdict(list)
        for st in self.states():
            cluster = clusters.get(st.cluster_uid)
            if cluster is None:
                ctl.forget(st)
            elif phase(st) is Phase.DONE and not st.busy and st.applied == st.body_key():
                del ctl.states[st.pr.uid]  # its annotation is gone and its events are out
            else:
                st.observe(cluster)
                mine[st.cluster_uid].append(st)
        sources = {uid: c for uid, c in clusters.items() if c.is_demand_source}
        missing: dict[tuple[str, str, str], int] = {}
        # A cluster that stopped being a source (suspended, autoscaling off, now queued by Kueue) still moves its
        # gangs on: with nothing wanted, pending ones are withdrawn and bookings end.
        for uid in sources.keys() | mine.keys():
            cluster = clusters[uid]
            got = self.cluster_pass(cluster, workers.get((cluster.namespace, cluster.name), []), mine[uid], now)
            missing.update({(cluster.namespace, cluster.name, g): n for g, n in got.items()})
        for uid in set(self.forming) - set(sources):
            del self.forming[uid]
        self.gcs.track(sources.values())
        ctl.metrics.set_ray_missing(missing)

    def cluster_pass(self, cluster: RayCluster, workers: list[WorkerPod], states: list[RayGangState],
                     now: float) -> dict[str, int]:
        """Move the cluster's gangs on; returns its missing replicas per group (for the metrics)."""
        targets, from_gcs = self.gcs.targets(cluster) if cluster.is_demand_source else \
            ({g.name: 0 for g in cluster.groups}, False)
        coming: dict[str, int] = defaultdict(int)
        pending: list[RayGangState] = []
        for st in states:
            match phase(st):
                case Phase.PENDING if not st.busy:
                    pending.append(st)
                case Phase.PROVISIONING | Phase.BOOKED:
                    for group, count in self.in_flight(cluster, workers, st).items():
                        coming[group] += count
        missing = missing_replicas(cluster, workers, targets, coming)
        for st in states:
            if phase(st) is Phase.BOOKED:
                self.end_booking_if_served(cluster, workers, targets, st, now)
        if pending:
            first, *extra = pending
            for st in extra:  # never more than one pending gang per cluster; surplus ones merge into the first
                self.withdraw(st, "merged into another pending gang of the cluster")
            self.forming.pop(cluster.uid, None)
            self.follow(cluster, first, missing)
            return missing
        self.form(cluster, missing, from_gcs, now)
        return missing

    def in_flight(self, cluster: RayCluster, workers: list[WorkerPod], st: RayGangState) -> dict[str, int]:
        """Replicas the gang brings that have not landed on its nodes yet; sets the gang's consumer pods."""
        nodes = {name for got in st.obtained.values() for name in got.node_names} | set(st.booking or ())
        out: dict[str, int] = {}
        consumers: list[PodInfo] = []
        for name, count in st.replicas.items():
            group = cluster.group(name)
            if group is None:
                continue  # the group was removed from the spec: nothing of it lands any more
            landed = landed_replicas(group, workers, nodes)
            out[name] = max(0, count - landed)
            consumers += [PodInfo(w.node, group.demand.requests, False, st.key)
                          for w in kept(group, workers) if w.node in nodes]
        # The loop's booking logic counts a gang's consumer pods like a PR's (held capacity shrinks as they bind).
        self.ctl.view.consumers[st.key] = consumers
        return out

    def end_booking_if_served(self, cluster: RayCluster, workers: list[WorkerPod], targets: Mapping[str, int],
                              st: RayGangState, now: float) -> None:
        """Pods of the cluster may bind elsewhere than the booked nodes, or Ray may stop wanting them: once no
        replica of the gang's groups is left without a node, the booking has served its purpose."""
        for name in st.replicas:
            group = cluster.group(name)
            if group is not None and placed_replicas(group, workers) < min(targets.get(name, 0), group.max_replicas):
                return
        st.set(C.BOOKING_EXPIRED, True, C.R_BOOKING_CONSUMED, "every replica the cluster wants is on a node",
               rfc3339(now))
        st.event(NORMAL, "GangPlaced", "every replica the cluster wants is on a node; the booking ends")
        self.ctl.capacity_freed()

    def follow(self, cluster: RayCluster, st: RayGangState, missing: Mapping[str, int]) -> None:
        """A gang not provisioned yet tracks the demand: it grows, shrinks, or is withdrawn."""
        if not missing:
            self.withdraw(st, "Ray no longer asks for these replicas (replicas lowered or workers deleted) before "
                              "any unit was obtained; nothing was provisioned")
        elif dict(missing) != st.replicas:
            before = st.description
            st.regang(cluster, missing, replica_gang(cluster, missing, st.key, st.pr.created))
            log.info("%s: gang %s now asks for %s (was %s)", cluster.key, st.gang_id, st.description, before)

    def withdraw(self, st: RayGangState, why: str) -> None:
        """Drop a gang nothing was obtained for; the Event outlives it."""
        self.emit(st.pr.obj, NORMAL, "GangWithdrawn", f"gang {st.gang_id} ({st.description}): {why}")
        log.info("%s: %s", st.key, why)
        st.deleted = True
        self.ctl.states.pop(st.pr.uid, None)

    def form(self, cluster: RayCluster, missing: Mapping[str, int], complete: bool, now: float) -> None:
        if not missing:
            self.forming.pop(cluster.uid, None)
            return
        seen = self.forming.get(cluster.uid)
        if seen is None or seen.replicas != dict(missing):
            seen = self.forming[cluster.uid] = Forming(dict(missing), seen.first if seen else now, now)
        s = self.ctl.settings
        if not (complete or now >= seen.changed + s.ray_batch_idle or now >= seen.first + s.ray_batch_max):
            return
        del self.forming[cluster.uid]
        gang_id = self.new_gang_id(cluster, now)
        gang = replica_gang(cluster, missing, gang_key(cluster, gang_id), seen.first)
        st = RayGangState.new(cluster, gang_id, missing, gang, seen.first, "gcs" if complete else "replicas")
        self.ctl.states[st.pr.uid] = st
        log.info("%s: gang %s formed from %s: %s", cluster.key, gang_id, st.source, st.description,
                 extra={"raycluster": cluster.key, "gang": gang_id})

    def new_gang_id(self, cluster: RayCluster, now: float) -> str:
        """An id no gang of the cluster has, nor had recorded on it: the sequence restarts with the process, so a
        gang formed in the same second as one a previous process recorded must not take its id (its state key,
        annotation and provider tokens all derive from the id)."""
        annotations = (cluster.obj.get("metadata") or {}).get("annotations") or {}
        for _ in range(256):
            gang_id = f"{int(now):x}{next(self._seq) % 256:02x}"
            if gang_uid(cluster.uid, gang_id) not in self.ctl.states and ANNOTATION_PREFIX + gang_id not in annotations:
                return gang_id
        raise RuntimeError(f"{cluster.key}: every gang id of second {int(now):x} is taken")

    def next_wake(self) -> float | None:
        s = self.ctl.settings
        return min((min(f.changed + s.ray_batch_idle, f.first + s.ray_batch_max) for f in self.forming.values()),
                   default=None)

    # -- writes --------------------------------------------------------------------------------------------------

    async def write(self, st: RayGangState) -> None:
        """Record (or remove) the gang's scale-up intent on its RayCluster."""
        body = {"metadata": {"annotations": {st.annotation: st.status_body()["annotation"]}}}
        await self.ctl.http.request("PATCH", RAYCLUSTERS.path(st.pr.namespace, st.pr.name), body=body,
                                    content_type=MERGE)

    def report_bad(self, obj: dict[str, object], uid: str, problem: str) -> None:
        meta = obj.get("metadata") or {}
        assert isinstance(meta, dict)
        if self._reported.get(uid) == problem:
            return
        self._reported[uid] = problem
        log.warning("RayCluster %s/%s: %s; its demand is ignored until it is fixed", meta.get("namespace"),
                    meta.get("name"), problem)
        self.emit(obj, WARNING, "InvalidRayCluster", f"gangscale cannot read this RayCluster's demand: {problem}")

    def emit(self, obj: dict[str, object], event_type: str, reason: str, message: str) -> None:
        """An Event on a RayCluster outside any gang's life (a bad spec, an unplaceable placement group)."""
        meta = obj.get("metadata") or {}
        assert isinstance(meta, dict)
        self.ctl.metrics.ray_event(str(meta.get("namespace", "")), str(meta.get("name", "")), reason)
        if self.ctl.settings.dry_run:
            return
        self.ctl.spawn(self.ctl.recorder.record(dict(obj), event_type, reason, message, self.ctl.clock.now()),
                       f"event {reason}", progress=False)
