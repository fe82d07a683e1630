#!/usr/bin/env python3
"""Benchmark the controller end to end: PR creation to ``Provisioned=True``, with zero provider delay.

    python hack/bench_controller.py [--counts 1,100,1000] [--batch-idle S] [--json FILE]

For each count N, a fresh embedded API server, simulated cloud (``provisionSeconds: 0``) and controller run
in this process on the wall clock. N ProvisioningRequests (one pod needing a whole 8-GPU node each, so N new
nodes) are created at once by concurrent clients; a watch records when each one's ``Provisioned=True``
arrives. Latency per PR = that moment minus the moment its create call was sent (client-side, monotonic
clock: the server's creationTimestamp has whole-second resolution). Reported: median, p90, max, the
wall time until the last one, and the process's peak RSS. Everything shares one Python process and the
machine's cores, so the API server's own work is included in the figures, and it dominates them: the
embedded server is pure Python (a server-side apply costs it ~20 ms), so the time the controller itself
spends in its passes is printed separately.

``--batch-idle`` sets the controller's batch window (``--batch-max`` is 10x it); the default 1 s is the
production default, 0 plans on the first event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gangscale.clock import SystemClock  # noqa: E402
from gangscale.config import parse_pool_yaml  # noqa: E402
from gangscale.controller.loop import Controller  # noqa: E402
from gangscale.controller.settings import Settings  # noqa: E402
from gangscale.kube.client import make_http  # noqa: E402
from gangscale.kube.reflector import Reflector, ReflectorEvent  # noqa: E402
from gangscale.kube.resources import PROVREQS  # noqa: E402
from gangscale.providers.simulated import SimulatedProvider  # noqa: E402
from gangscale.sim.apiserver import EmbeddedAPIServer  # noqa: E402

POOLS = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 5000
    simulated: {provisionSeconds: 0}
"""
TEMPLATE = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x",
                                                  "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}


def provreq(i: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": f"pr-{i:05d}"},
            "spec": {"provisioningClassName": "atomic-scale-up.gangscale.io",
                     "podSets": [{"podTemplateRef": {"name": "worker"}, "count": 1}]}}


async def run_one(count: int, batch_idle: float, tmp: Path) -> dict[str, Any]:
    server = EmbeddedAPIServer(watch_window=max(1000, count * 20))
    await server.start()
    kubeconfig = server.write_kubeconfig(tmp / f"kubeconfig-{count}")
    clients = [await make_http(str(kubeconfig), user_agent=name) for name in ("bench", "gangscale", "cloud")]
    bench, ctl_http, cloud_http = clients
    clock = SystemClock()
    pools = parse_pool_yaml(POOLS).pools
    provider = SimulatedProvider(cloud_http, pools, clock)
    settings = Settings(batch_idle=batch_idle, batch_max=batch_idle * 10)
    controller = Controller(ctl_http, provider, pools, settings=settings, clock=clock)
    sent: dict[str, float] = {}
    done: dict[str, float] = {}
    finished = asyncio.Event()

    def on_event(event: ReflectorEvent) -> None:
        name = event.obj["metadata"]["name"]
        if name in done or name not in sent:
            return
        for cond in (event.obj.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Provisioned" and cond["status"] == "True":
                done[name] = time.perf_counter()
                if len(done) == count:
                    finished.set()

    watch = Reflector(bench, PROVREQS)
    watch.add_handler(on_event)
    tasks = [asyncio.create_task(controller.run()), asyncio.create_task(watch.run())]
    try:
        await bench.request("POST", "/api/v1/namespaces/default/podtemplates", body=TEMPLATE)
        await watch.synced.wait()
        while not controller.ready:  # noqa: ASYNC110 - a plain flag; polling it briefly is enough here
            await asyncio.sleep(0.01)
        slots = asyncio.Semaphore(64)

        async def create(i: int) -> None:
            async with slots:
                name = f"pr-{i:05d}"
                sent[name] = time.perf_counter()
                await bench.request("POST", "/apis/autoscaling.x-k8s.io/v1/namespaces/default/provisioningrequests",
                                    body=provreq(i))

        started = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(count)))
        await asyncio.wait_for(finished.wait(), timeout=600)
        wall = time.perf_counter() - started
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await provider.aclose()
        for client in clients:
            await client.api_client.close()
        await server.stop()
    latencies = sorted(done[name] - sent[name] for name in done)
    calls = Counter((r.user_agent, r.verb, r.resource + (f"/{r.subresource}" if r.subresource else ""))
                    for r in server.requests if r.verb not in ("watch", "list", "get"))
    nodes = sum(1 for call in provider.calls if call.operation == "obtain" for _ in range(call.nodes_created))
    return {"prs": count, "batch_idle_s": batch_idle, "median_s": round(statistics.median(latencies), 4),
            "p90_s": round(latencies[int(0.9 * (len(latencies) - 1))], 4), "max_s": round(latencies[-1], 4),
            "wall_s": round(wall, 3), "nodes_created": nodes, "passes": controller.passes,
            "controller_pass_s": round(controller.pass_seconds, 3),
            "writes_per_pr": {f"{agent} {verb} {res}": round(n / count, 2) for (agent, verb, res), n in sorted(calls.items())},
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.counts:
            row = await run_one(count, args.batch_idle, Path(tmp))
            rows.append(row)
            print(f"{row['prs']:>5} PRs  batch-idle {row['batch_idle_s']:g}s  "
                  f"median {row['median_s']*1000:8.1f} ms  "
                  f"p90 {row['p90_s']*1000:8.1f} ms  max {row['max_s']*1000:8.1f} ms  "
                  f"last after {row['wall_s']:.2f} s  "
                  f"nodes {row['nodes_created']}  passes {row['passes']} ({row['controller_pass_s']:.2f} s in passes)  "
                  f"peak RSS {row['peak_rss_mib']} MiB",
                  flush=True)
            print("       writes per PR: " + ", ".join(f"{k} {v:g}" for k, v in row["writes_per_pr"].items()), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1,100,1000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--batch-idle", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
