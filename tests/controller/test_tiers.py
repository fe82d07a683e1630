"""Capacity tiers end to end (issue 28), a real controller on the embedded API server with the simulated cloud: a
stockout on spot moves the same gang whole to on-demand in the next pass; a wait bound keeps it waiting for spot
(and says until when in its condition) before on-demand opens; the pool file's per-class policy applies."""

from __future__ import annotations

from pathlib import Path

from gangscale.providers.simfaults import CREATED, FAILED
from tests.conftest import wait_for
from tests.controller.harness import Cluster, running_cluster

SPOT_AND_ON_DEMAND = """
nodePools:
  - name: a3-spot
    machineType: a3-highgpu-8g
    capacityType: spot
    zone: zone-a
    maxUnits: 4
    simulated: {provisionSeconds: 30}
  - name: a3
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 4
    simulated: {provisionSeconds: 30}
"""
SPOT_FIRST_CLASS = SPOT_AND_ON_DEMAND + """
capacityTiers:
  classes:
    atomic-scale-up.gangscale.io: {order: [spot, on-demand]}
"""


async def gpu_gang(cl: Cluster, name: str, nodes: int, parameters: dict[str, str] | None = None) -> None:
    await cl.template("trainer", {"cpu": "100"}, limits={"nvidia.com/gpu": "8"})
    await cl.provreq(name, ("trainer", nodes), parameters=parameters)


async def nodes_of(cl: Cluster, pool: str, count: int) -> None:
    async def check() -> bool:
        return len(await cl.nodes(pool)) == count
    await wait_for(check)


async def test_a_spot_stockout_moves_the_same_gang_whole_to_on_demand(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, pool_yaml=SPOT_AND_ON_DEMAND) as cl:
        cl.cloud.faults("a3-spot").stockout = True
        await gpu_gang(cl, "train", 3, {"capacityTiers": "spot,on-demand"})
        await nodes_of(cl, "a3", 3)
        spot, fallback = cl.obtains()
        assert (spot.pool, spot.outcome, spot.units) == ("a3-spot", FAILED, 3)
        assert (fallback.pool, fallback.outcome, fallback.units, fallback.nodes_created) == ("a3", CREATED, 3, 3)
        await cl.advance(30)
        await cl.wait_condition("train", "Provisioned", "True", "CapacityIsProvisioned")
        assert await cl.nodes("a3-spot") == []


async def test_the_class_policy_of_the_pool_file_puts_the_gang_on_spot(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, pool_yaml=SPOT_FIRST_CLASS) as cl:
        await gpu_gang(cl, "train", 2)
        await nodes_of(cl, "a3-spot", 2)
        [call] = cl.obtains()
        assert (call.pool, call.outcome) == ("a3-spot", CREATED)


async def test_without_a_policy_on_demand_comes_before_spot(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, pool_yaml=SPOT_AND_ON_DEMAND) as cl:
        await gpu_gang(cl, "train", 2)
        await nodes_of(cl, "a3", 2)
        assert [c.pool for c in cl.obtains()] == ["a3"]


async def test_a_wait_bound_holds_the_gang_for_spot_then_opens_on_demand(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, pool_yaml=SPOT_AND_ON_DEMAND) as cl:
        cl.cloud.faults("a3-spot").stockout = True
        await gpu_gang(cl, "train", 2, {"capacityTiers": "spot:600,on-demand"})

        async def waiting() -> str | None:
            _, _, message = (await cl.conditions("train")).get("Provisioned", ("", "", ""))
            return message if "waiting for spot capacity until" in message else None
        message = await wait_for(waiting)
        assert "before trying on-demand" in message
        assert [(c.pool, c.outcome) for c in cl.obtains()] == [("a3-spot", FAILED)]
        assert await cl.nodes("a3") == []

        await cl.advance_stepwise(600)
        await nodes_of(cl, "a3", 2)
        assert cl.obtains()[-1].pool == "a3" and {c.pool for c in cl.obtains()[:-1]} == {"a3-spot"}
