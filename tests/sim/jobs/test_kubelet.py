"""The kubelet (Running only on Ready nodes), PodGC, and the run clock: work starts when the whole gang runs
and the job completes after its duration; a broken gang starts over."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.resources import NODES
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.jobs import kubelet as kl
from gangscale.sim.world import FINISHED, POD_STARTED, RUNNING, Timeline
from tests.sim.jobs import support as s

JSON = dict[str, Any]
DURATION = {"sim.gangscale.io/duration": "60s"}


@pytest.fixture
def timeline() -> Timeline:
    return Timeline(s.T0)


@pytest.fixture
def em(http: KubeHTTP, timeline: Timeline) -> JobEmulator:
    return JobEmulator(http, timeline)


async def _running_job(http: KubeHTTP, em: JobEmulator, body: JSON) -> list[JSON]:
    await s.flavor(http, "default", {})
    await s.create(http, body)
    await s.settle(em, s.T0)
    await s.admit(http, await s.workload_of(http, body["metadata"]["name"]))
    await s.settle(em, s.T0)
    return await s.pods(http)


def _phases(pods: list[JSON]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["status"]["phase"] for p in pods}


async def test_pods_run_only_on_ready_nodes(http: KubeHTTP, em: JobEmulator, timeline: Timeline) -> None:
    a, b = (p["metadata"]["name"] for p in await _running_job(http, em, s.job("train", annotations=DURATION)))
    await s.ready_node(http, "ready")
    await s.ready_node(http, "not-ready", ready="False")
    await s.bind(http, a, "ready")
    await s.bind(http, b, "not-ready")
    await s.settle(em, s.T0 + 1)
    pods = {p["metadata"]["name"]: p for p in await s.pods(http)}
    assert _phases(list(pods.values())) == {a: "Running", b: "Pending"}
    running = pods[a]["status"]
    assert running["startTime"] == "2026-11-18T11:06:41Z"
    assert {c["type"]: c["status"] for c in running["conditions"]} == {
        "PodScheduled": "True", "Initialized": "True", "Ready": "True", "ContainersReady": "True"}
    assert running["containerStatuses"][0]["ready"] is True
    [entry] = timeline.of(POD_STARTED)
    assert (entry.subject, entry.at, entry.data) == ("default/train", s.T0 + 1,
                                                     {"pod": a, "node": "ready", "accelerators": 8})
    assert timeline.of(RUNNING) == [] and em.next_wake() is None
    assert await em.sync(s.T0 + 2) is False


async def test_orphaned_pods_are_deleted_and_replaced(http: KubeHTTP, em: JobEmulator) -> None:
    pods = await _running_job(http, em, s.job("train"))
    await s.bind_all(http)
    await s.settle(em, s.T0 + 1)
    gone = pods[0]["metadata"]["name"]
    await http.request("DELETE", NODES.path(None, f"node-{gone}"))
    await s.settle(em, s.T0 + 2)
    names = {p["metadata"]["name"] for p in await s.pods(http)}
    assert gone not in names and len(names) == 2  # the Job controller made a new one


async def test_run_clock_waits_for_the_whole_gang(http: KubeHTTP, em: JobEmulator, timeline: Timeline) -> None:
    first, second = (p["metadata"]["name"] for p in await _running_job(http, em, s.job("train", annotations=DURATION)))
    await s.ready_node(http, "n1")
    await s.ready_node(http, "n2")
    await s.bind(http, first, "n1")
    await s.settle(em, s.T0 + 5)
    assert timeline.of(RUNNING) == [] and em.next_wake() is None
    await s.bind(http, second, "n2")
    await s.settle(em, s.T0 + 10)
    assert [(e.at, e.subject) for e in timeline.of(RUNNING)] == [(s.T0 + 10, "default/train")]
    assert em.next_wake() == s.T0 + 70
    await s.settle(em, s.T0 + 69)
    assert set(_phases(await s.pods(http)).values()) == {"Running"} and timeline.of(FINISHED) == []
    await s.settle(em, s.T0 + 70)
    assert set(_phases(await s.pods(http)).values()) == {"Succeeded"}
    job = await s.get(http, "Job", "train")
    assert job["status"]["succeeded"] == 2 and "active" not in job["status"]
    assert {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"} >= {"Complete",
                                                                                          "SuccessCriteriaMet"}
    assert [(e.at, e.subject) for e in timeline.of(FINISHED)] == [(s.T0 + 70, "default/train")]
    assert em.next_wake() is None
    assert await em.sync(s.T0 + 71) is False


async def test_eviction_mid_run_restarts_from_zero(http: KubeHTTP, em: JobEmulator, timeline: Timeline) -> None:
    await _running_job(http, em, s.job("train", annotations=DURATION))
    await s.bind_all(http, "a")
    await s.settle(em, s.T0 + 10)
    assert em.next_wake() == s.T0 + 70
    await s.evict(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0 + 50)
    assert await s.pods(http) == [] and em.next_wake() is None
    wl = await s.workload_of(http, "train")
    await s.apply_status(http, wl, {"conditions": [s.cond("Evicted", "False", "QuotaReserved", "Previously")]})
    await s.admit(http, await s.workload_of(http, "train"))
    await s.settle(em, s.T0 + 100)
    await s.bind_all(http, "b")
    await s.settle(em, s.T0 + 120)
    assert [e.at for e in timeline.of(RUNNING)] == [s.T0 + 10, s.T0 + 120]
    assert em.next_wake() == s.T0 + 180
    await s.settle(em, s.T0 + 180)
    assert [e.at for e in timeline.of(FINISHED)] == [s.T0 + 180]


CASES = [
    (s.jobset("js", replicated=[("w", 2, 2)], annotations=DURATION), "JobSet",
     lambda o: [c["type"] for c in o["status"]["conditions"] if c["status"] == "True"] == ["Completed"]
     and o["status"]["terminalState"] == "Completed"),
    (s.rayjob("rj", [("tpu", 1, 2)], annotations=DURATION), "RayJob",
     lambda o: (o["status"]["jobStatus"], o["status"]["jobDeploymentStatus"]) == ("SUCCEEDED", "Complete")),
]


@pytest.mark.parametrize(("body", "kind", "done"), CASES, ids=["JobSet", "RayJob"])
async def test_completion_per_kind(http: KubeHTTP, em: JobEmulator, timeline: Timeline, body: JSON, kind: str,
                                   done: Any, apiserver: Any) -> None:
    name = body["metadata"]["name"]
    await _running_job(http, em, body)
    await s.settle(em, s.T0)
    await s.bind_all(http)
    await s.settle(em, s.T0 + 1)
    assert len(timeline.of(RUNNING, f"default/{name}")) == 1
    started = timeline.of(POD_STARTED)
    assert len(started) == len(await s.pods(http)) and {e.subject for e in started} == {f"default/{name}"}
    if kind == "RayJob":
        assert (await s.get(http, kind, name))["status"]["jobDeploymentStatus"] == "Running"
    await s.settle(em, s.T0 + 61)
    obj = await s.get(http, kind, name)
    assert done(obj)
    finished = [c for c in (await s.workload_of(http, name))["status"]["conditions"] if c["type"] == "Finished"]
    assert finished and finished[0]["reason"] == "Succeeded"
    assert len(timeline.of(FINISHED, f"default/{name}")) == 1
    if kind == "RayJob":  # its RayCluster and pods are gone, as with shutdownAfterJobFinishes
        await apiserver.controllers.settle()
        assert await s.pods(http) == []
    assert await em.sync(s.T0 + 62) is False


async def test_without_duration_the_job_runs_forever(http: KubeHTTP, em: JobEmulator, timeline: Timeline) -> None:
    await _running_job(http, em, s.raycluster("rc", [("tpu", 1, 2)], annotations=DURATION))
    await s.bind_all(http)
    await s.settle(em, s.T0 + 1)
    assert len(timeline.of(RUNNING)) == 1
    assert em.next_wake() is None  # a RayCluster never finishes, whatever its annotation says
    await s.settle(em, s.T0 + 10_000)
    assert set(_phases(await s.pods(http)).values()) == {"Running"}
    assert (await s.get(http, "RayCluster", "rc"))["status"]["state"] == "ready"


def test_accelerators_sum_the_known_devices() -> None:
    pod = {"spec": {"containers": [
        {"resources": {"requests": {"google.com/tpu": "4", "cpu": "8"}}},
        {"resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    assert kl.accelerators(pod) == 6
    assert kl.accelerators({"spec": {"containers": [{"resources": {"requests": {"cpu": "x"}}}]}}) == 0


def test_advance_run() -> None:
    pod = {"metadata": {"uid": "p1"}, "status": {"phase": "Running"}}
    pending = {"metadata": {"uid": "p2"}, "status": {"phase": "Pending"}}
    assert kl.advance_run(None, kl.gang([pod], 2), 5.0) is None
    run = kl.advance_run(None, kl.gang([pod], 1), 5.0)
    assert run == kl.Run(frozenset({"p1"}), 5.0)
    assert kl.advance_run(run, kl.gang([pod], 1), 9.0) is run
    assert kl.advance_run(run, kl.gang([pod, pending], 2), 9.0) is None
    replaced = {"metadata": {"uid": "p3"}, "status": {"phase": "Running"}}
    assert kl.advance_run(run, kl.gang([replaced], 1), 9.0) == kl.Run(frozenset({"p3"}), 9.0)
