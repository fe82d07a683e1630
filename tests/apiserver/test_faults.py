"""The test knobs: injected status codes, Retry-After, latency, dropped streams, forced 410, request log."""

from __future__ import annotations

import asyncio

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
