"""Bulk loading without HTTP (``EmbeddedAPIServer.load``): each object is what the same create (and status patch)
through the API would store, but for its resourceVersion; it is checked as they are; watchers see creates."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gangscale.sim.apiserver import EmbeddedAPIServer, store
from gangscale.sim.apiserver.api import WriteContext
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.resources import ResourceType, storage_key
from gangscale.sim.apiserver.watching import WatchRequest, open_watch
from tests import builders as b

JSON = dict[str, Any]
NOW = datetime(2026, 11, 28, 9, 0, 0, tzinfo=UTC)
MERGE = "application/merge-patch+json"
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}


def server() -> EmbeddedAPIServer:
    return EmbeddedAPIServer(clock=lambda: NOW, seed=7)


def running_pod(name: str) -> JSON:
    pod = b.pod(name, labels={"app": "a"}, node="n1", namespace="team",
                containers=[{"name": "main", "image": "busybox:1.36",
                             "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}}}])
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.7", "startTime": "2026-11-28T08:00:00Z",
                     "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None,
                                     "lastTransitionTime": "2026-11-28T08:00:00Z"}],
                     "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                            "state": {"running": {"startedAt": "2026-11-28T08:00:00Z"}}}]}
    return pod


def ready_node(name: str) -> JSON:
    return b.node(name, ready="True", allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"})


def provreq_with_status(name: str) -> JSON:
    pr = b.provreq(name)
    pr["metadata"]["namespace"] = "team"
    pr["status"] = {"conditions": [b.condition("Provisioned")]}
    return pr


def rtype(srv: EmbeddedAPIServer, obj: JSON) -> ResourceType:
    for rt in srv.registry.types():
        if rt.api_version == obj["apiVersion"] and rt.kind == obj["kind"]:
            return rt
    raise AssertionError(obj["kind"])


def through_the_api(srv: EmbeddedAPIServer, obj: JSON, status_manager: str | None) -> JSON:
    """What a create (as ``gangscale-load``), then the status patch (as ``status_manager``), store."""
    rt = rtype(srv, obj)
    ns = obj["metadata"].get("namespace", "") if rt.namespaced else ""
    body = {k: v for k, v in obj.items() if k != "status"} if status_manager else obj
    out = srv.api.create(rt, ns, body, WriteContext(manager="gangscale-load"))
    if status_manager and "status" in obj:
        srv.api.patch(rt, ns, out["metadata"]["name"], MERGE, json.dumps({"status": obj["status"]}).encode(),
                      "status", WriteContext(manager=status_manager), None)
    stored = srv.store.get(storage_key(rt), ns, obj["metadata"]["name"])
    assert stored is not None
    return stored


def without_rv(obj: JSON) -> JSON:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}}


CASES: list[tuple[str, JSON, str | None]] = [
    ("pod-with-kubelet-status", running_pod("p1"), "kubelet"),
    ("pod-without-status", b.pod("p2", namespace="team"), "kubelet"),
    ("pod-status-ignored-without-status-manager", running_pod("p3"), None),
    ("node-status-on-create", ready_node("n1"), None),
    ("node-status-as-the-kubelet-writes-it", ready_node("n2"), "kubelet"),
    ("custom-resource-status-subresource", provreq_with_status("pr1"), "controller"),
    ("namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}, None),
]


@pytest.mark.parametrize(("obj", "status_manager"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_loaded_object_is_what_the_api_would_store(obj: JSON, status_manager: str | None) -> None:
    loaded, normal = server(), server()
    for srv in (loaded, normal):
        srv.load([NS])
    assert loaded.load([obj], status_manager=status_manager) == 1
    rt = rtype(loaded, obj)
    ns = obj["metadata"].get("namespace", "") if rt.namespaced else ""
    got = loaded.store.get(storage_key(rt), ns, obj["metadata"]["name"])
    assert got is not None
    want = through_the_api(normal, obj, status_manager)
    assert without_rv(got) == without_rv(want)
    assert json.dumps(without_rv(got)) == json.dumps(without_rv(want))  # the same key order: the same bytes


def test_a_load_is_one_revision_and_one_added_event_per_object() -> None:
    srv = server()
    srv.load([NS])
    rt = rtype(srv, running_pod("x"))
    watcher, _ = open_watch(srv.store, WatchRequest(rt, None, lambda o: True, str(srv.store.resource_version)))
    before = srv.store.resource_version
    assert srv.load([running_pod(f"p{i}") for i in range(3)], status_manager="kubelet") == 3
    assert srv.store.resource_version == before + 3
    events = [watcher.queue.get_nowait() for _ in range(3)]
    assert [(e[0], e[1]["status"]["phase"]) for e in events if e is not None] == [("ADDED", "Running")] * 3


BAD: list[tuple[str, JSON, int, str]] = [
    ("invalid-container-name", b.pod("bad", namespace="team", containers=[{"name": "Bad_Name", "image": "i"}]),
     422, 'Pod "bad" is invalid'),
    ("missing-namespace", b.pod("lost", namespace="nowhere"), 404, 'namespaces "nowhere" not found'),
    ("bad-quantity", b.pod("q", namespace="team", containers=[
        {"name": "c", "image": "i", "resources": {"requests": {"cpu": "lots"}}}]), 400, "quantities must match"),
    ("unknown-kind", {"apiVersion": "v1", "kind": "Gadget", "metadata": {"name": "g"}}, 400, "Gadget"),
    ("already-exists", running_pod("p0"), 409, 'pods "p0" already exists'),
]


@pytest.mark.parametrize(("obj", "code", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_load_checks_each_object_as_a_create_does(obj: JSON, code: int, message: str) -> None:
    srv = server()
    srv.load([NS, running_pod("p0")], status_manager="kubelet")
    with pytest.raises(StatusError) as err:
        srv.load([running_pod("before"), obj, running_pod("after")], status_manager="kubelet")
    assert err.value.code == code
    assert message in err.value.message
    pods = storage_key(rtype(srv, running_pod("x")))
    assert srv.store.get(pods, "team", "before") is not None  # the objects before the bad one stay loaded
    assert srv.store.get(pods, "team", "after") is None


@pytest.mark.parametrize("encode", [False, True], ids=["lazy", "encode"])
def test_encode_computes_the_encodings_a_first_list_would(monkeypatch: pytest.MonkeyPatch, encode: bool) -> None:
    monkeypatch.setattr(store, "VERIFY_ENCODINGS", False)  # it encodes every object as it is stored
    srv = server()
    srv.load([NS])
    pods = storage_key(rtype(srv, running_pod("x")))
    srv.load([running_pod(f"p{i}") for i in range(4)], status_manager="kubelet", encode=encode)
    assert srv.store.encodings(pods) == (4 if encode else 0)
    for obj in srv.store.items(pods):
        assert srv.store.encoded(pods, obj) == json.dumps(obj).encode()
