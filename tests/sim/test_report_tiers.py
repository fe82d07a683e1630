"""The demo report's capacity tiers and cost: accelerator-hours billed by tier, the cost at the pools' prices, the
tiers each workload's pods ran on, and how the table, the side-by-side comparison and the JSON show them. Plain
node records and pools in; no cluster runs."""

from __future__ import annotations

import re

import pytest

from gangscale.model.nodepool import NodePool
from gangscale.model.resources import ResourceList
from gangscale.model.tiers import FLEX_START, ON_DEMAND, RESERVATION, SPOT
from gangscale.sim.observer import NodeLife
from gangscale.sim.report import (
    billing,
    cost_text,
    render_comparison,
    render_table,
    rows,
    tiers_text,
    to_json,
    totals,
)
from gangscale.sim.runner import BASELINE, GANGSCALE
from tests.sim.tierruns import IDLE, SPLIT, WHOLE, tiers_run

T0 = 5_000.0
HOUR = 3600.0


def pool(name: str, tier: str = ON_DEMAND, price: float | None = None, nodes_per_unit: int = 1) -> NodePool:
    return NodePool(name=name, allocatable=ResourceList.parse({"cpu": "8"}), max_units=8, capacity_type=tier,
                    price_per_unit_hour=price, nodes_per_unit=nodes_per_unit)


def node(name: str, pool_name: str, accelerators: int, hours: float, *, gone: bool = True) -> NodeLife:
    """A node created at 0 that lived ``hours`` (deleted then, or still there at the end when not ``gone``)."""
    return NodeLife(name, pool_name, name, accelerators, 0.0, 60.0, hours * HOUR if gone else None)


POOLS = {p.name: p for p in (pool("spot", SPOT, 35.2), pool("od", ON_DEMAND, 88.0), pool("cpu"),
                             pool("slice", ON_DEMAND, 10.0, nodes_per_unit=2), pool("dws", FLEX_START, 44.0),
                             pool("resv", RESERVATION, 80.0))}


@pytest.mark.parametrize(("nodes", "end_hours", "hours", "cost", "unpriced"), [
    ([], 1, {}, 0.0, ()),
    ([node("a", "spot", 8, 1), node("b", "od", 8, 2)], 3, {ON_DEMAND: 16.0, SPOT: 8.0}, 35.2 + 176.0, ()),
    # A unit of two nodes costs its price once per hour: each node half of it.
    ([node("s0", "slice", 4, 1), node("s1", "slice", 4, 1)], 1, {ON_DEMAND: 8.0}, 10.0, ()),
    # A pool without a price costs nothing and is named; its accelerator-hours still count.
    ([node("c", "cpu", 0, 2), node("g", "od", 8, 1)], 2, {ON_DEMAND: 8.0}, 88.0, ("cpu",)),
    # A node of no scenario pool: on-demand, no price.
    ([node("x", "elsewhere", 1, 1)], 1, {ON_DEMAND: 1.0}, 0.0, ("elsewhere",)),
    # A node never deleted is billed until the end of the run.
    ([node("a", "spot", 8, 0, gone=False)], 0.5, {SPOT: 4.0}, 17.6, ()),
], ids=["nothing", "spot-and-on-demand", "multi-host-unit", "unpriced-pool", "unknown-pool", "until-the-end"])
def test_billing_splits_accelerator_hours_by_tier_and_prices_node_hours(
        nodes: list[NodeLife], end_hours: float, hours: dict[str, float], cost: float,
        unpriced: tuple[str, ...]) -> None:
    bill = billing(nodes, POOLS, end_hours * HOUR)
    assert bill.accelerator_hours == pytest.approx(hours)
    assert bill.cost == pytest.approx(cost)
    assert bill.unpriced == unpriced


def test_tiers_are_listed_in_the_tier_order_whatever_the_node_order() -> None:
    nodes = [node("f", "dws", 1, 1), node("s", "spot", 1, 1), node("r", "resv", 1, 1), node("o", "od", 1, 1)]
    assert list(billing(nodes, POOLS, HOUR).accelerator_hours) == [RESERVATION, ON_DEMAND, SPOT, FLEX_START]


@pytest.mark.parametrize(("hours", "text"), [
    ({}, "-"), ({ON_DEMAND: 28.0, SPOT: 8.666}, "on-demand 28.00, spot 8.67")])
def test_tiers_text(hours: dict[str, float], text: str) -> None:
    assert tiers_text(hours) == text




def columns(line: str) -> list[str]:
    """A printed grid row's cells (cells are at least two spaces apart)."""
    return re.split(r"\s{2,}", line.strip())


def test_each_row_names_the_tiers_its_pods_ran_on_first_used_first() -> None:
    assert {r.subject: r.tiers for r in rows(tiers_run())} == {
        WHOLE: (ON_DEMAND,), SPLIT: (SPOT, ON_DEMAND), IDLE: ()}


def test_totals_split_the_billed_hours_by_tier_and_price_them() -> None:
    result = tiers_run()
    t = totals(result, rows(result))
    assert t.billed_accelerator_hours == pytest.approx(8 + 8 + 4 + 4)
    assert t.billed_accelerator_hours_by_tier == pytest.approx({ON_DEMAND: 20.0, SPOT: 4.0})
    assert sum(t.billed_accelerator_hours_by_tier.values()) == pytest.approx(t.billed_accelerator_hours)
    assert t.cost == pytest.approx(90 + 90 + 45 + 15)
    assert t.unpriced_pools == ("cpu",)
    assert cost_text(t) == "cost 240.00 (excludes cpu: no price)"


def test_the_table_shows_a_split_gang_and_the_totals_line_the_bill() -> None:
    table = render_table(tiers_run())
    header, _, whole, split, idle = table.splitlines()[:5]
    assert columns(header)[-3:] == ["nodes", "tiers", "lost acc-h"]
    assert [columns(row)[-2] for row in (whole, split, idle)] == ["on-demand", "spot+on-demand", "-"]
    assert ("accelerator-hours billed 24.00 (on-demand 20.00, spot 4.00), lost to partial gangs 0.07; "
            "cost 240.00 (excludes cpu: no price)") in table


def test_the_comparison_adds_acc_h_by_tier_and_cost_and_names_what_the_cost_leaves_out() -> None:
    text = render_comparison([tiers_run(GANGSCALE), tiers_run(BASELINE)])
    lines = text.splitlines()
    assert columns(lines[1])[:2] == ["policy", "finished"]
    assert columns(lines[1])[-2:] == ["acc-h by tier", "cost"]
    assert lines[3].startswith("  gangscale  2/3")
    assert columns(lines[3])[-2:] == ["on-demand 20.00, spot 4.00", "240.00"]
    assert lines[-1] == "  cost excludes cpu: no price"


def test_the_json_keeps_its_keys_and_adds_tiers_and_cost() -> None:
    doc = to_json(tiers_run())
    t = doc["totals"]
    assert {"billed_accelerator_hours", "lost_accelerator_hours", "nodes_created", "makespan"} <= set(t)
    assert t["billed_accelerator_hours_by_tier"] == pytest.approx({ON_DEMAND: 20.0, SPOT: 4.0})
    assert (t["cost"], t["unpriced_pools"]) == (pytest.approx(240.0), ("cpu",))
    assert {n["name"]: n["tier"] for n in doc["nodes"]} == {
        "g0": ON_DEMAND, "g1": ON_DEMAND, "g2": ON_DEMAND, "s0": SPOT, "c0": ON_DEMAND}
    assert [w["tiers"] for w in doc["workloads"]] == [(ON_DEMAND,), (SPOT, ON_DEMAND), ()]
