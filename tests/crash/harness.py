"""Kill a real ``gangscale run`` process at a chosen point and judge the outcome from the API server alone.

Two processes, as an operator runs them: ``gangscale sim apiserver --control`` and ``gangscale run`` (the
simulated cloud inside it, on the wall clock). A *kill point* is the API request the gangscale process makes
right after the moment to kill it at: the harness asks the API server to hold that request
(``/_sim/faults``), waits until it is held, sends SIGKILL, and then releases the hold unserved (503), so the
process died exactly between two API calls and nothing of the held request reached storage. A second process
is then started and must finish or undo what the first one left.

Everything judged is read from the API server: ProvisioningRequest conditions and the Nodes, watched from the
first moment so that the largest number of nodes that ever existed at once is known. Waits poll the API with a
hang guard; no test asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gangscale.kube.client import make_http
from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector, ReflectorEvent
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL
from tests.builders import NODES, PODTEMPLATES, PROVREQS

JSON = dict[str, Any]
NS = "default"
#: How long any one wait may take before the test fails as hung (never a timing assertion).
HANG_GUARD = 60.0
POLL = 0.05

POOLS = """\
nodePools:
  - name: tpu
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: us-central1-a
    maxUnits: 6
    simulated: {provisionSeconds: 1}
  - name: gpu
    machineType: a3-highgpu-8g
    zone: us-central1-a
    maxUnits: 6
    simulated: {provisionSeconds: 0.5}
  - name: cpu
    zone: us-central1-a
    maxUnits: 4
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 0.5}
"""

#: One TPU v5e 2x4 slice host: 4 chips, so a 2-host slice runs two of these pods.
TPU_TEMPLATE = {"nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                 "cloud.google.com/gke-tpu-topology": "2x4"},
                "containers": [{"name": "worker", "image": "jax:latest",
                                "resources": {"limits": {"google.com/tpu": "4"}}}]}
#: A whole a3-highgpu-8g node.
GPU_TEMPLATE = {"containers": [{"name": "trainer", "image": "trainer:v1",
                                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
#: A CPU pod held to the cpu pool (TPU and GPU hosts have CPUs to spare too).
CPU_TEMPLATE = {"nodeSelector": {"gangscale.io/node-pool": "cpu"},
                "containers": [{"name": "worker", "image": "worker:v1",
                                "resources": {"requests": {"cpu": "12", "memory": "8Gi"}}}]}

#: ``gangscale run`` flags every process gets (more can be added per start).
RUN_FLAGS = ("--provider", "simulated", "--metrics-host", "127.0.0.1", "--metrics-port", "0",
             "--batch-idle", "100ms", "--batch-max", "1s", "--log-format", "json", "--no-ray",
             # Leader election as deployed, on a short lease: a killed process's successor takes over within
             # about 1 s instead of 15.
             "--leader-elect-lease-duration", "1s", "--leader-elect-renew-deadline", "750ms",
             "--leader-elect-retry-period", "200ms")


def ready(node: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


@dataclass
class NodeLog:
    """Every node that ever existed, and the most that existed at once (fed by a watch from the start)."""

    alive: dict[str, JSON] = field(default_factory=dict)
    #: (name, unit, token) of every node as it was created, in order: a name made twice appears twice.
    created: list[tuple[str, str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    most: int = 0

    def on_event(self, event: ReflectorEvent) -> None:
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            self.alive.pop(name, None)
            self.deleted.append(name)
            return
        if event.type == "ADDED":
            labels = event.obj["metadata"].get("labels") or {}
            self.created.append((name, labels.get(UNIT_LABEL, ""), labels.get(TOKEN_LABEL, "")))
        self.alive[name] = event.obj
        self.most = max(self.most, len(self.alive))


@dataclass
class Gangscale:
    """One ``gangscale run`` process; its output goes to ``log``."""

    proc: asyncio.subprocess.Process
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def messages(self) -> list[str]:
        out = []
        for line in self.text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(str(json.loads(line).get("msg", "")))
        return out

    async def wait_logged(self, fragment: str) -> None:
        await wait_until(lambda: fragment in self.text() or self.proc.returncode is not None,
                         f"gangscale to log {fragment!r}")
        assert fragment in self.text(), f"gangscale exited ({self.proc.returncode}) before logging {fragment!r}"

    async def kill(self) -> None:
        """SIGKILL: nothing is flushed, no task is cancelled, no finally block runs."""
        if self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.terminate()
        return await asyncio.wait_for(self.proc.wait(), HANG_GUARD)


@dataclass
class Cluster:
    workdir: Path
    kubeconfig: Path
    pools: Path
    http: KubeHTTP
    nodes: NodeLog
    runs: list[Gangscale] = field(default_factory=list)

    # -- processes ----------------------------------------------------------------------------------------

    async def start_gangscale(self, *flags: str, env: dict[str, str] | None = None) -> Gangscale:
        """A ``gangscale run`` process (``flags`` after the common ones, so they win); ``env`` replaces the
        environment."""
        log = self.workdir / f"gangscale-{len(self.runs)}.log"
        out = log.open("wb")
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gangscale.cli", "run", "--kubeconfig", str(self.kubeconfig),
                "--config", str(self.pools), *RUN_FLAGS, *flags, stdout=out, stderr=asyncio.subprocess.STDOUT,
                env=env)
        finally:
            out.close()
        run = Gangscale(proc, log)
        self.runs.append(run)
        await run.wait_logged("synced and reconciled")
        return run

    # -- the API server's knobs -----------------------------------------------------------------------------

    async def hold(self, **fault: Any) -> None:
        await self.http.request("POST", "/_sim/faults", body={"hold": True, **fault})

    async def fail(self, **fault: Any) -> None:
        await self.http.request("POST", "/_sim/faults", body=fault)

    async def held(self) -> list[JSON]:
        return list((await self.http.request("GET", "/_sim/faults"))["held"])

    async def kill_when_held(self, run: Gangscale) -> str:
        """Wait until the process has a request held, SIGKILL it, drop the request and every fault."""
        await wait_until_async(self._has_held, "a request to be held")
        request = str((await self.held())[0]["request"])
        await run.kill()
        await self.http.request("POST", "/_sim/release", body={"serve": False})
        await self.http.request("DELETE", "/_sim/faults")
        return request

    async def _has_held(self) -> bool:
        return bool(await self.held())

    # -- objects ---------------------------------------------------------------------------------------------

    async def template(self, name: str, spec: JSON) -> None:
        await self.http.request("POST", PODTEMPLATES.path(NS), body={
            "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": {"spec": spec}})

    async def provreq(self, name: str, template: str, count: int, *,
                      cls: str = "atomic-scale-up.gangscale.io", parameters: dict[str, str] | None = None) -> None:
        await self.http.request("POST", PROVREQS.path(NS), body={
            "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "metadata": {"name": name},
            "spec": {"provisioningClassName": cls, "parameters": parameters or {},
                     "podSets": [{"podTemplateRef": {"name": template}, "count": count}]}})

    async def static_node(self, name: str, labels: dict[str, str], allocatable: dict[str, str]) -> None:
        """A Ready node gangscale did not make (no unit label): it must never remove it."""
        await self.http.request("POST", NODES.path(), body={
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "static node"}]}})

        async def untainted() -> bool:  # the node lifecycle controller lifts the not-ready taint of a Ready node
            node = await self.http.request("GET", NODES.path(name=name))
            return not (node.get("spec") or {}).get("taints")

        await wait_until_async(untainted, f"node {name} to lose its not-ready taint")

    async def pr(self, name: str) -> JSON:
        return await self.http.request("GET", PROVREQS.path(NS, name))

    async def condition(self, name: str, ctype: str) -> JSON | None:
        for cond in (await self.pr(name)).get("status", {}).get("conditions") or []:
            if cond["type"] == ctype:
                return dict(cond)
        return None

    async def list_nodes(self) -> list[JSON]:
        return list((await self.http.request("GET", NODES.path()))["items"])

    async def pr_nodes(self, name: str) -> list[JSON]:
        """The nodes made under the tokens the PR's recorded scale-up names."""
        tokens = recorded_tokens(await self.pr(name))
        return [n for n in await self.list_nodes() if n["metadata"]["labels"].get(TOKEN_LABEL) in tokens]


