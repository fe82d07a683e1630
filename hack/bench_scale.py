#!/usr/bin/env python3
"""``gangscale run`` on a large cluster under pod churn: start-up, memory, pass latency, CPU per pod event.

    python hack/bench_scale.py [--nodes 2000] [--pods 60000] [--quick] [--churn 500] [--churn-seconds 20]
                               [--prs 100] [--pr-interval 0.3] [--pr-mode fit|scale-up] [--standby]
                               [--json FILE] [--log-dir DIR] [--timeout 3600]

Three (four with ``--standby``) processes, as in a cluster:

- **the API server**: this script run again with ``--serve``, in its own process: an ``EmbeddedAPIServer``
  (``gangscale sim apiserver``'s server) into which ``--nodes`` Ready GPU nodes (8 GPUs, 208 vCPU, tainted
  ``nvidia.com/gpu`` as GKE does, no node pool of gangscale's) and ``--pods`` pods are loaded *in-process*, nodes
  through the server's own verbs (``server.api``), pods through its bulk load (``EmbeddedAPIServer.load``):
  validation, defaults, resourceVersions and managedFields as for any write, no HTTP, and each pod's JSON encoded at
  load as a server that had served it would hold it; spread over 10 namespaces, 30 pods per node. Each pod is an
  Indexed batch/v1 Job's pod as a real server serves it, about 4.7 KB of compact JSON, 45 % of it managedFields: job
  labels and annotation, an owner reference to its Job, one container with env, resources (8 of a node's 30 pods ask
  for 1 GPU and 20 vCPU, the others 2 vCPU), the service-account token volume, the GPU toleration; created bound
  (``kube-controller-manager``) with its status as the kubelet's ``pods/status`` write leaves it (``kubelet``:
  Running, IPs, conditions, a container status), in one revision. With ``--pr-mode fit`` (the default), ``--prs`` more
  empty GPU nodes are loaded: the free capacity the requests below are booked on.
  The same process runs the **churn generator**, driven over its stdin: at ``--churn`` pod events per second,
  jobs finish and start: the oldest pod is marked Succeeded, deleted, and a new pod of a new job is created on
  its node and slot and marked Running; four watch events each, so the pod count and the nodes' usage stay
  constant. Every write is one watch event and is counted.
- **the controller**: ``gangscale run --provider simulated --batch-idle 0 --metrics-port 0``, default flags
  otherwise (leader election on), a one-pool file (``gpu``, ``a3-highgpu-8g``, ``provisionSeconds: 0``).
- **the standby** (``--standby``): a second ``gangscale run`` with another identity, which syncs and waits
  for the leader's lease.
- **this script**: the users, and the measurements.

What is measured, in order:

1. *Start-up*: from the controller's process start to its ``synced and reconciled`` log line (every reflector
   listed, interpreter start and imports included); its VmRSS then and VmHWM (peak), from ``/proc``; the CPU
   (utime + stime) it used to get there, and the API server's CPU over the same interval (how much of start-up
   is the server's). The same for the standby, up to its ``standby: the leader lease is held by`` line.
2. *Idle*: every process's CPU over ``--idle-seconds`` with nothing happening.
3. *Churn alone*: ``--churn-seconds`` of churn (after a 2 s warm-up); CPU of the controller, standby and server
   per 1,000 pod events made (events counted by the generator).
4. *Churn and requests*: churn goes on while ``--prs`` ProvisioningRequests (one pod of 8 GPUs,
   ``atomic-scale-up.gangscale.io``) are created one at a time, every ``--pr-interval`` s; per request, the time
   from just before its create to the ``Provisioned=True`` this script's watch sees, as p50/p90/p99/max. With
   ``--pr-mode fit`` each request fits on a free node and is decided (and provisioned) in one pass; with
   ``scale-up`` each one makes the ``gpu`` pool scale up by a node (decided in one pass, provisioned once the
   node is Ready). The controller's ``/metrics`` are read before and after: ``gangscale_plan_pass_duration_seconds``
   (count, mean, bucket quantiles over the window), ``gangscale_decision_latency_seconds{condition=
   "Provisioned"}``, ``process_cpu_seconds_total``. CPU per 1,000 events again (requests' work included).

One liberty is taken with the API server process, which stands in for a real (Go) kube-apiserver and is not
what is measured: its Python garbage collector is frozen after the load (``gc.freeze()``, so a full collection
does not walk 60,000 stored pods and stall the server for seconds). The churn's writes do not go through HTTP
either, so the server's figures are lower than an HTTP client's writes would cost; the watch streams, lists and
the controllers' own writes are real HTTP.

5. *Handover* (with ``--standby``): the leader is stopped (SIGINT: it hands its lease back); the time from then to
   the standby's ``synced and reconciled`` (it takes the lease and lists everything again before deciding).

VmRSS of every process is sampled every 0.5 s (the maximum is reported), and VmRSS / VmHWM read at the end.
Reflector warnings in the controllers' logs (``expired (410)``, ``watch interrupted``) are counted: a controller
that cannot keep up with the churn falls behind the server's watch window (``--watch-window`` events per
resource) and re-lists. The machine (``nproc``, CPU model, Python) is printed with the figures; ``--json FILE``
writes them all, ``--log-dir DIR`` keeps every process's output. ``--quick`` is ``--nodes 300 --pods 9000 --prs 30
--churn-seconds 10``. ``--timeout`` bounds the whole run (the hang guard); the children are stopped (SIGINT, then
SIGKILL) on every exit, Ctrl-C and SIGTERM included. Figures are single runs on a shared machine;
``docs/benchmarks.md`` has the recorded ones.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import hashlib
import json
import os
import platform
import re
import signal
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from gangscale.kube.client import make_http  # noqa: E402
from gangscale.kube.reflector import Reflector, ReflectorEvent  # noqa: E402
from gangscale.kube.resources import PROVREQS  # noqa: E402
from gangscale.kube.transport import KubeHTTP  # noqa: E402
from gangscale.sim.apiserver import EmbeddedAPIServer  # noqa: E402
from gangscale.sim.apiserver.api import PATCH_STRATEGIC, WriteContext  # noqa: E402
from gangscale.sim.apiserver.deletion import DeleteOptions  # noqa: E402
from gangscale.sim.apiserver.resources import ResourceType  # noqa: E402

SELF = str(Path(__file__).resolve())
JSON = dict[str, Any]
PODS_PER_NODE = 30
GPU_SLOTS = 8  # of a node's PODS_PER_NODE pods, this many take one GPU each
NAMESPACES = [f"bench-scale-{i}" for i in range(10)]
STARTED = "2026-11-20T10:00:00Z"
FINISHED = "2026-11-20T11:00:00Z"
REPLY = "BENCH "  # the server process's answers on its stdout start with this
POOLS = """
nodePools:
  - name: gpu
    machineType: a3-highgpu-8g
    zone: us-central1-a
    maxUnits: 100000
    simulated: {provisionSeconds: 0}
