"""``gangscale demo --plot``: one SVG picture of the runs, drawn by hand (no plotting library).

One panel per run (gangscale, then the baseline), stacked on one shared time axis in simulated minutes:

- **workloads**, one row each in scenario order: *queued* (submitted, or put back by a preemption; no quota
  yet), *quota reserved* (waiting for admission: the admission check, e.g. gangscale's ProvisioningRequest),
  *waiting for nodes* (admitted, no pod running yet), *partial gang* (some pods run, not all: paid for
  and wasted), *running* (every pod runs) until it finished;
- **nodes per pool**, one lane per pool with one thin bar per node: *provisioning* from its creation until it
  turned Ready, *ready* until it was deleted (or the run ended). Bars share a row only when they do not overlap,
  so the bars crossing an instant are the pool's node count at that instant.
- **capacity tiers**: a node of a spot, flex-start or reservation pool is drawn with its tier's stripes over the
  same colours (on-demand, the common case, plain), with a legend entry per tier drawn; when the pools span more
  than one tier, each lane names its pool's tier under the pool (a one-tier picture reads as before). Each
  panel's caption ends with the accelerator-hours billed per tier and the cost at the pools' prices
  (:func:`gangscale.sim.report.billing`).

:func:`render_svg` is pure (results in, SVG text out). Elements carry ``class`` and ``data-*`` attributes (run
mode, workload, pool, node, tier, segment kind, tick minutes) so that a program can read the picture back.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from gangscale.model.nodepool import NodePool
from gangscale.model.tiers import FLEX_START, ON_DEMAND, RESERVATION, SPOT
from gangscale.sim.report import clock, cost_text, pools_by_name, rows, tier_of, tiers_text, totals
from gangscale.sim.runner import RunResult
from gangscale.sim.world import (
    ADMITTED,
    ARRIVED,
    DEACTIVATED,
    EVICTED,
    FINISHED,
    POD_STARTED,
    PREEMPTED,
    QUOTA_RESERVED,
    RUNNING,
)

SVG_NS = "http://www.w3.org/2000/svg"

QUEUED, RESERVED, WAITING, PARTIAL, RUN = "queued", "reserved", "waiting", "partial", "running"
PROVISIONING, READY = "provisioning", "ready"
#: Fill colour and legend text of every kind of bar.
STYLE = {
    QUEUED: ("#c9ced6", "queued (no quota yet)"),
    RESERVED: ("#b7a6d9", "quota reserved, waiting for admission"),
    WAITING: ("#f2b84b", "admitted, pods waiting for nodes"),
    PARTIAL: ("#d9534f", "partial gang: some pods run, not all"),
    RUN: ("#3a8f5c", "running (every pod)"),
    PROVISIONING: ("#9ec5e8", "node provisioning"),
    READY: ("#2f6db3", "node Ready"),
}
#: The stripes drawn over a node of each tier but on-demand (a path in a 6x6 tile, white over the bar's colour),
#: and the legend text. Stripes rather than colours, so that the bar's colour still says provisioning or Ready.
TIER_MARKS = {
    SPOT: ("M0,6 L6,0 M-1,1 L1,-1 M5,7 L7,5", "spot node (diagonal stripes)"),
    FLEX_START: ("M3,0 L3,6", "flex-start node (vertical stripes)"),
    RESERVATION: ("M0,3 L6,3", "reservation node (horizontal stripes)"),
}

WIDTH = 1000
LEFT = 190      # room for the workload and pool labels
RIGHT = 24
ROW = 18        # a workload row
NODE_ROW = 7    # a node row inside a pool lane
LANE_GAP = 6
TIER_LABEL_GAP = 13  # the tier's line under a pool's label
FONT = "font-family:sans-serif;font-size:11px"
_NICE_MINUTES = (1, 2, 5, 10, 15, 20, 30, 60, 120, 180, 360, 720, 1440)


@dataclass(frozen=True)
class Segment:
    kind: str
    start: float  # seconds from the start of the run
    end: float


def workload_segments(result: RunResult, subject: str) -> list[Segment]:
    """The subject's queued / waiting / partial / running periods, from its timeline entries, in order."""
    out: list[Segment] = []
    state: str | None = None
    since = 0.0

    def move(to: str | None, at: float) -> None:
        nonlocal state, since
        if state is not None and at > since:
            out.append(Segment(state, since - result.start, at - result.start))
        state, since = to, at

    for e in result.timeline.entries:
        if e.subject != subject:
            continue
        if e.kind == ARRIVED and state is None:
            move(QUEUED, e.at)
        elif e.kind == QUOTA_RESERVED and state in (None, QUEUED):
            move(RESERVED, e.at)
        elif e.kind == ADMITTED and state in (None, QUEUED, RESERVED):
            move(WAITING, e.at)
        elif e.kind == POD_STARTED and state in (None, QUEUED, RESERVED, WAITING):
            move(PARTIAL, e.at)
        elif e.kind == RUNNING and state != RUN:
            move(RUN, e.at)
        elif e.kind == FINISHED:
            move(None, e.at)
        elif e.kind in (PREEMPTED, EVICTED):
            move(QUEUED, e.at)
        elif e.kind == DEACTIVATED:
            move(None, e.at)
    move(None, result.end)
    return out


