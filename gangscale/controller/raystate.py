"""A Ray gang as the loop tracks it: the same life as a ProvisioningRequest's, kept on the RayCluster instead.

A gang of new worker replicas of one RayCluster goes through the phases of :mod:`requests` (pending, provisioning,
booked, done) with the same transitions, planner and actuator as a ProvisioningRequest. What differs is where it
is written:

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
from gangscale.controller.requests import Phase, RequestState, phase
from gangscale.model.gang import Gang
from gangscale.sources.provreq import ProvReq
from gangscale.sources.raycluster import RayCluster, describe

JSON = dict[str, Any]

#: What the planner's and the metrics' ``class`` label says for Ray gangs.
RAY_CLASS = "ray.io/raycluster"
ANNOTATION_PREFIX = "gangscale.io/scale-up."


@dataclass(frozen=True, slots=True)
class RayGangRef(ProvReq):
    """The identity a Ray gang has wherever the loop expects a ProvisioningRequest's."""

    cluster_name: str = ""
    gang_id: str = ""
    gang_pods: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.cluster_name}/{self.gang_id}"

    @property
    def pods(self) -> int:
        return self.gang_pods


def gang_key(cluster: RayCluster, gang_id: str) -> str:
    """The key :class:`RayGangRef` gives the gang, for building its :class:`Gang` before the state exists."""
    return f"{cluster.namespace}/{cluster.name}/{gang_id}"


def gang_uid(cluster_uid: str, gang_id: str) -> str:
    """36 hex characters unique to (cluster, gang): the state's key and the stem of its provider tokens."""
    return hashlib.sha256(f"{cluster_uid}/{gang_id}".encode()).hexdigest()[:36]


@dataclass
class RayGangState(RequestState):
    cluster_uid: str = ""
    #: New replicas per worker group this gang brings.
    replicas: dict[str, int] = field(default_factory=dict)
    description: str = ""
    #: Where the demand came from: ``replicas`` (the RayCluster spec) or ``gcs`` (the head's pending gangs).
    source: str = "replicas"

    @classmethod
    def new(cls, cluster: RayCluster, gang_id: str, replicas: Mapping[str, int], gang: Gang, now: float,
            source: str) -> RayGangState:
        ref = RayGangRef(namespace=cluster.namespace, name=cluster.name, uid=gang_uid(cluster.uid, gang_id),
                         generation=cluster.generation, class_name=RAY_CLASS, parameters={}, created=now,
                         obj=cluster.obj, cluster_name=cluster.name, gang_id=gang_id, gang_pods=gang.pods)
        st = cls(ref, {}, None, cluster_uid=cluster.uid, replicas=dict(replicas),
                 description=describe(replicas, cluster), source=source)
        st.gang = gang
        st.applied = st.body_key()
        return st

    def regang(self, cluster: RayCluster, replicas: Mapping[str, int], gang: Gang) -> None:
        """The demand of a gang not provisioned yet changed: it now asks for ``replicas``."""
        assert isinstance(self.pr, RayGangRef)
        self.replicas = dict(replicas)
        self.description = describe(replicas, cluster)
        self.gang = gang
        self.pr = _with(self.pr, cluster.obj, gang.pods)

    def observe(self, cluster: RayCluster) -> None:
        """Keep the RayCluster object current (events name its latest resourceVersion)."""
        assert isinstance(self.pr, RayGangRef)
        self.pr = _with(self.pr, cluster.obj, self.pr.gang_pods)

    @property
    def gang_id(self) -> str:
        assert isinstance(self.pr, RayGangRef)
        return self.pr.gang_id

    @property
    def annotation(self) -> str:
        return ANNOTATION_PREFIX + self.gang_id

    def status_body(self) -> JSON:
        """What is written for this gang: the recorded intent while it matters (None removes the annotation)."""
        if self.record is None or phase(self) is Phase.DONE:
            return {"annotation": None}
        return {"annotation": json.dumps({"replicas": self.replicas, "scaleUp": json.loads(self.record.to_detail())},
                                         separators=(",", ":"), sort_keys=True)}

    def event(self, event_type: str, reason: str, message: str) -> None:
        super().event(event_type, reason, f"gang {self.gang_id} ({self.description}): {message}")


def _with(ref: RayGangRef, obj: JSON, pods: int) -> RayGangRef:
    return RayGangRef(namespace=ref.namespace, name=ref.name, uid=ref.uid, generation=ref.generation,
                      class_name=ref.class_name, parameters=ref.parameters, created=ref.created, obj=obj,
                      cluster_name=ref.cluster_name, gang_id=ref.gang_id, gang_pods=pods)


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
