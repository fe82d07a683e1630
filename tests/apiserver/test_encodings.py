"""Cached encodings (``Store.encoded``): LIST pages, GETs and watch events are written from each stored object's JSON
encoding, computed once; the bytes must stay those ``json.dumps`` gives for the same answer, a changed object must
show its new bytes, a converted version must not get the stored version's bytes, and the cache must shrink with the
window.

(``conftest.py`` also turns on ``VERIFY_ENCODINGS`` for every test here: a stale cached encoding fails where it is
served.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.apiserver.conversion import storage_view
from gangscale.sim.apiserver.listing import ListOptions
from gangscale.sim.apiserver.resources import ResourceType, StorageKey, storage_key
from gangscale.sim.apiserver.store import Event, Store
from gangscale.sim.apiserver.watching import WatchRequest, open_watch
from tests import builders as b

JSON = dict[str, Any]
NS = "default"
MERGE = "application/merge-patch+json"
HANG_GUARD = 5.0


class _Query:
    """What ``EmbeddedAPIServer._matcher`` reads of a request."""

    def __init__(self, query: JSON) -> None:
        self.query = {k: str(v) for k, v in query.items() if v is not None}


def rtype(apiserver: EmbeddedAPIServer, res: Resource) -> ResourceType:
    rt = apiserver.registry.lookup(res.group, res.version, res.plural)
    assert rt is not None
    return rt


async def raw_get(http: KubeHTTP, path: str, query: JSON | None = None) -> bytes:
    resp = await http._call("GET", path, query=query)
    async with resp:
        assert resp.status == 200, await resp.text()
        return await resp.read()


def expected_list(apiserver: EmbeddedAPIServer, res: Resource, ns: str | None, query: JSON) -> bytes:
    """The list answer as the server built it before encodings were cached: ``json.dumps`` of the dict answer."""
    rt = rtype(apiserver, res)
    matcher = apiserver._matcher(_Query(query), rt)  # type: ignore[arg-type]
    opts = ListOptions(limit=int(query.get("limit") or 0), continue_token=query.get("continue") or "",
                       resource_version=query.get("resourceVersion", ""))
    body = apiserver.api.list_objects(rt, ns, matches=matcher, options=opts, filtered=not matcher.empty)
    return json.dumps(body).encode()


def fresh(rt: ResourceType, stored: JSON) -> JSON:
    """A stored object as ``rt``'s version shows it, through a fresh encoding."""
    return json.loads(json.dumps(storage_view(rt, stored)))


async def populate(http: KubeHTTP) -> None:
    for i, (app, node) in enumerate([("a", "n1"), ("b", None), ("a", "n2"), ("c", "n1")]):
        await http.request("POST", b.PODS.path(NS), body=b.pod(f"p{i}", labels={"app": app}, node=node))
    await http.request("PATCH", b.PODS.path(NS, "p0", "status"), body={"status": {"phase": "Running"}},
                       content_type=MERGE)
    for name in ("n1", "n2", "n3"):
        await http.request("POST", b.NODES.path(), body=b.node(name, ready="True"))
    await http.request("POST", b.PROVREQS.path(NS), body=b.provreq("pr-v1"))
    await http.request("POST", b.PROVREQS_BETA.path(NS),
                       body=b.provreq("pr-beta", api_version="autoscaling.x-k8s.io/v1beta1"))
    await http.request("POST", b.EVENTS.path(NS), body={
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "core-1"}, "reason": "Scheduled",
        "message": "é ünïcode", "involvedObject": {"kind": "Pod", "name": "p0", "namespace": NS}})
    await http.request("POST", b.EVENTS_V1.path(NS), body={
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "new-1"},
        "eventTime": "2026-11-21T00:00:00.000000Z", "reportingController": "gangscale.io/controller",
        "reportingInstance": "gangscale-0", "action": "ScaleUp", "reason": "Provisioned", "type": "Normal",
        "note": "2 nodes", "regarding": {"kind": "ProvisioningRequest", "name": "pr-v1", "namespace": NS}})


# --- LIST and GET bytes -----------------------------------------------------------------------------------------

