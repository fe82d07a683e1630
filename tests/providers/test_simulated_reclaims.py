"""The simulated cloud's spot reclaims (issue 28): a reclaimed node turns ``Ready=False`` with the kubelet's ``node is
shutting down`` at the notice and is deleted ``noticeSeconds`` later, its VM off the cloud's books as a restarted
provider would find it; the rate knob reclaims each Ready node as a Poisson process; the one-shot knob reclaims now;
a pool that is not spot cannot be reclaimed. Against the embedded API server over real HTTP, on the manual clock."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.config import ConfigError, parse_pool_yaml
from gangscale.kube.client import make_http
from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.model.resources import ResourceList
from gangscale.model.tiers import ON_DEMAND, SPOT
from gangscale.providers.base import Fence, unfenced
from gangscale.providers.simnodes import RECLAIM_AT_ANNOTATION, SHUTTING_DOWN_MESSAGE
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.quiet import until_quiet
from tests import builders as b
from tests.conftest import step_through

JSON = dict[str, Any]
DEADLINE = 10**10
NOTICE = 30.0


def spot_pool(name: str, *, nodes_per_unit: int = 1, provision: float = 0.0, reclaim: Mapping[str, Any] | None = None,
              capacity_type: str = SPOT) -> NodePool:
    simulated: dict[str, Any] = {"stock": None, "provisionSeconds": provision}
    if reclaim is not None:
        simulated["reclaim"] = dict(reclaim)
    return NodePool(name=name, allocatable=ResourceList.parse({"cpu": "4", "memory": "16Gi"}), max_units=500,
                    labels={POOL_LABEL: name}, nodes_per_unit=nodes_per_unit, capacity_type=capacity_type,
                    provider={"simulated": simulated})


SPOT_POOL = spot_pool("spot", reclaim={"noticeSeconds": NOTICE})
SLICES = spot_pool("slices", nodes_per_unit=2, reclaim={"noticeSeconds": NOTICE})
SLOW = spot_pool("slow", provision=60, reclaim={"noticeSeconds": NOTICE})
POOLS = (SPOT_POOL, SLICES, SLOW)


class Cloud:
    """Providers on the test's server and clock, each with the cloud's own client (its requests tell apart in the
    request log), and a driver that stops the clock at every timer as the simulation does."""

    def __init__(self, http: KubeHTTP, cloud_http: KubeHTTP, apiserver: EmbeddedAPIServer,
                 clock: ManualClock) -> None:
        self.http, self.cloud_http, self.apiserver, self.clock = http, cloud_http, apiserver, clock
        self.providers: list[SimulatedProvider] = []

    @property
    def provider(self) -> SimulatedProvider:
        return self.providers[-1]

    async def start(self, pools: Sequence[NodePool] = POOLS, *, heartbeats: bool = True,
                    fence: Fence = unfenced) -> SimulatedProvider:
        provider = SimulatedProvider(self.cloud_http, pools, self.clock, heartbeats=heartbeats, fence=fence)
        self.providers.append(provider)
        await provider.start()
        return provider

    async def obtain(self, pool: NodePool, units: int = 1, token: str = "tok-1") -> list[str]:
        got = await self.provider.obtain(pool.name, units, token=token, deadline=DEADLINE)
        return list(got.node_names)

    async def quiet(self) -> None:
        await self.apiserver.controllers.settle()
        await until_quiet(self.apiserver, [("simulated cloud", lambda: not any(p.busy for p in self.providers))])

    async def run(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, stopping at every timer and letting everything react there."""
        await step_through(self.clock, seconds, self.quiet)

    async def nodes(self) -> dict[str, JSON]:
        out = await self.http.request("GET", b.NODES.path())
        return {node["metadata"]["name"]: node for node in out["items"]}

    def cloud_writes(self, since: int = 0) -> list[tuple[str, str | None, str]]:
        """The cloud's successful node writes: (verb, subresource, node)."""
        return [(r.verb, r.subresource, r.name) for r in self.apiserver.requests[since:]
                if r.resource == "nodes" and r.verb in ("patch", "delete") and 200 <= r.status < 300
                and r.user_agent.startswith("gangscale-simulated-cloud")]


@pytest_asyncio.fixture
async def cloud(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                kubeconfig: Path) -> AsyncIterator[Cloud]:
    cloud_http = await make_http(str(kubeconfig), user_agent="gangscale-simulated-cloud")
    made = Cloud(http, cloud_http, apiserver, clock)
    try:
        yield made
    finally:
        for provider in made.providers:
            await provider.aclose()
        await cloud_http.api_client.close()


