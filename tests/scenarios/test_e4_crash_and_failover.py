"""anchors.md §E.4 scenarios 4 and 5: the process dies, or stops being the leader, in the middle of a scale-up.

In-process and on injected time: the controller is "killed" by cancelling it (nothing is flushed) while the API
server holds the request it was making, which is then dropped unserved — the process died exactly between two
API calls. Leader failover runs two controllers, each with its own ``LeaseElector`` (15 s / 10 s / 2 s) on one
ManualClock. ``tests/crash/`` does the same with real ``gangscale run`` processes on the wall clock
(``test_kill_points.py``, ``test_failover.py``).
"""

from __future__ import annotations

import asyncio
import fnmatch
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from gangscale.aio import cancel_and_wait
from gangscale.clock import Sleeps, counting_sleeps
from gangscale.controller.logic.record import OBTAINED, OBTAINING, Record
from gangscale.controller.loop import Controller
from gangscale.kube.client import make_http
from gangscale.kube.lease import LeaseConfig, LeaseElector
from gangscale.kube.resources import LEASES
from gangscale.kube.transport import KubeHTTP
from gangscale.observe.metrics import Metrics
from gangscale.providers.simfaults import CREATED, REUSED
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver import Fault
from gangscale.sim.apiserver.faults import LoggedRequest
from gangscale.sim.quiet import until_quiet
from tests.conftest import wait_for
from tests.controller.harness import FAST, NS, Cluster, running_cluster
from tests.scenarios.support import (
    GPU_POOL,
    NodeLog,
    gpu_template,
    record,
    releases,
    wait_record,
    watching_nodes,
)

PROVISION_SECONDS = 30.0


# -- 4. crash between the cloud call and the status write -----------------------------------------------------


@pytest.mark.parametrize("pod_sets", [
    pytest.param((("gpu8", 4),), id="one-pool"),
    pytest.param((("head", 1), ("gpu8", 3)), id="two-pools"),
])
async def test_e4_04_crash_between_cloud_call_and_status_write(
        tmp_path: Path, pod_sets: tuple[tuple[str, int], ...]) -> None:
    """§E.4 scenario 4: the process is killed after ``obtain`` (increase_size) returned, before the status patch
    that records it.

    The API server holds the status write that records the ``obtained`` phase; the controller is killed while
    it waits, and the write is dropped unserved. At that moment the cloud has made every node, and the PR
    still carries the intent (phase ``obtaining``, with the steps' idempotency tokens) written *before* the
    cloud call. Proven here, after a restart with a fresh provider instance:

    - *the recorded intent is reconciled*: the new process resumes that intent with the same tokens (the
      cloud answers ``reused``, the same unit ids) and records ``obtained``;
    - *no second increase*: every node of the gang was created exactly once (a watch saw each name added
      once; no more nodes ever existed at once than the gang has), and nothing was released;
    - *the PR reaches ``Provisioned``* (``CapacityIsProvisioned``) once the nodes are Ready.

    With ``two-pools`` the gang spans the cpu and gpu pools: both steps are resumed by their own tokens.

    gangscale's equivalent of Karpenter's UID-keyed launch cache and finalizer-first pattern is the intent
    written on the PR's status before any cloud call and the cloud's idempotency under the token (README,
    "What it guarantees, and how" / "What survives a restart"); there is no finalizer: a PR deleted while the
    process is down has its units released at start (``tests/controller/test_atomic.py``).
    """
    gang_size = sum(count for _, count in pod_sets)
    async with running_cluster(tmp_path) as cl, watching_nodes(cl.http) as seen:
        await gpu_template(cl)
        await cl.template("head", {"cpu": "12"}, selector={"gangscale.io/node-pool": "cpu"})
        cl.server.inject(Fault(verb="patch", resource="provisioningrequests", subresource="status",
                               body_contains=OBTAINED, hold=True))
        await cl.provreq("gang", *pod_sets)
        await wait_for(lambda: cl.server.faults.held)
        intent = await record(cl, "gang")
        assert intent is not None and intent.phase == OBTAINING
        assert len(intent.steps) == len(pod_sets)
        first = cl.obtains()
        assert sorted(c.token for c in first) == sorted(intent.tokens)
        assert all(c.outcome == CREATED for c in first) and sum(c.nodes_created for c in first) == gang_size

        await cl.stop()  # killed: the "obtained" write never reaches storage
        assert cl.server.release_held(serve=False) == 1
        assert await record(cl, "gang") == intent

        await cl.start()
        resumed = await wait_record(cl, "gang", OBTAINED)
        assert resumed.tokens == intent.tokens
        again = cl.history[1].calls
        assert sorted((c.token, c.outcome, c.nodes_created) for c in again) == sorted(
            (t, REUSED, 0) for t in intent.tokens)
        assert {c.token: c.unit_ids for c in again} == {c.token: c.unit_ids for c in first}

        await cl.advance_stepwise(PROVISION_SECONDS)
        await cl.wait_condition("gang", "Provisioned", "True", "CapacityIsProvisioned")
        made = [name for token in intent.tokens for name in seen.of_token(token)]
        assert len(made) == gang_size and len(set(made)) == gang_size
        assert seen.most == gang_size and len(await cl.ready_nodes()) == gang_size
        assert releases(cl) == []


