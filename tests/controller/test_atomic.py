"""Atomic scale-up end to end: the real controller, the simulated cloud and the embedded API server over HTTP.

What is checked here (DESIGN decisions 3, 4, 11, 12, 14): a gang gets every unit of its plan or none, a slice
comes and goes whole, a failed step releases every other step, a restart at any point neither scales twice nor
leaves nodes behind, stockouts and nodes that never become Ready move the gang to another pool, transient
errors and lost responses are retried under the same token, dry-run changes nothing, bad input gets a precise
condition without stopping the loop, empty units are scaled down, and the PR's story is told in Events.

Time is the harness's :class:`ManualClock`: tests move it with ``cl.advance``; ``wait_for`` is a hang guard.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gangscale.controller.logic.reconcile import Release
from gangscale.controller.logic.record import OBTAINED, OBTAINING, Record
from gangscale.kube.errors import ApiError
from gangscale.model.nodepool import POOL_LABEL
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL
from gangscale.providers.simfaults import CREATED, FAILED, RELEASE, RELEASED, REUSED, ProviderCall
from gangscale.sim.apiserver import Fault
from gangscale.timefmt import rfc3339
from tests.builders import EVENTS, NODES, PODS, PROVREQS
from tests.conftest import wait_for
from tests.controller.harness import FAST, NS, Cluster, record, running_cluster, wait_record

JSON = dict[str, Any]

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
#: A CPU head that only the cpu pool fits next to GPU workers (a GPU node keeps ~7 CPUs after a worker).
HEAD = {"cpu": "12"}
WORKER_REQUESTS, WORKER_LIMITS = {"cpu": "200"}, {"nvidia.com/gpu": "8"}
BACKOFF_TTL = 180.0
PROVISION_SECONDS = 30.0
MAX_PROVISION_TIME = 900.0
UNNEEDED_TIME = 600.0

#: The cpu pool comes up faster than the gpu pool, to see Provisioned wait for the slowest node.
TWO_SPEEDS_YAML = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 4
    simulated: {provisionSeconds: 30}
  - name: cpu
    zone: zone-a
    maxUnits: 4
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 10}
"""

#: A cpu pool whose nodes are Ready as soon as they are made.
INSTANT_CPU_YAML = """
nodePools:
  - name: cpu
    zone: zone-a
    maxUnits: 4
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 0}
"""

#: A cpu pool that keeps one unit, and a TPU pool, for scale-down.
MIN_UNITS_YAML = """
nodePools:
  - name: tpu-a
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: zone-a
    maxUnits: 2
    simulated: {provisionSeconds: 30}
  - name: cpu
    zone: zone-a
    minUnits: 1
    maxUnits: 4
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 30}
"""


# -- helpers --------------------------------------------------------------------------------------------------


async def slice_template(cl: Cluster, name: str = "slice", *, pool: str | None = None) -> JSON:
    """One pod per TPU v5e host (4 chips); ``pool`` pins the pods to one pool."""
    selector = {**TPU, POOL_LABEL: pool} if pool else TPU
    return await cl.template(name, limits={"google.com/tpu": "4"}, selector=selector)


async def head_and_workers(cl: Cluster) -> None:
    await cl.template("head", HEAD)
    await cl.template("worker", WORKER_REQUESTS, limits=WORKER_LIMITS)


async def cpu_template(cl: Cluster, name: str = "small") -> JSON:
    return await cl.template(name, {"cpu": "12"}, selector={POOL_LABEL: "cpu"})


def created(cl: Cluster) -> int:
    """Node objects created by every obtain of every provider instance so far (rolled-back ones included)."""
    return sum(call.nodes_created for call in cl.obtains())


def releases(cl: Cluster) -> list[ProviderCall]:
    return [call for p in cl.history for call in p.calls if call.operation == RELEASE]


async def names(cl: Cluster, pool: str | None = None) -> set[str]:
    return {n["metadata"]["name"] for n in await cl.nodes(pool)}


async def count_nodes(cl: Cluster, expected: int, pool: str | None = None) -> None:
    async def check() -> bool:
        return len(await cl.nodes(pool)) == expected
    await wait_for(check)


async def first_decision(cl: Cluster, name: str) -> str:
    """"scale-up" once the PR has a recorded scale-up, else its first Provisioned status/reason (a fit, a refusal)."""
    async def decided() -> str | None:
        status, reason, _ = (await cl.conditions(name)).get("Provisioned", ("", "", ""))
        if await record(cl, name) is not None or reason == "ScaleUpInProgress":
            return "scale-up"
        return f"{status}/{reason}" if status else None
    found: str = await wait_for(decided)
    return found


async def events(cl: Cluster, name: str) -> list[JSON]:
    items = (await cl.http.request("GET", EVENTS.path(NS))).get("items") or []
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]


async def wait_event(cl: Cluster, name: str, reason: str) -> JSON:
    async def check() -> JSON | None:
        return next((e for e in await events(cl, name) if e.get("reason") == reason), None)
    found: JSON = await wait_for(check)
    return found


async def delete_pr(cl: Cluster, name: str) -> None:
    await cl.http.request("DELETE", PROVREQS.path(NS, name))


def unit_of(node: JSON) -> str:
    return str(node["metadata"]["labels"][UNIT_LABEL])


# -- 1. a gang spanning two pools --------------------------------------------------------------------------------


