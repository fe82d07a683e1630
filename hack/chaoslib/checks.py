"""The invariants a chaos run is judged by. Each check returns the violations it found, as sentences.

During the run (from the watch history, in write order):
- no request is marked ``Provisioned=True`` for new nodes while any of them is not Ready (a plan may add free
  nodes that exist to its new ones: those are judged with the pool);
- at no moment do a pool's ``Provisioned=True`` requests need more nodes than are Ready in it (what Kueue was
  told exists, exists: new nodes, or free ones found, are not scaled down or promised twice);
- never more nodes alive for a request than it needs.

From the API server's request log: no process changed anything (a successful status write, event, node
create or delete by its cloud; a refused request changed nothing) outside its leadership, i.e. after another
replica had written the Lease since its own last successful Lease write, or at a moment when that write was
more than a lease duration old. The second has one known exception, counted apart: a change the process made
while it still held the lease, that reached the server late because the harness paused the process (SIGSTOP)
in between — a change whose lateness the pauses of its maker explain. That is the fencing gap every
lease-based controller has (the fence is checked, then the process stops before its request leaves); it is
harmless as long as no other replica took the lease meanwhile, which the first rule still judges without
exception.

At the end, once the faults stopped and things settled: every live request is ``Provisioned=True``; one
provisioned with new nodes has them all Ready, and no more than it needs; every pool holds exactly the nodes its
live requests need, all Ready (nothing left that nobody needs). From the logs: no traceback, and no process
exited except when the harness killed or stopped it or when it lost the lease.

Spot reclaims (the simulated cloud takes a node back: ``Ready=False`` at the notice, deleted a moment later) break
a promise legitimately: the node is gone whatever the controller does, and what it owes is to tell the request
(``CapacityRevoked=True``, naming the node; Kueue then asks again with a new request, which the harness does not
play). So, and only for nodes the history shows reclaimed: a reclaimed node a promise counted on when the cloud took
it still counts as Ready for that promise until a revocation names it (or the requests promised then are no longer
promised); a request marked Provisioned while one of its new nodes is under a notice the controller may not have
seen yet is judged as if that node were Ready, and owed the same way. A promise may also count on a node the pool
seemed to have to spare when the notice came (a booking names existing nodes the history cannot see): a shortfall
that such a node would cover is held, and excused only if a revocation of a request promised at the notice later
names that node (seed 17063: the spare was removed as empty, legitimately, 50 ms before the revocation of the
request that had booked the reclaimed node was written). A revoked request promises nothing from its
revocation on; at the end, a request revoked for a reclaimed node needs no nodes. A revocation naming no reclaimed
node is a violation.

gke runs, from the fake Google Cloud's own view of its traffic (:class:`CloudTraffic`, an observer of
``gangscale.sim.gcp.server.OBSERVERS``): every exchange of gangscale's with it is valid against Google's discovery
documents (``gangscale.sim.gcp.discovery``, requests checked strictly); no call that changes the cloud (any
method but GET, save the Compute methods that read over POST) reached it from a replica outside its leadership,
judged by :func:`leadership` exactly as the API-server changes are (a call the fake applied but whose answer it
dropped, a lost response, counts as applied). At the end (:func:`cloud_at_the_end`), the cloud holds nothing the
nodes do not show: every VM of every instance group has its Node, and no node pool gangscale made is left without
a VM (a failed slice's pool in ERROR, which no Node would reveal).

aws runs: the same from the fake EC2's traffic, against botocore's EC2 model, and its instances at the end
(``chaoslib.aws``); an EKS Node counts for the request whose token its instance is tagged with.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chaoslib.observe import (
    NS,
    History,
    NodeTokens,
    Seen,
    condition,
    gang_uid,
    is_true,
    node_pool,
    node_ready,
    request_claims,
)
from chaoslib.plan import Gang
from chaoslib.procs import LOST_LEASE, Start

JSON = dict[str, Any]
_AGENT = re.compile(r"^(gangscale(?:-simulated-cloud)?)/\S+ \((?P<identity>[^)]+)\)$")
_CHANGES = {"create", "update", "patch", "delete", "deletecollection"}


#: The reason gangscale gives when a request's own new nodes are Ready (others: it fits on capacity that exists).
NEW_NODES = "CapacityIsProvisioned"
#: The revocation of a booking on free capacity that a restarted leader could not make again, and its message.
BOOKING_LOST = "BookedCapacityLost"
FREE_BOOKING_LOST = "after a restart its booking on free capacity could not be made again"


@dataclass
class _Replay:
    """The cluster as the write order leaves it after each event."""

    gangs: Mapping[str, Gang]
    nodes: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # name -> (gang uid, pool, Ready)
    provisioned: set[str] = field(default_factory=set)
    names: dict[str, str] = field(default_factory=dict)
    most: dict[str, int] = field(default_factory=dict)
    #: Nodes the cloud reclaimed: name -> (the uid of the request that made it, pool).
    reclaimed: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Reclaimed nodes that promises counted on: name -> the requests promised then (see the module docstring).
    owed: dict[str, set[str]] = field(default_factory=dict)
    #: Reclaimed nodes the pool seemed to have to spare at the notice: name -> the requests promised then.
    maybe_owed: dict[str, set[str]] = field(default_factory=dict)

    def _counted(self, owed: Mapping[str, set[str]], pool: str) -> set[str]:
        """The reclaimed nodes of ``owed`` in ``pool``, no longer Ready, owed to a request still promised."""
        return {name for name, uids in owed.items() if self.reclaimed[name][1] == pool
                and uids & self.provisioned and not self.nodes.get(name, ("", "", False))[2]}

    def ready_in(self, pool: str) -> int:
        ready = sum(1 for _, in_pool, ready in self.nodes.values() if in_pool == pool and ready)
        # A reclaimed node still counts for the promises made on it until the controller revokes them.
        return ready + len(self._counted(self.owed, pool))

    def take(self, event: Seen) -> None:
        """The cloud's notice for a node: owed to the promises of its pool if they counted on it (or, if the pool
        seemed to have it to spare, maybe owed: see :meth:`revoke`)."""
        owner, pool = event.owner, event.detail
        self.reclaimed[event.name] = (owner, pool)
        if not self.nodes.get(event.name, ("", "", False))[2]:
            return
        promised = {uid for uid in self.provisioned if self.gangs[uid].pool == pool}
        # A request's own new node is booked by it whatever the pool holds besides (chaos seed 26021: two of a
        # promised request's own nodes reclaimed while no leader ran, a spare still in the pool; the request was
        # deleted before any revocation could name them).
        if owner in promised or self.promised_in(pool) > self.ready_in(pool) - 1:
            self.owed[event.name] = promised
        elif promised:
            self.maybe_owed[event.name] = promised

    def revoke(self, uid: str, message: str, held: Iterable[Held]) -> None:
        """A revocation: the reclaimed nodes it names are owed no more. Naming a node that seemed spare at its
        notice, by a request promised then, it shows that the request had booked it: the shortfalls it covers are
        excused. The request's own reclaimed nodes count as named: a restarted leader that finds none of a token's units
        left names the token, not the nodes it never saw (chaos seed 24028)."""
        held = list(held)  # read once a name: a generator would be spent after the first
        own = {name for name, (owner, _) in self.reclaimed.items() if owner == uid}
        if message.startswith(FREE_BOOKING_LOST):
            # A booking on free capacity a restarted leader could not make again names no node (nothing records
            # which free nodes it held): the reclaimed nodes it was promised at their notice count as named (chaos
            # seed 26098).
            own |= {name for name, uids in self.maybe_owed.items() if uid in uids}
        for name in named_nodes(message) | own:
            self.owed.pop(name, None)
            if uid in self.maybe_owed.pop(name, ()):
                for shortfall in held:
                    if name in shortfall.covering:
                        shortfall.booked.add(name)

    def promised_in(self, pool: str) -> int:
        return sum(self.gangs[uid].nodes for uid in self.provisioned if self.gangs[uid].pool == pool)

    def short(self, pool: str, rv: int, after: str) -> str | Held | None:
        ready, promised = self.ready_in(pool), self.promised_in(pool)
        if ready >= promised:
            return None
        holders = ", ".join(sorted(self.names[uid] for uid in self.provisioned if self.gangs[uid].pool == pool))
        problem = (f"after {after} (rv {rv}) pool {pool} had {ready} Ready nodes for Provisioned requests that need "
                   f"{promised} ({holders})")
        covering = self._counted(self.maybe_owed, pool)
        return Held(problem, promised - ready, covering) if ready + len(covering) >= promised else problem


@dataclass
class Held:
    """A shortfall that reclaimed nodes, spare-looking at their notice, cover if a revocation shows them booked."""

    problem: str
    missing: int
    covering: set[str]
    booked: set[str] = field(default_factory=set)

    @property
    def excused(self) -> bool:
        return len(self.booked) >= self.missing


def during_run(history: History, gangs_by_uid: Mapping[str, Gang]) -> list[str]:
    """Replayed in write order: a request marked ``Provisioned=True`` for its own new nodes has them all Ready; at
    no moment do the Provisioned requests of a pool need more nodes than are Ready in it (capacity promised to
    Kueue is capacity that exists, new or found); never more nodes alive for a request than it needs."""
    problems: list[str | Held] = []
    state = _Replay(gangs_by_uid)
    for event in history.ordered():
        if event.kind == "node":
            if event.reclaimed and event.name not in state.reclaimed:
                state.take(event)
            if event.type == "DELETED":
                gone = state.nodes.pop(event.name, None)
                pool = gone[1] if gone else event.detail
                problem = state.short(pool, event.rv, f"node {event.name} was deleted")
            else:
                state.nodes[event.name] = (event.owner, event.detail, event.flag)
                count = sum(1 for owner, _, _ in state.nodes.values() if owner == event.owner)
                state.most[event.owner] = max(state.most.get(event.owner, 0), count)
                problem = None if event.flag else state.short(event.detail, event.rv, f"node {event.name} changed")
        elif event.kind == "request" and event.uid in gangs_by_uid:
            gang = gangs_by_uid[event.uid]
            state.names[event.uid] = event.name
            was = event.uid in state.provisioned
            if event.revoked is not None:
                state.revoke(event.uid, event.revoked, (p for p in problems if isinstance(p, Held)))
            # A revoked request promises nothing any more (Kueue evicts its workload).
            now = event.flag and event.type != "DELETED" and event.revoked is None
            (state.provisioned.add if now else state.provisioned.discard)(event.uid)
            problem: str | Held | None = None
            if now and not was:
                # A new node under a notice may still look Ready to the controller: judged Ready, and owed.
                taken = [name for name, (owner, _) in state.reclaimed.items() if owner == event.uid]
                for name in taken:
                    state.owed.setdefault(name, set()).add(event.uid)
                own = [ready or name in state.reclaimed for name, (owner, _, ready) in state.nodes.items()
                       if owner == event.uid]
                if event.detail == NEW_NODES and (not own or not all(own)):
                    # Its plan may also use free nodes that exist (checked with the pool); its new ones: all Ready.
                    problem = (f"{event.name} was marked Provisioned=True ({NEW_NODES}, rv {event.rv}) with "
                               f"{sum(own)} of its {len(own)} new nodes Ready")
                else:
                    problem = state.short(gang.pool, event.rv, f"{event.name} was marked Provisioned=True")
        else:
            continue
        if problem is not None:
            problems.append(problem)
    for uid, most in sorted(state.most.items()):
        gang = gangs_by_uid.get(uid)
        if gang is not None and most > gang.nodes:
            problems.append(f"{state.names.get(uid, gang.name)} had {most} nodes alive at once; it needs {gang.nodes}")
    return [p if isinstance(p, str) else p.problem for p in problems if isinstance(p, str) or not p.excused]


def _when(entry: JSON) -> float:
    return datetime.fromisoformat(str(entry["time"])).timestamp()


@dataclass
class Leadership:
    problems: list[str] = field(default_factory=list)
    #: Changes judged.
    judged: int = 0
    #: Changes that reached the server more than a lease duration after their maker's last lease write, with
    #: no other leader in between, explained by the harness pausing the maker (the fencing gap).
    late_after_pause: int = 0


def _paused_within(pauses: Iterable[tuple[float, float]], start: float, end: float) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in pauses)


def leadership(log: Iterable[JSON], lease_seconds: float,
               pauses: Mapping[str, list[tuple[float, float]]] | None = None) -> Leadership:
    """Changes made outside the maker's leadership (``pauses``: per identity, when the harness had it stopped)."""
    leases: list[tuple[float, str]] = []
    changes: list[tuple[float, str, str]] = []
    for entry in log:
        match = _AGENT.match(str(entry.get("userAgent", "")))
        if match is None or entry.get("verb") not in _CHANGES:
            continue
        if not entry.get("applied", 200 <= int(entry.get("status") or 0) < 300):
            continue  # refused (a 409 for a node that exists, an injected 500): it changed nothing
        program, identity = match.group(1), match.group("identity")
        what = entry.get("what") or \
            f"{entry['verb']} {entry['resource']}{'/' + entry['subresource'] if entry.get('subresource') else ''}" \
            f" {entry.get('name') or ''}".rstrip()
        if entry.get("resource") == "leases":
            # Only the leader Lease's writes are leadership; the simulated kubelets' node Leases (kube-node-lease,
            # written with the cloud's user agent) are heartbeats, like their node status posts (found by seed 10742:
            # a paused standby's kubelets renewing node Leases read as that standby taking the lead).
            if program == "gangscale" and entry.get("namespace", NS) == NS:
                leases.append((_when(entry), identity))
        elif program == "gangscale" or (entry.get("resource") == "nodes" and not entry.get("subresource")):
            # The cloud's node creates and deletes are provider calls; its kubelet's status updates are not.
            changes.append((_when(entry), identity, what))
    leases.sort()
    out = Leadership(judged=len(changes))
    for at, identity, what in changes:
        own = [t for t, who in leases if who == identity and t <= at]
        if not own:
            out.problems.append(f"{identity} made '{what}' without ever holding the lease")
            continue
        renewed = own[-1]
        usurper = next((who for t, who in leases if renewed < t <= at and who != identity), None)
        if usurper is not None:
            out.problems.append(f"{identity} made '{what}' after {usurper} had taken the lease")
        elif at - renewed >= lease_seconds:
            stopped = _paused_within((pauses or {}).get(identity, []), renewed, at)
            if at - renewed - stopped < lease_seconds:
                out.late_after_pause += 1
            else:
                out.problems.append(f"{identity} made '{what}' {at - renewed:.2f}s after its last lease write")
    return out


