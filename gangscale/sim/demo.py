"""``gangscale demo``: run a scenario on the simulated cluster and print what happened.

The default scenario is the TPU multislice tutorial. ``--baseline`` runs the scenario a second time with the
classic setup (Kueue admits on quota alone, a per-pod autoscaler adds nodes for pending pods) and prints the
two side by side. Simulated time runs as fast as the machine allows unless ``--speed N`` paces it at N
simulated seconds per real second. The controller logs to stderr at WARNING unless ``--verbose``.

Exit status: 0 when every workload finished under gangscale, 1 when some did not (the tables say which),
2 for a scenario that cannot be loaded.
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

from gangscale.sim.report import render_comparison, render_table, render_timeline, to_json
from gangscale.sim.runner import BASELINE, GANGSCALE, RunResult, run_scenario
from gangscale.sim.scenario import Scenario, ScenarioError, load_scenario


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"gangscale demo: {exc}", file=sys.stderr)
        return 2
    if args.speed is not None and args.speed <= 0:
        print("gangscale demo: --speed must be positive", file=sys.stderr)
        return 2
    print(f"scenario {scenario.name}: {scenario.description.strip()}\n", file=out)
    provider = getattr(args, "provider", "simulated")
    if provider != "simulated" and args.baseline:
        print("gangscale demo: --baseline compares on the simulated provider only", file=sys.stderr)
        return 2
    modes = (GANGSCALE, BASELINE) if args.baseline else (GANGSCALE,)
    results = asyncio.run(simulate(scenario, modes, speed=args.speed, quiet=args.quiet, out=out, provider=provider))
    if len(results) > 1:
        print(render_comparison(results), file=out)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"scenario": scenario.name,
                                                    "runs": [to_json(r) for r in results]}, indent=2))
        print(f"\nJSON written to {args.json_path}", file=out)
    return 0 if all(r.finished for r in results if r.mode == GANGSCALE) else 1


async def simulate(scenario: Scenario, modes: tuple[str, ...], *, speed: float | None, quiet: bool,
                   out: TextIO, provider: str = "simulated") -> list[RunResult]:
    results: list[RunResult] = []
    for mode in modes:
        started = time.perf_counter()
        result = await run_scenario(scenario, mode=mode, speed=speed, provider=provider)
        results.append(result)
        if not quiet:
            print(render_timeline(result) + "\n", file=out)
        print(f"Workloads ({mode}; {result.end - result.start:,.0f} simulated seconds in "
              f"{time.perf_counter() - started:.1f} s)", file=out)
        print(render_table(result) + "\n", file=out, flush=True)
    return results