"""
TEMPLATE = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker", "namespace": "default"},
            "template": {"spec": {"containers": [{"name": "w", "image": "registry.example.com/llm:1.0",
                                                  "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                   "effect": "NoSchedule"}]}}}
PR_PATH = "/apis/autoscaling.x-k8s.io/v1/namespaces/default/provisioningrequests"
SYNCED = b"synced and reconciled"
STANDBY = b"standby: the leader lease is held by"
WARNINGS = {"relist_410": b"expired (410)", "watch_interrupted": b"watch interrupted"}


# --- objects -------------------------------------------------------------------------------------------------

def gpu_node(name: str, i: int) -> JSON:
    """A Ready a3-highgpu-8g node of a GKE node pool gangscale does not manage, as its kubelet registers it."""
    zone = f"us-central1-{'abc'[i % 3]}"
    capacity = {"cpu": "208", "memory": "1905152000Ki", "nvidia.com/gpu": "8", "pods": "110",
                "ephemeral-storage": "196460520Ki"}
    allocatable = {**capacity, "cpu": "207640m", "memory": "1874124800Ki", "ephemeral-storage": "47060071478"}
    pressure = [("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available")]
    conditions = [{"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": STARTED,
                   "lastTransitionTime": STARTED} for t, r, m in pressure]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status", "lastHeartbeatTime": STARTED,
                       "lastTransitionTime": STARTED})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "us-central1",
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                "cloud.google.com/gke-nodepool": f"training-{i % 4}",
                "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}},
            "spec": {"podCIDR": f"10.{64 + (i >> 8) % 64}.{i & 255}.0/24",
                     "providerID": f"gce://bench/{zone}/{name}",
                     "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"capacity": capacity, "allocatable": allocatable, "conditions": conditions,
                       "addresses": [{"type": "InternalIP", "address": _host_ip(i)},
                                     {"type": "Hostname", "address": name}],
                       "nodeInfo": {"kubeletVersion": "v1.36.0", "containerRuntimeVersion": "containerd://2.1.1",
                                    "kernelVersion": "6.6.72+", "osImage": "Container-Optimized OS from Google",
                                    "operatingSystem": "linux", "architecture": "amd64", "kubeProxyVersion": "",
                                    "machineID": hashlib.md5(name.encode()).hexdigest(),
                                    "systemUUID": str(uuid.UUID(int=i + 1)),
                                    "bootID": str(uuid.UUID(int=(i + 1) << 64))}}}


def node_name(i: int) -> str:
    return f"gpu-node-{i:05d}"


def _host_ip(node: int) -> str:
    return f"10.128.{(node >> 8) & 255}.{node & 255}"


def pod(serial: int, namespace: str, node: int, slot: int) -> JSON:
    """Pod ``serial`` (its job is ``serial // 30``, its completion index ``serial % 30``) bound to ``node``; slots
    below GPU_SLOTS take a GPU."""
    job_no, index = divmod(serial, PODS_PER_NODE)
    job = f"train-{job_no:06d}"
    job_uid = str(uuid.UUID(int=job_no + 1, version=4))
    name = f"{job}-{index}-{hashlib.sha256(str(serial).encode()).hexdigest()[:5]}"
    if slot < GPU_SLOTS:
        role, resources = "trainer", {"requests": {"cpu": "20", "memory": "160Gi", "nvidia.com/gpu": "1"},
                                      "limits": {"nvidia.com/gpu": "1"}}
    else:
        role, resources = "loader", {"requests": {"cpu": "2", "memory": "16Gi"}, "limits": {"memory": "16Gi"}}
    container = {"name": role, "image": f"registry.example.com/llm:1.{job_no % 20}",
                 "env": [{"name": "MASTER_ADDR", "value": f"{job}-0.{job}"},
                         {"name": "WORLD_SIZE", "value": str(PODS_PER_NODE)}],
                 "resources": resources,
                 "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"batch.kubernetes.io/controller-uid": job_uid,
                                    "batch.kubernetes.io/job-name": job,
                                    "batch.kubernetes.io/job-completion-index": str(index)},
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node_name(node), "containers": [container], "restartPolicy": "Never",
                     "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                         {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}


def pod_status(serial: int, node: int, slot: int, phase: str = "Running") -> JSON:
    """What the kubelet writes once the pod runs (``Running``) or has finished (``Succeeded``)."""
    running = phase == "Running"
    ready = "True" if running else "False"
    conditions = [{"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": STARTED}
                  for t, s in (("Ready", ready), ("ContainersReady", ready), ("PodScheduled", "True"))]
    container_id = "containerd://" + hashlib.sha256(str(serial).encode()).hexdigest()
    if running:
        state: JSON = {"running": {"startedAt": STARTED}}
    else:
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": STARTED, "finishedAt": FINISHED,
                                "containerID": container_id}}
        for cond in conditions[:2]:
            cond["reason"] = "PodCompleted"
    return {"status": {
        "phase": phase, "conditions": conditions, "hostIP": _host_ip(node),
        "podIP": f"10.{64 + (node >> 8) % 64}.{node & 255}.{2 + slot}", "startTime": STARTED,
        "containerStatuses": [{"name": "trainer" if slot < GPU_SLOTS else "loader", "ready": running,
                               "restartCount": 0, "started": running,
                               "image": f"registry.example.com/llm:1.{serial // PODS_PER_NODE % 20}",
                               "containerID": container_id, "state": state}]}}


def provreq(i: int) -> JSON:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": f"pr-{i:05d}"},
            "spec": {"provisioningClassName": "atomic-scale-up.gangscale.io",
                     "podSets": [{"podTemplateRef": {"name": "worker"}, "count": 1}]}}


# --- the server process (--serve) ----------------------------------------------------------------------------

class Cluster:
    """The objects, written through the embedded server's own verbs, and the churn generator."""

    def __init__(self, server: EmbeddedAPIServer) -> None:
        self.server, self.api = server, server.api

        def lookup(plural: str) -> ResourceType:
            rt = server.registry.lookup("", "v1", plural)
            assert rt is not None
            return rt

        self.pods_rt, self.nodes_rt = lookup("pods"), lookup("nodes")
        self.ns_rt, self.templates_rt = lookup("namespaces"), lookup("podtemplates")
        self.serial = 0
        #: Running pods, oldest first: (namespace, name, serial, node, slot).
        self.running: deque[tuple[str, str, int, int, int]] = deque()
        self.events = {"create": 0, "status": 0, "delete": 0}
        self.rate = 0.0
        self.skipped = 0  # events the generator could not make in time (it does not catch up more than 1 s)
        self.longest_gap = 0.0  # the longest time the generator was not run while churning (the loop was busy)
        self.churn_task: asyncio.Task[None] | None = None
        self._steps = self._lifecycle()

    def create_node(self, name: str, i: int) -> None:
        self.api.create(self.nodes_rt, "", gpu_node(name, i), WriteContext(manager="kubelet"))

    def load_pods(self, first: int, count: int, nodes: int, *, encode: bool) -> None:
        """Pods ``first`` .. ``first + count - 1`` (pod i on node i % nodes, slot i // nodes) through the server's
        bulk load: each checked as a create is, its status written as the kubelet's ``pods/status`` patch would be,
        in one revision (``EmbeddedAPIServer.load``)."""
        bodies = []
        for i in range(first, first + count):
            node, slot = i % nodes, i // nodes
            serial, self.serial = self.serial, self.serial + 1
            ns = NAMESPACES[serial % len(NAMESPACES)]
            body = pod(serial, ns, node, slot)
            body["status"] = pod_status(serial, node, slot)["status"]
            bodies.append(body)
            self.running.append((ns, body["metadata"]["name"], serial, node, slot))
        self.server.load(bodies, manager="kube-controller-manager", status_manager="kubelet", encode=encode)

    def start_pod(self, node: int, slot: int) -> None:
        """Two writes: the Job controller's create (bound: the scheduler's binding is not a separate event
        here), the kubelet's status."""
        serial, self.serial = self.serial, self.serial + 1
        ns = NAMESPACES[serial % len(NAMESPACES)]
        body = pod(serial, ns, node, slot)
        name = body["metadata"]["name"]
        self.api.create(self.pods_rt, ns, body, WriteContext(manager="kube-controller-manager"))
        self._status(ns, name, pod_status(serial, node, slot))
        self.running.append((ns, name, serial, node, slot))

    def _status(self, ns: str, name: str, status: JSON) -> None:
        self.api.patch(self.pods_rt, ns, name, PATCH_STRATEGIC, json.dumps(status).encode(), "status",
                       WriteContext(manager="kubelet"), None)

    def _lifecycle(self) -> Iterator[str]:
        """One write per step: the oldest job pod finishes and goes, a new one starts on its node and slot."""
        while True:
            ns, name, serial, node, slot = self.running.popleft()
            self._status(ns, name, pod_status(serial, node, slot, "Succeeded"))
            yield "status"
            self.api.delete(self.pods_rt, ns, name, DeleteOptions(), False)
            yield "delete"
            new, self.serial = self.serial, self.serial + 1
            new_ns = NAMESPACES[new % len(NAMESPACES)]
            body = pod(new, new_ns, node, slot)
            self.api.create(self.pods_rt, new_ns, body, WriteContext(manager="kube-controller-manager"))
            yield "create"
            self._status(new_ns, body["metadata"]["name"], pod_status(new, node, slot))
            self.running.append((new_ns, body["metadata"]["name"], new, node, slot))
            yield "status"

    async def churn(self, rate: float) -> None:
        loop = asyncio.get_running_loop()
        began, made = loop.time(), 0
        burst = max(1, int(rate / 100))  # at most 10 ms worth of writes before the server serves again
        last = loop.time()
        while True:
            now = loop.time()
            self.longest_gap, last = max(self.longest_gap, now - last), now
            due = int((now - began) * rate) - made
            if due > rate:  # more than a second behind: give up on the backlog, count it
                self.skipped += due - int(rate)
                made += due - int(rate)
                due = int(rate)
            for _ in range(min(due, burst)):
                self.events[next(self._steps)] += 1
                made += 1
            await asyncio.sleep(0.002 if due <= burst else 0)

    def set_churn(self, rate: float) -> None:
        if self.churn_task is not None:
            self.churn_task.cancel()
            self.churn_task = None
        self.rate = rate
        if rate > 0:
            self.churn_task = asyncio.get_running_loop().create_task(self.churn(rate))

    def stats(self) -> JSON:
        return {"events": sum(self.events.values()), "by_type": dict(self.events), "skipped": self.skipped,
                "rate": self.rate, "pods": len(self.running), "longest_gap_s": round(self.longest_gap, 3)}


def reply(obj: JSON) -> None:
    print(REPLY + json.dumps(obj), flush=True)


async def serve(args: argparse.Namespace) -> int:
    server = EmbeddedAPIServer(port=0, watch_window=args.watch_window)
    await server.start()
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    cluster = Cluster(server)
    try:
        server.write_kubeconfig(Path(args.kubeconfig))
        began = time.perf_counter()
        for ns in NAMESPACES:
            cluster.api.create(cluster.ns_rt, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                               WriteContext(manager="kube-controller-manager"))
        cluster.api.create(cluster.templates_rt, "default", TEMPLATE, WriteContext(manager="kube-controller-manager"))
        for i in range(args.nodes):
            cluster.create_node(node_name(i), i)
        for i in range(args.free_nodes):
            cluster.create_node(f"free-node-{i:05d}", args.nodes + i)
        nodes_s = time.perf_counter() - began
        for first in range(0, args.pods, 500):
            # Spread evenly: pod i on node i % nodes, slot i // nodes (30 slots for pods = 30 x nodes). Encoded at
            # load, as a server that had served them (a real one encodes in Go, at a fraction of Python's cost).
            cluster.load_pods(first, min(500, args.pods - first), args.nodes, encode=True)
            await asyncio.sleep(0)  # the controller manager's queue drains, the loop breathes
            if stopping.is_set():
                return 1
            if first % 5000 == 4500:
                gc.freeze()  # see the module docstring
            if first % 10000 == 9500:
                reply({"progress": first + 500, "seconds": round(time.perf_counter() - began, 1)})
        await server.controllers.settle()
        gc.freeze()
        reply({"ready": True, "url": server.url, "nodes_s": round(nodes_s, 2),
               "preload_s": round(time.perf_counter() - began, 2), "resource_version": server.store.resource_version,
               "pods": len(cluster.running), "nodes": args.nodes + args.free_nodes})
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while not stopping.is_set():
            read = asyncio.ensure_future(reader.readline())
            stop = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not read.done():
                read.cancel()
                break
            line = read.result().decode().split()
            if not line or line[0] == "quit":  # EOF: the script is gone
                break
            if line[0] == "churn":
                cluster.set_churn(float(line[1]))
            reply(cluster.stats())
            cluster.longest_gap = 0.0  # a window's longest gap is reported at its end
    finally:
        cluster.set_churn(0)
        await server.stop()
    return 0


# --- processes -----------------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid``, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MiB."""
    out = {"VmRSS": 0.0, "VmHWM": 0.0}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in out:
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


class Proc:
    """A child process whose output is read line by line: kept (the last 200 lines), logged to a file if asked,
    searched for what the script waits for and for reflector warnings."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log: IO[bytes] | None) -> None:
        self.name, self.proc, self.log = name, proc, log
        self.pid = proc.pid
        self.began = time.perf_counter()
        self.tail: deque[bytes] = deque(maxlen=200)
        self.replies: asyncio.Queue[JSON] = asyncio.Queue()
        self.seen: dict[bytes, float] = {}
        self.seen_event = asyncio.Event()
        self.warnings = dict.fromkeys(WARNINGS, 0)
        self.metrics_port: int | None = None
        self.pump = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            now = time.perf_counter()
            if self.log is not None:
                self.log.write(line)
            if line.startswith(REPLY.encode()):
                self.replies.put_nowait(json.loads(line[len(REPLY):]))
                continue
            self.tail.append(line)
            for key, pattern in WARNINGS.items():
                if pattern in line:
                    self.warnings[key] += 1
            for pattern in (SYNCED, STANDBY):
                if pattern in line and pattern not in self.seen:
                    self.seen[pattern] = now
            if self.metrics_port is None and b"observe server listening" in line:
                found = re.search(rb"port=(\d+)", line)
                self.metrics_port = int(found.group(1)) if found else None
            self.seen_event.set()
        self.seen_event.set()

    def dead(self) -> RuntimeError:
        return RuntimeError(f"{self.name} exited ({self.proc.returncode}); its last lines:\n"
                            + b"".join(list(self.tail)[-30:]).decode(errors="replace"))

    async def wait_for(self, pattern: bytes) -> float:
        """Seconds from the process start to the first line containing ``pattern``."""
        while pattern not in self.seen:
            if self.pump.done():
                raise self.dead()
            self.seen_event.clear()
            await self.seen_event.wait()
        return self.seen[pattern] - self.began

    async def reply(self) -> JSON:
        get = asyncio.ensure_future(self.replies.get())
        await asyncio.wait({get, self.pump}, return_when=asyncio.FIRST_COMPLETED)
        if not get.done():
            get.cancel()
            raise self.dead()
        return get.result()

    async def command(self, line: str) -> JSON:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        return await self.reply()

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        self.pump.cancel()
        await asyncio.gather(self.pump, return_exceptions=True)
        if self.log is not None:
            self.log.close()


async def spawn(name: str, args: list[str], log_dir: Path | None, *, stdin: bool = False) -> Proc:
    log = _open_log(log_dir, name)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL, preexec_fn=_die_with_parent)
    return Proc(name, proc, log)


def _open_log(log_dir: Path | None, name: str) -> IO[bytes] | None:
    return open(log_dir / f"{name}.log", "wb") if log_dir is not None else None  # Proc.stop closes it


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when this script dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def controller_args(kubeconfig: Path, pools: Path, identity: str) -> list[str]:
    return ["-m", "gangscale.cli", "run", "--kubeconfig", str(kubeconfig), "--config", str(pools),
            "--provider", "simulated", "--batch-idle", "0", "--metrics-host", "127.0.0.1", "--metrics-port", "0",
            "--leader-elect", "--leader-elect-identity", identity, "--log-format", "text", "--log-level", "info"]


# --- measurements --------------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(-(-len(ordered) * q // 100)) - 1))] if ordered else float("nan")


async def scrape(port: int | None) -> JSON:
    """The few series read from a controller's /metrics."""
    if port is None:
        return {}
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        text = await resp.text()
    out: JSON = {"plan_buckets": {}, "pass_buckets": {}}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            for series, prefix in (("gangscale_plan_pass_duration_seconds", "plan"),
                                   ("gangscale_pass_duration_seconds", "pass")):
                if s.name == f"{series}_bucket":
                    out[f"{prefix}_buckets"][float(s.labels["le"])] = s.value
                elif s.name == f"{series}_count":
                    out[f"{prefix}_count"] = s.value
                elif s.name == f"{series}_sum":
                    out[f"{prefix}_sum"] = s.value
            if s.name == "process_cpu_seconds_total":
                out["cpu"] = s.value
            elif s.name.startswith("gangscale_decision_latency_seconds") and \
                    s.labels.get("condition") == "Provisioned":
                if s.name.endswith("_count"):
                    out["provisioned_count"] = out.get("provisioned_count", 0) + s.value
                elif s.name.endswith("_sum"):
                    out["provisioned_sum"] = out.get("provisioned_sum", 0) + s.value
            elif s.name == "gangscale_last_pass_timestamp_seconds":
                out["last_pass"] = s.value
    return out


def plan_delta(before: JSON, after: JSON, prefix: str = "plan") -> JSON:
    """Planning passes (``prefix`` "pass": whole passes) between two scrapes: count, mean, and the bucket bounds
    holding p50/p90/p99/max."""
    count = after.get(f"{prefix}_count", 0) - before.get(f"{prefix}_count", 0)
    total = after.get(f"{prefix}_sum", 0) - before.get(f"{prefix}_sum", 0)
    out: JSON = {"passes": int(count), "mean_ms": round(1000 * total / count, 2) if count else None}
    buckets = sorted((le, n - before.get(f"{prefix}_buckets", {}).get(le, 0))
                     for le, n in after.get(f"{prefix}_buckets", {}).items())
    for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)):
        bound = next((le for le, n in buckets if count and n >= q * count), None)
        out[f"{label}_le_ms"] = None if bound is None else ("inf" if bound == float("inf") else bound * 1000)
    provisioned = after.get("provisioned_count", 0) - before.get("provisioned_count", 0)
    if provisioned:
        out["decision_latency_mean_s"] = round(
            (after.get("provisioned_sum", 0) - before.get("provisioned_sum", 0)) / provisioned, 3)
    return out