def node_rows(result: RunResult, pool: str) -> list[list[tuple[str, float, float | None, float]]]:
    """The pool's nodes packed into rows: (name, created, ready, gone) in seconds from the start; a node joins
    the first row whose last node was gone by the time it was created."""
    lanes: list[list[tuple[str, float, float | None, float]]] = []
    nodes = sorted((n for n in result.nodes.values() if n.pool == pool), key=lambda n: (n.created, n.name))
    for n in nodes:
        gone = (n.gone if n.gone is not None else result.end) - result.start
        bar = (n.name, n.created - result.start, None if n.ready is None else n.ready - result.start, gone)
        row = next((r for r in lanes if r[-1][3] <= bar[1]), None)
        if row is None:
            lanes.append([bar])
        else:
            row.append(bar)
    return lanes


def pools_of(results: Sequence[RunResult]) -> list[str]:
    """The scenario's pools in file order, then any other pool a node came from."""
    names = [str(p.get("name")) for p in results[0].scenario.node_pools]
    for result in results:
        names += sorted({n.pool for n in result.nodes.values()} - set(names))
    return names


def tick_minutes(span_seconds: float) -> int:
    """A round tick step (minutes) that gives at most 12 ticks over the span."""
    return next((m for m in _NICE_MINUTES if span_seconds / (m * 60) <= 12), _NICE_MINUTES[-1])


class _Canvas:
    def __init__(self, span: float) -> None:
        self.span = span
        self.scale = (WIDTH - LEFT - RIGHT) / span

    def x(self, seconds: float) -> float:
        return round(LEFT + seconds * self.scale, 2)

    def bar(self, parent: ET.Element, kind: str, start: float, end: float, y: float, height: float,
            tip: str) -> ET.Element:
        rect = ET.SubElement(parent, "rect", {
            "class": kind, "x": f"{self.x(start)}", "y": f"{y}",
            "width": f"{max(0.5, round((end - start) * self.scale, 2))}", "height": f"{height}",
            "fill": STYLE[kind][0], "data-start": f"{start:g}", "data-end": f"{end:g}"})
        ET.SubElement(rect, "title").text = tip
        return rect


def _text(parent: ET.Element, x: float, y: float, text: str, *, anchor: str = "start",
          weight: str = "normal", cls: str = "label") -> None:
    el = ET.SubElement(parent, "text", {"class": cls, "x": f"{x}", "y": f"{y}", "text-anchor": anchor,
                                        "style": f"{FONT};font-weight:{weight}"})
    el.text = text


