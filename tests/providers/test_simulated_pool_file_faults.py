"""The simulated cloud's fault knobs set from the pool file's ``simulated:`` section (what ``hack/chaos.py`` uses
to fault-inject a real ``gangscale run`` process), and never-Ready nodes staying so across a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.config import ConfigError, parse_pool_yaml
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import NodePool
from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests import builders as b

DEADLINE = 10**10

Make = Callable[[str], "asyncio.Future[SimulatedProvider]"]


def pool_file(simulated: str) -> tuple[NodePool, ...]:
    return parse_pool_yaml(f"""
nodePools:
  - name: cpu
    zone: z
    maxUnits: 4
    allocatable: {{cpu: "8", memory: 32Gi}}
    simulated: {{stock: 4, provisionSeconds: 10{simulated}}}
""").pools


@pytest_asyncio.fixture
async def providers(http: KubeHTTP, clock: ManualClock) -> AsyncIterator[list[SimulatedProvider]]:
    made: list[SimulatedProvider] = []
    yield made
    for provider in made:
        await provider.aclose()


async def start(made: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock, simulated: str) -> SimulatedProvider:
    provider = SimulatedProvider(http, pool_file(simulated), clock)
    made.append(provider)
    await provider.start()
    return provider


async def obtain_error(provider: SimulatedProvider, units: int, token: str) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await provider.obtain("cpu", units, token=token, deadline=DEADLINE)
    return info.value


async def node_names(http: KubeHTTP) -> list[str]:
    return sorted(n["metadata"]["name"] for n in (await http.request("GET", b.NODES.path()))["items"])


def ready(node: dict[str, object]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []  # type: ignore[union-attr]
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.mark.parametrize(("simulated", "code", "error_class", "nodes_left"), [
    (", stockout: true", "GCE_STOCKOUT", ErrorClass.STOCKOUT, 0),
    (", quota: true", "QUOTA_EXCEEDED", ErrorClass.QUOTA, 0),
    (", partialGrant: 1", "GCE_STOCKOUT", ErrorClass.STOCKOUT, 0),
    (", lostResponses: 1", "DEADLINE_EXCEEDED", ErrorClass.TRANSIENT, 2),
    (", transientErrors: 1", "UNAVAILABLE", ErrorClass.TRANSIENT, 0),
], ids=["stockout", "quota", "partial-grant", "lost-response", "transient-error"])
async def test_a_knob_from_the_pool_file_fails_the_first_obtain(
        providers: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock, simulated: str, code: str,
        error_class: ErrorClass, nodes_left: int) -> None:
    provider = await start(providers, http, clock, simulated)

    error = await obtain_error(provider, 2, "tok-1")

    assert (error.code, error.error_class) == (code, error_class)
    assert len(await node_names(http)) == nodes_left


@pytest.mark.parametrize("simulated", [", partialGrant: 1", ", lostResponses: 1", ", transientErrors: 1"],
                         ids=["partial-grant", "lost-response", "transient-error"])
async def test_counted_knobs_are_used_up_and_the_retry_succeeds(
        providers: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock, simulated: str) -> None:
    provider = await start(providers, http, clock, simulated)
    await obtain_error(provider, 2, "tok-1")

    got = await provider.obtain("cpu", 2, token="tok-1", deadline=DEADLINE)

    assert len(got.units) == 2 and await node_names(http) == sorted(got.node_names)


async def test_latency_from_the_pool_file_delays_every_call(
        providers: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock) -> None:
    provider = await start(providers, http, clock, ", latencySeconds: 5")
    call = asyncio.create_task(provider.obtain("cpu", 1, token="tok-1", deadline=DEADLINE))
    await asyncio.sleep(0.05)
    assert not call.done() and await node_names(http) == []

    await clock.advance(5)
    got = await asyncio.wait_for(call, 5)

    assert len(got.units) == 1


async def test_never_ready_nodes_stay_not_ready_after_a_restart_without_the_knob(
        providers: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock, apiserver: EmbeddedAPIServer) -> None:
    broken = await start(providers, http, clock, ", neverReady: true")
    stuck = await broken.obtain("cpu", 1, token="tok-stuck", deadline=DEADLINE)
    await broken.aclose()

    healthy = await start(providers, http, clock, "")
    fine = await healthy.obtain("cpu", 1, token="tok-fine", deadline=DEADLINE)
    await clock.advance(3600)
    await asyncio.sleep(0.05)

    nodes = {n["metadata"]["name"]: n for n in (await http.request("GET", b.NODES.path()))["items"]}
    assert [ready(nodes[name]) for name in stuck.node_names] == [False]
    assert [ready(nodes[name]) for name in fine.node_names] == [True]
    assert await healthy.lookup("tok-stuck") == stuck  # still known, so a release finds it


@pytest.mark.parametrize(("simulated", "field"), [
    (", partialGrant: -1", "partialGrant"),
    (", lostResponses: -2", "lostResponses"),
    (", transientErrors: 1.5", "transientErrors"),
    (", latencySeconds: -1", "latencySeconds"),
    (", stockout: \"true\"", "stockout"),
    (", stockOut: true", "stockOut"),
], ids=["negative-grant", "negative-lost", "fractional-errors", "negative-latency", "quoted-bool", "typo"])
def test_bad_fault_knobs_are_named(simulated: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        pool_file(simulated)

    assert f"simulated.{field}" in str(info.value)
