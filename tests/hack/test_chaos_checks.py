"""The chaos campaign's judges (``hack/chaoslib/checks.py``) must be able to fail: each invariant is fed a
history, request log or end state that breaks it, and one that keeps it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from chaoslib.checks import NEW_NODES, CloudTraffic, at_the_end, cloud_at_the_end, during_run, leadership
from chaoslib.gcp import GkeCloud, set_timings
from chaoslib.observe import History, Seen, gang_uid, request_claims
from chaoslib.plan import (
    GKE_ZONE,
    Action,
    Gang,
    faults_of,
    gke_faults,
    gke_pool_file,
    gke_project,
    make_plan,
    pool_file,
    provider_of,
)

from gangscale.clock import SystemClock
from gangscale.config import parse_pool_yaml
from gangscale.kube.reflector import ReflectorEvent
from gangscale.model.nodepool import POOL_LABEL
from gangscale.providers.base import TOKEN_LABEL
from gangscale.providers.gke import names
from gangscale.sim.gcp import FakeGcp

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

    def reclaimed(self, name: str, owner: str, *, ready: bool, etype: str = "MODIFIED") -> Events:
        """A node the cloud reclaimed: its notice (the annotation, still Ready), NotReady, then DELETED."""
        self.history.events.append(Seen(len(self.history.events) + 1, "node", etype, name, "", ready, owner, "gpu",
                                        reclaimed=True))
        return self

    def revoked(self, uid: str, message: str) -> Events:
        self.history.events.append(Seen(len(self.history.events) + 1, "request", "MODIFIED", GANGS[uid].name, uid,
                                        True, detail=NEW_NODES, revoked=message))
        return self


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


def n2_reclaimed() -> Events:
    """gang-a provisioned on n1 and n2; the cloud reclaims n2: notice, NotReady, deleted."""
    return own_nodes_ready().reclaimed("n2", A, ready=True).reclaimed("n2", A, ready=False) \
        .reclaimed("n2", A, ready=False, etype="DELETED")


REVOKED_N2 = "booked nodes were removed before every pod was scheduled: n2"
C = "c" * 36


def spare_reclaimed() -> Events:
    """gang-a provisioned (n1 its own; n2 and n3 of gang-c, free); n2 gets a notice, then n3 is removed."""
    return Events().node("n1", A, ready=True).node("n2", C, ready=True).node("n3", C, ready=True) \
        .provisioned(A, FOUND).reclaimed("n2", C, ready=True).reclaimed("n2", C, ready=False) \
        .node("n3", C, ready=True, etype="DELETED")
#: Spot reclaims: what they legitimately break, and what they must not hide.
RECLAIMS: list[tuple[str, Events, list[str]]] = [
    ("a-reclaimed-booked-node-is-owed-until-the-request-is-revoked", n2_reclaimed().revoked(A, REVOKED_N2), []),
    ("marked-provisioned-while-a-new-node-is-under-a-notice-the-controller-had-not-seen",
     Events().node("n1", A, ready=True).node("n2", A, ready=True).reclaimed("n2", A, ready=True)
     .reclaimed("n2", A, ready=False).provisioned(A, NEW_NODES), []),
    ("once-revoked-the-reclaimed-node-counts-no-more",
     n2_reclaimed().revoked(A, REVOKED_N2).provisioned(B, FOUND).node("n1", A, ready=True, etype="DELETED"),
     ["after node n1 was deleted (rv 11) pool gpu had 0 Ready nodes for Provisioned requests that need 1 (gang-b)"]),
    ("a-revocation-pays-what-it-names-for-every-promise",
     Events().node("n1", A, ready=True).node("n2", A, ready=True).node("n3", B, ready=True).provisioned(A, NEW_NODES)
     .provisioned(B, NEW_NODES).reclaimed("n2", A, ready=True).reclaimed("n2", A, ready=False, etype="DELETED")
     .revoked(A, REVOKED_N2).node("n3", B, ready=True, etype="DELETED").node("n1", A, ready=True, etype="DELETED"),
     ["after node n1 was deleted (rv 10) pool gpu had 0 Ready nodes for Provisioned requests that need 1 (gang-b)"]),
    ("a-free-node-reclaimed-hides-no-shortfall",
     own_nodes_ready().node("n3", C, ready=True).reclaimed("n3", C, ready=True)
     .reclaimed("n3", C, ready=False, etype="DELETED").node("n2", A, ready=True, etype="DELETED"),
     ["after node n2 was deleted (rv 9) pool gpu had 1 Ready nodes for Provisioned requests that need 2 (gang-a)"]),
    # Seed 17063: gang-a booked its own n1 and a free n2 while n3 was free too; n2's notice left the pool one node
    # to spare as far as the history could tell, so the removal of n3 looked like a shortfall until the revocation
    # naming n2 showed the booking that had counted on it.
    ("a-spare-looking-node-a-revocation-names-excuses-the-shortfall",
     spare_reclaimed().revoked(A, REVOKED_N2), []),
    ("a-spare-looking-node-no-revocation-names-excuses-nothing", spare_reclaimed(),
     ["after node n3 was deleted (rv 7) pool gpu had 1 Ready nodes for Provisioned requests that need 2 (gang-a)"]),
    ("a-spare-looking-node-named-by-another-request-excuses-nothing", spare_reclaimed().revoked(B, REVOKED_N2),
     ["after node n3 was deleted (rv 7) pool gpu had 1 Ready nodes for Provisioned requests that need 2 (gang-a)"]),
    ("a-node-removed-without-a-reclaim-is-still-a-violation",
     own_nodes_ready().node("n2", A, ready=True, etype="DELETED").revoked(A, REVOKED_N2),
     ["after node n2 was deleted (rv 6) pool gpu had 1 Ready nodes for Provisioned requests that need 2 (gang-a)"]),
]


@pytest.mark.parametrize(("events", "expected"), [(e, x) for _, e, x in RECLAIMS], ids=[i for i, _, _ in RECLAIMS])
def test_during_the_run_with_reclaims(events: Events, expected: list[str]) -> None:
    assert during_run(events.history, GANGS) == expected


def entry(at: float, agent: str, verb: str, resource: str, status: int = 200, subresource: str = "",
          namespace: str = "default") -> JSON:
    seconds = f"{at:09.6f}"
    return {"time": f"2026-11-26T10:00:{seconds}+00:00", "userAgent": agent, "verb": verb, "resource": resource,
            "name": "x", "subresource": subresource, "status": status, "namespace": namespace}


R1, R2 = "gangscale/1.0 (r1)", "gangscale/1.0 (r2)"
CLOUD1 = "gangscale-simulated-cloud/1.0 (r1)"
CLOUD2 = "gangscale-simulated-cloud/1.0 (r2)"
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
    # Seed 10742: a paused standby's simulated kubelets renewing their node Leases are not a leader taking over.
    ("a-kubelets-node-lease-is-not-leadership", [entry(1, R1, "update", "leases"),
                                                 entry(1.5, CLOUD2, "create", "leases", namespace="kube-node-lease"),
                                                 entry(2, CLOUD1, "delete", "nodes")], []),
    ("a-refused-request-changed-nothing", [entry(1, R1, "update", "leases"), entry(1.5, R2, "update", "leases"),
                                           entry(2, CLOUD1, "create", "nodes", 409)], []),
]


@pytest.mark.parametrize(("log", "expected"), [(lg, x) for _, lg, x in LEADERSHIP], ids=[i for i, _, _ in LEADERSHIP])
def test_leadership(log: list[JSON], expected: list[str]) -> None:
    judged = leadership(log, 2.0)
    assert judged.problems == expected and judged.late_after_pause == 0
    # Judged: every change but Leases and the simulated kubelets' node status posts.
    clouds = (CLOUD1, CLOUD2)
    assert judged.judged == sum(1 for e in log if e["status"] < 300 and e["resource"] != "leases" and (
        e["userAgent"] not in clouds or not e["subresource"]))


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


def revoked_request(name: str, uid: str, message: str) -> JSON:
    out = request(name, uid, NEW_NODES)
    out["status"]["conditions"].append({"type": "CapacityRevoked", "status": "True", "reason": "BookedNodeRemoved",
                                        "message": message})
    return out


@pytest.mark.parametrize(("message", "nodes", "expected"), [
    pytest.param(REVOKED_N2, [], [], id="revoked-for-a-reclaimed-node-needs-no-nodes"),
    pytest.param(REVOKED_N2, [node("n1", A)], ["pool gpu has 1 nodes (1 Ready); its live requests need 0: n1"],
                 id="its-other-nodes-are-scaled-down"),
    pytest.param("booked nodes were removed before every pod was scheduled: n7", [],
                 ["gang-a was revoked (BookedNodeRemoved) for nodes the cloud did not reclaim: booked nodes were "
                  "removed before every pod was scheduled: n7",
                  "gang-a is Provisioned (CapacityIsProvisioned) with 0 new nodes (0 Ready); it needs 2 nodes in all",
                  "pool gpu has 0 nodes (0 Ready); its live requests need 2: -"],
                 id="a-revocation-no-reclaim-explains"),
])
def test_at_the_end_with_reclaims(message: str, nodes: list[JSON], expected: list[str]) -> None:
    assert at_the_end([revoked_request("gang-a", A, message)], nodes, BY_NAME, reclaimed={"n2"}) == expected


def test_reclaims_make_the_tpu_and_gpu_pools_spot_and_change_no_other_fault() -> None:
    for seed in range(20):
        plain, with_reclaims = pool_file(random.Random(seed)), pool_file(random.Random(seed), random.Random(seed), True)
        pools = {p.name: p for p in parse_pool_yaml(with_reclaims).pools}
        assert [pools[name].capacity_type for name in ("tpu", "gpu", "cpu")] == ["spot", "spot", "on-demand"]
        assert [f for f in faults_of(with_reclaims) if not f.endswith(".reclaim")] == faults_of(plain)
        assert {p.capacity_type for p in parse_pool_yaml(plain).pools} == {"on-demand"}
    drawn = [f for seed in range(20) for f in faults_of(pool_file(None, random.Random(seed), True))]
    assert {"tpu.reclaim", "gpu.reclaim"} <= set(drawn) and not any(f.startswith("cpu.") for f in drawn)
    assert "reclaim" not in pool_file(None, None, True)


# --- gke runs ---------------------------------------------------------------------------------------------------------


def test_a_gke_plan_is_a_pure_function_of_the_seed_and_adds_only_cloud_faults() -> None:
    for seed in range(40):
        plan = make_plan(seed, provider="gke")
        assert plan == make_plan(seed, provider="gke")
        # The cloud faults come from a generator of their own: every other action is the simulated run's.
        assert tuple(a for a in plan.actions if a.kind != "cloud-fault") == make_plan(seed).actions
        faults = [a for a in plan.actions if a.kind == "cloud-fault"]
        assert 2 <= len(faults) <= 5 and all(0 <= a.at < plan.fault_seconds for a in faults)
    kinds = {a.fault["kind"] for seed in range(200) for a in make_plan(seed, provider="gke").actions
             if a.kind == "cloud-fault"}
    assert kinds == {"stockout", "lost-responses", "http-error", "slow-operations", "partial-slice", "never-ready"}
    assert {a.fault["status"] for seed in range(200) for a in gke_faults(seed)
            if a.fault["kind"] == "http-error"} == {429, 500, 503}


def test_both_alternates_providers_by_the_seeds_parity() -> None:
    assert [provider_of(seed, "both") for seed in (6, 7, 8)] == ["simulated", "gke", "simulated"]
    assert provider_of(7, "simulated") == "simulated" and provider_of(8, "gke") == "gke"


def test_the_gke_pool_file_is_valid_and_names_the_runs_project() -> None:
    pools = {p.name: p for p in parse_pool_yaml(gke_pool_file(gke_project(7001))).pools}
    assert sorted(pools) == ["cpu", "gpu", "tpu"]
    assert {p.provider["gke"]["project"] for p in pools.values()} == {"chaos-7001"}
    assert [(p.provider["gke"]["mode"], p.nodes_per_unit, p.max_units) for p in pools.values()] == [
        ("slice", 2, 3), ("resize", 1, 5), ("resize", 1, 5)]
    flex = {p.name: p for p in parse_pool_yaml(gke_pool_file(gke_project(7003), 7003)).pools}
    assert (flex["gpu"].provider["gke"]["mode"], flex["cpu"].provider["gke"]["mode"]) == ("flex-start", "resize")
    assert [bool((seed // 2) % 2) for seed in (1, 3, 5, 7)] == [False, True, False, True]  # `both`: gke seeds odd


async def test_cloud_faults_turn_the_fakes_knobs_and_all_are_undone_when_the_faults_stop(tmp_path: Path) -> None:
    gcp = FakeGcp(SystemClock(), None, project="chaos-1")
    set_timings(gcp)
    baseline = dataclasses.replace(gcp.faults, stock={}, errors=[])
    cloud = GkeCloud(gcp, "chaos-1", "", CloudTraffic("chaos-1"), tmp_path)
    key = (GKE_ZONE, "a3-highgpu-8g")
    for fault, seconds in [
        ({"kind": "stockout", "zone": GKE_ZONE, "machine": "a3-highgpu-8g"}, 0.05),
        ({"kind": "stockout", "zone": GKE_ZONE, "machine": "a3-highgpu-8g"}, 60.0),
        ({"kind": "lost-responses", "count": 2}, 0.0),
        ({"kind": "http-error", "status": 429, "method": "POST", "path": "/createInstances$", "times": 2,
          "retry_after": 1}, 0.0),
        ({"kind": "http-error", "status": 500, "method": "*", "path": "^/v1/", "times": 1, "html": True}, 0.0),
        ({"kind": "slow-operations", "operation_seconds": 3.0}, 60.0),
        ({"kind": "partial-slice", "hosts": 1}, 0.0),
        ({"kind": "never-ready"}, 0.05),
    ]:
        cloud.apply(Action(0.0, "cloud-fault", seconds=seconds, fault=fault))
    faults = gcp.faults
    assert (faults.stock, faults.lost_responses, faults.operation_seconds, faults.partial_slice_hosts,
            faults.never_ready) == ({key: 0}, 2, 3.0, 1, True)
    assert [(e.status, e.retry_after, e.html, e.times) for e in faults.errors] == [(429, 1, False, 2),
                                                                                   (500, None, True, 1)]
    assert cloud.applied == 8
    faults.take_error("POST", f"{GROUP}/createInstances")  # the 429 acts once
    faults.lost_responses -= 1  # one answer dropped
    await asyncio.sleep(0.2)
    # The short windows ended: never-Ready is off; the stockout holds while the longer one on the same key lasts.
    assert (faults.never_ready, faults.stock) == (False, {key: 0})
    await cloud.stop_faults()
    assert faults == baseline
    assert cloud.hits == 2  # the partial slice was never made


def test_a_faults_generator_draws_only_kinds_the_cloud_applies() -> None:
    known = {"stockout", "lost-responses", "http-error", "slow-operations", "partial-slice", "never-ready"}
    assert all(a.fault["kind"] in known for seed in range(100) for a in gke_faults(seed))


TOKEN_A = f"{A}-0123456789ab-0"
TOKEN_B = f"{B}-0123456789ab-0"


def pr(name: str, uid: str, tokens: list[str], *, provisioned: bool = False) -> JSON:
    detail = json.dumps({"attempt": 1, "phase": "obtaining", "deadline": 0,
                         "steps": [{"pool": "gpu", "units": 2, "token": t} for t in tokens]})
    conditions = [{"type": "Provisioned", "status": "True", "reason": NEW_NODES}] if provisioned else []
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": "0"},
            "status": {"provisioningClassDetails": {"gangscale.io/scale-up": detail}, "conditions": conditions}}


def vm_node(name: str, *, ready: bool = True, labels: dict[str, str] | None = None) -> JSON:
    """A Node of a VM the gke provider added to an existing node pool: no token label."""
    return {"metadata": {"name": name, "uid": name, "resourceVersion": "0",
                         "labels": {POOL_LABEL: "gpu", "cloud.google.com/gke-nodepool": "gpu", **(labels or {})}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class Writes:
    """A history fed through History's own handlers, each write getting the next resourceVersion."""

    def __init__(self) -> None:
        self.history = History()

    def write(self, kind: str, etype: str, obj: JSON) -> Writes:
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(len(self.history.events) + 1)
        handler = self.history.on_node if kind == "node" else self.history.on_request
        handler(ReflectorEvent(etype, obj))
        return self


