"""A Ray gang: new worker replicas of one RayCluster that are provisioned together, as a request.

A gang lives the same life as a ProvisioningRequest (pending, provisioning, booked, done) through the same loop,
planner and actuator. What differs is where it is written:

- no status is written anywhere (the RayCluster's status belongs to KubeRay); the conditions live in memory and
  every change a user should see is an Event on the RayCluster;
- the scale-up intent (decision 12) is the annotation ``gangscale.io/scale-up.<gang>`` on the RayCluster,
  written (merge patch, metadata only: the operator ignores it and the generation does not move) before the
  first provider call and removed when the gang's life ends, so a restarted gangscale resumes or releases it.

A gang's key is ``<namespace>/<cluster>/<gang>``: a ProvisioningRequest's key has no second ``/``, so the two
never collide.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.batching import Window
from gangscale.controller.logic.reconcile import Consumed
from gangscale.controller.logic.record import Record, parse_detail
from gangscale.controller.logic.request import Phase, Request, RequestState, phase
from gangscale.controller.logic.view import PodInfo
from gangscale.model.gang import Gang
from gangscale.sources.raycluster import (
    RayCluster,
    WorkerPod,
    describe,
    kept,
    landed_replicas,
    placed_replicas,
    replica_gang,
)

JSON = dict[str, Any]

#: What the planner's and the metrics' ``class`` label says for Ray gangs.
RAY_CLASS = "ray.io/raycluster"
ANNOTATION_PREFIX = "gangscale.io/scale-up."
NAME = "raycluster"
#: The message of a Ray gang's booking that ended because Ray has every replica it wants on a node.
SERVED = "every replica the cluster wants is on a node"


def gang_key(cluster: RayCluster, gang_id: str) -> str:
    return f"{cluster.namespace}/{cluster.name}/{gang_id}"


def gang_uid(cluster_uid: str, gang_id: str) -> str:
    """36 hex characters unique to (cluster, gang): the stem of its provider tokens."""
    return hashlib.sha256(f"{cluster_uid}/{gang_id}".encode()).hexdigest()[:36]


@dataclass
class RayGang:
    """What the Ray source keeps for one gang besides the loop's state of it."""

    cluster_uid: str
    gang_id: str
    #: New replicas per worker group the gang brings.
    replicas: dict[str, int]
    description: str
    gang: Gang
    created: float
    #: Where the demand came from: ``replicas`` (the spec), ``gcs`` (the head's pending gangs) or ``recorded``
    #: (an intent found on the RayCluster after a restart).
    origin: str = "replicas"
    #: The gang's worker pods on its nodes (its booking shrinks by them).
    consumers: list[PodInfo] = field(default_factory=list)

    @property
    def annotation(self) -> str:
        return ANNOTATION_PREFIX + self.gang_id


def request_of(cluster: RayCluster, gang: RayGang) -> Request:
    return Request(key=gang_key(cluster, gang.gang_id), uid=gang_uid(cluster.uid, gang.gang_id), source=NAME,
                   class_name=RAY_CLASS, obj=cluster.obj, created=gang.created, generation=cluster.generation,
                   version=str((cluster.obj.get("metadata") or {}).get("resourceVersion", "")),
                   pods=gang.gang.pods, forget_when_done=True,
                   event_prefix=f"gang {gang.gang_id} ({gang.description}): ")


def annotation_body(st: RequestState, gang: RayGang) -> JSON:
    """What is written for the gang: the recorded intent while it matters (None removes the annotation)."""
    if st.record is None or phase(st) is Phase.DONE:
        return {"annotation": None}
    return {"annotation": json.dumps({"replicas": gang.replicas, "scaleUp": json.loads(st.record.to_detail())},
                                     separators=(",", ":"), sort_keys=True)}


