"""Shared helpers of the §E.4 fault scenarios (``../shared/research/anchors.md`` §E.4): reading outcomes back
from the embedded API server and the simulated cloud's call log, so that every scenario judges by what a
cluster operator could observe, not by the controller's memory.

The cluster itself is ``tests/controller/harness.py`` (``running_cluster``: API server, simulated cloud and the
real controller on one ManualClock); the Kueue scenarios use ``tests/e2e/harness.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.resources import EVENTS, NODES
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.providers.base import TOKEN_LABEL
from gangscale.providers.simfaults import RELEASE, ProviderCall
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.apiserver.faults import LoggedRequest
from gangscale.timefmt import parse_rfc3339
from tests.conftest import wait_for
from tests.controller.harness import NS, Cluster, record, wait_record  # noqa: F401  (re-exported)

JSON = dict[str, Any]

GPU8 = {"nvidia.com/gpu": "8"}
#: One a3-highgpu-8g pool with room for every gang of a scenario (8 nodes).
GPU_POOL = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 8
    simulated: {provisionSeconds: 30}
"""
#: The simulated cloud's client and the controller's, as named in the API server's request log.
CLOUD_AGENT = "gangscale-simulated-cloud"
CONTROLLER_AGENT = "gangscale"
WRITES = ("create", "update", "patch", "delete", "deletecollection")


async def gpu_template(cl: Cluster, name: str = "gpu8", *, pool: str | None = None) -> JSON:
    """One pod that fills one a3-highgpu-8g node (8 GPUs): pods and nodes are easy to count."""
    selector = {"gangscale.io/node-pool": pool} if pool else None
    return await cl.template(name, {"cpu": "4"}, limits=GPU8, selector=selector)


async def events(cl: Cluster, name: str, reason: str | None = None) -> list[JSON]:
    """Events about the object ``name``, oldest first (optionally only those with ``reason``)."""
    items = (await cl.http.request("GET", EVENTS.path(NS))).get("items") or []
    mine = [e for e in items if (e.get("involvedObject") or {}).get("name") == name
            and (reason is None or e.get("reason") == reason)]
    return sorted(mine, key=lambda e: int(e["metadata"]["resourceVersion"]))


async def wait_event(cl: Cluster, name: str, reason: str) -> JSON:
    async def check() -> JSON | None:
        found = await events(cl, name, reason)
        return found[0] if found else None
    got: JSON = await wait_for(check)
    return got


async def node_names(cl: Cluster, pool: str | None = None) -> set[str]:
    return {n["metadata"]["name"] for n in await cl.nodes(pool)}


def releases(cl: Cluster) -> list[ProviderCall]:
    return [call for p in cl.history for call in p.calls if call.operation == RELEASE]


def nodes_created(cl: Cluster) -> int:
    """Node objects every obtain of every provider instance created (rolled-back ones included)."""
    return sum(call.nodes_created for call in cl.obtains())


def logged(cl: Cluster | EmbeddedAPIServer, *, verb: str, resource: str, user_agent: str | None = None,
           subresource: str | None = "*", since: float | None = None) -> list[LoggedRequest]:
    """Requests in the API server's log (a request is logged when it ends), by RBAC verb (``*``: any write) and
    resource; ``user_agent`` is a glob of the client's User-Agent, ``since`` a clock time."""
    server = cl if isinstance(cl, EmbeddedAPIServer) else cl.server
    verbs = WRITES if verb == "*" else (verb,)
    return [r for r in server.requests
            if r.verb in verbs and r.resource == resource
            and (user_agent is None or fnmatch.fnmatchcase(r.user_agent, user_agent))
            and subresource in ("*", r.subresource)
            and (since is None or r.time.timestamp() >= since)]


def backed_off_until(cl: Cluster, pool: str) -> float | None:
    """Until when ``pool`` is backed off, as ``/debug/plans`` shows it (None: not backed off)."""
    entry = cl.ctl.debug_plans()["backedOffPools"].get(pool)
    return None if entry is None else parse_rfc3339(entry["until"])


@dataclass
class NodeLog:
    """Every Node that ever existed, as a watch saw it: names created per token, and the most at once."""

    created: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)
    most: int = 0

    def on_event(self, event: ReflectorEvent) -> None:
        meta = event.obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if event.type == "ADDED":
            self.created.append((name, str((meta.get("labels") or {}).get(TOKEN_LABEL, ""))))
            self.live.add(name)
            self.most = max(self.most, len(self.live))
        elif event.type == "DELETED":
            self.deleted.append(name)
            self.live.discard(name)

    def of_token(self, token: str) -> list[str]:
        return [name for name, t in self.created if t == token]


@dataclass
class History:
    """Every version of every object of one resource a watch saw: (event type, object), in order."""

    seen: list[tuple[str, JSON]] = field(default_factory=list)

    def on_event(self, event: ReflectorEvent) -> None:
        self.seen.append((event.type, event.obj))

    def versions(self, name: str) -> list[JSON]:
        return [obj for _, obj in self.seen if obj["metadata"]["name"] == name]

    def uids(self, name: str) -> set[str]:
        return {obj["metadata"]["uid"] for obj in self.versions(name)}

    def added(self, name: str) -> int:
        return sum(1 for etype, obj in self.seen if etype == "ADDED" and obj["metadata"]["name"] == name)


@contextlib.asynccontextmanager
async def watching(http: KubeHTTP, resource: Resource) -> AsyncIterator[History]:
    """A test's own watch (the production reflector) that keeps every version it sees."""
    found = History()
    async with _watch(http, resource, found.on_event):
        yield found


@contextlib.asynccontextmanager
async def watching_nodes(http: KubeHTTP) -> AsyncIterator[NodeLog]:
    """A test's own watch on Nodes, so that nodes that came and went are counted."""
    found = NodeLog()
    async with _watch(http, NODES, found.on_event):
        yield found


@contextlib.asynccontextmanager
async def _watch(http: KubeHTTP, resource: Resource, handler: Callable[[ReflectorEvent], None]) -> AsyncIterator[None]:
    reflector = Reflector(http, resource)
    reflector.add_handler(handler)
    task = asyncio.create_task(reflector.run(), name=f"scenario watch of {resource.plural}")
    try:
        await wait_for(reflector.synced.is_set)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
