"""The simulated provider against the embedded API server, over real HTTP, with time driven by a ManualClock."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.model.pod import HOSTNAME_LABEL
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint
from gangscale.providers.base import (
    TOKEN_LABEL,
    UNIT_LABEL,
    ErrorClass,
    NodePoolProvider,
    Obtained,
    ProviderError,
    Unit,
)
from gangscale.providers.simfaults import CREATED, FAILED, OBTAIN, RELEASE, RELEASED, REUSED, PoolFaults
from gangscale.providers.simulated import KubeRequests, SimulatedProvider, unit_id_for
from gangscale.sim.apiserver import EmbeddedAPIServer, Fault
from gangscale.timefmt import rfc3339
from tests import builders as b
from tests.conftest import wait_for
from tests.planner.builders import CPU_NODE, TPU_NODE, TPU_V5E

JSON = dict[str, Any]
NOT_READY = "node.kubernetes.io/not-ready"
TPU_TAINT = Taint("google.com/tpu", "present", "NoSchedule")


def make_pool(name: str, allocatable: Mapping[str, str] = CPU_NODE, *, nodes_per_unit: int = 1,
              stock: int | None = None, provision: float = 60.0, labels: Mapping[str, str] | None = None,
              taints: Sequence[Taint] = ()) -> NodePool:
    return NodePool(name=name, allocatable=ResourceList.parse(allocatable), max_units=10,
                    labels={POOL_LABEL: name, **(labels or {})}, taints=tuple(taints),
                    nodes_per_unit=nodes_per_unit,
                    provider={"simulated": {"stock": stock, "provisionSeconds": provision}})


CPU = make_pool("cpu", CPU_NODE, stock=3, provision=30, labels={"cloud.google.com/machine-family": "n2"})
TPU = make_pool("tpu-v5e", TPU_NODE, nodes_per_unit=2, stock=2, provision=60, labels=TPU_V5E, taints=[TPU_TAINT])
FAST = make_pool("fast", {"cpu": "4", "memory": "16Gi"}, provision=0)
POOLS = (CPU, TPU, FAST)
DEADLINE = 10**10  # far beyond any clock time the tests reach

MakeProvider = Callable[..., Awaitable[SimulatedProvider]]


# --- fixtures -------------------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def make_provider(http: KubeHTTP, clock: ManualClock) -> AsyncIterator[MakeProvider]:
    """Started providers on the shared server and clock, all closed at teardown."""
    made: list[SimulatedProvider] = []

    async def make(pools: Sequence[NodePool] = POOLS, *,
                   before_start: Callable[[SimulatedProvider], None] | None = None) -> SimulatedProvider:
        provider = SimulatedProvider(http, pools, clock)
        made.append(provider)
        if before_start is not None:
            before_start(provider)
        await provider.start()
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest_asyncio.fixture
async def provider(make_provider: MakeProvider) -> SimulatedProvider:
    return await make_provider()


# --- helpers --------------------------------------------------------------------------------------------


async def list_nodes(http: KubeHTTP) -> dict[str, JSON]:
    out = await http.request("GET", b.NODES.path())
    return {node["metadata"]["name"]: node for node in out["items"]}


def ready_status(node: JSON) -> str | None:
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)


def taint_keys(node: JSON) -> set[str]:
    return {t["key"] for t in node["spec"].get("taints") or []}


async def all_ready(http: KubeHTTP, names: Sequence[str]) -> bool:
    nodes = await list_nodes(http)
    return all(name in nodes and ready_status(nodes[name]) == "True" and NOT_READY not in taint_keys(nodes[name])
               for name in names)


def node_requests(server: EmbeddedAPIServer, verb: str, subresource: str | None = None) -> list[str]:
    """Names of successful node requests of one verb (create requests carry no name in the URL: counted as "")."""
    return [r.name for r in server.requests
            if r.resource == "nodes" and r.verb == verb and r.subresource == subresource and 200 <= r.status < 300]


def status_posts(server: EmbeddedAPIServer) -> list[tuple[str, int]]:
    """Every node status write, failed ones too: (node, HTTP status)."""
    return [(r.name, r.status) for r in server.requests
            if r.resource == "nodes" and r.verb == "patch" and r.subresource == "status"]


async def obtain(provider: SimulatedProvider, pool: NodePool, units: int, token: str) -> Obtained:
    return await provider.obtain(pool.name, units, token=token, deadline=DEADLINE)


async def obtain_error(provider: SimulatedProvider, pool: NodePool, units: int, token: str) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await obtain(provider, pool, units, token)
    return info.value


# --- the protocol ---------------------------------------------------------------------------------------


def test_satisfies_the_provider_protocol(http: KubeHTTP, clock: ManualClock) -> None:
    client: KubeRequests = http  # KubeHTTP is the production client the provider is written against
    provider: NodePoolProvider = SimulatedProvider(client, POOLS, clock)
    assert provider.name == "simulated"


@pytest.mark.parametrize("section", [{"stock": -1}, {"stock": "2"}, {"provisionSeconds": -5}],
                         ids=["negative-stock", "string-stock", "negative-provision"])
def test_rejects_bad_pool_sections(http: KubeHTTP, clock: ManualClock, section: JSON) -> None:
    bad = NodePool(name="bad", allocatable=ResourceList.parse(CPU_NODE), max_units=1,
                   provider={"simulated": section})
    with pytest.raises(ValueError, match="pool bad: simulated"):
        SimulatedProvider(http, [bad], clock)


# --- nodes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pool", "units"), [(CPU, 2), (TPU, 1)], ids=["cpu-2-units", "tpu-slice"])
async def test_obtain_registers_not_ready_nodes(provider: SimulatedProvider, http: KubeHTTP, pool: NodePool,
                                                units: int) -> None:
    got = await obtain(provider, pool, units, "tok-1")

    assert got.token == "tok-1"
    assert got.pool == pool.name
    assert len(got.units) == units
    nodes = await list_nodes(http)
    assert sorted(nodes) == sorted(got.node_names)
    assert len(nodes) == units * pool.nodes_per_unit
    expected_quantities = {**CPU_NODE, "pods": "110"} if pool is CPU else TPU_NODE
    for unit in got.units:
        assert re.fullmatch(rf"{pool.name}-[0-9a-f]{{10}}", unit.unit_id)
        assert unit.nodes == tuple(f"{unit.unit_id}-{i}" for i in range(pool.nodes_per_unit))
        for name in unit.nodes:
            node = nodes[name]
            assert node["metadata"]["labels"] == {**pool.labels, POOL_LABEL: pool.name, UNIT_LABEL: unit.unit_id,
                                                  TOKEN_LABEL: "tok-1", HOSTNAME_LABEL: name}
            assert node["spec"]["providerID"] == f"simulated://{pool.name}/{unit.unit_id}/{name}"
            assert ResourceList.parse(node["status"]["allocatable"]) == ResourceList.parse(expected_quantities)
            assert node["status"]["capacity"] == node["status"]["allocatable"]
            assert "pods" in node["status"]["allocatable"]
            taints = {(t["key"], t.get("value", ""), t["effect"]) for t in node["spec"]["taints"]}
            assert taints == {(t.key, t.value, t.effect) for t in pool.taints} | {(NOT_READY, "", "NoSchedule")}
            ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
            assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")


async def test_allocatable_is_written_as_kubernetes_quantities(provider: SimulatedProvider, http: KubeHTTP) -> None:
    got = await obtain(provider, FAST, 1, "tok-q")

    node = (await list_nodes(http))[got.node_names[0]]
    assert node["status"]["allocatable"] == {"cpu": "4", "memory": "16Gi", "pods": "110"}


@pytest.mark.parametrize("pool", [CPU, TPU], ids=["cpu", "tpu"])
async def test_nodes_turn_ready_after_provision_seconds_and_not_before(
        provider: SimulatedProvider, http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
        pool: NodePool) -> None:
    provision = pool.provider["simulated"]["provisionSeconds"]
    got = await obtain(provider, pool, 1, "tok-1")

    await clock.advance(provision - 1)
    await asyncio.sleep(0.05)  # room for a wrongly early patch to land
    assert node_requests(apiserver, "patch", "status") == []
    assert all(ready_status(n) == "False" for n in (await list_nodes(http)).values())

    await clock.advance(1)
    await wait_for(lambda: all_ready(http, got.node_names))
    nodes = await list_nodes(http)
    for name in got.node_names:
        ready = next(c for c in nodes[name]["status"]["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "KubeletReady"
        assert ready["lastTransitionTime"] == rfc3339(clock.now())
        assert {t.key for t in pool.taints} == taint_keys(nodes[name])  # the pool's own taints stay
    assert sorted(node_requests(apiserver, "patch", "status")) == sorted(got.node_names)


async def test_zero_provision_seconds_still_patches_status(provider: SimulatedProvider, http: KubeHTTP,
                                                           apiserver: EmbeddedAPIServer) -> None:
    got = await obtain(provider, FAST, 2, "tok-fast")

    await wait_for(lambda: all_ready(http, got.node_names))
    assert sorted(node_requests(apiserver, "patch", "status")) == sorted(got.node_names)


async def test_a_failed_status_post_is_retried_as_a_kubelet_would(
        provider: SimulatedProvider, http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    apiserver.faults.inject(Fault(verb="patch", resource="nodes", subresource="status", status=500, times=2))
    got = await obtain(provider, CPU, 1, "tok-1")

    await clock.advance(30)
    await wait_for(lambda: clock.sleepers == 2)  # first post failed: waiting 0.5 s (and the heartbeat's 10 s tick)
    await clock.advance(0.5)
    await wait_for(lambda: clock.sleepers == 2 and len(status_posts(apiserver)) == 2)
    assert not await all_ready(http, got.node_names)
    await clock.advance(1)  # the second wait doubles
    await wait_for(lambda: all_ready(http, got.node_names))

    assert status_posts(apiserver) == [(got.node_names[0], 500), (got.node_names[0], 500), (got.node_names[0], 200)]
    assert "Traceback" not in caplog.text and "retrying in 0.5s" in caplog.text


async def test_a_refused_status_post_is_not_retried(
        provider: SimulatedProvider, http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    apiserver.faults.inject(Fault(verb="patch", resource="nodes", subresource="status", status=403, times=1))
    got = await obtain(provider, CPU, 1, "tok-1")

    await clock.advance(30)
    await wait_for(lambda: any("cannot be marked Ready" in r.message for r in caplog.records))

    assert clock.sleepers == 1 and not await all_ready(http, got.node_names)  # the heartbeat's tick only
    assert status_posts(apiserver) == [(got.node_names[0], 403)]


async def test_multi_host_slice_is_created_whole(provider: SimulatedProvider, http: KubeHTTP) -> None:
    got = await obtain(provider, TPU, 2, "tok-slices")

    nodes = await list_nodes(http)
    by_unit: dict[str, list[str]] = {}
    for name, node in nodes.items():
        by_unit.setdefault(node["metadata"]["labels"][UNIT_LABEL], []).append(name)
    assert {unit.unit_id: sorted(unit.nodes) for unit in got.units} == {u: sorted(n) for u, n in by_unit.items()}
    assert all(len(names) == 2 for names in by_unit.values())
    assert provider.available(TPU.name) == 0


async def test_unit_ids_and_hostnames_fit_label_values(make_provider: MakeProvider, http: KubeHTTP) -> None:
    long_pool = make_pool("p" * 63, nodes_per_unit=12)
    provider = await make_provider([long_pool])

    got = await obtain(provider, long_pool, 1, "tok-long")

    assert len(got.units[0].unit_id) <= 63
    assert all(len(name) <= 63 for name in got.node_names)
    assert sorted(await list_nodes(http)) == sorted(got.node_names)


async def test_unit_ids_are_unique(provider: SimulatedProvider) -> None:
    ids = [unit.unit_id for i in range(20) for unit in (await obtain(provider, FAST, 3, f"tok-{i}")).units]

    assert len(set(ids)) == 60


# --- stock ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("first", "second", "available"), [(2, 1, 0), (1, 2, 1), (0, 3, 2)],
                         ids=["exhausted", "not-enough-left", "more-than-stock"])
async def test_stockout_when_stock_runs_out(provider: SimulatedProvider, http: KubeHTTP, first: int,
                                            second: int, available: int) -> None:
    if first:
        await obtain(provider, TPU, first, "tok-first")
    before = await list_nodes(http)

    error = await obtain_error(provider, TPU, second, "tok-second")

    assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.STOCKOUT, "GCE_STOCKOUT", True)
    assert TPU.name in error.message
    assert f"wanted {second} unit(s), {available} available" in error.message
    assert await list_nodes(http) == before
    assert provider.available(TPU.name) == available
    assert await provider.lookup("tok-second") is None


async def test_unlimited_stock(provider: SimulatedProvider) -> None:
    await obtain(provider, FAST, 7, "tok-many")

    assert provider.available(FAST.name) is None
    assert provider.in_use(FAST.name) == 7


async def test_release_returns_stock(provider: SimulatedProvider, http: KubeHTTP) -> None:
    got = await obtain(provider, TPU, 2, "tok-1")
    kept, gone = got.units

    await provider.release(TPU.name, [gone.unit_id], token="rel-1")

    assert sorted(await list_nodes(http)) == sorted(kept.nodes)
    assert provider.available(TPU.name) == 1
    assert await provider.lookup("tok-1") == Obtained("tok-1", TPU.name, (kept,))
    again = await obtain(provider, TPU, 1, "tok-2")
    assert again.units[0].unit_id not in {kept.unit_id, gone.unit_id}
    assert provider.available(TPU.name) == 0


async def test_release_is_idempotent(provider: SimulatedProvider, http: KubeHTTP) -> None:
    got = await obtain(provider, CPU, 3, "tok-1")
    first, second, third = (unit.unit_id for unit in got.units)
    # One node disappears behind the provider's back (an operator's kubectl delete).
    await http.request("DELETE", b.NODES.path(name=got.units[1].nodes[0]))

    await provider.release(CPU.name, [first, second], token="rel-1")
    await provider.release(CPU.name, [first, second], token="rel-1")
    await provider.release(CPU.name, ["cpu-00000", "not a label value"], token="rel-2")

    assert sorted(await list_nodes(http)) == list(got.units[2].nodes)
    assert provider.available(CPU.name) == 2
    releases = [c for c in provider.calls if c.operation == RELEASE]
    assert [(c.outcome, c.unit_ids, c.nodes_deleted) for c in releases] == [
        (RELEASED, (first, second), 1), (RELEASED, (first, second), 0),
        (RELEASED, ("cpu-00000", "not a label value"), 0)]
    assert await provider.lookup("tok-1") == Obtained("tok-1", CPU.name, (got.units[2],))

    await provider.release(CPU.name, [third], token="rel-3")
    assert await provider.lookup("tok-1") is None
    assert await list_nodes(http) == {}


async def test_release_cancels_pending_ready_timers(provider: SimulatedProvider, clock: ManualClock,
                                                    apiserver: EmbeddedAPIServer) -> None:
    got = await obtain(provider, CPU, 1, "tok-1")
    await wait_for(lambda: clock.sleepers == 2)  # the Ready timer and the kubelets' heartbeat

    await provider.release(CPU.name, [got.units[0].unit_id], token="rel-1")

    await wait_for(lambda: clock.sleepers == 0)  # no node left: no heartbeat either
    await clock.advance(3600)
    assert node_requests(apiserver, "patch", "status") == []


async def test_release_of_another_pools_unit_is_refused(provider: SimulatedProvider, http: KubeHTTP) -> None:
    got = await obtain(provider, CPU, 1, "tok-1")

    with pytest.raises(ProviderError) as info:
        await provider.release(TPU.name, [got.units[0].unit_id], token="rel-1")

    assert (info.value.error_class, info.value.code) == (ErrorClass.PERMANENT, "WRONG_POOL")
    assert sorted(await list_nodes(http)) == list(got.node_names)


# --- idempotency ----------------------------------------------------------------------------------------


async def test_same_token_returns_the_same_units(provider: SimulatedProvider, apiserver: EmbeddedAPIServer) -> None:
    first = await obtain(provider, TPU, 1, "tok-1")
    creates = len(node_requests(apiserver, "create"))

    second = await obtain(provider, TPU, 1, "tok-1")

    assert second == first
    assert len(node_requests(apiserver, "create")) == creates == 2
    assert await provider.lookup("tok-1") == first
    assert [(c.outcome, c.nodes_created) for c in provider.calls] == [(CREATED, 2), (REUSED, 0)]


@pytest.mark.parametrize(("pool", "units"), [(TPU, 2), (CPU, 1)], ids=["other-count", "other-pool"])
async def test_token_mismatch(provider: SimulatedProvider, http: KubeHTTP, pool: NodePool, units: int) -> None:
    await obtain(provider, TPU, 1, "tok-1")
    before = await list_nodes(http)

    error = await obtain_error(provider, pool, units, "tok-1")

    assert (error.error_class, error.code) == (ErrorClass.PERMANENT, "TOKEN_MISMATCH")
    assert await list_nodes(http) == before


async def test_lookup_of_an_unknown_token(provider: SimulatedProvider) -> None:
    assert await provider.lookup("never-used") is None


@pytest.mark.parametrize("token", ["", "has space", "x" * 64, "-leading"], ids=["empty", "space", "long", "dash"])
async def test_tokens_must_be_label_values(provider: SimulatedProvider, token: str) -> None:
    error = await obtain_error(provider, CPU, 1, token)

    assert (error.error_class, error.code) == (ErrorClass.PERMANENT, "INVALID_TOKEN")


async def test_unknown_pool(provider: SimulatedProvider) -> None:
    error = await obtain_error(provider, make_pool("nope"), 1, "tok-1")
    assert (error.error_class, error.code, error.pool) == (ErrorClass.PERMANENT, "UNKNOWN_POOL", "nope")
    with pytest.raises(ProviderError, match="UNKNOWN_POOL"):
        await provider.release("nope", ["nope-12345"], token="rel-1")
    with pytest.raises(ProviderError, match="UNKNOWN_POOL"):
        provider.faults("nope")
    assert [(c.operation, c.outcome, c.code) for c in provider.calls] == [
        (OBTAIN, FAILED, "UNKNOWN_POOL"), (RELEASE, FAILED, "UNKNOWN_POOL")]


async def test_concurrent_obtains_never_oversell_stock(provider: SimulatedProvider, http: KubeHTTP) -> None:
    results = await asyncio.gather(*(obtain(provider, TPU, 2, f"tok-{i}") for i in range(3)),
                                   return_exceptions=True)

    won = [r for r in results if isinstance(r, Obtained)]
    lost = [r for r in results if isinstance(r, ProviderError)]
    assert len(won) == 1
    assert [e.code for e in lost] == ["GCE_STOCKOUT", "GCE_STOCKOUT"]
    assert sorted(await list_nodes(http)) == sorted(won[0].node_names)


async def test_one_token_in_two_pools_at_once(provider: SimulatedProvider, http: KubeHTTP) -> None:
    results = await asyncio.gather(obtain(provider, CPU, 1, "tok-1"), obtain(provider, FAST, 1, "tok-1"),
                                   return_exceptions=True)

    won = [r for r in results if isinstance(r, Obtained)]
    assert len(won) == 1
    assert [r.code for r in results if isinstance(r, ProviderError)] == ["TOKEN_MISMATCH"]
    assert sorted(await list_nodes(http)) == list(won[0].node_names)


# --- faults ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("knob", "value", "error_class", "code"), [
    ("stockout", True, ErrorClass.STOCKOUT, "GCE_STOCKOUT"),
    ("quota", True, ErrorClass.QUOTA, "QUOTA_EXCEEDED"),
    ("transient_errors", 1, ErrorClass.TRANSIENT, "UNAVAILABLE"),
], ids=["stockout", "quota", "transient"])
async def test_faults_that_create_nothing(provider: SimulatedProvider, http: KubeHTTP,
                                          apiserver: EmbeddedAPIServer, knob: str, value: object,
                                          error_class: ErrorClass, code: str) -> None:
    setattr(provider.faults(CPU.name), knob, value)

    error = await obtain_error(provider, CPU, 1, "tok-1")

    assert (error.error_class, error.code, error.rolled_back) == (error_class, code, True)
    assert node_requests(apiserver, "create") == []
    assert await list_nodes(http) == {}
    assert await provider.lookup("tok-1") is None
    assert provider.available(CPU.name) == 3
    assert provider.faults(TPU.name) == PoolFaults()  # other pools are unaffected
    await obtain(provider, TPU, 1, "tok-other")


async def test_transient_errors_count_down_and_hit_release_too(provider: SimulatedProvider) -> None:
    got = await obtain(provider, CPU, 1, "tok-1")
    provider.faults(CPU.name).transient_errors = 2

    error = await obtain_error(provider, CPU, 1, "tok-2")
    assert error.retry_after == 1.0
    with pytest.raises(ProviderError, match="UNAVAILABLE"):
        await provider.release(CPU.name, [got.units[0].unit_id], token="rel-1")
    await provider.release(CPU.name, [got.units[0].unit_id], token="rel-1")

    assert provider.faults(CPU.name).transient_errors == 0
    assert [(c.operation, c.outcome) for c in provider.calls] == [
        (OBTAIN, CREATED), (OBTAIN, FAILED), (RELEASE, FAILED), (RELEASE, RELEASED)]


async def test_partial_grant_creates_then_rolls_back_exactly_what_it_created(
        make_provider: MakeProvider, http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock) -> None:
    big_tpu = make_pool("tpu-big", TPU_NODE, nodes_per_unit=2, stock=5)
    provider = await make_provider([big_tpu])
    provider.faults(big_tpu.name).partial_grant = 1

    error = await obtain_error(provider, big_tpu, 3, "tok-1")

    assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.STOCKOUT, "GCE_STOCKOUT", True)
    assert "wanted 3 unit(s), 1 available" in error.message
    deleted = node_requests(apiserver, "delete")
    assert len(node_requests(apiserver, "create")) == 2  # one whole slice
    assert len(deleted) == 2 and len(set(deleted)) == 2
    assert all(re.fullmatch(r"tpu-big-[0-9a-f]{10}-[01]", name) for name in deleted)
    assert await list_nodes(http) == {}
    assert provider.faults(big_tpu.name).partial_grant is None
    assert provider.available(big_tpu.name) == 5
    assert await provider.lookup("tok-1") is None
    assert clock.sleepers == 0
    assert (provider.calls[-1].nodes_created, provider.calls[-1].nodes_deleted) == (2, 2)

    again = await obtain(provider, big_tpu, 3, "tok-1")  # one-shot: the retry gets everything

    assert len(again.node_names) == 6


async def test_never_ready(provider: SimulatedProvider, http: KubeHTTP, apiserver: EmbeddedAPIServer,
                           clock: ManualClock) -> None:
    provider.faults(CPU.name).never_ready = True

    got = await obtain(provider, CPU, 2, "tok-1")
    await clock.advance(3600)
    # The heartbeat's next tick is the only timer (no Ready timer), once the kubelets' round is over.
    await wait_for(lambda: not provider.busy and clock.sleepers == 1)

    nodes = await list_nodes(http)
    assert sorted(nodes) == sorted(got.node_names)
    # Their kubelets keep heartbeating and reporting their status (at least every 5 minutes): NotReady.
    assert all(ready_status(n) == "False" and NOT_READY in taint_keys(n) for n in nodes.values())
    assert all(status == 200 for _, status in status_posts(apiserver))


async def test_lost_response_then_retry_returns_the_same_units(provider: SimulatedProvider, http: KubeHTTP,
                                                               apiserver: EmbeddedAPIServer) -> None:
    provider.faults(TPU.name).timeouts = 1

    error = await obtain_error(provider, TPU, 1, "tok-1")

    assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.TRANSIENT, "DEADLINE_EXCEEDED", False)
    applied = await provider.lookup("tok-1")
    assert applied is not None
    assert sorted(await list_nodes(http)) == sorted(applied.node_names)

    retried = await obtain(provider, TPU, 1, "tok-1")

    assert retried == applied
    assert len(node_requests(apiserver, "create")) == 2
    assert provider.available(TPU.name) == 1
    assert [(c.outcome, c.code, c.unit_ids, c.nodes_created) for c in provider.calls] == [
        (FAILED, "DEADLINE_EXCEEDED", tuple(u.unit_id for u in applied.units), 2),
        (REUSED, "", tuple(u.unit_id for u in applied.units), 0)]
    assert sum(c.nodes_created for c in provider.calls) == 2  # never scaled twice


async def test_call_latency_uses_clock_time(provider: SimulatedProvider, http: KubeHTTP,
                                            clock: ManualClock) -> None:
    provider.faults(CPU.name).call_latency = 5
    call = asyncio.create_task(obtain(provider, CPU, 1, "tok-1"))
    await wait_for(lambda: clock.sleepers == 1)

    await clock.advance(4)
    assert not call.done()
    assert await list_nodes(http) == {}

    await clock.advance(1)
    got = await asyncio.wait_for(call, 5)
    assert sorted(await list_nodes(http)) == list(got.node_names)


async def test_call_latency_past_the_deadline_does_nothing(provider: SimulatedProvider, http: KubeHTTP,
                                                           clock: ManualClock) -> None:
    provider.faults(CPU.name).call_latency = 30
    call = asyncio.create_task(provider.obtain(CPU.name, 1, token="tok-1", deadline=clock.now() + 10))
    await wait_for(lambda: clock.sleepers == 1)

    await clock.advance(10)
    with pytest.raises(ProviderError) as info:
        await asyncio.wait_for(call, 5)

    assert (info.value.error_class, info.value.code, info.value.rolled_back) == (
        ErrorClass.TRANSIENT, "DEADLINE_EXCEEDED", True)
    assert await list_nodes(http) == {}


def test_pool_faults_clear() -> None:
    faults = PoolFaults(stockout=True, quota=True, partial_grant=2, never_ready=True, timeouts=1,
                        transient_errors=3, call_latency=1.5)
    faults.clear()
    assert faults == PoolFaults()


# --- Kubernetes API failures ----------------------------------------------------------------------------


async def test_api_failure_mid_obtain_rolls_back(provider: SimulatedProvider, http: KubeHTTP,
                                                 apiserver: EmbeddedAPIServer) -> None:
    # The slice's first node is created (a fault that passes the request through), the second create fails.
    apiserver.faults.inject(Fault(verb="create", resource="nodes", status=None, times=1))
    apiserver.faults.inject(Fault(verb="create", resource="nodes", status=503, times=1))

    error = await obtain_error(provider, TPU, 1, "tok-1")

    assert (error.error_class, error.code, error.rolled_back) == (ErrorClass.TRANSIENT, "KUBE_API_UNAVAILABLE", True)
    assert await list_nodes(http) == {}
    assert len(node_requests(apiserver, "create")) == 1
    assert len(node_requests(apiserver, "delete")) == 1
    assert provider.available(TPU.name) == 2
    assert await provider.lookup("tok-1") is None


async def test_failed_rollback_keeps_the_units_and_a_retry_finishes_them(
        provider: SimulatedProvider, http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    apiserver.faults.inject(Fault(verb="create", resource="nodes", status=None, times=1))
    apiserver.faults.inject(Fault(verb="create", resource="nodes", status=500, times=1))
    apiserver.faults.inject(Fault(verb="delete", resource="nodes", status=500, times=None))

    error = await obtain_error(provider, TPU, 1, "tok-1")

    assert (error.error_class, error.rolled_back) == (ErrorClass.TRANSIENT, False)
    designated = await provider.lookup("tok-1")
    assert designated is not None
    assert designated.incomplete == (designated.units[0].unit_id,)  # the lookup says the slice is not whole
    assert sorted(await list_nodes(http)) == [designated.node_names[0]]
    assert provider.available(TPU.name) == 1  # the half-made slice still holds its stock
    assert "could not roll back node" in caplog.text and "Traceback" not in caplog.text  # expected: no traceback

    apiserver.faults.clear()
    finished = await obtain(provider, TPU, 1, "tok-1")

    assert finished == replace(designated, incomplete=())
    assert sorted(await list_nodes(http)) == sorted(designated.node_names)
    assert provider.calls[-1].nodes_created == 1
    await clock.advance(60)
    await wait_for(lambda: all_ready(http, designated.node_names))


async def test_failed_release_can_be_retried(provider: SimulatedProvider, http: KubeHTTP,
                                             apiserver: EmbeddedAPIServer) -> None:
    got = await obtain(provider, CPU, 2, "tok-1")
    apiserver.faults.inject(Fault(verb="delete", resource="nodes", status=503, times=1,
                                  name=got.units[1].nodes[0]))

    with pytest.raises(ProviderError) as info:
        await provider.release(CPU.name, [u.unit_id for u in got.units], token="rel-1")

    assert (info.value.error_class, info.value.rolled_back) == (ErrorClass.TRANSIENT, False)
    assert provider.available(CPU.name) == 2  # the first unit is gone and returned, the second is not
    await provider.release(CPU.name, [u.unit_id for u in got.units], token="rel-1")
    assert await list_nodes(http) == {}
    assert provider.available(CPU.name) == 3


# --- restart --------------------------------------------------------------------------------------------


async def test_a_new_instance_rebuilds_the_inventory(make_provider: MakeProvider, http: KubeHTTP,
                                                     apiserver: EmbeddedAPIServer, clock: ManualClock) -> None:
    before = await make_provider()
    ready_slice = await obtain(before, TPU, 1, "tok-ready")
    await clock.advance(60)
    await wait_for(lambda: all_ready(http, ready_slice.node_names))
    pending = await obtain(before, CPU, 2, "tok-pending")  # Ready at +30s
    await clock.advance(10)
    await before.aclose()
    patches = len(node_requests(apiserver, "patch", "status"))

    after = await make_provider()

    assert await after.lookup("tok-ready") == ready_slice
    assert await after.lookup("tok-pending") == pending
    assert after.available(TPU.name) == 1
    assert after.available(CPU.name) == 1
    assert await obtain(after, TPU, 1, "tok-ready") == ready_slice
    fresh = await obtain(after, CPU, 1, "tok-new")
    assert fresh.units[0].unit_id not in {u.unit_id for u in pending.units}
    assert len(node_requests(apiserver, "create")) == 2 + 2 + 1

    await clock.advance(19)
    await asyncio.sleep(0.05)
    assert len(node_requests(apiserver, "patch", "status")) == patches  # the Ready nodes are left alone
    await clock.advance(1)  # the re-armed timer keeps the original schedule: 30s after creation
    await wait_for(lambda: all_ready(http, pending.node_names))
    assert not await all_ready(http, fresh.node_names)

    await after.release(CPU.name, [u.unit_id for u in pending.units], token="rel-1")
    assert after.available(CPU.name) == 2
    assert await after.lookup("tok-pending") is None


async def test_a_new_instance_finishes_exactly_the_intent_a_crashed_one_left(
        make_provider: MakeProvider, http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    """The first slice of three exists when the instance dies: the next one knows all three units, counts them
    against the stock, names the two missing ones incomplete, and a repeated obtain makes exactly those."""
    big_tpu = make_pool("tpu-big", TPU_NODE, nodes_per_unit=2, stock=5)
    before = await make_provider([big_tpu])
    apiserver.inject(verb="create", resource="nodes", after=2, hold=True)
    crashed = asyncio.create_task(obtain(before, big_tpu, 3, "tok-1"))
    await wait_for(lambda: bool(apiserver.faults.held))
    crashed.cancel()  # the process dies between two node creates
    apiserver.release_held(serve=False)
    with pytest.raises(asyncio.CancelledError):
        await crashed
    await before.aclose()
    made = sorted(await list_nodes(http))
    assert len(made) == 2

    after = await make_provider([big_tpu])

    intent = [unit_id_for(big_tpu, "tok-1", i) for i in range(3)]
    designated = await after.lookup("tok-1")
    assert designated is not None
    assert [unit.unit_id for unit in designated.units] == intent
    assert designated.incomplete == tuple(intent[1:])
    assert after.available(big_tpu.name) == 2  # all three units of the intent hold stock
    finished = await obtain(after, big_tpu, 3, "tok-1")
    assert finished == replace(designated, incomplete=())
    assert after.calls[-1].nodes_created == 4
    assert sorted(await list_nodes(http)) == sorted(finished.node_names)
    assert set(made) < set(finished.node_names)


async def test_a_lookup_after_a_restart_names_a_unit_whose_node_is_gone(
        make_provider: MakeProvider, http: KubeHTTP) -> None:
    before = await make_provider()
    got = await obtain(before, CPU, 2, "tok-1")
    await before.aclose()
    await http.request("DELETE", b.NODES.path(name=got.units[1].nodes[0]))

    after = await make_provider()

    assert await after.lookup("tok-1") == replace(got, incomplete=(got.units[1].unit_id,))


async def test_units_of_an_older_version_are_known_only_as_far_as_they_exist(
        make_provider: MakeProvider, http: KubeHTTP) -> None:
    """Random unit ids (an older version) cannot be rebuilt from the token: a repeated obtain returns what exists,
    short of the count, and the controller treats that as a failed step."""
    labels = {POOL_LABEL: CPU.name, UNIT_LABEL: "cpu-abcde", TOKEN_LABEL: "tok-old"}
    node = b.node("cpu-abcde-0", labels=labels, ready="False")
    node["metadata"]["annotations"] = {"simulated.gangscale.io/slot": "0/3"}
    await http.request("POST", b.NODES.path(), body=node)

    provider = await make_provider()

    got = await obtain(provider, CPU, 3, "tok-old")
    assert [unit.unit_id for unit in got.units] == ["cpu-abcde"]
    assert provider.calls[-1].outcome == REUSED


async def test_rebuild_respects_never_ready(make_provider: MakeProvider, http: KubeHTTP,
                                            apiserver: EmbeddedAPIServer, clock: ManualClock) -> None:
    before = await make_provider()
    got = await obtain(before, CPU, 1, "tok-1")
    await before.aclose()

    def stuck(provider: SimulatedProvider) -> None:
        provider.faults(CPU.name).never_ready = True

    after = await make_provider(before_start=stuck)
    await clock.advance(3600)
    await asyncio.sleep(0.05)

    assert await after.lookup("tok-1") == got
    assert node_requests(apiserver, "patch", "status") == []


async def test_rebuild_ignores_nodes_it_does_not_own(make_provider: MakeProvider, http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("stranger", labels={POOL_LABEL: CPU.name}))
    await http.request("POST", b.NODES.path(), body=b.node(
        "other-pool", labels={POOL_LABEL: "elsewhere", UNIT_LABEL: "u", TOKEN_LABEL: "tok-x"}))

    provider = await make_provider()

    assert provider.available(CPU.name) == 3
    assert await provider.lookup("tok-x") is None


async def test_rebuild_without_annotations_uses_the_creation_time(make_provider: MakeProvider, http: KubeHTTP,
                                                                    clock: ManualClock) -> None:
    # A node with the provider's labels but none of its annotations, e.g. written by an older version.
    labels = {POOL_LABEL: CPU.name, UNIT_LABEL: "cpu-abcde", TOKEN_LABEL: "tok-old"}
    await http.request("POST", b.NODES.path(), body=b.node("cpu-abcde-0", labels=labels, ready="False"))
    await clock.advance(20)

    provider = await make_provider()

    assert await provider.lookup("tok-old") == Obtained("tok-old", CPU.name, (Unit("cpu-abcde", ("cpu-abcde-0",)),))
    assert provider.available(CPU.name) == 2
    await clock.advance(9)
    await asyncio.sleep(0.05)
    assert not await all_ready(http, ["cpu-abcde-0"])
    await clock.advance(1)  # creationTimestamp + provisionSeconds (30)
    await wait_for(lambda: all_ready(http, ["cpu-abcde-0"]))


async def test_calls_require_start(http: KubeHTTP, clock: ManualClock) -> None:
    provider = SimulatedProvider(http, POOLS, clock)
    with pytest.raises(RuntimeError, match="start"):
        await obtain(provider, CPU, 1, "tok-1")
    await provider.aclose()



@pytest.mark.parametrize("owner", ["the-same-unit", "somebody-else"])
async def test_a_create_that_meets_an_existing_node_adopts_its_own_and_refuses_a_foreign_one(
        make_provider: MakeProvider, http: KubeHTTP, owner: str) -> None:
    """The create answers 409: the cloud looks the node up; if it carries this token and unit (an earlier
    attempt made it) it is adopted, otherwise the name is taken and the obtain fails for good."""
    unit = unit_id_for(FAST, "t-second", 0)
    taken = f"{unit}-0"
    # Without the pool label the cloud's inventory does not list it: only the create meets it.
    labels = {TOKEN_LABEL: "t-second", UNIT_LABEL: unit} if owner == "the-same-unit" else {}
    await http.request("POST", b.NODES.path(), body=b.node(taken, labels=labels))
    provider = await make_provider()
    if owner == "the-same-unit":
        again = await provider.obtain("fast", 1, token="t-second", deadline=DEADLINE)
        assert again.units[0].nodes == (taken,)
        assert provider.calls[-1].nodes_created == 0
    else:
        with pytest.raises(ProviderError) as raised:
            await provider.obtain("fast", 1, token="t-second", deadline=DEADLINE)
        assert (raised.value.error_class, raised.value.code) == (ErrorClass.PERMANENT, "NODE_NAME_TAKEN")
        assert taken in raised.value.message
