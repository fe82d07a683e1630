"""Event correlation as client-go's recorder does it: repeats counted on one Event, similar ones combined,
floods rate-limited; the pure correlator table-driven, then the recorder against the embedded API server."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.eventcache import (
    AGGREGATE_INTERVAL,
    AGGREGATE_MAX_EVENTS,
    COMBINED,
    SPAM_BURST,
    Create,
    EventCorrelator,
    Patch,
)
from gangscale.kube.resources import EVENTS
from gangscale.kube.transport import KubeHTTP
from gangscale.kube.writes import EventRecorder
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests import builders as b

JSON = dict[str, Any]
_names = iter(range(10**6))


def _event(message: str = "m", *, reason: str = "R", obj: str = "pr", uid: str = "u1", at: str = "t0") -> JSON:
    return {"metadata": {"name": f"{obj}.{next(_names)}", "namespace": "ns"},
            "involvedObject": {"kind": "ProvisioningRequest", "namespace": "ns", "name": obj, "uid": uid,
                               "apiVersion": "autoscaling.x-k8s.io/v1"},
            "type": "Normal", "reason": reason, "message": message, "source": {"component": "gangscale"},
            "count": 1, "firstTimestamp": at, "lastTimestamp": at}


def test_an_identical_event_counts_up_on_the_first_one() -> None:
    c = EventCorrelator()
    first = c.correlate(_event(at="t0"), 0)
    assert isinstance(first, Create)
    second = c.correlate(_event(at="t1"), 1)
    third = c.correlate(_event(at="t2"), 2)
    assert isinstance(second, Patch) and isinstance(third, Patch)
    assert second.name == third.name == first.body["metadata"]["name"]
    assert second.change == {"count": 2, "lastTimestamp": "t1", "message": "m"}
    assert third.change["count"] == 3 and third.body["firstTimestamp"] == "t0"


@pytest.mark.parametrize("other", [
    {"message": "other"}, {"reason": "Other"}, {"obj": "pr2"}, {"uid": "u2"},
], ids=["message", "reason", "object", "uid"])
def test_an_event_that_differs_is_created(other: dict[str, str]) -> None:
    c = EventCorrelator()
    assert isinstance(c.correlate(_event(), 0), Create)
    assert isinstance(c.correlate(_event(**other), 1), Create)


def test_the_tenth_distinct_similar_message_is_combined_and_later_ones_count_up_on_it() -> None:
    c = EventCorrelator()
    actions = [c.correlate(_event(f"message {i}"), float(i)) for i in range(AGGREGATE_MAX_EVENTS + 2)]
    assert all(isinstance(a, Create) and COMBINED not in a.body["message"] for a in actions[:AGGREGATE_MAX_EVENTS - 1])
    combined = actions[AGGREGATE_MAX_EVENTS - 1]
    assert isinstance(combined, Create) and combined.body["message"] == COMBINED + "message 9"
    after = actions[AGGREGATE_MAX_EVENTS]
    assert isinstance(after, Patch) and after.name == combined.body["metadata"]["name"]
    assert after.change == {"count": 2, "lastTimestamp": "t0", "message": COMBINED + "message 10"}


def test_similar_events_further_apart_than_the_interval_are_not_combined() -> None:
    c = EventCorrelator()
    gap = AGGREGATE_INTERVAL + 1
    actions = [c.correlate(_event(f"message {i}"), i * gap) for i in range(AGGREGATE_MAX_EVENTS + 2)]
    assert all(isinstance(a, Create) and COMBINED not in a.body["message"] for a in actions)


def test_a_flood_about_one_object_is_rate_limited_and_refills_slowly() -> None:
    c = EventCorrelator()
    sent = [c.correlate(_event(f"m{i}", reason=f"R{i}"), 0.0) for i in range(SPAM_BURST + 5)]
    assert sum(a is not None for a in sent) == SPAM_BURST
    assert c.correlate(_event("late", reason="Late"), 299.0) is None
    assert c.correlate(_event("later", reason="Later"), 301.0) is not None
    assert c.correlate(_event("other", reason="X", obj="other-pr"), 0.0) is not None  # per object


def test_repeats_of_a_recreated_event_count_up_on_the_new_one() -> None:
    c = EventCorrelator()
    c.correlate(_event(), 0)
    repeat = c.correlate(_event(), 1)
    assert isinstance(repeat, Patch)
    recreated = {**repeat.body, "metadata": {**repeat.body["metadata"], "name": "new"}}
    c.recreated(recreated)
    again = c.correlate(_event(), 2)
    assert isinstance(again, Patch) and again.name == "new" and again.change["count"] == 3


def test_the_cache_is_bounded() -> None:
    c = EventCorrelator(entries=3)
    first = _event("first", obj="a")
    c.correlate(first, 0)
    for i in range(3):
        c.correlate(_event(f"x{i}", obj=f"o{i}"), 0)
    assert isinstance(c.correlate(_event("first", obj="a"), 1), Create)  # evicted, so created again


async def _events(http: KubeHTTP) -> list[JSON]:
    return list((await http.request("GET", EVENTS.path("default")))["items"])


async def test_the_recorder_counts_repeats_on_one_event_in_the_api(apiserver: EmbeddedAPIServer,
                                                                   http: KubeHTTP) -> None:
    pr = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr"))
    recorder = EventRecorder(http)
    for now in (100.0, 160.0, 220.0):
        await recorder.record(pr, "Warning", "NotProvisioned", "stockout in pool a", now)
    await recorder.record(pr, "Normal", "Provisioned", "6 nodes", 230.0)
    events = sorted(await _events(http), key=lambda e: e["reason"])
    assert [(e["reason"], e["count"]) for e in events] == [("NotProvisioned", 3), ("Provisioned", 1)]
    repeated = events[0]
    assert repeated["firstTimestamp"] == "1970-01-01T00:01:40Z"
    assert repeated["lastTimestamp"] == "1970-01-01T00:03:40Z"


async def test_a_repeat_of_an_event_deleted_meanwhile_is_created_again(apiserver: EmbeddedAPIServer,
                                                                       http: KubeHTTP) -> None:
    pr = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr"))
    recorder = EventRecorder(http)
    await recorder.record(pr, "Warning", "NotProvisioned", "stockout", 100.0)
    (event,) = await _events(http)
    await http.request("DELETE", EVENTS.path("default", event["metadata"]["name"]))
    await recorder.record(pr, "Warning", "NotProvisioned", "stockout", 160.0)
    (again,) = await _events(http)
    assert again["count"] == 2 and again["metadata"]["name"] == event["metadata"]["name"]
    await recorder.record(pr, "Warning", "NotProvisioned", "stockout", 170.0)
    assert [e["count"] for e in await _events(http)] == [3]
