"""Ray demand through the real controller: autoscaling RayClusters on the embedded API server, the simulated
cloud, one ManualClock. The Ray autoscaler's patches are sent as it sends them (JSON patch on ``replicas``);
worker pods are created by the test where KubeRay would create them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gangscale.controller.demand import gcspollers as raygcs_module
from gangscale.kube.resources import EVENTS, PODS, RAYCLUSTERS, WORKLOADS
from tests.conftest import wait_for
from tests.controller.harness import FAST, NS, Cluster, running_cluster
from tests.raybuilders import group, raycluster, worker

JSON = dict[str, Any]
GPU8 = {"nvidia.com/gpu": "8"}  # one pod fills one a3-highgpu-8g node: pods and nodes are easy to count
TPU = {"google.com/tpu": "4"}
TPU_SELECTOR = {"cloud.google.com/gke-tpu-topology": "2x4",
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}
ANNOTATION = "gangscale.io/scale-up."


async def scale(cl: Cluster, name: str, index: int, replicas: int, to_delete: list[str] | None = None) -> None:
    """The Ray autoscaler's patch (ray-accel-spec §1.7): replicas, then the scale strategy."""
    ops: list[JSON] = [{"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/replicas", "value": replicas}]
    if to_delete is not None:
        ops.append({"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/scaleStrategy",
                    "value": {"workersToDelete": to_delete}})
    await cl.http.request("PATCH", RAYCLUSTERS.path(NS, name), body=ops, content_type="application/json-patch+json")
    await cl.idle()  # the controller sees the step at the time it was made


async def create_cluster(cl: Cluster, obj: JSON) -> JSON:
    created = await cl.create(RAYCLUSTERS, obj)
    await cl.idle()  # seen at the time it was made
    return created


async def ray_events(cl: Cluster, name: str) -> list[tuple[str, str]]:
    items = (await cl.http.request("GET", EVENTS.path(NS))).get("items") or []
    return [(e["reason"], e["message"]) for e in items
            if (e.get("involvedObject") or {}).get("kind") == "RayCluster" and e["involvedObject"]["name"] == name]


async def wait_ray_event(cl: Cluster, name: str, reason: str) -> str:
    async def check() -> str | None:
        return next((m for r, m in await ray_events(cl, name) if r == reason), None)
    found: str = await wait_for(check)
    return found


async def intents(cl: Cluster, name: str) -> dict[str, JSON]:
    obj = await cl.http.request("GET", RAYCLUSTERS.path(NS, name))
    return {k: json.loads(v) for k, v in ((obj["metadata"].get("annotations") or {}).items())
            if k.startswith(ANNOTATION)}


async def wait_until(read: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool]) -> None:
    async def check() -> bool:
        return ok(await read())
    await wait_for(check)


def obtained(cl: Cluster) -> list[tuple[str, int]]:
    return [(call.pool, call.units) for call in cl.obtains()]


async def bind_workers(cl: Cluster, cluster: str, group_name: str, pool: str, *, hosts: int = 1,
                       limits: dict[str, str] = GPU8) -> None:
    """What KubeRay and kube-scheduler would do once the nodes are Ready: one worker pod bound to each node."""
    for i, name in enumerate(await cl.ready_nodes(pool)):
        replica = f"{group_name}-r{i // hosts}" if hosts > 1 else None
        await cl.create(PODS, worker(cluster, group_name, f"{cluster}-{group_name}-{i}", node=name,
                                     replica=replica, limits=limits))


# -- 1. stepwise demand becomes one gang ------------------------------------------------------------------------


