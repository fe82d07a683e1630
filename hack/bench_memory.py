#!/usr/bin/env python3
"""The controller's memory as its own process: ``gangscale run`` against ``gangscale sim apiserver``.

    python hack/bench_memory.py [--prs 2000] [--nodes 5000] [--provider simulated|aws] [--json FILE]

Three processes, as in a cluster: the embedded API server, the controller (``gangscale run --provider
simulated``, default flags but ``--batch-idle 0``: planning is not what is measured here), and this script,
the users. The script registers ``nodes - prs`` Ready CPU nodes that no pod of the test can use (the rest of
a cluster), then creates ``prs`` ProvisioningRequests of one pod needing a whole 8-GPU node, so the
controller makes ``prs`` GPU nodes and ends with ``nodes`` nodes in its view and ``prs`` booked requests. When
every request is Provisioned it reads the controller's ``VmRSS`` and ``VmHWM`` (peak) from
``/proc/<pid>/status``; the RSS is also sampled every 0.5 s during the run.

``--provider aws``: the same pool as an aws pool (one ``p5.48xlarge`` instance per PR), the controller run as
``gangscale run --provider aws --aws-endpoint URL`` (fake keys in ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``)
against ``gangscale sim aws`` (zero delays, unlimited stock), a fourth process, whose instances register the GPU
nodes. The RSS is then the controller's with aiobotocore and an EC2 client loaded, against the simulated cloud's
nodes and kubelets in the controller's own process with ``--provider simulated``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gangscale.kube.client import make_http  # noqa: E402
from gangscale.kube.reflector import Reflector, ReflectorEvent  # noqa: E402
from gangscale.kube.resources import PROVREQS  # noqa: E402

POOLS = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 100000
    simulated: {provisionSeconds: 0}
"""
AWS_POOLS = """
nodePools:
  - name: gpu
    machineType: p5.48xlarge
    zone: us-east-1a
    maxUnits: 100000
    aws: {region: us-east-1, cluster: bench, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0abc}
"""
#: The fake EC2 checks no signature's key; botocore's default chain reads these (the environment comes first).
AWS_ENV = {"AWS_ACCESS_KEY_ID": "fake-access-key", "AWS_SECRET_ACCESS_KEY": "fake-secret-key"}
TEMPLATE = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x",
                                                  "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}
PR_PATH = "/apis/autoscaling.x-k8s.io/v1/namespaces/default/provisioningrequests"
HANG_GUARD = 1800.0


def cpu_node(i: int) -> dict[str, Any]:
    resources = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"cpu-{i:05d}", "labels": {"kubernetes.io/hostname": f"cpu-{i:05d}",
                                                            "topology.kubernetes.io/zone": "zone-a"}},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status"}]}}


def provreq(i: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": f"pr-{i:05d}"},
            "spec": {"provisioningClassName": "atomic-scale-up.gangscale.io",
                     "podSets": [{"podTemplateRef": {"name": "worker"}, "count": 1}]}}


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


