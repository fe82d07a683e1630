"""Slices still coming up after ``Provisioned=True`` (``indices.held_claims``, ``Ledger.coming_up_claims`` and
``units_of``), on plain
objects: with ``provisionedWhen: Requested`` a request is Provisioned when its units are granted, before their hosts
register; a slice with one host in the view and the other on its way is not a half-removed slice (issue 26: the
rule for broken units took such a first host for scale-down)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.indices import held_claims
from gangscale.controller.logic.ledger import Ledger
from gangscale.controller.logic.planinput import units_of
from gangscale.controller.logic.record import OBTAINED, Record, Step
from gangscale.controller.logic.request import Phase, Request, RequestState, phase
from gangscale.controller.logic.view import ClusterView
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL, Obtained, Unit
from tests.planner.builders import TPU_NODE, pool

TPU = pool("tpu", TPU_NODE, nodes_per_unit=2)
TOKEN = "tok-1"


def node(name: str, unit: str, token: str = TOKEN) -> dict[str, object]:
    labels = {"gangscale.io/node-pool": "tpu", UNIT_LABEL: unit, TOKEN_LABEL: token}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"google.com/tpu": "4", "cpu": "8", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def provisioned(*, booked: bool = True, requested: bool = True) -> RequestState:
    request = Request(key="ns/pr", uid="u", source="provisioningrequest", class_name="c", obj={}, created=0.0,
                      provisioned_when_requested=requested)
    st = RequestState(request, record=Record(1, OBTAINED, 100.0, (Step("tpu", 1, TOKEN),)))
    st.obtained = {TOKEN: Obtained(TOKEN, "tpu", (Unit("s1", ("s1-0", "s1-1")),))}
    if booked:
        st.set(C.PROVISIONED, True, C.R_PROVISIONED, "obtained", "2026-11-28T00:00:00Z")
    return st


def coming_up(states: list[RequestState], view: ClusterView) -> set[str]:
    ledger = Ledger()
    for st in states:
        unbooked, arriving = held_claims(st, view.claim)
        ledger.track(st.key, unbooked=unbooked, arriving=arriving)
    return ledger.coming_up_claims(view.nodes.__contains__)


@pytest.mark.parametrize(("registered", "booked", "arriving", "broken"), [
    (("s1-0",), True, {TOKEN}, {}),
    (("s1-0", "s1-1"), True, set(), {}),
    (("s1-0",), False, {TOKEN}, {}),  # still provisioning: in progress
], ids=["second-host-on-its-way", "both-hosts-here", "not-provisioned-yet"])
def test_a_provisioned_slice_whose_host_is_on_its_way_is_not_broken(
        registered: tuple[str, ...], booked: bool, arriving: set[str], broken: dict[str, tuple[str, ...]]) -> None:
    view = ClusterView()
    for name in registered:
        view.apply_node(name, view.node_record(node(name, "s1")))
    st = provisioned(booked=booked)
    assert phase(st) is (Phase.BOOKED if booked else Phase.PROVISIONING)
    claims = coming_up([st], view)
    assert claims == arriving
    assert dict(units_of(view, {"tpu": TPU}, claims, set()).broken) == broken


def test_a_slice_left_half_removed_by_nobody_is_still_broken() -> None:
    view = ClusterView()
    view.apply_node("s9-0", view.node_record(node("s9-0", "s9", token="tok-gone")))
    assert dict(units_of(view, {"tpu": replace(TPU)}, coming_up([provisioned()], view), set()).broken) == {
        "s9": ("s9-0",)}
