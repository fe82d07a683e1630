"""The test knobs: injected status codes, Retry-After, latency, dropped streams, forced 410, request log."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer, Fault
from tests import builders as b
from tests.conftest import wait_for


@pytest.mark.parametrize(("status", "reason", "retry_after"), [
    (500, "InternalError", None),
    (429, "TooManyRequests", 3),
    (409, "Conflict", None),
    (503, "ServiceUnavailable", 1),
], ids=["500", "429-retry-after", "409", "503"])
async def test_injected_status(http: KubeHTTP, apiserver: EmbeddedAPIServer, status: int, reason: str,
                               retry_after: int | None) -> None:
    apiserver.inject(verb="list", resource="nodes", status=status, retry_after=retry_after)
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.NODES.path())
    assert (err.value.status, err.value.reason, err.value.retry_after) == (status, reason, retry_after)
    # times=1 by default: the next call is served.
    assert (await http.request("GET", b.NODES.path()))["kind"] == "NodeList"


async def test_fault_matches_verb_resource_and_name(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    apiserver.inject(Fault(verb="patch", resource="autoscaling.x-k8s.io/provisioningrequests", name="pr-*",
                           subresource="status", status=409, times=None))
    await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr-1"))
    await http.request("PATCH", b.PROVREQS.path("default", "pr-1"), body={"metadata": {"labels": {"a": "b"}}},
                       content_type="application/merge-patch+json")
    for _ in range(2):
        with pytest.raises(ApiError) as err:
            await http.request("PATCH", b.PROVREQS.path("default", "pr-1", "status"), body={"status": {}},
                               content_type="application/merge-patch+json")
        assert err.value.status == 409


async def test_latency_is_added(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("slow"))
    await http.request("POST", b.NODES.path(), body=b.node("fast"))
    fault = apiserver.inject(verb="get", resource="nodes", name="slow", latency=0.5, times=1)
    finished: list[str] = []

    async def get(name: str) -> None:
        await http.request("GET", b.NODES.path(name=name))
        finished.append(name)

    slow = asyncio.create_task(get("slow"))
    await wait_for(lambda: fault.hits == 1)  # the slow request is inside the server, delayed
    await get("fast")
    await slow
    # Ordering, not timing: the request that arrived first answered last.
    assert finished == ["fast", "slow"]


async def test_server_down_switch(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    apiserver.faults.down = True
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.NODES.path())
    assert err.value.status == 503
    apiserver.faults.down = False
    await http.request("GET", b.NODES.path())


@pytest.mark.parametrize("abort", [False, True], ids=["clean-close", "tcp-abort"])
async def test_drop_watch_after_n_events(http: KubeHTTP, apiserver: EmbeddedAPIServer, abort: bool) -> None:
    for i in range(5):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    apiserver.inject(verb="watch", resource="nodes", drop_after_events=2, abort=abort)
    seen: list[str] = []

    async def drain() -> None:
        async for ev in http.stream(b.NODES.path(), {"resourceVersion": "0"}):
            seen.append(ev["object"]["metadata"]["name"])

    if abort:
        with pytest.raises(ApiError) as err:
            await asyncio.wait_for(drain(), 5)
        assert err.value.status == 0  # a transport error, not an HTTP status
    else:
        await asyncio.wait_for(drain(), 5)
    assert seen == ["n0", "n1"]


async def test_forced_gone_on_watch(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    apiserver.inject(verb="watch", resource="nodes", gone=True)
    events = [ev async for ev in http.stream(b.NODES.path(), {"resourceVersion": "1"})]
    assert len(events) == 1
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


async def test_request_log_records_verbs(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    apiserver.requests.clear()
    await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr1"), query={"fieldManager": "t"})
    await http.request("PATCH", b.PROVREQS.path("default", "pr1", "status"), body={"status": {}},
                       content_type="application/merge-patch+json")
    got = [(r.verb, r.resource, r.name, r.subresource, r.status) for r in apiserver.requests]
    assert got == [("create", "provisioningrequests", "", None, 201),
                   ("patch", "provisioningrequests", "pr1", "status", 200)]
    assert apiserver.requests[0].query["fieldManager"] == "t"
    assert apiserver.requests[1].content_type.startswith("application/merge-patch+json")


async def test_after_lets_the_first_matching_requests_through(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    fault = apiserver.inject(verb="create", resource="nodes", status=500, after=2)
    for i in range(2):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    with pytest.raises(ApiError) as err:
        await http.request("POST", b.NODES.path(), body=b.node("n2"))
    assert err.value.status == 500
    await http.request("POST", b.NODES.path(), body=b.node("n3"))  # times=1: used up
    assert (fault.hits, fault.acted) == (3, 1)


@pytest.mark.parametrize(("field", "value", "hit"), [
    ("body_contains", "obtained", True),
    ("body_contains", "obtaining", False),
    ("user_agent", "gangscale-tests", True),
    ("user_agent", "gangscale-sim*", False),
], ids=["body-hit", "body-miss", "agent-hit", "agent-miss"])
async def test_body_and_user_agent_matchers(http: KubeHTTP, apiserver: EmbeddedAPIServer, field: str, value: str,
                                            hit: bool) -> None:
    await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr1"))
    apiserver.inject(**{"verb": "patch", "status": 409, field: value})
    call = http.request("PATCH", b.PROVREQS.path("default", "pr1", "status"),
                        body={"status": {"provisioningClassDetails": {"x": "phase obtained"}}},
                        content_type="application/merge-patch+json")
    if hit:
        with pytest.raises(ApiError) as err:
            await call
        assert err.value.status == 409
    else:
        await call


@pytest.mark.parametrize("serve", [False, True], ids=["dropped", "served"])
async def test_a_held_request_waits_until_released(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                   serve: bool) -> None:
    apiserver.inject(verb="create", resource="nodes", hold=True)
    create = asyncio.create_task(http.request("POST", b.NODES.path(), body=b.node("held")))
    await wait_for(lambda: len(apiserver.faults.held) == 1)
    # Other requests go on while one is held.
    await http.request("POST", b.NODES.path(), body=b.node("free"))
    assert not create.done()
    assert apiserver.release_held(serve=serve) == 1
    if serve:
        await create
    else:
        with pytest.raises(ApiError) as err:
            await create
        assert err.value.status == 503
    names = {n["metadata"]["name"] for n in (await http.request("GET", b.NODES.path()))["items"]}
    assert names == ({"free", "held"} if serve else {"free"})


async def test_control_endpoint_sets_holds_and_releases_over_http(http: KubeHTTP) -> None:
    async with EmbeddedAPIServer(control=True) as server:
        base = server.url + "/_sim"
        async with aiohttp.ClientSession() as session:
            async with session.post(base + "/faults", json={"verb": "create", "resource": "nodes", "hold": True,
                                                            "after": 1}) as resp:
                assert resp.status == 201
                assert (await resp.json())["index"] == 0
            async with session.post(base + "/faults", json={"verb": "create", "colour": "red"}) as resp:
                assert resp.status == 400
                assert "colour" in (await resp.json())["error"]
            async with session.post(server.url + "/api/v1/nodes", json=b.node("first")) as resp:
                assert resp.status == 201
            second = asyncio.create_task(session.post(server.url + "/api/v1/nodes", json=b.node("second")))
            await wait_for(lambda: len(server.faults.held) == 1)
            async with session.get(base + "/faults") as resp:
                state = await resp.json()
            assert state["held"] == [{"fault": 0, "request": "POST /api/v1/nodes"}]
            assert (state["faults"][0]["hits"], state["faults"][0]["acted"]) == (2, 1)
            async with session.post(base + "/release", json={}) as resp:
                assert (await resp.json()) == {"released": 1}
            async with await second as resp:
                assert resp.status == 503
            async with session.delete(base + "/faults") as resp:
                assert (await resp.json())["faults"] == []
            async with session.get(server.url + "/api/v1/nodes") as resp:
                assert [n["metadata"]["name"] for n in (await resp.json())["items"]] == ["first"]
            async with session.get(base + "/nothing") as resp:
                assert resp.status == 404


async def test_control_endpoint_is_off_by_default(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    with pytest.raises(ApiError) as err:
        await http.request("GET", "/_sim/faults")
    assert err.value.status == 404


async def test_control_endpoint_serves_the_request_log_from_an_index() -> None:
    async with EmbeddedAPIServer(control=True) as server, aiohttp.ClientSession() as session:
        async with session.post(server.url + "/api/v1/nodes", json=b.node("n1"),
                                headers={"User-Agent": "gangscale/0.1 (replica-a)"}) as resp:
            assert resp.status == 201
        async with session.post(server.url + "/api/v1/nodes", json=b.node("n1")) as resp:
            assert resp.status == 409
        async with session.get(server.url + "/_sim/requests") as resp:
            first = await resp.json()
        async with session.delete(server.url + "/api/v1/nodes/n1") as resp:
            assert resp.status == 200
        async with session.get(server.url + f"/_sim/requests?since={first['next']}") as resp:
            later = await resp.json()
        async with session.get(server.url + "/_sim/requests?since=x") as resp:
            assert resp.status == 400

    assert [(r["verb"], r["resource"], r["status"]) for r in first["requests"]] == [
        ("create", "nodes", 201), ("create", "nodes", 409)]
    assert first["requests"][0]["userAgent"] == "gangscale/0.1 (replica-a)"
    assert first["requests"][0]["time"].endswith("+00:00")
    assert [(r["verb"], r["name"], r["status"]) for r in later["requests"]] == [("delete", "n1", 200)]
    assert later["requests"][0]["index"] > first["requests"][-1]["index"]
