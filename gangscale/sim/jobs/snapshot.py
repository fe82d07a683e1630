"""One consistent-enough read of everything the job emulators look at, with the ownership indexes they need
(which pods a job runs, through its child Jobs or RayCluster; which Workload a job has)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import NODES, PODS, RESOURCEFLAVORS, WORKLOADPRIORITYCLASSES, WORKLOADS
from gangscale.kube.transport import Resource
from gangscale.sim.informers import Reader
from gangscale.sim.jobs.kinds import JOB, JOBSET, KINDS, RAYCLUSTER, is_top_level, key, meta, uid
from gangscale.sim.world import owner_of

JSON = dict[str, Any]
POD = "Pod"


@dataclass
class Snapshot:
    objects: dict[str, list[JSON]]
    workloads: list[JSON]
    pods: list[JSON]
    nodes: dict[str, JSON]
    flavors: dict[str, JSON]
    priority_classes: dict[str, JSON]
    _owned: dict[str, list[tuple[str, JSON]]] = field(default_factory=dict, init=False)
    _by_uid: dict[str, tuple[str, JSON]] = field(default_factory=dict, init=False)
    _workloads: dict[str, JSON] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for kind, objs in self.objects.items():
            objs.sort(key=key)
            for obj in objs:
                self._by_uid[uid(obj)] = (kind, obj)
                self._index(kind, obj)
        self.pods.sort(key=key)
        for pod in self.pods:
            self._index(POD, pod)
        for wl in sorted(self.workloads, key=key):
            ref = owner_of(wl)
            if ref is not None and ref.get("uid"):
                self._workloads.setdefault(str(ref["uid"]), wl)

    def _index(self, kind: str, obj: JSON) -> None:
        ref = owner_of(obj)
        if ref is not None and ref.get("uid"):
            self._owned.setdefault(str(ref["uid"]), []).append((kind, obj))

    def owned(self, owner: JSON, kind: str) -> list[JSON]:
        return [o for k, o in self._owned.get(uid(owner), []) if k == kind]

    def workload_of(self, job: JSON) -> JSON | None:
        return self._workloads.get(uid(job))

    def jobs(self, kind: str) -> list[JSON]:
        return self.objects.get(kind, [])

    def top_level_jobs(self) -> Iterator[tuple[str, JSON]]:
        for kind in KINDS:
            for obj in self.jobs(kind):
                if is_top_level(kind, obj):
                    yield kind, obj

    def pods_of(self, kind: str, obj: JSON) -> list[JSON]:
        """Every pod the job runs, through its child Jobs (JobSet) or RayCluster (RayJob)."""
        if kind in (JOB.kind, RAYCLUSTER.kind):
            return self.owned(obj, POD)
        child_kind = JOB.kind if kind == JOBSET.kind else RAYCLUSTER.kind
        return [p for child in self.owned(obj, child_kind) for p in self.owned(child, POD)]

    def top_level_of(self, obj: JSON) -> tuple[str, JSON] | None:
        """The job at the top of ``obj``'s controller-owner chain (None for an object no job owns)."""
        found: tuple[str, JSON] | None = None
        seen: set[str] = set()
        ref = owner_of(obj)
        while ref is not None and str(ref.get("uid", "")) in self._by_uid and ref["uid"] not in seen:
            seen.add(str(ref["uid"]))
            found = self._by_uid[str(ref["uid"])]
            ref = owner_of(found[1])
        return found

    def pod_names(self) -> set[str]:
        return {str(meta(p).get("name", "")) for p in self.pods}


async def _items(reader: Reader, resource: Resource) -> list[JSON]:
    try:
        return await reader.items(resource)
    except ApiError as exc:
        if exc.not_found:  # the resource is not served (a CRD not installed): nothing of that kind
            return []
        raise


async def load(reader: Reader) -> Snapshot:
    objects = {kind: await _items(reader, info.resource) for kind, info in KINDS.items()}
    nodes = {str(meta(n).get("name", "")): n for n in await _items(reader, NODES)}
    flavors = {str(meta(f).get("name", "")): f for f in await _items(reader, RESOURCEFLAVORS)}
    classes = {str(meta(c).get("name", "")): c for c in await _items(reader, WORKLOADPRIORITYCLASSES)}
    return Snapshot(objects, await _items(reader, WORKLOADS), await _items(reader, PODS), nodes, flavors, classes)