# -- 5. leader failover ---------------------------------------------------------------------------------------

LEASE = LeaseConfig(NS, "gangscale", "template")  # 15 s / 10 s / 2 s, the anchors' and gangscale's defaults


@dataclass
class Replica:
    """One ``gangscale run`` replica, wired as ``gangscale.controller.app.serve`` wires it, on the test's clock."""

    identity: str
    elector: LeaseElector
    controller: Controller
    provider: SimulatedProvider
    clients: tuple[KubeHTTP, ...]
    sleeps: Sleeps = field(default_factory=Sleeps)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def agent(self) -> str:
        """A glob of this replica's User-Agents (controller and cloud), as ``app.user_agent`` names them."""
        return f"* ({self.identity})"

    @property
    def quiet(self) -> bool:
        """Nothing under way until the clock moves: the elector sleeps (or has returned), and the controller is
        quiet, or waits as a synced standby for the lease."""
        election = self.tasks[1]
        if not (election.done() or self.sleeps.asleep > 0):
            return False
        ctl = self.controller
        if not ctl.ready:
            return ctl.synced and not self.elector.leading.is_set()
        return ctl.quiet and not self.provider.busy

    async def start(self) -> None:
        self.tasks = [asyncio.create_task(self.controller.run(), name=f"controller {self.identity}"),
                      asyncio.create_task(counting_sleeps(self.elector.run(), self.sleeps),
                                          name=f"election {self.identity}")]
        await wait_for(lambda: self.controller.synced)

    async def aclose(self) -> None:
        await cancel_and_wait(self.tasks)
        await self.provider.aclose()
        for client in self.clients:
            await client.api_client.close()


async def replica(cl: Cluster, identity: str, seed: int) -> Replica:
    http = await make_http(str(cl.kubeconfig), user_agent=f"gangscale/test ({identity})")
    cloud_http = await make_http(str(cl.kubeconfig), user_agent=f"gangscale-simulated-cloud/test ({identity})")
    elector = LeaseElector(http, cl.clock, replace(LEASE, identity=identity), rng=random.Random(seed))
    provider = SimulatedProvider(cloud_http, cl.pools, cl.clock, fence=elector.valid)
    controller = Controller(http, provider, cl.pools, settings=replace(FAST, identity=identity), clock=cl.clock,
                            metrics=Metrics(), leader=elector)
    return Replica(identity, elector, controller, provider, (http, cloud_http))


@dataclass
class Moments:
    """When each thing first happened, sampled on the clock every half second."""

    fence_down: float | None = None
    lost: float | None = None
    taken_over: float | None = None


