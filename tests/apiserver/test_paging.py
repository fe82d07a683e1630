"""Paged LISTs: limit/continue pages consistent at the first page's revision, the continue token, its errors,
resourceVersion/resourceVersionMatch, and the production reflector syncing through pages (issue 24).

The real semantics these tables hold the embedded server to are in ``gangscale.sim.apiserver.listing``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer, Fault
from tests import builders as b
from tests.conftest import wait_for

JSON = dict[str, Any]
NS = "default"
PODS = b.PODS.path(NS)
INVALID = "invalid continue token: continue key is not valid"


async def make_pods(http: KubeHTTP, names: list[str], ns: str = NS, **kw: Any) -> None:
    for name in names:
        await http.request("POST", b.PODS.path(ns), body=b.pod(name, **kw))


async def make_namespace(http: KubeHTTP, name: str) -> None:
    await http.request("POST", b.NAMESPACES.path(), body={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": name}})


async def pages(http: KubeHTTP, path: str, limit: int, query: JSON | None = None,
                between: Callable[[int], Awaitable[None]] | None = None) -> list[JSON]:
    """Every page of a paged list (``query`` may start from a ``continue``); ``between(n)`` runs after page ``n``
    (1-based) arrived."""
    out: list[JSON] = []
    token: str | None = (query or {}).get("continue")
    while True:
        page = await http.request("GET", path, query={**(query or {}), "limit": limit, "continue": token})
        out.append(page)
        token = page["metadata"].get("continue")
        if not token:
            return out
        if between is not None:
            await between(len(out))


def names(items: list[JSON]) -> list[str]:
    return [o["metadata"]["name"] for o in items]


def concatenated(listed: list[JSON]) -> list[JSON]:
    return [item for page in listed for item in page["items"]]


def token(payload: Any) -> str:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def api_error(call: Awaitable[Any]) -> ApiError:
    with pytest.raises(ApiError) as err:
        await call
    return err.value


# --- pages are one consistent list ----------------------------------------------------------------------------------

async def _patch_labels(http: KubeHTTP, name: str, value: str) -> None:
    await http.request("PATCH", f"{PODS}/{name}", body={"metadata": {"labels": {"changed": value}}},
                       content_type="application/merge-patch+json")


async def _create(http: KubeHTTP, name: str) -> None:
    await make_pods(http, [name])


async def _delete(http: KubeHTTP, name: str) -> None:
    await http.request("DELETE", f"{PODS}/{name}")


async def _recreate(http: KubeHTTP, name: str) -> None:
    await _delete(http, name)
    await _create(http, name)


async def _churn(http: KubeHTTP, name: str) -> None:
    for i in range(5):
        await _patch_labels(http, name, str(i))


CHANGES: list[tuple[str, Callable[[KubeHTTP], Awaitable[None]]]] = [
    ("create-after-the-cursor", lambda http: _create(http, "p05a")),
    ("create-before-the-cursor", lambda http: _create(http, "p00a")),
    ("update-a-later-object", lambda http: _patch_labels(http, "p08", "yes")),
    ("update-a-served-object", lambda http: _patch_labels(http, "p01", "yes")),
    ("delete-a-later-object", lambda http: _delete(http, "p09")),
    ("delete-a-served-object", lambda http: _delete(http, "p02")),
    ("delete-and-recreate", lambda http: _recreate(http, "p07")),
    ("update-many-times", lambda http: _churn(http, "p10")),
]


@pytest.mark.parametrize("change", [c for _, c in CHANGES], ids=[n for n, _ in CHANGES])
async def test_pages_concatenate_to_the_list_at_the_first_page_revision(
        http: KubeHTTP, change: Callable[[KubeHTTP], Awaitable[None]]) -> None:
    await make_pods(http, [f"p{i:02d}" for i in range(12)])
    whole = await http.request("GET", PODS)

    async def between(n: int) -> None:
        if n == 1:
            await change(http)

    listed = await pages(http, PODS, 4, between=between)
    assert [p["metadata"]["resourceVersion"] for p in listed] == [whole["metadata"]["resourceVersion"]] * 3
    assert concatenated(listed) == whole["items"]
    # The same revision, read at once with resourceVersionMatch=Exact, is that list too.
    exact = await http.request("GET", PODS, query={"resourceVersion": whole["metadata"]["resourceVersion"],
                                                   "resourceVersionMatch": "Exact"})
    assert exact["items"] == whole["items"]
    latest = await http.request("GET", PODS)
    assert latest["items"] != whole["items"]


SCOPES: list[tuple[str, str, list[str]]] = [
    # (what is listed, path, names in the order served: etcd key order, namespace/name)
    ("cluster-scoped", b.NODES.path(), ["n0", "n1", "n2", "n3", "n4"]),
    # "team" is a prefix of "team-a": the namespace's keys ("team/...") are one range, not "team-a/..." too.
    ("one-namespace", b.PODS.path("team"), ["x", "y", "z"]),
    ("every-namespace", "/api/v1/pods", ["x", "y", "x", "y", "x", "y", "z"]),
]


@pytest.mark.parametrize(("path", "expected"), [(p, e) for _, p, e in SCOPES], ids=[s for s, _, _ in SCOPES])
@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_namespaced_and_cluster_scoped_pages(http: KubeHTTP, path: str, expected: list[str],
                                                   limit: int) -> None:
    for i in range(5):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    for ns, pods in (("team", ["z", "y", "x"]), ("team-a", ["y", "x"]), ("team-b", ["x", "y"])):
        await make_namespace(http, ns)
        await make_pods(http, pods, ns=ns)
    listed = await pages(http, path, limit)
    assert names(concatenated(listed)) == expected
    assert concatenated(listed) == (await http.request("GET", path))["items"]
    assert all(len(p["items"]) == limit for p in listed[:-1])
    if path == "/api/v1/pods":
        assert [o["metadata"]["namespace"] for o in concatenated(listed)] == \
            ["team-a", "team-a", "team-b", "team-b", "team", "team", "team"]


# --- selectors, remainingItemCount, limit ---------------------------------------------------------------------------

SELECTED: list[tuple[str, JSON, int, list[list[str]]]] = [
    # (case, query, limit, names page by page): pages fill up past objects that do not match, continue is set
    # while a key follows the page, so the last page of a filtered list can be empty.
    ("label-every-third", {"labelSelector": "pick=yes"}, 2, [["a00", "a03"], ["a06", "a09"], []]),
    ("label-in-front-then-none", {"labelSelector": "front"}, 2, [["a00", "a01"], ["a02", "a03"], []]),
    ("label-none", {"labelSelector": "pick=never"}, 3, [[]]),
    ("field-node", {"fieldSelector": "spec.nodeName=n1"}, 3, [["a01", "a04", "a07"], ["a10"]]),
    ("label-and-field", {"labelSelector": "pick=yes", "fieldSelector": "spec.nodeName=n0"}, 1,
     [["a00"], ["a03"], ["a06"], ["a09"], []]),
]


@pytest.mark.parametrize(("query", "limit", "expected"), [(q, li, e) for _, q, li, e in SELECTED],
                         ids=[c for c, _, _, _ in SELECTED])
async def test_selectors_apply_within_pages(http: KubeHTTP, query: JSON, limit: int,
                                            expected: list[list[str]]) -> None:
    for i in range(11):
        labels = {"pick": "yes" if i % 3 == 0 else "no", **({"front": "1"} if i < 4 else {})}
        await http.request("POST", PODS, body=b.pod(f"a{i:02d}", labels=labels, node=f"n{i % 3}"))
    listed = await pages(http, PODS, limit, query)
    assert [names(p["items"]) for p in listed] == expected
    assert concatenated(listed) == (await http.request("GET", PODS, query=query))["items"]
    assert all("remainingItemCount" not in p["metadata"] for p in listed)


REMAINING: list[tuple[str, int, int, list[int | None]]] = [
    # (case, objects, limit, remainingItemCount page by page; None: not set)
    ("five-by-two", 5, 2, [3, 1, None]),
    ("four-by-two", 4, 2, [2, None]),
    ("exactly-one-page", 3, 3, [None]),
    ("one-by-one", 3, 1, [2, 1, None]),
]


@pytest.mark.parametrize(("count", "limit", "expected"), [(c, li, e) for _, c, li, e in REMAINING],
                         ids=[c for c, _, _, _ in REMAINING])
async def test_remaining_item_count(http: KubeHTTP, count: int, limit: int, expected: list[int | None]) -> None:
    await make_pods(http, [f"p{i}" for i in range(count)])
    listed = await pages(http, PODS, limit)
    assert [p["metadata"].get("remainingItemCount") for p in listed] == expected


async def test_remaining_item_count_is_at_the_first_page_revision(http: KubeHTTP) -> None:
    await make_pods(http, [f"p{i}" for i in range(6)])

    async def between(n: int) -> None:
        if n == 1:
            await _delete(http, "p4")
            await _delete(http, "p5")
            await make_pods(http, ["p9", "q"])

    listed = await pages(http, PODS, 2, between=between)
    assert [p["metadata"].get("remainingItemCount") for p in listed] == [4, 2, None]
    assert names(concatenated(listed)) == [f"p{i}" for i in range(6)]


LIMITS: list[tuple[str, JSON]] = [
    ("absent", {}),
    ("zero", {"limit": 0}),
    ("negative", {"limit": -3}),
    ("larger-than-the-list", {"limit": 10}),
    ("the-list-exactly", {"limit": 4}),
    ("resource-version-0-ignores-it", {"limit": 1, "resourceVersion": "0"}),
]


@pytest.mark.parametrize("query", [q for _, q in LIMITS], ids=[c for c, _ in LIMITS])
async def test_limits_that_serve_the_whole_list(http: KubeHTTP, query: JSON) -> None:
    await make_pods(http, ["a", "b", "c", "d"])
    listed = await http.request("GET", PODS, query=query)
    assert names(listed["items"]) == ["a", "b", "c", "d"]
    assert "continue" not in listed["metadata"] and "remainingItemCount" not in listed["metadata"]


async def test_paged_table_keeps_continue(http: KubeHTTP) -> None:
    """kubectl get pages with limit=500 and asks for a Table."""
    await make_pods(http, ["a", "b", "c"])
    plain = await http.request("GET", PODS, query={"limit": 2})
    client = http.api_client
    resp = await client.rest_client.pool_manager.get(
        f"{client.configuration.host}{PODS}", params={"limit": "2"},
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    async with resp:
        table = await resp.json()
    assert table["kind"] == "Table"
    assert [row["cells"][0] for row in table["rows"]] == ["a", "b"]
    assert table["metadata"]["continue"] == plain["metadata"]["continue"]
    assert table["metadata"]["remainingItemCount"] == 1


# --- expiry -----------------------------------------------------------------------------------------------------------

async def _compact(apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    apiserver.compact()


async def _overflow_window(apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    apiserver.set_watch_window(3)
    for i in range(4):
        await _patch_labels(http, "p0", str(i))


EXPIRIES: list[tuple[str, Callable[[EmbeddedAPIServer, KubeHTTP], Awaitable[None]]]] = [
    ("compacted", _compact),
    ("window-moved-past-it", _overflow_window),
]


@pytest.mark.parametrize("expire", [e for _, e in EXPIRIES], ids=[n for n, _ in EXPIRIES])
async def test_expired_continue_token_is_410_with_an_inconsistent_continuation(
        apiserver: EmbeddedAPIServer, http: KubeHTTP,
        expire: Callable[[EmbeddedAPIServer, KubeHTTP], Awaitable[None]]) -> None:
    await make_pods(http, [f"p{i}" for i in range(5)])
    first = await http.request("GET", PODS, query={"limit": 2})
    await make_pods(http, ["p3a"])  # after the cursor, after the first page's revision
    await expire(apiserver, http)
    err = await api_error(http.request("GET", PODS, query={"limit": 2, "continue": first["metadata"]["continue"]}))
    assert (err.status, err.reason) == (410, "Expired")
    assert err.message.startswith("The provided continue parameter is too old to display a consistent list "
                                  "result. You can start a new list without the continue parameter, or use the "
                                  "continue token in this response to retrieve the remainder of the results.")
    fresh = err.body["metadata"]["continue"]
    decoded = json.loads(base64.urlsafe_b64decode(fresh + "=" * (-len(fresh) % 4)))
    assert decoded == {"v": "meta.k8s.io/v1", "rv": -1, "start": "p1\x00"}
    # Continuing with it reads the latest revision from the same key on: p3a shows, and the pages after it are
    # consistent at that new revision.
    page = await http.request("GET", PODS, query={"limit": 2, "continue": fresh})
    assert names(page["items"]) == ["p2", "p3"]
    assert page["metadata"]["resourceVersion"] == (await http.request("GET", PODS))["metadata"]["resourceVersion"]
    last = await http.request("GET", PODS, query={"limit": 2, "continue": page["metadata"]["continue"]})
    assert names(last["items"]) == ["p3a", "p4"]


async def test_compaction_at_the_page_revision_keeps_the_token(apiserver: EmbeddedAPIServer,
                                                              http: KubeHTTP) -> None:
    """etcd's compaction at revision R removes what is older than R: a list at R can still be read."""
    await make_pods(http, [f"p{i}" for i in range(3)])
    first = await http.request("GET", PODS, query={"limit": 2})
    apiserver.compact()
    rest = await http.request("GET", PODS, query={"limit": 2, "continue": first["metadata"]["continue"]})
    assert names(rest["items"]) == ["p2"]


