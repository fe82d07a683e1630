"""After a restart, a Provisioned request's scale-up is settled with the provider (gangscale.controller.recovery): the
nodes of its units count as booked nodes seen (a booked node gone while no process watched then revokes the booking,
naming it); a unit the provider no longer has whole, with
no node name to miss, revokes it at once (hack/chaos.py, seed 15007: a reclaimed slice host, the booking rebuilt
without it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.record import OBTAINED, Record, Step
from gangscale.controller.logic.request import Request, RequestState
from gangscale.controller.recovery import recover_intents
from gangscale.providers.base import Obtained, Unit
from gangscale.timefmt import rfc3339
from tests.planner.builders import TPU_NODE, pool

NOW = 1_700_000_000.0
SLICE = pool("tpu", TPU_NODE, nodes_per_unit=2)
WHOLE = Obtained("tok", "tpu", (Unit("u1", ("u1-0", "u1-1")),))
HALF = Obtained("tok", "tpu", (Unit("u1", ("u1-0",)),), incomplete=("u1",))


def booked(*, existing: tuple[str, ...] = ()) -> RequestState:
    st = RequestState(Request("ns/a", "uid-a", "table", "c", {"kind": "Table"}, created=NOW - 60, pods=4),
                      record=Record(1, OBTAINED, NOW, (Step("tpu", 1, "tok"),), nodes=existing))
    st.set(C.PROVISIONED, True, C.R_PROVISIONED, "2 new nodes are Ready", rfc3339(NOW - 30))
    return st


def lookup_of(found: Obtained | None) -> Callable[[str], object]:
    async def lookup(token: str) -> Obtained | None:
        return found
    return lookup


@pytest.mark.parametrize(("found", "existing", "present", "revoked", "seen"), [
    pytest.param(WHOLE, (), {"u1-0", "u1-1"}, False, {"u1-0", "u1-1"}, id="whole"),
    # The existing nodes the plan booked are not counted: a booking rebuilt after a restart may move off them, and
    # another leader then finds them gone (chaos seed 16006: a false revocation). Known gap: one of them lost while
    # no process watched is not seen either (chaos seed 15007's other form).
    pytest.param(WHOLE, ("old-0",), {"u1-0", "u1-1"}, False, {"u1-0", "u1-1"},
                 id="existing-booked-nodes-are-not-counted"),
    pytest.param(HALF, (), {"u1-0"}, True, {"u1-0"}, id="a-host-gone-from-the-books-revokes"),
    pytest.param(HALF, (), {"u1-1"}, False, {"u1-0"}, id="a-missing-named-node-is-left-to-the-booked-check"),
])
async def test_recover_a_provisioned_scale_up(found: Obtained, existing: tuple[str, ...], present: set[str],
                                            revoked: bool, seen: set[str]) -> None:
    st = booked(existing=existing)
    releases = await recover_intents([st], lookup_of(found), {"tpu": SLICE}, NOW,  # type: ignore[arg-type]
                                     present.__contains__)
    assert releases == []
    assert st.booking_seen == seen
    cond = st.conditions.get(C.CAPACITY_REVOKED)
    assert (cond is not None and cond.true) is revoked
    if revoked:
        assert cond is not None and cond.reason == C.R_NODE_REMOVED
        assert cond.message.startswith("after a restart the provider no longer has every unit of this scale-up whole")