class Sampler:
    """VmRSS of the processes every 0.5 s; the maximum per process."""

    def __init__(self) -> None:
        self.procs: dict[str, int] = {}
        self.peak: dict[str, float] = {}
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            for name, pid in list(self.procs.items()):
                rss = memory(pid)["VmRSS"]
                self.peak[name] = max(self.peak.get(name, 0.0), rss)
            await asyncio.sleep(0.5)


class Window:
    """CPU of the processes, and the events the generator made, between two marks."""

    def __init__(self, server: Proc, procs: dict[str, Proc]) -> None:
        self.server, self.procs = server, procs

    async def mark(self) -> JSON:
        stats = await self.server.command("stats")
        return {"stats": stats, "cpu": {name: cpu_seconds(p.pid) for name, p in self.procs.items()},
                "wall": time.perf_counter()}

    @staticmethod
    def delta(a: JSON, b: JSON) -> JSON:
        events = b["stats"]["events"] - a["stats"]["events"]
        seconds = b["wall"] - a["wall"]
        out: JSON = {"seconds": round(seconds, 1), "events": events,
                     "events_per_s": round(events / seconds, 1) if seconds else None,
                     "skipped": b["stats"]["skipped"] - a["stats"]["skipped"],
                     "server_longest_gap_s": b["stats"]["longest_gap_s"], "cpu_s": {}, "cpu_per_1000_events": {},
                     "cpu_share": {}}
        for name in a["cpu"]:
            used = b["cpu"][name] - a["cpu"][name]
            out["cpu_s"][name] = round(used, 2)
            out["cpu_share"][name] = round(used / seconds, 3) if seconds else None
            out["cpu_per_1000_events"][name] = round(1000 * used / events, 3) if events else None
        return out


