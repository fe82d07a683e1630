"""Watches what the autoscaler did, from the API objects alone, and writes it into the timeline.

The observer reads ProvisioningRequests, Workloads, Nodes and Events each round and records transitions: a
PR's ``Provisioned``/``Failed`` condition changing, nodes of a managed pool appearing, turning Ready and going
away, and the autoscaler's warning Events (a scale-up rolled back, timed out; a booking revoked). It never
writes to the API server, so it works the same for gangscale and for the baseline autoscaler, and it also
keeps what the report needs about nodes: when each appeared, turned Ready and disappeared, how many
accelerators it had, and the scale-up token it carries (nodes of one token came up as one gang).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from gangscale.kube.resources import EVENTS, NODES, PROVREQS, WORKLOADS
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL
from gangscale.sim.informers import HttpReader, Reader
from gangscale.sim.world import (
    ACCELERATOR_RESOURCES,
    NODES_READY,
    NOT_FOUND,
    PROVISIONED,
    SCALE_DOWN,
    SCALE_UP,
    SCALE_UP_FAILED,
    Timeline,
    owner_of,
    workload_subject,
)

JSON = dict[str, Any]

#: Event reasons (gangscale's, on ProvisioningRequests) worth a timeline line of their own.
WARNINGS_SHOWN = frozenset({"ScaleUpFailed", "ScaleUpTimedOut", "ScaleUpIncomplete", "CapacityRevoked", "Expired"})


@dataclass
class NodeLife:
    name: str
    pool: str
    unit: str
    accelerators: int
    created: float
    ready: float | None = None
    gone: float | None = None
    #: The ``gangscale.io/token`` of the scale-up that made it ("" for a node made otherwise).
    token: str = ""


def accelerators_of(resources: JSON) -> int:
    total = 0
    for key in ACCELERATOR_RESOURCES:
        try:
            total += int(str(resources.get(key, 0)))
        except ValueError:
            continue
    return total


def _about_a_request(event: JSON) -> bool:
    return (event.get("involvedObject") or {}).get("kind") == "ProvisioningRequest"


def _in_a_pool(node: JSON) -> bool:
    return POOL_LABEL in ((node.get("metadata") or {}).get("labels") or {})


def _ready(node: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


class Observer:
    """A read-only component; see the module docstring."""

    name = "observer"

    def __init__(self, http: KubeHTTP, timeline: Timeline, *, reader: Reader | None = None) -> None:
        self.http = http
        #: Where the reads come from: the driver's informer cache, else a LIST per read.
        self.reader = reader or HttpReader(http)
        self.timeline = timeline
        self.nodes: dict[str, NodeLife] = {}
        self._pr_state: dict[str, tuple[str, str]] = {}
        self._events_seen: set[str] = set()
        #: (namespace, PR name) -> the workload subject, as last seen.
        self._subjects: dict[tuple[str | None, str], str] = {}

    def next_wake(self) -> float | None:
        return None

    async def sync(self, now: float) -> bool:
        await self._nodes(now)
        await self._requests(now)
        await self._events(now)
        return False

    async def _events(self, now: float) -> None:
        """The autoscaler's warnings on ProvisioningRequests that no condition shows for long: a scale-up that
        failed and was rolled back (and re-planned at once), one that timed out, a booking revoked."""
        for event in await self.reader.items(EVENTS, _about_a_request):
            name = event["metadata"]["name"]
            if name in self._events_seen or event.get("reason") not in WARNINGS_SHOWN:
                continue
            self._events_seen.add(name)
            involved = event.get("involvedObject") or {}
            ns, pr = involved.get("namespace"), str(involved.get("name", ""))
            subject = self._subjects.get((ns, pr), f"{ns}/{pr}")
            self.timeline.add(now, SCALE_UP_FAILED, subject, f"{event['reason']}: {event.get('message', '')}",
                              reason=event["reason"])

    async def _nodes(self, now: float) -> None:
        items = await self.reader.items(NODES, _in_a_pool)
        seen: set[str] = set()
        created: dict[str, list[str]] = defaultdict(list)
        ready: dict[str, list[str]] = defaultdict(list)
        for node in items:
            meta = node["metadata"]
            name, labels = meta["name"], meta.get("labels") or {}
            seen.add(name)
            life = self.nodes.get(name)
            if life is None or life.gone is not None:
                life = NodeLife(name, labels.get(POOL_LABEL, ""), labels.get(UNIT_LABEL, name),
                                accelerators_of((node.get("status") or {}).get("allocatable") or {}), now,
                                token=labels.get(TOKEN_LABEL, ""))
                self.nodes[name] = life
                created[life.pool].append(name)
            if life.ready is None and _ready(node):
                life.ready = now
                ready[life.pool].append(name)
        gone: dict[str, list[str]] = defaultdict(list)
        for life in self.nodes.values():
            if life.gone is None and life.name not in seen:
                life.gone = now
                gone[life.pool].append(life.name)
        for kind, verb, groups in ((SCALE_UP, "created", created), (NODES_READY, "Ready", ready),
                                   (SCALE_DOWN, "deleted", gone)):
            for pool, names in sorted(groups.items()):
                units = {self.nodes[n].unit for n in names}
                self.timeline.add(now, kind, pool, f"{pool}: {_count(len(units), 'unit')} "
                                  f"({_count(len(names), 'node')}) {verb}", nodes=sorted(names))

    async def _requests(self, now: float) -> None:
        prs = await self.reader.items(PROVREQS)
        if not prs:
            return
        subjects = {}
        for wl in await self.reader.items(WORKLOADS):
            meta = wl["metadata"]
            subjects[(meta.get("namespace"), meta["name"])] = workload_subject(wl)
        for pr in prs:
            meta = pr["metadata"]
            key = f"{meta.get('namespace')}/{meta['name']}"
            owner = owner_of(pr)
            subject = subjects.get((meta.get("namespace"), owner["name"]), key) if owner else key
            self._subjects[(meta.get("namespace"), meta["name"])] = subject
            state = _outcome(pr)
            if state is None or self._pr_state.get(key) == state:
                continue
            self._pr_state[key] = state
            kind = PROVISIONED if state[0] == "Provisioned" else NOT_FOUND
            message = _message(pr, state[0])
            self.timeline.add(now, kind, subject, f"{meta['name']}: {state[0]} ({state[1]}) {message}".rstrip(),
                              name=meta["name"], reason=state[1])


def _outcome(pr: JSON) -> tuple[str, str] | None:
    """The condition worth a timeline line: Failed, then Provisioned=True, then Provisioned=False."""
    conds = {c.get("type"): c for c in (pr.get("status") or {}).get("conditions") or []}
    failed = conds.get("Failed")
    if failed and failed.get("status") == "True":
        return "Failed", str(failed.get("reason", ""))
    prov = conds.get("Provisioned")
    if prov is None:
        return None
    return ("Provisioned" if prov.get("status") == "True" else "NotProvisioned"), str(prov.get("reason", ""))


def _message(pr: JSON, ctype: str) -> str:
    wanted = "Provisioned" if ctype == "NotProvisioned" else ctype
    for cond in (pr.get("status") or {}).get("conditions") or []:
        if cond.get("type") == wanted:
            return str(cond.get("message", ""))
    return ""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