async def test_a_gang_spanning_two_pools_is_one_plan_that_scales_both(tmp_path: Path) -> None:
    """A CPU head and two GPU workers in one PR: one recorded plan with a step per pool, exactly the planned
    nodes, and Provisioned=True only once the slower pool's nodes are Ready too."""
    async with running_cluster(tmp_path, pool_yaml=TWO_SPEEDS_YAML) as cl:
        await head_and_workers(cl)
        await cl.provreq("mixed", ("head", 1), ("worker", 2))
        await wait_record(cl, "mixed", OBTAINED)
        plan = await record(cl, "mixed")
        assert plan is not None and plan.attempt == 1
        assert [(s.pool, s.units) for s in plan.steps] == [("cpu", 1), ("gpu", 2)]

        obtains = cl.obtains()
        assert sorted((c.pool, c.units, c.outcome, c.nodes_created) for c in obtains) == [
            ("cpu", 1, CREATED, 1), ("gpu", 2, CREATED, 2)]
        assert {c.token for c in obtains} == set(plan.tokens)
        planned = {f"{unit}-0" for c in obtains for unit in c.unit_ids}
        assert await names(cl) == planned
        assert len(await names(cl, "cpu")) == 1 and len(await names(cl, "gpu")) == 2
        assert [e["message"] for e in await events(cl, "mixed") if e["reason"] == "ScaleUp"] == [
            "scale up cpu +1 unit, gpu +2 units in zone zone-a"]

        await cl.advance(10)
        await wait_for(lambda: cl.ready_nodes("cpu"))
        await cl.idle()
        assert await cl.condition("mixed", "Provisioned") == ("False", "ScaleUpInProgress")

        await cl.advance(20)
        await cl.wait_condition("mixed", "Provisioned", "True", "CapacityIsProvisioned")
        assert (await cl.conditions("mixed"))["Provisioned"][2].startswith(
            "3 new nodes are Ready (cpu +1 unit, gpu +2 units)")
        assert await cl.ready_nodes() == sorted(planned)
        assert len(cl.obtains()) == 2 and created(cl) == 3


# -- 2. a TPU slice is created whole ---------------------------------------------------------------------------


async def test_a_two_host_slice_is_created_by_one_call_and_becomes_ready_whole(tmp_path: Path) -> None:
    """Both hosts of a v5e 2x4 slice come from one obtain under one unit id and turn Ready together."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        await cl.provreq("one-slice", ("slice", 2))
        await count_nodes(cl, 2)
        [call] = cl.obtains()
        assert (call.pool, call.units, call.outcome, call.nodes_created) == ("tpu-a", 1, CREATED, 2)
        [unit] = call.unit_ids
        nodes = await cl.nodes()
        assert {unit_of(n) for n in nodes} == {unit}
        assert {n["metadata"]["labels"][TOKEN_LABEL] for n in nodes} == {call.token}
        assert sorted(n["metadata"]["name"] for n in nodes) == [f"{unit}-0", f"{unit}-1"]

        await cl.advance(PROVISION_SECONDS - 1)
        assert await cl.ready_nodes() == []
        assert await cl.condition("one-slice", "Provisioned") == ("False", "ScaleUpInProgress")
        await cl.advance(1)
        await cl.wait_condition("one-slice", "Provisioned", "True", "CapacityIsProvisioned")
        assert await cl.ready_nodes() == [f"{unit}-0", f"{unit}-1"]


# -- 3. partial grants and failed steps are rolled back ---------------------------------------------------------


async def test_a_partial_grant_leaves_no_node_and_backs_the_pool_off(tmp_path: Path) -> None:
    """tpu-a hands out one slice of the two asked for and runs out: the slice it made is deleted, the PR says
    which pool ran out, and tpu-a is backed off (no other pool may serve this gang)."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl, pool="tpu-a")
        cl.cloud.faults("tpu-a").partial_grant = 1
        await cl.provreq("two-slices", ("slice", 4))
        failed = await wait_event(cl, "two-slices", "ScaleUpFailed")
        await cl.wait_condition("two-slices", "Provisioned", "False", "CapacityIsNotFound")

        [call] = cl.obtains()
        assert (call.pool, call.units, call.outcome, call.code) == ("tpu-a", 2, FAILED, "GCE_STOCKOUT")
        assert (call.nodes_created, call.nodes_deleted) == (2, 2)
        assert await cl.nodes() == []
        assert failed["type"] == "Warning"
        assert failed["message"].startswith("scale-up failed and every unit it obtained was released: pool tpu-a: "
                                            "stockout (GCE_STOCKOUT: pool tpu-a is out of stock")
        message = (await cl.conditions("two-slices"))["Provisioned"][2]
        assert "tpu-a" in message and "stockout" in message, message
        backed_off = cl.ctl.debug_plans()["backedOffPools"]
        assert list(backed_off) == ["tpu-a"]
        assert backed_off["tpu-a"]["until"] == rfc3339(call.at + BACKOFF_TTL)
        assert "stockout" in backed_off["tpu-a"]["reason"]
        assert await record(cl, "two-slices") is None
        await cl.idle()
        assert len(cl.obtains()) == 1 and await cl.nodes() == []


@pytest.mark.parametrize(("fault", "value", "failed_nodes"), [
    pytest.param("stockout", True, 0, id="gpu-stockout"),
    pytest.param("partial_grant", 1, 1, id="gpu-partial-grant"),
    pytest.param("quota", True, 0, id="gpu-quota"),
])
async def test_a_failed_step_releases_the_other_pools_units(tmp_path: Path, fault: str, value: object,
                                                           failed_nodes: int) -> None:
    """The gpu step of a head+workers gang fails: the cpu unit the other step obtained is released too."""
    async with running_cluster(tmp_path) as cl:
        await head_and_workers(cl)
        setattr(cl.cloud.faults("gpu"), fault, value)
        await cl.provreq("mixed", ("head", 1), ("worker", 2))
        await wait_event(cl, "mixed", "ScaleUpFailed")
        await cl.wait_condition("mixed", "Provisioned", "False", "CapacityIsNotFound")

        by_pool = {c.pool: c for c in cl.obtains()}
        assert sorted(by_pool) == ["cpu", "gpu"]
        assert (by_pool["cpu"].outcome, by_pool["cpu"].nodes_created) == (CREATED, 1)
        assert (by_pool["gpu"].outcome, by_pool["gpu"].nodes_created) == (FAILED, failed_nodes)
        assert by_pool["gpu"].nodes_deleted == failed_nodes
        [release] = releases(cl)
        assert (release.pool, release.token, release.outcome, release.nodes_deleted) == (
            "cpu", by_pool["cpu"].token, RELEASED, 1)
        assert release.unit_ids == by_pool["cpu"].unit_ids
        assert await cl.nodes() == []
        assert list(cl.ctl.debug_plans()["backedOffPools"]) == ["gpu"]
        await cl.idle()
        assert len(cl.obtains()) == 2 and await cl.nodes() == []


