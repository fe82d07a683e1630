"""The GCS path against a real local Ray head: pending placement groups read over grpcio become gangs of the
right shape, removed ones disappear, token auth is honoured, and an unreachable head fails fast and clearly."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gangscale.sources.gcsreader import GangRequest, GcsReader, GcsUnavailable, ResourceState, read_resource_state
from gangscale.sources.raydemand import GroupShape, gang_needs
from tests.ray.conftest import RayHead, free_port, require_grpc, require_ray, running_head

pytestmark = pytest.mark.ray

POLL_DEADLINE = 20.0
PLACEMENT_GROUPS: list[dict[str, Any]] = [
    {"name": "spread4", "strategy": "STRICT_SPREAD", "bundles": [{"GPU": 1}] * 4},
    {"name": "pack8", "strategy": "STRICT_PACK", "bundles": [{"CPU": 1}] * 8},
    {"name": "soft-spread", "strategy": "SPREAD", "bundles": [{"CPU": 1, "GPU": 2}, {"CPU": 2}]},
    {"name": "soft-pack", "strategy": "PACK", "bundles": [{"GPU": 1}] * 16},
]
GROUPS = [
    GroupShape(name="gpu1", resources={"CPU": 4, "GPU": 1}, hosts=1, free_replicas=20),
    GroupShape(name="gpu8", resources={"CPU": 64, "GPU": 8}, hosts=1, free_replicas=20),
    GroupShape(name="cpu16", resources={"CPU": 16}, hosts=1, free_replicas=20),
]


async def poll(head: RayHead, done: Callable[[ResourceState], bool]) -> ResourceState:
    """Read the GCS until ``done`` holds; the head is a real process, so this waits with a bounded deadline."""
    deadline = time.monotonic() + POLL_DEADLINE
    state = await read_resource_state(head.address, token=head.token)
    while not done(state):
        assert time.monotonic() < deadline, f"GCS state did not settle within {POLL_DEADLINE:g}s: {state}"
        await asyncio.sleep(0.2)
        state = await read_resource_state(head.address, token=head.token)
    return state


async def test_pending_placement_groups_become_gangs(ray_head: RayHead) -> None:
    ids: dict[str, str] = await ray_head.driver("create", json.dumps(PLACEMENT_GROUPS))
    assert sorted(ids) == sorted(spec["name"] for spec in PLACEMENT_GROUPS)

    state = await poll(ray_head, lambda s: {g.pg_id for g in s.gangs} >= set(ids.values()))
    [head_node] = state.nodes
    assert head_node.status in ("RUNNING", "IDLE")
    assert head_node.total["CPU"] == 2.0
    gangs = {gang.pg_id: gang for gang in state.gangs}
    assert gangs[ids["spread4"]] == GangRequest(ids["spread4"], "STRICT_SPREAD", "PENDING", ({"GPU": 1.0},) * 4)
    assert gangs[ids["pack8"]] == GangRequest(ids["pack8"], "STRICT_PACK", "PENDING", ({"CPU": 1.0},) * 8)
    assert gangs[ids["soft-spread"]] == GangRequest(ids["soft-spread"], "SPREAD", "PENDING",
                                                    ({"CPU": 1.0, "GPU": 2.0}, {"CPU": 2.0}))
    assert gangs[ids["soft-pack"]] == GangRequest(ids["soft-pack"], "PACK", "PENDING", ({"GPU": 1.0},) * 16)

    needs = {need.pg_id: need for need in gang_needs(state, GROUPS)}
    assert all(need.unplaceable is None for need in needs.values()), needs
    assert needs[ids["spread4"]].replicas == {"gpu1": 4}     # one bundle per node; 1-GPU pods tie, name wins
    assert needs[ids["pack8"]].replicas == {"cpu16": 1}      # one node with 8 CPUs; the CPU group over the GPU one
    assert needs[ids["soft-spread"]].replicas == {"gpu8": 1}  # both bundles on one 8-GPU pod
    assert needs[ids["soft-pack"]].replicas == {"gpu8": 2}   # 16 GPUs packed onto 8-GPU pods

    removed = await ray_head.driver("remove")
    assert set(removed) >= set(ids.values())
    state = await poll(ray_head, lambda s: not s.gangs)
    assert state.gangs == ()
    assert gang_needs(state, GROUPS) == []


async def test_reader_reuses_its_channel(ray_head: RayHead) -> None:
    reader = GcsReader()
    try:
        first = await reader.read(ray_head.address, timeout=5.0)
        second = await reader.read(ray_head.address, timeout=5.0)
    finally:
        await reader.aclose()
    # The GCS bumps the version on every read, so two answers mean two real calls.
    assert second.version > first.version
    assert [n.total["CPU"] for n in second.nodes] == [2.0]


async def test_token_auth(tmp_path: Path) -> None:
    venv = require_ray()
    token = secrets.token_hex(16)
    with running_head(venv, tmp_path, token=token) as head:  # a head of its own: auth is fixed at start
        with pytest.raises(GcsUnavailable) as missing:
            await read_resource_state(head.address, timeout=5.0)
        assert missing.value.reason == "unauthenticated"
        assert missing.value.code == "UNAUTHENTICATED"
        assert "authentication failed" in str(missing.value)
        assert "no token was sent" in str(missing.value)

        with pytest.raises(GcsUnavailable) as wrong:
            await read_resource_state(head.address, token=secrets.token_hex(16), timeout=5.0)
        assert wrong.value.reason == "unauthenticated"
        assert "the token sent was rejected" in str(wrong.value)

        state = await read_resource_state(head.address, token=token, timeout=5.0)
        assert [n.total["CPU"] for n in state.nodes] == [2.0]


async def test_unreachable_head_fails_with_the_reason() -> None:
    require_grpc()
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    reader = GcsReader()
    try:
        for _ in range(2):  # the second read dials afresh rather than hanging in grpcio's reconnect backoff
            with pytest.raises(GcsUnavailable) as err:
                await reader.read(address, timeout=3.0)
            assert err.value.reason == "unreachable"
            assert err.value.code == "UNAVAILABLE"
            assert err.value.address == address
            assert str(err.value).startswith(f"Ray GCS at {address}: unreachable (UNAVAILABLE: ")
    finally:
        await reader.aclose()