def named_nodes(message: str) -> set[str]:
    """The words of a condition message, among them the nodes it names (``n1, n2``, ``n1 (Ready=False since ...)``)."""
    return set(re.split(r"[\s,:()]+", message))


def at_the_end(requests: list[JSON], nodes: list[JSON], gangs_by_name: Mapping[str, Gang],
               claims: Mapping[str, str] | None = None, reclaimed: Collection[str] = (),
               tokens: NodeTokens | None = None, reclaimed_pools: Collection[str] = ()) -> list[str]:
    """Every live request ``Provisioned=True``; one provisioned with new nodes has them all Ready; each
    pool holds exactly the nodes its live requests need, all Ready (a node of a deleted request may serve a request
    that found it free; any more is capacity nobody needs, left after scale-down time). A node without a token
    label counts for the request whose recorded token has its claim (the requests' own records, and ``claims``:
    those the history saw); one the cloud recorded a token for (``tokens``, aws), for that token's request. A request
    revoked for a node the cloud reclaimed (``reclaimed``: nodes, or the tokens that made them) needs none; so does one
    booked on free capacity whose booking a restarted leader could not make again (``BookedCapacityLost``) in a pool
    the cloud reclaimed nodes of (``reclaimed_pools``): nothing records which free nodes such a booking held, so its
    revocation cannot name them (chaos seed 22011)."""
    problems: list[str] = []
    known = {**(claims or {}), **request_claims(requests)}
    by_uid: dict[str, list[JSON]] = {}
    for node in nodes:
        by_uid.setdefault(gang_uid(node, known, tokens), []).append(node)
    need_per_pool: dict[str, int] = {}
    for request in sorted(requests, key=lambda r: r["metadata"]["name"]):
        name, uid = request["metadata"]["name"], request["metadata"]["uid"]
        gang = gangs_by_name.get(name)
        if is_true(request, "CapacityRevoked"):
            revoked = condition(request, "CapacityRevoked") or {}
            if named_nodes(str(revoked.get("message", ""))) & set(reclaimed) or (
                    revoked.get("reason") == BOOKING_LOST and gang is not None and gang.pool in reclaimed_pools):
                continue  # the cloud took a node it was promised: revoking it is its outcome
            problems.append(f"{name} was revoked ({revoked.get('reason', '')}) for nodes the cloud did not reclaim: "
                            f"{revoked.get('message', '')}")
        if gang is not None:
            need_per_pool[gang.pool] = need_per_pool.get(gang.pool, 0) + gang.nodes
        if not is_true(request, "Provisioned"):
            conditions = ", ".join(f"{c['type']}={c['status']}({c.get('reason', '')})"
                                   for c in (request.get("status") or {}).get("conditions") or [])
            problems.append(f"{name} has no outcome: {conditions or 'no conditions'}")
            continue
        if is_true(request, "Failed"):
            problems.append(f"{name} failed")
        mine = by_uid.get(uid, [])
        reason = (condition(request, "Provisioned") or {}).get("reason")
        if gang is not None and reason == NEW_NODES and (
                not mine or len(mine) > gang.nodes or not all(node_ready(n) for n in mine)):
            ready = sum(1 for n in mine if node_ready(n))
            problems.append(f"{name} is Provisioned ({NEW_NODES}) with {len(mine)} new nodes ({ready} Ready); it "
                            f"needs {gang.nodes} nodes in all")
    for pool in sorted({node_pool(n) for n in nodes} | set(need_per_pool)):
        in_pool = [n for n in nodes if node_pool(n) == pool]
        ready = sum(1 for n in in_pool if node_ready(n))
        need = need_per_pool.get(pool, 0)
        if len(in_pool) != need or ready != need:
            problems.append(f"pool {pool or '(none)'} has {len(in_pool)} nodes ({ready} Ready); its live requests "
                            f"need {need}: {', '.join(sorted(n['metadata']['name'] for n in in_pool)) or '-'}")
    return problems