async def test_an_answer_short_of_the_units_asked_for_is_a_failed_step_and_is_released(tmp_path: Path) -> None:
    """The cloud makes both slices but its answer names one: the controller does not take one slice for the
    gang, releases both (looked up under the token) and says why; the gang is never Provisioned on half."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl, pool="tpu-a")
        cl.cloud.faults("tpu-a").short_answer = 1
        await cl.provreq("two-slices", ("slice", 4))
        failed = await wait_event(cl, "two-slices", "ScaleUpFailed")
        await cl.wait_condition("two-slices", "Provisioned", "False", "CapacityIsNotFound")

        [call] = cl.obtains()
        assert (call.outcome, call.nodes_created) == (CREATED, 4)
        [release] = releases(cl)
        assert (release.token, release.nodes_deleted) == (call.token, 4)
        assert await cl.nodes() == []
        assert "INCOMPLETE_RESULT" in failed["message"] and "1 of the 2 units" in failed["message"], failed
        assert await record(cl, "two-slices") is None


# -- 4. crash safety ------------------------------------------------------------------------------------------


async def test_a_restart_after_the_obtain_but_before_the_status_write_reuses_the_token(tmp_path: Path) -> None:
    """The obtain succeeds but the status write that follows fails and the controller dies: the new instance
    resumes the recorded intent with the same token, the cloud answers ``reused``, and no node is made twice."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        cl.cloud.faults("tpu-a").call_latency = 5
        await cl.provreq("crash", ("slice", 2))
        intent = await wait_record(cl, "crash", OBTAINING)
        broken = cl.server.faults.inject(verb="patch", resource="provisioningrequests", subresource="status",
                                         status=500, times=None)
        await cl.advance(5)
        await wait_for(lambda: len(cl.obtains()) == 1 and broken.hits >= 1)
        [first] = cl.obtains()
        assert (first.token, first.outcome, first.nodes_created) == (intent.tokens[0], CREATED, 2)
        assert (await record(cl, "crash")) == intent  # the "obtained" write never landed

        await cl.stop()
        cl.server.faults.clear()
        await cl.start()
        await wait_for(lambda: len(cl.obtains()) == 2)
        second = cl.obtains()[1]
        assert (second.token, second.outcome, second.nodes_created) == (intent.tokens[0], REUSED, 0)
        assert second.unit_ids == first.unit_ids
        await wait_record(cl, "crash", OBTAINED)

        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("crash", "Provisioned", "True", "CapacityIsProvisioned")
        assert created(cl) == 2 and len(await cl.nodes()) == 2
        assert len(cl.obtains()) == 2 and releases(cl) == []


async def test_a_restart_while_the_nodes_come_up_waits_for_them_without_a_new_obtain(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        await cl.provreq("coming-up", ("slice", 4))
        await wait_record(cl, "coming-up", OBTAINED)
        before = await names(cl)
        assert len(before) == 4

        await cl.stop()
        await cl.start()
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("coming-up", "Provisioned", "True", "CapacityIsProvisioned")
        assert [c for c in cl.history[1].calls] == []  # neither obtained nor released anything
        assert await names(cl) == before and created(cl) == 4


async def test_a_restart_that_finds_a_unit_of_the_scale_up_gone_releases_it_whole_and_replans(
        tmp_path: Path) -> None:
    """A host of one slice is deleted while the controller is down: the new instance does not wait for a node
    nobody will make; it releases every unit of the recorded scale-up and plans the gang again."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        await cl.provreq("coming-up", ("slice", 4))
        first = await wait_record(cl, "coming-up", OBTAINED)
        lost = sorted(await names(cl))[0]

        await cl.stop()
        await cl.http.request("DELETE", NODES.path(name=lost))
        await cl.start()
        await wait_for(lambda: any(c.token == first.tokens[0] for c in releases(cl)))
        second = await wait_record(cl, "coming-up", OBTAINED)
        assert second.tokens != first.tokens
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("coming-up", "Provisioned", "True", "CapacityIsProvisioned")
        nodes = await cl.nodes()
        assert len(nodes) == 4 and {n["metadata"]["labels"][TOKEN_LABEL] for n in nodes} == set(second.tokens)


async def test_a_booked_node_removed_while_the_controller_is_down_revokes_the_booking(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        await cl.provreq("booked", ("slice", 4))
        await wait_record(cl, "booked", OBTAINED)
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("booked", "Provisioned", "True", "CapacityIsProvisioned")
        lost = sorted(await names(cl))[0]

        await cl.stop()
        await cl.http.request("DELETE", NODES.path(name=lost))
        await cl.start()
        await cl.wait_condition("booked", "CapacityRevoked", "True", "BookedNodeRemoved")
        assert lost in (await cl.conditions("booked"))["CapacityRevoked"][2]


async def test_a_request_deleted_while_the_controller_is_down_has_its_nodes_released_on_start(
        tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        await cl.provreq("gone", ("slice", 2))
        intent = await wait_record(cl, "gone", OBTAINED)
        await count_nodes(cl, 2)

        await cl.stop()
        await delete_pr(cl, "gone")
        await cl.start()
        await count_nodes(cl, 0)
        [release] = cl.history[1].calls
        assert (release.operation, release.pool, release.token, release.outcome, release.nodes_deleted) == (
            RELEASE, "tpu-a", intent.tokens[0], RELEASED, 2)
        await cl.advance(PROVISION_SECONDS)
        assert await cl.nodes() == [] and len(cl.obtains()) == 1


async def test_a_request_deleted_while_its_obtained_write_is_on_its_way_has_its_units_released(
        tmp_path: Path) -> None:
    """The units are obtained and the write that records them is held by the API server when the PR is deleted:
    the units, still coming up, are released at once rather than left to scale-down."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        held = cl.server.inject(Fault(verb="patch", resource="provisioningrequests", subresource="status",
                                      body_contains=OBTAINED, hold=True))
        await cl.provreq("dropped", ("slice", 2))
        await wait_for(lambda: cl.server.faults.held)
        [call] = cl.obtains()
        assert held.acted == 1 and call.nodes_created == 2
        await delete_pr(cl, "dropped")
        await wait_for(lambda: f"{NS}/dropped" not in cl.ctl.core.states)  # the watch told the controller first
        assert cl.server.release_held(serve=True) == 1  # then the write is answered 404: the object is gone
        await count_nodes(cl, 0)
        [release] = releases(cl)
        assert (release.token, release.nodes_deleted) == (call.token, 2)
        assert len(cl.obtains()) == 1