def test_a_vm_named_after_a_recorded_token_counts_for_its_request() -> None:
    a0, a1 = names.unit_name(TOKEN_A, 0), names.unit_name(TOKEN_A, 1)
    # The node watch may deliver a VM's Node before the request watch delivers the write that recorded its token:
    # the Node is handled while the history knows no claim yet.
    writes = Writes().write("node", "ADDED", vm_node(a0, ready=False)).write("request", "MODIFIED",
                                                                               pr("gang-a", A, [TOKEN_A]))
    writes.write("node", "ADDED", vm_node(a1)).write("node", "MODIFIED", vm_node(a0)) \
        .write("request", "MODIFIED", pr("gang-a", A, [TOKEN_A], provisioned=True))
    owners = {e.name: e.owner for e in writes.history.ordered() if e.kind == "node"}
    assert owners == {a0: A, a1: A}
    assert during_run(writes.history, GANGS) == []
    # The same history with the second VM still not Ready when the request was marked Provisioned.
    early = Writes().write("request", "MODIFIED", pr("gang-a", A, [TOKEN_A])).write("node", "ADDED", vm_node(a0)) \
        .write("node", "ADDED", vm_node(a1, ready=False)) \
        .write("request", "MODIFIED", pr("gang-a", A, [TOKEN_A], provisioned=True))
    assert during_run(early.history, GANGS) == [
        "gang-a was marked Provisioned=True (CapacityIsProvisioned, rv 4) with 1 of its 2 new nodes Ready"]
    # Without the attribution these nodes would be nobody's: three VMs for a 2-node gang would go unnoticed.
    more = Writes().write("request", "MODIFIED", pr("gang-a", A, [TOKEN_A, TOKEN_B]))
    for vm in (a0, a1, names.unit_name(TOKEN_B, 0)):
        more.write("node", "ADDED", vm_node(vm, ready=False))
    assert during_run(more.history, GANGS) == ["gang-a had 3 nodes alive at once; it needs 2"]


