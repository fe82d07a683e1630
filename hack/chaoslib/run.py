"""One chaos run: start the API server (and, for a gke run, the fake Google Cloud, ``chaoslib.gcp``; for an aws run,
the fake EC2, ``chaoslib.aws``) and two
replicas, play the seed's schedule for the fault phase, stop the faults, roll both replicas onto clean pool files
(SIGTERM, so the lease is handed over), wait until everything settles, and judge (``chaoslib.checks``)."""

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
from chaoslib.aws import AwsCloud, aws_cloud, instances_at_the_end
from chaoslib.awsplan import AWS_POD_TEMPLATES
from chaoslib.gcp import GkeCloud, gke_cloud
from chaoslib.observe import NS, History, request_log, watching
from chaoslib.plan import TEMPLATES, Action, Plan, make_plan
from chaoslib.procs import HANG_GUARD, LEASE_SECONDS, SIMULATED, Cloud, Replicas, Start, apiserver
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
    provider: str = "simulated"
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
    #: gke (aws) runs: gangscale's exchanges with the fake cloud checked against Google's discovery documents
    #: (botocore's EC2 model), and its changes to the cloud judged for leadership (counted in ``changes_judged`` too).
    exchanges_checked: int = 0
    cloud_changes_judged: int = 0
    #: gke (aws) runs: calls the cloud faults acted on (injected errors, lost answers; broken slices made, reads
    #: held).
    cloud_faults_acted: int = 0
    #: Nodes the simulated cloud reclaimed (spot), and requests revoked.
    reclaims: int = 0
    revoked: int = 0
    complete: bool = True
    settle_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.violations

    def line(self) -> str:
        verdict = "clean" if self.clean else f"{len(self.violations)} VIOLATION(S)"
        note = "" if self.complete else " (watch history incomplete: a watch re-listed)"
        cloud = f"cloud faults {self.cloud_faults} over {self.starts} starts, reclaims {self.reclaims} (revoked " \
            f"{self.revoked})" if self.provider == "simulated" else \
            f"cloud faults {self.cloud_faults} ({self.cloud_faults_acted} hits), {self.starts} starts, " \
            f"cloud exchanges checked {self.exchanges_checked}" + \
            (f", reclaims {self.reclaims} (revoked {self.revoked})" if self.provider == "aws" else "")
        return (f"seed {self.seed} {self.provider}: {verdict}: gangs {self.gangs} (deleted {self.deletes}), kills "
                f"{self.kills}, terms {self.terms}, pauses {self.pauses}, api faults {self.api_faults_acted} hits of "
                f"{self.api_faults}, {cloud}, leaders {self.leaders}, changes judged {self.changes_judged}"
                f"{f' ({self.cloud_changes_judged} to the cloud)' if self.provider != 'simulated' else ''}"
                f"{f' ({self.late_after_pause} late after a pause)' if self.late_after_pause else ''}, settled in "
                f"{self.settle_seconds:.1f}s, {self.seconds:.0f}s{note}")


@dataclass
class Run:
    plan: Plan
    http: KubeHTTP
    history: History
    replicas: Replicas
    outcome: Outcome
    cloud: GkeCloud | AwsCloud | None = None
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
        elif action.kind == "cloud-fault":
            if self.cloud is not None:
                self.cloud.apply(action)
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
        if self.cloud is not None:
            await self.cloud.stop_faults()
        await asyncio.gather(*self.background)
        self.replicas.faults = self.replicas.reclaims = None  # every start from now on gets a clean pool file

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
        reclaimed = self.history.reclaimed()
        if isinstance(self.cloud, AwsCloud):
            reclaimed |= self.cloud.reclaimed_units()
        problems = checks.at_the_end(requests, nodes, checks.by_name(self.plan.gangs()), self.history.claims,
                                     reclaimed, self.history.tokens, self.history.reclaimed_pools())
        names = [n["metadata"]["name"] for n in nodes]
        if isinstance(self.cloud, GkeCloud):
            problems += checks.cloud_at_the_end(*self.cloud.groups(), names)
        elif isinstance(self.cloud, AwsCloud):
            problems += instances_at_the_end(self.cloud.ec2.instances.values(), names)
        return problems

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