def _panel_title(result: RunResult) -> tuple[str, str]:
    """The caption's two lines: the outcome, then the bill by tier and its cost."""
    t = totals(result, rows(result))
    return (f"{result.mode}: {t.finished}/{t.workloads} finished, makespan {clock(t.makespan)}, "
            f"{t.nodes_created} nodes created, {t.billed_accelerator_hours:.2f} accelerator-hours billed, "
            f"{t.lost_accelerator_hours:.2f} lost to partial gangs",
            f"accelerator-hours billed by tier: {tiers_text(t.billed_accelerator_hours_by_tier)}; "
            f"{cost_text(t)} at the pools' prices per unit-hour")


def _workloads(g: ET.Element, c: _Canvas, result: RunResult, y: float, named: bool) -> float:
    """A row per workload; with ``named`` (the pools span several tiers), each row also says the tiers its pods ran
    on, so that a gang split across tiers shows (``data-tiers``, and ``on spot+on-demand`` by its bars)."""
    _text(g, 8, y + 12, "workloads", weight="bold")
    y += ROW
    tiers = {r.subject: r.tiers for r in rows(result)}
    for subject in result.workloads:
        name = subject.split("/", 1)[-1]
        row = ET.SubElement(g, "g", {"class": "workload", "data-workload": name})
        _text(row, LEFT - 8, y + 12, name, anchor="end")
        segments = workload_segments(result, subject)
        for s in segments:
            c.bar(row, s.kind, s.start, s.end, y + 3, ROW - 6,
                  f"{name}: {STYLE[s.kind][1]} {clock(s.start)} → {clock(s.end)}")
        if named and tiers.get(subject) and segments:
            row.set("data-tiers", "+".join(tiers[subject]))
            _tiers_note(row, c, f"on {'+'.join(tiers[subject])}", segments[-1].end, y + 12)
        y += ROW
    return y


def _tiers_note(row: ET.Element, c: _Canvas, text: str, end: float, y: float) -> None:
    """``text`` just after the row's last bar, or, where the bar reaches the right edge, inside its end in white."""
    x = c.x(end) + 4
    inside = x + 6.2 * len(text) > WIDTH - RIGHT
    el = ET.SubElement(row, "text", {
        "class": "workload-tiers", "x": f"{c.x(end) - 4 if inside else x}", "y": f"{y}",
        "text-anchor": "end" if inside else "start", "fill": "white" if inside else "#333", "style": FONT})
    el.text = text


def _nodes(g: ET.Element, c: _Canvas, result: RunResult, pools: list[str], y: float,
           tiers: dict[str, str]) -> float:
    """One lane per pool; ``tiers`` maps every pool drawn to its tier (the lanes name it when there are several)."""
    _text(g, 8, y + 12, "nodes per pool", weight="bold")
    y += ROW
    named = len(set(tiers.values())) > 1
    for pool in pools:
        tier = tiers[pool]
        lane = ET.SubElement(g, "g", {"class": "pool", "data-pool": pool, "data-tier": tier})
        packed = node_rows(result, pool)
        height = max(1, len(packed)) * NODE_ROW
        count = sum(len(r) for r in packed)
        label_y = y + min(height, ROW) / 2 + 8
        created = f"{count} node{'' if count == 1 else 's'} created"
        if named:  # the pool, then its tier and count on a line of their own: one line would not fit the margin
            _text(lane, LEFT - 8, label_y, pool, anchor="end")
            _text(lane, LEFT - 8, label_y + TIER_LABEL_GAP, f"{tier}, {created}", anchor="end")
        else:
            _text(lane, LEFT - 8, label_y, f"{pool} ({created})", anchor="end")
        ET.SubElement(lane, "rect", {"class": "lane", "x": f"{LEFT}", "y": f"{y}", "width": f"{WIDTH - LEFT - RIGHT}",
                                     "height": f"{height}", "fill": "#f4f5f7"})
        for i, packed_row in enumerate(packed):
            for bar in packed_row:
                _node(lane, c, bar, pool, tier, y + i * NODE_ROW + 1)
        y += max(height, ROW + TIER_LABEL_GAP if named else ROW) + LANE_GAP
    return y