def test_a_vm_of_a_flex_start_resize_request_counts_for_its_request() -> None:
    labels = {"autoscaling.gke.io/provisioning-request": names.resize_request_name(TOKEN_B)}
    node_b = vm_node("gke-chaos-gpu-1234abcd-x7k2", labels=labels)
    assert gang_uid(node_b, request_claims([pr("gang-b", B, [TOKEN_B])])) == B
    assert gang_uid(vm_node("gke-chaos-gpu-1234abcd-x7k2")) == ""  # a node of the pool nobody asked for


def test_at_the_end_a_vm_counts_for_the_request_that_recorded_its_token() -> None:
    b0 = vm_node(names.unit_name(TOKEN_B, 0))
    settled = [pr("gang-b", B, [TOKEN_B], provisioned=True)]
    assert at_the_end(settled, [b0], BY_NAME) == []
    # The request no longer records the token (a later write replaced its record): the history's claims still do.
    forgotten = [request("gang-b", B, NEW_NODES)]
    assert at_the_end(forgotten, [b0], BY_NAME) == [
        "gang-b is Provisioned (CapacityIsProvisioned) with 0 new nodes (0 Ready); it needs 1 nodes in all"]
    assert at_the_end(forgotten, [b0], BY_NAME, request_claims(settled)) == []


