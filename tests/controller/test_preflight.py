"""The checks ``gangscale run`` makes before starting, against a stand-in API server whose discovery answers
are set per case (the embedded server always serves ProvisioningRequests, so it cannot show a missing CRD)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from gangscale.controller.preflight import StartupError, connect, wait_for_api
from tests import builders as b

PATH = "/apis/autoscaling.x-k8s.io/v1"
SERVED = {"kind": "APIResourceList", "groupVersion": "autoscaling.x-k8s.io/v1",
          "resources": [{"name": "provisioningrequests", "namespaced": True, "kind": "ProvisioningRequest"}]}
Answer = tuple[int, object]


def _status(code: int, reason: str) -> Answer:
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
                  "message": reason}


@pytest.fixture
async def discovery(tmp_path: Path) -> AsyncIterator[Callable[[list[Answer]], Path]]:
    """Serve the given answers to discovery, one per request (the last repeats); yields a kubeconfig factory."""
    answers: list[Answer] = []

    async def handle(request: web.Request) -> web.Response:
        status, body = answers.pop(0) if len(answers) > 1 else answers[0]
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get(PATH, handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]

    def serve(given: list[Answer]) -> Path:
        answers[:] = given
        path = tmp_path / "kubeconfig"
        path.write_text(b.kubeconfig_yaml(f"http://127.0.0.1:{port}"))
        return path

    yield serve
    await runner.cleanup()


@pytest.mark.parametrize(("answers", "error"), [
    ([(200, SERVED)], None),
    ([_status(503, "ServiceUnavailable"), (200, SERVED)], None),
    ([_status(404, "NotFound")], "does not serve autoscaling.x-k8s.io/v1 provisioningrequests: install the "
                                 "ProvisioningRequest CRD first"),
    ([(200, {**SERVED, "resources": []})], "does not serve autoscaling.x-k8s.io/v1 provisioningrequests"),
    ([_status(401, "Unauthorized")], "refused gangscale's credentials: 401 Unauthorized"),
    ([_status(403, "Forbidden")], "refused gangscale's credentials: 403 Forbidden"),
    ([_status(500, "InternalError")], "cannot reach the Kubernetes API server at http://127.0.0.1:"),
], ids=["served", "503-then-served", "no-group", "no-resource", "401", "403", "500-until-timeout"])
async def test_wait_for_api(discovery: Callable[[list[Answer]], Path], answers: list[Answer],
                            error: str | None) -> None:
    http = await connect(str(discovery(answers)), None, "test")
    try:
        if error is None:
            await wait_for_api(http, timeout=30)
        else:
            with pytest.raises(StartupError) as caught:
                await wait_for_api(http, timeout=0.6)
            assert error in str(caught.value)
            assert "\n" not in str(caught.value)
    finally:
        await http.api_client.close()


async def test_connect_names_the_file_it_could_not_load(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=f"cannot read the kubeconfig {tmp_path}/missing: No such file"):
        await connect(str(tmp_path / "missing"), None, "test")