async def test_autoscaler_steps_within_the_window_become_one_gang_obtained_in_one_call(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8, max_replicas=8)]))
        await scale(cl, "train", 0, 2)          # the autoscaler's first step ...
        await cl.advance(5)
        assert obtained(cl) == []                # held: the demand may still grow
        await scale(cl, "train", 0, 4)          # ... and its second, one 5-s iteration later
        await cl.advance(5)
        assert obtained(cl) == []
        await cl.advance_stepwise(2)             # 6 s without a change: the gang forms
        await wait_for(lambda: obtained(cl) == [("gpu", 4)])
        message = await wait_ray_event(cl, "train", "ScaleUp")
        assert "gpu: 4 replicas" in message and "gpu" in message
        (intent,) = (await intents(cl, "train")).values()
        assert intent["replicas"] == {"gpu": 4} and intent["scaleUp"]["steps"][0]["units"] == 4

        await cl.advance_stepwise(31)            # the simulated cloud's 30-s provisioning
        assert len(await cl.ready_nodes("gpu")) == 4
        assert "4 new nodes are Ready" in await wait_ray_event(cl, "train", "Provisioned")
        await bind_workers(cl, "train", "gpu", "gpu")
        await cl.advance(1)
        await wait_ray_event(cl, "train", "GangPlaced")
        await wait_until(lambda: intents(cl, "train"), lambda got: got == {})
        assert obtained(cl) == [("gpu", 4)]      # nothing more was asked for


async def test_demand_that_keeps_growing_forms_a_gang_at_the_batch_max(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("train", [group("gpu", limits={"nvidia.com/gpu": "1"})]))
        for replicas in range(1, 7):             # a step every 5 s (t=0..25): never 6 s without a change
            if replicas > 1:
                await cl.advance_stepwise(5)
            await scale(cl, "train", 0, replicas)
        await cl.advance_stepwise(4)             # t=29
        assert obtained(cl) == []
        await cl.advance_stepwise(2)             # t=31: formed at the 30-s maximum, not at the idle window
        await wait_for(lambda: obtained(cl) == [("gpu", 1)])  # 6 one-GPU pods fit one 8-GPU node
        assert "gpu: 6 replicas" in await wait_ray_event(cl, "train", "ScaleUp")


# -- 2. withdrawn demand ----------------------------------------------------------------------------------------


async def test_demand_withdrawn_within_the_window_obtains_nothing(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8)]))
        await scale(cl, "train", 0, 3)
        await cl.advance(3)
        await scale(cl, "train", 0, 0)
        await cl.advance_stepwise(120)
        assert obtained(cl) == [] and await cl.nodes() == []


async def test_a_pending_gang_waiting_for_stock_is_withdrawn_when_ray_deletes_the_workers(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        cl.cloud.set_stock("gpu", 0)
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8, workers_to_delete=[])]))
        await cl.create(PODS, worker("train", "gpu", "train-gpu-a"))  # pending, no node
        await cl.create(PODS, worker("train", "gpu", "train-gpu-b"))
        await scale(cl, "train", 0, 2)
        await cl.advance_stepwise(8)
        assert "gpu" in await wait_ray_event(cl, "train", "CapacityNotFound")
        # The autoscaler gives up on the pending workers: replicas lowered, both named for deletion.
        await scale(cl, "train", 0, 0, ["train-gpu-a", "train-gpu-b"])
        await cl.advance(2)
        assert "nothing was provisioned" in await wait_ray_event(cl, "train", "GangWithdrawn")
        cl.cloud.set_stock("gpu", None)
        await cl.advance_stepwise(15 * 60)
        assert await cl.nodes() == []
        assert all(call.units == 0 or not call.nodes_created for call in cl.obtains())


# -- 3. multi-host replicas, clamping ---------------------------------------------------------------------------


@pytest.mark.parametrize(("replicas", "max_replicas", "units"), [
    pytest.param(2, 4, 2, id="two-slices"),
    pytest.param(5, 2, 2, id="clamped-to-max-replicas"),
])
async def test_multi_host_replicas_are_whole_slices(tmp_path: Path, replicas: int, max_replicas: int,
                                                    units: int) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("tpu", [group("slice", hosts=2, limits=TPU, node_selector=TPU_SELECTOR,
                                                              max_replicas=max_replicas)]))
        await scale(cl, "tpu", 0, replicas)
        await cl.advance_stepwise(7)
        await wait_for(lambda: sum(u for _, u in obtained(cl)) == units)
        assert {pool for pool, _ in obtained(cl)} <= {"tpu-a", "tpu-b"}
        await cl.advance_stepwise(31)
        assert len(await cl.ready_nodes()) == units * 2
        assert f"slice: {units} replicas of 2 hosts" in await wait_ray_event(cl, "tpu", "Provisioned")


