"""One chaos run: start the API server and two replicas, play the seed's schedule for the fault phase, stop the
faults, roll both replicas onto clean pool files (SIGTERM, so the lease is handed over), wait until everything
settles, and judge (``chaoslib.checks``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoslib import checks
from chaoslib.observe import NS, History, request_log, watching
from chaoslib.plan import TEMPLATES, Action, Plan, make_plan
from chaoslib.procs import HANG_GUARD, LEASE_SECONDS, Replicas, Start, apiserver
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import NODES, PODTEMPLATES, PROVREQS
from gangscale.kube.transport import KubeHTTP

JSON = dict[str, Any]
CLASS = "atomic-scale-up.gangscale.io"
#: After the end state first holds, it must still hold this much later (scale-down runs after 1 s unneeded).
STABLE_FOR = 2.5


@dataclass
class Outcome:
    seed: int
    violations: list[str] = field(default_factory=list)
    gangs: int = 0
    deletes: int = 0
    kills: int = 0
    terms: int = 0
    pauses: int = 0
    api_faults: int = 0
    api_faults_acted: int = 0
    cloud_faults: int = 0
    starts: int = 0
    leaders: int = 0
    changes_judged: int = 0
    late_after_pause: int = 0
    complete: bool = True
    settle_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.violations

    def line(self) -> str:
        verdict = "clean" if self.clean else f"{len(self.violations)} VIOLATION(S)"
        note = "" if self.complete else " (watch history incomplete: a watch re-listed)"
        return (f"seed {self.seed}: {verdict}: gangs {self.gangs} (deleted {self.deletes}), kills {self.kills}, "
                f"terms {self.terms}, pauses {self.pauses}, api faults {self.api_faults_acted} hits of "
                f"{self.api_faults}, cloud faults {self.cloud_faults} over {self.starts} starts, "
                f"leaders {self.leaders}, changes judged {self.changes_judged}"
                f"{f' ({self.late_after_pause} late after a pause)' if self.late_after_pause else ''}, settled in "
                f"{self.settle_seconds:.1f}s, {self.seconds:.0f}s{note}")


@dataclass
class Run:
    plan: Plan
    http: KubeHTTP
    history: History
    replicas: Replicas
    outcome: Outcome
    uids: dict[str, str] = field(default_factory=dict)
    background: list[asyncio.Task[None]] = field(default_factory=list)

    async def act(self, action: Action) -> None:
        if action.kind == "create" and action.gang is not None:
            gang = action.gang
            made = await self.http.request("POST", PROVREQS.path(NS), body={
                "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                "metadata": {"name": gang.name},
                "spec": {"provisioningClassName": CLASS,
                         "podSets": [{"podTemplateRef": {"name": gang.pool}, "count": gang.pods}]}})
            self.uids[gang.name] = made["metadata"]["uid"]
        elif action.kind == "delete" and action.gang is not None:
            with contextlib.suppress(ApiError):
                await self.http.request("DELETE", PROVREQS.path(NS, action.gang.name))
            self.outcome.deletes += 1
        elif action.kind == "api-fault":
            await self.http.request("POST", "/_sim/faults", body=action.fault)
            self.outcome.api_faults += 1
        else:
            target = self.replicas.pick(action.target, self.history.holder())
            if target is None:
                return
            if action.kind == "kill":
                self.replicas.kill(target)
                self.outcome.kills += 1
            elif action.kind == "term":
                self.replicas.term(target)
                self.outcome.terms += 1
            else:
                self.background.append(asyncio.create_task(self.replicas.pause(target, action.seconds)))
                self.outcome.pauses += 1

    async def stop_faults(self) -> None:
        state = await self.http.request("GET", "/_sim/faults")
        self.outcome.api_faults_acted = sum(int(f.get("acted") or 0) for f in state["faults"])
        await self.http.request("DELETE", "/_sim/faults")
        await asyncio.gather(*self.background)
        self.replicas.faults = None  # every start from now on gets a clean pool file

    async def roll(self) -> None:
        """Replace both replicas, one after the other, as a rolling update does (SIGTERM: the leader hands over)."""
        for slot in (0, 1):
            old = self.replicas.current[slot]
            if old.alive:
                self.replicas.term(old)
            await asyncio.wait_for(old.proc.wait(), HANG_GUARD)
            await until(lambda s=slot, o=old: self.replicas.current[s] is not o, "the replica to restart")
            new = self.replicas.current[slot]
            await until(lambda n=new: not n.alive or any(
                "standby:" in m or "synced and reconciled" in m for m in n.messages()), "the new replica to sync")

    async def end_state(self) -> list[str]:
        requests = (await self.http.request("GET", PROVREQS.path(NS)))["items"]
        nodes = (await self.http.request("GET", NODES.path()))["items"]
        return checks.at_the_end(requests, nodes, checks.by_name(self.plan.gangs()))

    async def settle(self, guard: float) -> list[str]:
        """Wait until the end state holds, and still holds a little later; else its problems at the guard."""
        deadline = time.monotonic() + guard
        problems = await self.end_state()
        while time.monotonic() < deadline:
            if not problems:
                await asyncio.sleep(STABLE_FOR)
                problems = await self.end_state()
                if not problems:
                    return []
                continue
            await asyncio.sleep(0.5)
            problems = await self.end_state()
        return [f"not settled after {guard:g}s: {p}" for p in problems]


async def until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"hang guard: waited {HANG_GUARD:g}s for {what}")
        await asyncio.sleep(0.05)


async def run_once(seed: int, workdir: Path, *, fault_seconds: float = 15.0, settle_guard: float = 90.0) -> Outcome:
    started = time.monotonic()
    plan = make_plan(seed, fault_seconds)
    outcome = Outcome(seed, gangs=plan.count("create"))
    async with apiserver(workdir) as kubeconfig, watching(str(kubeconfig)) as (http, history):
        for name, spec in TEMPLATES.items():
            await http.request("POST", PODTEMPLATES.path(NS), body={
                "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": {"spec": spec}})
        replicas = Replicas(workdir, kubeconfig, faults=random.Random(seed * 7919 + 1),
                            identity_rng=random.Random(seed))
        run = Run(plan, http, history, replicas, outcome)
        supervisor = asyncio.create_task(replicas.supervise(), name="chaos supervisor")
        try:
            await replicas.start(0)
            await replicas.start(1)
            await until(lambda: bool(history.holder()), "a replica to take the lease")
            t0 = time.monotonic()
            for action in plan.actions:
                await asyncio.sleep(max(0.0, t0 + action.at - time.monotonic()))
                await run.act(action)
            await asyncio.sleep(max(0.0, t0 + fault_seconds - time.monotonic()))
            await run.stop_faults()
            settling = time.monotonic()
            await run.roll()
            outcome.violations += await run.settle(settle_guard)
            outcome.settle_seconds = time.monotonic() - settling
            if outcome.violations:
                await replicas.save_debug_plans()
        except TimeoutError as exc:
            outcome.violations.append(str(exc))
        finally:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
            await replicas.stop_all()
        log = await request_log(http)
        judged(outcome, run, log, history, replicas.starts)
        if outcome.violations:  # what the judges read, next to the processes' logs
            (workdir / "requests.json").write_text(json.dumps(log, indent=0) + "\n")
    outcome.seconds = time.monotonic() - started
    return outcome


def judged(outcome: Outcome, run: Run, log: list[JSON], history: History, starts: list[Start]) -> None:
    gangs_by_uid = {run.uids[gang.name]: gang for gang in run.plan.gangs() if gang.name in run.uids}
    outcome.complete = history.complete
    if outcome.complete:
        outcome.violations += checks.during_run(history, gangs_by_uid)
    pauses: dict[str, list[tuple[float, float]]] = {}
    for start in starts:
        pauses.setdefault(start.identity, []).extend(start.pauses)
    lead = checks.leadership(log, LEASE_SECONDS, pauses)
    outcome.changes_judged, outcome.late_after_pause = lead.judged, lead.late_after_pause
    outcome.violations += lead.problems
    outcome.violations += checks.processes(starts)
    outcome.leaders = len(history.leaders())
    outcome.starts = len(starts)
    outcome.cloud_faults = run.replicas.cloud_faults()
