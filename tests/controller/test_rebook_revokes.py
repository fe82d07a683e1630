"""After a restart, a Provisioned request whose scale-up used existing nodes as well as its own has its booking
rebuilt (gangscale.controller.logic.planinput.rebook); when the gang no longer fits what is left and nodes it stood on
are gone or being reclaimed, the booking is revoked at once, naming them, and the existing nodes still there are
held until that is written (hack/chaos.py, seed 19033: a slice half reclaimed while no leader could write was
scaled down as a broken unit while Kueue still counted on it)."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.record import OBTAINED, Record, Step
from gangscale.controller.logic.request import Request, RequestState
from gangscale.timefmt import rfc3339
from tests.controller.test_pass import NOW, POOL, SOURCE, Table, node
from tests.planner.builders import gang, pod_set


def zoned(name: str, **kw: Any) -> dict[str, Any]:
    made = node(name, **kw)
    made["metadata"]["labels"]["topology.kubernetes.io/zone"] = POOL.zone
    return made


def shutting_down(name: str) -> dict[str, Any]:
    going = zoned(name)
    going["status"]["conditions"] = [{"type": "Ready", "status": "False", "message": "node is shutting down"}]
    return going


@pytest.mark.parametrize(("old", "revoked"), [
    (zoned("old-0"), False),
    (None, True),
], ids=["still-there", "gone"])
def test_a_rebuilt_booking_that_lost_an_existing_node_is_revoked_naming_it(old: dict[str, Any] | None,
                                                                            revoked: bool) -> None:
    t = Table()
    # Two pods of 12 CPUs: one per 16-CPU node; the scale-up made one node (tok-0), the plan used old-0 too.
    t.source.gangs["ns/a"] = gang("ns/a", pod_set("w", 2, {"cpu": "12"}))
    record = Record(1, OBTAINED, NOW + 900, (Step(POOL.name, 1, "tok"),), nodes=("old-0",))
    st = RequestState(Request("ns/a", "uid-ns/a", SOURCE, "c", {"kind": "Table"}, created=NOW, pods=2),
                      record=record)
    st.set(C.ACCEPTED, True, C.R_ACCEPTED, C.M_ACCEPTED, rfc3339(NOW))
    st.set(C.PROVISIONED, True, C.R_PROVISIONED, "1 new nodes are Ready", rfc3339(NOW))
    t.core.add(st)
    t.run(1, nodes={"tok-0": zoned("tok-0", token="tok"), **({"old-0": old} if old else {})})
    cond = t.st("ns/a").conditions.get(C.CAPACITY_REVOKED)
    assert (cond is not None and cond.true) is revoked
    if revoked:
        assert cond is not None and cond.message == ("after a restart its booking could not be made again: booked "
                                                     "nodes are gone or being reclaimed: old-0")
    assert "tok-0" in (t.st("ns/a").booking or {})


def test_the_existing_nodes_still_there_are_held_until_the_revocation_is_written() -> None:
    t = Table()
    t.source.gangs["ns/a"] = gang("ns/a", pod_set("w", 3, {"cpu": "12"}))
    record = Record(1, OBTAINED, NOW + 900, (Step(POOL.name, 1, "tok"),), nodes=("old-0", "old-1"))
    st = RequestState(Request("ns/a", "uid-ns/a", SOURCE, "c", {"kind": "Table"}, created=NOW, pods=3),
                      record=record)
    st.set(C.PROVISIONED, True, C.R_PROVISIONED, "1 new nodes are Ready", rfc3339(NOW))
    t.core.add(st)
    t.run(1, nodes={"tok-0": zoned("tok-0", token="tok"), "old-0": zoned("old-0")})
    cond = t.st("ns/a").conditions.get(C.CAPACITY_REVOKED)
    assert cond is not None and cond.true and cond.message.endswith("reclaimed: old-1")
    assert set(t.st("ns/a").booking or {}) == {"tok-0", "old-0"}
