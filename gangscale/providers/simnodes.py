"""The Node objects the simulated cloud registers: their shape, the API calls on them, and what their kubelets do
there: turn them Ready, renew their node Leases and post their status, as a kubelet would.

Kept apart from :mod:`gangscale.providers.simulated` so that module reads as the cloud's bookkeeping (stock,
tokens, units, rollback) and this one as what a cloud's machines do in the Kubernetes API.

The kubelet's two heartbeats (kubernetes/kubernetes, v1.36 defaults: ``pkg/kubelet/apis/config/v1beta1/defaults.go``
``SetDefaults_KubeletConfiguration``; the Lease logic in ``staging/src/k8s.io/component-helpers/apimachinery/lease``
``controller.sync``; the status logic in ``pkg/kubelet/kubelet_node_status.go`` ``tryUpdateNodeStatus``):

- **Lease** ``kube-node-lease/<node>``: ``holderIdentity`` the node's name, ``leaseDurationSeconds`` 40
  (``nodeLeaseDurationSeconds``), an owner reference to the Node (``pkg/kubelet/util/nodelease.go``
  ``SetNodeOwnerFunc``: apiVersion v1, kind Node, name, uid), ``renewTime`` rewritten every 10 s (a quarter of the
  duration, ``nodeLeaseRenewIntervalFraction``). Like the kubelet, the first renewal GETs the Lease and creates it
  if it is missing; later ones PUT the Lease last written (its resourceVersion) without reading it, and fall back to
  GET (create) on a conflict or a 404.
- **NodeStatus**: every 10 s (``nodeStatusUpdateFrequency``) the kubelet works out its status and posts it if it
  changed (heartbeat times aside) or if ``nodeStatusReportFrequency`` (5 min) passed since it last posted. The
  status is the four conditions a kubelet posts (MemoryPressure, DiskPressure, PIDPressure, Ready), each with a
  fresh ``lastHeartbeatTime``. A real kubelet GETs its Node (from the API server's cache) every 10 s to compare;
  this one compares with what it last posted or read, and reads the Node back (a list by name) only when someone
  else may have written it: after it missed a renewal (its heartbeats stopped, failed, or the clock jumped) and
  after a provider restart. So when nothing changes, a node costs one Lease PUT per 10 s and one status PATCH per
  5 min, and no reads.

All nodes' heartbeats run in one task, on one 10 s grid from the provider's start (the kubelet's jitter of 4 % and
the report frequency's random delay after a change are left out), on the injected clock: tests move it. A write
that fails is tried again at the next tick (a kubelet retries a Lease update up to 5 times at once,
``maxUpdateRetries``, and its status post as often, ``nodeStatusUpdateRetry``; only the Ready post, which a node's
coming up waits for, is retried sooner here: ``SIMULATED_KUBELET`` of :mod:`gangscale.retry`). A node's
heartbeats stop while its name is in its pool's ``PoolFaults.heartbeat_stopped`` (a kubelet that died, or a node
cut off from the API server) and resume when it is taken out.

**Reclaims**: the cloud's side (the notice, the VM's end) is :mod:`gangscale.providers.simreclaims`; the kubelet's is
here: a node whose Node records the VM's end (annotation ``simulated.gangscale.io/reclaim-at``) posts
``Ready=False``/``KubeletNotReady``/``node is shutting down`` from then on, as the kubelet's graceful node shutdown does
(sources in that module).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, detached_context, wait_event
from gangscale.kube.errors import ApiError
from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.model.pod import HOSTNAME_LABEL
from gangscale.model.quantity import format_quantity
from gangscale.model.resources import DEFAULT_MAX_PODS, PODS
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL, Fence, not_leader, unfenced
from gangscale.providers.simfaults import http_status
from gangscale.retry import SIMULATED_KUBELET
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)
NODES_PATH = "/api/v1/nodes"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
#: When the node is due Ready (clock seconds), so that a restarted provider keeps the original schedule.
READY_AT_ANNOTATION = "simulated.gangscale.io/ready-at"
#: ``<index>/<count>``: the unit's place in the obtain that made it, so a restart keeps the unit order.
SLOT_ANNOTATION = "simulated.gangscale.io/slot"
#: When a reclaimed node's VM is gone (clock seconds): set at the reclaim's notice (see the module docstring).
RECLAIM_AT_ANNOTATION = "simulated.gangscale.io/reclaim-at"
#: The Ready message of a kubelet whose node is shutting down (``ShutdownStatus`` of the node shutdown manager).
SHUTTING_DOWN_MESSAGE = "node is shutting down"
#: Seconds per hour: reclaim rates are per node-hour.
PROVIDER_ID_SCHEME = "simulated://"
_LIST_PAGE = 500

#: Where kubelets keep their node Leases (``corev1.NamespaceNodeLease``).
LEASE_NAMESPACE = "kube-node-lease"
LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
#: The kubelet's ``nodeLeaseDurationSeconds`` default.
LEASE_DURATION_SECONDS = 40
#: ``nodeLeaseRenewIntervalFraction`` (0.25) of the lease duration.
RENEW_INTERVAL = LEASE_DURATION_SECONDS * 0.25
#: ``nodeStatusUpdateFrequency``: how often the kubelet works its status out (and posts it if it changed).
STATUS_UPDATE_FREQUENCY = 10.0
#: ``nodeStatusReportFrequency``: the kubelet posts its status at least this often, changed or not.
STATUS_REPORT_FREQUENCY = 300.0
#: Lease and status syncs in flight at once (a thousand kubelets are a thousand clients; one process is not).
_SYNC_CONCURRENCY = 16

#: The conditions a kubelet posts besides Ready, as a healthy node has them (``pkg/kubelet/nodestatus/setters.go``).
PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


class KubeRequests(Protocol):
    """The part of :class:`gangscale.kube.transport.KubeHTTP` the provider uses.

    ``gangscale.providers`` and ``gangscale.kube`` are independent layers (``.importlinter``), so the client
    is described by its shape; errors are read the same way (an ``int`` ``status``, as ``ApiError`` has).
    """

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json") -> dict[str, Any]: ...


def node_body(pool: NodePool, token: str, slot: str, unit_id: str, name: str, ready_at: float,
              now: float) -> JSON:
    """A new, not yet Ready node of ``pool`` (the API server adds the ``not-ready`` taint itself)."""
    quantities = {resource: format_quantity(resource, amount) for resource, amount in pool.allocatable.items()}
    quantities.setdefault(PODS, str(DEFAULT_MAX_PODS))
    labels = {**pool.labels, POOL_LABEL: pool.name, UNIT_LABEL: unit_id, TOKEN_LABEL: token, HOSTNAME_LABEL: name}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {SLOT_ANNOTATION: slot, READY_AT_ANNOTATION: repr(ready_at)},
        },
        "spec": {
            "providerID": f"{PROVIDER_ID_SCHEME}{pool.name}/{unit_id}/{name}",
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints],
        },
        "status": {
            "capacity": dict(quantities),
            "allocatable": dict(quantities),
            "conditions": kubelet_conditions(False, now, {}),
        },
    }


def ready_condition(ready: bool, stamp: str, *, shutting_down: bool = False) -> JSON:
    """The kubelet's Ready condition; a node shutting down is never Ready (``ReadyCondition`` with the shutdown
    manager's error, see the module docstring)."""
    up = ready and not shutting_down
    message = ("kubelet is posting ready status" if up else SHUTTING_DOWN_MESSAGE if shutting_down
               else "node is being provisioned (simulated)")
    return {
        "type": "Ready",
        "status": "True" if up else "False",
        "reason": "KubeletReady" if up else "KubeletNotReady",
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def kubelet_conditions(ready: bool, now: float, current: Mapping[str, JSON], *,
                       shutting_down: bool = False) -> list[JSON]:
    """The four conditions the kubelet posts at ``now``; a condition whose status is the one in ``current`` (the
    node's conditions by type) keeps its ``lastTransitionTime``, as the kubelet's condition setters do."""
    stamp = rfc3339(now)
    out = [{"type": kind, "status": "False", "reason": reason, "message": message, "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp} for kind, reason, message in PRESSURE_CONDITIONS]
    out.append(ready_condition(ready, stamp, shutting_down=shutting_down))
    for condition in out:
        before = current.get(condition["type"]) or {}
        if before.get("status") == condition["status"] and before.get("lastTransitionTime"):
            condition["lastTransitionTime"] = before["lastTransitionTime"]
    return out


def conditions_by_type(node: JSON) -> dict[str, JSON]:
    return {str(c.get("type")): c for c in (node.get("status") or {}).get("conditions") or []}


def status_changed(current: Mapping[str, JSON], posted: Sequence[JSON]) -> bool:
    """Whether ``posted`` says something ``current`` does not, heartbeat times aside (``nodeStatusHasChanged``)."""
    def gist(condition: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(condition.get(key) for key in ("status", "reason", "message"))
    return any(gist(current.get(c["type"]) or {}) != gist(c) for c in posted)


def reclaim_at(node: JSON) -> float | None:
    """When the node's reclaimed VM is gone (clock seconds), if the cloud reclaimed it."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(RECLAIM_AT_ANNOTATION)
    try:
        return None if raw is None else float(raw)
    except ValueError:
        return None


def is_ready(node: JSON) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def slot_of(node: JSON) -> tuple[int, int]:
    """``(index, count)`` from the slot annotation; a node without one sorts last and says nothing of the count."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(SLOT_ANNOTATION, "")
    index, _, count = str(raw).partition("/")
    try:
        return int(index), int(count)
    except ValueError:
        return 1 << 30, 0


def unit_node_names(unit_id: str, nodes_per_unit: int, found: Iterable[str]) -> tuple[str, ...]:
    """The unit's nodes: those that exist plus those its size says it should have."""
    names = set(found) | {f"{unit_id}-{i}" for i in range(nodes_per_unit)}

    def index(name: str) -> tuple[int, str]:
        suffix = name.rpartition("-")[2]
        return (int(suffix), name) if suffix.isdigit() else (1 << 30, name)

    return tuple(sorted(names, key=index))


def micro_time(timestamp: float) -> str:
    """``metav1.MicroTime``, a Lease's ``renewTime``: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(name: str, uid: str, now: float) -> JSON:
    """A node's new Lease, as the kubelet creates it."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [node_owner(name, uid)]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                 "renewTime": micro_time(now)},
    }


def node_owner(name: str, uid: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}


def renewed(lease: JSON, name: str, uid: str, now: float) -> JSON:
    """``lease`` renewed at ``now`` (the kubelet's ``newLease(base)``): the owner reference added if it has none."""
    out = {**lease, "metadata": dict(lease.get("metadata") or {}), "spec": dict(lease.get("spec") or {})}
    out["spec"]["renewTime"] = micro_time(now)
    if not out["metadata"].get("ownerReferences"):
        out["metadata"]["ownerReferences"] = [node_owner(name, uid)]
    return out


class NodeAPI:
    """The calls the cloud and its kubelets make: Nodes (create, list, find one, post status, delete) and Leases."""

    def __init__(self, http: KubeRequests, fence: Fence = unfenced) -> None:
        self.http = http
        #: Asked before each node create and delete (the cloud's changes); a kubelet's writes are not gated.
        self.fence = fence

    def _fenced(self, pool: str) -> None:
        if not self.fence():
            raise not_leader(pool)

    async def create(self, body: JSON) -> JSON:
        """The node as created (its uid is what a Lease's owner reference names)."""
        self._fenced(((body.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL, ""))
        return await self.http.request("POST", NODES_PATH, body=body)

    async def find(self, name: str) -> JSON | None:
        """One node by name, through a list (the RBAC the cloud needs has no ``get``)."""
        page = await self.http.request("GET", NODES_PATH, query={"fieldSelector": f"metadata.name={name}"})
        items = page.get("items") or []
        return items[0] if items else None

    async def list(self, selector: str) -> list[JSON]:
        items: list[JSON] = []
        token: str | None = None
        while True:
            page = await self.http.request("GET", NODES_PATH, query={
                "labelSelector": selector, "limit": _LIST_PAGE, "continue": token})
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    async def annotate(self, name: str, pool: str, annotations: Mapping[str, str]) -> JSON:
        """Set annotations on a node (a change of the cloud's: fenced)."""
        self._fenced(pool)
        return await self.http.request("PATCH", f"{NODES_PATH}/{name}",
                                       body={"metadata": {"annotations": dict(annotations)}},
                                       content_type=STRATEGIC_MERGE_PATCH)

    async def delete(self, name: str) -> int:
        """1 if the node was deleted, 0 if it was already gone."""
        self._fenced("")
        try:
            await self.http.request("DELETE", f"{NODES_PATH}/{name}")
        except Exception as exc:
            if http_status(exc) == 404:
                return 0
            raise
        return 1

    async def post_status(self, name: str, conditions: Sequence[JSON]) -> JSON | None:
        """The kubelet's status update (a strategic merge patch of its conditions); the node as it then is, or None
        if it is gone (released meanwhile: nothing left to report on)."""
        try:
            return await self.http.request("PATCH", f"{NODES_PATH}/{name}/status",
                                           body={"status": {"conditions": [*conditions]}},
                                           content_type=STRATEGIC_MERGE_PATCH)
        except Exception as exc:
            if http_status(exc) != 404:
                raise
            return None

    async def get_lease(self, name: str) -> JSON | None:
        try:
            return await self.http.request("GET", f"{LEASES_PATH}/{name}")
        except Exception as exc:
            if http_status(exc) != 404:
                raise
            return None

    async def create_lease(self, body: JSON) -> JSON:
        return await self.http.request("POST", LEASES_PATH, body=body)

    async def update_lease(self, lease: JSON) -> JSON:
        return await self.http.request("PUT", f"{LEASES_PATH}/{lease['metadata']['name']}", body=lease)


@dataclass
class Kubelet:
    """What one node's kubelet knows: whether its node is up, what it last posted or read, its latest Lease."""

    name: str
    pool: str
    uid: str
    #: The machine came up: the kubelet reports Ready.
    ready: bool
    #: The node's conditions (by type) as the kubelet last posted or read them.
    known: dict[str, JSON] = field(default_factory=dict)
    #: Clock time of its last status post (registration counts).
    reported: float = 0.0
    #: Clock time of its last sign of life: registration (or the provider's start) and every renewal since.
    alive: float = 0.0
    #: The Lease as it last wrote it (``latestLease``); None: not known, GET it first.
    lease: JSON | None = None
    #: It missed a renewal (stopped, failing, or the clock jumped): the lease may have run out meanwhile.
    away: bool = False
    #: Someone else may have written the node's status (the kubelet was away): read it before the next decision.
    stale: bool = False
    #: The cloud reclaims its VM: the kubelet reports ``node is shutting down`` (never Ready) until the VM is gone.
    shutting_down: bool = False

    @property
    def up(self) -> bool:
        """Ready and not shutting down: what a reclaim can take."""
        return self.ready and not self.shutting_down

    def conditions(self, now: float) -> list[JSON]:
        return kubelet_conditions(self.ready, now, self.known, shutting_down=self.shutting_down)


def _nothing() -> None:
    """No one listens."""


class Kubelets:
    """The kubelets of the cloud's live nodes: their Lease renewals and status posts, every 10 s in one task."""

    def __init__(self, clock: Clock, nodes: NodeAPI, stopped: Callable[[Kubelet], bool]) -> None:
        self.clock = clock
        self.nodes = nodes
        #: Whether a kubelet's heartbeats are stopped (a fault knob): it renews nothing and posts nothing.
        self.stopped = stopped
        self._kubelets: dict[str, Kubelet] = {}
        self._origin: float | None = None
        self._task: asyncio.Task[None] | None = None
        #: Set when the first kubelet comes or the last one goes: the loop starts or stops its timer.
        self._emptied_or_filled = asyncio.Event()
        #: The tick the loop waits for (None: no kubelet, no timer).
        self._tick: float | None = None
        self._syncing = 0
        #: Told when a kubelet comes or goes, or its node turns Ready (the reclaim loop's eligible nodes change).
        self.on_change: Callable[[], None] = _nothing

    @property
    def syncing(self) -> bool:
        """A heartbeat round is due or under way (a harness waits until none is)."""
        return self._syncing > 0 or (self._tick is not None and self.clock.now() >= self._tick)

    def __contains__(self, name: str) -> bool:
        return name in self._kubelets

    def get(self, name: str) -> Kubelet | None:
        return self._kubelets.get(name)

    def up(self) -> list[Kubelet]:
        """The kubelets of Ready nodes not shutting down, by name."""
        return sorted((k for k in self._kubelets.values() if k.up), key=lambda kubelet: kubelet.name)

    def start(self) -> None:
        if self._task is None:
            self._origin = self.clock.now()
            # The heartbeats belong to no call of the provider's (they outlive every one): their sleeps are no job's.
            self._task = asyncio.create_task(self._run(), name="simulated-kubelets", context=detached_context())

    async def aclose(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
            self._tick = None  # no round is due any more (a closed provider is quiet)

    def add(self, node: JSON, *, ready: bool, reported: float) -> None:
        """A node registered, or found by a restarted provider (``node`` as it is now, ``reported``: when its status
        was last posted): its kubelet heartbeats from the next tick on."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = meta.get("labels") or {}
        if not self._kubelets:
            self._emptied_or_filled.set()
        self._kubelets[name] = Kubelet(name, str(labels.get(POOL_LABEL, "")), str(meta.get("uid", "")), ready,
                                       conditions_by_type(node), reported, alive=self.clock.now(),
                                       shutting_down=reclaim_at(node) is not None)
        self.on_change()

    def remove(self, names: Iterable[str]) -> None:
        """Nodes deleted: their kubelets stop (the garbage collector deletes their Leases with them)."""
        had = bool(self._kubelets)
        for name in names:
            self._kubelets.pop(name, None)
        if had and not self._kubelets:
            self._emptied_or_filled.set()
        self.on_change()

    async def post_ready(self, name: str) -> None:
        """The machine came up: the kubelet posts Ready now (unless its heartbeats are stopped: then it posts when
        they resume). Errors are the caller's to retry."""
        kubelet = self._kubelets.get(name)
        if kubelet is None:
            return  # released meanwhile
        kubelet.ready = True
        self.on_change()
        if not self.stopped(kubelet):
            await self._post(kubelet, self.clock.now())

    async def shut_down(self, name: str) -> None:
        """The node got a reclaim's notice: its kubelet posts ``node is shutting down`` now, as the shutdown manager
        syncs the status at once (unless its heartbeats are stopped: then when they resume). Errors are the
        caller's to retry."""
        kubelet = self._kubelets.get(name)
        if kubelet is None:
            return  # released meanwhile
        if not kubelet.shutting_down:
            kubelet.shutting_down = True
            self.on_change()
        if not self.stopped(kubelet) and status_changed(kubelet.known, kubelet.conditions(self.clock.now())):
            await self._post(kubelet, self.clock.now())

    # --- the heartbeat loop -----------------------------------------------------------------------------

    def _next_tick(self) -> float:
        assert self._origin is not None
        now = self.clock.now()
        ticks = int((now - self._origin) // RENEW_INTERVAL) + 1
        return self._origin + ticks * RENEW_INTERVAL

    async def _run(self) -> None:
        while True:
            self._emptied_or_filled.clear()
            if not self._kubelets:
                self._tick = None
                await self._emptied_or_filled.wait()
                continue
            self._tick = self._next_tick()
            if await wait_event(self.clock, self._emptied_or_filled, self._tick):
                continue  # the last kubelet went (or the first came): no round, or a new timer
            self._syncing += 1
            try:
                await self._round()
            finally:
                self._syncing -= 1
                self._tick = None

    async def _round(self) -> None:
        now = self.clock.now()
        gate = asyncio.Semaphore(_SYNC_CONCURRENCY)

        async def one(kubelet: Kubelet) -> None:
            async with gate:
                await self._sync(kubelet, now)

        due = [kubelet for kubelet in self._kubelets.values() if not self.stopped(kubelet)]
        await asyncio.gather(*(one(kubelet) for kubelet in due))

    async def _sync(self, kubelet: Kubelet, now: float) -> None:
        if now - kubelet.alive > RENEW_INTERVAL * 1.5:
            kubelet.away = True
        try:
            await self._renew(kubelet, now)
            if kubelet.away:
                # Back after missing renewals: the node lifecycle controller may have written its status meanwhile.
                kubelet.away, kubelet.stale = False, True
        except Exception as exc:
            log.warning("simulated: the kubelet of node %s could not renew its Lease: %s", kubelet.name, exc,
                        exc_info=not isinstance(exc, ApiError))
        if kubelet.name not in self._kubelets:
            return
        try:
            await self._report(kubelet, now)
        except Exception as exc:
            kubelet.stale = True
            log.warning("simulated: the kubelet of node %s could not post its status: %s", kubelet.name, exc,
                        exc_info=not isinstance(exc, ApiError))

    async def _renew(self, kubelet: Kubelet, now: float) -> None:
        """The Lease controller's ``sync``: update the latest Lease; on a conflict or a 404, GET it (create it if
        missing) and update that."""
        if kubelet.lease is not None:
            try:
                kubelet.lease = await self.nodes.update_lease(renewed(kubelet.lease, kubelet.name, kubelet.uid, now))
                kubelet.alive = now
                return
            except Exception as exc:
                if http_status(exc) not in (404, 409):
                    raise
                if http_status(exc) == 404 and await self.nodes.find(kubelet.name) is None:
                    self.remove([kubelet.name])  # its node is gone, and the Lease with it: nothing to renew
                    return
        current = await self.nodes.get_lease(kubelet.name)
        if current is None:
            kubelet.lease = await self.nodes.create_lease(lease_body(kubelet.name, kubelet.uid, now))
        else:
            kubelet.lease = await self.nodes.update_lease(renewed(current, kubelet.name, kubelet.uid, now))
        kubelet.alive = now

    async def _report(self, kubelet: Kubelet, now: float) -> None:
        """The status loop's ``tryUpdateNodeStatus``: post if the status changed or the report is due."""
        if kubelet.stale:
            node = await self.nodes.find(kubelet.name)
            if node is None:
                self.remove([kubelet.name])
                return
            kubelet.known, kubelet.stale = conditions_by_type(node), False
        conditions = kubelet.conditions(now)
        if status_changed(kubelet.known, conditions) or now >= kubelet.reported + STATUS_REPORT_FREQUENCY:
            await self._post(kubelet, now)

    async def _post(self, kubelet: Kubelet, now: float) -> None:
        node = await self.nodes.post_status(kubelet.name, kubelet.conditions(now))
        if node is None:
            self.remove([kubelet.name])
            return
        kubelet.known, kubelet.reported = conditions_by_type(node), now


class ReadyTimers:
    """Per unit, the tasks that mark its nodes Ready at their due time; cancelled on release and on close."""

    def __init__(self, clock: Clock, kubelets: Kubelets) -> None:
        self.clock = clock
        self.kubelets = kubelets
        self._timers: dict[str, set[asyncio.Task[None]]] = {}
        #: Timers that came due and are marking their nodes Ready now (a harness waits for none).
        self.firing = 0

    def arm(self, unit_id: str, names: Sequence[str], ready_at: float) -> None:
        # The obtain that arms the timer returns long before it fires: the timer is not part of its job.
        task = asyncio.create_task(self._become_ready(unit_id, tuple(names), ready_at),
                                   name=f"simulated-ready-{unit_id}", context=detached_context())
        self._timers.setdefault(unit_id, set()).add(task)
        task.add_done_callback(lambda done: self._done(unit_id, done))

    def cancel(self, unit_id: str) -> None:
        for task in self._timers.pop(unit_id, set()):
            task.cancel()

    async def aclose(self) -> None:
        tasks = [task for group in self._timers.values() for task in group]
        self._timers.clear()
        await cancel_and_wait(tasks)

    def _done(self, unit_id: str, task: asyncio.Task[None]) -> None:
        group = self._timers.get(unit_id)
        if group is not None:
            group.discard(task)
            if not group:
                del self._timers[unit_id]

    async def _become_ready(self, unit_id: str, names: tuple[str, ...], ready_at: float) -> None:
        try:
            await self.clock.sleep_until(ready_at)
            self.firing += 1
            try:
                for name in names:
                    await self._post_ready(unit_id, name)
            finally:
                self.firing -= 1
        except asyncio.CancelledError:
            raise
        except Exception:
            # A lost timer leaves nodes NotReady forever; say so loudly rather than die silently.
            log.exception("simulated: could not mark the nodes of unit %s Ready", unit_id)

    async def _post_ready(self, unit_id: str, name: str) -> None:
        """Like a kubelet, keep posting the node's status through API-server trouble (5xx, 429, no connection):
        one failed write must not leave a node NotReady for ever. Other refusals are the end of it."""
        failures = 0
        while True:
            try:
                await self.kubelets.post_ready(name)
                return
            except ApiError as exc:
                if not exc.retryable:
                    log.error("simulated: node %s of unit %s cannot be marked Ready: %s", name, unit_id, exc)
                    return
                failures += 1
                delay = SIMULATED_KUBELET.delay(failures, exc.retry_after)
                log.warning("simulated: could not mark node %s Ready (retrying in %.1fs): %s", name, delay, exc)
                await self.clock.sleep_until(self.clock.now() + delay)
