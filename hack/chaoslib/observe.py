"""What a chaos run saw: every Node, ProvisioningRequest and Lease event from the first moment (watched with the
production reflector, under a user agent no injected fault matches), and at the end the API server's request log.

Events carry the object's ``resourceVersion``. The embedded API server, like etcd, gives every write one number
from a single increasing sequence, so merging the node and request events by it gives the order in which the
writes happened: what the nodes looked like at the moment a request was marked ``Provisioned=True`` is exact, not
a guess from arrival times. A watch that had to re-list (``lists`` > 1) may have missed events; the run then
says its history is incomplete instead of judging from it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gangscale.kube.client import make_http
from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.resources import LEASES, NODES, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL
from gangscale.providers.base import TOKEN_LABEL

JSON = dict[str, Any]
NS = "default"
#: The first 36 characters of a scale-up token are the request's uid (``gangscale.controller.record.step_token``).
UID_LENGTH = 36


def rv(obj: JSON) -> int:
    return int((obj.get("metadata") or {}).get("resourceVersion") or 0)


def condition(obj: JSON, ctype: str) -> JSON | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def is_true(obj: JSON, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def node_ready(node: JSON) -> bool:
    return is_true(node, "Ready")


def node_pool(node: JSON) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL, ""))


def gang_uid(node: JSON) -> str:
    """The uid of the request whose scale-up made the node ("" for a node gangscale did not make)."""
    return str(((node.get("metadata") or {}).get("labels") or {}).get(TOKEN_LABEL, ""))[:UID_LENGTH]


@dataclass(frozen=True)
class Seen:
    """One watch event, reduced to what the checks read."""

    rv: int
    kind: str  # node | request | lease
    type: str  # ADDED | MODIFIED | DELETED
    name: str
    uid: str
    #: node: Ready; request: Provisioned=True.
    flag: bool
    #: node: the uid of the request that made it; lease: the holder.
    owner: str = ""
    #: node: its pool; request: the reason of its Provisioned condition.
    detail: str = ""


@dataclass
class History:
    events: list[Seen] = field(default_factory=list)
    reflectors: list[Reflector] = field(default_factory=list)

    def on_node(self, event: ReflectorEvent) -> None:
        obj = event.obj
        self.events.append(Seen(rv(obj), "node", event.type, obj["metadata"]["name"],
                                obj["metadata"].get("uid", ""), node_ready(obj), gang_uid(obj), node_pool(obj)))

    def on_request(self, event: ReflectorEvent) -> None:
        obj = event.obj
        self.events.append(Seen(rv(obj), "request", event.type, obj["metadata"]["name"],
                                obj["metadata"].get("uid", ""), is_true(obj, "Provisioned"),
                                detail=str((condition(obj, "Provisioned") or {}).get("reason", ""))))

    def on_lease(self, event: ReflectorEvent) -> None:
        obj = event.obj
        self.events.append(Seen(rv(obj), "lease", event.type, obj["metadata"]["name"], "", False,
                                str((obj.get("spec") or {}).get("holderIdentity") or "")))

    @property
    def complete(self) -> bool:
        return all(r.lists == 1 for r in self.reflectors)

    def ordered(self) -> list[Seen]:
        """Every event in the order the writes happened (stable for equal versions: a deletion's event may carry
        the version of the object's last write)."""
        return sorted(self.events, key=lambda e: e.rv)

    def leaders(self) -> list[str]:
        """The Lease's holders in order (consecutive repeats folded)."""
        out: list[str] = []
        for event in self.ordered():
            if event.kind == "lease" and event.owner and (not out or out[-1] != event.owner):
                out.append(event.owner)
        return out

    def holder(self) -> str:
        leaders = [e for e in self.ordered() if e.kind == "lease"]
        return leaders[-1].owner if leaders else ""


@contextlib.asynccontextmanager
async def watching(kubeconfig: str) -> AsyncIterator[tuple[KubeHTTP, History]]:
    """A client for the harness and a history fed by watches started before anything else happens."""
    http = await make_http(kubeconfig, user_agent="chaos-harness")
    history = History()
    tasks: list[asyncio.Task[None]] = []
    try:
        for resource, handler, namespace in ((NODES, history.on_node, None), (PROVREQS, history.on_request, NS),
                                             (LEASES, history.on_lease, NS)):
            reflector = Reflector(http, resource, namespace=namespace)
            reflector.add_handler(handler)
            history.reflectors.append(reflector)
            tasks.append(asyncio.create_task(reflector.run(), name=f"chaos watch {resource.plural}"))
        await asyncio.wait_for(asyncio.gather(*(r.synced.wait() for r in history.reflectors)), 30)
        yield http, history
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await http.api_client.close()


async def request_log(http: KubeHTTP) -> list[JSON]:
    out: list[JSON] = []
    since = 0
    while True:
        page = await http.request("GET", "/_sim/requests", query={"since": since})
        out.extend(page["requests"])
        # The log counts this very request (the page leaves ``/_sim/`` ones out), so ``next`` always moves on: the
        # end is the first page with nothing in it.
        if not page["requests"] or page["next"] == since:
            return out
        since = page["next"]