def ready(node: JSON) -> JSON:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def shutting_down(node: JSON) -> bool:
    condition = ready(node)
    return (condition["status"], condition["reason"], condition["message"]) == (
        "False", "KubeletNotReady", SHUTTING_DOWN_MESSAGE)


async def reclaimed(cloud: Cloud) -> list[str]:
    return sorted(name for name, node in (await cloud.nodes()).items()
                  if RECLAIM_AT_ANNOTATION in (node["metadata"].get("annotations") or {}))


async def test_a_reclaim_notice_turns_the_node_not_ready_with_the_kubelets_message_and_deletes_it_after_the_notice(
        cloud: Cloud) -> None:
    await cloud.start()
    names = await cloud.obtain(SPOT_POOL, 2)
    await cloud.run(0)
    noticed_at = cloud.clock.now()
    mark = len(cloud.apiserver.requests)

    cloud.provider.faults(SPOT_POOL.name).reclaim(1)
    await cloud.quiet()

    (victim,) = await reclaimed(cloud)
    (survivor,) = set(names) - {victim}
    nodes = await cloud.nodes()
    assert shutting_down(nodes[victim]) and ready(nodes[survivor])["status"] == "True"
    assert nodes[victim]["metadata"]["annotations"][RECLAIM_AT_ANNOTATION] == repr(noticed_at + NOTICE)
    # The cloud records the reclaim (a change of its own), then the kubelet posts its status.
    assert cloud.cloud_writes(mark) == [("patch", None, victim), ("patch", "status", victim)]

    # Through the notice the kubelet renews its Lease and never says Ready again.
    await cloud.run(NOTICE - 1)
    assert shutting_down((await cloud.nodes())[victim])

    await cloud.run(1)
    assert set(await cloud.nodes()) == {survivor}
    assert ("delete", None, victim) in cloud.cloud_writes(mark)


async def test_a_reclaimed_slice_host_leaves_its_unit_incomplete_as_a_restarted_provider_finds_it(
        cloud: Cloud) -> None:
    first = await cloud.start()
    names = await cloud.obtain(SLICES, 1, token="tok-slice")
    await cloud.run(0)
    first.faults(SLICES.name).reclaim(1)
    await cloud.run(NOTICE)
    (left,) = await cloud.nodes()
    (unit,) = {name.rsplit("-", 1)[0] for name in names}

    live = await first.lookup("tok-slice")
    await first.aclose()
    restarted = await cloud.start()
    rebuilt = await restarted.lookup("tok-slice")

    assert live is not None and rebuilt is not None
    assert live.incomplete == rebuilt.incomplete == (unit,)
    assert first.in_use(SLICES.name) == restarted.in_use(SLICES.name) == 1
    await restarted.release(SLICES.name, [unit], token="scale-down")
    assert await cloud.nodes() == {} and left in names
    assert await restarted.lookup("tok-slice") is None


async def test_a_token_whose_every_node_was_reclaimed_designates_nothing_and_frees_its_stock(cloud: Cloud) -> None:
    provider = await cloud.start()
    await cloud.obtain(SPOT_POOL, 1, token="tok-single")
    await cloud.run(0)

    provider.faults(SPOT_POOL.name).reclaim(1)
    await cloud.run(NOTICE)

    assert await cloud.nodes() == {}
    assert await provider.lookup("tok-single") is None and provider.in_use(SPOT_POOL.name) == 0


async def test_a_provider_restarted_during_the_notice_still_ends_the_vm_on_time(cloud: Cloud) -> None:
    first = await cloud.start()
    (name,) = await cloud.obtain(SPOT_POOL, 1)
    await cloud.run(0)
    first.faults(SPOT_POOL.name).reclaim(1)
    await cloud.run(10)
    await first.aclose()

    # The new process's pool file has no reclaim knob: the VM goes all the same, when the first process said.
    await cloud.start([spot_pool("spot")])
    await cloud.run(NOTICE - 10 - 1)
    assert shutting_down((await cloud.nodes())[name])
    await cloud.run(1)
    assert await cloud.nodes() == {}


async def test_the_one_shot_reclaim_waits_for_a_node_to_turn_ready(cloud: Cloud) -> None:
    provider = await cloud.start()
    (name,) = await cloud.obtain(SLOW, 1)
    provider.faults(SLOW.name).reclaim(1)
    await cloud.run(59)
    assert await reclaimed(cloud) == []

    await cloud.run(1)

    node = (await cloud.nodes())[name]
    assert shutting_down(node)
    assert node["metadata"]["annotations"][RECLAIM_AT_ANNOTATION] == repr(cloud.clock.now() + NOTICE)


