"""anchors.md §E.4 scenarios 9 and 10: demand that feeds on itself, and demand that will not hold still.

The real controller runs against the embedded API server and the simulated cloud on one ManualClock
(``tests/controller/harness.py``). Ray demand is made as KubeRay and the Ray autoscaler make it: a RayCluster
whose worker group's ``replicas`` the test patches, and worker pods that wait for a node
(``tests/raybuilders.py``; ``tests/controller/test_ray_demand.py`` covers the Ray source in detail).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gangscale.kube.resources import EVENTS, NODES, PODS, RAYCLUSTERS
from tests.controller.harness import NS, Cluster, running_cluster
from tests.raybuilders import group, raycluster, worker
from tests.scenarios.support import GPU8, JSON, gpu_template, wait_event, watching_nodes

#: One GPU pool whose limit is far above anything the scenarios need: a bound must come from gangscale.
ROOMY = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 64
    simulated: {provisionSeconds: 30}
"""
ROGUE_TAINT = {"key": "example.com/rogue", "value": "chaos", "effect": "NoSchedule"}
BOOKING_TTL = 600.0
DEMAND = 4


async def taint_new_nodes(cl: Cluster) -> None:
    """The rogue controller of Karpenter's chaos test: every node gets a taint no workload tolerates."""
    for node in await cl.nodes():
        taints = (node.get("spec") or {}).get("taints") or []
        if not any(t.get("key") == ROGUE_TAINT["key"] for t in taints):
            await cl.http.request("PATCH", NODES.path(name=node["metadata"]["name"]),
                                  body={"spec": {"taints": [*taints, ROGUE_TAINT]}},
                                  content_type="application/merge-patch+json")


async def ray_demand(cl: Cluster) -> None:
    """A RayCluster whose autoscaler wants 4 GPU workers, and KubeRay's 4 worker pods, waiting for nodes."""
    await cl.create(RAYCLUSTERS, raycluster("train", [group("gpu", replicas=DEMAND, limits=GPU8, max_replicas=32)]))
    for i in range(DEMAND):
        await cl.create(PODS, worker("train", "gpu", f"train-gpu-{i}", limits=GPU8))


async def pr_demand(cl: Cluster) -> None:
    """A ProvisioningRequest for 4 GPU nodes, and its 4 consumer pods, waiting for nodes."""
    await gpu_template(cl)
    await cl.provreq("job", ("gpu8", DEMAND))
    for i in range(DEMAND):
        await cl.create(PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"job-{i}", "annotations": {
                "autoscaling.x-k8s.io/consume-provisioning-request": "job",
                "autoscaling.x-k8s.io/provisioning-class-name": "atomic-scale-up.gangscale.io"}},
            "spec": {"containers": [{"name": "main", "image": "trainer:v1",
                                     "resources": {"limits": GPU8, "requests": {"cpu": "4"}}}]}})


# -- 9. runaway feedback --------------------------------------------------------------------------------------


@pytest.mark.parametrize("demand", [pytest.param(ray_demand, id="ray-autoscaler"),
                                    pytest.param(pr_demand, id="provisioning-request")])
