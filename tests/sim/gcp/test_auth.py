"""The metadata server's token flow and the bearer-token check on every container/compute call."""

from __future__ import annotations

import pytest

from gangscale.clock import ManualClock
from gangscale.sim.gcp import FakeGcp
from tests.sim.gcp.client import OPERATIONS, POOLS, PROJECT, ZONE_A, Client

MISSING = ("Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or "
           "other valid authentication credential. See "
           "https://developers.google.com/identity/sign-in/web/devconsole-project.")
INVALID = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
           "valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
FLAVOR = {"Metadata-Flavor": "Google"}
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"


async def test_metadata_ping_answers_with_the_flavor_header(client: Client) -> None:
    resp = await client.get("/", auth=False)
    assert (resp.status, resp.headers["Metadata-Flavor"]) == (200, "Google")


@pytest.mark.parametrize(("path", "headers", "status", "body"), [
    (TOKEN_PATH, {}, 403, None),
    (TOKEN_PATH, FLAVOR, 200, {"access_token": "fake-token", "expires_in": 3599, "token_type": "Bearer"}),
    ("/computeMetadata/v1/project/project-id", {}, 403, None),
    ("/computeMetadata/v1/project/project-id", FLAVOR, 200, PROJECT),
    ("/computeMetadata/v1/", {}, 403, None),
    ("/computeMetadata/v1/instance/service-accounts/default/?recursive=true", FLAVOR, 200,
     {"aliases": ["default"], "email": "fake-email", "scopes": ["https://www.googleapis.com/auth/cloud-platform",
                                                                "https://www.googleapis.com/auth/userinfo.email"]}),
    ("/computeMetadata/v1/no/such/key", FLAVOR, 404, None),
], ids=["token-no-flavor", "token", "project-no-flavor", "project-id", "root-no-flavor", "service-account",
        "unknown-key"])
async def test_metadata_paths(gcp: FakeGcp, client: Client, path: str, headers: dict[str, str], status: int,
                              body: object) -> None:
    resp = await client.get(path, headers=headers, auth=False)
    assert resp.status == status
    assert resp.headers["Metadata-Flavor"] == "Google"
    if isinstance(body, dict) and body.get("email") == "fake-email":
        body = {**body, "email": gcp.email}
    if isinstance(body, dict):
        assert resp.body == body
    elif body is not None:
        assert resp.text == body
    if status == 403:
        assert "Missing Metadata-Flavor:Google header" in resp.text


@pytest.mark.parametrize(("path", "method", "headers", "reason", "message"), [
    (POOLS, "GET", {}, "required", MISSING),
    (POOLS, "POST", {"Authorization": "Bearer wrong"}, "authError", INVALID),
    (OPERATIONS, "GET", {"Authorization": "Basic ZmFrZS10b2tlbg=="}, "authError", INVALID),
    (f"/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instanceGroupManagers/x", "GET", {}, "required", MISSING),
    (f"/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instanceGroupManagers/x/resize", "POST",
     {"Authorization": "Bearer fake-token-2"}, "authError", INVALID),
], ids=["container-none", "container-wrong", "container-basic", "compute-none", "compute-wrong"])
async def test_calls_without_a_valid_token_get_401(gcp: FakeGcp, client: Client, path: str, method: str,
                                                    headers: dict[str, str], reason: str, message: str) -> None:
    resp = await client.call(method, path, headers=headers, auth=False, params={"size": "1"})
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="https://accounts.google.com/"'
    error = resp.error
    assert (error["code"], error["status"], error["message"]) == (401, "UNAUTHENTICATED", message)
    assert error["errors"] == [{"message": message, "domain": "global", "reason": reason,
                                "location": "Authorization", "locationType": "header"}]
    assert gcp.state.container_ops == {} and gcp.state.compute_ops == {}


async def test_issued_tokens_expire_on_the_clock_until_fetched_again(gcp: FakeGcp, client: Client,
                                                                    clock: ManualClock) -> None:
    gcp.faults.token_expires_after = 300
    gcp.faults.token_lifetime = 300
    fetched = await client.get(TOKEN_PATH, headers=FLAVOR, auth=False)
    assert fetched.body["expires_in"] == 300
    client.token = fetched.body["access_token"]
    assert (await client.get(POOLS)).status == 200
    await clock.advance(299)
    assert (await client.get(POOLS)).status == 200
    await clock.advance(1)
    expired = await client.get(POOLS)
    assert (expired.status, expired.error["message"]) == (401, INVALID)
    await client.get(TOKEN_PATH, headers=FLAVOR, auth=False)
    assert (await client.get(POOLS)).status == 200