async def test_min_replicas_are_demand_even_without_an_autoscaler_patch(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8, replicas=0, min_replicas=2)]))
        await cl.advance_stepwise(7)
        await wait_for(lambda: obtained(cl) == [("gpu", 2)])


async def test_clusters_kueue_manages_or_that_do_not_autoscale_are_not_ray_demand(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("queued", [group("gpu", limits=GPU8, replicas=2)],
                                                labels={"kueue.x-k8s.io/queue-name": "q"}))
        await create_cluster(cl, raycluster("fixed", [group("gpu", limits=GPU8, replicas=2)], autoscaling=False))
        await cl.advance_stepwise(60)
        assert obtained(cl) == []


# -- 4. crash safety --------------------------------------------------------------------------------------------


async def test_a_restart_while_a_ray_gang_comes_up_obtains_nothing_twice(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8)]))
        await scale(cl, "train", 0, 3)
        await cl.advance_stepwise(7)
        await wait_for(lambda: obtained(cl) == [("gpu", 3)])
        await wait_until(lambda: intents(cl, "train"), lambda got: len(got) == 1)
        await cl.stop()
        await cl.start()
        await cl.advance_stepwise(31)
        assert len(await cl.ready_nodes("gpu")) == 3
        await wait_ray_event(cl, "train", "Provisioned")
        assert sum(call.nodes_created for call in cl.obtains()) == 3


async def test_a_gang_formed_in_the_same_second_as_a_recorded_one_after_a_restart_gets_its_own_id(
        tmp_path: Path) -> None:
    """Gang ids count from zero in every process: a gang formed right after a restart must not take the id of the
    gang the previous process recorded on the cluster (its state, annotation and tokens derive from the id)."""
    settings = replace(FAST, ray_batch_idle=0.0, ray_batch_max=0.0)
    async with running_cluster(tmp_path, settings=settings) as cl:
        cpu = {"cpu": "12"}
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8), group("cpu", requests=cpu)]))
        await scale(cl, "train", 0, 2)
        await wait_for(lambda: obtained(cl) == [("gpu", 2)])
        await wait_until(lambda: intents(cl, "train"), lambda got: len(got) == 1)
        await cl.stop()
        await cl.start()  # the clock has not moved: the same second
        await scale(cl, "train", 1, 1)
        await wait_until(lambda: intents(cl, "train"), lambda got: len(got) == 2)
        assert sorted((c.pool, c.nodes_created) for c in cl.obtains() if c.nodes_created) == [("cpu", 1), ("gpu", 2)]
        await cl.advance_stepwise(31)
        assert len(await cl.ready_nodes("gpu")) == 2 and len(await cl.ready_nodes("cpu")) == 1
        provisioned = [m for r, m in await ray_events(cl, "train") if r == "Provisioned"]
        assert len(provisioned) == 2, provisioned


async def test_a_raycluster_deleted_while_its_gang_comes_up_has_the_units_released(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8)]))
        await scale(cl, "train", 0, 2)
        await cl.advance_stepwise(7)
        await wait_for(lambda: obtained(cl) == [("gpu", 2)])
        await cl.http.request("DELETE", RAYCLUSTERS.path(NS, "train"))
        await cl.advance(1)
        await wait_until(lambda: cl.nodes("gpu"), lambda got: got == [])


# -- 5. Kueue-managed elastic clusters ----------------------------------------------------------------------------