async def start(*args: str, ready: bytes | None, env_note: str,
                env: dict[str, str] | None = None) -> tuple[asyncio.subprocess.Process, str]:
    """Start ``gangscale ARGS`` (with ``env`` added to this environment); wait for a line containing ``ready``
    (None: do not wait). Returns the process and the lines read before ``ready``, that line included."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gangscale.cli", *args,
                                                env={**os.environ, **(env or {})},
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen = []
    while ready is not None:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            raise RuntimeError(f"{env_note} exited early: {b''.join(seen).decode()[-2000:]}")
        seen.append(line)
        if ready in line:
            break
    return proc, b"".join(seen).decode()


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 60)


async def drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.read(65536):
        pass


async def start_controller(provider: str, kubeconfig: Path, pools: Path, drains: list[asyncio.Task[None]],
                           ) -> tuple[asyncio.subprocess.Process | None, asyncio.subprocess.Process]:
    """``gangscale run --provider PROVIDER`` (and for aws, first ``gangscale sim aws``), their output drained."""
    fake, flags = None, []
    if provider == "aws":
        # The fake EC2 prints a line per CreateFleet: drained like the others.
        fake, lines = await start("sim", "aws", "--config", str(pools), "--kubeconfig", str(kubeconfig),
                                  ready=b"stop with Ctrl-C", env_note="gangscale sim aws")
        drains.append(asyncio.create_task(drain(fake)))
        url = next(line.split()[-1] for line in lines.splitlines() if line.startswith("fake EC2 listening on"))
        flags = ["--aws-endpoint", url]
    controller, _ = await start("run", "--kubeconfig", str(kubeconfig), "--config", str(pools), "--provider",
                                provider, *flags, "--metrics-port",
                                "0", "--batch-idle", "0", "--log-level", "warning", "--log-format", "text",
                                ready=None, env_note="gangscale run", env=AWS_ENV if provider == "aws" else None)
    drains.append(asyncio.create_task(drain(controller)))
    return fake, controller


async def run(prs: int, nodes: int, tmp: Path, provider: str = "simulated") -> dict[str, Any]:
    kubeconfig, pools = tmp / "kubeconfig", tmp / "pools.yaml"
    pools.write_text(AWS_POOLS if provider == "aws" else POOLS)
    server, _ = await start("sim", "apiserver", "--port", "0", "--kubeconfig", str(kubeconfig),
                            "--watch-window", str(10 * (prs + nodes)), ready=b"stop with Ctrl-C", env_note="apiserver")
    drains = [asyncio.create_task(drain(server))]
    http = await make_http(str(kubeconfig), user_agent="bench")
    controller = fake = None
    try:
        slots = asyncio.Semaphore(32)

        async def post(path: str, body: dict[str, Any]) -> None:
            async with slots:
                await http.request("POST", path, body=body)

        await asyncio.gather(*(post("/api/v1/nodes", cpu_node(i)) for i in range(nodes - prs)))
        await http.request("POST", "/api/v1/namespaces/default/podtemplates", body=TEMPLATE)
        fake, controller = await start_controller(provider, kubeconfig, pools, drains)
        done: set[str] = set()
        finished = asyncio.Event()

        def on_event(event: ReflectorEvent) -> None:
            for cond in (event.obj.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Provisioned" and cond["status"] == "True":
                    done.add(event.obj["metadata"]["name"])
                    if len(done) == prs:
                        finished.set()

        watch = Reflector(http, PROVREQS)
        watch.add_handler(on_event)
        watcher = asyncio.create_task(watch.run())
        samples: list[float] = []

        async def sample() -> None:
            while True:
                samples.append(memory(controller.pid)["VmRSS"])
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample())
        started = time.perf_counter()
        await asyncio.gather(*(post(PR_PATH, provreq(i)) for i in range(prs)))
        await asyncio.wait_for(finished.wait(), HANG_GUARD)
        wall = time.perf_counter() - started
        await asyncio.sleep(2)  # let the controller finish its last writes before reading
        mem = memory(controller.pid)
        sampler.cancel()
        watcher.cancel()
        await asyncio.gather(sampler, watcher, return_exceptions=True)
        listed = await http.request("GET", "/api/v1/nodes")
        return {"provider": provider, "prs": prs, "nodes": len(listed["items"]), "wall_s": round(wall, 1),
                "rss_mib": round(mem["VmRSS"], 1), "peak_rss_mib": round(mem["VmHWM"], 1),
                "sampled_max_mib": round(max(samples, default=0.0), 1)}
    finally:
        await http.api_client.close()
        for task in drains:
            task.cancel()
        await asyncio.gather(*drains, return_exceptions=True)
        if controller is not None:
            await stop(controller)
        if fake is not None:
            await stop(fake)
        await stop(server)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prs", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--provider", choices=("simulated", "aws"), default="simulated",
                        help="aws: `gangscale run --provider aws` against `gangscale sim aws` in a process of its own")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        row = asyncio.run(run(args.prs, args.nodes, Path(tmp), args.provider))
    print(f"gangscale run --provider {row['provider']}: {row['prs']} PRs, {row['nodes']} nodes, all provisioned "
          f"after {row['wall_s']} s: "
          f"RSS {row['rss_mib']} MiB, peak {row['peak_rss_mib']} MiB (sampled max {row['sampled_max_mib']} MiB)")
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
