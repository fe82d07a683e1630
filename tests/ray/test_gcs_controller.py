"""The whole GCS path through the real controller: a placement group pending in a real Ray head becomes one gang
of the right shape, provisioned in one scale-up before the Ray autoscaler has raised ``replicas`` at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangscale.kube.resources import EVENTS, RAYCLUSTERS
from tests.conftest import wait_for
from tests.controller.harness import NS, Cluster, running_cluster
from tests.ray.conftest import RayHead
from tests.raybuilders import group, raycluster

pytestmark = pytest.mark.ray

#: One GPU per node, so that STRICT_SPREAD bundles, pods and nodes are one to one.
POOLS = """
nodePools:
  - name: gpu1
    zone: zone-a
    maxUnits: 32
    allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1", pods: "110"}
    simulated: {provisionSeconds: 60}
"""


def obtained(cl: Cluster) -> list[tuple[str, int]]:
    return [(call.pool, call.units) for call in cl.obtains()]


async def scale_up_message(cl: Cluster) -> str | None:
    items = (await cl.http.request("GET", EVENTS.path(NS))).get("items") or []
    return next((e["message"] for e in items if e.get("reason") == "ScaleUp"
                 and (e.get("involvedObject") or {}).get("kind") == "RayCluster"), None)


async def test_a_pending_placement_group_is_provisioned_whole_before_any_replica_step(
        ray_head: RayHead, tmp_path: Path) -> None:
    ids = await ray_head.driver("create", json.dumps(
        [{"name": "train16", "strategy": "STRICT_SPREAD", "bundles": [{"GPU": 1}] * 16}]))
    try:
        async with running_cluster(tmp_path, pool_yaml=POOLS) as cl:
            await cl.create(RAYCLUSTERS, raycluster(
                "train", [group("gpu", replicas=0, max_replicas=32, requests={"cpu": "4"},
                                limits={"nvidia.com/gpu": "1"})],
                annotations={"gangscale.io/gcs-address": ray_head.address}))
            # No replicas step was made: only the GCS knows the 16 bundles. The gang forms at once (no batch
            # window: what the GCS reports is the whole gang).
            await wait_for(lambda: obtained(cl) == [("gpu1", 16)], timeout=20)
            message = await wait_for(lambda: scale_up_message(cl))
            assert "gpu: 16 replicas" in message and "gpu1 +16" in message
            metrics = cl.ctl.metrics.render()[0].decode()
            assert 'gangscale_ray_gcs_reachable{namespace="default",raycluster="train"} 1.0' in metrics
            # The autoscaler's steps arriving later (10, then 16) are covered by the gang: nothing more.
            for replicas in (10, 16):
                await cl.http.request("PATCH", RAYCLUSTERS.path(NS, "train"),
                                      content_type="application/json-patch+json",
                                      body=[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas",
                                             "value": replicas}])
                await cl.idle()
                await cl.advance_stepwise(5)
            await cl.advance_stepwise(60)
            assert obtained(cl) == [("gpu1", 16)]
            assert len(await cl.ready_nodes("gpu1")) == 16
    finally:
        await ray_head.driver("remove")
    assert ids
