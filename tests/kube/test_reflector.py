"""The reflector against the embedded API server: sync, dropped streams, 410s, gaps, 429s and 500s."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gangscale.kube.reflector import Reflector, ReflectorEvent, strip_managed_fields
from gangscale.kube.transport import KubeHTTP
from gangscale.retry import Backoff, Policy
from gangscale.sim.apiserver import EmbeddedAPIServer, Fault
from tests import builders as b
from tests.conftest import wait_for


class RecordingSleep:
    """Records requested delays; sleeps a token amount so that no test waits for real backoff."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0.001)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest_asyncio.fixture
async def reflector(http: KubeHTTP, sleep: RecordingSleep) -> AsyncIterator[Reflector]:
    r = Reflector(http, b.NODES, watch_timeout=30, sleep=sleep,
                  backoff=Backoff(Policy(0.01, 0.2, jitter=0.2), random.Random(0)), rng=random.Random(0))
    task = asyncio.create_task(r.run(), name="reflector")
    try:
        yield r
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def names(r: Reflector) -> list[str]:
    return [o["metadata"]["name"] for o in r.items()]


async def test_synced_after_initial_list(http: KubeHTTP, sleep: RecordingSleep) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    r = Reflector(http, b.NODES, sleep=sleep)
    events = r.subscribe()
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        assert names(r) == ["n1"]
        ev = events.get_nowait()
        assert (ev.type, ev.obj["metadata"]["name"]) == ("ADDED", "n1")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_transform_applies_to_listed_and_watched_objects(http: KubeHTTP, sleep: RecordingSleep) -> None:
    """Objects are cached and handed on as the transform leaves them, whether they came from the list or the
    watch (the server records managedFields on every write)."""
    await http.request("POST", b.NODES.path(), body=b.node("listed"))
    r = Reflector(http, b.NODES, sleep=sleep, transform=strip_managed_fields)
    events = r.subscribe()
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        await http.request("POST", b.NODES.path(), body=b.node("watched"))
        got = [await asyncio.wait_for(events.get(), 5) for _ in range(2)]
        assert [e.obj["metadata"]["name"] for e in got] == ["listed", "watched"]
        assert all("managedFields" not in e.obj["metadata"] for e in got)
        assert all("managedFields" not in o["metadata"] for o in r.items()) and names(r) == ["listed", "watched"]
        raw = await http.request("GET", b.NODES.path(name="watched"))
        assert raw["metadata"]["managedFields"]  # the server has them; the cache does not
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_follows_changes(http: KubeHTTP, reflector: Reflector) -> None:
    await asyncio.wait_for(reflector.synced.wait(), 5)
    events = reflector.subscribe()
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await http.request("PATCH", b.NODES.path(name="n1"), body={"metadata": {"labels": {"a": "1"}}},
                       content_type="application/merge-patch+json")
    await http.request("DELETE", b.NODES.path(name="n1"))
    got = [await asyncio.wait_for(events.get(), 5) for _ in range(3)]
    assert [e.type for e in got] == ["ADDED", "MODIFIED", "DELETED"]
    assert got[1].old is not None and got[1].obj["metadata"]["labels"] == {"a": "1"}
    assert names(reflector) == []


async def test_resumes_after_dropped_stream_without_relisting(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                                              reflector: Reflector) -> None:
    await asyncio.wait_for(reflector.synced.wait(), 5)
    apiserver.inject(Fault(verb="watch", resource="nodes", drop_after_events=1, abort=True, times=2))
    for i in range(4):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    await wait_for(lambda: names(reflector) == ["n0", "n1", "n2", "n3"])
    assert reflector.lists == 1
    assert reflector.watches >= 2


async def test_410_relists_and_reports_deletions_made_during_the_gap(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, sleep: RecordingSleep) -> None:
    for i in range(3):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    r = Reflector(http, b.NODES, watch_timeout=30, sleep=sleep, backoff=Backoff(Policy(0.01, 30.0, jitter=0.2)))
    events = r.subscribe()
    # Every watch is cut at once, so the reflector sits between watches while the cluster changes.
    cut = apiserver.inject(Fault(verb="watch", resource="nodes", drop_after_events=0, times=None))
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        await http.request("DELETE", b.NODES.path(name="n1"))
        await http.request("POST", b.NODES.path(), body=b.node("n3"))
        apiserver.compact()  # the gap is now older than the server keeps: the next watch gets 410
        apiserver.faults.faults.remove(cut)
        await wait_for(lambda: names(r) == ["n0", "n2", "n3"])
        seen: list[ReflectorEvent] = []
        while not events.empty():
            seen.append(events.get_nowait())
        assert ("DELETED", "n1") in [(e.type, e.obj["metadata"]["name"]) for e in seen]
        assert ("ADDED", "n3") in [(e.type, e.obj["metadata"]["name"]) for e in seen]
        assert r.lists >= 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_forced_410_on_stream_relists(http: KubeHTTP, apiserver: EmbeddedAPIServer,
                                            reflector: Reflector) -> None:
    await asyncio.wait_for(reflector.synced.wait(), 5)
    lists = reflector.lists
    apiserver.inject(Fault(verb="watch", resource="nodes", gone=True))
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await wait_for(lambda: reflector.lists > lists and names(reflector) == ["n1"])


@pytest.mark.parametrize(("status", "retry_after"), [(429, 2), (500, None), (503, 1)],
                         ids=["429-retry-after", "500", "503-retry-after"])