async def test_e4_09_runaway_feedback(tmp_path: Path, demand: Callable[[Cluster], Awaitable[None]]) -> None:
    """§E.4 scenario 9: a rogue controller taints every new node (Karpenter's chaos test), so the pods that
    asked for nodes stay pending and the demand never goes away.

    The pool allows 64 nodes; the demand is 4 nodes; 60 simulated minutes pass in 30-s steps, the rogue tainting
    every node it has not tainted yet at each; a watch counts the nodes that exist at once. Proven here:

    - *the node count stays below a bound*: never more than 8 nodes (twice the demand) exist at once, against
      Karpenter's "fewer than 35 for 5 minutes"; with a ProvisioningRequest, never more than 4.
    - *because capacity in flight is counted ("upcoming nodes")*: while a gang's nodes come up, and while they
      are booked for it (10 min), the still-pending pods ask for nothing more: at most one cloud call per
      booking period, the first one alone for the first 10 minutes. Nodes left behind are not reused (the
      taint makes them unusable) and are removed by scale-down once idle (10 min), which caps the total.
    - A ProvisioningRequest is one request: after its booking ends (``BookingExpired``) gangscale asks for
      nothing more on its behalf; a retry is Kueue's decision (a new attempt, with Kueue's growing backoff
      and ``backoffLimitCount``, scenario 8).

    Not implemented (gap, reported): *backoff grows*. For Ray demand that stays unplaceable, gangscale forms a
    new gang each time the previous one's booking ends — a steady cycle of one gang's worth of nodes every
    ~10.6 min (booking TTL + the Ray batch window + provisioning), bounded but not slowing down; nothing
    notices that its nodes stay unused and backs the demand or the pool off.
    """
    async with running_cluster(tmp_path, pool_yaml=ROOMY) as cl, watching_nodes(cl.http) as seen:
        await demand(cl)
        obtains_at: list[float] = []
        for _ in range(120):
            await cl.advance_stepwise(30)
            await taint_new_nodes(cl)
            await cl.idle()
            obtains_at = [c.at for c in cl.obtains()]
            if cl.clock.now() - obtains_at[0] < BOOKING_TTL:
                assert len(obtains_at) == 1
        assert all(c.ok and c.units == DEMAND for c in cl.obtains())
        gaps = [b - a for a, b in itertools.pairwise(obtains_at)]
        assert all(gap >= BOOKING_TTL for gap in gaps), gaps
        if demand is ray_demand:
            assert seen.most == 2 * DEMAND and 2 <= len(obtains_at) <= 1 + 3600 / BOOKING_TTL
        else:
            await cl.wait_condition("job", "BookingExpired", "True", "CapacityReservationTimeExpired")
            assert seen.most == DEMAND and len(obtains_at) == 1
            assert await cl.nodes() == []  # scaled down once idle


# -- 10. Ray demand churn plus competing gangs ----------------------------------------------------------------

#: Room for exactly one of the two gangs.
ONE_GANG = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 4
    simulated: {provisionSeconds: 30}
