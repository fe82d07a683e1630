"""provreq-spec §7, scenarios 1 to 21, against the real controller.

Each test cites its scenario and checks it as it applies to gangscale's classes: ``atomic-scale-up.gangscale.io``
plays upstream's best-effort-atomic class and ``check-capacity.gangscale.io`` plays check-capacity. Where
gangscale deliberately differs from the cluster-autoscaler (the Accepted message, ``ScaleUpInProgress`` until
every new node is Ready, ``lastTransitionTime`` moving only when a status flips, messages that explain, no
check-capacity batch size or timebox) the test asserts gangscale's behaviour and says so.

Everything runs over real HTTP on a :class:`ManualClock`: time moves only through the clock (``cl.advance``, or
``jump`` for stretches that cross many timers); ``wait_for`` and ``cl.wait_condition`` are hang guards, never
timing assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import gangscale.controller.passes
from gangscale.kube.reflector import Reflector
from gangscale.model.decision import Decision
from gangscale.model.resources import ResourceList
from gangscale.timefmt import parse_rfc3339, rfc3339
from tests.builders import PODS, PROVREQS, requirements
from tests.conftest import wait_for
from tests.controller.harness import NS, Cluster, running_cluster

JSON = dict[str, Any]

ATOMIC = "atomic-scale-up.gangscale.io"
CHECK = "check-capacity.gangscale.io"
TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
#: A hand-registered node outside every managed pool (pre-existing capacity).
CPU8 = {"cpu": "8", "memory": "32Gi", "pods": "110"}
MINUTE, DAY = 60.0, 86400.0
#: metav1.Condition's reason pattern (provreq-spec §1.3).
REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
ACCEPTED_MESSAGE = "ProvisioningRequest is accepted by gangscale"
NEXT_ATTEMPT = re.compile(r"Next attempt at (\S+Z)")
OUTCOME_TYPES = ("Provisioned", "Failed", "BookingExpired", "CapacityRevoked")


# -- helpers ----------------------------------------------------------------------------------------------------


async def raw_conditions(cl: Cluster, name: str) -> dict[str, JSON]:
    pr = await cl.get_pr(name) or {}
    return {c["type"]: c for c in (pr.get("status") or {}).get("conditions") or []}


async def message(cl: Cluster, name: str, ctype: str) -> str:
    return (await raw_conditions(cl, name))[ctype]["message"]


async def ltt(cl: Cluster, name: str, ctype: str) -> str:
    return (await raw_conditions(cl, name))[ctype]["lastTransitionTime"]


async def resource_version(cl: Cluster, name: str) -> str:
    pr = await cl.get_pr(name)
    assert pr is not None, f"{name} is gone"
    return str(pr["metadata"]["resourceVersion"])


async def wait_message(cl: Cluster, name: str, ctype: str, fragment: str) -> None:
    async def has() -> bool:
        got = (await raw_conditions(cl, name)).get(ctype)
        return got is not None and fragment in got["message"]
    await wait_for(has)


async def wait_obtained(cl: Cluster, name: str) -> None:
    """Wait until the scale-up's provider calls are over (the simulated cloud times each unit's Ready from the
    moment it creates it, so the clock must not move while units are still being created)."""
    await cl.wait_condition(name, "Provisioned", "False", "ScaleUpInProgress")
    await wait_message(cl, name, "Provisioned", "waiting for the new nodes to be Ready")


async def wait_gone(cl: Cluster, name: str) -> None:
    async def gone() -> bool:
        return await cl.get_pr(name) is None
    await wait_for(gone)


async def catch_up(cl: Cluster) -> None:
    """Make the controller run a pass at the current clock time, as any watch event would.

    After a long ``cl.advance`` the controller's pass may have started at an earlier deadline on the way; a kick
    makes it look at the cluster again at the new time before the test checks an outcome.
    """
    cl.ctl.wakeup.set()
    await cl.idle()


async def jump(cl: Cluster, seconds: float) -> None:
    """Move the clock across many deadlines; then the controller has run a pass at the new time (``catch_up``)."""
    await cl.clock.advance(seconds)
    await catch_up(cl)


async def pool_nodes(cl: Cluster, pool: str | None = None) -> list[str]:
    """Nodes of the managed pools (every node the simulated cloud made carries the pool label)."""
    return sorted(n["metadata"]["name"] for n in await cl.nodes(pool)
                  if "gangscale.io/node-pool" in (n["metadata"].get("labels") or {}))


async def pending_pod(cl: Cluster, name: str, annotations: dict[str, str], requests: dict[str, str]) -> JSON:
    """A pod that no scheduler placed (no ``spec.nodeName``)."""
    return await cl.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": name, "annotations": annotations},
                                  "spec": {"containers": [{"name": "main", "image": "x",
                                                           "resources": requirements(requests)}]}})


async def delete(cl: Cluster, resource: Any, name: str) -> None:
    await cl.http.request("DELETE", resource.path(NS, name))


def pr_writes(cl: Cluster) -> list[Any]:
    """Every request of the controller (user agent ``gangscale``) that could change a ProvisioningRequest."""
    return [r for r in cl.server.requests if r.resource == "provisioningrequests" and r.user_agent == "gangscale"
            and r.method != "GET"]


def status_writes(cl: Cluster, name: str) -> int:
    return sum(1 for r in pr_writes(cl) if r.name == name)


@contextlib.asynccontextmanager
async def pr_versions(cl: Cluster) -> AsyncIterator[list[JSON]]:
    """Every version of every ProvisioningRequest, as a watch delivers them (nothing is missed between polls)."""
    seen: list[JSON] = []
    reflector = Reflector(cl.http, PROVREQS)
    reflector.add_handler(lambda event: seen.append(event.obj))
    task = asyncio.create_task(reflector.run(), name="test: provisioningrequest versions")
    try:
        await wait_for(reflector.synced.is_set)
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def spy_passes(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, str]]]:
    """Record the decisions of every planning pass that decided anything: [(request, outcome), ...] per pass."""
    passes: list[list[tuple[str, str]]] = []
    original = gangscale.controller.passes.record_plans

    def record(plans: dict[str, Any], decisions: Sequence[Decision], *args: Any, **kwargs: Any) -> None:
        if decisions:
            passes.append([(d.gang.removeprefix(f"{NS}/"), d.outcome.value) for d in decisions])
        original(plans, decisions, *args, **kwargs)

    monkeypatch.setattr(gangscale.controller.passes, "record_plans", record)
    return passes


# -- A. lifecycle -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [CHECK, ATOMIC], ids=["check-capacity", "atomic"])
async def test_s01_accepted_before_or_with_the_outcome(tmp_path: Path, cls: str) -> None:
    """Scenario 1, for both classes: a new PR gets ``Accepted=True/Accepted`` before or together with its outcome.

    gangscale's message is "ProvisioningRequest is accepted by gangscale" (upstream names ClusterAutoscaler).
    Every version of the PR a watch delivers is checked, so an outcome written without Accepted cannot slip by;
    Accepted's lastTransitionTime never moves afterwards.
    """
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("small", {"cpu": "4"})
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        async with pr_versions(cl) as versions:
            if cls == CHECK:
                await cl.provreq("pr", ("small", 1), cls=CHECK)
                await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsFound")
            else:
                await cl.provreq("pr", ("gpu8", 1), cls=ATOMIC)
                await wait_obtained(cl, "pr")
                await cl.advance(30)
                await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsProvisioned")
            await wait_for(lambda: any(any(c["type"] == "Provisioned" and c["status"] == "True"
                                           for c in (v.get("status") or {}).get("conditions") or [])
                                       for v in versions))
        with_conditions = [{c["type"]: c for c in v["status"]["conditions"]}
                           for v in versions if (v.get("status") or {}).get("conditions")]
        assert with_conditions, "the watch saw no status"
        for conds in with_conditions:
            accepted = conds.get("Accepted")
            assert accepted is not None, f"an outcome was written before Accepted: {sorted(conds)}"
            assert (accepted["status"], accepted["reason"], accepted["message"]) == \
                ("True", "Accepted", ACCEPTED_MESSAGE)
        assert len({conds["Accepted"]["lastTransitionTime"] for conds in with_conditions}) == 1
        outcome_seen = [conds for conds in with_conditions if set(OUTCOME_TYPES) & conds.keys()]
        assert outcome_seen and all("Accepted" in conds for conds in outcome_seen)


async def test_s02_check_capacity_fits_existing_nodes(tmp_path: Path) -> None:
    """Scenario 2 (check-capacity): every pod fits the current nodes -> ``Provisioned=True/CapacityIsFound``.

    The message says where the pods fit and until when the capacity is booked; the class never scales a pool.
    (The Kueue half of the scenario, podSetUpdates, is Kueue's and not exercised here.)
    """
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.ready_node("n1", CPU8)
        await cl.template("small", {"cpu": "4"})
        await cl.provreq("pr", ("small", 2), cls=CHECK)
        await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsFound")
        conds = await raw_conditions(cl, "pr")
        text = conds["Provisioned"]["message"]
        assert "fits on free capacity" in text and "2 pods on 1 existing node" in text
        assert f"booked until {rfc3339(t0 + 10 * MINUTE)}" in text
        assert "Failed" not in conds
        assert cl.obtains() == [] and await pool_nodes(cl) == []


async def test_s03_check_capacity_does_not_fit_and_retries(tmp_path: Path) -> None:
    """Scenario 3 (check-capacity, no ``noRetry``): no fit -> ``Provisioned=False/CapacityIsNotFound``, no ``Failed``.

    gangscale's message explains what is missing (no Ready node has room for the pod set), that the class never
    scales a pool, and when the next attempt is. The cpu pool could have grown, and must not have.
    """
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.ready_node("n1", CPU8)
        await cl.template("big", {"cpu": "12"})
        await cl.provreq("pr", ("big", 1), cls=CHECK)
        await cl.wait_condition("pr", "Provisioned", "False", "CapacityIsNotFound")
        text = await message(cl, "pr", "Provisioned")
        assert "no Ready node has room for a pod of pod set" in text and "'big'" in text
        assert "never scales a pool" in text
        assert f"Next attempt at {rfc3339(t0 + MINUTE)}" in text
        await jump(cl, 10 * MINUTE)
        conds = await raw_conditions(cl, "pr")
        assert (conds["Provisioned"]["status"], conds["Provisioned"]["reason"]) == ("False", "CapacityIsNotFound")
        assert "Failed" not in conds
        assert cl.obtains() == [] and await pool_nodes(cl) == []


async def test_s04_check_capacity_no_retry_fails(tmp_path: Path) -> None:
    """Scenario 4 (check-capacity, ``noRetry: "true"``): no fit -> ``Failed=True/CapacityIsNotFound`` at once.

    The message names what is missing; gangscale writes no Provisioned condition and schedules no retry (the
    Kueue half, Retry with requeueAfterSeconds, is Kueue's).
    """
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("big", {"cpu": "12"})
        await cl.provreq("pr", ("big", 1), cls=CHECK, parameters={"noRetry": "true"})
        await cl.wait_condition("pr", "Failed", "True", "CapacityIsNotFound")
        conds = await raw_conditions(cl, "pr")
        assert "cannot place every pod" in conds["Failed"]["message"] and "'big'" in conds["Failed"]["message"]
        assert "Next attempt" not in conds["Failed"]["message"]
        assert "Provisioned" not in conds
        assert cl.obtains() == []


async def test_s05_two_requests_that_fit_only_one_at_a_time(tmp_path: Path) -> None:
    """Scenario 5 (check-capacity): two PRs that each fit alone but not together: one is Provisioned; the other
    cannot take the booked capacity through its retries, and is Provisioned as soon as the first booking ends.

    gangscale re-plans waiting requests the moment a booking ends (not at their next backoff step): the second PR
    is Provisioned at +10m exactly, while its own next retry would only be at +15m.
    """
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.ready_node("n1", CPU8)
        await cl.template("six", {"cpu": "6"})
        await cl.provreq("a", ("six", 1), cls=CHECK)
        await cl.wait_condition("a", "Provisioned", "True", "CapacityIsFound")
        await cl.provreq("b", ("six", 1), cls=CHECK)
        await cl.wait_condition("b", "Provisioned", "False", "CapacityIsNotFound")
        # Retries at +1m, +3m and +7m all see the booking.
        await jump(cl, 10 * MINUTE - 1)
        assert await cl.condition("b", "Provisioned") == ("False", "CapacityIsNotFound")
        assert await cl.condition("a", "BookingExpired") is None
        next_attempt = parse_rfc3339(NEXT_ATTEMPT.search(await message(cl, "b", "Provisioned")).group(1))
        assert next_attempt is not None and next_attempt > t0 + 10 * MINUTE
        await cl.advance(1)
        await cl.wait_condition("a", "BookingExpired", "True", "CapacityReservationTimeExpired")
        await cl.wait_condition("b", "Provisioned", "True", "CapacityIsFound")
        assert await ltt(cl, "b", "Provisioned") == rfc3339(t0 + 10 * MINUTE)


async def test_s06_no_batch_size_every_pending_request_is_decided_in_one_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scenario 6 does not apply: gangscale has no check-capacity max batch size. What it does instead, tested here:
    every pending PR is decided in the same pass, oldest first, each seeing what the ones before it took.

    Three check-capacity PRs (created c, a, b, one second apart) and room for two: the one pass decides all three;
    the two oldest (c, a; not the first two by name) are Provisioned, b gets CapacityIsNotFound, and the bookings
    together never exceed the node.
    """
    passes = spy_passes(monkeypatch)
    async with running_cluster(tmp_path, start=False) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("four", {"cpu": "4"})
        for name in ("c", "a", "b"):
            await cl.provreq(name, ("four", 1), cls=CHECK)
            await cl.clock.advance(1)
        await cl.start()
        for name in ("c", "a"):
            await cl.wait_condition(name, "Provisioned", "True", "CapacityIsFound")
        await cl.wait_condition("b", "Provisioned", "False", "CapacityIsNotFound")
        assert passes[0] == [("c", "Fits"), ("a", "Fits"), ("b", "Infeasible")]
        booked = sum((amount for st in cl.ctl.core.states.values() for amount in (st.booking or {}).values()),
                     ResourceList.parse({}))
        n1 = ResourceList.parse(CPU8)
        assert booked.get("cpu") == n1.get("cpu") and not booked - n1  # all of n1's cpu, and nothing beyond n1


async def test_s07_no_timebox_idle_decides_at_once_busy_gathers_one_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scenario 7 does not apply: gangscale has no batch timebox and never cuts a pass short. What it does instead,
    tested here (group commit): an idle controller decides a new request at once, in a pass of its own, without
    waiting out ``batch_idle``; while a provider call is under way, requests that arrive gather, and one pass
    decides them all when the call returns.

    A 24-CPU node takes six 4-CPU check-capacity PRs. ``pr-0`` arrives on an idle controller: decided at once.
    Then a CPU scale-up whose provider call takes 5 s starts, and ``pr-1``..``pr-7`` arrive half a second apart
    meanwhile: they are held for the next batch, and nothing is written for them until the batch window closes
    (``batch_idle=1s`` after the last arrival, still inside the 5 s call): then a single pass decides all seven
    (Accepted and the decision in one write each): five fit, two get CapacityIsNotFound.
    """
    passes = spy_passes(monkeypatch)
    async with running_cluster(tmp_path, start=False) as cl:
        await cl.start(batch_idle=1.0, batch_max=10.0)
        await cl.ready_node("big", {"cpu": "24", "memory": "96Gi", "pods": "110"})
        await cl.template("four", {"cpu": "4"})
        await cl.template("whole-cpu-node", {"cpu": "15"}, selector={"gangscale.io/node-pool": "cpu"})
        await cl.idle()
        started = cl.clock.now()
        await cl.provreq("pr-0", ("four", 1), cls=CHECK)
        await cl.wait_condition("pr-0", "Provisioned", "True", "CapacityIsFound")
        assert cl.clock.now() == started and passes == [[("pr-0", "Fits")]]

        cl.cloud.faults("cpu").call_latency = 5
        await cl.provreq("scale", ("whole-cpu-node", 1), cls=ATOMIC)
        await cl.wait_condition("scale", "Provisioned", "False", "ScaleUpInProgress")
        names = [f"pr-{i}" for i in range(1, 8)]
        for name in names:
            await cl.provreq(name, ("four", 1), cls=CHECK)
            await cl.idle()
            await cl.advance(0.5)
        assert passes == [[("pr-0", "Fits")], [("scale", "ScaleUp")]]
        assert [await cl.conditions(name) for name in names] == [{}] * len(names)
        await cl.advance_stepwise(1)  # the window closes 1 s after the last arrival; the call has 0.5 s to go
        for name in names[:5]:
            await cl.wait_condition(name, "Provisioned", "True", "CapacityIsFound")
        for name in names[5:]:
            await cl.wait_condition(name, "Provisioned", "False", "CapacityIsNotFound")
        assert len(passes) == 3 and [name for name, _ in passes[2]] == names
        assert cl.obtains() == []  # decided while the scale-up was still calling the provider


async def test_s08_atomic_already_fits_needs_no_scale_up(tmp_path: Path) -> None:
    """Scenario 8 (atomic): pods that already fit -> ``Provisioned=True/CapacityIsFound`` and no pool changes."""
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("small", {"cpu": "2"})
        await cl.provreq("pr", ("small", 3), cls=ATOMIC)
        await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsFound")
        assert "fits on free capacity: 3 pods on 1 existing node" in await message(cl, "pr", "Provisioned")
        await jump(cl, MINUTE)
        assert cl.obtains() == [] and await pool_nodes(cl) == []


async def test_s09_atomic_scale_up_is_provisioned_once_every_node_is_ready(tmp_path: Path) -> None:
    """Scenario 9 (atomic): N new nodes that one pool can supply are asked for in **one** call (gpu +3), and,
    unlike upstream, the PR says ``Provisioned=False/ScaleUpInProgress`` while they come up and
    ``True/CapacityIsProvisioned`` only once every one of them is Ready.

    The Provisioned lastTransitionTime moves when the status flips to True, 30 s later (that it stays put while
    only the message changes is shown by the scenario 11 tests, where time passes between messages).
    """
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        await cl.provreq("pr", ("gpu8", 3), cls=ATOMIC)
        await wait_obtained(cl, "pr")
        assert "obtained gpu +3 units" in await message(cl, "pr", "Provisioned")
        assert [(c.pool, c.units) for c in cl.obtains()] == [("gpu", 3)]
        assert await ltt(cl, "pr", "Provisioned") == rfc3339(t0)
        assert len(await pool_nodes(cl, "gpu")) == 3 and await cl.ready_nodes() == []
        await cl.advance(29)
        assert await cl.condition("pr", "Provisioned") == ("False", "ScaleUpInProgress")
        await cl.advance(1)
        await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsProvisioned")
        assert "3 new nodes are Ready (gpu +3 units)" in await message(cl, "pr", "Provisioned")
        assert await ltt(cl, "pr", "Provisioned") == rfc3339(t0 + 30)
        assert len(cl.obtains()) == 1 and len(await cl.ready_nodes()) == 3


async def test_s09_atomic_slices_may_be_spread_over_alike_pools(tmp_path: Path) -> None:
    """Scenario 9 for a two-slice TPU gang (4 hosts): gangscale may spread the units over alike pools in the
    same zone, as the cluster-autoscaler's balancing of similar node groups may (tpu-a +1 and tpu-b +1 here,
    the planner's deterministic tie-break). It is still one decision: each pool is asked once, 2 units in all,
    and the PR is Provisioned only when all 4 hosts are Ready."""
    async with running_cluster(tmp_path) as cl:
        await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
        await cl.provreq("pr", ("slice", 4), cls=ATOMIC)
        await wait_obtained(cl, "pr")
        calls = cl.obtains()
        assert sum(c.units for c in calls) == 2 and len({c.pool for c in calls}) == len(calls)
        assert {c.pool for c in calls} <= {"tpu-a", "tpu-b"}
        assert len(await pool_nodes(cl)) == 4
        await cl.advance(30)
        await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsProvisioned")
        assert "4 new nodes are Ready" in await message(cl, "pr", "Provisioned")
        assert len(cl.obtains()) == len(calls) and len(await cl.ready_nodes()) == 4


async def test_s09_atomic_provisioned_when_requested_is_upstreams_behaviour(tmp_path: Path) -> None:
    """Scenario 9 with ``provisionedWhen: Requested``: upstream's best-effort behaviour, ``Provisioned=True/
    CapacityIsProvisioned`` as soon as the one provider call granted every unit, before any node is Ready."""
    async with running_cluster(tmp_path) as cl:
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        await cl.provreq("pr", ("gpu8", 2), cls=ATOMIC, parameters={"provisionedWhen": "Requested"})
        await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsProvisioned")
        assert "obtained gpu +2 units; the nodes are coming up" in await message(cl, "pr", "Provisioned")
        [call] = cl.obtains()
        assert (call.pool, call.units) == ("gpu", 2)
        assert len(await pool_nodes(cl, "gpu")) == 2 and await cl.ready_nodes() == []


async def test_s10_atomic_scale_up_that_cannot_be_satisfied_changes_nothing(tmp_path: Path) -> None:
    """Scenario 10 (atomic): a gang larger than any pool may grow (5 GPU nodes, gpu maxUnits 4) changes **no**
    pool at all and gets ``Provisioned=False/CapacityIsNotFound``, whose message names the pool and its limit."""
    async with running_cluster(tmp_path) as cl:
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        await cl.provreq("pr", ("gpu8", 5), cls=ATOMIC)
        await cl.wait_condition("pr", "Provisioned", "False", "CapacityIsNotFound")
        text = await message(cl, "pr", "Provisioned")
        assert "pool gpu" in text and "maxUnits leaves 4" in text and "Next attempt at" in text
        await jump(cl, 10 * MINUTE)  # a few retries
        assert await cl.condition("pr", "Provisioned") == ("False", "CapacityIsNotFound")
        assert cl.obtains() == [] and await pool_nodes(cl) == []


async def test_s11_not_re_planned_before_the_first_minute(tmp_path: Path) -> None:
    """Scenario 11: ``Provisioned=False`` at T -> not re-evaluated before T+1m.

    A check-capacity PR that does not fit; a node that would fit it registers at +30s: the PR is still
    CapacityIsNotFound at +59s (message unchanged) and Provisioned at +60s.
    """
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.template("four", {"cpu": "4"})
        await cl.provreq("pr", ("four", 1), cls=CHECK)
        await cl.wait_condition("pr", "Provisioned", "False", "CapacityIsNotFound")
        first = await message(cl, "pr", "Provisioned")
        assert f"Next attempt at {rfc3339(t0 + MINUTE)}" in first
        await cl.advance(30)
        await cl.ready_node("n1", CPU8)
        await cl.advance(29)
        assert await cl.condition("pr", "Provisioned") == ("False", "CapacityIsNotFound")
        assert await message(cl, "pr", "Provisioned") == first
        await cl.advance(1)
        await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsFound")
        assert await ltt(cl, "pr", "Provisioned") == rfc3339(t0 + MINUTE)


async def test_s11_retry_gaps_double_up_to_ten_minutes(tmp_path: Path) -> None:
    """Scenario 11: the gaps between re-plans double from 1m up to 10m: re-plans at +1m, +3m, +7m, +15m, +25m,
    +35m; never a second early (each attempt's message names the next one).

    ``lastTransitionTime`` stays at the first decision throughout: only the message changes, never the status.
    """
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.ready_node("n1", CPU8)
        await cl.template("big", {"cpu": "12"})
        await cl.provreq("pr", ("big", 1), cls=CHECK)
        await cl.wait_condition("pr", "Provisioned", "False", "CapacityIsNotFound")
        attempts = [0, 60, 180, 420, 900, 1500, 2100, 2700]
        now = 0
        for attempt, following in itertools.pairwise(attempts):
            expected = f"Next attempt at {rfc3339(t0 + following)}"
            if attempt:
                await jump(cl, attempt - 1 - now)
                assert f"Next attempt at {rfc3339(t0 + attempt)}" in await message(cl, "pr", "Provisioned"), \
                    f"re-planned before +{attempt}s"
                await cl.advance(1)
                now = attempt
            await wait_message(cl, "pr", "Provisioned", expected)
            assert await ltt(cl, "pr", "Provisioned") == rfc3339(t0)
        assert await cl.condition("pr", "Provisioned") == ("False", "CapacityIsNotFound")


async def test_s12_booking_expires_ten_minutes_after_provisioned(tmp_path: Path) -> None:
    """Scenario 12 (check-capacity): Provisioned with no consumers -> at Provisioned's LTT + 10m, not before,
    ``BookingExpired=True/CapacityReservationTimeExpired`` ("Capacity reservation time is expired"); Provisioned
    is left as it was, and the capacity is free for the next PR."""
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.ready_node("n1", CPU8)
        await cl.template("six", {"cpu": "6"})
        await cl.provreq("a", ("six", 1), cls=CHECK)
        await cl.wait_condition("a", "Provisioned", "True", "CapacityIsFound")
        provisioned = (await raw_conditions(cl, "a"))["Provisioned"]
        assert provisioned["lastTransitionTime"] == rfc3339(t0)
        await jump(cl, 10 * MINUTE - 1)
        assert await cl.condition("a", "BookingExpired") is None
        await cl.advance(1)
        await cl.wait_condition("a", "BookingExpired", "True", "CapacityReservationTimeExpired")
        conds = await raw_conditions(cl, "a")
        assert conds["BookingExpired"]["message"] == "Capacity reservation time is expired"
        assert conds["BookingExpired"]["lastTransitionTime"] == rfc3339(t0 + 10 * MINUTE)
        assert conds["Provisioned"] == provisioned
        await cl.provreq("b", ("six", 1), cls=CHECK)
        await cl.wait_condition("b", "Provisioned", "True", "CapacityIsFound")


async def test_s13_booking_consumed_once_every_pod_is_scheduled(tmp_path: Path) -> None:
    """Scenario 13 (with scenario 5's guarantee): the booking holds while fewer than Σcount consumer pods are
    scheduled (another PR cannot take what is left of it), and ends with ``BookingExpired=True/
    CapacityBookingConsumed`` ("Capacity booking consumed: all pods scheduled") once all are."""
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("three", {"cpu": "3"})
        await cl.template("four", {"cpu": "4"})
        await cl.provreq("a", ("three", 2), cls=CHECK)
        await cl.wait_condition("a", "Provisioned", "True", "CapacityIsFound")
        await cl.consumer("a-0", "a", "n1", {"cpu": "3"})
        await catch_up(cl)
        assert await cl.condition("a", "BookingExpired") is None
        # n1 has 5 cpu unrequested, 3 of which are still booked for a's second pod: 4 do not fit.
        await cl.provreq("c", ("four", 1), cls=CHECK)
        await cl.wait_condition("c", "Provisioned", "False", "CapacityIsNotFound")
        await cl.consumer("a-1", "a", "n1", {"cpu": "3"})
        await cl.wait_condition("a", "BookingExpired", "True", "CapacityBookingConsumed")
        assert await message(cl, "a", "BookingExpired") == "Capacity booking consumed: all pods scheduled"
        assert await cl.condition("a", "Provisioned") == ("True", "CapacityIsFound")


@pytest.mark.parametrize("cls", [CHECK, ATOMIC], ids=["check-capacity", "atomic"])
async def test_s14_never_provisioned_for_seven_days_expires(tmp_path: Path, cls: str) -> None:
    """Scenario 14: a PR not provisioned 7 days after its creation -> ``Failed=True/Expired``, not a second before.

    gangscale's message adds the window ("not provisioned within 7d of its creation").
    """
    async with running_cluster(tmp_path) as cl:
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        await cl.provreq("pr", ("gpu8", 5), cls=cls)  # no node, and more than the gpu pool may hold
        await cl.wait_condition("pr", "Provisioned", "False", "CapacityIsNotFound")
        await jump(cl, 7 * DAY - 1)
        assert await cl.condition("pr", "Failed") is None
        await cl.advance(1)
        await cl.wait_condition("pr", "Failed", "True", "Expired")
        text = await message(cl, "pr", "Failed")
        assert text.startswith("ProvisioningRequest is expired") and "7d" in text
        assert cl.obtains() == []


async def test_s15_terminal_requests_are_never_written_again(tmp_path: Path) -> None:
    """Scenario 15: after ``Failed=True`` or ``BookingExpired=True`` gangscale writes nothing more and books
    nothing: the resourceVersions stay the same across later passes, even when capacity appears or consumer pods
    arrive, and the formerly booked capacity goes to the next PR."""
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("big", {"cpu": "12"})
        await cl.template("six", {"cpu": "6"})
        await cl.provreq("failed", ("big", 1), cls=CHECK, parameters={"noRetry": "true"})
        await cl.provreq("expired", ("six", 1), cls=CHECK)
        await cl.wait_condition("failed", "Failed", "True", "CapacityIsNotFound")
        await cl.wait_condition("expired", "Provisioned", "True", "CapacityIsFound")
        await jump(cl, 10 * MINUTE)
        await cl.wait_condition("expired", "BookingExpired", "True", "CapacityReservationTimeExpired")
        versions = {name: await resource_version(cl, name) for name in ("failed", "expired")}
        writes = {name: status_writes(cl, name) for name in versions}
        await cl.ready_node("n2", {"cpu": "16", "memory": "64Gi", "pods": "110"})  # "failed" would fit now
        await cl.consumer("expired-0", "expired", "n1", {"cpu": "6"})
        for step in (1, MINUTE, 10 * MINUTE, 2 * 3600):
            await jump(cl, step)
            assert {name: await resource_version(cl, name) for name in versions} == versions
        assert {name: status_writes(cl, name) for name in versions} == writes
        assert await cl.condition("failed", "Provisioned") is None
        # Nothing is booked for either: a PR needing n2's whole 16 cpu and one needing n1's remaining 2 both fit.
        await cl.template("sixteen", {"cpu": "16"})
        await cl.template("two", {"cpu": "2"})
        await cl.provreq("next", ("sixteen", 1), ("two", 1), cls=CHECK)
        await cl.wait_condition("next", "Provisioned", "True", "CapacityIsFound")


@pytest.mark.parametrize("outcome", ["failed", "booking-expired"])
async def test_s16_terminal_requests_are_deleted_seven_days_after_their_outcome(
        tmp_path: Path, outcome: str) -> None:
    """Scenario 16: a PR whose outcome is more than 7 days old is deleted, not a second earlier.

    gangscale counts from the latest outcome condition: a Failed PR 7 days after Failed; a Provisioned PR 7 days
    after its BookingExpired (10 minutes after Provisioned), where upstream counts from Provisioned. A PR still
    pending is not deleted this way: it expires first (scenario 14) and is deleted 7 days after that.
    """
    async with running_cluster(tmp_path) as cl:
        t0 = cl.clock.now()
        await cl.ready_node("n1", CPU8)
        if outcome == "failed":
            await cl.template("big", {"cpu": "12"})
            await cl.provreq("pr", ("big", 1), cls=CHECK, parameters={"noRetry": "true"})
            await cl.wait_condition("pr", "Failed", "True", "CapacityIsNotFound")
            ended = t0
        else:
            await cl.template("six", {"cpu": "6"})
            await cl.provreq("pr", ("six", 1), cls=CHECK)
            await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsFound")
            await jump(cl, 10 * MINUTE)
            await cl.wait_condition("pr", "BookingExpired", "True", "CapacityReservationTimeExpired")
            ended = t0 + 10 * MINUTE
        await jump(cl, ended + 7 * DAY - 1 - cl.clock.now())
        assert await cl.get_pr("pr") is not None
        await cl.advance(1)
        await wait_gone(cl, "pr")
        deletes = [r for r in pr_writes(cl) if r.method == "DELETE"]
        assert [(r.name, r.status) for r in deletes] == [("pr", 200)]


async def test_s17_missing_pod_template_fails_to_create_pods(tmp_path: Path) -> None:
    """Scenario 17: a PR referencing a missing PodTemplate -> ``Failed=True/FailedToCreatePods`` whose message
    starts ``missing pod templates,`` (upstream's wording) and names the template; nothing is scaled, and the
    template appearing later does not revive the failed PR."""
    async with running_cluster(tmp_path) as cl:
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        await cl.provreq("pr", ("gpu8", 1), ("ghost", 2), cls=ATOMIC)
        await cl.wait_condition("pr", "Failed", "True", "FailedToCreatePods")
        text = await message(cl, "pr", "Failed")
        assert text.startswith("missing pod templates,") and "ghost" in text and "1 templates were missing" in text
        await cl.template("ghost", limits={"nvidia.com/gpu": "8"})
        await jump(cl, 10 * MINUTE)
        assert await cl.condition("pr", "Provisioned") is None
        assert cl.obtains() == [] and await pool_nodes(cl) == []


async def test_s18_unknown_class_or_other_processor_instance_is_never_touched(tmp_path: Path) -> None:
    """Scenario 18: PRs of a class gangscale does not serve, or whose ``processorInstance`` is not gangscale's,
    get no conditions, ever: no status write, no scale-up, and (unlike the cluster-autoscaler's garbage
    collection) no deletion, even 15 days on. A PR with the matching instance is served, as a control.

    gangscale runs with ``processorInstance=blue`` here: a PR without the parameter is someone else's too
    (for both classes; upstream's best-effort class ignores the parameter).
    """
    async with running_cluster(tmp_path, start=False) as cl:
        await cl.start(processor_instance="blue")
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        ignored = {
            "other-class": dict(cls="other.example.com", parameters={"processorInstance": "blue"}),
            "upstream-atomic": dict(cls="best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                                    parameters={"processorInstance": "blue"}),
            "other-instance": dict(cls=ATOMIC, parameters={"processorInstance": "green"}),
            "no-instance": dict(cls=ATOMIC, parameters={}),
            "check-other-instance": dict(cls=CHECK, parameters={"processorInstance": "green"}),
        }
        for name, kwargs in ignored.items():
            await cl.provreq(name, ("gpu8", 1), **kwargs)
        await cl.provreq("served", ("gpu8", 1), cls=ATOMIC, parameters={"processorInstance": "blue"})
        await wait_obtained(cl, "served")
        await cl.advance(30)
        await cl.wait_condition("served", "Provisioned", "True", "CapacityIsProvisioned")
        for step in (10 * MINUTE, 7 * DAY, 8 * DAY):
            await jump(cl, step)
        for name in ignored:
            pr = await cl.get_pr(name)
            assert pr is not None, f"{name} was deleted"
            assert not (pr.get("status") or {}).get("conditions"), f"{name} got conditions"
        assert {r.name for r in pr_writes(cl)} == {"served"}
        assert [(c.pool, c.units) for c in cl.obtains()] == [("gpu", 1)]


async def test_s19_pending_consumer_pods_never_trigger_a_scale_up(tmp_path: Path) -> None:
    """Scenario 19: pending pods carrying ``autoscaling.x-k8s.io/consume-provisioning-request`` (or the deprecated
    ``cluster-autoscaler.kubernetes.io/...`` key) never cause a node to be created: not for a missing PR, not for a
    PR that is still waiting, and not beyond what their own PR asked for."""
    async with running_cluster(tmp_path) as cl:
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        await cl.template("big", {"cpu": "12"})
        await cl.provreq("waiting", ("big", 1), cls=CHECK)
        await cl.provreq("real", ("gpu8", 1), cls=ATOMIC)
        gpu = {"nvidia.com/gpu": "8"}
        await pending_pod(cl, "ghost-0", {"autoscaling.x-k8s.io/consume-provisioning-request": "ghost",
                                          "autoscaling.x-k8s.io/provisioning-class-name": ATOMIC}, gpu)
        await pending_pod(cl, "old-0", {"cluster-autoscaler.kubernetes.io/consume-provisioning-request": "ghost",
                                        "cluster-autoscaler.kubernetes.io/provisioning-class-name": ATOMIC}, gpu)
        await pending_pod(cl, "waiting-0", {"autoscaling.x-k8s.io/consume-provisioning-request": "waiting",
                                            "autoscaling.x-k8s.io/provisioning-class-name": CHECK}, {"cpu": "12"})
        for i in range(3):
            await pending_pod(cl, f"real-{i}", {"autoscaling.x-k8s.io/consume-provisioning-request": "real",
                                                "autoscaling.x-k8s.io/provisioning-class-name": ATOMIC}, gpu)
        await cl.wait_condition("waiting", "Provisioned", "False", "CapacityIsNotFound")
        await wait_obtained(cl, "real")
        await cl.advance(30)
        await cl.wait_condition("real", "Provisioned", "True", "CapacityIsProvisioned")
        await jump(cl, 15 * MINUTE)
        assert [(c.pool, c.units) for c in cl.obtains()] == [("gpu", 1)]
        assert len(await pool_nodes(cl)) <= 1


async def provisioned_gpu_node(cl: Cluster) -> str:
    await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
    await cl.provreq("pr", ("gpu8", 1), cls=ATOMIC)
    await wait_obtained(cl, "pr")
    await cl.advance(30)
    await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsProvisioned")
    [node] = await pool_nodes(cl, "gpu")
    return node


async def test_s20_deleted_request_nodes_are_removed_after_ten_idle_minutes(tmp_path: Path) -> None:
    """Scenario 20: a Provisioned atomic PR is deleted -> its nodes become ordinary scale-down candidates and
    are removed once empty for scaleDownUnneededTime (10m), not before."""
    async with running_cluster(tmp_path) as cl:
        node = await provisioned_gpu_node(cl)
        await delete(cl, PROVREQS, "pr")
        await wait_for(lambda: not cl.ctl.core.states)
        await jump(cl, 10 * MINUTE - 1)
        assert await pool_nodes(cl, "gpu") == [node]
        await cl.advance(1)

        async def removed() -> bool:
            return await pool_nodes(cl, "gpu") == []
        await wait_for(removed)
        assert [c.operation for p in cl.history for c in p.calls] == ["obtain", "release"]


async def test_s20_deleted_request_nodes_with_pods_stay(tmp_path: Path) -> None:
    """Scenario 20: the same, with a pod running on the node: the node stays as long as the pod does, and is
    removed 10 minutes after the pod is gone."""
    async with running_cluster(tmp_path) as cl:
        node = await provisioned_gpu_node(cl)
        await cl.consumer("worker", "pr", node, {"nvidia.com/gpu": "8"})
        await delete(cl, PROVREQS, "pr")
        await wait_for(lambda: not cl.ctl.core.states)
        await jump(cl, 15 * MINUTE)
        assert await pool_nodes(cl, "gpu") == [node]
        await delete(cl, PODS, "worker")

        async def pod_gone() -> bool:
            return not any(name == "worker" for _, name in cl.ctl.pods.cache)
        await wait_for(pod_gone)
        await jump(cl, 10 * MINUTE - 1)
        assert await pool_nodes(cl, "gpu") == [node]
        await cl.advance(1)

        async def removed() -> bool:
            return await pool_nodes(cl, "gpu") == []
        await wait_for(removed)


async def test_s21_every_status_write_is_an_apply_to_the_status_subresource(tmp_path: Path) -> None:
    """Scenario 21: across a run that produces every outcome (found, not found, noRetry failure, missing
    template, scale-up in progress, provisioned, booking expired), every write gangscale made to a
    ProvisioningRequest is a server-side apply PATCH (``application/apply-patch+yaml``, field manager
    ``gangscale``, forced) to the ``status`` subresource, and every condition in every version of every PR has a
    pattern-valid reason, a message and observedGeneration."""
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", CPU8)
        await cl.template("six", {"cpu": "6"})
        await cl.template("big", {"cpu": "12"})
        await cl.template("gpu8", limits={"nvidia.com/gpu": "8"})
        async with pr_versions(cl) as versions:
            await cl.provreq("found", ("six", 1), cls=CHECK)
            await cl.provreq("not-found", ("big", 1), cls=CHECK)
            await cl.provreq("no-retry", ("big", 1), cls=CHECK, parameters={"noRetry": "true"})
            await cl.provreq("missing", ("ghost", 1), cls=CHECK)
            await cl.provreq("scale", ("gpu8", 2), cls=ATOMIC)
            await cl.wait_condition("found", "Provisioned", "True", "CapacityIsFound")
            await cl.wait_condition("not-found", "Provisioned", "False", "CapacityIsNotFound")
            await cl.wait_condition("no-retry", "Failed", "True", "CapacityIsNotFound")
            await cl.wait_condition("missing", "Failed", "True", "FailedToCreatePods")
            await wait_obtained(cl, "scale")
            await cl.advance(30)
            await cl.wait_condition("scale", "Provisioned", "True", "CapacityIsProvisioned")
            await jump(cl, 10 * MINUTE)
            await cl.wait_condition("found", "BookingExpired", "True", "CapacityReservationTimeExpired")
            await cl.wait_condition("scale", "BookingExpired", "True", "CapacityReservationTimeExpired")
            final = {name: await resource_version(cl, name)
                     for name in ("found", "not-found", "no-retry", "missing", "scale")}
            await wait_for(lambda: {v["metadata"]["name"]: v["metadata"]["resourceVersion"]
                                    for v in versions} == final)
        writes = pr_writes(cl)
        # At least one write per outcome: found (Fits, then expired), not-found, no-retry, missing, scale (intent,
        # obtained, Provisioned, expired); Accepted goes with each request's first decision.
        assert len(writes) >= 9
        others = {(r.user_agent, r.method) for r in cl.server.requests
                  if r.resource == "provisioningrequests" and r.method != "GET" and r not in writes}
        assert others == {("gangscale-tests", "POST")}  # every condition seen below is gangscale's
        for w in writes:
            assert (w.method, w.subresource, w.status) == ("PATCH", "status", 200), w
            assert w.content_type.split(";")[0] == "application/apply-patch+yaml", w
            assert w.query.get("fieldManager") == "gangscale" and w.query.get("force") == "true", w
        checked = 0
        for version in versions:
            generation = version["metadata"]["generation"]
            conds = (version.get("status") or {}).get("conditions") or []
            if conds:  # scenario 1 for every outcome: Accepted comes first or with it
                assert any(c["type"] == "Accepted" and c["status"] == "True" for c in conds), conds
            for cond in conds:
                assert REASON.match(cond["reason"]), cond
                assert isinstance(cond.get("message"), str), cond
                assert cond.get("observedGeneration") == generation, cond
                assert cond.get("lastTransitionTime"), cond
                checked += 1
        assert checked >= 20
