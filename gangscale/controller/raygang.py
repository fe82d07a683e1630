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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangscale.controller.record import Record, parse_detail
from gangscale.controller.request import Phase, Request, RequestState, phase
from gangscale.controller.view import PodInfo
from gangscale.model.gang import Gang
from gangscale.sources.raycluster import RayCluster

JSON = dict[str, Any]

#: What the planner's and the metrics' ``class`` label says for Ray gangs.
RAY_CLASS = "ray.io/raycluster"
ANNOTATION_PREFIX = "gangscale.io/scale-up."
NAME = "raycluster"


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