LISTS: list[tuple[str, Resource, str | None, JSON]] = [
    ("pods-every-namespace", b.PODS, None, {}),
    ("pods-one-namespace-paged", b.PODS, NS, {"limit": 2}),
    ("pods-field-selector-paged", b.PODS, None,
     {"limit": 1, "fieldSelector": "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"}),
    ("pods-label-selector", b.PODS, NS, {"labelSelector": "app in (a,c)"}),
    ("pods-resource-version-0", b.PODS, None, {"resourceVersion": "0", "limit": 1}),
    ("nodes-paged", b.NODES, None, {"limit": 2}),
    ("nodes-field-selector", b.NODES, None, {"fieldSelector": "metadata.name!=n2"}),
    ("custom-resource-stored-version", b.PROVREQS, NS, {"limit": 1}),
    ("custom-resource-other-version", b.PROVREQS_BETA, NS, {"limit": 1}),
    ("core-events", b.EVENTS, NS, {}),
    ("events-k8s-io-converted", b.EVENTS_V1, NS, {}),
]


@pytest.mark.parametrize(("res", "ns", "query"), [c[1:] for c in LISTS], ids=[c[0] for c in LISTS])
async def test_list_pages_are_the_bytes_of_a_fresh_encoding(apiserver: EmbeddedAPIServer, http: KubeHTTP,
                                                            res: Resource, ns: str | None, query: JSON) -> None:
    await populate(http)
    rt = rtype(apiserver, res)
    key = storage_key(rt)
    for attempt in ("cold cache", "warm cache"):
        token: str | None = None
        served = 0
        while True:
            page_query = {**query, "continue": token}
            raw = await raw_get(http, res.path(ns), page_query)
            assert raw == expected_list(apiserver, res, ns, page_query), attempt
            page = json.loads(raw)
            for item in page["items"]:
                meta = item["metadata"]
                stored = apiserver.store.get(key, meta.get("namespace", ""), meta["name"])
                assert stored is not None
                assert item == fresh(rt, stored), attempt
                assert item["apiVersion"] == rt.api_version
            served += len(page["items"])
            token = page["metadata"].get("continue")
            if not token:
                break
        assert served > 0


GETS: list[tuple[str, Resource, str | None, str]] = [
    ("pod", b.PODS, NS, "p0"),
    ("node", b.NODES, None, "n1"),
    ("custom-resource-stored-version", b.PROVREQS, NS, "pr-beta"),
    ("custom-resource-other-version", b.PROVREQS_BETA, NS, "pr-v1"),
    ("core-event", b.EVENTS, NS, "new-1"),
    ("events-k8s-io-converted", b.EVENTS_V1, NS, "core-1"),
]


@pytest.mark.parametrize(("res", "ns", "name"), [c[1:] for c in GETS], ids=[c[0] for c in GETS])
async def test_get_is_the_bytes_of_a_fresh_encoding(apiserver: EmbeddedAPIServer, http: KubeHTTP,
                                                    res: Resource, ns: str | None, name: str) -> None:
    await populate(http)
    rt = rtype(apiserver, res)
    for _ in range(2):
        raw = await raw_get(http, res.path(ns, name))
        assert raw == json.dumps(apiserver.api.get(rt, ns or "", name)).encode()
        assert json.loads(raw)["apiVersion"] == rt.api_version


async def test_a_table_is_not_served_from_the_cache(http: KubeHTTP) -> None:
    await populate(http)
    await raw_get(http, b.PODS.path(NS))  # caches every pod
    client = http.api_client
    resp = await client.rest_client.pool_manager.get(f"{client.configuration.host}{b.PODS.path(NS)}",
                                                     headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    async with resp:
        table = await resp.json()
    assert table["kind"] == "Table"
    assert [row["cells"][0] for row in table["rows"]] == ["p0", "p1", "p2", "p3"]


# --- a changed object shows its new bytes ------------------------------------------------------------------------

async def _merge_patch(http: KubeHTTP) -> None:
    await http.request("PATCH", b.PODS.path(NS, "p1"), body={"metadata": {"labels": {"changed": "yes"}}},
                       content_type=MERGE)


async def _put(http: KubeHTTP) -> None:
    pod = await http.request("GET", b.PODS.path(NS, "p1"))
    pod["metadata"]["labels"]["changed"] = "yes"
    await http.request("PUT", b.PODS.path(NS, "p1"), body=pod)


async def _status(http: KubeHTTP) -> None:
    await http.request("PATCH", b.PODS.path(NS, "p1", "status"), body={"status": {"phase": "Failed"}},
                       content_type=MERGE)


async def _apply(http: KubeHTTP) -> None:
    await http.request("PATCH", b.PODS.path(NS, "p1"), query={"fieldManager": "tester"},
                       body={"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": "p1", "labels": {"changed": "yes"}}},
                       content_type="application/apply-patch+yaml")


