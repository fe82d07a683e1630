"""The traffic between the gke provider and the fake Google Cloud is checked against Google's discovery documents in
every test (``tests/conftest.py``: ``google_traffic``); here, that the check sees the traffic and that a wrong field
seeded on either side of it fails it: a misreading shared by provider and fake cannot pass."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.base import ProviderError
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.gcp import render
from tests.conftest import GoogleTraffic
from tests.providers.gke.harness import cloud

TOKEN = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9-0123456789ab-0"


async def test_every_call_of_an_obtain_and_a_release_is_checked_and_valid(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, google_traffic: GoogleTraffic) -> None:
    async with cloud(clock, apiserver, http) as c:
        got = await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))
        await c.drive(c.provider.release("tpu", [unit.unit_id for unit in got.units], token=TOKEN))
        await c.drive(c.provider.obtain("cpu", 2, token=TOKEN, deadline=c.deadline()))
    assert google_traffic.exchanges == len(c.gcp.calls) > 10
    assert google_traffic.problems == []


async def test_a_wrong_field_in_the_fakes_answer_is_caught(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, google_traffic: GoogleTraffic,
        monkeypatch: pytest.MonkeyPatch) -> None:
    google_traffic.expect_problems = True
    real = render.node_pool

    def with_a_wrong_field(*args: Any) -> dict[str, Any]:
        return {**real(*args), "nodeCount": 2}  # not a NodePool field: the fake's own invention

    monkeypatch.setattr(render, "node_pool", with_a_wrong_field)
    async with cloud(clock, apiserver, http) as c:
        await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))
    assert any("container.projects.locations.clusters.nodePools.get response.nodeCount: unknown field" in p
               for p in google_traffic.problems), google_traffic.problems


async def test_a_wrong_field_in_the_providers_request_is_caught(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, google_traffic: GoogleTraffic,
        monkeypatch: pytest.MonkeyPatch) -> None:
    google_traffic.expect_problems = True
    monkeypatch.setattr("gangscale.providers.gke.slices.management",
                        lambda template, channel: {"autoRepair": True, "autoUpgrade": "true"})
    async with cloud(clock, apiserver, http) as c:
        with pytest.raises(ProviderError):
            await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))
    assert any("nodePools.create request.nodePool.management.autoUpgrade" in p for p in google_traffic.problems), \
        google_traffic.problems
