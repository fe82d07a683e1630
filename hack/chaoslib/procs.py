"""The processes of a chaos run: ``gangscale sim apiserver --control`` and two ``gangscale run`` replicas,
restarted like a kubelet restarts a container (a short delay after each exit) while the run goes on.

Every replica start gets its own pool file (simulated runs: cloud faults drawn from the run's seed, spot reclaims from
a generator of their own, or none of either once the faults stop; gke runs: the run's pool file, the faults being in
the fake cloud, ``chaoslib.gcp``) and an identity:
``r<slot>-<start>`` (a new pod), or the slot's previous identity (a container restarted in the same pod). Its user
agents carry that identity, so the API server's request log (and the fake cloud's) tells the replicas apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from chaoslib.plan import faults_of, pool_file

#: Leader election as deployed, scaled down (15/10/2 s -> 2/1.5/0.3 s) so that a run takes seconds.
LEASE_SECONDS = 2.0
RUN_FLAGS = (
    "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--log-format", "json",
    "--no-ray", "--batch-idle", "100ms", "--batch-max", "1s", "--booking-ttl", "10m",
    "--scale-down-unneeded-time", "1s", "--retry-initial", "500ms",
    "--retry-max", "2s", "--pool-backoff", "1s",
    # Scaled down with the backoff: an unhealthy pool closed for the real 30 minutes would outlast the run's settling.
    "--pool-unhealthy-cooldown", "5s",
    "--leader-elect-lease-duration", f"{LEASE_SECONDS:g}s", "--leader-elect-renew-deadline", "1500ms",
    "--leader-elect-retry-period", "300ms")
#: How long any one wait of the harness may take before the run is declared hung.
HANG_GUARD = 60.0
LOST_LEASE = "the leader lease was lost"


@dataclass
class Start:
    """One process start of a replica slot."""

    slot: int
    number: int
    identity: str
    log: Path
    pools: str
    proc: asyncio.subprocess.Process
    #: What the harness did to it: "kill", "term" (exits it expects), or "" (it exited by itself).
    ended_by: str = ""
    paused: bool = False
    #: When the harness had it stopped (wall-clock seconds, as the API server's request log).
    pauses: list[tuple[float, float]] = field(default_factory=list)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def messages(self) -> list[str]:
        out = []
        for line in self.text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(str(json.loads(line).get("msg", "")))
        return out

    def observe_port(self) -> int | None:
        for line in self.text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("msg") == "observe server listening":
                    return int(entry["port"])
        return None

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


#: A start's pool file, given the generators of cloud faults and of spot reclaims (None once the faults stopped) and
#: whether the campaign's spot pools are spot.
PoolsFor = Callable[[random.Random | None, random.Random | None, bool], str]


@dataclass(frozen=True)
class Cloud:
    """How a replica reaches its cloud: its provider flags, its environment (None: the harness's), and its pool file
    for a start (:data:`PoolsFor`)."""

    flags: tuple[str, ...]
    pools: PoolsFor
    env: dict[str, str] | None = None


#: The simulated cloud, inside each replica: its faults are in each start's pool file.
SIMULATED = Cloud(("--provider", "simulated", "--max-node-provision-time", "4s"), pool_file)


@dataclass
class Replicas:
    """Two replica slots; ``faults`` draws each start's cloud faults (None: clean pool files), ``reclaims`` its spot
    reclaims (None: none), on the spot pools if ``spot``."""

    workdir: Path
    kubeconfig: Path
    faults: random.Random | None
    cloud: Cloud = SIMULATED
    reclaims: random.Random | None = None
    spot: bool = False
    starts: list[Start] = field(default_factory=list)
    current: dict[int, Start] = field(default_factory=dict)
    supervising: bool = True
    identity_rng: random.Random = field(default_factory=lambda: random.Random(0))

    async def start(self, slot: int) -> Start:
        number = len(self.starts)
        previous = self.current.get(slot)
        same_pod = previous is not None and previous.ended_by != "term" and self.identity_rng.random() < 0.3
        identity = previous.identity if same_pod and previous is not None else f"r{slot}-{number}"
        text = self.cloud.pools(self.faults, self.reclaims, self.spot)
        pools = self.workdir / f"pools-{number}.yaml"
        pools.write_text(text)
        log = self.workdir / f"replica-{number}-{identity}.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gangscale.cli", "run", "--kubeconfig", str(self.kubeconfig),
                "--config", str(pools), *self.cloud.flags, *RUN_FLAGS, "--leader-elect-identity", identity,
                stdout=out, stderr=asyncio.subprocess.STDOUT, env=self.cloud.env)
        start = Start(slot, number, identity, log, text, proc)
        self.starts.append(start)
        self.current[slot] = start
        return start

    async def supervise(self) -> None:
        """Restart an exited replica half a second after it exits, as a kubelet would (no growing backoff: the
        run is short)."""
        while True:
            for slot, start in list(self.current.items()):
                if not start.alive and self.supervising:
                    await asyncio.sleep(0.5)
                    if self.supervising and self.current[slot] is start:
                        await self.start(slot)
            await asyncio.sleep(0.05)

    def pick(self, role: str, leader: str) -> Start | None:
        """The live replica that leads (its identity holds the Lease) or stands by."""
        live = [s for s in self.current.values() if s.alive and not s.paused]
        leading = [s for s in live if s.identity == leader]
        others = [s for s in live if s.identity != leader]
        chosen = leading if role == "leader" else others
        return chosen[0] if chosen else None

    def kill(self, start: Start) -> None:
        start.ended_by = "kill"
        self._signal(start, signal.SIGKILL)

    def term(self, start: Start) -> None:
        # A process SIGKILLed a moment ago may not be reaped yet: it stays "kill" (its exit is -9).
        if start.ended_by != "kill":
            start.ended_by = "term"
        self._signal(start, signal.SIGTERM)

    async def pause(self, start: Start, seconds: float) -> None:
        start.paused = True
        began = time.time()
        self._signal(start, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._signal(start, signal.SIGCONT)
            start.paused = False
            start.pauses.append((began, time.time()))

    @staticmethod
    def _signal(start: Start, sig: signal.Signals) -> None:
        if start.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(start.proc.pid, sig)

    async def stop_all(self) -> None:
        self.supervising = False
        for start in self.starts:
            if start.alive:
                self._signal(start, signal.SIGCONT)
                self.kill(start)
            await start.proc.wait()

    async def save_debug_plans(self) -> None:
        """Each live replica's ``/debug/plans`` next to its log: what it thought when the run went wrong."""
        async with aiohttp.ClientSession() as session:
            for start in self.current.values():
                port = start.observe_port()
                if not start.alive or port is None:
                    continue
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(f"http://127.0.0.1:{port}/debug/plans",
                                           timeout=aiohttp.ClientTimeout(total=5)) as resp:
                        (self.workdir / f"debug-plans-{start.number}-{start.identity}.json").write_bytes(
                            await resp.read())

    def cloud_faults(self) -> int:
        return sum(len(faults_of(s.pools)) for s in self.starts)


@contextlib.asynccontextmanager
async def apiserver(workdir: Path) -> AsyncIterator[Path]:
    kubeconfig, log = workdir / "kubeconfig", workdir / "apiserver.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", "0", "--kubeconfig",
            str(kubeconfig), "--control", "--bookmark-interval", "1", "--node-lifecycle", stdout=out,
            stderr=asyncio.subprocess.STDOUT)
    try:
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        while "stop with Ctrl-C" not in log.read_text(errors="replace"):
            if proc.returncode is not None or asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"the API server did not start:\n{log.read_text(errors='replace')}")
            await asyncio.sleep(0.05)
        yield kubeconfig
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), HANG_GUARD)

