"""The node lifecycle controller's health monitoring (kube-controller-manager ``monitorNodeHealth``), on a clock:
a Node whose kubelet renews no Lease and posts no status for the grace period goes ``Unknown`` with the
``unreachable`` taints. Turned on with ``ControllerManager.monitor_node_health``; the rules and their upstream
sources are in :mod:`gangscale.sim.apiserver.controllers`' docstring.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, wait_event
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Event
from gangscale.sim.apiserver.strategies import NOT_READY_TAINT, UNREACHABLE_TAINT
from gangscale.timefmt import parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from gangscale.sim.apiserver.controllers import ControllerManager

JSON = dict[str, Any]
log = logging.getLogger(__name__)
_NODES = StorageKey("", "nodes")
_LEASES = StorageKey("coordination.k8s.io", "leases")
#: Where kubelets keep their node Leases (``corev1.NamespaceNodeLease``).
NODE_LEASE_NAMESPACE = "kube-node-lease"
#: The conditions the controller turns ``Unknown`` (``NodeNetworkUnavailable`` is left alone, as upstream).
HEALTH_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")


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
