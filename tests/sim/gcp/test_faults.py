"""Transport-level faults: responses lost after the change was applied, injected 5xx/429 (JSON or HTML, with
``Retry-After``), and the request log."""

from __future__ import annotations

import uuid

import aiohttp
import pytest

from gangscale.sim.gcp import Call, FakeGcp, InjectedError
from tests.sim.gcp.client import OPERATIONS, POOLS, REGION, ZONE_A, Client, compute_path


async def test_lost_create_response_is_applied_and_a_retry_gets_409(gcp: FakeGcp, client: Client) -> None:
    gcp.faults.lost_responses = 1
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.create_pool("p1", "e2-standard-4", 1, [ZONE_A])
    assert gcp.faults.lost_responses == 0
    assert (await client.pool("p1"))["status"] in ("PROVISIONING", "RUNNING")
    retry = await client.create_pool("p1", "e2-standard-4", 1, [ZONE_A])
    assert retry.status == 409
    ops = (await client.get(OPERATIONS)).body["operations"]
    assert [(o["operationType"], o["targetLink"].rsplit("/", 1)[1]) for o in ops] == [("CREATE_NODE_POOL", "p1")]
    assert [(c.method, c.path, c.status) for c in gcp.calls if c.path == POOLS] == [
        ("POST", POOLS, 0), ("POST", POOLS, 409)]


async def test_lost_create_instances_response_then_replay_by_request_id(gcp: FakeGcp, client: Client) -> None:
    gcp.add_node_pool((REGION, "c1"), "cpu", machine_type="e2-standard-4", zones=[ZONE_A])
    mig = compute_path((await client.pool("cpu"))["instanceGroupUrls"][0])
    request_id = str(uuid.uuid4())
    body = {"instances": [{"name": "gs-a"}]}
    gcp.faults.lost_responses = 1
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post(f"{mig}/createInstances", body, params={"requestId": request_id})
    replay = await client.post(f"{mig}/createInstances", body, params={"requestId": request_id})
    assert (replay.status, replay.body["clientOperationId"]) == (200, request_id)
    assert [op.name for op in gcp.state.compute_ops.values()] == [replay.body["name"]]
    assert (await client.get(mig)).body["targetSize"] == 1


async def test_reads_are_never_lost(gcp: FakeGcp, client: Client) -> None:
    gcp.faults.lost_responses = 1
    assert (await client.get(POOLS)).status == 200
    assert gcp.faults.lost_responses == 1


@pytest.mark.parametrize(("error", "status", "retry_after", "body"), [
    (InjectedError(500, "POST", r"/nodePools$", html=True), 500, None, "html"),
    (InjectedError(503, "*", r"/nodePools", retry_after=7), 503, "7",
     {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE",
      "errors": [{"message": "The service is currently unavailable.", "domain": "global", "reason": "backendError"}]}),
    (InjectedError(429, "POST", r"nodePools", retry_after="Wed, 21 Oct 2026 07:28:00 GMT",
                   message="Quota exceeded for quota metric 'Write requests'.", reason="rateLimitExceeded"), 429,
     "Wed, 21 Oct 2026 07:28:00 GMT",
     {"code": 429, "message": "Quota exceeded for quota metric 'Write requests'.", "status": "RESOURCE_EXHAUSTED",
      "errors": [{"message": "Quota exceeded for quota metric 'Write requests'.", "domain": "global",
                  "reason": "rateLimitExceeded"}]}),
], ids=["500-html", "503-retry-after-seconds", "429-retry-after-date"])
async def test_injected_errors_answer_the_next_matching_call_only(gcp: FakeGcp, client: Client, error: InjectedError,
                                                                  status: int, retry_after: str | None,
                                                                  body: object) -> None:
    gcp.faults.errors.append(error)
    assert (await client.get(OPERATIONS)).status == 200  # does not match
    resp = await client.create_pool("p1", "e2-standard-4", 0, [ZONE_A])
    assert resp.status == status
    assert resp.headers.get("Retry-After") == retry_after
    if body == "html":
        assert resp.headers["Content-Type"].startswith("text/html")
        assert "500" in resp.text
    else:
        assert resp.body == {"error": body}
    assert gcp.faults.errors == []
    assert gcp.state.cluster(REGION, "c1").pools == {}  # type: ignore[union-attr]
    assert (await client.create_pool("p1", "e2-standard-4", 0, [ZONE_A])).status == 200


async def test_call_log_records_every_request(gcp: FakeGcp, client: Client) -> None:
    await client.get("/", auth=False)
    await client.get(f"{POOLS}/nope")
    await client.post(f"/compute/v1/projects/demo-project/zones/{ZONE_A}/instanceGroupManagers/m/resize",
                      params={"size": "2"})
    now = gcp.clock.now()
    assert gcp.calls == [
        Call(now, "GET", "/", {}, 200),
        Call(now, "GET", f"{POOLS}/nope", {}, 404),
        Call(now, "POST", f"/compute/v1/projects/demo-project/zones/{ZONE_A}/instanceGroupManagers/m/resize",
             {"size": "2"}, 404),
    ]
