#!/usr/bin/env python3
"""Paged LISTs on the embedded API server: what a reflector pays to sync a large cluster (issue 24, point 4).

    python hack/bench_paging.py [--pods 15000] [--quick] [--page-size 500] [--repeat 1]
                                [--kubeconfig FILE] [--no-run] [--preload] [--json FILE]

Three processes, as in a cluster: ``gangscale sim apiserver`` (default flags), this script (the users) and, for
the last measurement, ``gangscale run``. The script creates ``--pods`` bound pods spread over 10 namespaces and
``pods / 30`` Ready nodes to bind them to. Each pod is a Deployment's pod as a real cluster serves it, about
4.5 KB, half of it managedFields: labels, annotations, an owner reference, one container with env (literal and
``fieldRef``), resources and volume mounts, two volumes (a configMap, the projected service-account token), a
toleration besides the defaults; its status is then written through ``pods/status`` as a kubelet does
(Running, pod IP, conditions, a container status). Then, client side, through the production transport
(``KubeHTTP``, the reflector's):

- **unpaged**: one ``GET /api/v1/pods`` (every namespace), decoded;
- **paged**: ``limit=--page-size`` and ``continue`` through every page, as a reflector lists;
- **paged, filtered**: the same with ``fieldSelector=spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed``
  (every pod passes: the selector's cost is measured, not a smaller answer);
- **gangscale run**: ``gangscale run --provider simulated --dry-run`` with a one-pool file, from the start of
  the process to its ``synced and reconciled`` log line (every reflector listed, pods included, plus the
  interpreter's start and imports). ``--no-run`` leaves it out.

The API server's RSS after the objects are created is printed too, and for each list the CPU time the server
process spent serving it (user + system, from ``/proc/PID/stat``; only for the server it starts), per pod: what
the list costs the server, whatever the client's decoding costs.
``--preload`` makes the cluster in the server's own process instead (this script as the server: ``EmbeddedAPIServer``
with the same namespaces, nodes and pods ``load``-ed, every object checked as its create is and each pod's status
written as its ``pods/status`` patch; then served as ``gangscale sim apiserver`` serves): fast enough for 150,000
pods, and it prints the load's CPU cost per pod. ``--quick`` is ``--pods 3000``. ``--kubeconfig`` runs against
another server (a real kube-apiserver) instead of starting one; the objects are created there in the same way
(namespaces ``bench-paging-*``). Figures are wall times of single runs (``--repeat`` runs each list more times,
every run printed); ``docs/benchmarks.md`` has the recorded ones.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

SCRIPT = str(Path(__file__).resolve())
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gangscale.kube.client import make_http  # noqa: E402
from gangscale.kube.transport import KubeHTTP  # noqa: E402

NAMESPACES = [f"bench-paging-{i}" for i in range(10)]
USER_AGENT = "bench-paging"
PODS_PER_NODE = 30
CONCURRENCY = 32
MERGE = "application/merge-patch+json"
POOLS = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 10
    simulated: {provisionSeconds: 0}
"""
HANG_GUARD = 1800.0
FILTER = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


# --- objects -------------------------------------------------------------------------------------------------

def node(i: int) -> dict[str, Any]:
    name = f"node-{i:05d}"
    resources = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "kubernetes.io/arch": "amd64",
                                                  "topology.kubernetes.io/zone": f"zone-{'abc'[i % 3]}",
                                                  "node.kubernetes.io/instance-type": "n2-standard-32"}},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status"}]}}


