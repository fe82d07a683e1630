"""Capacity booked for a Provisioned request (``gangscale.controller.logic.bookings``), on plain objects: what a
decision books per node, and what is still held once consumer pods have bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from gangscale.controller.logic.bookings import Booked, consumed_on, live_bookings, planned_booking
from gangscale.model.decision import Decision, NewNodes, Outcome, Placement
from gangscale.model.resources import ResourceList
from gangscale.model.snapshot import Booking
from tests.planner.builders import gang, pod_set

#: 5 workers of 4 CPUs and 2 parameter servers of 1 CPU.
GANG = gang("ns/pr", pod_set("w", 5, {"cpu": "4"}), pod_set("ps", 2, {"cpu": "1"}))


def res(cpu: str, pods: int = 0, **more: str) -> ResourceList:
    return ResourceList.parse({"cpu": cpu, "pods": pods, **more})


@dataclass(frozen=True)
class Case:
    id: str
    placements: tuple[Placement, ...]
    new_nodes: tuple[NewNodes, ...]
    names: Mapping[str, Sequence[str]]
    #: node -> (cpu, pods)
    want: Mapping[str, tuple[str, int]] = field(default_factory=dict)


CASES = [
    Case("placements-on-existing-nodes-add-up",
         (Placement("w", "old-1", 1), Placement("ps", "old-1", 2), Placement("w", "old-2", 1)), (), {},
         {"old-1": ("6", 3), "old-2": ("4", 1)}),
    Case("new-nodes-are-booked-in-name-order", (), (NewNodes("a", 2, (("w", 1), ("ps", 1))),),
         {"a": ["a-y", "a-x"]}, {"a-x": ("5", 2), "a-y": ("5", 2)}),
    Case("padding-nodes-book-nothing", (), (NewNodes("a", 1, (("w", 2),)), NewNodes("a", 1, ())),
         {"a": ["a-x", "a-y"]}, {"a-x": ("8", 2)}),
    Case("groups-of-a-pool-take-the-next-names", (),
         (NewNodes("a", 1, (("w", 2),)), NewNodes("b", 1, (("w", 1),)), NewNodes("a", 1, (("ps", 2),))),
         {"a": ["a-2", "a-1"], "b": ["b-1"]}, {"a-1": ("8", 2), "a-2": ("2", 2), "b-1": ("4", 1)}),
    Case("names-not-known-yet-book-only-the-placements", (Placement("w", "old-1", 1),),
         (NewNodes("a", 2, (("w", 2),)),), {}, {"old-1": ("4", 1)}),
    Case("fewer-names-than-nodes-book-what-is-named", (), (NewNodes("a", 3, (("w", 1),)),),
         {"a": ["a-x"]}, {"a-x": ("4", 1)}),
    Case("extra-names-are-not-booked", (), (NewNodes("a", 1, (("w", 1),)),),
         {"a": ["a-x", "a-y"]}, {"a-x": ("4", 1)}),
    Case("mixed", (Placement("w", "old-1", 2),), (NewNodes("b", 1, (("w", 3), ("ps", 2))),),
         {"b": ["b-0"]}, {"old-1": ("8", 2), "b-0": ("14", 5)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_planned_booking(case: Case) -> None:
    """Per node, the requests of the pods the decision puts there (new nodes named per pool, sorted)."""
    decision = Decision("ns/pr", Outcome.SCALE_UP, placements=case.placements, new_nodes=case.new_nodes)
    booked = planned_booking(GANG, decision, case.names)
    assert booked == {node: res(cpu, pods) for node, (cpu, pods) in case.want.items()}


@dataclass(frozen=True)
class LiveCase:
    id: str
    booked: Booked
    consumed: Mapping[str, ResourceList]
    present: tuple[str, ...]
    want: tuple[Booking, ...]


LIVE = [
    LiveCase("nothing-consumed", {"n1": res("8", 2)}, {}, ("n1",), (Booking("o", "n1", res("8", 2)),)),
    LiveCase("consumed-is-taken-out", {"n1": res("8", 2)}, {"n1": res("4", 1)}, ("n1",),
             (Booking("o", "n1", res("4", 1)),)),
    LiveCase("all-consumed-is-dropped", {"n1": res("8", 2)}, {"n1": res("8", 2)}, ("n1",), ()),
    LiveCase("floored-at-zero", {"n1": res("8", 2)}, {"n1": res("12", 3)}, ("n1",), ()),
    LiveCase("floored-per-resource", {"n1": res("4", 1, memory="1Gi")}, {"n1": res("8", 2)}, ("n1",),
             (Booking("o", "n1", ResourceList.parse({"memory": "1Gi"})),)),
    LiveCase("other-resources-consumed-change-nothing", {"n1": res("4", 1)}, {"n1": ResourceList.parse(
        {"memory": "8Gi"})}, ("n1",), (Booking("o", "n1", res("4", 1)),)),
    LiveCase("absent-nodes-are-dropped", {"n1": res("4", 1), "gone": res("4", 1)}, {}, ("n1", "other"),
             (Booking("o", "n1", res("4", 1)),)),
    LiveCase("consumed-elsewhere-does-not-count", {"n1": res("4", 1)}, {"n2": res("4", 1)}, ("n1", "n2"),
             (Booking("o", "n1", res("4", 1)),)),
    LiveCase("sorted-by-node", {"n2": res("1"), "n1": res("2")}, {}, ("n2", "n1"),
             (Booking("o", "n1", res("2")), Booking("o", "n2", res("1")))),
]


@pytest.mark.parametrize("case", LIVE, ids=[c.id for c in LIVE])
def test_live_bookings(case: LiveCase) -> None:
    """What is still held on each present node once the consumers bound there are taken out."""
    assert live_bookings("o", case.booked, case.consumed, case.present) == list(case.want)


def test_consumed_on_sums_per_node() -> None:
    consumed = consumed_on([("n1", res("1", 1)), ("n2", res("2", 1)), ("n1", res("3", 1))])
    assert consumed == {"n1": res("4", 2), "n2": res("2", 1)}
    assert consumed.get("n3") is None and "n3" not in consumed
    assert consumed_on([]) == {}
