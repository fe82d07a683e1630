"""The observe HTTP server over real sockets: probes, the metrics exposition, debug plans, unknown paths."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from gangscale.observe.metrics import Metrics
from gangscale.observe.server import ObserveServer


def raising(exc: Exception) -> Callable[[], Any]:
    def fail() -> Any:
        raise exc

    return fail


class State:
    """What the callbacks report; tests flip it between requests. An exception is raised by the callback."""

    def __init__(self) -> None:
        self.healthy: tuple[bool, str] | Exception = (True, "")
        self.ready: tuple[bool, str] | Exception = (True, "")
        self.plans: Callable[[], object] = lambda: []

    def current_plans(self) -> object:
        # Looked up per request, so that a test can swap ``plans`` after the server started.
        return self.plans()

    @staticmethod
    def probe(result: tuple[bool, str] | Exception) -> tuple[bool, str]:
        if isinstance(result, Exception):
            raise result
        return result


@dataclasses.dataclass
class Fixture:
    server: ObserveServer
    session: aiohttp.ClientSession
    state: State
    metrics: Metrics

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.port}{path}"

    async def get(self, path: str) -> tuple[int, str, str]:
        async with self.session.get(self.url(path)) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


@pytest_asyncio.fixture
async def observe() -> AsyncIterator[Fixture]:
    state = State()
    metrics = Metrics()
    server = ObserveServer(
        host="127.0.0.1",
        port=0,
        metrics=metrics,
        healthy=lambda: state.probe(state.healthy),
        ready=lambda: state.probe(state.ready),
        plans=state.current_plans,
    )
    async with server, aiohttp.ClientSession() as session:
        yield Fixture(server, session, state, metrics)


async def test_port_zero_picks_a_free_port(observe: Fixture) -> None:
    assert observe.server.port > 0
    status, _, _ = await observe.get("/healthz")
    assert status == 200


PROBES = [
    ("healthz-ok", "/healthz", "healthy", (True, "fine"), 200, "fine"),
    ("healthz-failing", "/healthz", "healthy", (False, "watch stream stalled for 120s"), 503, "watch stream stalled"),
    ("healthz-no-reason", "/healthz", "healthy", (False, ""), 503, "not healthy"),
    ("readyz-ok", "/readyz", "ready", (True, ""), 200, "ok"),
    ("readyz-standby", "/readyz", "ready", (True, "standby: r1 holds the leader lease"), 200,
     "standby: r1 holds the leader lease"),
    ("readyz-not-ready", "/readyz", "ready", (False, "caches not synced"), 503, "caches not synced"),
]


@pytest.mark.parametrize(
    ("path", "attr", "result", "status", "text"), [p[1:] for p in PROBES], ids=[p[0] for p in PROBES]
)
async def test_probes(observe: Fixture, path: str, attr: str, result: tuple[bool, str], status: int, text: str) -> None:
    setattr(observe.state, attr, result)
    got_status, content_type, body = await observe.get(path)
    assert got_status == status
    assert content_type.startswith("text/plain")
    assert text in body


async def test_probes_follow_state_changes(observe: Fixture) -> None:
    assert (await observe.get("/readyz"))[0] == 200
    observe.state.ready = (False, "leader election lost")
    status, _, body = await observe.get("/readyz")
    assert (status, body) == (503, "leader election lost")
    # Liveness is a separate callback: a controller that is not ready can still be alive.
    assert (await observe.get("/healthz"))[0] == 200
    observe.state.ready = (True, "")
    assert (await observe.get("/readyz"))[0] == 200


@pytest.mark.parametrize(("path", "attr"), [("/healthz", "healthy"), ("/readyz", "ready")], ids=["healthz", "readyz"])
async def test_a_raising_probe_fails_the_probe(observe: Fixture, path: str, attr: str) -> None:
    setattr(observe.state, attr, RuntimeError("state lock poisoned"))
    status, _, body = await observe.get(path)
    assert status == 503
    assert "RuntimeError: state lock poisoned" in body


async def test_metrics_exposition(observe: Fixture) -> None:
    observe.metrics.set_bookings(3)
    observe.metrics.scaled("tpu-a", "up", 4)
    status, content_type, body = await observe.get("/metrics")
    assert status == 200
    assert content_type == observe.metrics.render()[1]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("gangscale_bookings", ())] == 3
    key = ("gangscale_scaled_units_total", (("direction", "up"), ("dry_run", "false"), ("pool", "tpu-a")))
    assert samples[key] == 4


@dataclasses.dataclass
class Plan:
    pr: str
    pool: str
    units: int
    pools: frozenset[str]


PLANS = [
    ("list", lambda: [{"pr": "ns/a", "pool": "tpu-a", "units": 2}], [{"pr": "ns/a", "pool": "tpu-a", "units": 2}]),
    ("empty", lambda: {}, {}),
    ("none", lambda: None, None),
    (
        "dataclass",
        lambda: [Plan("ns/a", "tpu-a", 2, frozenset({"tpu-b", "tpu-a"}))],
        [{"pr": "ns/a", "pool": "tpu-a", "units": 2, "pools": ["tpu-a", "tpu-b"]}],
    ),
    ("unknown-type", lambda: {"since": complex(1, 2)}, {"since": "(1+2j)"}),
]


@pytest.mark.parametrize(("plans", "expected"), [p[1:] for p in PLANS], ids=[p[0] for p in PLANS])
async def test_debug_plans(observe: Fixture, plans: Callable[[], object], expected: object) -> None:
    observe.state.plans = plans
    status, content_type, body = await observe.get("/debug/plans")
    assert status == 200
    assert content_type.startswith("application/json")
    assert json.loads(body) == expected
    if expected:
        assert "\n  " in body  # indented for reading with curl


PLAN_ERRORS = [
    ("raises", raising(KeyError("tpu-a")), "KeyError"),
    ("not-finite", lambda: {"score": float("inf")}, "ValueError"),
]


@pytest.mark.parametrize(("plans", "error"), [p[1:] for p in PLAN_ERRORS], ids=[p[0] for p in PLAN_ERRORS])
async def test_debug_plans_failure_is_a_500(observe: Fixture, plans: Callable[[], object], error: str) -> None:
    observe.state.plans = plans
    status, content_type, body = await observe.get("/debug/plans")
    assert status == 500
    assert content_type.startswith("text/plain")
    assert body.startswith(f"plans unavailable: {error}")
    # The server keeps serving after a failing handler.
    observe.state.plans = lambda: []
    assert (await observe.get("/debug/plans"))[0] == 200


@pytest.mark.parametrize("path", ["/", "/metricz", "/debug", "/debug/plans/x"])
async def test_unknown_path_is_404(observe: Fixture, path: str) -> None:
    assert (await observe.get(path))[0] == 404


async def test_stop_closes_the_port_and_is_idempotent() -> None:
    server = ObserveServer(
        host="127.0.0.1", port=0, metrics=Metrics(), healthy=lambda: (True, ""), ready=lambda: (True, ""), plans=list
    )
    await server.stop()  # before start: nothing to do
    await server.start()
    port = server.port
    with pytest.raises(RuntimeError, match="already started"):
        await server.start()
    await server.stop()
    await server.stop()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"http://127.0.0.1:{port}/healthz")


async def test_start_failure_leaves_nothing_running() -> None:
    async with ObserveServer(
        host="127.0.0.1", port=0, metrics=Metrics(), healthy=lambda: (True, ""), ready=lambda: (True, ""), plans=list
    ) as first:
        second = ObserveServer(
            host="127.0.0.1",
            port=first.port,
            metrics=Metrics(),
            healthy=lambda: (True, ""),
            ready=lambda: (True, ""),
            plans=list,
        )
        with pytest.raises(OSError):
            await second.start()
        await second.stop()
