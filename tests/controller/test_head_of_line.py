"""No head-of-line blocking: a gang that cannot be had holds nothing against a later gang that can.

The case a new user met: pool ``a3`` has 4 units of stock (maxUnits 8). ``llm-big`` (6 nodes) is planned first and
its scale-up runs out of stock; ``llm-small`` (3 nodes) arrives while that call is under way. When the call
fails, both are planned in the same pass, the big one first (it is older): it must not keep 6 planned units that
leave the small one "maxUnits leaves 2"; the small one is provisioned, and the big one waits with a message that
names the stockout.
"""

from __future__ import annotations

from pathlib import Path

from gangscale.controller.logic.settings import Settings
from gangscale.providers.simfaults import CREATED, FAILED
from tests.controller.harness import running_cluster

POOLS_YAML = """
nodePools:
  - name: a3
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 8
    simulated: {provisionSeconds: 30, stock: 4}
"""
#: A batch window, so that the request arriving during the provider call is planned with the failed one.
BATCHED = Settings(batch_idle=1.0, batch_max=10.0)


async def test_a_gang_that_cannot_be_had_does_not_block_a_smaller_one(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, pool_yaml=POOLS_YAML, settings=BATCHED) as cl:
        await cl.template("worker", {"cpu": "100"}, limits={"nvidia.com/gpu": "8"})
        cl.cloud.faults("a3").call_latency = 1
        await cl.provreq("llm-big", ("worker", 6))
        await cl.wait_condition("llm-big", "Provisioned", "False", "ScaleUpInProgress")
        await cl.advance(0.5)
        await cl.provreq("llm-small", ("worker", 3))
        await cl.advance_stepwise(1)  # the big scale-up's call ends in a stockout; the small one was held for it

        await cl.wait_condition("llm-small", "Provisioned", "False", "ScaleUpInProgress")
        await cl.wait_condition("llm-big", "Provisioned", "False", "CapacityIsNotFound")
        big = (await cl.conditions("llm-big"))["Provisioned"][2]
        assert "stockout" in big and "at most 4 more" in big and "maxUnits" not in big, big

        await cl.advance_stepwise(31)
        assert [(c.pool, c.units, c.outcome) for c in cl.obtains()] == [("a3", 6, FAILED), ("a3", 3, CREATED)]
        await cl.wait_condition("llm-small", "Provisioned", "True", "CapacityIsProvisioned")
        assert len(await cl.ready_nodes("a3")) == 3
        # Still waiting, still for the stockout: 1 unit is left of the 4 the cloud was taken to have.
        await cl.advance_stepwise(60)
        big = (await cl.conditions("llm-big"))["Provisioned"][2]
        assert (await cl.conditions("llm-big"))["Provisioned"][1] == "CapacityIsNotFound"
        assert "at most 1 more" in big and "maxUnits" not in big, big
        assert len(cl.obtains()) == 2
