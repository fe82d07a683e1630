"""The demand sources on plain objects, without a loop: the registry that builds and cross-wires them, the tokens
the Ray source reports as recorded, and the GCS pollers running under the loop's guarded tasks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Coroutine
from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.controller.demand import gcspollers as raygcs_module
from gangscale.controller.demand.gcspollers import Endpoint, RayGcs
from gangscale.controller.demand.prsource import ProvReqSource
from gangscale.controller.demand.raygangrequest import ANNOTATION_PREFIX
from gangscale.controller.demand.raysource import RaySource
from gangscale.controller.demand.registry import demand_sources
from gangscale.controller.logic.record import OBTAINING, Record, Step
from gangscale.controller.logic.settings import Settings
from gangscale.controller.tasks import Tasks
from gangscale.kube.reflector import Reflector
from gangscale.kube.resources import RAYCLUSTERS
from gangscale.observe.metrics import Metrics
from gangscale.sources.raycluster import GCS_ADDRESS_ANNOTATION, RayCluster, parse_raycluster
from tests.raybuilders import group, raycluster

JSON = dict[str, Any]


class FakeHost:
    """The part of the loop's :class:`~gangscale.controller.demand.protocol.Host` that building the sources and running
    the GCS pollers use; background work runs under a real :class:`Tasks`."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.clock = ManualClock()
        self.metrics = Metrics()
        self.tasks = Tasks(on_done=lambda: None)
        self.woken = 0

    def run_background(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        return self.tasks.run_background(coro, name)

    def wake(self) -> None:
        self.woken += 1


def record(*tokens: str) -> str:
    return Record(1, OBTAINING, 0.0, tuple(Step("gpu", 1, token) for token in tokens)).to_detail()


def intent(*tokens: str) -> str:
    return json.dumps({"replicas": {"gpu": len(tokens)}, "scaleUp": json.loads(record(*tokens))})


def with_cache(ray: RaySource, *objs: JSON) -> None:
    """The Ray source as if its reflector had listed ``objs``."""
    ray.reflector = Reflector(ray.http, RAYCLUSTERS)
    for obj in objs:
        meta = obj["metadata"]
        ray.reflector.cache[(meta["namespace"], meta["name"])] = obj


def test_the_registry_builds_each_source_once_with_distinct_names_and_wires_the_raycluster_lookup() -> None:
    host = FakeHost()
    sources = demand_sources(None, host)  # type: ignore[arg-type]  # nothing is requested while building
    assert [type(s) for s in sources] == [ProvReqSource, RaySource]  # PRs first: the order the loop had
    by_name = {s.name: s for s in sources}
    assert len(by_name) == len(sources)
    provreqs, ray = sources
    assert isinstance(provreqs, ProvReqSource) and isinstance(ray, RaySource)
    assert provreqs.host is host and ray.host is host
    assert provreqs._raycluster("default", "train") is None  # the Ray source is off (not started): no cluster
    obj = raycluster("train", [group("gpu")], uid="u1")
    with_cache(ray, obj)
    assert provreqs._raycluster("default", "train") is obj


@pytest.mark.parametrize(("objs", "tokens"), [
    ([], set()),
    ([raycluster("a", [group("gpu")], uid="ua")], set()),
    ([raycluster("a", [group("gpu")], uid="ua", annotations={ANNOTATION_PREFIX + "g1": intent("t1", "t2"),
                                                             ANNOTATION_PREFIX + "g2": intent("t3")})],
     {"t1", "t2", "t3"}),
    ([raycluster("a", [group("gpu")], uid="ua", annotations={ANNOTATION_PREFIX + "g1": intent("t1")}),
      raycluster("bad", [group("gpu"), group("gpu")], uid="ub",  # a repeated group name: it cannot be read
                 annotations={ANNOTATION_PREFIX + "g1": intent("t9")})],
     {"t1", "t9"}),
    ([raycluster("a", [group("gpu")], uid="ua", autoscaling=False,
                 annotations={ANNOTATION_PREFIX + "g1": intent("t1")})], {"t1"}),
    ([raycluster("a", [group("gpu")], uid="ua", annotations={ANNOTATION_PREFIX + "g1": "not json",
                                                             "other.io/x": intent("t5")})], set()),
], ids=["no-clusters", "nothing-recorded", "every-gang-of-a-cluster", "an-unreadable-cluster-too",
        "not-a-demand-source-too", "not-gangscales"])
def test_the_ray_source_reports_every_token_recorded_on_a_raycluster(objs: list[JSON], tokens: set[str]) -> None:
    ray = RaySource(None, FakeHost())  # type: ignore[arg-type]
    with_cache(ray, *objs)
    assert ray.recorded_tokens() == tokens


def test_the_ray_source_off_has_no_recorded_tokens() -> None:
    assert RaySource(None, FakeHost()).recorded_tokens() == set()  # type: ignore[arg-type]


def cluster(address: str, uid: str = "u1") -> RayCluster:
    return parse_raycluster(raycluster("train", [group("gpu")], uid=uid,
                                       annotations={GCS_ADDRESS_ANNOTATION: address}))


async def test_gcs_pollers_run_as_the_hosts_background_tasks_and_aclose_waits_for_cancelled_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A poller whose endpoint changed is cancelled at once but may take a moment to end: ``aclose`` waits for it
    too (before the reader they share is closed), not only for the pollers still tracked."""
    monkeypatch.setattr(raygcs_module, "grpc_available", lambda: True)
    ended: list[str] = []

    async def poll(self: RayGcs, c: RayCluster, endpoint: Endpoint) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            # The first poller's cleanup outlives its cancellation (and a second one) by many steps of the event
            # loop, the second's by none: waiting only for the pollers still tracked would return before it ends.
            for _ in range(20 if endpoint.address == "head-1:6379" else 0):
                with contextlib.suppress(asyncio.CancelledError):  # this test's poller, deliberately stubborn
                    await asyncio.sleep(0)
            ended.append(endpoint.address)
            raise

    monkeypatch.setattr(RayGcs, "poll", poll)
    host = FakeHost()
    gcs = RayGcs(None, host, lambda uid: None)  # type: ignore[arg-type]
    gcs.track([cluster("head-1:6379")])
    await asyncio.sleep(0)
    assert {t.get_name() for t in host.tasks._background} == {"gcs default/train"}
    gcs.track([cluster("head-2:6379")])  # the endpoint changed: the first poller is cancelled, a second started
    await asyncio.sleep(0)
    assert len(host.tasks._background) == 2 and ended == []
    await gcs.aclose()
    assert sorted(ended) == ["head-1:6379", "head-2:6379"]
    assert host.tasks._background == set()
    await host.tasks.aclose()


async def test_a_failed_gcs_poller_is_logged_by_the_loops_tasks(monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(raygcs_module, "grpc_available", lambda: True)

    async def poll(self: RayGcs, c: RayCluster, endpoint: Endpoint) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(RayGcs, "poll", poll)
    host = FakeHost()
    gcs = RayGcs(None, host, lambda uid: None)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="gangscale.controller.tasks"):
        gcs.track([cluster("head-1:6379")])
        for _ in range(3):
            await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records] == ["background task gcs default/train failed"]
    await gcs.aclose()
    await host.tasks.aclose()
