"""The parts of kube-controller-manager that a real cluster runs next to its API server.

A real API server does not garbage-collect dependents, empty terminating namespaces or untaint Ready
nodes: controllers do, asynchronously, through the API. This module emulates three of them, in one
background task fed by the store's commit events, writing through the same verbs as a client would
(field manager ``kube-controller-manager``):

- **garbage collector**: when an owner is deleted, a dependent whose ``ownerReferences`` name no other
  live owner is deleted (background propagation); one that still has a live owner loses the dangling
  reference. ``propagationPolicy: Orphan`` (finalizer ``orphan``) strips the references and then the
  finalizer; ``Foreground`` (finalizer ``foregroundDeletion``) deletes the dependents first and removes
  the finalizer once none is left.
- **namespace controller**: a Terminating namespace has every namespaced object in it deleted; once
  empty, its ``kubernetes`` finalizer is removed and it disappears.
- **node lifecycle controller** (taint part only): ``node.kubernetes.io/not-ready:NoSchedule`` is kept
  while a Node's ``Ready`` condition is ``False``, ``node.kubernetes.io/unreachable:NoSchedule`` while it
  is ``Unknown``, and both are removed once it is ``True``. The NoExecute taints after
  ``node-monitor-grace-period`` and pod eviction are not emulated.

``await settle()`` waits until every queued piece of work is done, so tests need not sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from gangscale.aio import cancel_and_wait
from gangscale.sim.apiserver.api import ObjectAPI, WriteContext
from gangscale.sim.apiserver.conversion import storage_view
from gangscale.sim.apiserver.deletion import DeleteOptions
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Event
from gangscale.sim.apiserver.strategies import NOT_READY_TAINT, UNREACHABLE_TAINT

JSON = dict[str, Any]
log = logging.getLogger(__name__)
MANAGER = "kube-controller-manager"
_NODES = StorageKey("", "nodes")
_NAMESPACES = StorageKey("", "namespaces")
Ref = tuple[StorageKey, str, str]


class ControllerManager:
    def __init__(self, api: ObjectAPI) -> None:
        self.api = api
        self._queue: asyncio.Queue[tuple[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._uids: dict[str, Ref] = {}
        self._backlog: list[tuple[str, Any]] = []
        api.store.listeners.append(self._observe)

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._queue = asyncio.Queue()
        for item in self._backlog:
            self._queue.put_nowait(item)
        self._backlog.clear()
        self._task = asyncio.create_task(self._run(), name="sim-controller-manager")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def settle(self) -> None:
        """Wait until all work caused by the changes so far is done."""
        if self._queue is not None:
            await self._queue.join()

    # --- event intake (synchronous, inside the store's commit) ---------------------------------------

    def _enqueue(self, item: tuple[str, Any]) -> None:
        if self._queue is None:
            self._backlog.append(item)
        else:
            self._queue.put_nowait(item)

    def _observe(self, key: StorageKey, ev: Event) -> None:
        meta = ev.obj.get("metadata") or {}
        uid = meta.get("uid", "")
        ref: Ref = (key, meta.get("namespace", "") or "", meta.get("name", ""))
        if ev.type == "DELETED":
            self._uids.pop(uid, None)
            self._enqueue(("owner-gone", uid))
            for owner in meta.get("ownerReferences") or []:
                self._enqueue(("finalize", owner.get("uid", "")))
            if ref[1]:
                self._enqueue(("namespace", ref[1]))
            return
        self._uids[uid] = ref
        if meta.get("deletionTimestamp") and {"orphan", "foregroundDeletion"} & set(meta.get("finalizers") or []):
            self._enqueue(("finalize", uid))
        if key == _NAMESPACES and (ev.obj.get("status") or {}).get("phase") == "Terminating":
            self._enqueue(("namespace", ref[2]))
        if key == _NODES and _taints_to_fix(ev.obj) is not None:
            self._enqueue(("node", ref[2]))

    # --- work ----------------------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            kind, arg = await self._queue.get()
            try:
                if kind == "owner-gone":
                    self._owner_gone(arg)
                elif kind == "finalize":
                    self._finalize(arg)
                elif kind == "namespace":
                    self._namespace(arg)
                elif kind == "node":
                    self._node(arg)
            except StatusError as exc:
                log.debug("controller %s(%s): %s", kind, arg, exc.message)
            except Exception:
                log.exception("controller %s(%s) failed", kind, arg)
            finally:
                self._queue.task_done()

    def _ctx(self) -> WriteContext:
        return WriteContext(manager=MANAGER)

    def _type(self, key: StorageKey) -> Any:
        return self.api.registry.storage_version_type(key)

    def _dependents(self, owner_uid: str) -> list[tuple[StorageKey, JSON]]:
        out = []
        for key, ns, name in list(self._uids.values()):
            obj = self.api.store.get(key, ns, name)
            if obj and any(r.get("uid") == owner_uid for r in obj["metadata"].get("ownerReferences") or []):
                out.append((key, obj))
        return out

    def _owner_gone(self, uid: str) -> None:
        for key, obj in self._dependents(uid):
            refs = obj["metadata"].get("ownerReferences") or []
            live = [r for r in refs if r.get("uid") != uid and r.get("uid") in self._uids]
            if live:
                self._set_refs(key, obj, [r for r in refs if r.get("uid") != uid])
            else:
                self._delete(key, obj)

    def _finalize(self, uid: str) -> None:
        ref = self._uids.get(uid)
        if ref is None:
            return
        owner = self.api.store.get(*ref)
        if owner is None or not owner["metadata"].get("deletionTimestamp"):
            return
        finalizers = list(owner["metadata"].get("finalizers") or [])
        if "orphan" in finalizers:
            for key, obj in self._dependents(uid):
                refs = obj["metadata"].get("ownerReferences") or []
                self._set_refs(key, obj, [r for r in refs if r.get("uid") != uid])
            finalizers.remove("orphan")
        elif "foregroundDeletion" in finalizers:
            dependents = self._dependents(uid)
            for key, obj in dependents:
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(key, obj)
            if any(self.api.store.get(k, o["metadata"].get("namespace", ""), o["metadata"]["name"])
                   for k, o in dependents):
                return
            finalizers.remove("foregroundDeletion")
        else:
            return
        new = json_copy(owner)
        new["metadata"]["finalizers"] = finalizers
        self._replace(ref[0], new)

    def _namespace(self, name: str) -> None:
        ns = self.api.store.get(_NAMESPACES, "", name)
        if ns is None or (ns.get("status") or {}).get("phase") != "Terminating":
            return
        remaining = 0
        for rt in self.api.registry.types():
            if not rt.namespaced or rt.version != rt.storage_version or (rt.kind == "Event" and rt.group):
                continue
            for obj in list(self.api.store.items(rt.storage, name)):
                remaining += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(rt.storage, obj)
        if remaining and any(True for rt in self.api.registry.types() if rt.namespaced
                             for _ in self.api.store.items(rt.storage, name)):
            return
        new = json_copy(ns)
        new.setdefault("spec", {})["finalizers"] = []
        new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or [] if f != "kubernetes"]
        if new["metadata"]["finalizers"]:
            self._replace(_NAMESPACES, new)
        else:
            self.api.store.remove(_NAMESPACES, "", name)

    def _node(self, name: str) -> None:
        node = self.api.store.get(_NODES, "", name)
        if node is None:
            return
        taints = _taints_to_fix(node)
        if taints is None:
            return
        new = json_copy(node)
        new.setdefault("spec", {})["taints"] = taints
        if not taints:
            new["spec"].pop("taints")
        self._replace(_NODES, new)

    # --- writes --------------------------------------------------------------------------------------

    def _replace(self, key: StorageKey, stored: JSON) -> None:
        rt = self._type(key)
        meta = stored["metadata"]
        # replace() decodes (copies) its body, so a view of ``stored`` will do.
        self.api.replace(rt, meta.get("namespace", ""), meta["name"], storage_view(rt, stored), None, self._ctx())

    def _set_refs(self, key: StorageKey, obj: JSON, refs: list[JSON]) -> None:
        new = json_copy(obj)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._replace(key, new)

    def _delete(self, key: StorageKey, obj: JSON) -> None:
        rt = self._type(key)
        meta = obj["metadata"]
        with contextlib.suppress(StatusError):
            self.api.delete(rt, meta.get("namespace", ""), meta["name"],
                            DeleteOptions(propagation="Background"), dry_run=False)


def _taints_to_fix(node: JSON) -> list[JSON] | None:
    """The taints the node lifecycle controller wants, or None if they are already right."""
    conds = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conds if c.get("type") == "Ready"), None)
    if ready is None:
        return None
    taints = list((node.get("spec") or {}).get("taints") or [])
    managed = {NOT_READY_TAINT, UNREACHABLE_TAINT}
    keep = [t for t in taints if not (t.get("key") in managed and t.get("effect") == "NoSchedule")]
    if ready == "False":
        keep.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    elif ready != "True":
        keep.append({"key": UNREACHABLE_TAINT, "effect": "NoSchedule"})
    same = sorted(map(str, keep)) == sorted(map(str, taints))
    return None if same else keep
