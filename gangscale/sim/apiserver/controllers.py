"""The parts of kube-controller-manager that a real cluster runs next to its API server.

A real API server does not garbage-collect dependents, empty terminating namespaces, untaint Ready nodes or
notice nodes that stopped heartbeating: controllers do, asynchronously, through the API. This module emulates
them, in a background task fed by the store's commit events (and, for node health, one on the clock), writing
through the same verbs as a client would (field manager ``kube-controller-manager``):

- **garbage collector**: when an owner is deleted, a dependent whose ``ownerReferences`` name no other
  live owner is deleted (background propagation); one that still has a live owner loses the dangling
  reference. ``propagationPolicy: Orphan`` (finalizer ``orphan``) strips the references and then the
  finalizer; ``Foreground`` (finalizer ``foregroundDeletion``) deletes the dependents first and removes
  the finalizer once none is left.
- **namespace controller**: a Terminating namespace has every namespaced object in it deleted; once
  empty, its ``kubernetes`` finalizer is removed and it disappears.
- **node lifecycle controller**, taints (always on; ``doNoScheduleTaintingPass``):
  ``node.kubernetes.io/not-ready:NoSchedule`` is kept while a Node's ``Ready`` condition is ``False``,
  ``node.kubernetes.io/unreachable:NoSchedule`` while it is ``Unknown``, and both are removed once it is
  ``True``, on every change of the Node.
- **node lifecycle controller**, health (``monitor_node_health(clock)``: off unless turned on, because it needs
  a clock and every Node then needs a kubelet that heartbeats, which hand-made test Nodes lack). As
  ``pkg/controller/nodelifecycle`` of kubernetes v1.36 (``tryUpdateNodeHealth``, ``processTaintBaseEviction``)
  with kube-controller-manager's defaults (``pkg/controller/nodelifecycle/config/v1alpha1/defaults.go``:
  ``--node-monitor-grace-period`` 50 s since v1.32, kubernetes PR 126287, 40 s before;
  ``--node-startup-grace-period`` 60 s; ``--node-monitor-period`` 5 s): a Node's probe time is when its Ready
  condition's ``lastHeartbeatTime`` or its Lease's (``kube-node-lease/<node>``) ``renewTime`` was last seen to
  change. At the first monitor pass (every 5 s) after probe + grace period (the startup grace period for a Node
  that never had a Ready condition), its Ready, MemoryPressure, DiskPressure and PIDPressure conditions become
  ``Unknown`` (reason ``NodeStatusUnknown``, message "Kubelet stopped posting node status.";
  ``NodeStatusNeverUpdated``, "Kubelet never posted node status." for a missing one; ``lastTransitionTime`` now,
  ``lastHeartbeatTime`` kept) through the status subresource; the taint part above then adds
  ``unreachable:NoSchedule``. Taint-based eviction's NoExecute taints follow the Ready condition the pass after
  it changed: ``not-ready:NoExecute`` while ``False`` (new Nodes too), ``unreachable:NoExecute`` while
  ``Unknown`` (one replacing the other), none once ``True``; each with ``timeAdded``. Only the kubelet turns a
  Node back Ready (a heartbeat alone does not): the taints then go as described.

  Not emulated (docs/apiserver-fidelity.md): the per-zone rate limits on NoExecute tainting
  (``--node-eviction-rate`` 0.1 node/s per zone, ``--secondary-node-eviction-rate`` 0.01 in a partially disrupted
  zone of more than ``--large-cluster-size-threshold`` 50 nodes, none in a smaller one) and the disruption modes
  (a zone at least ``--unhealthy-zone-threshold`` 55 % not Ready, with 3 or more such Nodes, is partially
  disrupted; a zone with no Ready Node fully disrupted; when every zone is, the controller adds no NoExecute taint
  and removes those it added): here every Node is tainted at once, whatever the rest of its zone does. Nor are
  pod eviction (the taint-eviction controller deletes a pod that does not tolerate a NoExecute taint once its
  ``tolerationSeconds`` run out; the API server gives pods 300 s for ``not-ready`` and ``unreachable``), the
  ``Ready=False`` that the controller writes into the pods of an unreachable Node (``MarkPodsNotReady``), the
  probe times taken at the pass that sees a change (here: when the change is committed, so a Node can go
  ``Unknown`` up to one monitor period earlier than upstream), the ``node.kubernetes.io/exclude-disruption``
  label, events, and taints for the pressure conditions or ``spec.unschedulable``.

``await settle()`` waits until every queued piece of work is done, so tests need not sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock
from gangscale.sim.apiserver.api import ObjectAPI, WriteContext
from gangscale.sim.apiserver.conversion import storage_view
from gangscale.sim.apiserver.deletion import DeleteOptions
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.nodehealth import NODE_LEASE_NAMESPACE, NodeHealthMonitor, NodeMonitorSettings
from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Event
from gangscale.sim.apiserver.strategies import NOT_READY_TAINT, UNREACHABLE_TAINT

JSON = dict[str, Any]
log = logging.getLogger(__name__)
MANAGER = "kube-controller-manager"
_NODES = StorageKey("", "nodes")
_NAMESPACES = StorageKey("", "namespaces")
_LEASES = StorageKey("coordination.k8s.io", "leases")
Ref = tuple[StorageKey, str, str]


class ControllerManager:
    def __init__(self, api: ObjectAPI) -> None:
        self.api = api
        self._queue: asyncio.Queue[tuple[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._uids: dict[str, Ref] = {}
        #: The garbage collector's graph, as the real one keeps it (``garbagecollector/graph.go``, fed by its
        #: informers): owner uid -> the objects whose ownerReferences name it, and each object's owner uids. A
        #: deletion finds its dependents here, not by reading every object (that was 0.3 s a deletion at 60,000
        #: pods).
        self._dependents_of: dict[str, set[Ref]] = {}
        self._owners_of: dict[Ref, frozenset[str]] = {}
        self._backlog: list[tuple[str, Any]] = []
        self._monitor: NodeHealthMonitor | None = None
        api.store.listeners.append(self._observe)

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._queue = asyncio.Queue()
        for item in self._backlog:
            self._queue.put_nowait(item)
        self._backlog.clear()
        self._task = asyncio.create_task(self._run(), name="sim-controller-manager")
        if self._monitor is not None:
            self._monitor.start()

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        if self._monitor is not None:
            await self._monitor.stop()

    def monitor_node_health(self, clock: Clock, settings: NodeMonitorSettings | None = None) -> NodeHealthMonitor:
        """Turn on the node lifecycle controller's health monitoring (see the module docstring), on ``clock``:
        every Node then needs a kubelet that renews its Lease or posts its status, or it goes ``Unknown``."""
        if self._monitor is None:
            self._monitor = NodeHealthMonitor(self, clock, settings or NodeMonitorSettings())
            if self._task is not None:
                self._monitor.start()
        return self._monitor

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
        if self._monitor is not None and (key == _NODES or (key == _LEASES and ref[1] == NODE_LEASE_NAMESPACE)):
            self._monitor.observe(key, ev)
        self._index_owners(ref, frozenset() if ev.type == "DELETED" else frozenset(
            str(owner.get("uid", "")) for owner in meta.get("ownerReferences") or [] if isinstance(owner, dict)))
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

    def _index_owners(self, ref: Ref, owners: frozenset[str]) -> None:
        old = self._owners_of.pop(ref, frozenset())
        if owners:
            self._owners_of[ref] = owners
        for uid in old - owners:
            refs = self._dependents_of.get(uid)
            if refs is not None:
                refs.discard(ref)
                if not refs:
                    del self._dependents_of[uid]
        for uid in owners - old:
            self._dependents_of.setdefault(uid, set()).add(ref)

    def _dependents(self, owner_uid: str) -> list[tuple[StorageKey, JSON]]:
        out = []
        for key, ns, name in sorted(self._dependents_of.get(owner_uid, ()),
                                    key=lambda ref: (ref[0].group, ref[0].plural, ref[1], ref[2])):
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

    def _replace(self, key: StorageKey, stored: JSON, sub: str | None = None) -> None:
        rt = self._type(key)
        meta = stored["metadata"]
        # replace() decodes (copies) its body, so a view of ``stored`` will do.
        self.api.replace(rt, meta.get("namespace", ""), meta["name"], storage_view(rt, stored), sub, self._ctx())

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


# --- node health -------------------------------------------------------------------------------------------