async def run_replicas(cl: Cluster, a: Replica, b: Replica, seconds: float, seen: Moments) -> None:
    """Move the clock ``seconds`` in half-second steps, letting everything settle at each, and note when A's fence
    went down, when A's elector reported the lease lost and when B took the lease."""
    parts = [(a.identity, lambda: a.quiet), (b.identity, lambda: b.quiet)]
    target = cl.clock.now() + seconds
    while cl.clock.now() < target:
        await cl.clock.advance(min(0.5, target - cl.clock.now()))
        await until_quiet(cl.server, parts)
        now = cl.clock.now()
        if seen.fence_down is None and not a.elector.valid():
            seen.fence_down = now
        if seen.lost is None and a.elector.lost.is_set():
            seen.lost = now
        if seen.taken_over is None and b.elector.leading.is_set():
            seen.taken_over = now


def writes(cl: Cluster, agent: str) -> list[LoggedRequest]:
    """What a replica changed in the cluster: every write but its lease attempts and the simulated kubelets'
    node status updates (the simulated cloud marks nodes Ready, as a kubelet would, not as an act of the
    leader)."""
    return [r for r in cl.server.requests
            if r.verb in ("create", "update", "patch", "delete") and fnmatch.fnmatchcase(r.user_agent, agent)
            and r.resource != "leases" and not (r.resource == "nodes" and r.subresource == "status")]


async def test_e4_05_leader_failover(tmp_path: Path) -> None:
    """§E.4 scenario 5: leader A's lease renewals fail for longer than ``renew_deadline``; standby B takes over.

    Two replicas, each wired as ``gangscale run`` wires it (``controller/app.py``: a ``LeaseElector`` of
    15 s / 10 s / 2 s, the controller's ``leader=`` and the simulated cloud's ``fence=`` both fenced by
    ``elector.valid``), share the API server and one ManualClock. A leads and starts a 4-node scale-up; while
    its nodes come up, every Lease request of A fails (HTTP 500; A's other requests still succeed, so only the
    fence can stop it). A request created after A lost the lease and before B took it tests who acts on it.
    Proven here:

    - *A stops all actuation*: A's fence is down at its renew deadline (last renewal + 10 s); from then on A
      writes nothing (no status patch, event, node create or delete, read from the API server's request log)
      although A's controller keeps running, sees its nodes turn Ready and sees the new request.
    - *A's elector reports the lease lost before ``lease_duration``*: ``lost`` is set, and ``run`` returns, by
      the first failed retry past the renew deadline (<= last renewal + 12 s < last renewal + 15 s). In
      ``gangscale run`` that return is the non-zero exit (``app.serve`` returns 1); the in-process test keeps A
      running instead, to show that the fence alone stops it. The exit itself is tested with a real process in
      ``tests/crash/test_failover.py::test_a_leader_that_cannot_renew_stops_and_exits_non_zero``.
    - *B acquires the lease only after expiry*: B leads no earlier than A's last successful renewal + 15 s, and
      after A's elector gave up, so A's last write precedes B's first.
    - *no node pool receives two increases for one PR*: B adopts A's recorded scale-up (same tokens, no new
      obtain) and reports it Provisioned; the request created in the gap is obtained once, by B; every node was
      created once and no more than the two gangs' nodes ever existed.
    """
    async with running_cluster(tmp_path, pool_yaml=GPU_POOL, start=False) as cl, \
            watching_nodes(cl.http) as seen_nodes:
        await gpu_template(cl)
        a, b = await replica(cl, "replica-a", seed=1), await replica(cl, "replica-b", seed=2)
        moments = Moments()
        try:
            await a.start()
            await wait_for(lambda: a.controller.ready)
            await b.start()
            await run_replicas(cl, a, b, 2, moments)
            assert (a.elector.leading.is_set(), b.elector.leading.is_set()) == (True, False)
            assert b.controller.is_ready() == (True, "standby: replica-a holds the leader lease")

            await cl.provreq("first", ("gpu8", 4))
            await run_replicas(cl, a, b, 2, moments)
            first = await wait_record(cl, "first", OBTAINED)
            assert first.holder == "replica-a"
            cl.server.inject(Fault(resource="coordination.k8s.io/leases", user_agent=a.agent, status=500,
                                   times=None))
            renewals = [r for r in cl.server.requests if r.resource == "leases" and r.verb == "update"
                        and fnmatch.fnmatchcase(r.user_agent, a.agent) and r.status == 200]
            renewed = renewals[-1].time.timestamp()

            await run_replicas(cl, a, b, 11, moments)  # past A's renew deadline
            assert moments.fence_down is not None and moments.fence_down <= renewed + LEASE.renew_deadline
            assert moments.lost is not None and a.tasks[1].done()
            assert moments.lost <= renewed + LEASE.renew_deadline + LEASE.retry_period < \
                renewed + LEASE.lease_duration
            assert moments.taken_over is None
            await cl.provreq("second", ("gpu8", 2))
            await run_replicas(cl, a, b, 0.5, moments)
            assert "default/second" in {d["request"] for d in a.controller.debug_plans()["decisions"]}  # A saw it

            await run_replicas(cl, a, b, 39.5, moments)  # B takes over; the nodes turn Ready
            assert moments.taken_over is not None
            assert moments.taken_over >= renewed + LEASE.lease_duration and moments.taken_over > moments.lost
            await cl.wait_condition("first", "Provisioned", "True", "CapacityIsProvisioned")
            await cl.wait_condition("second", "Provisioned", "True", "CapacityIsProvisioned")
            assert await lease_spec(cl) == ("replica-b", 1)
            in_a = {r["request"]: r["phase"] for r in a.controller.debug_plans()["requests"]}
            assert in_a["default/first"] == "Booked"  # A saw the nodes Ready too, and wrote nothing of it

            a_writes, b_writes = writes(cl, a.agent), writes(cl, b.agent)
            assert a_writes and b_writes
            assert max(r.time.timestamp() for r in a_writes) < moments.fence_down
            assert min(r.time.timestamp() for r in b_writes) >= moments.taken_over
            await each_gang_obtained_once(cl, a, b, first, seen_nodes)
        finally:
            for r in (a, b):
                await r.aclose()