async def test_a_fresh_list_after_410_is_consistent(apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    await make_pods(http, [f"p{i}" for i in range(5)])
    first = await http.request("GET", PODS, query={"limit": 2})
    await make_pods(http, ["p9"])
    apiserver.compact()  # up to the revision after the first page's: that one can no longer be read
    await api_error(http.request("GET", PODS, query={"limit": 2, "continue": first["metadata"]["continue"]}))
    listed = await pages(http, PODS, 2)
    assert concatenated(listed) == (await http.request("GET", PODS))["items"]


# --- resourceVersion and resourceVersionMatch with limit ------------------------------------------------------------

async def test_resource_version_semantics_with_and_without_limit(apiserver: EmbeddedAPIServer,
                                                                 http: KubeHTTP) -> None:
    await make_pods(http, ["a", "b", "c"])
    old = (await http.request("GET", PODS))["metadata"]["resourceVersion"]
    await _delete(http, "b")
    now = (await http.request("GET", PODS))["metadata"]["resourceVersion"]
    cases: list[tuple[JSON, str, list[str]]] = [
        # (query, resourceVersion served, names)
        ({"resourceVersion": old}, now, ["a", "c"]),  # no match, no limit: not older than
        ({"resourceVersion": old, "resourceVersionMatch": "NotOlderThan"}, now, ["a", "c"]),
        ({"resourceVersion": old, "resourceVersionMatch": "NotOlderThan", "limit": 5}, now, ["a", "c"]),
        ({"resourceVersion": old, "resourceVersionMatch": "Exact"}, old, ["a", "b", "c"]),
        ({"resourceVersion": old, "limit": 5}, old, ["a", "b", "c"]),  # legacy: limit makes it exact
        ({"resourceVersion": old, "resourceVersionMatch": "Exact", "limit": 2}, old, ["a", "b"]),
        ({"resourceVersion": "0"}, now, ["a", "c"]),
    ]
    for query, served, expected in cases:
        listed = await http.request("GET", PODS, query=query)
        assert (listed["metadata"]["resourceVersion"], names(listed["items"])) == (served, expected), query
    # The pages of an exact list carry its revision (later pages send only continue, as client-go's pager does).
    first = await http.request("GET", PODS, query={"resourceVersion": old, "resourceVersionMatch": "Exact",
                                                   "limit": 2})
    rest = await pages(http, PODS, 2, {"continue": first["metadata"]["continue"]})
    assert names(first["items"] + concatenated(rest)) == ["a", "b", "c"]
    assert {p["metadata"]["resourceVersion"] for p in [first, *rest]} == {old}
    apiserver.compact()
    for query in ({"resourceVersion": old, "resourceVersionMatch": "Exact"}, {"resourceVersion": old, "limit": 1}):
        err = await api_error(http.request("GET", PODS, query=query))
        assert (err.status, err.reason, err.message) == (410, "Expired",
                                                         "The resourceVersion for the provided list is too old.")
    assert names((await http.request("GET", PODS, query={"resourceVersion": old}))["items"]) == ["a", "c"]


async def test_too_large_resource_version_is_504(http: KubeHTTP) -> None:
    await make_pods(http, ["a"])
    now = int((await http.request("GET", PODS))["metadata"]["resourceVersion"])
    for query in ({"resourceVersion": str(now + 5)}, {"resourceVersion": str(now + 5), "resourceVersionMatch": "Exact"},
                  {"limit": 1, "continue": token({"v": "meta.k8s.io/v1", "rv": now + 5, "start": "a"})}):
        err = await api_error(http.request("GET", PODS, query=query))
        message = f"Timeout: Too large resource version: {now + 5}, current: {now}"
        assert (err.status, err.reason, err.message) == (504, "Timeout", message)
        assert err.body["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                                  "message": "Too large resource version"}]


OPTIONS_422: list[tuple[str, JSON, str]] = [
    ("match-without-resource-version", {"resourceVersionMatch": "NotOlderThan"},
     "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"),
    ("match-with-continue", {"resourceVersion": "1", "resourceVersionMatch": "Exact", "continue": "x"},
     "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"),
    ("unknown-match", {"resourceVersion": "1", "resourceVersionMatch": "Newest"},
     'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""'),
    ("exact-zero", {"resourceVersion": "0", "resourceVersionMatch": "Exact"},
     'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'),
    ("send-initial-events", {"sendInitialEvents": "true"},
     "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"),
]


@pytest.mark.parametrize(("query", "detail"), [(q, d) for _, q, d in OPTIONS_422], ids=[c for c, _, _ in OPTIONS_422])
async def test_invalid_list_options_are_422(http: KubeHTTP, query: JSON, detail: str) -> None:
    err = await api_error(http.request("GET", PODS, query=query))
    assert (err.status, err.reason, err.message) == (422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {detail}')


# --- invalid tokens --------------------------------------------------------------------------------------------------

GOOD = {"v": "meta.k8s.io/v1", "rv": 5, "start": "a\x00"}
INVALID_TOKENS: list[tuple[str, str, str]] = [
    # (case, token, message after "invalid continue token: continue key is not valid")
    ("not-base64", "not-a-token!", ": illegal base64 data at input byte 11"),
    ("padded", token(GOOD) + "=", f": illegal base64 data at input byte {len(token(GOOD))}"),
    ("one-char-too-many", "abcde", ": illegal base64 data at input byte 4"),
    ("not-json", token(b"hello"), ": invalid character 'h' looking for beginning of value"),
    ("empty-json", token(b"  "), ": unexpected end of JSON input"),
    ("truncated-json", token(b'{"v":"meta.k8s.io/v1"'), ": unexpected end of JSON input"),
    ("missing-colon", token(b'{"v" "x"}'), ": invalid character '\"' after object key"),
    ("not-an-object", token([1]), ": json: cannot unmarshal array into Go value of type storage.continueToken"),
    ("rv-as-string", token({**GOOD, "rv": "5"}),
     ": json: cannot unmarshal string into Go struct field continueToken.rv of type int64"),
    ("rv-fraction", token({**GOOD, "rv": 1.5}),
     ": json: cannot unmarshal number 1.5 into Go struct field continueToken.rv of type int64"),
    ("unknown-version", token({**GOOD, "v": "meta.k8s.io/v2"}),
     ": server does not recognize this encoded version meta.k8s.io/v2"),
    ("zero-rv", token({**GOOD, "rv": 0}), ": incorrect encoded start resourceVersion (version meta.k8s.io/v1)"),
    ("no-start", token({"v": "meta.k8s.io/v1", "rv": 5}), ": encoded start key empty (version meta.k8s.io/v1)"),
    ("start-climbs-out", token({**GOOD, "start": "../secrets/x"}), ": ../secrets/x"),
    ("start-not-clean", token({**GOOD, "start": "default//p"}), ": default//p"),
]


@pytest.mark.parametrize(("value", "message"), [(t, m) for _, t, m in INVALID_TOKENS],
                         ids=[c for c, _, _ in INVALID_TOKENS])
async def test_invalid_continue_token_is_400(http: KubeHTTP, value: str, message: str) -> None:
    err = await api_error(http.request("GET", PODS, query={"limit": 2, "continue": value}))
    assert (err.status, err.reason, err.message) == (400, "BadRequest", INVALID + message)


async def test_resource_version_with_continue_is_400(http: KubeHTTP) -> None:
    await make_pods(http, ["a", "b"])
    first = await http.request("GET", PODS, query={"limit": 1})
    query = {"limit": 1, "continue": first["metadata"]["continue"]}
    err = await api_error(http.request("GET", PODS, query={**query, "resourceVersion": "1"}))
    assert (err.status, err.message) == (400, "specifying resource version is not allowed when using continue")
    # "0" is allowed with continue.
    assert names((await http.request("GET", PODS, query={**query, "resourceVersion": "0"}))["items"]) == ["b"]


async def test_continue_token_has_the_real_format(http: KubeHTTP) -> None:
    await make_namespace(http, "team")
    await make_pods(http, ["a", "b"], ns="team")
    first = await http.request("GET", b.PODS.path("team"), query={"limit": 1})
    value = first["metadata"]["continue"]
    assert "=" not in value
    decoded = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    assert decoded == {"v": "meta.k8s.io/v1", "rv": int(first["metadata"]["resourceVersion"]), "start": "a\x00"}
    everywhere = await http.request("GET", "/api/v1/pods", query={"limit": 1})
    value = everywhere["metadata"]["continue"]
    assert json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))["start"] == "team/a\x00"


# --- the production reflector ---------------------------------------------------------------------------------------

async def test_reflector_syncs_through_consistent_pages(apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    """The reflector lists 3 nodes a page; while its second page is held, one node is deleted and one created.
    The pages still show the first page's revision, and the watch from it reports both changes."""
    for i in range(10):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    held = apiserver.inject(Fault(verb="list", resource="nodes", after=1, hold=True))
    reflector = Reflector(http, b.NODES, page_size=3, watch_timeout=30)
    seen: list[tuple[str, str]] = []
    reflector.add_handler(lambda ev: seen.append((ev.type, ev.obj["metadata"]["name"])))
    task = asyncio.create_task(reflector.run(), name="reflector")
    try:
        await wait_for(lambda: apiserver.faults.held)
        await http.request("DELETE", f"{b.NODES.path()}/n5")
        await http.request("POST", b.NODES.path(), body=b.node("n99"))
        apiserver.release_held(serve=True)
        await asyncio.wait_for(reflector.synced.wait(), 5)
        assert seen[:10] == [("ADDED", f"n{i}") for i in range(10)]
        await wait_for(lambda: ("ADDED", "n99") in seen)
        # (The node lifecycle controller may also touch the new node: MODIFIED events are not what is checked.)
        assert [e for e in seen[10:] if e[0] != "MODIFIED"] == [("DELETED", "n5"), ("ADDED", "n99")]
        assert sorted(reflector.cache) == sorted(("", n) for n in [f"n{i}" for i in range(10) if i != 5] + ["n99"])
        pages_served = [r for r in apiserver.requests if r.verb == "list" and r.resource == "nodes"]
        assert len(pages_served) == 4 and held.acted == 1
        assert [bool(r.query.get("continue")) for r in pages_served] == [False, True, True, True]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_reflector_relists_when_its_continue_token_expires(apiserver: EmbeddedAPIServer,
                                                                 http: KubeHTTP) -> None:
    for i in range(6):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    apiserver.inject(Fault(verb="list", resource="nodes", after=1, hold=True))
    reflector = Reflector(http, b.NODES, page_size=2, watch_timeout=30)
    events: list[ReflectorEvent] = []
    reflector.add_handler(events.append)
    task = asyncio.create_task(reflector.run(), name="reflector")
    try:
        await wait_for(lambda: apiserver.faults.held)
        await http.request("POST", b.NODES.path(), body=b.node("n6"))
        apiserver.compact()
        apiserver.release_held(serve=True)
        await asyncio.wait_for(reflector.synced.wait(), 5)
        assert sorted(n for _, n in reflector.cache) == [f"n{i}" for i in range(7)]
        lists = [r for r in apiserver.requests if r.verb == "list" and r.resource == "nodes"]
        assert [r.status for r in lists][:2] == [200, 410]
        assert lists[2].query.get("continue") is None  # a fresh list, from the start
        assert reflector.lists == 1 and len(events) == 7
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
