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
import math
from dataclasses import dataclass
from typing import Any

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, wait_event
from gangscale.sim.apiserver.api import ObjectAPI, WriteContext
from gangscale.sim.apiserver.conversion import storage_view
from gangscale.sim.apiserver.deletion import DeleteOptions
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Event
from gangscale.sim.apiserver.strategies import NOT_READY_TAINT, UNREACHABLE_TAINT
from gangscale.timefmt import parse_rfc3339, rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)
MANAGER = "kube-controller-manager"
_NODES = StorageKey("", "nodes")
_NAMESPACES = StorageKey("", "namespaces")
_LEASES = StorageKey("coordination.k8s.io", "leases")
#: Where kubelets keep their node Leases (``corev1.NamespaceNodeLease``).
NODE_LEASE_NAMESPACE = "kube-node-lease"
#: The conditions the controller turns ``Unknown`` (``NodeNetworkUnavailable`` is left alone, as upstream).
HEALTH_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
Ref = tuple[StorageKey, str, str]


@dataclass(frozen=True)
class NodeMonitorSettings:
    """kube-controller-manager's node lifecycle flags, at their v1.36 defaults."""

    #: ``--node-monitor-grace-period``: how long a Node may go without a heartbeat before it is ``Unknown``.
    grace_period: float = 50.0
    #: ``--node-startup-grace-period``: the same, for a Node that never posted a Ready condition.
    startup_grace_period: float = 60.0
    #: ``--node-monitor-period``: how often the controller looks.
    period: float = 5.0


@dataclass
class _Health:
    """What the controller last saw of a Node's heartbeats (upstream's ``nodeHealthData``)."""

    #: Clock time of the last heartbeat seen (a new ``lastHeartbeatTime`` or ``renewTime``).
    probe: float
    #: The Ready condition's ``lastHeartbeatTime`` and status as last seen (None: no Ready condition yet).
    heartbeat: str | None = None
    ready: str | None = None
    #: The Lease's ``renewTime`` as last seen (clock seconds).
    renew: float | None = None


