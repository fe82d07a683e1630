"""Reflectors that keep records, not objects, against the embedded API server: the controller's nodes, bound pods
and Ray worker pods (issue 27). What is cached is the transform's record; an event is emitted only when the record
changed; None keeps nothing; a pod that leaves the field selector is reported DELETED; one object the transform
fails on is skipped and logged, and every other is kept."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gangscale.controller.logic.view import BOUND_PODS, NodeInfo, PodInfo, parse_node, parse_pod
from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.transport import KubeHTTP
from gangscale.sources.raycluster import WORKER_PODS, worker_pod
from tests import builders as b
from tests.conftest import wait_for

MERGE = "application/merge-patch+json"
JSON = dict[str, Any]


@contextlib.asynccontextmanager
async def running(reflector: Reflector[Any]) -> AsyncIterator[list[ReflectorEvent[Any]]]:
    events: list[ReflectorEvent[Any]] = []
    reflector.add_handler(events.append)
    task = asyncio.create_task(reflector.run(), name="reflector")
    try:
        await asyncio.wait_for(reflector.synced.wait(), 5)
        yield events
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def create_pod(http: KubeHTTP, name: str, *, node: str | None = None, labels: dict[str, str] | None = None,
                     cpu: str = "1") -> None:
    body = b.pod(name, node=node, labels=labels, containers=[
        {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}])
    await http.request("POST", b.PODS.path("default"), body=body)


async def set_status(http: KubeHTTP, name: str, status: JSON) -> None:
    await http.request("PATCH", b.PODS.path("default", name, "status"), body={"status": status}, content_type=MERGE)


def running_status(ip: str) -> JSON:
    return {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}


async def test_records_are_cached_and_only_their_changes_are_events(http: KubeHTTP) -> None:
    """A kubelet rewriting a bound pod's status (IP, conditions) changes nothing the controller reads: no event, the
    record stays; the pod finishing is an event (it leaves the selection)."""
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await create_pod(http, "listed", node="n1")
    async with running(Reflector(http, b.PODS, field_selector=BOUND_PODS, transform=parse_pod)) as events:
        await create_pod(http, "watched", node="n1", cpu="2")
        await wait_for(lambda: [(e.type, e.key[1]) for e in events] == [("ADDED", "listed"), ("ADDED", "watched")])
        assert all(isinstance(e.obj, PodInfo) for e in events)
        assert events[1].obj.node == "n1" and events[1].obj.requests["cpu"] == 2000
        await set_status(http, "watched", running_status("10.0.0.7"))
        await set_status(http, "watched", {"podIP": "10.0.0.8"})
        await create_pod(http, "marker", node="n1")  # every event before it has been handled once it arrives
        await wait_for(lambda: events[-1].key[1] == "marker")
        assert [(e.type, e.key[1]) for e in events[2:]] == [("ADDED", "marker")]
        await set_status(http, "watched", {"phase": "Succeeded"})
        await wait_for(lambda: events[-1].key[1] == "watched")
        assert (events[-1].type, events[-1].obj.requests["cpu"]) == ("DELETED", 2000)


async def test_pending_pods_are_not_listed_and_a_binding_adds_the_pod(http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await create_pod(http, "pending")
    pods = Reflector(http, b.PODS, field_selector=BOUND_PODS, transform=parse_pod)
    async with running(pods) as events:
        assert pods.cache == {} and events == []
        await http.request("POST", b.PODS.path("default", "pending", "binding"), body={
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pending"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
        await wait_for(lambda: [(e.type, e.key) for e in events] == [("ADDED", ("default", "pending"))])
        assert pods.get("default", "pending") == PodInfo("n1", events[0].obj.requests, False, None)


async def test_a_node_heartbeat_is_no_event_and_a_taint_is(http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1", ready="True", allocatable={"cpu": "8"}))
    nodes = Reflector(http, b.NODES, transform=parse_node)
    async with running(nodes) as events:
        assert [e.type for e in events] == ["ADDED"] and isinstance(events[0].obj, NodeInfo)
        await http.request("PATCH", b.NODES.path(name="n1", sub="status"), body={"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "",
                            "lastHeartbeatTime": "2026-11-28T10:00:00Z"}],
            "images": [{"names": ["busybox:1.36"], "sizeBytes": 2_000_000}]}}, content_type=MERGE)
        await http.request("PATCH", b.NODES.path(name="n1"), body={"spec": {"taints": [
            {"key": "maintenance", "effect": "NoSchedule"}]}}, content_type=MERGE)
        await wait_for(lambda: len(events) == 2)
        assert events[1].type == "MODIFIED" and events[1].old is events[0].obj
        assert [t.key for t in events[1].obj.state.taints] == ["maintenance"]


async def test_ray_worker_pods_are_kept_bound_or_not_and_other_pods_are_not_listed(http: KubeHTTP) -> None:
    worker = {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "gpu"}
    await create_pod(http, "w-pending", labels=worker)
    await create_pod(http, "head", labels={**worker, "ray.io/node-type": "head"})
    await create_pod(http, "other")
    workers = Reflector(http, b.PODS, label_selector=WORKER_PODS, transform=worker_pod)
    async with running(workers):
        assert list(workers.cache) == [("default", "w-pending")]
        cluster, record = workers.cache[("default", "w-pending")]
        assert cluster == ("default", "rc") and (record.group, record.node) == ("gpu", None)


def size_label(obj: JSON) -> str:
    return str(obj["metadata"]["labels"]["size"])  # KeyError for a node without the label


async def test_an_object_the_transform_fails_on_is_logged_and_absent_and_the_rest_are_kept(
        http: KubeHTTP, caplog: pytest.LogCaptureFixture) -> None:
    for name, labels in (("a", {"size": "1"}), ("b", {}), ("c", {"size": "3"})):
        await http.request("POST", b.NODES.path(), body=b.node(name, labels=labels))
    nodes = Reflector(http, b.NODES, transform=size_label)
    with caplog.at_level(logging.ERROR, "gangscale.kube.reflector"):
        async with running(nodes) as events:
            assert {key[1]: record for key, record in nodes.cache.items()} == {"a": "1", "c": "3"}
            assert [r.getMessage() for r in caplog.records] == ["reflector nodes: cannot read /b; not kept"]
            # "a" becomes unreadable too: what was kept of it is reported gone, and the watch goes on.
            await http.request("PATCH", b.NODES.path(name="a"), body={"metadata": {"labels": {"size": None}}},
                               content_type=MERGE)
            await http.request("PATCH", b.NODES.path(name="c"), body={"metadata": {"labels": {"size": "4"}}},
                               content_type=MERGE)
            await wait_for(lambda: len(events) == 4)
            assert [(e.type, e.key[1], e.obj) for e in events[2:]] == [("DELETED", "a", "1"), ("MODIFIED", "c", "4")]


async def test_an_object_the_transform_keeps_nothing_of_is_absent(http: KubeHTTP) -> None:
    for name in ("a", "b"):
        await http.request("POST", b.NODES.path(), body=b.node(name, labels={"keep": "no" if name == "b" else "yes"}))
    nodes = Reflector(http, b.NODES, transform=lambda obj: obj["metadata"]["labels"]["keep"] == "yes" or None)
    async with running(nodes) as events:
        assert list(nodes.cache) == [("", "a")]
        await http.request("PATCH", b.NODES.path(name="b"), body={"metadata": {"labels": {"keep": "yes"}}},
                           content_type=MERGE)
        await http.request("PATCH", b.NODES.path(name="a"), body={"metadata": {"labels": {"keep": "no"}}},
                           content_type=MERGE)
        await wait_for(lambda: len(events) == 3)
        assert [(e.type, e.key[1]) for e in events] == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
