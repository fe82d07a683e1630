"""Bookings rebuilt after a restart (``gangscale.controller.logic.rebook``), on plain objects: a table of clusters and
gangs, and the booking each must get."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from gangscale.controller.logic.rebook import rebuilt_booking
from gangscale.model.gang import Gang
from gangscale.model.policy import Policy
from gangscale.model.resources import ResourceList
from gangscale.model.snapshot import Booking, NodeState
from tests.planner.builders import CPU_NODE, pod_set, pool, snapshot
from tests.planner.builders import gang as make_gang
from tests.planner.builders import node as make_node

NOW = 1_000_000.0
CPU = pool("cpu", CPU_NODE)
OTHER = pool("other", CPU_NODE)
NOT_READY = "node.kubernetes.io/not-ready:NoSchedule"


def gang(count: int, cpu: str = "12") -> Gang:
    return make_gang("ns/pr", pod_set("w", count, {"cpu": cpu}), may_scale=False)


def node(name: str, *, used: str | None = None, taints: tuple[str, ...] | None = None, of: object = CPU) -> NodeState:
    return make_node(name, of, used={"cpu": used} if used else None, taints=taints)  # type: ignore[arg-type]


def cpu(amount: str) -> ResourceList:
    return ResourceList.parse({"cpu": amount})


@dataclass(frozen=True)
class Case:
    id: str
    gang: Gang | None
    own: tuple[NodeState, ...]
    #: cpu per node: what the booking holds there (a whole node's allocatable shows as "16").
    want: Mapping[str, str]
    others: tuple[NodeState, ...] = ()
    consumed: Mapping[str, str] = field(default_factory=dict)
    bookings: tuple[Booking, ...] = ()
    #: Own nodes of other requests rebuilt in the same pass.
    taken: tuple[str, ...] = ()
    #: Existing nodes the scale-up's record names.
    recorded: tuple[str, ...] = ()


CASES = [
    Case("fits-on-its-own-nodes", gang(2), (node("new-0"), node("new-1")), {"new-0": "12", "new-1": "12"},
         others=(node("a-free"),)),
    Case("its-arrived-pods-are-not-counted-twice", gang(2), (node("new-0", used="12"), node("new-1")),
         {"new-0": "12", "new-1": "12"}, consumed={"new-0": "12"}),
    Case("a-not-ready-taint-of-a-fresh-node-is-no-obstacle", gang(2),
         (node("new-0", taints=(NOT_READY,)), node("new-1")), {"new-0": "12", "new-1": "12"}),
    Case("a-scale-up-that-also-used-free-room-books-it-again", gang(3), (node("new-0"), node("new-1")),
         {"a-free": "12", "new-0": "12", "new-1": "12"}, others=(node("a-free", used="4"),)),
    Case("free-room-in-pools-the-scale-up-did-not-use-is-not-taken", gang(3), (node("new-0"), node("new-1")),
         {"new-0": "16", "new-1": "16"}, others=(node("a-free", of=OTHER),)),
    Case("free-room-booked-by-another-request-is-not-taken", gang(3), (node("new-0"), node("new-1")),
         {"new-0": "16", "new-1": "16"}, others=(node("a-free"),),
         bookings=(Booking("ns/other", "a-free", cpu("12")),)),
    Case("own-nodes-of-another-request-rebuilt-alongside-are-not-free-room", gang(3), (node("new-0"),),
         {"x-free": "12", "y-free": "12", "new-0": "12"},
         others=(node("a-theirs-0", used="4"), node("a-theirs-1", used="4"), node("x-free"), node("y-free")),
         taken=("a-theirs-0", "a-theirs-1")),
    # Which free node is kept does not matter (all alike): how many does.
    Case("the-wider-plan-uses-every-own-node-before-free-room", gang(2), (node("x-new-0"),),
         {"x-new-0": "12", "b-free": "12"}, others=(node("a-free"), node("b-free"))),
    Case("the-wider-plan-uses-every-own-node-before-free-room-multi", gang(4), (node("x-new-0"), node("x-new-1")),
         {"x-new-0": "12", "x-new-1": "12", "c-free": "12", "d-free": "12"},
         others=(node("a-free"), node("b-free"), node("c-free"), node("d-free"))),
    Case("own-nodes-a-plan-leaves-unused-stay-held-whole", gang(1, cpu="4"),
         (node("new-0", used="14"), node("new-1")), {"new-0": "16", "new-1": "4"}, others=(node("a-free"),)),
    Case("own-nodes-the-wider-plan-leaves-unused-stay-held-whole", gang(3, cpu="8"),
         (node("new-0", used="12"), node("new-1")), {"a-free": "8", "new-0": "16", "new-1": "16"},
         others=(node("a-free", used="8"),)),
    Case("existing-nodes-the-record-names-are-used-in-a-pool-the-scale-up-did-not-use", gang(3),
         (node("new-0"), node("new-1")), {"a-free": "12", "new-0": "12", "new-1": "12"},
         others=(node("a-free", of=OTHER, used="4"),), recorded=("a-free",)),
    Case("without-a-gang-every-own-node-is-held-whole", None, (node("new-0"), node("new-1")),
         {"new-0": "16", "new-1": "16"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rebuilt_booking(case: Case) -> None:
    snap = snapshot([CPU, OTHER], [*case.own, *case.others], case.bookings)
    consumed = {name: cpu(amount) for name, amount in case.consumed.items()}
    booked = rebuilt_booking(case.gang, case.own, consumed, snap, {"cpu"}, NOW, Policy(), taken=case.taken,
                             recorded=case.recorded)
    assert {name: held.get("cpu") for name, held in booked.items()} == {
        name: cpu(amount).get("cpu") for name, amount in case.want.items()}