async def test_list_errors_back_off_and_honour_retry_after(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, sleep: RecordingSleep, status: int,
        retry_after: int | None) -> None:
    apiserver.inject(Fault(verb="list", resource="nodes", status=status, retry_after=retry_after, times=3))
    r = Reflector(http, b.NODES, sleep=sleep, backoff=Backoff(Policy(0.01, 0.05, jitter=0.2), random.Random(1)))
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(sleep.delays) == 3
    if retry_after is not None:
        assert all(d >= retry_after for d in sleep.delays)
    else:
        assert all(0 < d <= 0.05 * 1.2 for d in sleep.delays)


@pytest.mark.parametrize(("status", "retry_after"), [(429, 3), (500, None)], ids=["429-retry-after", "500"])
async def test_watch_errors_resume_from_the_same_resource_version(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, sleep: RecordingSleep, status: int,
        retry_after: int | None) -> None:
    apiserver.inject(Fault(verb="watch", resource="nodes", status=status, retry_after=retry_after, times=2))
    r = Reflector(http, b.NODES, sleep=sleep, backoff=Backoff(Policy(0.01, 0.05, jitter=0.2)))
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        await http.request("POST", b.NODES.path(), body=b.node("n1"))
        await wait_for(lambda: names(r) == ["n1"])
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert r.lists == 1  # no re-list: the resourceVersion was still valid
    assert len(sleep.delays) == 2
    if retry_after is not None:
        assert all(d >= retry_after for d in sleep.delays)


async def test_watch_that_ends_immediately_backs_off_instead_of_spinning(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, sleep: RecordingSleep) -> None:
    apiserver.inject(Fault(verb="watch", resource="nodes", drop_after_events=0, times=None))
    r = Reflector(http, b.NODES, sleep=sleep, backoff=Backoff(Policy(0.01, 0.1, jitter=0.2)))
    task = asyncio.create_task(r.run())
    try:
        await wait_for(lambda: r.watches >= 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Every empty watch was followed by a backoff sleep, growing up to the maximum.
    assert len(sleep.delays) >= r.watches - 1
    assert max(sleep.delays) > min(sleep.delays)


async def test_bookmarks_advance_resource_version(http: KubeHTTP, reflector: Reflector) -> None:
    await asyncio.wait_for(reflector.synced.wait(), 5)
    await http.request("POST", b.PODS.path("default"), body=b.pod("unrelated"))
    target = (await http.request("GET", b.PODS.path("default")))["metadata"]["resourceVersion"]
    # The bookmark interval of the test server is 0.2 s; only a bookmark can move a nodes watch here.
    await wait_for(lambda: int(reflector.resource_version or 0) >= int(target))


async def test_label_selector_scopes_the_cache(http: KubeHTTP, sleep: RecordingSleep) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("gpu", labels={"pool": "a3"}))
    await http.request("POST", b.NODES.path(), body=b.node("cpu", labels={"pool": "e2"}))
    r = Reflector(http, b.NODES, label_selector="pool=a3", sleep=sleep)
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        assert names(r) == ["gpu"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class StuckSleep:
    """A backoff that never ends until released: a watch stuck behind it sees nothing."""

    def __init__(self) -> None:
        self.waiting = 0
        self.release = asyncio.Event()

    async def __call__(self, delay: float) -> None:
        self.waiting += 1
        await self.release.wait()


async def test_relist_catches_a_stalled_watch_up_at_once(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    """A standby about to lead asks for a fresh list: its watch, stuck in backoff, has missed an object; the
    relist returns once that object is in the cache and its event was emitted."""
    stuck = StuckSleep()
    apiserver.inject(Fault(verb="watch", resource="nodes", drop_after_events=0, times=None))
    r = Reflector(http, b.NODES, sleep=stuck)
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        events = r.subscribe()
        await wait_for(lambda: stuck.waiting >= 1)  # the watch ended at once and backs off
        await http.request("POST", b.NODES.path(), body=b.node("missed"))
        await asyncio.sleep(0.05)
        assert names(r) == []

        await asyncio.wait_for(r.relist(), 5)

        assert names(r) == ["missed"] and r.lists == 2
        assert (await asyncio.wait_for(events.get(), 1)).type == "ADDED"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_trouble_names_a_watch_failing_without_progress_and_a_reflector_that_ended(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, sleep: RecordingSleep) -> None:
    r = Reflector(http, b.NODES, watch_timeout=30, sleep=sleep, backoff=Backoff(Policy(0.01, 30.0, jitter=0.2)))
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(r.synced.wait(), 5)
        assert r.trouble(0.0) is None  # listed: progress
        apiserver.inject(Fault(verb="list", resource="nodes", status=403, message="nodes is forbidden", times=None))
        # The watch (opened after the list) ends at once, and every one after it is refused.
        apiserver.inject(Fault(verb="watch", resource="nodes", drop_after_events=0, times=1))
        apiserver.inject(Fault(verb="watch", resource="nodes", status=403, message="nodes is forbidden", times=None))
        await http.request("POST", b.NODES.path(), body=b.node("n0"))
        await wait_for(lambda: r.failing_since is not None)
        assert r.trouble(3600.0) is None  # failing, not for long
        trouble = r.trouble(0.0)
        assert trouble is not None and trouble.startswith("the watch of nodes has failed for ") and "403" in trouble
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert r.trouble(3600.0) == "the watch of nodes stopped: cancelled"
