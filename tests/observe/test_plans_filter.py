"""``/debug/plans?pr=NAMESPACE/NAME``: one request's document, or a 404 with a JSON error (what `gangscale explain`
reads)."""

from __future__ import annotations

import json

import aiohttp

from gangscale.observe.metrics import Metrics
from gangscale.observe.server import ObserveServer

KNOWN = {"ns/a": {"request": "ns/a", "phase": "Pending"}}


def plans(pr: str | None = None) -> object:
    if pr is None:
        return {"requests": list(KNOWN.values())}
    return KNOWN.get(pr)


async def test_filter_answers_one_request_or_a_json_404() -> None:
    server = ObserveServer(host="127.0.0.1", port=0, metrics=Metrics(), healthy=lambda: (True, ""),
                           ready=lambda: (True, ""), plans=plans)
    async with server, aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{server.port}/debug/plans"
        async with session.get(base, params={"pr": "ns/a"}) as resp:
            assert resp.status == 200
            assert json.loads(await resp.text()) == {"request": "ns/a", "phase": "Pending"}
        async with session.get(base, params={"pr": "ns/b"}) as resp:
            assert resp.status == 404 and resp.content_type == "application/json"
            assert await resp.json() == {"error": "the controller knows no request ns/b"}
        async with session.get(base) as resp:  # without the filter: the whole document, as before
            assert resp.status == 200 and (await resp.json()) == {"requests": [KNOWN["ns/a"]]}