# -- 5. stockout falls back to another pool -----------------------------------------------------------------------


async def test_a_stockout_moves_the_gang_to_another_pool_until_the_backoff_ends(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        cl.cloud.faults("tpu-a").stockout = True
        await cl.provreq("first", ("slice", 2))
        await count_nodes(cl, 2, "tpu-b")
        [out, fallback] = cl.obtains()
        assert (out.pool, out.outcome, out.code, out.nodes_created) == ("tpu-a", FAILED, "GCE_STOCKOUT", 0)
        assert (fallback.pool, fallback.outcome) == ("tpu-b", CREATED)
        started = out.at
        backed_off = cl.ctl.debug_plans()["backedOffPools"]
        assert list(backed_off) == ["tpu-a"] and backed_off["tpu-a"]["until"] == rfc3339(started + BACKOFF_TTL)

        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("first", "Provisioned", "True", "CapacityIsProvisioned")
        assert await cl.nodes("tpu-a") == [] and len(await cl.ready_nodes("tpu-b")) == 2
        cl.cloud.faults("tpu-a").stockout = False

        # Still backed off: a second gang goes to tpu-b too.
        await cl.advance(BACKOFF_TTL - PROVISION_SECONDS - 1)
        await cl.provreq("second", ("slice", 2))
        await count_nodes(cl, 4, "tpu-b")
        assert [c.pool for c in cl.obtains()] == ["tpu-a", "tpu-b", "tpu-b"]

        # The backoff is over: tpu-a is planned again.
        await cl.advance(1)
        assert cl.ctl.debug_plans()["backedOffPools"] == {}
        await cl.provreq("third", ("slice", 2))
        await count_nodes(cl, 2, "tpu-a")
        last = cl.obtains()[-1]
        assert (last.pool, last.outcome, last.nodes_created) == ("tpu-a", CREATED, 2)
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("third", "Provisioned", "True", "CapacityIsProvisioned")


# -- 6. nodes that never become Ready ----------------------------------------------------------------------------


async def test_nodes_that_never_become_ready_are_released_and_the_gang_replanned(tmp_path: Path) -> None:
    """tpu-a's slice never turns Ready: at the provisioning deadline (15 min) it is released, tpu-a is backed
    off, and the gang is re-planned onto tpu-b."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        cl.cloud.faults("tpu-a").never_ready = True
        await cl.provreq("stuck", ("slice", 2))
        intent = await wait_record(cl, "stuck", OBTAINED)
        assert [(s.pool, s.units) for s in intent.steps] == [("tpu-a", 1)]
        await count_nodes(cl, 2, "tpu-a")
        started = cl.obtains()[0].at

        await cl.advance_stepwise(MAX_PROVISION_TIME - 1)
        assert await cl.ready_nodes() == [] and len(await cl.nodes("tpu-a")) == 2
        assert await cl.condition("stuck", "Provisioned") == ("False", "ScaleUpInProgress")

        await cl.advance_stepwise(1)
        timed_out = await wait_event(cl, "stuck", "ScaleUpTimedOut")
        assert timed_out["message"].startswith("2 of 2 new nodes were not Ready within 15m (pools tpu-a); every unit "
                                               "of the scale-up is released")
        await count_nodes(cl, 0, "tpu-a")
        [release] = releases(cl)
        assert (release.pool, release.token, release.units, release.nodes_deleted) == (
            "tpu-a", intent.tokens[0], 1, 2)
        backed_off = cl.ctl.debug_plans()["backedOffPools"]
        assert list(backed_off) == ["tpu-a"]
        assert backed_off["tpu-a"]["until"] == rfc3339(started + MAX_PROVISION_TIME + BACKOFF_TTL)
        assert "not become Ready" in backed_off["tpu-a"]["reason"]

        replanned = await wait_record(cl, "stuck", OBTAINED)
        assert [(s.pool, s.units) for s in replanned.steps] == [("tpu-b", 1)]
        await count_nodes(cl, 2, "tpu-b")
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("stuck", "Provisioned", "True", "CapacityIsProvisioned")
        assert len(await cl.ready_nodes("tpu-b")) == 2 and await cl.nodes("tpu-a") == []
        assert created(cl) == 4


async def test_a_timed_out_two_pool_scale_up_is_replanned_whole_off_the_released_nodes(tmp_path: Path) -> None:
    """Two slices planned as tpu-a +1 and tpu-b +1; tpu-a's never turn Ready. At the deadline every unit is
    released, the Ready tpu-b slice too, and the gang is re-planned whole onto tpu-b: two new slices, none on
    the tpu-b slice still being deleted (planned onto it, the PR got Provisioned=True with half its slices), and
    not before that release is over (re-planned meanwhile, the gang would have twice the nodes it needs)."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        cl.cloud.faults("tpu-a").never_ready = True
        await cl.provreq("stuck", ("slice", 4))
        intent = await wait_record(cl, "stuck", OBTAINED)
        assert [(s.pool, s.units) for s in intent.steps] == [("tpu-a", 1), ("tpu-b", 1)]
        await count_nodes(cl, 4)
        first = await names(cl)

        # The cloud takes 5 s to delete tpu-b's slice: the next pass runs while it is still there.
        cl.cloud.faults("tpu-b").call_latency = 5
        await cl.advance_stepwise(MAX_PROVISION_TIME)
        timed_out = await wait_event(cl, "stuck", "ScaleUpTimedOut")
        assert timed_out["message"].startswith("2 of 4 new nodes were not Ready within 15m (pools tpu-a)")
        assert list(cl.ctl.debug_plans()["backedOffPools"]) == ["tpu-a"]

        async def replanned() -> Record | None:
            got = await record(cl, "stuck")
            return got if got is not None and not set(got.tokens) & set(intent.tokens) else None

        await cl.idle()
        assert await replanned() is None  # not planned again while its old units are being released
        for _ in range(4):  # the release takes 5 s; a re-plan refused until it is over comes a minute later
            await cl.advance_stepwise(5)
            got = await replanned()
            if got is not None and got.phase == OBTAINED:
                break
            await cl.advance_stepwise(60)
        assert sorted((r.pool, r.token, r.nodes_deleted) for r in releases(cl)) == [
            ("tpu-a", intent.tokens[0], 2), ("tpu-b", intent.tokens[1], 2)]
        again = await replanned()
        assert again is not None and [(s.pool, s.units) for s in again.steps] == [("tpu-b", 2)]
        await count_nodes(cl, 4, "tpu-b")
        assert not (await names(cl)) & first
        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("stuck", "Provisioned", "True", "CapacityIsProvisioned")
        assert len(await cl.ready_nodes("tpu-b")) == 4


# -- 7. transient errors and lost responses ---------------------------------------------------------------------


@pytest.mark.parametrize(("transient_errors", "timeouts"), [
    pytest.param(3, 0, id="unavailable-thrice"),
    pytest.param(0, 2, id="response-lost-twice"),
    pytest.param(2, 1, id="both"),
])
async def test_transient_errors_and_lost_responses_retry_under_the_same_token(
        tmp_path: Path, transient_errors: int, timeouts: int) -> None:
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        faults = cl.cloud.faults("tpu-a")
        faults.transient_errors, faults.timeouts = transient_errors, timeouts
        await cl.provreq("flaky", ("slice", 2))
        await wait_for(cl.obtains)
        await cl.advance_stepwise(15)  # the retries' backoff: about 1 s after UNAVAILABLE, 1, 2, 4 s after a loss

        calls = cl.obtains()
        assert len(calls) == transient_errors + timeouts + 1
        assert {c.token for c in calls} == {calls[0].token} and {c.pool for c in calls} == {"tpu-a"}
        codes = [c.code for c in calls if not c.ok]
        assert sorted(codes) == sorted(["UNAVAILABLE"] * transient_errors + ["DEADLINE_EXCEEDED"] * timeouts)
        assert calls[-1].ok and calls[-1].outcome == (REUSED if timeouts else CREATED)
        assert created(cl) == 2 and {c.unit_ids for c in calls if c.unit_ids} == {calls[-1].unit_ids}

        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("flaky", "Provisioned", "True", "CapacityIsProvisioned")
        assert len(await cl.nodes()) == 2 and created(cl) == 2 and releases(cl) == []


# -- 8. a request deleted while its nodes come up ----------------------------------------------------------------


@pytest.mark.parametrize("when", ["while-obtaining", "while-coming-up"])
async def test_a_request_deleted_during_its_scale_up_releases_every_unit(tmp_path: Path, when: str) -> None:
    """Two slices (tpu-a +1, tpu-b +1); the PR is deleted while the provider calls run, or once they are over
    and the nodes are coming up: every unit of both steps is released."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        if when == "while-obtaining":
            cl.cloud.faults("tpu-a").call_latency = cl.cloud.faults("tpu-b").call_latency = 5
            await cl.provreq("bye", ("slice", 4))
            intent = await wait_record(cl, "bye", OBTAINING)
            await delete_pr(cl, "bye")
            await wait_for(lambda: cl.ctl.core.states == {})
            await cl.advance(5)
            await wait_for(lambda: len(cl.obtains()) == 2)
            # A release that already started waits out its latency; later ones have none.
            cl.cloud.faults("tpu-a").call_latency = cl.cloud.faults("tpu-b").call_latency = 0
            await cl.advance_stepwise(5)
        else:
            await cl.provreq("bye", ("slice", 4))
            intent = await wait_record(cl, "bye", OBTAINED)
            await count_nodes(cl, 4)
            await delete_pr(cl, "bye")
        await wait_for(lambda: len(releases(cl)) == 2)
        await count_nodes(cl, 0)
        obtains = cl.obtains()
        assert sorted((c.pool, c.outcome, c.nodes_created) for c in obtains) == [
            ("tpu-a", CREATED, 2), ("tpu-b", CREATED, 2)]
        assert sorted((r.pool, r.token, r.nodes_deleted) for r in releases(cl)) == [
            ("tpu-a", intent.tokens[0], 2), ("tpu-b", intent.tokens[1], 2)]
        await cl.advance(PROVISION_SECONDS)
        assert await cl.nodes() == [] and len(cl.obtains()) == 2


# -- 9. dry-run -----------------------------------------------------------------------------------------------


async def test_dry_run_plans_the_scale_up_and_changes_nothing(tmp_path: Path) -> None:
    """No condition, node, provider call or Event; the would-be scale-up is at /debug/plans and in the metrics
    with ``dry_run="true"``."""
    async with running_cluster(tmp_path, settings=replace(FAST, dry_run=True)) as cl:
        await slice_template(cl)
        pr = await cl.provreq("maybe", ("slice", 2))
        await wait_for(lambda: cl.ctl.debug_plans()["decisions"])
        await cl.idle()

        plans = cl.ctl.debug_plans()
        assert plans["dryRun"] is True
        [decision] = plans["decisions"]
        assert (decision["request"], decision["outcome"], decision["dryRun"]) == ("default/maybe", "ScaleUp", True)
        assert decision["summary"] == "scale up tpu-a +1 unit (2 nodes) in zone zone-a"
        assert await cl.conditions("maybe") == {}
        after = await cl.get_pr("maybe")
        assert after is not None and after["metadata"]["resourceVersion"] == pr["metadata"]["resourceVersion"]
        assert await cl.nodes() == [] and cl.obtains() == [] and cl.cloud.calls == []
        assert (await cl.http.request("GET", EVENTS.path(NS))).get("items") == []
        text = cl.ctl.metrics.render()[0].decode()
        assert 'gangscale_scaled_units_total{direction="up",dry_run="true",pool="tpu-a"} 1.0' in text
        assert 'dry_run="false"' not in text

        # A minute later it is planned again, and still nothing is written.
        await cl.advance_stepwise(60)
        await wait_for(lambda: 'pool="tpu-a"} 2.0' in cl.ctl.metrics.render()[0].decode())
        assert await cl.conditions("maybe") == {} and await cl.nodes() == [] and cl.cloud.calls == []


async def test_dry_run_keeps_the_would_be_scale_up_listed_while_the_cluster_moves(tmp_path: Path) -> None:
    """A pass that plans nothing (kicked by any watch event) must not empty /debug/plans: the latest decision
    per request stays listed until it is re-planned or the request is gone."""
    async with running_cluster(tmp_path, settings=replace(FAST, dry_run=True)) as cl:
        await slice_template(cl)
        await cl.provreq("maybe", ("slice", 2))
        await wait_for(lambda: cl.ctl.debug_plans()["decisions"])
        passes = cl.ctl.passes
        await cl.template("unrelated", {"cpu": "1"})  # any watch event: a pass runs
        await wait_for(lambda: cl.ctl.passes > passes)
        await cl.idle()
        assert [d["request"] for d in cl.ctl.debug_plans()["decisions"]] == ["default/maybe"]


# -- 10. bad input ---------------------------------------------------------------------------------------------


async def _missing_template(cl: Cluster) -> None:
    await cl.provreq("bad", ("nowhere", 1))


async def _unplaceable_template(cl: Cluster) -> None:
    # Valid for the API server (a malformed quantity never gets stored: decoding fails with 400), but more CPU
    # than any pool's node has.
    await cl.template("greedy", {"cpu": "100000"})
    await cl.provreq("bad", ("greedy", 1))


async def _out_of_range_quantity(cl: Cluster) -> None:
    # The API server accepts 1e70 (any exponent parses); gangscale's exact arithmetic refuses it.
    await cl.template("greedy", {"cpu": "1e70"})
    await cl.provreq("bad", ("greedy", 1))


async def _huge_count(cl: Cluster) -> None:
    await cl.template("tiny", {"cpu": "1"})
    await cl.provreq("bad", ("tiny", 2147483647))


async def _unknown_class(cl: Cluster) -> None:
    await cl.template("tiny", {"cpu": "1"})
    await cl.provreq("bad", ("tiny", 1), cls="queued-provisioning.gke.io")


def _failed_to_create_pods(prefix: str, *parts: str) -> Callable[[dict[str, tuple[str, str, str]]], None]:
    def check(conditions: dict[str, tuple[str, str, str]]) -> None:
        status, reason, message = conditions["Failed"]
        assert (status, reason) == ("True", "FailedToCreatePods")
        assert message.startswith(prefix), message
        for part in parts:
            assert part in message, message
        assert "Provisioned" not in conditions
    return check


def _not_found(fragment: str) -> Callable[[dict[str, tuple[str, str, str]]], None]:
    def check(conditions: dict[str, tuple[str, str, str]]) -> None:
        status, reason, message = conditions["Provisioned"]
        assert (status, reason) == ("False", "CapacityIsNotFound")
        assert message.startswith("cannot place every pod:") and fragment in message, message
        assert "Failed" not in conditions
    return check


def _untouched(conditions: dict[str, tuple[str, str, str]]) -> None:
    assert conditions == {}


@pytest.mark.parametrize(("make", "check"), [
    pytest.param(_missing_template, _failed_to_create_pods(
        "missing pod templates,", "1 templates were missing: nowhere"), id="missing-template"),
    pytest.param(_out_of_range_quantity, _failed_to_create_pods(
        "invalid pod template greedy (spec.podSets[0]):", "template.spec.containers[0].resources.requests.cpu",
        "invalid quantity '1e70'"),
        id="out-of-range-quantity"),
    pytest.param(_unplaceable_template, _not_found("one pod needs more than a whole node offers: cpu 100000 > 16"),
                 id="unplaceable-template"),
    pytest.param(_huge_count, _not_found("of 2147483647 pods"), id="huge-count"),
    pytest.param(_unknown_class, _untouched, id="unknown-class"),
])
async def test_bad_input_gets_a_precise_condition_and_the_loop_serves_the_good_request(
        tmp_path: Path, make: Callable[[Cluster], Awaitable[None]],
        check: Callable[[dict[str, tuple[str, str, str]]], None]) -> None:
    async with running_cluster(tmp_path) as cl:
        await cpu_template(cl)
        await make(cl)
        await cl.provreq("good", ("small", 1))
        await count_nodes(cl, 1, "cpu")
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("good", "Provisioned", "True", "CapacityIsProvisioned")
        await cl.idle()
        check(await cl.conditions("bad"))
        assert [c.pool for c in cl.obtains()] == ["cpu"] and created(cl) == 1


async def test_an_unusable_quantity_names_the_field_once(tmp_path: Path) -> None:
    """The Failed message names the template and the field once each (not 'template.spec: … template.spec')."""
    async with running_cluster(tmp_path) as cl:
        await _out_of_range_quantity(cl)
        await cl.wait_condition("bad", "Failed", "True", "FailedToCreatePods")
        message = (await cl.conditions("bad"))["Failed"][2]
        assert message.count("template.spec") == 1, message
        assert message.startswith("invalid pod template greedy (spec.podSets[0]): "), message


async def test_a_zero_count_is_rejected_by_the_api_server(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await cpu_template(cl)
        with pytest.raises(ApiError) as raised:
            await cl.provreq("zero", ("small", 0))
        assert raised.value.status == 422
        assert "spec.podSets[0].count" in str(raised.value)
        await cl.provreq("good", ("small", 1))
        await count_nodes(cl, 1, "cpu")
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("good", "Provisioned", "True", "CapacityIsProvisioned")


# -- 11. scale-down ---------------------------------------------------------------------------------------------


async def provisioned_and_released(cl: Cluster, name: str, *pod_sets: tuple[str, int]) -> None:
    """A PR whose booking ends at once (``bookingSeconds: 0``): its new nodes are empty and unbooked."""
    await cl.provreq(name, *pod_sets, parameters={"bookingSeconds": "0"})
    await wait_record(cl, name, OBTAINED)
    await cl.advance(PROVISION_SECONDS)
    await cl.wait_condition(name, "BookingExpired", "True", "CapacityReservationTimeExpired")


async def bind_pod(cl: Cluster, name: str, node: str) -> None:
    """An ordinary (non-DaemonSet) pod running on ``node``."""
    await cl.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": {"nodeName": node, "containers": [
                               {"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]}})


@pytest.mark.parametrize(("template", "pods", "pool", "busy_units", "kept_units"), [
    # One v5e slice, empty: both hosts go in one release.
    pytest.param("slice", 2, "tpu-a", 0, 0, id="slice-removed-whole"),
    # Two empty cpu units, pool minUnits 1: one goes, one stays (a unit whose removal is in flight no longer
    # counts toward the pool, so a pass during that removal does not take the second one too).
    pytest.param("small", 2, "cpu", 0, 1, id="min-units-hold"),
    # Two slices, a pod on one host of the first: that slice stays whole, the other goes.
    pytest.param("slice", 4, "tpu-a", 1, 1, id="a-node-running-a-pod-keeps-its-slice"),
])
async def test_empty_units_are_removed_after_the_unneeded_time(tmp_path: Path, template: str, pods: int,
                                                               pool: str, busy_units: int, kept_units: int) -> None:
    async with running_cluster(tmp_path, pool_yaml=MIN_UNITS_YAML) as cl:
        await cpu_template(cl)
        await slice_template(cl, pool="tpu-a")
        await provisioned_and_released(cl, "done", (template, pods))
        nodes = sorted(await cl.nodes(pool), key=lambda n: n["metadata"]["name"])
        units = sorted({unit_of(n) for n in nodes})
        busy = set(units[:busy_units])
        for unit in busy:
            await bind_pod(cl, f"web-{unit}", f"{unit}-1" if pool.startswith("tpu") else f"{unit}-0")
        # The controller has seen the pods and counts every other unit idle from the same moment.
        await wait_for(lambda: set(cl.ctl.core.removals.idle.since) == set(units) - busy)
        since = max(cl.ctl.core.removals.idle.since.values())
        assert since == cl.clock.now()

        cl.cloud.faults(pool).call_latency = 5  # a removal takes 5 s of the cloud's time
        await cl.advance_stepwise(UNNEEDED_TIME - 1)
        assert len(await cl.nodes(pool)) == len(nodes) and not cl.ctl.core.ledger.removing()
        await cl.advance_stepwise(1)
        await wait_for(cl.ctl.core.ledger.removing)
        # Something else happens while the removal runs: that pass must not remove more than the first did.
        passes = cl.ctl.passes
        await cl.template("unrelated", {"cpu": "1"})
        await wait_for(lambda: cl.ctl.passes > passes)
        await cl.advance_stepwise(5)
        await wait_for(lambda: not cl.ctl.core.ledger.removing())
        await cl.advance_stepwise(60)  # another pass or two: nothing more goes
        assert len(releases(cl)) == len(units) - kept_units

        per_unit = 2 if pool.startswith("tpu") else 1
        await count_nodes(cl, kept_units * per_unit, pool)
        left = {unit_of(n) for n in await cl.nodes(pool)}
        assert busy <= left and len(left) == kept_units
        for release in releases(cl):
            assert (release.pool, release.units, release.nodes_deleted, release.at) == (
                pool, 1, per_unit, since + UNNEEDED_TIME)
        removed = cl.ctl.debug_plans()["scaleDowns"]
        assert sorted(r["unit"] for r in removed) == sorted(set(units) - left)
        for r in removed:
            assert (r["pool"], r["idleSince"], r["dryRun"]) == (pool, rfc3339(since), False)
            assert sorted(r["nodes"]) == [f"{r['unit']}-{i}" for i in range(per_unit)]


async def test_a_unit_being_scaled_down_is_not_planned_onto(tmp_path: Path) -> None:
    """A gang that would fit on a unit whose removal is in flight gets new nodes, not that unit (found by
    ``hack/chaos.py``: it was planned onto the unit scale-down was deleting, and reported Provisioned while two of
    its pods' nodes were going away)."""
    async with running_cluster(tmp_path, pool_yaml=MIN_UNITS_YAML) as cl:
        await slice_template(cl, pool="tpu-a")
        await provisioned_and_released(cl, "done", ("slice", 2))
        [old] = sorted({unit_of(n) for n in await cl.nodes("tpu-a")})
        cl.cloud.faults("tpu-a").call_latency = 5  # the removal takes 5 s of the cloud's time
        await cl.advance_stepwise(UNNEEDED_TIME)
        await wait_for(lambda: cl.ctl.core.ledger.removing() == {old})

        await cl.provreq("next", ("slice", 2))
        assert await first_decision(cl, "next") == "scale-up"  # a new slice: the old one is leaving, not free capacity
        await cl.advance_stepwise(5 + PROVISION_SECONDS)
        await cl.wait_condition("next", "Provisioned", "True", "CapacityIsProvisioned")
        left = {unit_of(n) for n in await cl.nodes("tpu-a")}
        assert old not in left and len(left) == 1


async def test_a_node_made_by_an_obtain_still_running_is_not_free_room(tmp_path: Path) -> None:
    """The cloud made the node but its answer was lost: while the obtain waits to retry, that node is the
    waiting request's and another gang gets a node of its own (found by ``hack/chaos.py``: the second gang was
    planned onto it, and the pool then had fewer Ready nodes than the requests it had reported Provisioned)."""
    async with running_cluster(tmp_path, pool_yaml=INSTANT_CPU_YAML) as cl:
        await cpu_template(cl)
        cl.cloud.faults("cpu").timeouts = 1  # the obtain makes its node, then its answer is lost
        await cl.provreq("first", ("small", 1))
        await wait_for(lambda: cl.obtains() and cl.obtains()[-1].outcome == FAILED)
        await wait_for(cl.ready_nodes)  # Ready at once; the retry waits for the clock

        await cl.provreq("second", ("small", 1))
        assert await first_decision(cl, "second") == "scale-up"
        await cl.advance_stepwise(5)
        for name in ("first", "second"):
            await cl.wait_condition(name, "Provisioned", "True", "CapacityIsProvisioned")
        await count_nodes(cl, 2, "cpu")


async def test_a_restarted_process_does_not_plan_onto_the_nodes_of_a_scale_up_it_is_about_to_resume(
        tmp_path: Path) -> None:
    """The first pass after a restart (or a handover) resumes a recorded scale-up whose nodes exist already; a gang
    planned in that same pass must not get them (found by ``hack/chaos.py``, seed 3147: it was reported
    Provisioned on them, as was the resumed request)."""
    async with running_cluster(tmp_path, pool_yaml=INSTANT_CPU_YAML) as cl:
        await cpu_template(cl)
        cl.cloud.faults("cpu").timeouts = 1000  # the node is made; no answer ever comes back
        await cl.provreq("first", ("small", 1))
        await wait_record(cl, "first", OBTAINING)
        await wait_for(cl.ready_nodes)
        await cl.stop()
        await cl.provreq("second", ("small", 1))

        await cl.start()  # a new process and cloud client: the resume will be answered
        assert await first_decision(cl, "second") == "scale-up"
        await cl.advance_stepwise(5)
        for name in ("first", "second"):
            await cl.wait_condition(name, "Provisioned", "True", "CapacityIsProvisioned")
        await count_nodes(cl, 2, "cpu")


# -- 12. events ---------------------------------------------------------------------------------------------------


async def test_a_scale_up_is_told_in_events_on_the_request(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        pr = await cl.provreq("told", ("slice", 2))
        await wait_record(cl, "told", OBTAINED)
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("told", "Provisioned", "True", "CapacityIsProvisioned")
        provisioned = await wait_event(cl, "told", "Provisioned")

        got = await events(cl, "told")
        assert [(e["type"], e["reason"]) for e in got] == [("Normal", "ScaleUp"), ("Normal", "Provisioned")]
        assert got[0]["message"] == "scale up tpu-a +1 unit (2 nodes) in zone zone-a"
        assert provisioned["message"] == "2 new nodes are Ready (tpu-a +1 unit)"
        for event in got:
            assert event["involvedObject"] == {
                "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "name": "told",
                "namespace": NS, "uid": pr["metadata"]["uid"],
                "resourceVersion": event["involvedObject"]["resourceVersion"]}
            assert event["source"]["component"] == "gangscale"


async def test_a_failed_scale_up_is_told_in_a_warning_event(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl, pool="tpu-a")
        cl.cloud.faults("tpu-a").quota = True
        pr = await cl.provreq("refused", ("slice", 2))
        failed = await wait_event(cl, "refused", "ScaleUpFailed")
        assert failed["type"] == "Warning"
        assert "pool tpu-a: quota (QUOTA_EXCEEDED" in failed["message"]
        assert failed["involvedObject"]["uid"] == pr["metadata"]["uid"]
        assert failed["involvedObject"]["kind"] == "ProvisioningRequest"
        reasons = [e["reason"] for e in await events(cl, "refused")]
        assert reasons[:2] == ["ScaleUp", "ScaleUpFailed"]
        assert "Provisioned" not in reasons



async def test_the_nodes_of_a_scale_up_released_by_its_tokens_alone_are_no_free_room(tmp_path: Path) -> None:
    """A release that knows a scale-up's tokens but not its node names (a restarted process releases a recorded
    scale-up before its resumed obtain has said which nodes it has): until the units are gone another gang must not
    be placed on their nodes (found by hack/chaos.py --provider gke, seed 9103: a gang was booked on a deleted
    request's slice, then told CapacityRevoked when the release removed it). The release is started the way the
    loop starts it for a request deleted before its scale-up was resumed."""
    async with running_cluster(tmp_path) as cl:
        await slice_template(cl)
        await cl.provreq("old", ("slice", 2))
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("old", "Provisioned", "True", "CapacityIsProvisioned")
        old = cl.ctl.core.states[f"{NS}/old"]
        assert old.record is not None and len(await cl.nodes()) == 2
        await delete_pr(cl, "old")  # booked, so its nodes stay: ordinary free nodes from now on
        await wait_for(lambda: f"{NS}/old" not in cl.ctl.core.states)

        cl.cloud.faults("tpu-a").call_latency = 5  # the release takes a while
        cl.ctl.core.start_release(Release(old, old.record.steps, (), "its ProvisioningRequest was deleted"))
        await slice_template(cl, "new-slice")
        await cl.provreq("new", ("new-slice", 2))
        await cl.advance(5)
        await cl.advance(PROVISION_SECONDS)
        await cl.wait_condition("new", "Provisioned", "True", "CapacityIsProvisioned")  # a slice of its own
        assert await cl.condition("new", "CapacityRevoked") is None
        assert [(r.token, r.nodes_deleted) for r in releases(cl)] == [(old.record.tokens[0], 2)]