def recorded_tokens(pr: JSON) -> set[str]:
    raw = ((pr.get("status") or {}).get("provisioningClassDetails") or {}).get("gangscale.io/scale-up")
    if not raw:
        return set()
    return {str(step["token"]) for step in json.loads(raw)["steps"]}


def units_of(nodes: list[JSON]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node in nodes:
        out.setdefault(node["metadata"]["labels"].get(UNIT_LABEL, ""), []).append(node["metadata"]["name"])
    return out


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"hang guard: waited {HANG_GUARD:g}s for {what}")
        await asyncio.sleep(POLL)


async def wait_until_async(predicate: Callable[[], Any], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"hang guard: waited {HANG_GUARD:g}s for {what}")
        await asyncio.sleep(POLL)


@contextlib.asynccontextmanager
async def crash_cluster(workdir: Path) -> AsyncIterator[Cluster]:
    """``gangscale sim apiserver --control`` in its own process, a client, and a node watch from the start.

    On the way out every gangscale process still running is stopped, and their logs are printed (pytest shows
    them for a failed test)."""
    kubeconfig, pools = workdir / "kubeconfig", workdir / "pools.yaml"
    pools.write_text(POOLS)
    api_log = workdir / "apiserver.log"
    out = api_log.open("wb")
    try:
        api = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", "0", "--kubeconfig",
            str(kubeconfig), "--control", "--bookmark-interval", "1", stdout=out, stderr=asyncio.subprocess.STDOUT)
    finally:
        out.close()
    cluster: Cluster | None = None
    watch: asyncio.Task[None] | None = None
    try:
        await wait_until(lambda: "stop with Ctrl-C" in api_log.read_text() or api.returncode is not None,
                         "the API server to listen")
        http = await make_http(str(kubeconfig), user_agent="crash-harness")
        nodes = NodeLog()
        reflector = Reflector(http, NODES)
        reflector.add_handler(nodes.on_event)
        watch = asyncio.create_task(reflector.run(), name="crash harness node watch")
        await asyncio.wait_for(reflector.synced.wait(), HANG_GUARD)
        cluster = Cluster(workdir, kubeconfig, pools, http, nodes)
        yield cluster
    finally:
        if cluster is not None:
            for run in cluster.runs:
                if run.proc.returncode is None:
                    await run.kill()
                print(f"----- {run.log.name} -----\n{run.text()}")
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if cluster is not None:
            await cluster.http.api_client.close()
        if api.returncode is None:
            api.terminate()
        await asyncio.wait_for(api.wait(), HANG_GUARD)


def tracebacks(run: Gangscale) -> list[str]:
    return [line for line in run.text().splitlines() if "Traceback" in line]


async def no_api_error(call: Callable[[], Any]) -> bool:
    try:
        await call()
    except ApiError:
        return False
    return True
