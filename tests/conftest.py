"""Shared fixtures: the embedded API server, clients over real HTTP, and a guard against leaked tasks."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio.client import ApiClient

from gangscale.clock import ManualClock
from gangscale.kube.client import load_configuration, make_http
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer

#: Test files (relative to tests/) whose tests are long end-to-end runs: real processes killed and restarted,
#: a real Ray head, whole demo scenarios. Marked ``slow`` so that ``pytest -m "not slow"`` is a quick loop;
#: the full suite (CI, ``./dev.sh test``) runs them all.
SLOW = ("crash/", "ray/", "sim/test_builtin_scenarios.py", "sim/test_ray_scenario.py", "cli/test_run_command.py",
        "cli/test_run_gke.py", "cli/test_run_aws.py", "cli/test_demo_command.py")
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(TESTS).as_posix().startswith(SLOW):
            item.add_marker(pytest.mark.slow)
        # Every coroutine test runs under the leak guard, set up first so that it is torn down last.
        fn = getattr(item, "function", None)
        if fn is not None and inspect.iscoroutinefunction(fn):
            item.fixturenames.insert(0, "no_leaked_tasks")  # type: ignore[attr-defined]


class GoogleTraffic:
    """Every request a fake Google Cloud of this process answered during the test, checked against Google's discovery
    documents (:mod:`gangscale.sim.gcp.discovery`). gangscale's own calls (user agent ``gangscale…``) must always be
    valid; a test client's request may be wrong on purpose if the fake refused it, never if the fake accepted it; every
    answer must be valid. ``expect_problems``: the test seeds a wrong field itself and reads ``problems``."""

    def __init__(self) -> None:
        self.exchanges = 0
        self.problems: list[str] = []
        self.expect_problems = False

    def __call__(self, *, method: str, path: str, query: Any, request: Any, status: int, response: Any,
                 user_agent: str) -> None:
        from gangscale.sim.gcp.discovery import Discovery, Exchange  # noqa: PLC0415 (only where a fake runs)

        self.exchanges += 1
        found = Discovery.load().check(Exchange(method, path, query, request, status, response),
                                       strict_request=user_agent.startswith("gangscale"))
        self.problems += [f"{method} {path} -> {status} ({user_agent or 'no user agent'}): {p}" for p in found]


@pytest.fixture(autouse=True)
def google_traffic() -> Iterator[GoogleTraffic]:
    """Checks the traffic of every fake Google Cloud the test runs (see :class:`GoogleTraffic`)."""
    from gangscale.sim.gcp.server import OBSERVERS  # noqa: PLC0415

    traffic = GoogleTraffic()
    OBSERVERS.append(traffic)
    try:
        yield traffic
    finally:
        OBSERVERS.remove(traffic)
    if traffic.problems and not traffic.expect_problems:
        shown = "\n".join(traffic.problems[:10])
        pytest.fail(f"{len(traffic.problems)} exchange(s) with a fake Google Cloud break Google's discovery documents "
                    f"(of {traffic.exchanges}):\n{shown}")


@pytest_asyncio.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running (kopf's ``_no_asyncio_pending_tasks``)."""
    before = set(asyncio.all_tasks())
    yield
    for _ in range(3):  # let tasks that were cancelled during teardown finish
        await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    for t in leaked:
        t.cancel()
    if leaked:
        pytest.fail(f"test leaked {len(leaked)} asyncio task(s): {sorted(t.get_name() for t in leaked)}")


@pytest.fixture
def clock() -> ManualClock:
    """A test's own clock. A test that uses it also gets an ``apiserver`` that stamps objects with it."""
    return ManualClock()


@pytest_asyncio.fixture
async def apiserver(request: pytest.FixtureRequest) -> AsyncIterator[EmbeddedAPIServer]:
    manual = request.getfixturevalue("clock") if "clock" in request.fixturenames else None
    server = EmbeddedAPIServer(bookmark_interval=0.2, seed=1, clock=manual.datetime if manual else None)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def kubeconfig(apiserver: EmbeddedAPIServer, tmp_path: Path) -> Path:
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest_asyncio.fixture
async def http(kubeconfig: Path) -> AsyncIterator[KubeHTTP]:
    """The production client path: kubeconfig -> kubernetes_asyncio ApiClient -> KubeHTTP."""
    client = await make_http(str(kubeconfig), user_agent="gangscale-tests")
    try:
        yield client
    finally:
        await client.api_client.close()


@pytest_asyncio.fixture
async def api_client(kubeconfig: Path) -> AsyncIterator[ApiClient]:
    """A plain kubernetes_asyncio ApiClient, for the typed API classes."""
    cfg = await load_configuration(str(kubeconfig))
    client = ApiClient(configuration=cfg)
    try:
        yield client
    finally:
        await client.close()


async def step_through(clock: ManualClock, seconds: float, settle: Callable[[], Awaitable[None]],
                       each: Callable[[], Awaitable[None]] | None = None) -> None:
    """Move ``clock`` ``seconds`` on, stopping at every timer due on the way and letting everything react there
    (``settle``) before it moves again, as the simulation driver does; ``each`` runs at every stop."""
    target = clock.now() + seconds
    await settle()
    while (due := clock.next_deadline) is not None and due <= target:
        await clock.set(due)
        await settle()
        if each is not None:
            await each()
    await clock.set(target)
    await settle()


async def wait_for(predicate: Callable[[], Any], *, timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Poll until ``predicate()`` is truthy; fails the test after ``timeout`` (a hang guard, not a timing check)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            pytest.fail("condition not reached before the hang guard expired")
        await asyncio.sleep(interval)


class Ec2Traffic:
    """Every exchange of a fake EC2 during the test, checked against botocore's EC2 model: a request the fake
    accepted must fit the input shape (one it refused may be wrong on purpose, unless gangscale sent it), and every
    answer must fit the output shape (XML and the data behind it) or EC2's error envelope."""

    def __init__(self) -> None:
        self.exchanges = 0
        self.problems: list[str] = []
        self.expect_problems = False

    def __call__(self, exchange: Any) -> None:
        from gangscale.sim.aws.model import (  # noqa: PLC0415
            answer_problems,
            operations,
            request_problems,
            validate_output,
        )

        self.exchanges += 1
        found: list[str] = []
        if exchange.action in operations() and (exchange.status == 200 or exchange.user_agent.startswith("gangscale")):
            found += request_problems(exchange.action, exchange.form)
        if exchange.status and exchange.action in operations():
            found += answer_problems(exchange.action, exchange.status, exchange.body)
        if exchange.answer is not None:
            found += validate_output(exchange.action, exchange.answer)
        self.problems += [f"{exchange.action} -> {exchange.status}: {p}" for p in found]


@pytest.fixture(autouse=True)
def ec2_traffic() -> Iterator[Ec2Traffic]:
    """Checks the traffic of every fake EC2 the test runs (see :class:`Ec2Traffic`)."""
    from gangscale.sim.aws.server import OBSERVERS  # noqa: PLC0415

    traffic = Ec2Traffic()
    OBSERVERS.append(traffic)
    try:
        yield traffic
    finally:
        OBSERVERS.remove(traffic)
    if traffic.problems and not traffic.expect_problems:
        pytest.fail(f"{len(traffic.problems)} exchange(s) with the fake EC2 break botocore's EC2 model "
                    f"(of {traffic.exchanges}):\n" + "\n".join(traffic.problems[:10]))
