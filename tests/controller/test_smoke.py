from __future__ import annotations

from pathlib import Path

from tests.controller.harness import running_cluster

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}


async def test_two_slice_gang_provisioned(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
        await cl.provreq("ms", ("slice", 4))
        await cl.wait_condition("ms", "Provisioned", "False", "ScaleUpInProgress")
        assert len(await cl.nodes()) == 4
        await cl.advance(30)
        await cl.wait_condition("ms", "Provisioned", "True", "CapacityIsProvisioned")
        print(await cl.conditions("ms"))
