#!/usr/bin/env python3
"""Benchmark the controller end to end: ProvisioningRequest creation to ``Provisioned=True``, zero-delay cloud.

    python hack/bench_controller.py [--counts 200,1000] [--nodes-per-pr 1] [--single 20]
                                    [--apiserver process|inprocess] [--kubeconfig FILE]
                                    [--provider simulated|gke|aws] [--batch-idle S] [--json FILE]

The API server runs as its own process (``gangscale sim apiserver``), as a kube-apiserver does; the controller
(``Controller`` with default settings, ``batch_idle`` 1 s) and the simulated cloud (``provisionSeconds: 0``)
run in this process, with the benchmark's own client. ``--apiserver inprocess`` puts the embedded server in
this process too (one core for everything); ``--kubeconfig`` points at another server, e.g. a real
kube-apiserver with the ProvisioningRequest CRD installed. ``--provider gke`` and ``--provider aws`` run the same
pool on the gke provider against ``gangscale sim gcp``, or on the aws provider (one ``p5.48xlarge`` instance per
PR) against ``gangscale sim aws``, the fake cloud in a process of its own (zero delays).

Two measurements:

- **single**: ``--single`` PRs one after another on an idle controller, each created only when the previous
  one is Provisioned: the latency of one request (p50, p90, max);
- **burst**: for each count N, N PRs created at once by 64 concurrent clients; per PR, the time from its
  create call to the watch event that shows ``Provisioned=True`` (monotonic clock, client side: the server's
  timestamps have whole-second resolution), and the wall time until the last one.

Each PR is one pod set of ``--nodes-per-pr`` pods that each need a whole 8-GPU node, so N·nodes-per-pr nodes
are made. Also reported: the controller's passes and the time spent in them (``Controller.pass_seconds``),
the writes per PR by client and kind (counted at the clients), this process's peak RSS, the CPU seconds of
each process over the run, and with a real provider its cloud calls per PR by kind (at the provider's client, less
those of ``start``, shown apart); with aws also ``DescribeInstances`` by filter and the mean time of each call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gangscale.clock import SystemClock  # noqa: E402
from gangscale.config import parse_pool_yaml  # noqa: E402
from gangscale.controller.logic.settings import Settings  # noqa: E402
from gangscale.controller.loop import Controller  # noqa: E402
from gangscale.kube.client import make_http  # noqa: E402
from gangscale.kube.reflector import Reflector, ReflectorEvent  # noqa: E402
from gangscale.kube.resources import PROVREQS  # noqa: E402
from gangscale.kube.transport import KubeHTTP  # noqa: E402
from gangscale.providers.aws import AwsProvider  # noqa: E402
from gangscale.providers.gke.auth import StaticToken  # noqa: E402
from gangscale.providers.gke.client import Endpoints  # noqa: E402
from gangscale.providers.gke.provider import GkeProvider  # noqa: E402
from gangscale.providers.simulated import SimulatedProvider  # noqa: E402
from gangscale.sim.apiserver import EmbeddedAPIServer  # noqa: E402

POOLS = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 100000
    simulated: {provisionSeconds: 0}
"""
#: The same pool on the gke provider: VMs added to the existing node pool "gpu" by one resize request per PR,
#: against ``gangscale sim gcp`` (zero delays) in a process of its own.
GKE_POOLS = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: us-central1-a
    maxUnits: 100000
    gke: {project: demo-project, location: us-central1, cluster: bench, mode: resize, nodePool: gpu}
"""
#: The same pool on the aws provider: one p5.48xlarge instance (8 GPUs) per unit, one instant CreateFleet per PR,
#: against ``gangscale sim aws`` (zero delays, unlimited stock) in a process of its own.
AWS_POOLS = """
nodePools:
  - name: gpu
    machineType: p5.48xlarge
    zone: us-east-1a
    maxUnits: 100000
    aws: {region: us-east-1, cluster: bench, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0abc}