def processes(starts: Iterable[Start]) -> list[str]:
    problems: list[str] = []
    for start in starts:
        text = start.text()
        if "Traceback" in text:
            problems.append(f"{start.log.name}: a traceback in the log")
        code = start.proc.returncode
        if code is None or start.ended_by == "kill":
            continue
        if code == 1 and any(LOST_LEASE in m for m in start.messages()):
            continue
        if start.ended_by == "term" and code in (0, -15):  # -15: stopped before its signal handlers were set
            continue
        problems.append(f"{start.log.name}: exited with {code}" + (" after SIGTERM" if start.ended_by else ""))
    return problems


def by_name(gangs: Iterable[Gang]) -> dict[str, Gang]:
    return {gang.name: gang for gang in gangs}


# --- gke runs: the fake Google Cloud's traffic -----------------------------------------------------------------------

#: Compute Engine methods that read but are called with POST (and ``zoneOperations.wait``, which only waits).
READING_POSTS = re.compile(r"/(listManagedInstances|listPerInstanceConfigs|operations/[^/]+/wait)$")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@functools.cache
def _discovery() -> Any:
    from gangscale.sim.gcp.discovery import Discovery  # noqa: PLC0415 (only where a gke run judges)

    return Discovery.load()


@dataclass
class CloudTraffic:
    """An observer of a fake Google Cloud (``gangscale.sim.gcp.server.Observer``): the calls of one run, told apart
    from other runs' in the same process by the run's project in the path. It checks each of gangscale's exchanges
    against Google's discovery documents at once (``problems``) and keeps its changes for :func:`leadership`
    (``changes``: entries shaped as the API server's request log's, with the wall-clock time the fake answered)."""

    project: str
    problems: list[str] = field(default_factory=list)
    changes: list[JSON] = field(default_factory=list)
    #: Exchanges of gangscale's checked.
    checked: int = 0
    clock: Any = time.time

    def __call__(self, *, method: str, path: str, query: Mapping[str, str], request: Any, status: int,
                 response: Any, user_agent: str) -> None:
        if f"/projects/{self.project}/" not in path or not user_agent.startswith("gangscale"):
            return
        from gangscale.sim.gcp.discovery import Exchange  # noqa: PLC0415

        self.checked += 1
        found = _discovery().check(Exchange(method, path, dict(query), request, status, response),
                                   strict_request=True)
        self.problems += [f"{method} {path} -> {status or 'answer dropped'} ({user_agent}): breaks Google's "
                          f"discovery documents: {problem}" for problem in found]
        if method.upper() in _VERBS and not READING_POSTS.search(path):
            self.changes.append(cloud_change(self.clock(), method, path, status, user_agent))


