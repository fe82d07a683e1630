from __future__ import annotations

from pathlib import Path

from tests.conftest import wait_for
from tests.controller.harness import running_cluster

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}


async def test_a_two_slice_gang_is_provisioned_once_its_four_nodes_are_ready(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
        await cl.provreq("ms", ("slice", 4))
        await cl.wait_condition("ms", "Provisioned", "False", "ScaleUpInProgress")
        async def four_nodes() -> bool:
            return len(await cl.nodes()) == 4
        await wait_for(four_nodes)
        assert await cl.condition("ms", "Provisioned") == ("False", "ScaleUpInProgress")
        await cl.advance(30)
        await cl.wait_condition("ms", "Provisioned", "True", "CapacityIsProvisioned")
        assert len(await cl.ready_nodes()) == 4