async def run_once(seed: int, workdir: Path, *, provider: str = "simulated", fault_seconds: float = 15.0,
                   settle_guard: float = 90.0, reclaims: bool = True) -> Outcome:
    started = time.monotonic()
    plan = make_plan(seed, fault_seconds, provider, reclaims)
    outcome = Outcome(seed, provider, gangs=plan.count("create"))
    async with contextlib.AsyncExitStack() as stack:
        kubeconfig = await stack.enter_async_context(apiserver(workdir))
        http, history = await stack.enter_async_context(watching(str(kubeconfig)))
        cloud: GkeCloud | AwsCloud | None = None
        if provider == "gke":
            cloud = await stack.enter_async_context(gke_cloud(seed, workdir, kubeconfig))
        elif provider == "aws":
            cloud = await stack.enter_async_context(aws_cloud(workdir, kubeconfig, spot=reclaims))
            history.tokens = cloud.node_token()
        await _play(plan, workdir, kubeconfig, http, history, cloud, outcome, settle_guard, reclaims)
    outcome.seconds = time.monotonic() - started
    return outcome


async def _play(plan: Plan, workdir: Path, kubeconfig: Path, http: KubeHTTP, history: History,
                cloud: GkeCloud | AwsCloud | None, outcome: Outcome, settle_guard: float, reclaims: bool) -> None:
    seed, fault_seconds = plan.seed, plan.fault_seconds
    for name, spec in (AWS_POD_TEMPLATES if isinstance(cloud, AwsCloud) else TEMPLATES).items():
        await http.request("POST", PODTEMPLATES.path(NS), body={
            "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": {"spec": spec}})
    reaches = SIMULATED if cloud is None else Cloud(cloud.flags(), lambda *_: cloud.pools, cloud.env())
    # Spot reclaims in pool files are the simulated cloud's (the fake Google Cloud has none; the fake EC2's are
    # cloud-fault actions), from a generator of their own.
    spot = reclaims and cloud is None
    replicas = Replicas(workdir, kubeconfig, faults=random.Random(seed * 7919 + 1), cloud=reaches,
                        identity_rng=random.Random(seed), reclaims=random.Random(seed * 7919 + 3) if spot else None,
                        spot=spot)
    run = Run(plan, http, history, replicas, outcome, cloud)
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
        if cloud is not None:
            (workdir / "cloud-changes.json").write_text(json.dumps(cloud.traffic.changes, indent=0) + "\n")
            calls = [f"{c.time:.6f} {c.method} {c.path} {c.status}" for c in cloud.gcp.calls] \
                if isinstance(cloud, GkeCloud) else \
                [f"{c.time:.6f} {c.action} {c.status} {c.user_agent} {c.form.get('ClientToken', '')}"
                 for c in cloud.ec2.calls]
            (workdir / "cloud-calls.txt").write_text("".join(f"{line}\n" for line in calls))


#: At most this many discovery problems are listed per run (the rest are counted).
SHOWN_PROBLEMS = 10


def judged(outcome: Outcome, run: Run, log: list[JSON], history: History, starts: list[Start]) -> None:
    gangs_by_uid = {run.uids[gang.name]: gang for gang in run.plan.gangs() if gang.name in run.uids}
    outcome.complete = history.complete
    if outcome.complete:
        outcome.violations += checks.during_run(history, gangs_by_uid)
    pauses: dict[str, list[tuple[float, float]]] = {}
    for start in starts:
        pauses.setdefault(start.identity, []).extend(start.pauses)
    cloud_log = run.cloud.traffic.changes if run.cloud is not None else []
    lead = checks.leadership([*log, *cloud_log], LEASE_SECONDS, pauses)
    outcome.changes_judged, outcome.late_after_pause = lead.judged, lead.late_after_pause
    outcome.violations += lead.problems
    outcome.violations += checks.processes(starts)
    outcome.leaders = len(history.leaders())
    outcome.reclaims = len(history.reclaimed())
    outcome.revoked = len({e.uid for e in history.events if e.kind == "request" and e.revoked is not None})
    outcome.starts = len(starts)
    outcome.cloud_faults = run.replicas.cloud_faults()
    if run.cloud is not None:
        traffic = run.cloud.traffic
        outcome.cloud_faults += run.cloud.applied
        outcome.cloud_faults_acted = run.cloud.hits
        outcome.exchanges_checked = traffic.checked
        outcome.cloud_changes_judged = sum(1 for change in cloud_log if change["applied"])
        outcome.violations += traffic.problems[:SHOWN_PROBLEMS]
        if len(traffic.problems) > SHOWN_PROBLEMS:
            outcome.violations.append(f"... and {len(traffic.problems) - SHOWN_PROBLEMS} more exchanges that break "
                                      + ("Google's discovery documents" if isinstance(run.cloud, GkeCloud)
                                         else "botocore's EC2 model"))
        outcome.violations += run.cloud.kubelet_failures()