async def _bind(http: KubeHTTP) -> None:
    await http.request("POST", b.PODS.path(NS, "p1", "binding"),
                       body={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
                             "target": {"kind": "Node", "name": "n3"}})


async def _recreate(http: KubeHTTP) -> None:
    await http.request("DELETE", b.PODS.path(NS, "p1"))
    await http.request("POST", b.PODS.path(NS), body=b.pod("p1", labels={"changed": "yes"}))


async def _finalize(http: KubeHTTP) -> None:
    await http.request("PATCH", b.PODS.path(NS, "p1"), body={"metadata": {"finalizers": ["x/y"]}},
                       content_type=MERGE)
    await http.request("DELETE", b.PODS.path(NS, "p1"))  # only marks it: deletionTimestamp


CHANGES: list[tuple[str, Callable[[KubeHTTP], Awaitable[None]]]] = [
    ("merge-patch", _merge_patch),
    ("put", _put),
    ("status-subresource", _status),
    ("server-side-apply", _apply),
    ("binding", _bind),
    ("delete-and-recreate", _recreate),
    ("deletion-timestamp", _finalize),
]


@pytest.mark.parametrize("change", [c for _, c in CHANGES], ids=[n for n, _ in CHANGES])
async def test_a_changed_object_is_listed_with_its_new_bytes(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, change: Callable[[KubeHTTP], Awaitable[None]]) -> None:
    await populate(http)
    rt = rtype(apiserver, b.PODS)
    first = json.loads(await raw_get(http, b.PODS.path(NS), {"limit": 1}))  # pages at the old revision
    before = json.loads(await raw_get(http, b.PODS.path(NS)))
    get_before = json.loads(await raw_get(http, b.PODS.path(NS, "p1")))
    await change(http)
    after = json.loads(await raw_get(http, b.PODS.path(NS)))
    stored = apiserver.store.get(storage_key(rt), NS, "p1")
    assert stored is not None
    changed = [p for p in after["items"] if p["metadata"]["name"] == "p1"]
    assert changed == [fresh(rt, stored)]
    assert changed[0] != next(p for p in before["items"] if p["metadata"]["name"] == "p1")
    assert json.loads(await raw_get(http, b.PODS.path(NS, "p1"))) == changed[0] != get_before
    # The rest of the pages of the first list still read the old revision: the old bytes.
    rest = json.loads(await raw_get(http, b.PODS.path(NS), {"limit": 10, "continue": first["metadata"]["continue"]}))
    assert first["items"] + rest["items"] == before["items"]


