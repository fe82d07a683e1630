"""What a chaos run saw: every Node, ProvisioningRequest and Lease event from the first moment (watched with the
production reflector, under a user agent no injected fault matches), and at the end the API server's request log.

Events carry the object's ``resourceVersion``. The embedded API server, like etcd, gives every write one number
from a single increasing sequence, so merging the node and request events by it gives the order in which the
writes happened: what the nodes looked like at the moment a request was marked ``Provisioned=True`` is exact, not
a guess from arrival times. A watch that had to re-list (``lists`` > 1) may have missed events; the run then
says its history is incomplete instead of judging from it.

A node counts for the request whose scale-up made it: by its ``gangscale.io/token`` label (the simulated cloud's
nodes, the gke provider's slices), else by the *claim* (``gangscale.providers.gke.names``) its name or its resize
request label carries — a VM the gke provider added to an existing node pool is ``gs-<claim>-<i>`` (``resize``), or
carries ``autoscaling.gke.io/provisioning-request: gs-<claim>`` (``flex-start``) — matched against the tokens the
requests recorded (``status.provisioningClassDetails["gangscale.io/scale-up"]``, ``steps[].token``). Nodes are
attributed when the history is read, not when their event arrives: the node and request watches are separate
streams, so a node may be seen before the request write that recorded its token (which came first).

A node the simulated cloud reclaimed (a spot VM taken back) carries ``simulated.gangscale.io/reclaim-at`` from its
notice on (``gangscale.providers.simreclaims``); a request's ``CapacityRevoked=True`` is kept with its message, which
names the nodes it lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gangscale.kube.client import make_http
from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.resources import LEASES, NODES, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL
from gangscale.providers.base import TOKEN_LABEL
from gangscale.providers.gke import names as gke_names
from gangscale.providers.simnodes import RECLAIM_AT_ANNOTATION
from gangscale.sim.aws.nodes import SPOT_ITN_TAINT

JSON = dict[str, Any]
#: The token of the scale-up that made a node, as the cloud recorded it ("" when it made none): an EKS Node carries
#: only its launch template's labels, so an aws run reads the token from the instance's tag (``chaoslib.aws``).
NodeTokens = Callable[[JSON], str]
NS = "default"
#: The first 36 characters of a scale-up token are the request's uid (``gangscale.controller.logic.record.step_token``).
UID_LENGTH = 36
#: Where gangscale records a scale-up's steps and their tokens on the request (``gangscale.controller.logic.record``).
SCALE_UP_DETAIL = "gangscale.io/scale-up"
#: GKE's label naming the MIG resize request a VM came from (``flex-start`` pools).
RESIZE_REQUEST_LABEL = "autoscaling.gke.io/provisioning-request"


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


def node_reclaimed(node: JSON) -> bool:
    """The cloud gave the node's instance its interruption notice: the simulated cloud's annotation, or (aws) the
    taint AWS Node Termination Handler puts on it (``gangscale.sim.aws.nodes``)."""
    if RECLAIM_AT_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {}):
        return True
    return any(t.get("key") == SPOT_ITN_TAINT for t in (node.get("spec") or {}).get("taints") or [])


def node_pool(node: JSON) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL, ""))


def gang_uid(node: JSON, claims: Mapping[str, str] | None = None, tokens: NodeTokens | None = None) -> str:
    """The uid of the request whose scale-up made the node ("" for a node gangscale did not make, or one whose
    claim ``claims`` (claim -> request uid, :func:`request_claims`) does not know). ``tokens``: the cloud's record
    of a node's token, for nodes that carry none (aws)."""
    token = str(((node.get("metadata") or {}).get("labels") or {}).get(TOKEN_LABEL, "")) or \
        (tokens(node) if tokens is not None else "")
    if token:
        return token[:UID_LENGTH]
    claim = node_claim(node)
    return (claims or {}).get(claim, "") if claim else ""


def node_claim(node: JSON) -> str:
    """The claim of the token that made a VM the gke provider added to an existing node pool: in its name
    (``resize``: ``gs-<claim>-<i>``) or its resize request label (``flex-start``: ``gs-<claim>``); "" for others."""
    meta = node.get("metadata") or {}
    request = str((meta.get("labels") or {}).get(RESIZE_REQUEST_LABEL, ""))
    return gke_names.claim_of(str(meta.get("name", ""))) or gke_names.claim_of_request(request) or ""