"""


async def ray_steps(cl: Cluster) -> None:
    """The Ray autoscaler's demand goes up (2 workers), down (0) and up again (4) within its batch window, 2 s
    apart. Planned at each step, the first step would be a gang of 2 whose obtain is not cancelled by the second,
    and the third a second gang of 2: the 4 workers split over two scale-ups."""
    for replicas in (2, 0, DEMAND):
        await cl.http.request("PATCH", RAYCLUSTERS.path(NS, "train"), content_type="application/json-patch+json",
                              body=[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas",
                                     "value": replicas}])
        await cl.advance_stepwise(2)


async def ray_events(cl: Cluster) -> list[JSON]:
    items = (await cl.http.request("GET", EVENTS.path(NS))).get("items") or []
    return sorted((e for e in items if (e.get("involvedObject") or {}).get("kind") == "RayCluster"),
                  key=lambda e: int(e["metadata"]["resourceVersion"]))


def reasons(events: list[JSON]) -> list[str]:
    return [str(e["reason"]) for e in events]


async def rival_provisioned(cl: Cluster) -> tuple[str, str] | None:
    return await cl.condition("rival", "Provisioned")


@pytest.mark.parametrize("ray_first", [True, False], ids=["ray-gang-first", "provisioning-request-first"])
async def test_e4_10_ray_demand_churn_plus_competing_gangs(tmp_path: Path, ray_first: bool) -> None:
    """§E.4 scenario 10: the Ray autoscaler's demand oscillates (4 workers, 0, 4 again, 2 s apart) while a
    ProvisioningRequest competes with the Ray gang for a pool that fits only one of them (4 nodes each).

    Proven here, with either gang first:

    - *batching dampens the churn*: the up-down-up steps make one Ray gang of 4 replicas; the cloud gets
      exactly one call in the whole test (the winner's), and the Ray cluster gets no ``GangWithdrawn``.
      Deliberate difference: the Ray window is gangscale's ``--ray-batch-idle`` 6 s / ``--ray-batch-max`` 30 s,
      not Karpenter's 1 s / 10 s: the Ray autoscaler patches ``replicas`` in 5-s iterations, and the idle
      window must be longer than one (README, "Ray demand"); ProvisioningRequests use the 1 s / 10 s group
      commit, only while scale-ups are in flight (README, "How it works").
    - *exactly one gang is provisioned whole*: the winner's 4 nodes are all made under its token and all Ready
      when it is reported provisioned; no other node ever exists.
    - *the loser holds nothing*: no cloud call and no node for it; a losing ProvisioningRequest stays
      ``Provisioned=False/CapacityIsNotFound``, a losing Ray gang gets ``CapacityNotFound`` and no ``ScaleUp``.
    - *the booked capacity is not consumed by the other gang (CA's 10-minute booking)*: the winner's nodes are
      Ready and empty (its pods never arrive), yet the loser, retried meanwhile, is not placed on them until
      the winner's booking ends 10 min after it was provisioned; then it gets them without a scale-up.
    """
    async with running_cluster(tmp_path, pool_yaml=ONE_GANG) as cl, watching_nodes(cl.http) as seen:
        await gpu_template(cl)
        await cl.create(RAYCLUSTERS, raycluster("train", [group("gpu", replicas=0, limits=GPU8, max_replicas=8)]))
        if ray_first:
            await ray_steps(cl)
            await cl.advance_stepwise(6)  # the Ray batch window closes: one gang
            await cl.provreq("rival", ("gpu8", DEMAND))
        else:
            await cl.provreq("rival", ("gpu8", DEMAND))
            await ray_steps(cl)
            await cl.advance_stepwise(6)
        await cl.idle()
        [call] = cl.obtains()
        assert (call.pool, call.units, call.ok) == ("gpu", DEMAND, True)

        await cl.advance_stepwise(30)  # the winner's nodes are Ready
        if ray_first:
            await wait_event(cl, "train", "Provisioned")
            assert await rival_provisioned(cl) == ("False", "CapacityIsNotFound")
        else:
            await cl.wait_condition("rival", "Provisioned", "True", "CapacityIsProvisioned")
            assert "CapacityNotFound" in reasons(await ray_events(cl))
        provisioned_at = cl.clock.now()
        assert sorted(seen.live) == await cl.ready_nodes() and len(seen.live) == DEMAND
        assert {token for _, token in seen.created} == {call.token}

        # The winner's booking holds for 10 minutes although nothing runs on its nodes.
        while cl.clock.now() < provisioned_at + BOOKING_TTL - 30:
            await cl.advance_stepwise(30)
            if ray_first:
                assert await rival_provisioned(cl) == ("False", "CapacityIsNotFound")
            else:
                assert reasons(await ray_events(cl)).count("Provisioned") == 0
        await cl.advance_stepwise(60)
        if ray_first:
            await cl.wait_condition("rival", "Provisioned", "True", "CapacityIsFound")
        else:
            await wait_event(cl, "train", "Provisioned")
        assert len(cl.obtains()) == 1 and len(seen.created) == DEMAND and seen.most == DEMAND
        events = await ray_events(cl)
        first = events[0]["message"]
        assert first.startswith("gang ") and "(gpu: 4 replicas)" in first  # one gang of the final 4 workers
        assert "GangWithdrawn" not in reasons(events)
        if ray_first:
            assert reasons(events).count("ScaleUp") == 1
        else:
            assert "ScaleUp" not in reasons(events)
            [placed] = [e["message"] for e in events if e["reason"] == "Provisioned"]
            assert placed.split()[1] == first.split()[1] and "fits on free capacity" in placed
