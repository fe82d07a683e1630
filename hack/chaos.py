#!/usr/bin/env python3
"""A fault campaign against real processes: two ``gangscale run`` replicas contending for the leader lease,
against ``gangscale sim apiserver --control``, with the simulated cloud inside them, or (``--provider gke``) the
``gke`` provider against a fake GKE and Compute Engine (``gangscale.sim.gcp.FakeGcp``) in the harness process, or
(``--provider aws``) the ``aws`` provider against a fake EC2 (``gangscale.sim.aws.FakeEc2``) in the harness process.

    python hack/chaos.py [--runs 20] [--seed 1] [--provider simulated|gke|aws|both|all] [--jobs 1] [--fault-seconds 15]
                         [--settle-guard 90] [--reclaims|--no-reclaims] [--keep DIR] [--json FILE]

Run *i* plays the schedule of seed ``seed + i`` (``chaoslib.plan``): gangs (ProvisioningRequests) created and
deleted, replicas SIGKILLed, SIGTERMed and SIGSTOPped at chosen moments, API-server faults (500, 429 with
Retry-After, 409, dropped and 410-expired watches, failed Lease writes, latency), and cloud faults: with the
simulated provider in each replica start's pool file (stockout, partial grant, lost responses, transient errors,
never-Ready nodes, latency, and, unless ``--no-reclaims``, spot reclaims of the TPU and GPU pools, which are then
spot capacity: a node turned NotReady by its notice and deleted a moment later); with gke in the fake cloud's knobs
(stockouts, lost answers, 503, 429 with Retry-After and HTML 500 answers, slow operations, a slice with a host that
never turns Ready, never-Ready VMs); with aws in the fake EC2's knobs (stockouts, full vCPU quotas, throttling,
injected error codes of each error class, lost answers, slow answers, held reads, and, unless ``--no-reclaims``,
spot reclaims of the TPU (Trainium) and GPU pools through the fake's interruption notices). Cloud traffic is judged
against the cloud's own documents (Google's discovery documents, botocore's EC2 model) and for leadership.
``--provider both`` takes gke for odd seeds; ``--provider all`` cycles simulated, gke and aws by ``seed % 3``.
Then the faults stop, both replicas are rolled onto clean pool files,
and the run waits until everything settles and checks the invariants of ``chaoslib.checks``. One line per run,
then ``chaos: N/M runs clean``; exit status 1 if any run found a violation. Logs of a run with violations are kept
(under ``--keep``, or a temporary directory that is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaoslib.plan import PROVIDERS, provider_of
from chaoslib.run import Outcome, run_once


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="number of runs (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run; run i uses seed+i (default 1)")
    parser.add_argument("--provider", choices=PROVIDERS, default="simulated",
                        help="the replicas' provider: simulated (default), gke (against a fake GKE and Compute Engine "
                             "in this process), aws (against a fake EC2 in this process), both (gke for odd seeds, "
                             "simulated for even ones), or all (simulated, gke, aws by seed %% 3)")
    parser.add_argument("--fault-seconds", type=float, default=15.0, help="length of the fault phase (default 15)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs played at the same time, each with its own processes and ports (default 1); the "
                             "processes mostly wait, so 2 on a 2-core machine halves a short campaign")
    parser.add_argument("--settle-guard", type=float, default=90.0,
                        help="how long the end state may take to settle before the run fails (default 90)")
    parser.add_argument("--reclaims", action=argparse.BooleanOptionalAction, default=True,
                        help="simulated and aws runs: the TPU and GPU pools are spot and the cloud reclaims their "
                             "nodes during the fault phase (default: on)")
    parser.add_argument("--keep", type=Path, default=None, help="keep every run's logs under this directory")
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    return parser.parse_args(argv)


def totals(outcomes: list[Outcome]) -> str:
    def total(attr: str) -> int:
        return sum(int(getattr(o, attr)) for o in outcomes)

    clouds = {name: [o for o in outcomes if o.provider == name] for name in ("gke", "aws")}
    if any(clouds.values()):
        simulated = sum(o.cloud_faults for o in outcomes if o.provider == "simulated")
        fakes = {"gke": ("the fake Google Cloud", "calls or slices", "Google's discovery documents"),
                 "aws": ("the fake EC2", "calls", "botocore's EC2 model")}
        shown = [(name, runs, *fakes[name]) for name, runs in clouds.items() if runs]
        faults = (f"{total('cloud_faults')} cloud faults ({simulated} in simulated starts' pool files, " + ", ".join(
            f"{sum(o.cloud_faults for o in runs)} in {fake} acting on {sum(o.cloud_faults_acted for o in runs)} {what}"
            for _, runs, fake, what, _ in shown) + f") over {total('starts')} process starts")
        judged = (f"{total('changes_judged')} changes judged (" + ", ".join(
            f"{sum(o.cloud_changes_judged for o in runs)} to {fake}" for _, runs, fake, _, _ in shown)
            + f"; {total('late_after_pause')} late after a pause), " + ", ".join(
            f"{sum(o.exchanges_checked for o in runs)} cloud exchanges checked against {model}"
            for _, runs, _, _, model in shown))
        runs = f"{sum(1 for o in outcomes if o.provider == 'simulated')} simulated, " + " and ".join(
            f"{len(runs)} {name}" for name, runs, *_ in shown) + " runs, "
    else:
        faults = f"{total('cloud_faults')} cloud faults over {total('starts')} process starts"
        judged = f"{total('changes_judged')} changes judged ({total('late_after_pause')} late after a pause)"
        runs = ""
    faults += f", {total('reclaims')} nodes reclaimed ({total('revoked')} requests revoked)"
    return (f"chaos totals: {runs}{total('gangs')} gangs ({total('deletes')} deleted), {total('kills')} SIGKILLs, "
            f"{total('terms')} SIGTERMs, {total('pauses')} SIGSTOPs, {total('api_faults_acted')} API fault hits "
            f"({total('api_faults')} faults), {faults}, {total('leaders')} leaderships, {judged}, "
            f"{sum(len(o.violations) for o in outcomes)} violations")


async def campaign(args: argparse.Namespace) -> int:
    outcomes: list[Outcome] = []
    slots = asyncio.Semaphore(max(1, args.jobs))

    async def one(seed: int) -> None:
        async with slots:
            workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-")) if args.keep is None \
                else args.keep / f"seed-{seed}"
            workdir.mkdir(parents=True, exist_ok=True)
            outcome = await run_once(seed, workdir, provider=provider_of(seed, args.provider),
                                     fault_seconds=args.fault_seconds, settle_guard=args.settle_guard,
                                     reclaims=args.reclaims)
        outcomes.append(outcome)
        print(outcome.line(), flush=True)
        for violation in outcome.violations:
            print(f"    {violation}", flush=True)
        if outcome.violations:
            print(f"    logs: {workdir}", flush=True)
        elif args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)

    await asyncio.gather(*(one(seed) for seed in range(args.seed, args.seed + args.runs)))
    outcomes.sort(key=lambda o: o.seed)
    clean = sum(1 for o in outcomes if o.clean)
    print(totals(outcomes))
    print(f"chaos: {clean}/{len(outcomes)} runs clean")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")
    return 0 if clean == len(outcomes) else 1


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(campaign(parse(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