def pod(i: int, namespace: str, node_name: str) -> dict[str, Any]:
    """A bound pod of one of 50 apps, as its ReplicaSet would have created it."""
    app = f"app-{i % 50:02d}"
    rs_hash = hashlib.sha256(app.encode()).hexdigest()[:10]
    name = f"{app}-{rs_hash}-{i:05d}"
    labels = {"app.kubernetes.io/name": app, "pod-template-hash": rs_hash, "team": f"team-{i % 7}"}
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
    env = [{"name": "LOG_LEVEL", "value": "info"},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}]
    main = {"name": "main", "image": f"registry.example.com/bench/{app}:1.{i % 9}.0",
            "env": env,
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
                             {"name": "kube-api-access", "readOnly": True,
                              "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}
    volumes = [{"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
               {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                   {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": f"{app}-{rs_hash}",
                                              "uid": str(uuid.UUID(int=i % 50 + 1, version=4)),
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node_name, "containers": [main], "volumes": volumes,
                     "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch",
                                      "effect": "NoSchedule"}]}}


def pod_status(i: int) -> dict[str, Any]:
    """What the kubelet reports once the pod runs."""
    started = "2026-11-20T10:00:00Z"
    ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    return {"status": {
        "phase": "Running", "podIP": ip, "hostIP": f"10.128.{i % 250}.{i % 200}",
        "startTime": started, "qosClass": "Burstable",
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                       for t in ("Ready", "PodScheduled")],
        "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "started": True,
                               "image": "registry.example.com/bench/main:1.0.0",
                               "containerID": "containerd://" + hashlib.sha256(str(i).encode()).hexdigest(),
                               "state": {"running": {"startedAt": started}}}]}}


# --- processes -----------------------------------------------------------------------------------------------

async def start(*args: str, ready: bytes, what: str, script: bool = False,
                seen: list[bytes] | None = None) -> tuple[asyncio.subprocess.Process, float]:
    """Start ``gangscale ARGS`` (``script``: this script with ARGS); wait for a line containing ``ready``. Returns the
    process and the seconds from the start until that line; the lines before it are added to ``seen``."""
    began = time.perf_counter()
    command = [SCRIPT] if script else ["-m", "gangscale.cli"]
    proc = await asyncio.create_subprocess_exec(sys.executable, *command, *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen = [] if seen is None else seen
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), HANG_GUARD)
        if not line:
            raise RuntimeError(f"{what} exited early:\n" + b"".join(seen[-20:]).decode(errors="replace"))
        seen.append(line)
        if ready in line:
            return proc, time.perf_counter() - began