async def test_a_custom_resource_at_another_version_is_converted_not_served_as_stored(
        apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    await populate(http)
    stored_version = json.loads(await raw_get(http, b.PROVREQS.path(NS)))  # caches the stored encodings
    other = json.loads(await raw_get(http, b.PROVREQS_BETA.path(NS)))
    assert {p["apiVersion"] for p in stored_version["items"]} == {"autoscaling.x-k8s.io/v1"}
    assert {p["apiVersion"] for p in other["items"]} == {"autoscaling.x-k8s.io/v1beta1"}
    assert [{**p, "apiVersion": ""} for p in other["items"]] == \
        [{**p, "apiVersion": ""} for p in stored_version["items"]]
    one = json.loads(await raw_get(http, b.PROVREQS_BETA.path(NS, "pr-v1")))
    assert one["apiVersion"] == "autoscaling.x-k8s.io/v1beta1"


# --- watch events -------------------------------------------------------------------------------------------------

async def watch_lines(http: KubeHTTP, path: str, query: JSON, n: int) -> list[bytes]:
    resp = await http._call("GET", path, query={**query, "watch": "true", "timeoutSeconds": "5"})
    out: list[bytes] = []
    async with resp:
        while len(out) < n:
            line = await asyncio.wait_for(resp.content.readline(), HANG_GUARD)
            assert line, f"stream ended after {out}"
            out.append(line)
    return out


WATCHES: list[tuple[str, Resource, JSON]] = [
    ("pods", b.PODS, {}),
    ("pods-label-selector", b.PODS, {"labelSelector": "app=a"}),
    ("custom-resource-stored-version", b.PROVREQS, {}),
    ("custom-resource-other-version", b.PROVREQS_BETA, {}),
    ("events-k8s-io-converted", b.EVENTS_V1, {}),
]


async def _changes(http: KubeHTTP, res: Resource) -> None:
    if res.plural == "pods":
        await http.request("POST", b.PODS.path(NS), body=b.pod("w1", labels={"app": "a"}))
        await http.request("PATCH", b.PODS.path(NS, "w1"), body={"metadata": {"annotations": {"x": "1"}}},
                           content_type=MERGE)
        await http.request("PATCH", b.PODS.path(NS, "w1"), body={"metadata": {"labels": {"app": "b"}}},
                           content_type=MERGE)  # leaves app=a: DELETED for the filtered watch
        await http.request("PATCH", b.PODS.path(NS, "w1"), body={"metadata": {"labels": {"app": "a"}}},
                           content_type=MERGE)  # back: ADDED
        await http.request("DELETE", b.PODS.path(NS, "w1"))
    elif res.plural == "provisioningrequests":
        await http.request("POST", b.PROVREQS.path(NS), body=b.provreq("w1"))
        await http.request("PATCH", b.PROVREQS.path(NS, "w1"), body={"metadata": {"labels": {"x": "1"}}},
                           content_type=MERGE)
        await http.request("DELETE", b.PROVREQS.path(NS, "w1"))
    else:
        await http.request("POST", b.EVENTS.path(NS), body={
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "w1"}, "reason": "R", "message": "m",
            "involvedObject": {"kind": "Pod", "name": "p0", "namespace": NS}})
        await http.request("PATCH", b.EVENTS.path(NS, "w1"), body={"message": "m2"}, content_type=MERGE)
        await http.request("DELETE", b.EVENTS.path(NS, "w1"))


def expected_lines(apiserver: EmbeddedAPIServer, res: Resource, since: int, query: JSON) -> list[bytes]:
    """What the watch sends, built from the event log without the cache (the projection written out again)."""
    rt = rtype(apiserver, res)
    matcher = apiserver._matcher(_Query(query), rt)  # type: ignore[arg-type]
    out = []
    for ev in apiserver.store.events_since(storage_key(rt), since):
        now = ev.type != "DELETED" and matcher(storage_view(rt, ev.obj))
        was = ev.prev is not None and matcher(storage_view(rt, ev.prev)) if ev.type != "DELETED" else \
            matcher(storage_view(rt, ev.obj))
        if ev.type == "DELETED" or (was and not now):
            if not was:
                continue
            view = storage_view(rt, ev.obj if ev.type == "DELETED" else ev.prev)  # type: ignore[arg-type]
            view["metadata"] = {**view["metadata"], "resourceVersion": str(ev.rv)}
            out.append(json.dumps({"type": "DELETED", "object": view}).encode() + b"\n")
        elif now:
            etype = "MODIFIED" if was else "ADDED"
            out.append(json.dumps({"type": etype, "object": storage_view(rt, ev.obj)}).encode() + b"\n")
    return out


@pytest.mark.parametrize(("res", "query"), [c[1:] for c in WATCHES], ids=[c[0] for c in WATCHES])
async def test_watch_events_are_the_bytes_of_a_fresh_encoding_for_every_watcher(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, res: Resource, query: JSON) -> None:
    await populate(http)
    since = apiserver.store.resource_version
    await raw_get(http, res.path(NS))  # the objects listed first: cached encodings in use
    await _changes(http, res)
    expected = expected_lines(apiserver, res, since, query)
    assert len(expected) >= 3
    watched = await asyncio.gather(*(watch_lines(http, res.path(NS), {**query, "resourceVersion": str(since)},
                                                 len(expected)) for _ in range(3)))
    for lines in watched:
        assert lines == expected


