"""anchors.md §E.4 scenarios 1-3: the cloud says no, or says yes and does not deliver.

Each test runs the real controller against the embedded API server and the simulated cloud on one
ManualClock (``tests/controller/harness.py``), injects the fault through the cloud's knobs
(``provider.faults(pool)``) or the API server's ``Fault``s, moves simulated time, and judges by what the API
server and the cloud's call log show. Related, narrower tests: ``tests/controller/test_atomic.py``
(partial grants, stockout fallback, nodes never Ready), ``tests/controller/test_backoffs.py`` (the backoff
arithmetic on plain objects).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gangscale.providers.base import TOKEN_LABEL
from gangscale.providers.simfaults import FAILED, RELEASED, ProviderCall
from gangscale.sim.apiserver import Fault
from tests.controller.harness import FAST, Cluster, running_cluster
from tests.scenarios.support import (
    CLOUD_AGENT,
    backed_off_until,
    events,
    gpu_template,
    logged,
    node_names,
    nodes_created,
    record,
    releases,
    wait_event,
    watching_nodes,
)

#: gangscale's defaults (``gangscale run --help``; README "gangscale run flags").
POOL_BACKOFF, POOL_BACKOFF_MAX = 180.0, 1800.0
MAX_NODE_PROVISION_TIME = 900.0
PROVISION_SECONDS = 30.0

#: One a3-highgpu-8g pool with room for the 8-node gang and a node already in use.
ONE_GPU_POOL = """
nodePools:
  - name: gpu-a
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 10
    simulated: {provisionSeconds: 30}
  - name: cpu
    zone: zone-a
    maxUnits: 4
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 30}
"""


# -- 1. partial atomic scale-up -------------------------------------------------------------------------------


@pytest.mark.parametrize("cloud_cleans_up", [True, False], ids=["cloud-rolls-back", "cloud-rollback-fails"])
async def test_e4_01_partial_atomic_scale_up(tmp_path: Path, cloud_cleans_up: bool) -> None:
    """§E.4 scenario 1: the cloud grants 5 of the 8 nodes of a gang, then answers stockout (ICE).

    Proven here:

    - *rolls back to the pre-request size, deleting exactly the 5*: the pool holds one node of an earlier
      request before; afterwards it holds exactly that node, and the five nodes created for the gang's token
      (a watch of the Nodes) are the five the cloud deleted (the API server's request log); no more than
      1 + 5 nodes ever existed. With ``cloud-rollback-fails`` the cloud's own rollback
      loses a delete (API 500), the cloud reports ``rolled_back=False``, and gangscale releases what is left
      under the token itself (a ``release`` call in the cloud's log): no orphan either way.
    - *PR ``Provisioned=False`` with reason ``CapacityIsNotFound``*, never ``True``, with a ``ScaleUpFailed``
      Warning event naming the stockout; the scale-up record is cleared.
    - *backs off that pool, capped*: only ``gpu-a`` is backed off (the ``cpu`` pool is not), and with the
      stockout persisting, the backoff of each failed attempt doubles 3, 6, 12, 24 min and stays at 30 min.
      Deliberate difference: the first backoff is **3 min**, not the cluster-autoscaler's 5 min — gangscale's
      ``--pool-backoff`` defaults to Karpenter's 3-min insufficient-capacity TTL (README, "gangscale run
      flags"; ``gangscale/controller/logic/backoffs.py``). A stockout also leaves a *ceiling* (the pool is taken to
      have at most 5 more units until the backoff ends) rather than closing the pool, so smaller gangs are
      still served (``tests/controller/test_head_of_line.py``).
    - *no orphan nodes after ``max_node_provision_time``*: 15 min after the failure the pool still holds only
      the earlier node, and no node of the gang's token exists.
    """
    # Pool health off: this scenario is about the backoff ladder (pool health: tests/controller/test_poolhealth.py).
    settings = replace(FAST, pool_health_window=0)
    async with running_cluster(tmp_path, pool_yaml=ONE_GPU_POOL, settings=settings) as cl, \
            watching_nodes(cl.http) as seen:
        await gpu_template(cl)
        await cl.provreq("before", ("gpu8", 1))
        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("before", "Provisioned", "True", "CapacityIsProvisioned")
        pre_request = await node_names(cl, "gpu-a")
        assert len(pre_request) == 1

        cl.cloud.faults("gpu-a").partial_grant = 5
        if not cloud_cleans_up:
            cl.server.inject(Fault(verb="delete", resource="nodes", user_agent=CLOUD_AGENT, status=500, times=1))
        since = cl.clock.now()
        await cl.provreq("big", ("gpu8", 8))
        failed = await wait_event(cl, "big", "ScaleUpFailed")
        await cl.wait_condition("big", "Provisioned", "False", "CapacityIsNotFound")
        await cl.idle()

        [call] = [c for c in cl.obtains() if c.at >= since]
        assert (call.pool, call.units, call.outcome, call.code) == ("gpu-a", 8, FAILED, "GCE_STOCKOUT")
        assert call.nodes_created == 5
        created = seen.of_token(call.token)
        deleted = [r.name for r in logged(cl, verb="delete", resource="nodes", user_agent=CLOUD_AGENT, since=since)
                   if r.status == 200]
        assert len(created) == 5 and sorted(deleted) == sorted(created)  # exactly the 5, each once
        assert seen.most == 1 + 5
        assert await node_names(cl, "gpu-a") == pre_request
        if cloud_cleans_up:
            assert (call.nodes_deleted, releases(cl)) == (5, [])
        else:
            [release] = releases(cl)
            assert (call.nodes_deleted, release.token, release.outcome) == (4, call.token, RELEASED)
            assert release.nodes_deleted == 1

        assert failed["type"] == "Warning" and "stockout" in failed["message"] and "gpu-a" in failed["message"]
        assert await events(cl, "big", "Provisioned") == []
        assert await record(cl, "big") is None
        assert list(cl.ctl.debug_plans()["backedOffPools"]) == ["gpu-a"]
        assert backed_off_until(cl, "gpu-a") == call.at + POOL_BACKOFF
        assert "at most 5 more" in (await cl.conditions("big"))["Provisioned"][2]

        assert await backoffs_while_the_stockout_lasts(cl, since, call, pre_request) == [
            POOL_BACKOFF, 360.0, 720.0, 1440.0, POOL_BACKOFF_MAX, POOL_BACKOFF_MAX]
        assert nodes_created(cl) == 1 + 5


async def backoffs_while_the_stockout_lasts(cl: Cluster, since: float, first: ProviderCall,
                                            pre_request: set[str]) -> list[float]:
    """The stockout persists: every attempt after a backoff ends fails again, and the next backoff is longer. The
    gang is retried on its own (re-planning backoff 1 min doubling to 10 min). Returns the first six backoffs;
    on the way, checks that no node is orphaned once ``max_node_provision_time`` has passed."""
    cl.cloud.faults("gpu-a").stockout = True
    backoffs = [POOL_BACKOFF]
    orphans_checked = False
    while len(backoffs) < 6:
        await cl.advance_stepwise(60)
        calls = [c for c in cl.obtains() if c.at >= since]
        if len(calls) > len(backoffs):
            last = calls[-1]
            assert (last.pool, last.outcome, last.nodes_created) == ("gpu-a", FAILED, 0)
            until = backed_off_until(cl, "gpu-a")
            assert until is not None
            backoffs.append(until - last.at)
        if not orphans_checked and cl.clock.now() >= first.at + MAX_NODE_PROVISION_TIME:
            orphans_checked = True
            assert await node_names(cl, "gpu-a") == pre_request
            tokens = {n["metadata"]["labels"].get(TOKEN_LABEL) for n in await cl.nodes()}
            assert first.token not in tokens
        assert await cl.condition("big", "Provisioned") == ("False", "CapacityIsNotFound")
    assert orphans_checked
    return backoffs

# -- 2. ICE on one offering, capacity on another --------------------------------------------------------------

#: The same machine type in two zones: two offerings of one shape. gpu-b has room for every gang below.
TWO_ZONES = """
nodePools:
  - name: gpu-a
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 8
    simulated: {provisionSeconds: 30}
  - name: gpu-b
    machineType: a3-highgpu-8g
    zone: zone-b
    maxUnits: 8
    simulated: {provisionSeconds: 30}
"""


async def test_e4_02_ice_on_one_offering_capacity_on_another(tmp_path: Path) -> None:
    """§E.4 scenario 2: pool ``gpu-a`` (zone a) is out of stock (ICE); ``gpu-b`` (zone b) has the same machines.

    Proven here:

    - *the next plan picks pool B within one cycle*: the gang's obtain on gpu-a fails and its obtain on gpu-b
      starts at the same simulated instant (no retry wait), and the gang is Provisioned on gpu-b.
    - *A is cached unavailable for a TTL (Karpenter 3 min)*: gangscale's pool backoff is 3 min by default, the
      same figure; the stock comes back at once, yet a gang created 1 s before the TTL ends still goes to
      gpu-b and gpu-a gets no call.
    - *A is tried again after the TTL*: a gang created when the TTL has passed is obtained on gpu-a (the pool
      the planner prefers), although gpu-b still has room.

    Difference in granularity: Karpenter caches ``capacityType:instanceType:zone``; gangscale caches per node
    pool, and a pool is one machine type in one zone (README, "Node pools"), so the key is the same offering.
    """
    async with running_cluster(tmp_path, pool_yaml=TWO_ZONES) as cl:
        await gpu_template(cl)
        cl.cloud.faults("gpu-a").stockout = True
        await cl.provreq("first", ("gpu8", 2))
        failed = await wait_event(cl, "first", "ScaleUpFailed")
        await cl.idle()
        [ice, fallback] = cl.obtains()
        assert (ice.pool, ice.outcome, ice.code, ice.nodes_created) == ("gpu-a", FAILED, "GCE_STOCKOUT", 0)
        assert (fallback.pool, fallback.units, fallback.outcome) == ("gpu-b", 2, "created")
        assert fallback.at == ice.at  # the same pass's re-plan, not a later retry
        assert "re-planning with the other pools" in failed["message"]
        ice_at = ice.at
        assert backed_off_until(cl, "gpu-a") == ice_at + POOL_BACKOFF
        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("first", "Provisioned", "True", "CapacityIsProvisioned")
        assert len(await cl.ready_nodes("gpu-b")) == 2 and await cl.nodes("gpu-a") == []

        # The cloud has gpu-a machines again, but the TTL is not over: gangscale does not ask.
        cl.cloud.faults("gpu-a").stockout = False
        await cl.advance_stepwise(ice_at + POOL_BACKOFF - 1 - cl.clock.now())
        await cl.provreq("second", ("gpu8", 2))
        await cl.idle()
        assert [(c.pool, c.outcome) for c in cl.obtains()[2:]] == [("gpu-b", "created")]

        await cl.advance_stepwise(1)
        assert backed_off_until(cl, "gpu-a") is None
        await cl.provreq("third", ("gpu8", 2))
        await cl.idle()
        [again] = cl.obtains()[3:]
        assert (again.pool, again.outcome, again.nodes_created) == ("gpu-a", "created", 2)
        assert again.at >= ice_at + POOL_BACKOFF
        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("third", "Provisioned", "True", "CapacityIsProvisioned")
        assert len(await cl.ready_nodes("gpu-a")) == 2 and len(await cl.ready_nodes("gpu-b")) == 4


# -- 3. nodes never register / never become usable ------------------------------------------------------------

async def test_e4_03_nodes_never_register(tmp_path: Path) -> None:
    """§E.4 scenario 3: the cloud grants a 4-node gang on ``gpu-a``, and its nodes never become Ready.

    Proven here:

    - *at ``max_node_provision_time`` (15 min) the scale-up is declared failed*: 1 s before, the PR is still
      ``Provisioned=False/ScaleUpInProgress`` with its 4 nodes present; at 15 min a ``ScaleUpTimedOut`` Warning
      event says 4 of 4 nodes were not Ready.
    - *the target size is reverted (CA ``DecreaseTargetSize``)*: every unit of the scale-up is released under
      its token, and gpu-a is back to exactly the node it had before the request.
    - *the PR is not marked Provisioned* on the failed nodes: ``Provisioned=False/CapacityIsNotFound`` with the
      reason, and no ``Provisioned`` event, until the gang is re-planned on gpu-b and those nodes are Ready.
    - *the pool's health degrades*, in gangscale's form: gpu-a is backed off whole (no ceiling, unlike a
      stockout) for 3 min with reason "nodes that did not become Ready in time", so even a 1-node gang created
      meanwhile goes to gpu-b.

    Not implemented (gaps, reported): Karpenter's per-pool health ring buffer (last 4 registrations, unhealthy
    at >= 50 % failures) does not exist; one timed-out scale-up backs the pool off (``controller/backoffs.py``).
    A node that is Ready with its GPUs at 0 allocatable (device plugin not up) counts as Ready
    (``controller/view.py``: readiness is the Ready condition only), so the cluster-autoscaler's "GPU not yet
    allocatable counts as unready" rule is not applied. "Never register" is exercised as "registered, never
    Ready": the simulated cloud's instance *is* its Node object; the deadline rule counts both the same way
    (a node not in the cache is not Ready, ``controller/reconcile.py: provisioning``).
    """
    async with running_cluster(tmp_path, pool_yaml=TWO_ZONES) as cl:
        await gpu_template(cl)
        await cl.provreq("before", ("gpu8", 1))
        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("before", "Provisioned", "True", "CapacityIsProvisioned")
        pre_request = await node_names(cl, "gpu-a")
        assert len(pre_request) == 1

        cl.cloud.faults("gpu-a").never_ready = True
        await cl.provreq("stuck", ("gpu8", 4))
        await cl.idle()
        [_, stuck] = cl.obtains()
        assert (stuck.pool, stuck.units, stuck.nodes_created) == ("gpu-a", 4, 4)
        started = stuck.at

        await cl.advance_stepwise(MAX_NODE_PROVISION_TIME - 1)
        assert len(await node_names(cl, "gpu-a")) == 5
        assert await cl.ready_nodes("gpu-a") == sorted(pre_request)
        assert await cl.condition("stuck", "Provisioned") == ("False", "ScaleUpInProgress")
        assert releases(cl) == []

        await cl.advance_stepwise(1)
        timed_out = await wait_event(cl, "stuck", "ScaleUpTimedOut")
        assert timed_out["type"] == "Warning"
        assert timed_out["message"].startswith("4 of 4 new nodes were not Ready within 15m (pools gpu-a)")
        [release] = releases(cl)
        assert (release.pool, release.token, release.units, release.nodes_deleted) == ("gpu-a", stuck.token, 4, 4)
        assert await node_names(cl, "gpu-a") == pre_request
        assert await events(cl, "stuck", "Provisioned") == []
        until = backed_off_until(cl, "gpu-a")
        assert until == started + MAX_NODE_PROVISION_TIME + POOL_BACKOFF
        reason = cl.ctl.debug_plans()["backedOffPools"]["gpu-a"]["reason"]
        assert reason == "nodes that did not become Ready in time"

        # Re-planned at once on gpu-b. A smaller gang created during the backoff keeps off gpu-a too: it takes
        # the one free node gpu-a has (the first request's, its booking over) only with a new gpu-a node, so it
        # goes whole to gpu-b.
        await cl.provreq("small", ("gpu8", 2))
        assert await cl.condition("stuck", "Provisioned") == ("False", "ScaleUpInProgress")  # on gpu-b now
        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("stuck", "Provisioned", "True", "CapacityIsProvisioned")
        await cl.wait_condition("small", "Provisioned", "True", "CapacityIsProvisioned")
        assert [(c.pool, c.units) for c in cl.obtains()[2:]] == [("gpu-b", 4), ("gpu-b", 2)]
        assert len(await cl.ready_nodes("gpu-b")) == 6 and await node_names(cl, "gpu-a") == pre_request
        assert "gpu-b" in (await cl.conditions("stuck"))["Provisioned"][2]
        assert nodes_created(cl) == 1 + 4 + 6
