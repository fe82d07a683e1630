"""``gangscale demo --plot`` and capacity tiers, read back from the SVG: every node bar says its tier (``data-tier``),
spot nodes carry stripes with a legend entry, lanes name their tier when the pools span several, each workload row
names the tiers its pods ran on, and each caption carries the bill by tier and the cost. A one-tier picture stays as
it was."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from gangscale.model.tiers import ON_DEMAND, SPOT
from gangscale.sim.observer import NodeLife
from gangscale.sim.plot import render_svg
from gangscale.sim.runner import BASELINE, GANGSCALE, RunResult
from gangscale.sim.scenario import load_scenario
from gangscale.sim.world import POD_STARTED, RUNNING, Timeline
from tests.sim.tierruns import tiers_run

NS = {"svg": "http://www.w3.org/2000/svg"}
T0 = 2_000_000.0
HOUR = 3600.0


def picture(*results: RunResult) -> ET.Element:
    return ET.fromstring(render_svg(list(results)))


def texts(element: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in element.iterfind(".//svg:text", NS)]


def test_every_node_and_its_bars_carry_the_tier_and_only_spot_nodes_are_striped() -> None:
    root = picture(tiers_run())
    tiers = {}
    for node in root.iterfind(".//svg:g[@class='node']", NS):
        tier = node.get("data-tier")
        tiers[node.get("data-node")] = tier
        bars = [r for r in node.iterfind("svg:rect", NS) if r.get("data-start") is not None]
        assert bars and {b.get("data-tier") for b in bars} == {tier}
        marks = node.findall("svg:rect[@class='tier-mark']", NS)
        if tier == SPOT:
            (mark,) = marks
            assert mark.get("fill") == "url(#tier-spot)" and mark.get("pointer-events") == "none"
            # Over the whole node: from its creation (the first bar) to its end (the last).
            assert mark.get("x") == bars[0].get("x")
            end = float(bars[-1].get("x", "")) + float(bars[-1].get("width", ""))
            assert float(mark.get("x", "")) + float(mark.get("width", "")) == end
        else:
            assert not marks
    assert tiers == {"g0": ON_DEMAND, "g1": ON_DEMAND, "g2": ON_DEMAND, "s0": SPOT, "c0": ON_DEMAND}
    (pattern,) = root.iterfind("svg:defs/svg:pattern", NS)
    assert pattern.get("id") == "tier-spot"


def test_lanes_name_their_tier_and_the_legend_explains_the_stripes() -> None:
    root = picture(tiers_run())
    lanes = {g.get("data-pool"): g for g in root.iterfind(".//svg:g[@class='pool']", NS)}
    assert {pool: lane.get("data-tier") for pool, lane in lanes.items()} == {
        "gpu-spot": SPOT, "gpu": ON_DEMAND, "cpu": ON_DEMAND}
    assert texts(lanes["gpu-spot"]) == ["gpu-spot", "spot, 1 node created"]
    assert texts(lanes["gpu"]) == ["gpu", "on-demand, 3 nodes created"]
    legend = {i.get("data-kind"): "".join(i.itertext()).strip()
              for i in root.iterfind(".//svg:g[@class='legend-item']", NS)}
    assert legend[SPOT] == "spot node (diagonal stripes)"


def test_workload_rows_say_where_their_pods_ran_so_a_split_gang_shows() -> None:
    root = picture(tiers_run())
    rows = {g.get("data-workload"): g for g in root.iterfind(".//svg:g[@class='workload']", NS)}
    assert {name: row.get("data-tiers") for name, row in rows.items()} == {
        "whole": ON_DEMAND, "split": "spot+on-demand", "idle": None}
    (note,) = rows["split"].iterfind("svg:text[@class='workload-tiers']", NS)
    assert note.text == "on spot+on-demand"


def test_each_caption_carries_the_bill_by_tier_and_the_cost() -> None:
    root = picture(tiers_run(GANGSCALE), tiers_run(BASELINE))
    captions = ["".join(t.itertext()).strip() for t in root.iterfind(".//svg:text[@class='run-title']", NS)]
    assert len(captions) == 2
    for caption in captions:
        assert caption.endswith("accelerator-hours billed by tier: on-demand 20.00, spot 4.00; cost 240.00 "
                                "(excludes cpu: no price) at the pools' prices per unit-hour")


def test_no_spot_node_no_stripes_and_a_one_tier_picture_reads_as_before() -> None:
    """Without a spot node drawn: no stripes, pattern or legend entry (``data-tier`` still says on-demand). A scenario
    of one tier (the default one's TPU pools): no tier lines under the pools and no notes on the workload rows."""
    for root in (picture(tiers_run(spot=False)), picture(tutorial_like())):
        assert not root.findall(".//svg:defs", NS)
        assert not root.findall(".//svg:rect[@class='tier-mark']", NS)
        assert {g.get("data-tier") for g in root.iterfind(".//svg:g[@class='node']", NS)} == {ON_DEMAND}
        assert SPOT not in {i.get("data-kind") for i in root.iterfind(".//svg:g[@class='legend-item']", NS)}
    one_tier = picture(tutorial_like())
    assert not one_tier.findall(".//svg:text[@class='workload-tiers']", NS)
    lanes = one_tier.iterfind(".//svg:g[@class='pool']", NS)
    assert next(texts(lane) for lane in lanes) == ["nodepool1 (2 nodes created)"]


def tutorial_like() -> RunResult:
    """Two nodes of the default scenario's first pool (TPU slices, on-demand), a workload running on both."""
    nodes = {f"n{i}": NodeLife(f"n{i}", "nodepool1", "u", 4, T0, T0 + 60, T0 + 600) for i in range(2)}
    tl, subject = Timeline(T0), "default/multislice-1slice"
    for name in nodes:
        tl.add(T0 + 60, POD_STARTED, subject, "pod", node=name, accelerators=4)
    tl.add(T0 + 60, RUNNING, subject, "running")
    return RunResult(load_scenario("tpu-multislice"), GANGSCALE, T0, T0 + 600, tl, nodes, [subject])


SPOT_PICTURE = Path(__file__).resolve().parents[2] / "docs" / "spot-fallback.svg"


def test_the_readme_spot_fallback_picture_shows_the_gang_whole_under_gangscale_and_split_under_the_baseline() -> None:
    """docs/spot-fallback.svg (``gangscale demo --scenario spot-fallback --baseline --plot docs/spot-fallback.svg``)
    must not rot: both runs, the scenario's pools with their tiers, spot nodes striped, and the pre-training gang on
    one tier under gangscale, on two under the baseline. Regenerate it with that command when this fails."""
    root = ET.parse(SPOT_PICTURE).getroot()
    scenario = load_scenario("spot-fallback")
    assert root.get("data-scenario") == scenario.name and root.get("viewBox")
    runs = {g.get("data-mode"): g for g in root.iterfind(".//svg:g[@class='run']", NS)}
    assert list(runs) == [GANGSCALE, BASELINE]
    tiers = {p.name: p.capacity_type for p in scenario.pools()}
    for panel in runs.values():
        lanes = {g.get("data-pool"): g.get("data-tier") for g in panel.iterfind(".//svg:g[@class='pool']", NS)}
        assert lanes == tiers
        for node in panel.iterfind(".//svg:g[@class='node']", NS):
            striped = bool(node.findall("svg:rect[@class='tier-mark']", NS))
            assert striped == (node.get("data-tier") == SPOT)
    pretrain = {mode: panel.find(".//svg:g[@data-workload='llm-pretrain']", NS) for mode, panel in runs.items()}
    assert {mode: row.get("data-tiers") for mode, row in pretrain.items() if row is not None} == {
        GANGSCALE: ON_DEMAND, BASELINE: "spot+on-demand"}
