"""Fixtures for the fake Google Cloud: a started :class:`FakeGcp` on the test's manual clock, registering Nodes in
the embedded API server, and a raw aiohttp client that talks to it over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import FakeGcp
from tests.sim.gcp.client import REGION, ZONE_A, ZONE_B, Client


@pytest_asyncio.fixture
async def gcp(clock: ManualClock, http: KubeHTTP) -> AsyncIterator[FakeGcp]:
    fake = FakeGcp(clock, http)
    fake.add_cluster(REGION, "c1", [ZONE_A, ZONE_B])
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest_asyncio.fixture
async def client(gcp: FakeGcp) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as session:
        yield Client(session, gcp.url, gcp.token)