def cloud_change(at: float, method: str, path: str, status: int, user_agent: str) -> JSON:
    """A change to the cloud as a request-log entry for :func:`leadership`. Applied: a 2xx answer, or none at all
    (status 0: the fake applied the call and dropped its answer — a lost response; the campaign holds no call)."""
    return {"time": datetime.fromtimestamp(at, UTC).isoformat(timespec="microseconds"), "userAgent": user_agent,
            "verb": _VERBS[method.upper()], "resource": "cloud", "name": path, "status": status,
            "applied": status == 0 or 200 <= status < 300,
            "what": f"{method.upper()} {path}{' (answer dropped)' if status == 0 else ''}"}


def cloud_at_the_end(groups: Mapping[str, list[str]], made_pools: Mapping[str, int], nodes: Iterable[str]) -> list[str]:
    """The cloud holds nothing the nodes do not show: ``groups`` (node pool -> the names of its instance groups'
    members, VMs or instances still being created), ``made_pools`` (node pool gangscale made -> its members)."""
    names = set(nodes)
    problems = [f"node pool {pool}: VM {vm} has no Node" for pool, vms in sorted(groups.items()) for vm in sorted(vms)
                if vm not in names]
    problems += [f"node pool {pool} is left with no VM" for pool, members in sorted(made_pools.items()) if not members]
    return problems