# --- one encoding per event for every watcher --------------------------------------------------------------------

PODS_KEY = StorageKey("", "pods")


def _pod(name: str, app: str = "a", **extra: Any) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"app": app},
                                                           **extra}, "spec": {"containers": []}}


FANOUT: list[tuple[str, str, str, Callable[[Store], None]]] = [
    # (case, the version watched, label selector, the change)
    ("added", "v1", "", lambda s: s.put(PODS_KEY, _pod("q"), added=True)),
    ("modified", "v1", "", lambda s: s.put(PODS_KEY, _pod("p", annotations={"x": "1"}), added=False)),
    ("deleted", "v1", "", lambda s: s.remove(PODS_KEY, NS, "p")),
    ("filtered-out-becomes-deleted", "v1", "a", lambda s: s.put(PODS_KEY, _pod("p", app="b"), added=False)),
]


@pytest.mark.parametrize(("selector", "change"), [c[2:] for c in FANOUT], ids=[c[0] for c in FANOUT])
async def test_an_event_is_encoded_once_for_all_its_watchers(
        apiserver: EmbeddedAPIServer, selector: str, change: Callable[[Store], None]) -> None:
    store = Store()
    store.put(PODS_KEY, _pod("p"), added=True)
    rt = rtype(apiserver, b.PODS)
    matcher = apiserver._matcher(_Query({"labelSelector": f"app={selector}"} if selector else {}), rt)  # type: ignore[arg-type]
    watchers = [open_watch(store, WatchRequest(rt, None, matcher, str(store.resource_version)))[0]
                for _ in range(3)]
    change(store)
    items = [w.queue.get_nowait() for w in watchers]
    assert all(item is not None for item in items)
    raws = [item[2] for item in items if item is not None]
    assert raws[0] is not None and all(raw is raws[0] for raw in raws)
    etype, obj, raw = items[0]  # type: ignore[misc]
    assert raw == json.dumps(obj).encode()
    current = store.get(PODS_KEY, NS, "q" if etype == "ADDED" else "p")
    if etype != "DELETED":
        assert current is not None and raw is store.encoded(PODS_KEY, current)  # the LIST pages' bytes too


# --- the cache shrinks with the window ------------------------------------------------------------------------------

def retained(store: Store, key: StorageKey) -> int:
    """Older versions the window still reaches (objects, not deletions), besides the live objects."""
    space = store._spaces[key]
    return sum(1 for path, chain in space.versions.items() for _, obj in chain
               if obj is not None and space.objects.get(path) is not obj)


def live(store: Store, key: StorageKey) -> int:
    return sum(1 for _ in store.items(key))


def read_everything(store: Store, key: StorageKey) -> None:
    """Serve every object every readable revision holds (as LIST pages and Exact lists would)."""
    for rv in range(store.horizon(key), store.resource_version + 1):
        for path, obj in store.scan(key, rv):
            store.encoded(key, obj, path)


@pytest.mark.parametrize("window", [0, 1, 3, 10], ids=lambda w: f"window-{w}")
@pytest.mark.parametrize("watching", [False, True], ids=["no-watch", "watched"])
async def test_the_cache_holds_one_encoding_per_live_object_and_retained_version(
        apiserver: EmbeddedAPIServer, window: int, watching: bool) -> None:
    store = Store(window=window)
    rt = rtype(apiserver, b.PODS)
    if watching:
        matcher = apiserver._matcher(_Query({}), rt)  # type: ignore[arg-type]
        watcher, _ = open_watch(store, WatchRequest(rt, None, matcher, "0"))
    for i in range(20):
        store.put(PODS_KEY, _pod(f"p{i:02d}"), added=True)
    read_everything(store, PODS_KEY)
    for i in range(0, 20, 2):
        store.put(PODS_KEY, _pod(f"p{i:02d}", annotations={"v": "2"}), added=False)
        read_everything(store, PODS_KEY)
    assert store.encodings(PODS_KEY) == live(store, PODS_KEY) + retained(store, PODS_KEY)
    for i in range(15):
        store.remove(PODS_KEY, NS, f"p{i:02d}")
    read_everything(store, PODS_KEY)
    assert store.encodings(PODS_KEY) == live(store, PODS_KEY) + retained(store, PODS_KEY)
    # Writes to other objects push the deletions out of the window: their objects' bytes are gone.
    for i in range(window + 1):
        store.put(PODS_KEY, _pod(f"z{i:02d}"), added=True)
    assert retained(store, PODS_KEY) == 0
    assert store.encodings(PODS_KEY) <= live(store, PODS_KEY)
    read_everything(store, PODS_KEY)
    assert store.encodings(PODS_KEY) == live(store, PODS_KEY) == 5 + window + 1
    store.compact()
    assert store.encodings(PODS_KEY) == live(store, PODS_KEY)
    store.drop_resource(PODS_KEY)
    assert store.encodings(PODS_KEY) == 0
    if watching:
        assert watcher.closed


