"""Restart recovery's release of orphaned units (:func:`gangscale.controller.recovery.release_orphans`), on plain
objects: units coming up under a token no request recorded are released; a lost lease stops it quietly (found by
hack/chaos.py --provider gke, seed 10307: the lease expired during recovery and the fenced release logged a
traceback)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gangscale.controller.actuator import NotLeader
from gangscale.controller.logic.view import ClusterView
from gangscale.controller.recovery import release_orphans
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL


def coming_up(name: str, token: str, pool: str) -> dict[str, object]:
    labels = {"gangscale.io/node-pool": pool, UNIT_LABEL: name, TOKEN_LABEL: token}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "False"}]}}


def view() -> ClusterView:
    v = ClusterView()
    v.apply_node("a-0", v.node_record(coming_up("a-0", "orphan-a", "a")))
    v.apply_node("b-0", v.node_record(coming_up("b-0", "orphan-b", "b")))
    v.apply_node("k-0", v.node_record(coming_up("k-0", "known", "a")))
    return v


async def test_units_of_unknown_tokens_are_released_and_known_ones_kept() -> None:
    released: list[tuple[str, tuple[str, ...], str]] = []

    async def release(pool: str, units: Sequence[str], claim: str) -> None:
        released.append((pool, tuple(units), claim))

    await release_orphans(view(), {"known"}, release)
    assert released == [("a", ("a-0",), "orphan-a"), ("b", ("b-0",), "orphan-b")]


async def test_a_lost_lease_stops_the_releases_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    async def release(pool: str, units: Sequence[str], claim: str) -> None:
        calls.append(pool)
        raise NotLeader("this process does not hold the leader lease: no provider call")

    await release_orphans(view(), {"known"}, release)
    assert calls == ["a"]  # the others are left to the next leader
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a lost lease"