"""
#: What the fake EC2 takes (it checks no signature's key).
AWS_KEYS = ("fake-access-key", "fake-secret-key")
FAKES = {"gke": ("gcp", GKE_POOLS, "fake GCP listening on"), "aws": ("aws", AWS_POOLS, "fake EC2 listening on")}
TEMPLATE = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x",
                                                  "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}
PR_PATH = "/apis/autoscaling.x-k8s.io/v1/namespaces/default/provisioningrequests"
HANG_GUARD = 900.0


def provreq(name: str, pods: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "metadata": {"name": name},
            "spec": {"provisioningClassName": "atomic-scale-up.gangscale.io",
                     "podSets": [{"podTemplateRef": {"name": "worker"}, "count": pods}]}}


def call_kind(url: str) -> str:
    """A Google API call's resource kind: its last collection, and ``{id}`` when it names one object
    (``projects/P/zones/Z/instanceGroupManagers/M/resizeRequests/R`` -> ``resizeRequests/{id}``)."""
    parts = url.split("?", maxsplit=1)[0].split("/projects/", 1)[-1].split("/")[1:]
    collections, ids = parts[0::2], parts[1::2]
    if not collections:
        return "projects/{id}"
    verb = collections[-1].split(":", 1)
    return collections[-1] + ("/{id}" if len(ids) == len(collections) else "") if len(verb) == 1 else \
        f"{verb[0]}:{verb[1]}"


def count_describes(provider: AwsProvider, kinds: Counter[str], seconds: Counter[str]) -> None:
    """Count the provider's ``DescribeInstances`` calls by the filter they send (what each one is for), and add
    up the time of each EC2 call by the same kinds (request to parsed answer, as the provider waits for it)."""
    for ec2 in provider.clients.values():
        original = ec2.call

        async def call(operation: str, original: Any = original, **params: Any) -> Any:
            kind = operation
            if operation == "DescribeInstances":
                kind = ",".join(str(f["Name"]) for f in params.get("Filters") or [])
                kinds[kind] += 1
            started = time.perf_counter()
            try:
                return await original(operation, **params)
            finally:
                seconds[kind] += time.perf_counter() - started

        ec2.call = call  # type: ignore[method-assign]


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) of this process and of each child process, by its ``gangscale`` command."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {"this process": usage.ru_utime + usage.ru_stime}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                name = " ".join(a.decode() for a in args[3:5]) if args[1:3] == [b"-m", b"gangscale.cli"] else pid
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def resource_of(path: str) -> str:
    """``resource`` or ``resource/subresource`` of an API path."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    return parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "") if parts else "?"


def count_writes(http: KubeHTTP, agent: str, counts: Counter[str]) -> None:
    """Count ``http``'s writes by (client, method, resource) on the client side (works against any server)."""
    original = http.request

    async def request(method: str, path: str, **kwargs: Any) -> Any:
        if method != "GET":
            counts[f"{agent} {method} {resource_of(path)}"] += 1
        return await original(method, path, **kwargs)

    http.request = request  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def apiserver(mode: str, kubeconfig: str | None, tmp: Path, window: int) -> AsyncIterator[str]:
    """A kubeconfig for the server the benchmark runs against."""
    if kubeconfig:
        yield kubeconfig
        return
    path = tmp / "kubeconfig"
    if mode == "inprocess":
        server = EmbeddedAPIServer(watch_window=window)
        await server.start()
        server.write_kubeconfig(path)
        try:
            yield str(path)
        finally:
            await server.stop()
        return
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", "0", "--kubeconfig", str(path),
        "--watch-window", str(window), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    try:
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            if not line:
                raise RuntimeError("gangscale sim apiserver exited before serving")
            if b"stop with Ctrl-C" in line:
                break
        drain = asyncio.create_task(proc.stdout.read())
        yield str(path)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.wait(), 30)
        with contextlib.suppress(NameError):
            await drain


