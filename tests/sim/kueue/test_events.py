"""The events.k8s.io/v1 recorder Kueue's controllers use (client-go ``tools/events``), against the embedded API
server."""

from __future__ import annotations

from pathlib import Path

from gangscale.kube.resources import EVENTS, EVENTS_V1, WORKLOADS
from gangscale.sim.kueue.events import KueueEventRecorder, micro_time, truncate_note
from tests.sim.kueue import T0, kueue_cluster, workload


def test_micro_time_and_note() -> None:
    assert micro_time(T0 + 0.25) == "2026-11-18T11:06:40.250000Z"
    assert truncate_note("x" * 1024) == "x" * 1024
    assert truncate_note("x" * 2000) == "x" * 1020 + " ..."  # Kueue's api.TruncateEventMessage


async def test_event_shape_and_series(tmp_path: Path) -> None:
    """``makeEvent``: name ``<regarding>.<hex nanos>``, eventTime, reportingController/Instance, action, regarding
    with the object's resourceVersion, note; an isomorphic repeat (the note aside) within six minutes is a series
    patch on the first Event (``recordToSink``), a later one a new Event (``finishSeries``)."""
    async with kueue_cluster(tmp_path) as env:
        wl = await env.create(WORKLOADS, workload("w", [("main", 1, {"cpu": 1})]))
        rec = KueueEventRecorder(env.http, "kueue-workload-controller")
        await rec.record(wl, "Normal", "Admitted", "first", T0)
        await rec.record(wl, "Normal", "Admitted", "second", T0 + 10)
        listed = (await env.http.request("GET", EVENTS_V1.path("default")))["items"]
        assert len(listed) == 1
        event = listed[0]
        assert event["metadata"]["name"].startswith("w.") and event["eventTime"] == micro_time(T0)
        assert (event["reportingController"], event["reportingInstance"], event["action"], event["note"]) == (
            "kueue-workload-controller", "kueue-workload-controller-kueue-controller-manager", "Admitted", "first")
        assert event["regarding"] == {"kind": "Workload", "namespace": "default", "name": "w",
                                      "uid": wl["metadata"]["uid"], "apiVersion": "kueue.x-k8s.io/v1beta2",
                                      "resourceVersion": wl["metadata"]["resourceVersion"]}
        assert event["series"] == {"count": 2, "lastObservedTime": micro_time(T0 + 10)}
        core = (await env.http.request("GET", EVENTS.path("default")))["items"][0]
        assert (core["reportingComponent"], core["message"], "source" in core) == (
            "kueue-workload-controller", "first", False)

        await rec.record(wl, "Normal", "Admitted", "third", T0 + 10 + 361)
        assert len((await env.http.request("GET", EVENTS_V1.path("default")))["items"]) == 2
        await rec.record(wl, "Warning", "Admitted", "other type", T0 + 10 + 362)
        assert len((await env.http.request("GET", EVENTS_V1.path("default")))["items"]) == 3