def recorded_gangs(obj: JSON) -> list[tuple[str, dict[str, int], Record]]:
    """``(gang id, replicas, record)`` for every intent recorded on a RayCluster; unreadable ones are skipped
    (an annotation gangscale cannot read is not one it wrote)."""
    out = []
    for key, raw in sorted(((obj.get("metadata") or {}).get("annotations") or {}).items()):
        if not key.startswith(ANNOTATION_PREFIX):
            continue
        try:
            data = json.loads(raw)
            replicas = {str(g): int(n) for g, n in data["replicas"].items()}
            record = parse_detail(json.dumps(data["scaleUp"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if record is not None:
            out.append((key[len(ANNOTATION_PREFIX):], replicas, record))
    return out


def replicas_of(replicas: Mapping[str, int]) -> dict[str, int]:
    return {str(group): int(count) for group, count in replicas.items()}


def recovered(cluster: RayCluster, now: float) -> list[tuple[RequestState, RayGang]]:
    """A request for every scale-up intent recorded on the RayCluster (after a restart), with its gang."""
    out = []
    for gang_id, replicas, record in recorded_gangs(cluster.obj):
        gang = RayGang(cluster.uid, gang_id, replicas, describe(replicas, cluster),
                       replica_gang(cluster, replicas, gang_key(cluster, gang_id), now), now, "recorded")
        st = RequestState(request_of(cluster, gang), record=record, attempts=record.attempt)
        st.written = repr(annotation_body(st, gang))
        out.append((st, gang))
    return out


def new_gang_id(cluster: RayCluster, now: float, seq: Iterator[int], *, taken: Collection[str]) -> str:
    """An id no gang of the cluster has (``taken``: gang keys), nor had recorded on it: the sequence restarts with
    the process, so a gang formed in the same second as one a previous process recorded must not take its id (its
    key, annotation and provider tokens all derive from the id)."""
    annotations = (cluster.obj.get("metadata") or {}).get("annotations") or {}
    for _ in range(256):
        gang_id = f"{int(now):x}{next(seq) % 256:02x}"
        if gang_key(cluster, gang_id) not in taken and ANNOTATION_PREFIX + gang_id not in annotations:
            return gang_id
    raise RuntimeError(f"{cluster.key}: every gang id of second {int(now):x} is taken")


def in_flight_replicas(gang: RayGang, st: RequestState, cluster: RayCluster,
                       workers: Sequence[WorkerPod]) -> dict[str, int]:
    """Replicas the gang brings that have not landed on its nodes yet; sets the gang's consumer pods."""
    nodes = {name for got in st.obtained.values() for name in got.node_names} | set(st.booking or ())
    out: dict[str, int] = {}
    consumers: list[PodInfo] = []
    for name, count in gang.replicas.items():
        group = cluster.group(name)
        if group is None:
            continue  # the group was removed from the spec: nothing of it lands any more
        out[name] = max(0, count - landed_replicas(group, workers, nodes))
        consumers += [PodInfo(w.node, group.demand.requests, False, st.key)
                      for w in kept(group, workers) if w.node in nodes]
    gang.consumers = consumers
    return out


def gang_consumed(gang: RayGang, st: RequestState, cluster: RayCluster, workers: Sequence[WorkerPod],
                  targets: Mapping[str, int]) -> Consumed | None:
    """Served once no replica of the gang's groups is left without a node (Ray may have placed them elsewhere, or
    stopped wanting them); consumed once its own pods are on its nodes."""
    for name in gang.replicas:
        group = cluster.group(name)
        if group is not None and placed_replicas(group, workers) < min(targets.get(name, 0), group.max_replicas):
            break
    else:
        return Consumed(SERVED, "GangPlaced")
    if len(gang.consumers) >= st.request.pods:
        return Consumed(C.M_BOOKING_CONSUMED)
    return None


@dataclass
class Forming:
    """Demand seen but not yet a gang: the autoscaler may still be raising it step by step. Its window opened when
    the demand appeared and starts its idle time over at each change of it (``ray_batch_idle``/``ray_batch_max``)."""

    replicas: dict[str, int]
    window: Window


def formed(forming: dict[str, Forming], cluster: RayCluster, missing: Mapping[str, int], complete: bool, now: float,
           window: tuple[float, float], gang_id: Callable[[], str]) -> RayGang | None:
    """The cluster's missing replicas as a gang, once they have formed: at once when the GCS reported them
    (``complete``), else when the demand has not changed for the window's idle time or has been forming for its
    longest. Until then they are kept in ``forming`` (cluster uid -> what was seen and since when)."""
    if not missing:
        forming.pop(cluster.uid, None)
        return None
    seen = forming.get(cluster.uid)
    if seen is None:
        seen = forming[cluster.uid] = Forming({}, Window(*window))
    if seen.replicas != dict(missing):
        seen.replicas = dict(missing)
        seen.window.note(now)
    if not (complete or seen.window.due(now)):
        return None
    del forming[cluster.uid]
    first = seen.window.first if seen.window.first is not None else now  # noted above: never None here
    new_id = gang_id()
    return RayGang(cluster.uid, new_id, dict(missing), describe(missing, cluster),
                   replica_gang(cluster, missing, gang_key(cluster, new_id), first), first,
                   "gcs" if complete else "replicas")