class ControllerManager:
    def __init__(self, api: ObjectAPI) -> None:
        self.api = api
        self._queue: asyncio.Queue[tuple[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._uids: dict[str, Ref] = {}
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


def _ready(node: JSON) -> JSON | None:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)


class NodeHealthMonitor:
    """The node lifecycle controller's health monitoring (``monitorNodeHealth``), on a clock.

    Heartbeats are noted as the store commits them (``observe``); the monitor wakes only at a pass that has
    something to do: the first pass (on the ``period`` grid from its start) after some Node's grace period would
    run out, or after a Node's Ready condition changed (its NoExecute taint follows). So an idle cluster whose
    kubelets heartbeat costs a wake-up per grace period, not one per period.
    """

    def __init__(self, manager: ControllerManager, clock: Clock, settings: NodeMonitorSettings) -> None:
        self.manager = manager
        self.clock = clock
        self.settings = settings
        self._origin = clock.now()
        self._health: dict[str, _Health] = {}
        #: Nodes whose Ready condition changed since the last pass: their NoExecute taints are synced at the next.
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The pass the monitor waits for (None: nothing due).
        self._due: float | None = None
        #: Monitor passes run so far.
        self.passes = 0
        for node in list(manager.api.store.items(_NODES, "")):
            self._node(node)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="sim-node-lifecycle-controller")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    @property
    def pending(self) -> bool:
        """A pass is due and has not run yet (a harness that moved the clock waits until none is)."""
        return self._task is not None and self._due is not None and self.clock.now() >= self._due

    # --- heartbeats, as the store commits them (synchronous) -----------------------------------------

    def observe(self, key: StorageKey, ev: Event) -> None:
        name = (ev.obj.get("metadata") or {}).get("name", "")
        if key == _NODES:
            if ev.type == "DELETED":
                self._health.pop(name, None)
                self._dirty.discard(name)
            else:
                self._node(ev.obj)
        elif ev.type != "DELETED":
            health = self._health.get(name)
            renew = parse_rfc3339((ev.obj.get("spec") or {}).get("renewTime"))
            if health is not None and renew is not None and (health.renew is None or renew > health.renew):
                health.renew, health.probe = renew, self.clock.now()

    def _node(self, node: JSON) -> None:
        name = node["metadata"]["name"]
        ready = _ready(node)
        health = self._health.get(name)
        now = self.clock.now()
        if health is None:
            if ready is None:  # never posted: measured from its creation, with the startup grace period
                created = parse_rfc3339(node["metadata"].get("creationTimestamp"))
                health = _Health(now if created is None else min(created, now))
            else:
                health = _Health(now, ready.get("lastHeartbeatTime"), ready.get("status"))
            self._health[name] = health
            self._dirty.add(name)
            self._wake.set()
            return
        if ready is None:
            return
        if health.ready is None or ready.get("lastHeartbeatTime") != health.heartbeat:
            health.probe = now
        health.heartbeat = ready.get("lastHeartbeatTime")
        if ready.get("status") != health.ready:
            health.ready = ready.get("status")
            self._dirty.add(name)
            self._wake.set()

    # --- passes --------------------------------------------------------------------------------------

    def _grace(self, health: _Health) -> float:
        return self.settings.startup_grace_period if health.ready is None else self.settings.grace_period

    def _pass_after(self, when: float) -> float:
        """The first pass strictly after ``when``."""
        period = self.settings.period
        return self._origin + period * (math.floor((when - self._origin) / period) + 1)

    def _next_pass(self) -> float | None:
        due = [self._pass_after(h.probe + self._grace(h)) for h in self._health.values() if h.ready != "Unknown"]
        if self._dirty:
            due.append(0.0)
        # Never a pass in the past (a write that failed is tried again at the next one).
        return max(min(due), self._pass_after(self.clock.now())) if due else None

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self._due = due = self._next_pass()
            if due is None:
                await self._wake.wait()
                continue
            if await wait_event(self.clock, self._wake, due):
                continue  # something new: work the next pass out again
            try:
                self.run_pass()
            except Exception:
                log.exception("node lifecycle controller: a monitor pass failed")
            finally:
                self._due = None

    def run_pass(self) -> None:
        """One ``monitorNodeHealth`` pass at the clock's time."""
        now = self.clock.now()
        self.passes += 1
        # NoExecute taints follow the Ready condition as it was before this pass (``processTaintBaseEviction``).
        dirty, self._dirty = sorted(self._dirty), set()
        for name in dirty:
            try:
                self._sync_no_execute(name, now)
            except StatusError as exc:
                log.debug("node lifecycle controller: tainting node %s: %s", name, exc.message)
        for name, health in list(self._health.items()):
            if health.ready != "Unknown" and now > health.probe + self._grace(health):
                try:
                    self._mark_unknown(name, health, now)
                except StatusError as exc:
                    log.debug("node lifecycle controller: updating node %s: %s", name, exc.message)

    def _mark_unknown(self, name: str, health: _Health, now: float) -> None:
        """``tryUpdateNodeHealth`` past the grace period: the kubelet's conditions become ``Unknown``."""
        node = self.manager.api.store.get(_NODES, "", name)
        if node is None:
            return
        new = json_copy(node)
        conditions = new.setdefault("status", {}).setdefault("conditions", [])
        stamp = rfc3339(now)
        for kind in HEALTH_CONDITIONS:
            current = next((c for c in conditions if c.get("type") == kind), None)
            if current is None:
                conditions.append({"type": kind, "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                                   "message": "Kubelet never posted node status.",
                                   "lastHeartbeatTime": new["metadata"].get("creationTimestamp"),
                                   "lastTransitionTime": stamp})
            elif current.get("status") != "Unknown":
                current.update(status="Unknown", reason="NodeStatusUnknown",
                               message="Kubelet stopped posting node status.", lastTransitionTime=stamp)
        ready = _ready(new) or {}
        # Our own write is no heartbeat: note what it leaves first, so that its commit does not look like one.
        before = health.heartbeat, health.ready
        health.heartbeat, health.ready = ready.get("lastHeartbeatTime"), "Unknown"
        try:
            self.manager._replace(_NODES, new, "status")
        except StatusError:
            health.heartbeat, health.ready = before  # not written: the next pass tries again
            raise
        self._dirty.add(name)
        self._wake.set()

    def _sync_no_execute(self, name: str, now: float) -> None:
        node = self.manager.api.store.get(_NODES, "", name)
        ready = _ready(node) if node is not None else None
        if node is None or ready is None:
            return
        wanted = {"False": NOT_READY_TAINT, "Unknown": UNREACHABLE_TAINT}.get(str(ready.get("status")))
        taints = list((node.get("spec") or {}).get("taints") or [])
        managed = {NOT_READY_TAINT, UNREACHABLE_TAINT}
        have = [t.get("key") for t in taints if t.get("key") in managed and t.get("effect") == "NoExecute"]
        if have == ([wanted] if wanted else []):
            return
        keep = [t for t in taints if not (t.get("key") in managed and t.get("effect") == "NoExecute")]
        if wanted:
            keep.append({"key": wanted, "effect": "NoExecute", "timeAdded": rfc3339(now)})
        new = json_copy(node)
        new.setdefault("spec", {})["taints"] = keep
        if not keep:
            new["spec"].pop("taints")
        self.manager._replace(_NODES, new)