def _node(lane: ET.Element, c: _Canvas, bar: tuple[str, float, float | None, float], pool: str, tier: str,
          top: float) -> None:
    """A node's provisioning and Ready bars, with its tier's stripes over both (none for on-demand)."""
    name, created, ready, gone = bar
    node = ET.SubElement(lane, "g", {"class": "node", "data-node": name, "data-pool": pool, "data-tier": tier})
    up = gone if ready is None else ready
    if up > created:
        c.bar(node, PROVISIONING, created, up, top, NODE_ROW - 2,
              f"{name} ({tier}): provisioning {clock(created)} → {clock(up)}").set("data-tier", tier)
    if ready is not None and gone > ready:
        c.bar(node, READY, ready, gone, top, NODE_ROW - 2,
              f"{name} ({tier}): Ready {clock(ready)} → {clock(gone)}").set("data-tier", tier)
    if tier in TIER_MARKS and gone > created:
        # Over both bars, and transparent to the pointer so that their tooltips still show.
        ET.SubElement(node, "rect", {
            "class": "tier-mark", "x": f"{c.x(created)}", "y": f"{top}",
            "width": f"{max(0.5, round((gone - created) * c.scale, 2))}", "height": f"{NODE_ROW - 2}",
            "fill": f"url(#{_pattern_id(tier)})", "pointer-events": "none", "data-tier": tier})


def _pattern_id(tier: str) -> str:
    return f"tier-{tier}"


def _tier_patterns(svg: ET.Element, tiers: Sequence[str]) -> None:
    """The stripes of each marked tier drawn, as SVG patterns (only those drawn, so that a picture without them has
    no ``defs``)."""
    marked = [tier for tier in TIER_MARKS if tier in tiers]
    if not marked:
        return
    defs = ET.SubElement(svg, "defs")
    for tier in marked:
        pattern = ET.SubElement(defs, "pattern", {"id": _pattern_id(tier), "patternUnits": "userSpaceOnUse",
                                                  "width": "6", "height": "6"})
        ET.SubElement(pattern, "path", {"d": TIER_MARKS[tier][0], "stroke": "white", "stroke-width": "1.5",
                                        "stroke-opacity": "0.85"})


def pool_tiers(results: Sequence[RunResult], pools: Sequence[str]) -> dict[str, str]:
    """Each pool's tier, from the scenario's pools (a pool of no scenario, on-demand: :func:`report.tier_of`)."""
    known: dict[str, NodePool] = pools_by_name(results[0])
    return {pool: tier_of(pool, known) for pool in pools}


def drawn_tiers(results: Sequence[RunResult], tiers: dict[str, str]) -> list[str]:
    """The tiers some node of the runs ran in (the legend and the patterns cover only those)."""
    return sorted({tiers.get(n.pool, ON_DEMAND) for r in results for n in r.nodes.values()})


def _axis(g: ET.Element, c: _Canvas, top: float, bottom: float) -> float:
    step = tick_minutes(c.span)
    axis = ET.SubElement(g, "g", {"class": "axis"})
    ET.SubElement(axis, "line", {"x1": f"{LEFT}", "x2": f"{WIDTH - RIGHT}", "y1": f"{bottom}", "y2": f"{bottom}",
                                 "stroke": "#555"})
    minute = 0
    while minute * 60 <= c.span + 1e-9:
        x = c.x(minute * 60.0)
        tick = ET.SubElement(axis, "g", {"class": "tick", "data-minutes": str(minute)})
        ET.SubElement(tick, "line", {"x1": f"{x}", "x2": f"{x}", "y1": f"{top}", "y2": f"{bottom + 4}",
                                     "stroke": "#ddd" if minute else "#555"})
        _text(tick, x, bottom + 16, str(minute), anchor="middle", cls="tick-label")
        minute += step
    _text(axis, WIDTH - RIGHT, bottom + 30, "simulated time (minutes)", anchor="end")
    return bottom + 40