def recorded_tokens(request: JSON) -> list[str]:
    """The tokens of the scale-up a request records (none when it records none, or what it records is not JSON)."""
    detail = ((request.get("status") or {}).get("provisioningClassDetails") or {}).get(SCALE_UP_DETAIL)
    try:
        steps = json.loads(str(detail))["steps"] if detail else []
        return [str(step["token"]) for step in steps if step.get("token")]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def request_claims(requests: Iterable[JSON]) -> dict[str, str]:
    """claim -> the uid of the request that recorded a token with that claim."""
    return {gke_names.claim(token): str(request["metadata"].get("uid", ""))
            for request in requests for token in recorded_tokens(request)}


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
    #: node without a token label: the claim its name or resize request label carries (see :func:`node_claim`).
    claim: str = ""
    #: node: the cloud reclaimed it (its notice was given).
    reclaimed: bool = False
    #: request: the message of its ``CapacityRevoked=True`` (None: not revoked).
    revoked: str | None = None


@dataclass
class History:
    events: list[Seen] = field(default_factory=list)
    reflectors: list[Reflector] = field(default_factory=list)
    #: claim -> request uid, from every token a request has recorded (:func:`request_claims`).
    claims: dict[str, str] = field(default_factory=dict)
    #: aws runs: the cloud's record of a node's token (its instance's tag), read when the node's event arrives.
    tokens: NodeTokens | None = None
    #: The tokens (simulated runs: the nodes' ``gangscale.io/token`` labels) of the nodes the cloud reclaimed.
    reclaimed_tokens: set[str] = field(default_factory=set)

    def on_node(self, event: ReflectorEvent) -> None:
        obj = event.obj
        if node_reclaimed(obj) and (token := ((obj.get("metadata") or {}).get("labels") or {}).get(TOKEN_LABEL)):
            # A restarted leader that finds none of a token's units left revokes naming the token, not the nodes it
            # never saw (chaos seed 19026): the token is how the end check knows the revocation was the cloud's doing.
            self.reclaimed_tokens.add(str(token))
        owner = gang_uid(obj, tokens=self.tokens)
        self.events.append(Seen(rv(obj), "node", event.type, obj["metadata"]["name"],
                                obj["metadata"].get("uid", ""), node_ready(obj), owner, node_pool(obj),
                                "" if owner else node_claim(obj), reclaimed=node_reclaimed(obj)))

    def on_request(self, event: ReflectorEvent) -> None:
        obj = event.obj
        self.claims.update(request_claims([obj]))
        revoked = condition(obj, "CapacityRevoked")
        self.events.append(Seen(rv(obj), "request", event.type, obj["metadata"]["name"],
                                obj["metadata"].get("uid", ""), is_true(obj, "Provisioned"),
                                detail=str((condition(obj, "Provisioned") or {}).get("reason", "")),
                                revoked=str(revoked.get("message", "")) if is_true(obj, "CapacityRevoked") and revoked
                                else None))

    def on_lease(self, event: ReflectorEvent) -> None:
        obj = event.obj
        self.events.append(Seen(rv(obj), "lease", event.type, obj["metadata"]["name"], "", False,
                                str((obj.get("spec") or {}).get("holderIdentity") or "")))

    def reclaimed_pools(self) -> set[str]:
        """The pools the cloud reclaimed nodes of during the run."""
        return {e.detail for e in self.events if e.kind == "node" and e.reclaimed and e.detail}

    def reclaimed(self) -> set[str]:
        """The nodes the cloud reclaimed during the run, and the tokens that made them (where nodes carry them)."""
        return {e.name for e in self.events if e.kind == "node" and e.reclaimed} | self.reclaimed_tokens

    @property
    def complete(self) -> bool:
        return all(r.lists == 1 for r in self.reflectors)

    def ordered(self) -> list[Seen]:
        """Every event in the order the writes happened (stable for equal versions: a deletion's event may carry
        the version of the object's last write), each node attributed to its request (by claim where it has no
        token label)."""
        return sorted((self._attributed(e) for e in self.events), key=lambda e: e.rv)

    def _attributed(self, event: Seen) -> Seen:
        if event.kind != "node" or event.owner or not event.claim or event.claim not in self.claims:
            return event
        return replace(event, owner=self.claims[event.claim])

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
