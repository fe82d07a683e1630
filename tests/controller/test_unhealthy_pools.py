"""Pool health end to end (issue 28): the real controller, the simulated cloud and the embedded API server over HTTP.

Two interchangeable CPU pools, ``flaky`` (cheaper, so the planner takes it first) and ``steady``. ``flaky``'s
scale-ups keep failing (stockouts, or nodes that never turn Ready): after two of them it is unhealthy, and for the
cooldown (30 min) it is skipped although its plain backoff (60 s here) has long ended and the cloud has recovered;
requests go to ``steady``, a request only ``flaky`` can serve says why in its ``Provisioned=False`` condition,
``gangscale explain`` and the metrics show it; once the cooldown ends ``flaky`` is used again.

Time is the harness's :class:`ManualClock`, moved with ``cl.advance``; ``wait_for`` is only a hang guard.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gangscale.explainrender import render
from gangscale.model.nodepool import POOL_LABEL
from gangscale.timefmt import rfc3339
from tests.builders import EVENTS
from tests.conftest import wait_for
from tests.controller.harness import FAST, NS, Cluster, running_cluster

JSON = dict[str, Any]

POOLS_YAML = """
nodePools:
  - name: flaky
    zone: zone-a
    maxUnits: 4
    pricePerUnitHour: 1.0
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 30}
  - name: steady
    zone: zone-a
    maxUnits: 4
    pricePerUnitHour: 2.0
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 30}
"""
#: The plain backoff is short, so that only the verdict keeps ``flaky`` closed after it.
BACKOFF = 60.0
COOLDOWN = 1800.0
MAX_PROVISION_TIME = 900.0
#: Bookings outlast the test: a node a finished gang leaves is no room for the next one.
SETTINGS = replace(FAST, pool_backoff_initial=BACKOFF, pool_backoff_max=BACKOFF, pool_unhealthy_cooldown=COOLDOWN,
                   booking_ttl=4 * COOLDOWN)


async def templates(cl: Cluster) -> None:
    """``any``: one pod per 16-CPU node, either pool; ``pinned``: the same pod, only on ``flaky``."""
    await cl.template("any", {"cpu": "12"})
    await cl.template("pinned", {"cpu": "12"}, selector={POOL_LABEL: "flaky"})


def prefix(cl: Cluster) -> str:
    """"spot " for a pool with a capacity type (``NodePool.capacity_type``), else nothing."""
    flaky = next(p for p in cl.pools if p.name == "flaky")
    return f"{getattr(flaky, 'capacity_type', '')} ".lstrip()


def obtains(cl: Cluster, pool: str) -> list[Any]:
    return [call for call in cl.obtains() if call.pool == pool]


async def count_nodes(cl: Cluster, expected: int, pool: str) -> None:
    async def check() -> bool:
        return len(await cl.nodes(pool)) == expected
    await wait_for(check)


async def wait_event(cl: Cluster, name: str, reason: str) -> JSON:
    async def check() -> JSON | None:
        items = (await cl.http.request("GET", EVENTS.path(NS))).get("items") or []
        return next((e for e in items if (e.get("involvedObject") or {}).get("name") == name
                     and e.get("reason") == reason), None)
    found: JSON = await wait_for(check)
    return found


def metric(cl: Cluster, name: str, **labels: str) -> float | None:
    body, _ = cl.ctl.metrics.render()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


async def test_a_pool_that_keeps_stocking_out_is_skipped_until_its_cooldown_ends(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, pool_yaml=POOLS_YAML, settings=SETTINGS) as cl:
        await templates(cl)
        cl.cloud.faults("flaky").stockout = True

        # First stockout: flaky is backed off (not unhealthy: 1 failure of 4 slots), the gang goes to steady.
        await cl.provreq("one", ("any", 1))
        await count_nodes(cl, 1, "steady")
        assert cl.ctl.debug_plans()["unhealthyPools"] == {}
        await cl.advance(BACKOFF + 1)

        # Second stockout, once the backoff is over: flaky is unhealthy now, and this gang goes to steady too.
        await cl.provreq("two", ("any", 1))
        await count_nodes(cl, 2, "steady")
        [_, second] = obtains(cl, "flaky")
        until = second.at + COOLDOWN
        reason = f"{prefix(cl)}pool flaky unhealthy: 2 of the last 2 scale-ups stocked out"
        message = f"{reason}; skipped until {rfc3339(until)}"
        assert message in (await wait_event(cl, "two", "ScaleUpFailed"))["message"]
        plans = cl.ctl.debug_plans()
        assert plans["unhealthyPools"]["flaky"] == {
            "since": rfc3339(second.at), "until": rfc3339(until), "message": message,
            "outcomes": ["stockout", "stockout"], "recent": ["stockout", "stockout"]}
        cause = "unhealthy: 2 of the last 2 scale-ups stocked out"
        assert plans["backedOffPools"]["flaky"] == {"until": rfc3339(until), "reason": cause}
        assert metric(cl, "gangscale_pool_unhealthy", pool="flaky") == 1.0
        assert metric(cl, "gangscale_pool_scale_up_outcomes_total", pool="flaky", outcome="stockout") == 2.0

        # The cloud recovers, gangscale does not know: long after the plain backoff, flaky is still skipped.
        cl.cloud.faults("flaky").stockout = False
        await cl.advance(10 * BACKOFF)
        await cl.provreq("three", ("any", 1))
        await count_nodes(cl, 3, "steady")
        await cl.provreq("pinned", ("pinned", 1))
        await cl.wait_condition("pinned", "Provisioned", "False", "CapacityIsNotFound")
        condition = (await cl.conditions("pinned"))["Provisioned"][2]
        assert f"pool flaky: {cause}; skipped until {rfc3339(until)}" in condition, condition
        explained = render(cl.ctl.debug_plans(f"{NS}/pinned") or {})
        assert f"  {message}\n      its last scale-ups, oldest first: stockout, stockout;" in explained, explained
        assert len(obtains(cl, "flaky")) == 2

        # Just before the cooldown ends: still skipped. Then flaky is planned again, and serves the pinned gang.
        await cl.advance(until - cl.clock.now() - 1)
        assert len(obtains(cl, "flaky")) == 2 and list(cl.ctl.debug_plans()["unhealthyPools"]) == ["flaky"]
        await cl.advance(1)
        assert cl.ctl.debug_plans()["unhealthyPools"] == {}
        assert metric(cl, "gangscale_pool_unhealthy", pool="flaky") is None
        await cl.advance_stepwise(600)  # the pinned request's next attempt (its retry doubles up to 10 min)
        await count_nodes(cl, 1, "flaky")
        assert obtains(cl, "flaky")[-1].at >= until
        await cl.advance(30)
        await cl.wait_condition("pinned", "Provisioned", "True", "CapacityIsProvisioned")
        assert metric(cl, "gangscale_pool_scale_up_outcomes_total", pool="flaky", outcome="success") == 1.0


async def test_a_pool_whose_nodes_keep_timing_out_is_unhealthy_and_its_gangs_go_elsewhere(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, pool_yaml=POOLS_YAML, settings=SETTINGS) as cl:
        await templates(cl)
        cl.cloud.faults("flaky").never_ready = True

        for name in ("one", "two"):
            await cl.provreq(name, ("any", 1))
            await count_nodes(cl, 1, "flaky")
            await cl.advance_stepwise(MAX_PROVISION_TIME)  # flaky's node never turns Ready: released, re-planned
            await count_nodes(cl, 0, "flaky")
            await cl.advance(30)
            await cl.wait_condition(name, "Provisioned", "True", "CapacityIsProvisioned")
            await cl.advance(BACKOFF)

        assert len(await cl.ready_nodes("steady")) == 2
        verdict = cl.ctl.debug_plans()["unhealthyPools"]["flaky"]
        reason = f"{prefix(cl)}pool flaky unhealthy: 2 of the last 2 scale-ups timed out"
        assert verdict["message"].startswith(f"{reason}; skipped until ")
        assert verdict["message"] in (await wait_event(cl, "two", "ScaleUpTimedOut"))["message"]
        closed = cl.ctl.debug_plans()["backedOffPools"]["flaky"]
        assert closed["reason"] == "unhealthy: 2 of the last 2 scale-ups timed out"

        # A third gang is not tried on flaky (a third node that would never come up): it goes straight to steady.
        cl.cloud.faults("flaky").never_ready = False
        await cl.provreq("three", ("any", 1))
        await count_nodes(cl, 3, "steady")
        assert len(obtains(cl, "flaky")) == 2
