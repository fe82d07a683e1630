"""One test per bug the black-box fault campaign found (issue "atomic across crashes"), each against real
``gangscale run`` processes: B (check-capacity and an atomic PR of the same shape in one pass), C (a booking
rebuilt after a restart protects the PR's own nodes), D (unit ids never repeat across processes). Bug A is the
``after-the-first-slice`` kill point of ``test_kill_points``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.crash.harness import (
    CPU_TEMPLATE,
    GPU_TEMPLATE,
    POOLS,
    TPU_TEMPLATE,
    Cluster,
    crash_cluster,
    recorded_tokens,
    tracebacks,
    wait_until,
    wait_until_async,
)

CHECK = "check-capacity.gangscale.io"
STATUS = {"verb": "patch", "resource": "provisioningrequests", "subresource": "status"}


async def condition_is(cluster: Cluster, name: str, ctype: str, *accepted: tuple[str, str]) -> bool:
    cond = await cluster.condition(name, ctype)
    return cond is not None and (cond["status"], cond["reason"]) in accepted


@pytest.mark.parametrize("first", ["check-capacity", "atomic"])
async def test_check_capacity_never_creates_a_node_when_planned_with_an_atomic_gang_of_the_same_shape(
        tmp_path: Path, first: str) -> None:
    # Names and creation order put `first` first in the planning order (same priority: age, then name).
    names = {"check-capacity": "a-check", "atomic": "b-atomic"} if first == "check-capacity" else \
        {"atomic": "a-atomic", "check-capacity": "b-check"}
    async with crash_cluster(tmp_path) as cluster:
        await cluster.template("gpu-worker", GPU_TEMPLATE)
        for kind in sorted(names, key=lambda k: names[k]):
            await cluster.provreq(names[kind], "gpu-worker", 3, cls=CHECK if kind == "check-capacity" else
                                  "atomic-scale-up.gangscale.io")
        run = await cluster.start_gangscale()  # both requests are pending at the first pass: planned together

        await wait_until_async(lambda: condition_is(cluster, names["atomic"], "Provisioned",
                                                    ("True", "CapacityIsProvisioned")), "the atomic gang's nodes")
        await wait_until_async(lambda: condition_is(cluster, names["check-capacity"], "Provisioned",
                                                    ("True", "CapacityIsProvisioned"), ("True", "CapacityIsFound"),
                                                    ("False", "CapacityIsNotFound")),
                               "the check-capacity request's decision")
        check = await cluster.condition(names["check-capacity"], "Provisioned")
        assert check is not None and check["status"] == "False", check
        tokens = recorded_tokens(await cluster.pr(names["atomic"]))
        assert recorded_tokens(await cluster.pr(names["check-capacity"])) == set()
        assert [token for _, _, token in cluster.nodes.created] == [next(iter(tokens))] * 3, cluster.nodes.created
        assert await run.stop() == 0
        assert tracebacks(run) == []


@pytest.mark.parametrize("hold", [
    pytest.param({**STATUS, "body_contains": "obtained"}, id="provisioned-by-the-restarted-process"),
    pytest.param({"verb": "create", "resource": "events", "body_contains": "new nodes are Ready"},
                 id="provisioned-before-the-kill"),
])
async def test_a_restarted_process_books_the_requests_own_new_nodes(tmp_path: Path, hold: dict[str, str]) -> None:
    flags = ("--scale-down-unneeded-time", "3s")
    async with crash_cluster(tmp_path) as cluster:
        await cluster.template("slice-host", TPU_TEMPLATE)
        await cluster.template("cpu-worker", CPU_TEMPLATE)
        await cluster.hold(**hold)
        first = await cluster.start_gangscale(*flags)
        await cluster.provreq("multislice", "slice-host", 6)
        await cluster.kill_when_held(first)
        # While gangscale is down, a slice's worth of free TPU hosts appears that gangscale did not make: free
        # capacity a rebuilt booking could land on instead of the request's own nodes.
        tpu_labels = {**TPU_TEMPLATE["nodeSelector"], "gangscale.io/node-pool": "tpu",  # type: ignore[dict-item]
                      "topology.kubernetes.io/zone": "us-central1-a"}
        for i in range(2):
            await cluster.static_node(f"a-static-{i}", tpu_labels, {"google.com/tpu": "4", "pods": "110"})

        second = await cluster.start_gangscale(*flags)
        await wait_until_async(lambda: condition_is(cluster, "multislice", "Provisioned",
                                                    ("True", "CapacityIsProvisioned")), "Provisioned=True")
        own = {n["metadata"]["name"] for n in await cluster.pr_nodes("multislice")}
        assert len(own) == 6
        # A yardstick: a CPU unit whose booking ends at once. Once it has been scaled down, every unbooked idle
        # unit that was already idle before it was even created would have been scaled down too.
        await cluster.provreq("yardstick", "cpu-worker", 1, parameters={"bookingSeconds": "1"})
        await wait_until(lambda: any(name.startswith("cpu-") for name in cluster.nodes.deleted),
                         "the yardstick unit to be scaled down")
        gone = sorted(own - cluster.nodes.alive.keys())
        assert gone == [], f"scaled down while booked: {gone}; alive: {sorted(cluster.nodes.alive)}"
        assert {"a-static-0", "a-static-1"} <= cluster.nodes.alive.keys()
        provisioned = await cluster.condition("multislice", "Provisioned")
        assert provisioned is not None and provisioned["status"] == "True"
        assert await second.stop() == 0
        assert tracebacks(second) == []


async def test_a_resumed_scale_up_keeps_the_existing_unit_its_plan_also_used(tmp_path: Path) -> None:
    # Found by hack/chaos.py: a new leader resumed a scale-up planned as "+1 slice and 2 pods on an existing idle
    # slice", scaled the existing slice down as empty while the new one came up, and wrote Provisioned=True on the
    # new slice alone.
    async with crash_cluster(tmp_path) as cluster:
        await cluster.template("slice-host", TPU_TEMPLATE)
        await cluster.template("cpu-worker", CPU_TEMPLATE)
        first = await cluster.start_gangscale("--scale-down-unneeded-time", "1h")
        await cluster.provreq("early", "slice-host", 2, parameters={"bookingSeconds": "1"})
        expired = ("True", "CapacityReservationTimeExpired")
        await wait_until_async(lambda: condition_is(cluster, "early", "BookingExpired", expired),
                               "the first slice's booking to end")
        idle = {n["metadata"]["name"] for n in await cluster.pr_nodes("early")}
        assert len(idle) == 2
        await cluster.hold(**{**STATUS, "body_contains": "obtained"})
        await cluster.provreq("multislice", "slice-host", 4)
        await cluster.kill_when_held(first)
        detail = recorded_tokens(await cluster.pr("multislice"))
        assert len(detail) == 1, detail

        # The resumed obtain takes a while (the chaos run's new leader met a node pool still being deleted), long
        # enough for an idle unit to be scaled down meanwhile if nothing held it.
        slow = tmp_path / "slow-pools.yaml"
        slow.write_text(POOLS.replace("simulated: {provisionSeconds: 1}",
                                      "simulated: {provisionSeconds: 1, latencySeconds: 4}"))
        second = await cluster.start_gangscale("--scale-down-unneeded-time", "1s", "--config", str(slow))
        await wait_until_async(lambda: condition_is(cluster, "multislice", "Provisioned",
                                                    ("True", "CapacityIsProvisioned")), "Provisioned=True")
        await cluster.provreq("yardstick", "cpu-worker", 1, parameters={"bookingSeconds": "1"})
        await wait_until(lambda: any(name.startswith("cpu-") for name in cluster.nodes.deleted),
                         "the yardstick unit to be scaled down")
        gone = sorted(idle - cluster.nodes.alive.keys())
        assert gone == [], f"the slice the plan used was scaled down: {gone}; alive: {sorted(cluster.nodes.alive)}"
        assert await second.stop() == 0
        assert tracebacks(second) == []


async def test_unit_ids_never_repeat_across_processes(tmp_path: Path) -> None:
    flags = ("--scale-down-unneeded-time", "1s")
    async with crash_cluster(tmp_path) as cluster:
        await cluster.template("cpu-worker", CPU_TEMPLATE)
        first = await cluster.start_gangscale(*flags)
        await cluster.provreq("early", "cpu-worker", 1, parameters={"bookingSeconds": "1"})
        await wait_until(lambda: len(cluster.nodes.deleted) == 1, "the first unit to be scaled down")
        await first.kill()

        second = await cluster.start_gangscale(*flags)
        await cluster.provreq("late", "cpu-worker", 1)
        await wait_until_async(lambda: condition_is(cluster, "late", "Provisioned", ("True", "CapacityIsProvisioned")),
                               "the second unit")
        names = [name for name, _, _ in cluster.nodes.created]
        units = [unit for _, unit, _ in cluster.nodes.created]
        assert len(names) == 2
        assert len(set(names)) == 2 and len(set(units)) == 2, cluster.nodes.created
        assert await second.stop() == 0


async def test_a_scale_up_resumed_after_a_restart_keeps_its_nodes_booked_when_provisioned_on_request(
        tmp_path: Path) -> None:
    # Issue 26, found by a fault campaign: with provisionedWhen: Requested, a process killed before any node of the
    # scale-up was made; the restarted process resumed the obtain, wrote Provisioned=True, rebuilt the booking
    # before the new nodes were in its view, and then scaled one of them down as empty while it was booked.
    async with crash_cluster(tmp_path) as cluster:
        await cluster.template("cpu-worker", CPU_TEMPLATE)
        await cluster.hold(verb="create", resource="nodes")
        first = await cluster.start_gangscale()
        await cluster.provreq("requested", "cpu-worker", 2, parameters={"provisionedWhen": "Requested"})
        await cluster.kill_when_held(first)
        assert cluster.nodes.alive == {}

        # The restarted controller's node watch starts late, so the resumed obtain's answer comes before its new
        # nodes are in the view (the race the campaign hit, made certain).
        await cluster.fail(verb="watch", resource="nodes", user_agent="gangscale/*", latency=3.0, times=1)
        second = await cluster.start_gangscale("--scale-down-unneeded-time", "1s")
        await wait_until_async(lambda: condition_is(cluster, "requested", "Provisioned",
                                                    ("True", "CapacityIsProvisioned")), "Provisioned=True")
        own = {n["metadata"]["name"] for n in await cluster.pr_nodes("requested")}
        await wait_until(lambda: own <= cluster.nodes.alive.keys() and len(own) == 2, "both nodes")
        # Past the 1-s unneeded time of those empty nodes before the yardstick starts: an unprotected one would be
        # scaled down first.
        await asyncio.sleep(2.5)
        await cluster.provreq("yardstick", "cpu-worker", 1, parameters={"bookingSeconds": "1"})
        await wait_until(lambda: len(cluster.nodes.deleted) >= 1, "the yardstick unit to be scaled down")
        gone = sorted(own - cluster.nodes.alive.keys())
        assert gone == [], f"scaled down while booked: {gone}; deleted: {cluster.nodes.deleted}"
        assert await second.stop() == 0
        assert tracebacks(second) == []