SLICE_POOLS = "/v1/projects/chaos-1/locations/us-central1/clusters/chaos/nodePools"
GROUP = "/compute/v1/projects/chaos-1/zones/us-central1-a/instanceGroupManagers/gke-chaos-gpu-1234abcd-grp"
OPERATION = {"kind": "compute#operation", "name": "operation-1", "status": "DONE"}
REQUEST_ID = {"requestId": "6f0c4a52-3c55-4b7e-9a2e-5a1d0b2f8c11"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return stamp(self.now)


def exchange(traffic: CloudTraffic, clock: Clock, at: float, agent: str, method: str, path: str, *,
             body: Any = None, status: int = 200, response: Any = None, query: dict[str, str] | None = None) -> None:
    clock.now = at
    traffic(method=method, path=path, query=query or {}, request=body, status=status,
            response=OPERATION if response is None and 200 <= status < 300 else response, user_agent=agent)


def test_cloud_exchanges_are_judged_against_googles_discovery_documents() -> None:
    traffic = CloudTraffic("chaos-1")
    clock = Clock()
    traffic.clock = clock
    create = {"instances": [{"name": "gs-0123456789ab-0"}]}
    exchange(traffic, clock, 1, R1, "POST", f"{GROUP}/createInstances", body=create, query=REQUEST_ID)
    exchange(traffic, clock, 1, R1, "POST", f"{GROUP}/listManagedInstances", response={})
    assert (traffic.problems, traffic.checked) == ([], 2)
    exchange(traffic, clock, 2, R1, "POST", f"{GROUP}/createInstances", body={**create, "size": 3}, query=REQUEST_ID)
    exchange(traffic, clock, 3, R1, "POST", f"{GROUP}/createInstances", body=create, status=503,
             response={"error": {"code": 500, "message": "x"}})
    # Another run's project, and a caller that is not gangscale: not this run's judge's.
    exchange(traffic, clock, 4, R1, "POST", GROUP.replace("chaos-1", "chaos-2") + "/createInstances", body={"x": 1})
    exchange(traffic, clock, 4, "curl/8", "POST", f"{GROUP}/createInstances", body={"x": 1})
    assert traffic.problems == [
        f"POST {GROUP}/createInstances -> 200 ({R1}): breaks Google's discovery documents: "
        "compute.instanceGroupManagers.createInstances request.size: unknown field",
        f"POST {GROUP}/createInstances -> 503 ({R1}): breaks Google's discovery documents: "
        "compute.instanceGroupManagers.createInstances response.error.code: 500 differs from the HTTP status 503"]
    assert traffic.checked == 4


def test_cloud_changes_are_judged_for_leadership_like_the_api_servers() -> None:
    traffic = CloudTraffic("chaos-1")
    clock = Clock()
    traffic.clock = clock
    leases = [entry(1, R1, "update", "leases"), entry(3, R2, "update", "leases")]
    exchange(traffic, clock, 2, R1, "POST", SLICE_POOLS, body={"nodePool": {"name": "gs-0123456789ab-0"}},
             response={"name": "operation-1", "status": "RUNNING"})
    exchange(traffic, clock, 3.5, R1, "GET", f"{SLICE_POOLS}/gs-0123456789ab-0", response={})  # a read
    exchange(traffic, clock, 3.5, R1, "POST", f"{GROUP}/listManagedInstances", response={})  # a read over POST
    exchange(traffic, clock, 3.6, R1, "DELETE", f"{SLICE_POOLS}/gs-0123456789ab-0", status=503,
             response={"error": {"code": 503, "message": "x"}})  # refused: changed nothing
    assert leadership([*leases, *traffic.changes], 2.0).problems == []
    # After r2 took the lease: a create the fake applied but whose answer it dropped is a change all the same.
    exchange(traffic, clock, 3.7, R1, "POST", f"{GROUP}/createInstances", status=0, query=REQUEST_ID,
             body={"instances": [{"name": "gs-0123456789ab-0"}]})
    judged = leadership([*leases, *traffic.changes], 2.0)
    assert judged.problems == [f"r1 made 'POST {GROUP}/createInstances (answer dropped)' after r2 had taken the lease"]
    assert judged.judged == 2  # the two creates: reads and refused calls are not changes
    assert traffic.problems == []


def test_at_the_end_the_cloud_holds_nothing_the_nodes_do_not_show() -> None:
    groups = {"gpu": ["gs-0123456789ab-0"], "gs-0123456789ab-1": ["gke-chaos-gs-x-0", "gke-chaos-gs-x-1"]}
    nodes = ["gs-0123456789ab-0", "gke-chaos-gs-x-0", "gke-chaos-gs-x-1"]
    assert cloud_at_the_end(groups, {"gs-0123456789ab-1": 2}, nodes) == []
    assert cloud_at_the_end(groups, {"gs-0123456789ab-1": 2, "gs-0123456789ab-2": 0}, nodes[1:]) == [
        "node pool gpu: VM gs-0123456789ab-0 has no Node", "node pool gs-0123456789ab-2 is left with no VM"]


def test_a_reclaimed_nodes_token_excuses_a_revocation_that_names_only_the_token() -> None:
    """Chaos seed 19026: a leader restarted after the cloud took every unit of a token revokes naming the token (it
    never saw the nodes); the history keeps the tokens of reclaimed nodes, so the end check knows whose doing it was."""
    history = History()
    reclaimed = {"metadata": {"name": "gpu-1-0", "labels": {"gangscale.io/token": "tok-1"},
                              "annotations": {"simulated.gangscale.io/reclaim-at": "2026-11-28T00:00:00Z"}},
                 "status": {}}
    plain = {"metadata": {"name": "gpu-2-0", "labels": {"gangscale.io/token": "tok-2"}}, "status": {}}
    history.on_node(ReflectorEvent("MODIFIED", reclaimed))
    history.on_node(ReflectorEvent("ADDED", plain))
    assert history.reclaimed() == {"gpu-1-0", "tok-1"}
    message = "after a restart the provider no longer has every unit (the provider has no units under token tok-1)"
    assert at_the_end([revoked_request("gang-a", A, message)], [], BY_NAME, reclaimed=history.reclaimed()) == []


@pytest.mark.parametrize(("pools", "excused"), [({"gpu"}, True), ({"tpu"}, False), (set(), False)],
                         ids=["its-pool-lost-nodes", "another-pool-lost-nodes", "nothing-reclaimed"])
def test_a_booking_on_free_capacity_lost_after_a_restart_is_excused_only_where_the_cloud_reclaimed(
        pools: set[str], excused: bool) -> None:
    """Chaos seed 22011: a check-capacity request booked on a free spot node; the node was reclaimed while the
    revocation could not be written, and the next leader, which cannot know which free node the booking held, revoked
    it as BookedCapacityLost without naming it."""
    request = revoked_request("gang-a", A, "after a restart its booking on free capacity could not be made again")
    request["status"]["conditions"][-1]["reason"] = "BookedCapacityLost"
    problems = at_the_end([request], [], BY_NAME, reclaimed_pools=pools)
    assert (problems == []) is excused
    if not excused:
        assert problems[0].startswith("gang-a was revoked (BookedCapacityLost) for nodes the cloud did not reclaim")


def test_a_revocation_naming_only_the_token_pays_for_the_requests_own_reclaimed_node() -> None:
    """Chaos seed 24028: gang-a's own n2 was reclaimed while a spare n3 stood in the pool; n3 was removed, then a
    restarted leader revoked gang-a naming its token (it never saw n2)."""
    events = Events().node("n1", A, ready=True).node("n2", A, ready=True).node("n3", C, ready=True) \
        .provisioned(A, NEW_NODES).reclaimed("n2", A, ready=True).reclaimed("n2", A, ready=False) \
        .node("n3", C, ready=True, etype="DELETED")
    # Its own node is owed to it from the notice (seed 26021); a request left Provisioned without a revocation is
    # the end check's to find.
    assert during_run(events.history, GANGS) == []
    events.revoked(A, "the provider has no units under token tok-a")
    assert during_run(events.history, GANGS) == []


def test_a_requests_own_reclaimed_node_is_owed_to_it_even_with_a_spare_in_the_pool() -> None:
    """Chaos seed 26021: gang-a's own n2 was reclaimed while a spare n3 stood in the pool, and gang-a was deleted
    before a leader could revoke it: its own node was owed to it all along, whatever the pool held besides."""
    events = Events().node("n1", A, ready=True).node("n2", A, ready=True).node("n3", C, ready=True) \
        .provisioned(A, NEW_NODES).reclaimed("n2", A, ready=True).reclaimed("n2", A, ready=False, etype="DELETED") \
        .node("n3", C, ready=True, etype="DELETED")
    assert during_run(events.history, GANGS) == []
    # A spare that is someone else's is still only maybe owed: removing the promised request's own node is not hidden.
    other = Events().node("n1", A, ready=True).node("n2", A, ready=True).node("n3", C, ready=True) \
        .provisioned(A, NEW_NODES).reclaimed("n3", C, ready=True).reclaimed("n3", C, ready=False, etype="DELETED") \
        .node("n2", A, ready=True, etype="DELETED")
    assert during_run(other.history, GANGS) != []



def test_a_free_capacity_booking_lost_after_a_restart_pays_for_the_reclaimed_nodes_it_was_promised() -> None:
    """Chaos seed 26098: gang-a found n2 and n3 free; both were reclaimed while a spare n4 stood; n4 was removed; a
    restarted leader revoked gang-a's booking as lost, naming no node (it cannot know which free nodes it held)."""
    events = Events().node("n2", C, ready=True).node("n3", C, ready=True).node("n4", C, ready=True) \
        .provisioned(A, FOUND).reclaimed("n2", C, ready=True).reclaimed("n3", C, ready=True) \
        .reclaimed("n2", C, ready=False, etype="DELETED").reclaimed("n3", C, ready=False, etype="DELETED") \
        .node("n4", C, ready=True, etype="DELETED")
    assert during_run(events.history, GANGS) != []
    events.revoked(A, "after a restart its booking on free capacity could not be made again: cannot place every pod")
    assert during_run(events.history, GANGS) == []