class Bench:
    """One run: the processes, the phases, the figures (``self.result``)."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.kubeconfig, self.pools = tmp / "kubeconfig", tmp / "pools.yaml"
        self.free_nodes = args.prs if args.pr_mode == "fit" else 0
        self.result: JSON = {"machine": machine(), "nodes": args.nodes, "free_nodes": self.free_nodes,
                             "pods": args.pods, "churn_rate": args.churn, "prs": args.prs, "pr_mode": args.pr_mode,
                             "pr_interval_s": args.pr_interval, "watch_window": args.watch_window, "phases_s": {}}
        self.procs: dict[str, Proc] = {}
        self.http: KubeHTTP | None = None
        self.sampler = Sampler()
        self.t0 = time.perf_counter()

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f}s] {text}", file=sys.stderr, flush=True)

    @property
    def server(self) -> Proc:
        return self.procs["server"]

    async def run(self) -> JSON:
        try:
            self.pools.write_text(POOLS)
            await self.start_server()
            self.http = await make_http(str(self.kubeconfig), user_agent="bench-scale")
            await self.measure_pod_size(self.http)
            self.say("controller: starting")
            self.result["controller_start"] = await self.start_controller("controller", SYNCED)
            self.result["phases_s"]["controller_sync"] = self.result["controller_start"]["start_to_synced_s"]
            if self.args.standby:
                self.say("standby: starting")
                self.result["standby_start"] = await self.start_controller("standby", STANDBY)
                self.result["phases_s"]["standby_sync"] = self.result["standby_start"]["start_to_synced_s"]
            window = Window(self.server, dict(self.procs))
            await asyncio.sleep(2)
            a = await window.mark()
            await asyncio.sleep(self.args.idle_seconds)
            self.result["idle"] = Window.delta(a, await window.mark())
            began = time.perf_counter()
            await self.churn_alone(window)
            await self.churn_and_requests(window, self.http)
            await self.server.command("churn 0")
            self.result["phases_s"]["churn"] = round(time.perf_counter() - began, 1)
            await asyncio.sleep(1)
            self.result["end_memory"] = {name: memory(p.pid) for name, p in self.procs.items()}
            self.result["sampled_max_rss_mib"] = dict(self.sampler.peak)
            self.result["log_warnings"] = {name: p.warnings for name, p in self.procs.items() if name != "server"}
            if self.args.standby:
                await self.handover()
            self.result["phases_s"]["total"] = round(time.perf_counter() - self.t0, 1)
            return self.result
        finally:
            await self.close()

    async def close(self) -> None:
        self.sampler.task.cancel()
        if self.http is not None:
            await self.http.api_client.close()
        for name in ("standby", "controller", "server"):
            if name in self.procs:
                await self.procs[name].stop()

    async def start_server(self) -> None:
        args = self.args
        self.say(f"API server: loading {args.nodes + self.free_nodes:,} nodes and {args.pods:,} pods in-process")
        server = self.procs["server"] = await spawn("server", [
            SELF, "--serve", "--kubeconfig", str(self.kubeconfig), "--nodes", str(args.nodes),
            "--pods", str(args.pods), "--free-nodes", str(self.free_nodes), "--watch-window", str(args.watch_window),
            ], args.log_dir, stdin=True)
        self.sampler.procs["server"] = server.pid
        while "ready" not in (ready := await server.reply()):
            self.say(f"  {ready['progress']:,} pods in {ready['seconds']} s")
        self.result["phases_s"]["preload"] = ready["preload_s"]
        self.result["server_after_preload"] = memory(server.pid)
        self.result["server_preload_cpu_s"] = round(cpu_seconds(server.pid), 1)
        self.say(f"preloaded in {ready['preload_s']} s (nodes {ready['nodes_s']} s); server RSS "
                 f"{self.result['server_after_preload']['VmRSS']} MiB")

    async def measure_pod_size(self, http: KubeHTTP) -> None:
        """Mean bytes of a pod as served: compact JSON, and as this server writes it (``json.dumps`` defaults)."""
        page = await http.request("GET", "/api/v1/pods", query={"limit": 300})
        items = page["items"]
        self.result["pod_bytes"] = round(sum(len(json.dumps(p, separators=(",", ":"))) for p in items) / len(items))
        self.result["pod_bytes_wire"] = round(sum(len(json.dumps(p)) for p in items) / len(items))

    async def start_controller(self, name: str, ready_line: bytes) -> JSON:
        server_cpu = cpu_seconds(self.server.pid)
        proc = self.procs[name] = await spawn(name, controller_args(self.kubeconfig, self.pools, name),
                                              self.args.log_dir)
        self.sampler.procs[name] = proc.pid
        seconds = await proc.wait_for(ready_line)
        row = {"start_to_synced_s": round(seconds, 2), "cpu_s": round(cpu_seconds(proc.pid), 2),
               "server_cpu_s": round(cpu_seconds(self.server.pid) - server_cpu, 2), **memory(proc.pid)}
        self.say(f"{name}: synced after {row['start_to_synced_s']} s, RSS {row['VmRSS']} MiB, peak {row['VmHWM']} MiB")
        return row

    async def handover(self) -> None:
        """The leader stops (SIGINT: it hands its lease back); the standby takes the lease, lists everything again
        (its watches may be behind) and reconciles: the time from the stop to its ``synced and reconciled``."""
        standby = self.procs["standby"]
        self.say("handover: stopping the leader")
        began = time.perf_counter()
        await self.procs.pop("controller").stop()
        seconds = await standby.wait_for(SYNCED) - (began - standby.began)
        row = self.result["handover"] = {"stop_to_synced_s": round(seconds, 2), **memory(standby.pid)}
        self.say(f"handover: the standby decides {row['stop_to_synced_s']} s after the leader stopped")

    async def churn_alone(self, window: Window) -> None:
        args = self.args
        self.say(f"churn alone: {args.churn:g} events/s for {args.churn_seconds:g} s")
        await self.server.command(f"churn {args.churn}")
        await asyncio.sleep(2)
        before = await scrape(self.procs["controller"].metrics_port)
        a = await window.mark()
        await asyncio.sleep(args.churn_seconds)
        row = self.result["churn_only"] = Window.delta(a, await window.mark())
        after = await scrape(self.procs["controller"].metrics_port)
        row["plan_passes"], row["passes"] = plan_delta(before, after), plan_delta(before, after, "pass")
        self.say(f"  {row['events_per_s']} events/s made; controller CPU "
                 f"{row['cpu_per_1000_events']['controller']} s per 1,000 events")

    async def churn_and_requests(self, window: Window, http: KubeHTTP) -> None:
        args = self.args
        self.say(f"churn and {args.prs} ProvisioningRequests, one every {args.pr_interval:g} s")
        created: dict[str, float] = {}
        provisioned: dict[str, float] = {}
        failed: dict[str, str] = {}
        finished = asyncio.Event()

        def on_event(event: ReflectorEvent[Any]) -> None:
            name = event.obj["metadata"]["name"]
            for cond in (event.obj.get("status") or {}).get("conditions") or []:
                if cond.get("status") != "True" or name in provisioned or name in failed:
                    continue
                if cond.get("type") == "Provisioned":
                    provisioned[name] = time.perf_counter()
                elif cond.get("type") == "Failed":
                    failed[name] = cond.get("reason", "")
            if len(provisioned) + len(failed) >= args.prs:
                finished.set()

        watch: Reflector[Any] = Reflector(http, PROVREQS)
        watch.add_handler(on_event)
        watcher = asyncio.create_task(watch.run())
        try:
            await asyncio.wait_for(watch.synced.wait(), 60)
            before = await scrape(self.procs["controller"].metrics_port)
            a = await window.mark()
            for i in range(args.prs):
                body = provreq(i)
                created[body["metadata"]["name"]] = time.perf_counter()
                await http.request("POST", PR_PATH, body=body)
                await asyncio.sleep(args.pr_interval)
            try:
                await asyncio.wait_for(finished.wait(), args.pr_timeout)
            except TimeoutError:
                self.say(f"  only {len(provisioned)} of {args.prs} requests provisioned {args.pr_timeout:g} s after "
                         "the last was created")
            b = await window.mark()
            after = await scrape(self.procs["controller"].metrics_port)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        latencies = [provisioned[n] - created[n] for n in provisioned]
        self.result["churn_and_prs"] = Window.delta(a, b)
        self.result["pr_latency_s"] = {
            "provisioned": len(provisioned), "failed": len(failed), "failed_reasons": sorted(set(failed.values())),
            **{k: round(percentile(latencies, q), 3) for k, q in (("p50", 50), ("p90", 90), ("p99", 99),
                                                                   ("max", 100))}}
        self.result["plan_passes"] = plan_delta(before, after)
        self.result["passes"] = plan_delta(before, after, "pass")
        if "cpu" in after and "cpu" in before:
            self.result["controller_metrics_cpu_s"] = round(after["cpu"] - before["cpu"], 2)


def machine() -> JSON:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    mem = ""
    with contextlib.suppress(OSError):
        mem = f"{int(Path('/proc/meminfo').read_text().split()[1]) / 1024 / 1024:.1f} GiB"
    return {"nproc": os.cpu_count(), "cpu_model": model, "memory": mem, "python": platform.python_version(),
            "kernel": platform.release()}


# --- the report ----------------------------------------------------------------------------------------------

def report(r: JSON) -> str:
    m = r["machine"]
    lines = [f"machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['memory']}, Python {m['python']}",
             f"cluster: {r['nodes']:,} GPU nodes with {r['pods']:,} pods of {r['pod_bytes']:,} bytes "
             f"({r['pod_bytes_wire']:,} as the server writes them)"
             + (f", plus {r['free_nodes']} empty nodes" if r["free_nodes"] else ""),
             f"preload (in-process): {r['phases_s']['preload']} s; server RSS "
             f"{r['server_after_preload']['VmRSS']:,} MiB", "",
             "| process | start → synced | its CPU | server CPU meanwhile | RSS at synced | peak RSS (end) "
             "| sampled max RSS |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ("controller", "standby"):
        row = r.get(f"{name}_start")
        if row:
            lines.append(f"| {name} | {row['start_to_synced_s']} s | {row['cpu_s']} s | {row['server_cpu_s']} s "
                         f"| {row['VmRSS']:,} MiB | {r['end_memory'][name]['VmHWM']:,} MiB "
                         f"| {r['sampled_max_rss_mib'].get(name, 0):,} MiB |")
    lines.append(f"| server | | | | | {r['end_memory']['server']['VmHWM']:,} MiB "
                 f"| {r['sampled_max_rss_mib'].get('server', 0):,} MiB |")
    lines += ["", "CPU seconds per 1,000 pod events (in brackets: share of one core over the window)", "",
              "| window | seconds | pod events/s | server stalled up to | " + " | ".join(r["idle"]["cpu_s"]) + " |",
              "|---|---:|---:|---:|" + "---:|" * len(r["idle"]["cpu_s"])]
    for key, label in (("idle", "idle"), ("churn_only", "churn alone"), ("churn_and_prs", "churn + requests")):
        w = r[key]
        cells = [f"{w['cpu_per_1000_events'][n] if w['events'] else '-'} ({w['cpu_share'][n]:.0%})"
                 for n in w["cpu_s"]]
        stall = f"{w['server_longest_gap_s']} s" if w["events"] else "-"
        lines.append(f"| {label} | {w['seconds']} | {w['events_per_s']} | {stall} | " + " | ".join(cells) + " |")
    lat, plan = r["pr_latency_s"], r["plan_passes"]
    lines += ["", f"ProvisioningRequests ({r['pr_mode']}), create → Provisioned=True under "
                  f"{r['churn_and_prs']['events_per_s']} pod events/s: {lat['provisioned']} of {r['prs']} provisioned"
                  + (f", {lat['failed']} failed ({', '.join(lat['failed_reasons'])})" if lat["failed"] else "")
                  + f"; p50 {lat['p50']} s, p90 {lat['p90']} s, p99 {lat['p99']} s, max {lat['max']} s",
              f"planning passes in that window (/metrics): {plan['passes']}, mean {plan['mean_ms']} ms; "
              f"p50 ≤ {plan['p50_le_ms']} ms, p99 ≤ {plan['p99_le_ms']} ms, max ≤ {plan['max_le_ms']} ms"
              + (f"; controller's own create → Provisioned mean {plan['decision_latency_mean_s']} s"
                 if "decision_latency_mean_s" in plan else ""),
              f"whole passes in that window: {r['passes']['passes']}, mean {r['passes']['mean_ms']} ms; "
              f"p50 ≤ {r['passes']['p50_le_ms']} ms, p99 ≤ {r['passes']['p99_le_ms']} ms, max ≤ "
              f"{r['passes']['max_le_ms']} ms",
              f"during churn alone: {r['churn_only']['plan_passes']['passes']} planning passes; "
              f"{r['churn_only']['passes']['passes']} whole passes, mean {r['churn_only']['passes']['mean_ms']} ms, "
              f"p99 ≤ {r['churn_only']['passes']['p99_le_ms']} ms",
              "reflector warnings: " + ", ".join(f"{n} {w}" for n, w in r["log_warnings"].items()),
              "phases: " + ", ".join(f"{k} {v} s" for k, v in r["phases_s"].items())]
    if "handover" in r:
        lines.append(f"handover: the standby decides {r['handover']['stop_to_synced_s']} s after the leader stopped "
                     f"(RSS {r['handover']['VmRSS']:,} MiB)")
    if r["churn_only"]["skipped"] or r["churn_and_prs"]["skipped"]:
        lines.append(f"the churn generator fell behind: {r['churn_only']['skipped'] + r['churn_and_prs']['skipped']}"
                     " events skipped")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=60000)
    parser.add_argument("--quick", action="store_true",
                        help="--nodes 300 --pods 9000 --prs 30 --churn-seconds 10 (a smoke run)")
    parser.add_argument("--churn", type=float, default=500.0, help="pod events per second (default 500)")
    parser.add_argument("--churn-seconds", type=float, default=20.0, help="the churn-alone window (default 20)")
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="the idle window (default 5)")
    parser.add_argument("--prs", type=int, default=100, help="ProvisioningRequests created under churn")
    parser.add_argument("--pr-interval", type=float, default=0.3, help="seconds between two creates")
    parser.add_argument("--pr-mode", choices=("fit", "scale-up"), default="fit",
                        help="fit: on free nodes, one pass; scale-up: one new gpu node each")
    parser.add_argument("--pr-timeout", type=float, default=300.0,
                        help="how long to wait for the last request (default 300)")
    parser.add_argument("--standby", action="store_true", help="also start a standby replica")
    parser.add_argument("--watch-window", type=int, default=30000,
                        help="the API server's watch window, events per resource (default 30000)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up after this long (default 3600)")
    parser.add_argument("--log-dir", type=Path, default=None, help="write each process's output here")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--free-nodes", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return asyncio.run(serve(args))
    if args.quick:
        args.nodes, args.pods, args.prs, args.churn_seconds = 300, 9000, 30, 10.0
    if args.pods > args.nodes * PODS_PER_NODE:
        parser.error(f"at most {PODS_PER_NODE} pods per node: --pods {args.pods} needs --nodes "
                     f"{-(-args.pods // PODS_PER_NODE)}")
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = asyncio.run(guarded(args, Path(tmp)))
        except (KeyboardInterrupt, asyncio.CancelledError):
            print("bench_scale: interrupted; its processes are stopped", file=sys.stderr)
            return 130
        except TimeoutError:
            print(f"bench_scale: gave up after --timeout {args.timeout:g} s; its processes are stopped",
                  file=sys.stderr)
            return 1
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


async def guarded(args: argparse.Namespace, tmp: Path) -> JSON:
    """``run`` under the hang guard; SIGTERM cancels it as Ctrl-C does, so the children are stopped either way."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await asyncio.wait_for(Bench(args, tmp).run(), args.timeout)


if __name__ == "__main__":
    sys.exit(main())
