"""DELETE: preconditions, finalizers and deletionTimestamp, propagation policies, namespaces.

As the real registry Store does: an object without finalizers is removed at once; one with finalizers
gets ``deletionTimestamp`` (and a generation bump) and stays until the last finalizer is removed;
``propagationPolicy: Orphan`` / ``Foreground`` add the ``orphan`` / ``foregroundDeletion`` finalizers that
the garbage collector (``controllers``) acts on; a Namespace turns ``Terminating`` and is emptied by the
namespace controller. Preconditions on uid or resourceVersion that do not hold are 409s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gangscale.sim.apiserver import errors as E
from gangscale.sim.apiserver.conversion import from_storage
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import Registry, ResourceType, StorageKey, storage_key
from gangscale.sim.apiserver.store import Store

JSON = dict[str, Any]


@dataclass
class DeleteOptions:
    propagation: str = "Background"
    uid: str | None = None
    resource_version: str | None = None
    grace_period_seconds: int | None = None


class DeletionVerbs:
    """The delete verb of :class:`~gangscale.sim.apiserver.api.ObjectAPI`."""

    store: Store
    registry: Registry

    def _now(self) -> str:
        raise NotImplementedError

    def _stored(self, rt: ResourceType, ns: str, name: str) -> JSON:
        raise NotImplementedError

    def delete(self, rt: ResourceType, ns: str, name: str, opts: DeleteOptions,
               dry_run: bool) -> tuple[JSON, bool]:
        """Returns (object, deleted now). An object with finalizers only gets its deletionTimestamp."""
        stored = self._stored(rt, ns, name)
        meta = stored["metadata"]
        if opts.uid and opts.uid != meta.get("uid"):
            raise E.conflict(rt.plural, rt.group, name,
                             f"Precondition failed: UID in precondition: {opts.uid}, "
                             f"UID in object meta: {meta.get('uid')}")
        if opts.resource_version and opts.resource_version != meta.get("resourceVersion"):
            raise E.conflict(rt.plural, rt.group, name,
                             f"Precondition failed: ResourceVersion in precondition: {opts.resource_version}, "
                             f"ResourceVersion in object meta: {meta.get('resourceVersion')}")
        finalizers = list(meta.get("finalizers") or [])
        if opts.propagation == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        elif opts.propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if rt.kind == "Namespace" and (stored.get("spec") or {}).get("finalizers"):
            return self._mark_terminating(rt, stored, finalizers, dry_run), False
        if not finalizers:
            if dry_run:
                return from_storage(rt, stored), True
            return self._remove_now(rt, ns, name), True
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return from_storage(rt, stored), False
        new = json_copy(stored)
        new["metadata"]["finalizers"] = finalizers
        if not new["metadata"].get("deletionTimestamp"):
            new["metadata"]["deletionTimestamp"] = self._now()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if new["metadata"].get("generation"):
                new["metadata"]["generation"] += 1
        if dry_run:
            return from_storage(rt, new), False
        return from_storage(rt, self.store.put(storage_key(rt), new, added=False)), False

    def _mark_terminating(self, rt: ResourceType, stored: JSON, finalizers: list[str],
                          dry_run: bool) -> JSON:
        new = json_copy(stored)
        new["metadata"].setdefault("deletionTimestamp", self._now())
        new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        if finalizers:
            new["metadata"]["finalizers"] = finalizers
        new.setdefault("status", {})["phase"] = "Terminating"
        if dry_run or new == stored:
            return from_storage(rt, new)
        return from_storage(rt, self.store.put(storage_key(rt), new, added=False))

    def _remove_now(self, rt: ResourceType, ns: str, name: str) -> JSON:
        last = self.store.remove(storage_key(rt), ns if rt.namespaced else "", name)
        assert last is not None
        if rt.kind == "CustomResourceDefinition":
            for t in self.registry.remove_crd(name):
                self.store.drop_resource(StorageKey(t.group, t.plural))
        return from_storage(rt, last)