async def test_an_elastic_slice_pr_provisions_only_replicas_not_already_on_nodes(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        rc = await create_cluster(cl, raycluster("elastic", [group("gpu", limits=GPU8, replicas=3)],
                                                     labels={"kueue.x-k8s.io/queue-name": "q"},
                                                     annotations={"kueue.x-k8s.io/elastic-job": "true"}))
        for i in range(2):  # two workers already run on nodes outside the managed pools
            await cl.ready_node(f"old-{i}", {"nvidia.com/gpu": "8", "cpu": "200", "memory": "1Ti", "pods": "110"})
            await cl.create(PODS, worker("elastic", "gpu", f"elastic-gpu-{i}", node=f"old-{i}", limits=GPU8))
        wl = await cl.create(WORKLOADS, {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "raycluster-elastic-2", "ownerReferences": [{
                "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "elastic", "uid": rc["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"queueName": "q", "priority": 10, "podSets": [
                {"name": "gpu", "count": 3, "template": {"spec": {"containers": [
                    {"name": "w", "image": "x", "resources": {"limits": GPU8}}]}}}]}})
        pr_name = "raycluster-elastic-2-gangscale-1"
        await cl.template(f"ppt-{pr_name}-gpu", limits=GPU8)
        await cl.provreq(pr_name, (f"ppt-{pr_name}-gpu", 3), owner={
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "raycluster-elastic-2",
            "uid": wl["metadata"]["uid"], "controller": True})
        await cl.advance(1)
        await wait_for(lambda: obtained(cl) == [("gpu", 1)])   # 3 wanted, 2 already running
        await cl.advance_stepwise(31)
        await cl.wait_condition(pr_name, "Provisioned", "True", "CapacityIsProvisioned")


# -- 6. bad input, metrics ----------------------------------------------------------------------------------------


async def test_a_raycluster_that_cannot_be_read_is_reported_and_others_go_on(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await create_cluster(cl, raycluster("broken", [group("gpu", limits={"nvidia.com/gpu": "many"})]))
        await create_cluster(cl, raycluster("fine", [group("gpu", limits=GPU8, replicas=1)]))
        await cl.advance_stepwise(7)
        assert "spec.workerGroupSpecs[0].template" in await wait_ray_event(cl, "broken", "InvalidRayCluster")
        await wait_for(lambda: obtained(cl) == [("gpu", 1)])
        await cl.advance_stepwise(60)
        assert [r for r, _ in await ray_events(cl, "broken")] == ["InvalidRayCluster"]  # once, not every pass


async def test_missing_replicas_and_gang_events_are_metrics_per_raycluster(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        cl.cloud.set_stock("gpu", 0)
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8)]))
        await scale(cl, "train", 0, 2)
        await cl.advance_stepwise(8)
        await wait_ray_event(cl, "train", "CapacityNotFound")
        text = cl.ctl.metrics.render()[0].decode()
        assert 'gangscale_ray_gang_events_total{dry_run="false",namespace="default",raycluster="train",' \
               'reason="CapacityNotFound"} 1.0' in text
        assert 'gangscale_ray_missing_replicas{group="gpu",namespace="default",raycluster="train"} 2.0' in text


async def test_ray_gcs_asked_for_without_the_extra_says_so_once_and_reports_every_head_unreachable(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--ray-gcs`` (the default) where grpcio is missing: one warning naming the fix when the first RayCluster
    appears, and ``gangscale_ray_gcs_reachable`` 0 for each cluster, instead of nothing at all (issue 25)."""
    # An installation without the extra: the probe the GCS source asks (``sources.raygcs.grpc_available``).
    monkeypatch.setattr(raygcs_module, "grpc_available", lambda: False)
    async with running_cluster(tmp_path) as cl:
        assert cl.ctl.settings.ray_gcs
        await create_cluster(cl, raycluster("train", [group("gpu", limits=GPU8, max_replicas=8)]))
        await create_cluster(cl, raycluster("tune", [group("gpu", limits=GPU8, max_replicas=8)]))
        await cl.advance(7)
        metrics = cl.ctl.metrics.render()[0].decode()
    warnings = [r.getMessage() for r in caplog.records if "no grpcio" in r.getMessage()]
    assert len(warnings) == 1 and "docker build --build-arg EXTRAS=ray" in warnings[0]
    for name in ("train", "tune"):
        assert f'gangscale_ray_gcs_reachable{{namespace="default",raycluster="{name}"}} 0.0' in metrics