async def each_gang_obtained_once(cl: Cluster, a: Replica, b: Replica, first: Record, seen_nodes: NodeLog) -> None:
    """A obtained the first gang and B the second, each once, and no node was made twice."""
    second = await record(cl, "second")
    assert second is not None and second.holder == "replica-b"
    assert [(c.token, c.outcome) for c in a.provider.calls] == [(first.tokens[0], CREATED)]
    assert [(c.token, c.outcome) for c in b.provider.calls] == [(second.tokens[0], CREATED)]
    for token, size in ((first.tokens[0], 4), (second.tokens[0], 2)):
        made = seen_nodes.of_token(token)
        assert len(made) == len(set(made)) == size
    assert seen_nodes.most == 6 and len(await cl.ready_nodes()) == 6


async def lease_spec(cl: Cluster) -> tuple[str, int]:
    spec = (await cl.http.request("GET", LEASES.path(NS, LEASE.name)))["spec"]
    return str(spec["holderIdentity"]), int(spec["leaseTransitions"])


async def test_a_standby_that_cannot_reach_the_lease_is_not_ready(tmp_path: Path) -> None:
    """A standby whose Lease requests are refused (RBAC without the Lease) could never take over: its ``/readyz``
    says so once a lease duration of attempts failed, instead of reporting a healthy standby for ever."""
    async with running_cluster(tmp_path, pool_yaml=GPU_POOL, start=False) as cl:
        a, b = await replica(cl, "replica-a", seed=1), await replica(cl, "replica-b", seed=2)
        try:
            cl.server.inject(Fault(resource="coordination.k8s.io/leases", user_agent=b.agent, status=403, times=None))
            await a.start()
            await b.start()
            await run_replicas(cl, a, b, 2, Moments())
            assert b.controller.is_ready() == (True, "standby: nobody holds the leader lease")

            await run_replicas(cl, a, b, LEASE.lease_duration, Moments())
            ready, why = b.controller.is_ready()
            assert not ready and why.startswith("the leader lease default/gangscale could not be read or written")
            assert a.controller.is_ready() == (True, "ok (leader)")
        finally:
            for r in (a, b):
                await r.aclose()