async def serve_preloaded(pods: int, kubeconfig: str) -> None:
    """``--preload``'s server process: the embedded API server with the objects ``populate`` makes loaded in
    process (``EmbeddedAPIServer.load``: each checked as its create is, the pod status as its ``pods/status`` patch
    writes it), then served until SIGINT. Prints the load's cost."""
    import gc  # noqa: PLC0415

    from gangscale.sim.apiserver import EmbeddedAPIServer  # noqa: PLC0415

    server = EmbeddedAPIServer(port=0)
    nodes = max(1, -(-pods // PODS_PER_NODE))
    began = time.process_time()
    server.load([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in NAMESPACES],
                manager=USER_AGENT)
    server.load((node(i) for i in range(nodes)), manager=USER_AGENT)
    loaded_nodes = time.process_time()

    def bound() -> Any:
        for i in range(pods):
            body = pod(i, NAMESPACES[i % len(NAMESPACES)], f"node-{i // PODS_PER_NODE:05d}")
            yield {**body, **pod_status(i)}

    server.load(bound(), manager=USER_AGENT, status_manager=USER_AGENT)
    done = time.process_time()
    print(f"preloaded {nodes} nodes in {loaded_nodes - began:.1f} s CPU ({(loaded_nodes - began) / nodes * 1e6:.0f} "
          f"us/node), {pods} pods in {done - loaded_nodes:.1f} s CPU "
          f"({(done - loaded_nodes) / max(1, pods) * 1e6:.0f} us/pod)", flush=True)
    gc.freeze()  # a long-lived process's loaded objects: the cyclic collector need not walk them again
    await server.start()
    server.write_kubeconfig(kubeconfig)
    print(f"serving on {server.url}; stop with Ctrl-C", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.read(65536):
        pass


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (0 when there is none to read)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


# --- the measurements ----------------------------------------------------------------------------------------

async def populate(http: KubeHTTP, pods: int) -> None:
    slots = asyncio.Semaphore(CONCURRENCY)

    async def call(method: str, path: str, body: dict[str, Any], content_type: str = "application/json") -> None:
        async with slots:
            await http.request(method, path, body=body, content_type=content_type, timeout=120.0)

    for ns in NAMESPACES:
        await call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    nodes = max(1, -(-pods // PODS_PER_NODE))
    await asyncio.gather(*(call("POST", "/api/v1/nodes", node(i)) for i in range(nodes)))

    async def one(i: int) -> None:
        ns, node_name = NAMESPACES[i % len(NAMESPACES)], f"node-{i // PODS_PER_NODE:05d}"
        body = pod(i, ns, node_name)
        await call("POST", f"/api/v1/namespaces/{ns}/pods", body)
        await call("PATCH", f"/api/v1/namespaces/{ns}/pods/{body['metadata']['name']}/status",
                   pod_status(i), MERGE)

    await asyncio.gather(*(one(i) for i in range(pods)))


async def list_unpaged(http: KubeHTTP) -> tuple[float, int]:
    began = time.perf_counter()
    out = await http.request("GET", "/api/v1/pods", timeout=HANG_GUARD)
    return time.perf_counter() - began, len(out["items"])


async def list_paged(http: KubeHTTP, page_size: int, field_selector: str | None = None) -> tuple[float, int, int]:
    began = time.perf_counter()
    items = pages = 0
    token: str | None = None
    while True:
        page = await http.request("GET", "/api/v1/pods", query={"limit": page_size, "continue": token,
                                                                "fieldSelector": field_selector},
                                  timeout=HANG_GUARD)
        pages += 1
        items += len(page["items"])
        token = page["metadata"].get("continue") or None
        if token is None:
            return time.perf_counter() - began, items, pages


async def served_size(http: KubeHTTP) -> float:
    """Mean bytes of one pod as the server sends it (compact JSON)."""
    page = await http.request("GET", "/api/v1/pods", query={"limit": 100})
    return sum(len(json.dumps(p, separators=(",", ":"))) for p in page["items"]) / max(1, len(page["items"]))


async def measure_lists(http: KubeHTTP, args: argparse.Namespace, row: dict[str, Any], pid: int | None) -> None:
    """The lists, ``--repeat`` times each, with the server's CPU per pod for each."""
    for name in ("unpaged", "paged", "filtered"):
        row[f"{name}_s"], row[f"{name}_server_us"] = [], []
    for _ in range(args.repeat):
        cpu = cpu_seconds(pid)
        seconds, count = await list_unpaged(http)
        row["unpaged_s"].append(round(seconds, 2))
        row["unpaged_server_us"].append(round((cpu_seconds(pid) - cpu) / count * 1e6, 1))
        for name, selector in (("paged", None), ("filtered", FILTER)):
            cpu = cpu_seconds(pid)
            seconds, paged_count, pages = await list_paged(http, args.page_size, selector)
            row[f"{name}_s"].append(round(seconds, 2))
            row[f"{name}_server_us"].append(round((cpu_seconds(pid) - cpu) / paged_count * 1e6, 1))
            if paged_count != count:
                raise RuntimeError(f"{name} list returned {paged_count} pods, unpaged {count}")
        row["items"], row["pages"] = count, pages


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    server = None
    drains: list[asyncio.Task[None]] = []
    kubeconfig = args.kubeconfig
    row: dict[str, Any] = {"pods": args.pods, "page_size": args.page_size}
    if kubeconfig is None:
        kubeconfig = str(tmp / "kubeconfig")
        if args.preload:
            lines: list[bytes] = []
            server, row["populate_s"] = await start("--serve", str(args.pods), "--kubeconfig", kubeconfig,
                                                    ready=b"stop with Ctrl-C", what="the preloaded server",
                                                    script=True, seen=lines)
            row["populate_s"] = round(row["populate_s"], 1)
            row["preload"] = next(x.decode().strip() for x in lines if x.startswith(b"preloaded"))
        else:
            server, _ = await start("sim", "apiserver", "--port", "0", "--kubeconfig", kubeconfig,
                                    ready=b"stop with Ctrl-C", what="gangscale sim apiserver")
        drains.append(asyncio.create_task(drain(server)))
    http = await make_http(kubeconfig, user_agent=USER_AGENT)
    try:
        if "populate_s" not in row:
            began, cpu = time.perf_counter(), cpu_seconds(server.pid if server is not None else None)
            await populate(http, args.pods)
            row["populate_s"] = round(time.perf_counter() - began, 1)
            if server is not None:  # the server's CPU for the writes: 2 per pod (create, status), plus the nodes
                row["populate_server_us"] = round((cpu_seconds(server.pid) - cpu) / args.pods * 1e6)
        row["pod_bytes"] = round(await served_size(http))
        if server is not None:
            row["server_rss_mib"] = rss_mib(server.pid)
        await measure_lists(http, args, row, server.pid if server is not None else None)
        if server is not None:  # now with every pod's encoding cached
            row["server_rss_after_lists_mib"] = rss_mib(server.pid)
        if args.run:
            pools = tmp / "pools.yaml"
            pools.write_text(POOLS)
            controller, row["run_sync_s"] = await start(
                "run", "--kubeconfig", kubeconfig, "--config", str(pools), "--provider", "simulated", "--dry-run",
                "--metrics-port", "0", "--log-format", "text", "--log-level", "info",
                ready=b"synced and reconciled", what="gangscale run")
            row["run_sync_s"] = round(row["run_sync_s"], 2)
            drains.append(asyncio.create_task(drain(controller)))
            await stop(controller)
    finally:
        await http.api_client.close()
        if server is not None:
            await stop(server)
        for task in drains:
            task.cancel()
        await asyncio.gather(*drains, return_exceptions=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=15000)
    parser.add_argument("--quick", action="store_true", help="3,000 pods")
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=1, help="list this many times each (every run is printed)")
    parser.add_argument("--kubeconfig", default=None, help="run against this server instead of starting one")
    parser.add_argument("--no-run", dest="run", action="store_false", help="leave out `gangscale run`")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--preload", action="store_true",
                        help="load the objects in the server's process (EmbeddedAPIServer.load) instead of over HTTP")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)  # --preload's server process
    args = parser.parse_args()
    if args.serve is not None:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_preloaded(args.serve, args.kubeconfig))
        return 0
    if args.quick:
        args.pods = 3000
    with tempfile.TemporaryDirectory() as tmp:
        row = asyncio.run(run(args, Path(tmp)))
    best_unpaged, best_paged = max(min(row["unpaged_s"]), 0.01), min(row["paged_s"])
    rss = f"; API server RSS {row['server_rss_mib']} MiB" if "server_rss_mib" in row else ""
    if "server_rss_after_lists_mib" in row:
        rss += f" ({row['server_rss_after_lists_mib']} MiB after the lists)"
    how = "loaded in the server's process" if args.preload else "created and bound"
    print(f"{row['items']:,} pods of {row['pod_bytes']:,} bytes each (served), {how} in {row['populate_s']} s{rss}")
    if "preload" in row:
        print(row["preload"])
    if "populate_server_us" in row:
        print(f"server CPU while populating: {row['populate_server_us']} µs per pod (its create and status patch, "
              f"and a 30th of a node)")
    server_cpu = "server_rss_mib" in row

    def cpu(name: str) -> str:
        return f" | {', '.join(map(str, row[name + '_server_us']))}" if server_cpu else ""

    print("| measurement | seconds | against the unpaged LIST |" + (" server CPU µs per pod |" if server_cpu else ""))
    print("|---|---:|---:|" + ("---:|" if server_cpu else ""))
    print(f"| one unpaged LIST | {', '.join(map(str, row['unpaged_s']))} | 1.0x{cpu('unpaged')} |")
    print(f"| paged LIST, limit={row['page_size']} ({row['pages']} pages) | {', '.join(map(str, row['paged_s']))} "
          f"| {best_paged / best_unpaged:.1f}x{cpu('paged')} |")
    print(f"| paged LIST, limit={row['page_size']}, fieldSelector | {', '.join(map(str, row['filtered_s']))} "
          f"| {min(row['filtered_s']) / best_unpaged:.1f}x{cpu('filtered')} |")
    if "run_sync_s" in row:
        print(f"| `gangscale run` start → synced and reconciled | {row['run_sync_s']} "
              f"| {row['run_sync_s'] / best_unpaged:.1f}x |" + (" |" if server_cpu else ""))
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
