"""``gangscale demo --plot``: one SVG picture of the runs, drawn by hand (no plotting library).

One panel per run (gangscale, then the baseline), stacked on one shared time axis in simulated minutes:

- **workloads**, one row each in scenario order: *queued* (submitted, or put back by a preemption; no quota
  yet), *quota reserved* (waiting for admission: the admission check, e.g. gangscale's ProvisioningRequest),
  *waiting for nodes* (admitted, no pod running yet), *partial gang* (some pods run, not all: paid for
  and wasted), *running* (every pod runs) until it finished;
- **nodes per pool**, one lane per pool with one thin bar per node: *provisioning* from its creation until it
  turned Ready, *ready* until it was deleted (or the run ended). Bars share a row only when they do not overlap,
  so the bars crossing an instant are the pool's node count at that instant.

:func:`render_svg` is pure (results in, SVG text out). Elements carry ``class`` and ``data-*`` attributes (run
mode, workload, pool, node, segment kind, tick minutes) so that a program can read the picture back.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from gangscale.sim.report import clock, rows, totals
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

WIDTH = 1000
LEFT = 190      # room for the workload and pool labels
RIGHT = 24
ROW = 18        # a workload row
NODE_ROW = 7    # a node row inside a pool lane
LANE_GAP = 6
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


def _panel_title(result: RunResult) -> str:
    t = totals(result, rows(result))
    return (f"{result.mode}: {t.finished}/{t.workloads} finished, makespan {clock(t.makespan)}, "
            f"{t.nodes_created} nodes created, {t.billed_accelerator_hours:.2f} accelerator-hours billed, "
            f"{t.lost_accelerator_hours:.2f} lost to partial gangs")


def _workloads(g: ET.Element, c: _Canvas, result: RunResult, y: float) -> float:
    _text(g, 8, y + 12, "workloads", weight="bold")
    y += ROW
    for subject in result.workloads:
        name = subject.split("/", 1)[-1]
        row = ET.SubElement(g, "g", {"class": "workload", "data-workload": name})
        _text(row, LEFT - 8, y + 12, name, anchor="end")
        for s in workload_segments(result, subject):
            c.bar(row, s.kind, s.start, s.end, y + 3, ROW - 6,
                  f"{name}: {STYLE[s.kind][1]} {clock(s.start)} → {clock(s.end)}")
        y += ROW
    return y


def _nodes(g: ET.Element, c: _Canvas, result: RunResult, pools: list[str], y: float) -> float:
    _text(g, 8, y + 12, "nodes per pool", weight="bold")
    y += ROW
    for pool in pools:
        lane = ET.SubElement(g, "g", {"class": "pool", "data-pool": pool})
        packed = node_rows(result, pool)
        height = max(1, len(packed)) * NODE_ROW
        count = sum(len(r) for r in packed)
        _text(lane, LEFT - 8, y + min(height, ROW) / 2 + 8, f"{pool} ({count} node{'' if count == 1 else 's'} created)",
              anchor="end")
        ET.SubElement(lane, "rect", {"class": "lane", "x": f"{LEFT}", "y": f"{y}", "width": f"{WIDTH - LEFT - RIGHT}",
                                     "height": f"{height}", "fill": "#f4f5f7"})
        for i, packed_row in enumerate(packed):
            for name, created, ready, gone in packed_row:
                node = ET.SubElement(lane, "g", {"class": "node", "data-node": name, "data-pool": pool})
                top = y + i * NODE_ROW + 1
                up = gone if ready is None else ready
                if up > created:
                    c.bar(node, PROVISIONING, created, up, top, NODE_ROW - 2,
                          f"{name}: provisioning {clock(created)} → {clock(up)}")
                if ready is not None and gone > ready:
                    c.bar(node, READY, ready, gone, top, NODE_ROW - 2, f"{name}: Ready {clock(ready)} → {clock(gone)}")
        y += max(height, ROW) + LANE_GAP
    return y


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


def _panel(svg: ET.Element, c: _Canvas, result: RunResult, pools: list[str], y: float) -> float:
    g = ET.SubElement(svg, "g", {"class": "run", "id": f"run-{result.mode}", "data-mode": result.mode})
    _text(g, 8, y + 14, _panel_title(result), weight="bold", cls="run-title")
    top = y + 24
    # The axis's grid lines go first so that the bars are drawn over them.
    grid = ET.SubElement(g, "g")
    y = _workloads(g, c, result, top)
    y = _nodes(g, c, result, pools, y + LANE_GAP)
    return _axis(grid, c, top, y)


def _legend(svg: ET.Element, y: float) -> float:
    legend = ET.SubElement(svg, "g", {"class": "legend"})
    x = 8.0
    for kind, (fill, text) in STYLE.items():
        item = ET.SubElement(legend, "g", {"class": "legend-item", "data-kind": kind})
        ET.SubElement(item, "rect", {"x": f"{x}", "y": f"{y}", "width": "12", "height": "10", "fill": fill})
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
    svg = ET.Element("svg", {"xmlns": SVG_NS, "class": "gangscale-demo",
                             "data-scenario": results[0].scenario.name})
    ET.SubElement(svg, "title").text = f"gangscale demo: scenario {results[0].scenario.name}"
    background = ET.SubElement(svg, "rect", {"x": "0", "y": "0", "width": "100%", "height": "100%", "fill": "white"})
    _text(svg, 8, 20, f"gangscale demo — scenario {results[0].scenario.name}", weight="bold", cls="heading")
    y = 32.0
    for result in results:
        y = _panel(svg, canvas, result, pools, y) + 8
    height = _legend(svg, y)
    svg.set("viewBox", f"0 0 {WIDTH} {height:g}")
    svg.set("width", str(WIDTH))
    svg.set("height", f"{height:g}")
    background.set("height", f"{height:g}")
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode") + "\n"
