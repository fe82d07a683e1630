"""The Node objects the simulated cloud registers: their shape, the API calls on them, and the timers that
mark them Ready as a kubelet would.

Kept apart from :mod:`gangscale.providers.simulated` so that module reads as the cloud's bookkeeping (stock,
tokens, units, rollback) and this one as what a cloud's machines do in the Kubernetes API.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, detached_context
from gangscale.kube.errors import ApiError
from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.model.pod import HOSTNAME_LABEL
from gangscale.model.quantity import format_quantity
from gangscale.model.resources import DEFAULT_MAX_PODS, PODS
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL, Fence, not_leader, unfenced
from gangscale.providers.simfaults import http_status
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)
#: The simulated kubelet's status retries: from half a second, doubling, to the 10 s of a kubelet's status loop
#: (``nodeStatusUpdateFrequency``).
STATUS_RETRY = 0.5
STATUS_RETRY_MAX = 10.0

NODES_PATH = "/api/v1/nodes"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
#: When the node is due Ready (clock seconds), so that a restarted provider keeps the original schedule.
READY_AT_ANNOTATION = "simulated.gangscale.io/ready-at"
#: ``<index>/<count>``: the unit's place in the obtain that made it, so a restart keeps the unit order.
SLOT_ANNOTATION = "simulated.gangscale.io/slot"
PROVIDER_ID_SCHEME = "simulated://"
_LIST_PAGE = 500


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
            "conditions": [ready_condition(False, rfc3339(now))],
        },
    }


def ready_condition(ready: bool, stamp: str) -> JSON:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "node is being provisioned (simulated)",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


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


class NodeAPI:
    """The Node calls the cloud makes: create, list, find one, mark Ready, delete."""

    def __init__(self, http: KubeRequests, fence: Fence = unfenced) -> None:
        self.http = http
        #: Asked before each node create and delete (the cloud's changes); a kubelet's status update is not gated.
        self.fence = fence

    def _fenced(self, pool: str) -> None:
        if not self.fence():
            raise not_leader(pool)

    async def create(self, body: JSON) -> None:
        self._fenced(((body.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL, ""))
        await self.http.request("POST", NODES_PATH, body=body)

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

    async def mark_ready(self, name: str, now: float) -> None:
        """The kubelet's status update; a node released meanwhile has nothing left to make Ready."""
        body = {"status": {"conditions": [ready_condition(True, rfc3339(now))]}}
        try:
            await self.http.request("PATCH", f"{NODES_PATH}/{name}/status", body=body,
                                    content_type=STRATEGIC_MERGE_PATCH)
        except Exception as exc:
            if http_status(exc) != 404:
                raise


class ReadyTimers:
    """Per unit, the tasks that mark its nodes Ready at their due time; cancelled on release and on close."""

    def __init__(self, clock: Clock, nodes: NodeAPI) -> None:
        self.clock = clock
        self.nodes = nodes
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
                await self.nodes.mark_ready(name, self.clock.now())
                return
            except ApiError as exc:
                if not exc.retryable:
                    log.error("simulated: node %s of unit %s cannot be marked Ready: %s", name, unit_id, exc)
                    return
                failures += 1
                delay = max(min(STATUS_RETRY_MAX, STATUS_RETRY * 2 ** (failures - 1)), exc.retry_after or 0.0)
                log.warning("simulated: could not mark node %s Ready (retrying in %.1fs): %s", name, delay, exc)
                await self.clock.sleep_until(self.clock.now() + delay)