def test_a_copy_or_a_deleted_event_object_is_encoded_but_not_kept() -> None:
    store = Store(window=0)
    store.put(PODS_KEY, _pod("p"), added=True)
    stored = store.get(PODS_KEY, NS, "p")
    assert stored is not None
    kept = store.encodings(PODS_KEY)  # 1 when VERIFY_ENCODINGS encodes every committed object, else 0
    copy = json.loads(json.dumps(stored))
    assert store.encoded(PODS_KEY, copy) == json.dumps(stored).encode()
    assert store.encodings(PODS_KEY) == kept
    seen: list[Event] = []
    store.listeners.append(lambda key, ev: seen.append(ev))
    store.remove(PODS_KEY, NS, "p")
    assert store.encoded(PODS_KEY, seen[0].obj) == json.dumps(seen[0].obj).encode()
    assert store.encodings(PODS_KEY) == 0


# --- write answers ------------------------------------------------------------------------------------------------

async def _raw_write(http: KubeHTTP, method: str, path: str, body: JSON, content_type: str = "application/json",
                     query: JSON | None = None) -> bytes:
    resp = await http._call(method, path, query=query, body=body, content_type=content_type)
    async with resp:
        assert resp.status in (200, 201), await resp.text()
        return await resp.read()


WRITES: list[tuple[str, str, str, JSON, str, JSON | None]] = [
    # (case, method, path, body, content type, query)
    ("create", "POST", b.PODS.path(NS), b.pod("w1", labels={"app": "a"}), "application/json", None),
    ("merge-patch", "PATCH", b.PODS.path(NS, "p1"), {"metadata": {"labels": {"x": "1"}}}, MERGE, None),
    ("no-op-patch", "PATCH", b.PODS.path(NS, "p1"), {"metadata": {"labels": {"app": "b"}}}, MERGE, None),
    ("status-patch", "PATCH", b.PODS.path(NS, "p1", "status"), {"status": {"phase": "Running"}}, MERGE, None),
    ("apply", "PATCH", b.PODS.path(NS, "p1"), {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p1", "labels": {"y": "2"}}}, "application/apply-patch+yaml", {"fieldManager": "t"}),
    ("custom-resource-other-version", "PATCH", b.PROVREQS_BETA.path(NS, "pr-v1"),
     {"metadata": {"labels": {"x": "1"}}}, MERGE, None),
    ("dry-run-create", "POST", b.PODS.path(NS), b.pod("dry"), "application/json", {"dryRun": "All"}),
]


@pytest.mark.parametrize(("method", "path", "body", "content_type", "query"), [c[1:] for c in WRITES],
                         ids=[c[0] for c in WRITES])
async def test_write_answers_are_the_bytes_of_the_object_as_committed(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, method: str, path: str, body: JSON, content_type: str,
        query: JSON | None) -> None:
    await populate(http)
    raw = await _raw_write(http, method, path, body, content_type, query)
    answer = json.loads(raw)
    res = b.PROVREQS_BETA if "provisioningrequests" in path else b.PODS
    rt = rtype(apiserver, res)
    stored = apiserver.store.get(storage_key(rt), NS, answer["metadata"]["name"])
    if query and query.get("dryRun"):
        assert stored is None
        return
    assert stored is not None
    assert raw == json.dumps(apiserver.api.get(rt, NS, answer["metadata"]["name"])).encode()
    assert answer == fresh(rt, stored)
