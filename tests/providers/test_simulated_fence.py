"""The simulated cloud asks the fence (the leader lease) before every node create and delete: a process that
loses the lease mid-obtain stops there, leaves what it made for the next leader, and does not roll it back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests import builders as b
from tests.providers.test_simulated import DEADLINE, TPU

POOLS = (TPU,)


class Lease:
    """A fence that says yes to the first ``allowed`` questions, then no (the lease ran out)."""

    def __init__(self, allowed: int) -> None:
        self.allowed, self.asked = allowed, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked <= self.allowed


@pytest_asyncio.fixture
async def made(http: KubeHTTP, clock: ManualClock) -> AsyncIterator[list[SimulatedProvider]]:
    providers: list[SimulatedProvider] = []
    yield providers
    for provider in providers:
        await provider.aclose()


async def start(made: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock,
                fence: Lease | None = None) -> SimulatedProvider:
    provider = SimulatedProvider(http, POOLS, clock) if fence is None else SimulatedProvider(http, POOLS, clock,
                                                                                               fence=fence)
    made.append(provider)
    await provider.start()
    return provider


def node_writes(server: EmbeddedAPIServer, verb: str) -> int:
    return sum(1 for r in server.requests if r.resource == "nodes" and r.verb == verb and r.subresource is None
               and 200 <= r.status < 300)


async def test_a_lease_lost_mid_obtain_stops_it_and_the_next_leader_finishes_exactly_the_rest(
        made: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock, apiserver: EmbeddedAPIServer) -> None:
    old = await start(made, http, clock, Lease(allowed=3))  # 2 slices of 2 hosts: the 4th node is refused

    with pytest.raises(ProviderError) as info:
        await old.obtain(TPU.name, 2, token="tok-1", deadline=DEADLINE)

    assert (info.value.code, info.value.error_class, info.value.rolled_back) == (
        "NOT_LEADER", ErrorClass.TRANSIENT, False)
    assert (node_writes(apiserver, "create"), node_writes(apiserver, "delete")) == (3, 0)  # kept, not rolled back

    new = await start(made, http, clock)
    got = await new.obtain(TPU.name, 2, token="tok-1", deadline=DEADLINE)

    nodes = sorted(n["metadata"]["name"] for n in (await http.request("GET", b.NODES.path()))["items"])
    assert nodes == sorted(got.node_names) and len(nodes) == 4
    assert node_writes(apiserver, "create") == 4  # the missing node only


async def test_a_fenced_release_deletes_nothing(made: list[SimulatedProvider], http: KubeHTTP, clock: ManualClock,
                                                apiserver: EmbeddedAPIServer) -> None:
    leader = await start(made, http, clock)
    got = await leader.obtain(TPU.name, 1, token="tok-1", deadline=DEADLINE)
    deposed = await start(made, http, clock, Lease(allowed=0))

    with pytest.raises(ProviderError) as info:
        await deposed.release(TPU.name, [unit.unit_id for unit in got.units], token="tok-1")

    assert info.value.code == "NOT_LEADER"
    assert node_writes(apiserver, "delete") == 0
    assert await deposed.lookup("tok-1") == got
