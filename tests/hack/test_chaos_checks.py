"""The chaos campaign's judges (``hack/chaoslib/checks.py``) must be able to fail: each invariant is fed a
history, request log or end state that breaks it, and one that keeps it."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from chaoslib.checks import NEW_NODES, at_the_end, during_run, leadership
from chaoslib.observe import History, Seen
from chaoslib.plan import Gang

from gangscale.model.nodepool import POOL_LABEL
from gangscale.providers.base import TOKEN_LABEL

JSON = dict[str, Any]
FOUND = "CapacityIsFound"
A = "a" * 36
B = "b" * 36
GANGS = {A: Gang("gang-a", "gpu", 2), B: Gang("gang-b", "gpu", 1)}


class Events:
    """A history built in write order: each event gets the next resourceVersion."""

    def __init__(self) -> None:
        self.history = History()

    def add(self, kind: str, etype: str, name: str, *, uid: str = "", flag: bool = False, owner: str = "",
            detail: str = "") -> Events:
        self.history.events.append(Seen(len(self.history.events) + 1, kind, etype, name, uid, flag, owner, detail))
        return self

    def node(self, name: str, owner: str, *, ready: bool, etype: str = "ADDED") -> Events:
        return self.add("node", etype, name, flag=ready, owner=owner, detail="gpu")

    def provisioned(self, uid: str, reason: str) -> Events:
        return self.add("request", "MODIFIED", GANGS[uid].name, uid=uid, flag=True, detail=reason)


def own_nodes_ready() -> Events:
    return Events().node("n1", A, ready=False).node("n2", A, ready=False).node("n1", A, ready=True, etype="MODIFIED") \
        .node("n2", A, ready=True, etype="MODIFIED").provisioned(A, NEW_NODES)


DURING: list[tuple[str, Events, list[str]]] = [
    ("own-nodes-ready", own_nodes_ready(), []),
    ("provisioned-with-a-new-node-not-ready",
     Events().node("n1", A, ready=True).node("n2", A, ready=False).provisioned(A, NEW_NODES),
     ["gang-a was marked Provisioned=True (CapacityIsProvisioned, rv 3) with 1 of its 2 new nodes Ready"]),
    ("found-on-free-nodes", own_nodes_ready().add("request", "DELETED", "gang-a", uid=A, flag=True)
     .provisioned(B, FOUND), []),
    ("promised-twice", own_nodes_ready().provisioned(B, FOUND),
     ["after gang-b was marked Provisioned=True (rv 6) pool gpu had 2 Ready nodes for Provisioned requests that "
      "need 3 (gang-a, gang-b)"]),
    ("scaled-down-under-a-provisioned-request", own_nodes_ready().node("n2", A, ready=True, etype="DELETED"),
     ["after node n2 was deleted (rv 6) pool gpu had 1 Ready nodes for Provisioned requests that need 2 (gang-a)"]),
    ("more-nodes-than-needed", Events().node("n1", A, ready=False).node("n2", A, ready=False)
     .node("n3", A, ready=False), ["gang-a had 3 nodes alive at once; it needs 2"]),
]


@pytest.mark.parametrize(("events", "expected"), [(e, x) for _, e, x in DURING], ids=[i for i, _, _ in DURING])
def test_during_the_run(events: Events, expected: list[str]) -> None:
    assert during_run(events.history, GANGS) == expected


def entry(at: float, agent: str, verb: str, resource: str, status: int = 200, subresource: str = "") -> JSON:
    seconds = f"{at:09.6f}"
    return {"time": f"2026-11-26T10:00:{seconds}+00:00", "userAgent": agent, "verb": verb, "resource": resource,
            "name": "x", "subresource": subresource, "status": status}


R1, R2 = "gangscale/1.0 (r1)", "gangscale/1.0 (r2)"
CLOUD1 = "gangscale-simulated-cloud/1.0 (r1)"
LEADERSHIP: list[tuple[str, list[JSON], list[str]]] = [
    ("within-the-lease", [entry(1, R1, "update", "leases"), entry(2, R1, "patch", "provisioningrequests",
                                                                 subresource="status"),
                          entry(2.5, CLOUD1, "create", "nodes")], []),
    ("kubelet-status-is-not-a-leader-act", [entry(1, CLOUD1, "patch", "nodes", subresource="status")], []),
    ("never-held", [entry(1, R1, "create", "events")], ["r1 made 'create events x' without ever holding the lease"]),
    ("lease-too-old", [entry(1, R1, "update", "leases"), entry(3.5, CLOUD1, "delete", "nodes")],
     ["r1 made 'delete nodes x' 2.50s after its last lease write"]),
    ("a-failed-renewal-does-not-count", [entry(1, R1, "update", "leases"), entry(2, R1, "update", "leases", 500),
                                         entry(3.2, R1, "patch", "provisioningrequests")],
     ["r1 made 'patch provisioningrequests x' 2.20s after its last lease write"]),
    ("after-a-usurper", [entry(1, R1, "update", "leases"), entry(1.5, R2, "update", "leases"),
                         entry(2, R1, "patch", "provisioningrequests")],
     ["r1 made 'patch provisioningrequests x' after r2 had taken the lease"]),
    ("a-refused-request-changed-nothing", [entry(1, R1, "update", "leases"), entry(1.5, R2, "update", "leases"),
                                           entry(2, CLOUD1, "create", "nodes", 409)], []),
]


@pytest.mark.parametrize(("log", "expected"), [(lg, x) for _, lg, x in LEADERSHIP], ids=[i for i, _, _ in LEADERSHIP])
def test_leadership(log: list[JSON], expected: list[str]) -> None:
    judged = leadership(log, 2.0)
    assert judged.problems == expected and judged.late_after_pause == 0
    # Judged: every change but the Lease's own and the simulated kubelet's node status posts.
    assert judged.judged == sum(1 for e in log if e["status"] < 300 and (
        (e["resource"] != "leases" and e["userAgent"] != CLOUD1)
        or (e["userAgent"] == CLOUD1 and not e["subresource"])))


LATE = [entry(1, R1, "update", "leases"), entry(3.5, R1, "patch", "provisioningrequests", subresource="status")]


@pytest.mark.parametrize(("log", "pauses", "problems", "late"), [
    pytest.param(LATE, {"r1": [(1.2, 3.0)]}, [], 1, id="late-because-its-maker-was-paused"),
    pytest.param(LATE, {"r1": [(1.2, 1.4)]}, ["r1 made 'patch provisioningrequests/status x' 2.50s after its last "
                                              "lease write"], 0, id="a-short-pause-does-not-explain-it"),
    pytest.param(LATE, {"r2": [(1.2, 3.0)]}, ["r1 made 'patch provisioningrequests/status x' 2.50s after its last "
                                              "lease write"], 0, id="another-replicas-pause-does-not-explain-it"),
    pytest.param([LATE[0], entry(3, R2, "update", "leases"), LATE[1]], {"r1": [(1.2, 3.4)]},
                 ["r1 made 'patch provisioningrequests/status x' after r2 had taken the lease"], 0,
                 id="a-pause-never-excuses-a-change-after-another-leader"),
])
def test_a_pause_explains_lateness_but_never_two_leaders(log: list[JSON], pauses: dict[str, list[tuple[float, float]]],
                                                        problems: list[str], late: int) -> None:
    judged = leadership(log, 2.0, {who: [(stamp(a), stamp(b)) for a, b in spans] for who, spans in pauses.items()})
    assert (judged.problems, judged.late_after_pause) == (problems, late)


def stamp(at: float) -> float:
    return datetime.fromisoformat(entry(at, R1, "get", "x")["time"]).timestamp()


def request(name: str, uid: str, reason: str | None) -> JSON:
    conditions = [] if reason is None else [{"type": "Provisioned", "status": "True", "reason": reason}]
    return {"metadata": {"name": name, "uid": uid}, "status": {"conditions": conditions}}


def node(name: str, owner: str, *, ready: bool = True) -> JSON:
    return {"metadata": {"name": name, "labels": {POOL_LABEL: "gpu", TOKEN_LABEL: f"{owner}-t"}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


BY_NAME = {g.name: g for g in GANGS.values()}
END: list[tuple[str, list[JSON], list[JSON], list[str]]] = [
    ("settled", [request("gang-a", A, NEW_NODES), request("gang-b", B, FOUND)],
     [node("n1", A), node("n2", A), node("n3", "c" * 36)], []),
    ("no-outcome", [request("gang-b", B, None)], [node("n3", B)], ["gang-b has no outcome: no conditions"]),
    ("left-over-node", [request("gang-b", B, NEW_NODES)], [node("n3", B), node("n4", "c" * 36)],
     ["pool gpu has 2 nodes (2 Ready); its live requests need 1: n3, n4"]),
    ("new-node-not-ready", [request("gang-b", B, NEW_NODES)], [node("n3", B, ready=False)],
     ["gang-b is Provisioned (CapacityIsProvisioned) with 1 new nodes (0 Ready); it needs 1 nodes in all",
      "pool gpu has 1 nodes (0 Ready); its live requests need 1: n3"]),
]


@pytest.mark.parametrize(("requests", "nodes", "expected"), [(r, n, x) for _, r, n, x in END],
                         ids=[i for i, _, _, _ in END])
def test_at_the_end(requests: list[JSON], nodes: list[JSON], expected: list[str]) -> None:
    assert at_the_end(requests, nodes, BY_NAME) == expected
