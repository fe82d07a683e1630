"""``gangscale demo --plot``: the SVG read back — bars per workload in the order the run's events say, node lanes
that count the pools' nodes, one panel per run on one time axis — and the README's picture kept current."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gangscale.sim.observer import NodeLife
from gangscale.sim.plot import (
    PARTIAL,
    QUEUED,
    RESERVED,
    RUN,
    WAITING,
    render_svg,
    tick_minutes,
    workload_segments,
)
from gangscale.sim.runner import BASELINE, GANGSCALE, RunResult
from gangscale.sim.scenario import load_scenario
from gangscale.sim.world import (
    ADMITTED,
    ARRIVED,
    FINISHED,
    POD_STARTED,
    PREEMPTED,
    QUOTA_RESERVED,
    RUNNING,
    Timeline,
)

NS = {"svg": "http://www.w3.org/2000/svg"}
T0 = 1_000_000.0
DOCS_PICTURE = Path(__file__).resolve().parents[2] / "docs" / "demo.svg"
W3, W2, W1 = "default/multislice-3slice", "default/multislice-2slice", "default/multislice-1slice"


def tutorial_run(mode: str) -> RunResult:
    """The tutorial's shape, written by hand: the 3-slice JobSet runs first, then the 2- and 1-slice ones."""
    tl = Timeline(T0)
    events = [(0, ARRIVED, W3), (0, QUOTA_RESERVED, W3), (6, ARRIVED, W2), (7, ARRIVED, W1)]
    if mode == BASELINE:  # admitted on quota; two slices' pods start long before the third
        events += [(0, ADMITTED, W3), (190, POD_STARTED, W3), (1080, RUNNING, W3)]
    else:
        events += [(1080, ADMITTED, W3), (1080, POD_STARTED, W3), (1080, RUNNING, W3)]
    events += [(1140, FINISHED, W3), (1140, QUOTA_RESERVED, W2), (1140, QUOTA_RESERVED, W1),
               (1140, ADMITTED, W2), (1140, ADMITTED, W1), (1140, RUNNING, W1), (1141, RUNNING, W2),
               (1170, FINISHED, W1), (1200, FINISHED, W2)]
    for at, kind, subject in events:
        tl.add(T0 + at, kind, subject, kind)
    first = 10.0 if mode == BASELINE else 900.0
    nodes = {}
    for pool, created, gone in (("nodepool1", first, 1770.0), ("nodepool2", first, 1800.0),
                                ("nodepool3", 900.0, None)):
        for i in range(2):
            name = f"{pool}-{i}"
            nodes[name] = NodeLife(name, pool, pool, 4, T0 + created, T0 + created + 180,
                                   None if gone is None else T0 + gone)
    return RunResult(load_scenario("tpu-multislice"), mode, T0, T0 + 1800, tl, nodes, [W3, W2, W1])


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def panels(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-mode", ""): g for g in root.iterfind(".//svg:g[@class='run']", NS)}


def bars(group: ET.Element, kind: str | None = None) -> list[ET.Element]:
    return [r for r in group.iterfind(".//svg:rect", NS)
            if r.get("data-start") is not None and (kind is None or r.get("class") == kind)]


def time_to_x(panel: ET.Element) -> tuple[float, float]:
    """(x at 0, pixels per second), read from the axis ticks."""
    ticks = sorted((int(t.get("data-minutes", "")), float(line.get("x1", "")))
                   for t in panel.iterfind(".//svg:g[@class='tick']", NS) for line in t.iterfind("svg:line", NS))
    (m0, x0), (m1, x1) = ticks[0], ticks[-1]
    assert m0 == 0
    return x0, (x1 - x0) / ((m1 - m0) * 60)


def test_the_picture_is_well_formed_svg_with_a_viewbox_and_labels() -> None:
    svg = render_svg([tutorial_run(GANGSCALE)])
    root = parse(svg)
    x, y, width, height = (float(v) for v in root.get("viewBox", "").split())
    assert (x, y) == (0, 0) and width > 0 and height > 0
    texts = {t.text for t in root.iterfind(".//svg:text", NS)}
    assert {"multislice-3slice", "multislice-2slice", "multislice-1slice"} <= texts
    assert {"nodepool1 (2 nodes created)", "nodepool3 (2 nodes created)", "simulated time (minutes)"} <= texts
    legend = {i.get("data-kind") for i in root.iterfind(".//svg:g[@class='legend-item']", NS)}
    assert {QUEUED, RESERVED, WAITING, PARTIAL, RUN, "provisioning", "ready"} <= legend


@pytest.mark.parametrize("mode", [GANGSCALE, BASELINE])
def test_workload_bars_follow_the_runs_events(mode: str) -> None:
    result = tutorial_run(mode)
    (panel,) = panels(parse(render_svg([result]))).values()
    x0, scale = time_to_x(panel)
    rows = {g.get("data-workload"): g for g in panel.iterfind(".//svg:g[@class='workload']", NS)}
    assert list(rows) == ["multislice-3slice", "multislice-2slice", "multislice-1slice"]
    started = {}
    for subject in result.workloads:
        row_bars = bars(rows[subject.split("/")[1]])
        xs = [float(b.get("x", "")) for b in row_bars]
        assert xs == sorted(xs) and len(row_bars) >= 2
        arrived = (result.timeline.first(ARRIVED, subject) or 0) - T0
        assert xs[0] == pytest.approx(x0 + arrived * scale, abs=0.02)
        (run,) = [b for b in row_bars if b.get("class") == RUN]
        started[subject] = float(run.get("x", ""))
    by_events = sorted(result.workloads, key=lambda s: result.timeline.first(RUNNING, s) or 0)
    assert sorted(result.workloads, key=lambda s: started[s]) == by_events
    assert started[W3] < started[W1] < started[W2]


def test_segments_name_what_the_gang_waited_for() -> None:
    gangscale, baseline = tutorial_run(GANGSCALE), tutorial_run(BASELINE)
    assert [(s.kind, s.start, s.end) for s in workload_segments(gangscale, W3)] == \
        [(RESERVED, 0, 1080), (RUN, 1080, 1140)]
    assert [(s.kind, s.start, s.end) for s in workload_segments(baseline, W3)] == \
        [(WAITING, 0, 190), (PARTIAL, 190, 1080), (RUN, 1080, 1140)]
    assert [s.kind for s in workload_segments(gangscale, W2)] == [QUEUED, WAITING, RUN]


def test_a_preempted_workload_queues_again_and_an_unfinished_one_runs_to_the_end() -> None:
    result = tutorial_run(GANGSCALE)
    tl = Timeline(T0)
    for at, kind in ((0, ARRIVED), (0, QUOTA_RESERVED), (0, ADMITTED), (10, RUNNING), (100, PREEMPTED),
                     (200, QUOTA_RESERVED), (200, ADMITTED), (210, RUNNING)):
        tl.add(T0 + at, kind, W3, kind)
    result.timeline = tl
    assert [(s.kind, s.start, s.end) for s in workload_segments(result, W3)] == [
        (WAITING, 0, 10), (RUN, 10, 100), (QUEUED, 100, 200), (WAITING, 200, 210), (RUN, 210, 1800)]


@pytest.mark.parametrize("mode", [GANGSCALE, BASELINE])
def test_node_lanes_count_each_pools_nodes_at_every_minute(mode: str) -> None:
    result = tutorial_run(mode)
    (panel,) = panels(parse(render_svg([result]))).values()
    x0, scale = time_to_x(panel)
    lanes = {g.get("data-pool"): g for g in panel.iterfind(".//svg:g[@class='pool']", NS)}
    assert list(lanes) == ["nodepool1", "nodepool2", "nodepool3"]
    for pool, lane in lanes.items():
        spans = []
        for node in lane.iterfind("svg:g[@class='node']", NS):
            rects = bars(node)
            spans.append((min(float(r.get("x", "")) for r in rects),
                          max(float(r.get("x", "")) + float(r.get("width", "")) for r in rects)))
        for minute in range(30):
            t = minute * 60 + 17.0  # off every creation and deletion instant
            drawn = sum(1 for a, b in spans if a <= x0 + t * scale < b)
            alive = sum(1 for n in result.nodes.values() if n.pool == pool
                        and n.created - T0 <= t < ((n.gone or result.end) - T0))
            assert drawn == alive, (pool, minute)


def test_the_baseline_panel_appears_only_for_a_baseline_run_on_the_same_axis() -> None:
    alone = panels(parse(render_svg([tutorial_run(GANGSCALE)])))
    both = panels(parse(render_svg([tutorial_run(GANGSCALE), tutorial_run(BASELINE)])))
    assert list(alone) == [GANGSCALE]
    assert list(both) == [GANGSCALE, BASELINE]
    assert time_to_x(both[GANGSCALE]) == time_to_x(both[BASELINE])
    baseline_y = min(float(r.get("y", "")) for r in bars(both[BASELINE]))
    assert baseline_y > max(float(r.get("y", "")) for r in bars(both[GANGSCALE]))


def test_ticks_are_round_and_few() -> None:
    assert tick_minutes(1800) == 5
    assert tick_minutes(3 * 3600) == 15
    assert tick_minutes(60) == 1
    with pytest.raises(ValueError, match="no runs"):
        render_svg([])


def test_the_readme_picture_is_the_default_scenario_drawn_by_this_renderer() -> None:
    """docs/demo.svg (``gangscale demo --baseline --plot docs/demo.svg``) must not rot: it parses, draws both
    runs of the default scenario with every workload and pool, in the tutorial's order, with the same kinds of
    elements as the renderer draws today. Regenerate it with that command when this fails."""
    root = parse(DOCS_PICTURE.read_text(encoding="utf-8"))
    scenario = load_scenario("tpu-multislice")
    assert root.get("data-scenario") == scenario.name and root.get("viewBox")
    runs = panels(root)
    assert list(runs) == [GANGSCALE, BASELINE]
    fresh = parse(render_svg([tutorial_run(GANGSCALE), tutorial_run(BASELINE)]))
    assert {e.get("class") for e in root.iter()} == {e.get("class") for e in fresh.iter()}
    for panel in runs.values():
        rows = {g.get("data-workload"): g for g in panel.iterfind(".//svg:g[@class='workload']", NS)}
        assert list(rows) == [w.name for w in scenario.workloads]
        pools = [g.get("data-pool") for g in panel.iterfind(".//svg:g[@class='pool']", NS)]
        assert pools == [p["name"] for p in scenario.node_pools]
        run_x = {name: float(bars(row, RUN)[0].get("x", "")) for name, row in rows.items()}
        assert run_x["multislice-3slice"] < run_x["multislice-2slice"]
        assert run_x["multislice-3slice"] < run_x["multislice-1slice"]
