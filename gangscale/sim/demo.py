"""``gangscale demo``: run a scenario on the simulated cluster and print what happened.

The default scenario is the TPU multislice tutorial. ``--baseline`` runs the scenario a second time with the
classic setup (Kueue admits on quota alone, a per-pod autoscaler adds nodes for pending pods) and prints the
two side by side. Simulated time runs as fast as the machine allows unless ``--speed N`` paces it at N
simulated seconds per real second. The controller logs to stderr at WARNING unless ``--verbose``.

While a run goes, its progress is shown on stderr (:mod:`gangscale.sim.progress`; none with ``--quiet``).
``--plot FILE`` draws the runs as an SVG picture (:mod:`gangscale.sim.plot`). ``--json -`` writes the JSON to
stdout and moves everything human (scenario, timelines, tables) to stderr, so that stdout is JSON alone.

Exit status: 0 when every workload finished under gangscale (but those the scenario's ``expectUnfinished`` names),
1 when some did not (the tables say which),
2 for a scenario that cannot be loaded or a flag that cannot be honoured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import TextIO

from gangscale.sim.plot import render_svg
from gangscale.sim.progress import Progress, run_with_progress
from gangscale.sim.report import render_comparison, render_table, render_timeline, to_json
from gangscale.sim.runner import BASELINE, GANGSCALE, RunResult
from gangscale.sim.scenario import Scenario, ScenarioError, load_scenario

#: ``--json -``: the JSON goes to stdout.
STDOUT = "-"


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    json_path: str | None = getattr(args, "json_path", None)
    plot_path: str | None = getattr(args, "plot_path", None)
    out = out or (sys.stderr if json_path == STDOUT else sys.stdout)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"gangscale demo: {exc}", file=sys.stderr)
        return 2
    problem = _check_flags(args, plot_path)
    if problem:
        print(f"gangscale demo: {problem}", file=sys.stderr)
        return 2
    print(f"scenario {scenario.name}: {scenario.description.strip()}\n", file=out)
    provider = getattr(args, "provider", "simulated")
    modes = (GANGSCALE, BASELINE) if args.baseline else (GANGSCALE,)
    progress = Progress.for_stream(sys.stderr, quiet=args.quiet)
    results = asyncio.run(simulate(scenario, modes, speed=args.speed, quiet=args.quiet, out=out, provider=provider,
                                   progress=progress))
    if len(results) > 1:
        print(render_comparison(results), file=out)
    if plot_path:
        Path(plot_path).write_text(render_svg(results), encoding="utf-8")
        print(f"\npicture written to {plot_path}", file=out)
    if json_path:
        _write_json(json_path, scenario, results, out)
    expected = set(scenario.expect_unfinished)
    return 0 if all(w.split("/", 1)[-1] in expected for r in results if r.mode == GANGSCALE
                    for w in r.unfinished()) else 1


def _check_flags(args: argparse.Namespace, plot_path: str | None) -> str | None:
    """Why the flags cannot be honoured, before anything runs; None when they can."""
    if args.speed is not None and args.speed <= 0:
        return "--speed must be positive"
    if getattr(args, "provider", "simulated") != "simulated" and args.baseline:
        return "--baseline compares on the simulated provider only"
    if plot_path and plot_path.lower().endswith(".png"):
        return ("--plot draws SVG only (no PNG renderer is bundled): give a file ending in .svg, and convert it if "
                "you need PNG (e.g. rsvg-convert -o demo.png demo.svg)")
    return None


def _write_json(path: str, scenario: Scenario, results: list[RunResult], out: TextIO) -> None:
    text = json.dumps({"scenario": scenario.name, "runs": [to_json(r) for r in results]}, indent=2)
    if path == STDOUT:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    Path(path).write_text(text)
    print(f"\nJSON written to {path}", file=out)


async def simulate(scenario: Scenario, modes: tuple[str, ...], *, speed: float | None, quiet: bool,
                   out: TextIO, provider: str = "simulated", progress: Progress | None = None) -> list[RunResult]:
    results: list[RunResult] = []
    for mode in modes:
        started = time.perf_counter()
        result = await run_with_progress(scenario, mode=mode, speed=speed, provider=provider, progress=progress)
        results.append(result)
        if not quiet:
            print(render_timeline(result) + "\n", file=out)
        print(f"Workloads ({mode}; {result.end - result.start:,.0f} simulated seconds in "
              f"{time.perf_counter() - started:.1f} s)", file=out)
        print(render_table(result) + "\n", file=out, flush=True)
    return results