def _panel(svg: ET.Element, c: _Canvas, result: RunResult, pools: list[str], y: float,
           tiers: dict[str, str]) -> float:
    g = ET.SubElement(svg, "g", {"class": "run", "id": f"run-{result.mode}", "data-mode": result.mode})
    outcome, bill = _panel_title(result)
    title = ET.SubElement(g, "text", {"class": "run-title", "x": "8", "y": f"{y + 14}",
                                      "style": f"{FONT};font-weight:bold"})
    title.text = outcome
    # The bill on a second line of the same caption: a tspan, so a reader of the title gets both.
    ET.SubElement(title, "tspan", {"x": "8", "dy": "14", "style": "font-weight:normal"}).text = bill
    top = y + 38
    # The axis's grid lines go first so that the bars are drawn over them.
    grid = ET.SubElement(g, "g")
    y = _workloads(g, c, result, top, len(set(tiers.values())) > 1)
    y = _nodes(g, c, result, pools, y + LANE_GAP, tiers)
    return _axis(grid, c, top, y)


def _legend(svg: ET.Element, y: float, tiers: Sequence[str]) -> float:
    legend = ET.SubElement(svg, "g", {"class": "legend"})
    x = 8.0
    items: list[tuple[str, str, str, str | None]] = [(kind, fill, text, None) for kind, (fill, text) in STYLE.items()]
    items += [(tier, STYLE[READY][0], TIER_MARKS[tier][1], tier) for tier in TIER_MARKS if tier in tiers]
    for kind, fill, text, tier in items:
        item = ET.SubElement(legend, "g", {"class": "legend-item", "data-kind": kind})
        ET.SubElement(item, "rect", {"x": f"{x}", "y": f"{y}", "width": "12", "height": "10", "fill": fill})
        if tier is not None:
            ET.SubElement(item, "rect", {"x": f"{x}", "y": f"{y}", "width": "12", "height": "10",
                                         "fill": f"url(#{_pattern_id(tier)})", "data-tier": tier})
        _text(item, x + 16, y + 9, text)
        x += 16 + 6.2 * len(text) + 18
        if x > WIDTH - 200:
            x, y = 8.0, y + 18
    return y + 22


def render_svg(results: Sequence[RunResult]) -> str:
    """The runs (one scenario, e.g. gangscale and the baseline) as one SVG document on one time axis."""
    if not results:
        raise ValueError("nothing to draw: no runs")
    span = max(60.0, *(r.end - r.start for r in results))
    canvas = _Canvas(span)
    pools = pools_of(results)
    tiers = pool_tiers(results, pools)
    drawn = drawn_tiers(results, tiers)
    svg = ET.Element("svg", {"xmlns": SVG_NS, "class": "gangscale-demo",
                             "data-scenario": results[0].scenario.name})
    ET.SubElement(svg, "title").text = f"gangscale demo: scenario {results[0].scenario.name}"
    _tier_patterns(svg, drawn)
    background = ET.SubElement(svg, "rect", {"x": "0", "y": "0", "width": "100%", "height": "100%", "fill": "white"})
    _text(svg, 8, 20, f"gangscale demo — scenario {results[0].scenario.name}", weight="bold", cls="heading")
    y = 32.0
    for result in results:
        y = _panel(svg, canvas, result, pools, y, tiers) + 8
    height = _legend(svg, y, drawn)
    svg.set("viewBox", f"0 0 {WIDTH} {height:g}")
    svg.set("width", str(WIDTH))
    svg.set("height", f"{height:g}")
    background.set("height", f"{height:g}")
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode") + "\n"