@dataclass
class Bench:
    """A controller and simulated cloud against one server, and the benchmark's client watching the PRs."""

    kubeconfig: str
    batch_idle: float
    provider_name: str = "simulated"
    writes: Counter[str] = field(default_factory=Counter)
    sent: dict[str, float] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    waiters: dict[str, asyncio.Event] = field(default_factory=dict)
    describes: Counter[str] = field(default_factory=Counter)
    call_seconds: Counter[str] = field(default_factory=Counter)
    #: The provider's calls made by ``start`` (those before the controller was ready): once per process.
    start_calls: Counter[str] = field(default_factory=Counter)

    async def __aenter__(self) -> Bench:
        self.clients = [await make_http(self.kubeconfig, user_agent=n) for n in ("bench", "gangscale", "cloud")]
        self.client, ctl_http, cloud_http = self.clients
        count_writes(ctl_http, "gangscale", self.writes)
        count_writes(cloud_http, "cloud", self.writes)
        clock = SystemClock()
        self.fake: asyncio.subprocess.Process | None = None
        if self.provider_name == "gke":
            pools = parse_pool_yaml(GKE_POOLS).pools
            url = await self._start_fake()
            self.provider: SimulatedProvider | GkeProvider | AwsProvider = GkeProvider(
                pools, clock, tokens=StaticToken("fake-token"),
                endpoints=Endpoints(container=url, compute=f"{url}/compute/v1"))
        elif self.provider_name == "aws":
            pools = parse_pool_yaml(AWS_POOLS).pools
            url = await self._start_fake()
            self.provider = AwsProvider(pools, clock, endpoint_url=url, credentials=AWS_KEYS)
            count_describes(self.provider, self.describes, self.call_seconds)
        else:
            pools = parse_pool_yaml(POOLS).pools
            self.provider = SimulatedProvider(cloud_http, pools, clock)
        settings = Settings(batch_idle=self.batch_idle, batch_max=self.batch_idle * 10)
        self.controller = Controller(ctl_http, self.provider, pools, settings=settings, clock=clock)
        self.watch = Reflector(self.client, PROVREQS)
        self.watch.add_handler(self._on_event)
        self.tasks = [asyncio.create_task(self.controller.run()), asyncio.create_task(self.watch.run())]
        await self.client.request("POST", "/api/v1/namespaces/default/podtemplates", body=TEMPLATE)
        await self.watch.synced.wait()
        while not self.controller.ready:  # noqa: ASYNC110 - a plain flag; polling it briefly is enough here
            await asyncio.sleep(0.01)
        self.start_calls = self.cloud_calls()
        self.describes.clear()
        self.call_seconds.clear()
        self.cpu_at_start = cpu_seconds()
        return self

    async def _start_fake(self) -> str:
        """``gangscale sim gcp`` (or ``sim aws``) for the provider's pool, registering VMs as Nodes in the
        benchmark's API server."""
        cloud, text, ready = FAKES[self.provider_name]
        pools = Path(self.kubeconfig).parent / f"{self.provider_name}-pools.yaml"
        pools.write_text(text)
        self.fake = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gangscale.cli", "sim", cloud, "--config", str(pools), "--kubeconfig",
            self.kubeconfig, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        assert self.fake.stdout is not None
        while True:
            line = (await asyncio.wait_for(self.fake.stdout.readline(), 30)).decode()
            if not line:
                raise RuntimeError(f"gangscale sim {cloud} exited before serving")
            if line.startswith(ready):
                # The fake EC2 prints a line per CreateFleet: read them all as they come.
                self._drain = asyncio.create_task(self.fake.stdout.read())
                return line.split()[-1]

    def cloud_calls(self) -> Counter[str]:
        """The provider's calls to the cloud by kind (Google: ids left out of the path; EC2: the operation), less
        those of ``start``."""
        kinds: Counter[str] = Counter()
        if isinstance(self.provider, GkeProvider):
            for method, url in self.provider.calls:
                kinds[f"{method} {call_kind(url)}"] += 1
        elif isinstance(self.provider, AwsProvider):
            kinds.update(self.provider.calls)
        return kinds - self.start_calls

    async def __aexit__(self, *exc: object) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.provider.aclose()
        if self.fake is not None:
            self.fake.send_signal(signal.SIGINT)
            await asyncio.wait_for(self.fake.wait(), 30)
            await self._drain
        for client in self.clients:
            await client.api_client.close()

    def _on_event(self, event: ReflectorEvent) -> None:
        name = event.obj["metadata"]["name"]
        if name in self.done or name not in self.sent:
            return
        for cond in (event.obj.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Provisioned" and cond["status"] == "True":
                self.done[name] = time.perf_counter()
                if (waiter := self.waiters.get(name)) is not None:
                    waiter.set()

    async def create(self, name: str, pods: int) -> asyncio.Event:
        self.waiters[name] = waiter = asyncio.Event()
        self.sent[name] = time.perf_counter()
        await self.client.request("POST", PR_PATH, body=provreq(name, pods))
        return waiter

    def latencies(self, names: list[str]) -> list[float]:
        return sorted(self.done[name] - self.sent[name] for name in names)

    def stats(self, names: list[str]) -> dict[str, Any]:
        lat = self.latencies(names)
        calls = self.cloud_calls()
        cpu = cpu_seconds()
        return {"median_s": round(statistics.median(lat), 4), "p90_s": round(lat[int(0.9 * (len(lat) - 1))], 4),
                "max_s": round(lat[-1], 4), "passes": self.controller.passes,
                "controller_pass_s": round(self.controller.pass_seconds, 3),
                "writes_per_pr": {k: round(v / len(names), 2) for k, v in sorted(self.writes.items())},
                "cloud_calls_per_pr": {k: round(v / len(names), 2) for k, v in sorted(self.cloud_calls().items())},
                "describe_instances_per_pr_by_filter": {k: round(v / len(names), 2)
                                                        for k, v in sorted(self.describes.items())},
                "start_calls": dict(sorted(self.start_calls.items())),
                "call_mean_ms": {k: round(1000 * v / (calls[k] or self.describes[k]), 1)
                                 for k, v in sorted(self.call_seconds.items()) if calls[k] or self.describes[k]},
                "cpu_s": {k: round(v - self.cpu_at_start.get(k, 0.0), 2) for k, v in cpu.items()},
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


async def single(kubeconfig: str, runs: int, pods: int, batch_idle: float, provider: str) -> dict[str, Any]:
    async with Bench(kubeconfig, batch_idle, provider) as bench:
        names = []
        for i in range(runs):
            name = f"one-{i:04d}"
            names.append(name)
            waiter = await bench.create(name, pods)
            await asyncio.wait_for(waiter.wait(), HANG_GUARD)
        return {"mode": "single", "prs": runs, "nodes_per_pr": pods, **bench.stats(names)}


async def burst(kubeconfig: str, count: int, pods: int, batch_idle: float, provider: str) -> dict[str, Any]:
    async with Bench(kubeconfig, batch_idle, provider) as bench:
        slots = asyncio.Semaphore(64)
        names = [f"pr-{i:05d}" for i in range(count)]

        async def create(name: str) -> Awaitable[bool]:
            async with slots:
                return (await bench.create(name, pods)).wait()

        started = time.perf_counter()
        waits = await asyncio.gather(*(create(name) for name in names))
        await asyncio.wait_for(asyncio.gather(*waits), HANG_GUARD)
        wall = time.perf_counter() - started
        return {"mode": "burst", "prs": count, "nodes_per_pr": pods, "wall_s": round(wall, 3), **bench.stats(names)}


#: The breakdowns :func:`show` prints under a row, when it has them: (label, key, format of a value).
DETAILS = (("writes per PR", "writes_per_pr", "{:g}"), ("cloud calls per PR", "cloud_calls_per_pr", "{:g}"),
           ("DescribeInstances per PR by filter", "describe_instances_per_pr_by_filter", "{:g}"),
           ("CPU seconds over the run", "cpu_s", "{:.2f}"),
           ("mean time per EC2 call (DescribeInstances by filter)", "call_mean_ms", "{:g} ms"),
           ("calls of start (once)", "start_calls", "{}"))


def show(row: dict[str, Any]) -> None:
    head = f"{row['prs']:>5} PRs x {row['nodes_per_pr']} node(s) {row['mode']:>6}"
    wall = f"  last after {row['wall_s']:.2f} s" if "wall_s" in row else ""
    print(f"{head}  median {row['median_s'] * 1000:8.1f} ms  p90 {row['p90_s'] * 1000:8.1f} ms  "
          f"max {row['max_s'] * 1000:8.1f} ms{wall}  passes {row['passes']} ({row['controller_pass_s']:.2f} s)  "
          f"peak RSS {row['peak_rss_mib']} MiB", flush=True)
    for label, key, fmt in DETAILS:
        if row[key]:
            print(f"      {label}: " + ", ".join(f"{k} {fmt.format(v)}" for k, v in row[key].items()), flush=True)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    runs: list[Callable[[str], Awaitable[dict[str, Any]]]] = []
    if args.single:
        runs.append(lambda kc: single(kc, args.single, args.nodes_per_pr, args.batch_idle, args.provider))
    for count in args.counts:
        runs.append(lambda kc, count=count: burst(kc, count, args.nodes_per_pr, args.batch_idle, args.provider))
    for run in runs:
        with tempfile.TemporaryDirectory() as tmp:
            window = max(1000, max(args.counts, default=0) * args.nodes_per_pr * 10)
            async with apiserver(args.apiserver, args.kubeconfig, Path(tmp), window) as kubeconfig:
                row = await run(kubeconfig)
        rows.append(row)
        show(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="200,1000", type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--nodes-per-pr", type=int, default=1)
    parser.add_argument("--single", type=int, default=20, help="PRs one after another (0: skip)")
    parser.add_argument("--apiserver", choices=("process", "inprocess"), default="process")
    parser.add_argument("--provider", choices=("simulated", "gke", "aws"), default="simulated",
                        help="gke: the gke provider against `gangscale sim gcp` (zero delays) in its own process; "
                             "aws: the aws provider against `gangscale sim aws`, likewise")
    parser.add_argument("--kubeconfig", default=None, help="run against this server instead")
    parser.add_argument("--batch-idle", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