async def test_a_process_that_lost_the_lease_reclaims_nothing(cloud: Cloud) -> None:
    leading = [True]
    provider = await cloud.start(fence=lambda: leading[0])
    (name,) = await cloud.obtain(SPOT_POOL, 1)
    await cloud.run(0)
    leading[0] = False
    mark = len(cloud.apiserver.requests)

    provider.faults(SPOT_POOL.name).reclaim(1)
    await cloud.run(NOTICE)

    assert ready((await cloud.nodes())[name])["status"] == "True"
    assert cloud.cloud_writes(mark) == []


#: The statistical test: nodes Ready for an hour at a rate of one reclaim per node-hour.
NODES, RATE, HOURS = 400, 1.0, 1.0


async def test_the_rate_reclaims_each_ready_node_as_a_poisson_process(cloud: Cloud) -> None:
    pool = spot_pool("many", reclaim={"perNodeHour": RATE, "noticeSeconds": 0, "seed": 7})
    await cloud.start([pool], heartbeats=False)  # 400 kubelets' Leases for an hour would be 144,000 requests
    await cloud.obtain(pool, NODES)
    await cloud.run(0)

    await cloud.run(HOURS * 3600)

    # Each node is taken independently with probability 1 - e^(-rate * t): a binomial count. Five standard
    # deviations either side never flake, and exclude half or double the rate (158 and 346 expected).
    p = 1 - math.exp(-RATE * HOURS)
    mean, sd = NODES * p, math.sqrt(NODES * p * (1 - p))
    taken = NODES - len(await cloud.nodes())
    assert mean - 5 * sd <= taken <= mean + 5 * sd, (taken, mean, sd)


def pool_yaml(capacity: str, reclaim: str = "reclaim: {perNodeHour: 2}") -> str:
    return f"""
nodePools:
  - name: gpu
    zone: z
    maxUnits: 4
{capacity}    allocatable: {{cpu: "8", memory: 32Gi}}
    simulated: {{stock: 4, {reclaim}}}
"""


@pytest.mark.parametrize("capacity", ["", "    capacityType: on-demand\n", "    capacityType: reservation\n"],
                         ids=["default", "on-demand", "reservation"])
def test_a_reclaim_on_a_pool_that_is_not_spot_is_a_config_error_naming_the_pool_and_field(capacity: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_pool_yaml(pool_yaml(capacity))
    assert "nodePools[0] (gpu).simulated.reclaim: is for a pool of capacityType spot" in str(info.value)


def test_a_spot_pool_takes_the_reclaim_knob() -> None:
    (pool,) = parse_pool_yaml(pool_yaml("    capacityType: spot\n")).pools
    assert pool.provider["simulated"]["reclaim"] == {"perNodeHour": 2.0}


async def test_the_provider_refuses_reclaims_of_a_pool_that_is_not_spot(http: KubeHTTP, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match=r"simulated\.reclaim is for a pool of capacityType spot"):
        SimulatedProvider(http, [spot_pool("od", reclaim={"perNodeHour": 1}, capacity_type=ON_DEMAND)], clock)
    provider = SimulatedProvider(http, [spot_pool("od", capacity_type=ON_DEMAND)], clock)
    with pytest.raises(ValueError, match="only spot capacity is reclaimed"):
        provider.faults("od").reclaim(1)
    with pytest.raises(ValueError, match="only spot capacity is reclaimed"):
        provider.faults("od").set_reclaim_rate(1.0)


async def test_a_reclaim_of_a_node_released_meanwhile_ends_quietly(cloud: Cloud) -> None:
    provider = await cloud.start()
    (name,) = await cloud.obtain(SPOT_POOL, 1)
    await cloud.run(0)
    provider.faults(SPOT_POOL.name).reclaim(1)
    await cloud.quiet()
    await provider.release(SPOT_POOL.name, [name.rsplit("-", 1)[0]], token="scale-down")
    mark = len(cloud.apiserver.requests)

    await cloud.run(NOTICE)

    assert await cloud.nodes() == {}
    assert all(verb != "delete" or status == 404 for verb, status in
               [(r.verb, r.status) for r in cloud.apiserver.requests[mark:] if r.resource == "nodes"])
    with pytest.raises(ApiError):
        await cloud.http.request("GET", b.NODES.path(name=name))

