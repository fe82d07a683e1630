"""Watch semantics over HTTP: resourceVersion, event types, bookmarks, timeouts, 410 Gone, filters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.watch import Watch

from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests import builders as b

JSON = dict[str, Any]
HANG_GUARD = 5.0


async def collect(stream: AsyncIterator[JSON], n: int, *, skip_bookmarks: bool = True) -> list[tuple[str, JSON]]:
    out: list[tuple[str, JSON]] = []

    async def run() -> None:
        async for ev in stream:
            if skip_bookmarks and ev["type"] == "BOOKMARK":
                continue
            out.append((ev["type"], ev["object"]))
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), HANG_GUARD)
    return out


async def test_watch_from_resource_version_sees_changes_in_order(http: KubeHTTP) -> None:
    listing = await http.request("GET", b.NODES.path())
    rv = listing["metadata"]["resourceVersion"]
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await http.request("PATCH", b.NODES.path(name="n1"), body={"metadata": {"labels": {"x": "1"}}},
                       content_type="application/merge-patch+json")
    await http.request("DELETE", b.NODES.path(name="n1"))
    events = await collect(http.stream(b.NODES.path(), {"resourceVersion": rv}), 3)
    assert [t for t, _ in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3


async def test_watch_without_resource_version_starts_with_synthetic_added(http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await http.request("POST", b.NODES.path(), body=b.node("n2"))
    events = await collect(http.stream(b.NODES.path(), {}), 2)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "n1"), ("ADDED", "n2")]


@pytest.mark.parametrize("flag", ["true", "True", "1"])
async def test_watch_flag_spellings(apiserver: EmbeddedAPIServer, http: KubeHTTP, flag: str) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    resp = await http._call("GET", b.NODES.path(), query={"watch": flag, "resourceVersion": "0",
                                                          "timeoutSeconds": "1"})
    async with resp:
        line = await asyncio.wait_for(resp.content.readline(), HANG_GUARD)
    assert b'"type": "ADDED"' in line


async def test_bookmarks_carry_current_resource_version(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    created = await http.request("POST", b.NODES.path(), body=b.node("n1"))
    rv = created["metadata"]["resourceVersion"]
    stream = http.stream(b.NODES.path(), {"resourceVersion": rv, "allowWatchBookmarks": "true"})
    first = await asyncio.wait_for(stream.__anext__(), HANG_GUARD)
    await stream.aclose()
    assert first["type"] == "BOOKMARK"
    assert first["object"]["kind"] == "Node"
    assert int(first["object"]["metadata"]["resourceVersion"]) >= int(rv)


async def test_no_bookmarks_unless_asked(http: KubeHTTP) -> None:
    events = [ev async for ev in http.stream(b.NODES.path(), {"resourceVersion": "1", "timeoutSeconds": "1"})]
    assert all(ev["type"] != "BOOKMARK" for ev in events)


async def test_timeout_seconds_ends_the_stream(http: KubeHTTP) -> None:
    async def drain() -> list[JSON]:
        return [ev async for ev in http.stream(b.NODES.path(), {"resourceVersion": "1", "timeoutSeconds": "1"})]

    assert await asyncio.wait_for(drain(), HANG_GUARD) == []


async def test_old_resource_version_gets_410_expired(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    start = (await http.request("GET", b.NODES.path()))["metadata"]["resourceVersion"]
    apiserver.set_watch_window(2)
    for i in range(4):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    events = await collect(http.stream(b.NODES.path(), {"resourceVersion": start}), 1)
    etype, status = events[0]
    assert etype == "ERROR"
    assert status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {start} (")


async def test_compact_forces_410(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    created = await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await http.request("POST", b.NODES.path(), body=b.node("n2"))
    apiserver.compact()
    events = await collect(http.stream(b.NODES.path(), {"resourceVersion": created["metadata"]["resourceVersion"]}), 1)
    assert events[0][0] == "ERROR" and events[0][1]["code"] == 410


async def test_label_filtered_watch_reports_entering_and_leaving(http: KubeHTTP) -> None:
    rv = (await http.request("GET", b.PODS.path("default")))["metadata"]["resourceVersion"]
    await http.request("POST", b.PODS.path("default"), body=b.pod("p1", labels={"gang": "a"}))
    await http.request("PATCH", b.PODS.path("default", "p1"), body={"metadata": {"labels": {"gang": "b"}}},
                       content_type="application/merge-patch+json")
    await http.request("PATCH", b.PODS.path("default", "p1"), body={"metadata": {"labels": {"gang": "a"}}},
                       content_type="application/merge-patch+json")
    events = await collect(http.stream(b.PODS.path("default"), {"resourceVersion": rv, "labelSelector": "gang=a"}), 3)
    assert [t for t, _ in events] == ["ADDED", "DELETED", "ADDED"]
    # The DELETED carries the last matching state, at the revision where it stopped matching.
    assert events[1][1]["metadata"]["labels"] == {"gang": "a"}


async def test_namespace_scoped_watch(http: KubeHTTP) -> None:
    await http.request("POST", b.NAMESPACES.path(), body={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "other"}})
    rv = (await http.request("GET", "/api/v1/pods"))["metadata"]["resourceVersion"]
    await http.request("POST", b.PODS.path("other"), body=b.pod("x"))
    await http.request("POST", b.PODS.path("default"), body=b.pod("y"))
    events = await collect(http.stream(b.PODS.path("default"), {"resourceVersion": rv}), 1)
    assert events[0][1]["metadata"]["name"] == "y"


async def test_send_initial_events_ends_with_annotated_bookmark(http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    events = await collect(http.stream(b.NODES.path(), {
        "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true"}),
        2, skip_bookmarks=False)
    assert events[0][0] == "ADDED"
    assert events[1][0] == "BOOKMARK"
    assert events[1][1]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_kubernetes_asyncio_watch_helper_works(api_client: ApiClient, http: KubeHTTP) -> None:
    core = CoreV1Api(api_client)
    rv = (await http.request("GET", b.NODES.path()))["metadata"]["resourceVersion"]
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    w = Watch()
    seen = []

    async def run() -> None:
        async with w.stream(core.list_node, resource_version=rv, timeout_seconds=2) as stream:
            async for ev in stream:
                seen.append((ev["type"], ev["object"].metadata.name))
                w.stop()

    await asyncio.wait_for(run(), HANG_GUARD)
    assert seen == [("ADDED", "n1")]


async def test_a_bookmark_never_claims_a_revision_ahead_of_an_event_still_to_come(tmp_path: Any) -> None:
    """A real API server sends a bookmark from the same ordered stream as the events: after a bookmark at
    revision B, no event at or below B follows (a client resuming from B would lose it). A bookmark interval of 2 ms
    asks for one at almost every turn of the stream, while a burst of writes keeps events queued."""
    server = EmbeddedAPIServer(bookmark_interval=0.002)
    await server.start()
    try:
        from gangscale.kube.client import make_http  # noqa: PLC0415 (a client of this server, not the fixture's)

        client = await make_http(str(server.write_kubeconfig(tmp_path / "kc")))
        try:
            start = (await client.request("GET", b.NODES.path()))["metadata"]["resourceVersion"]
            stream = client.stream(b.NODES.path(), {"resourceVersion": start, "allowWatchBookmarks": "true"})
            writes = asyncio.gather(*(client.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
                                      for i in range(100)))
            seen: list[tuple[str, int]] = []

            async def read() -> None:
                added = 0
                async for ev in stream:
                    seen.append((ev["type"], int(ev["object"]["metadata"]["resourceVersion"])))
                    added += ev["type"] == "ADDED"
                    if added == 100 and ev["type"] == "BOOKMARK":  # every event, then the bookmark after them
                        return

            await asyncio.wait_for(asyncio.gather(writes, read()), 30)
            await stream.aclose()
        finally:
            await client.api_client.close()
    finally:
        await server.stop()
    bookmarks = [rv for t, rv in seen if t == "BOOKMARK"]
    assert bookmarks, "no bookmark was sent: the test did not exercise the stream's bookmark path"
    for i, (kind, rv) in enumerate(seen):
        if kind == "BOOKMARK":
            later = [e for t, e in seen[i + 1:] if t != "BOOKMARK"]
            assert all(e > rv for e in later), f"bookmark at {rv} is followed by events {later}"
