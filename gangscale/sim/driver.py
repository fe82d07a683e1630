"""The loop that runs a whole simulated cluster on simulated time.

:class:`SimCluster` holds the embedded API server, one :class:`~gangscale.clock.ManualClock`, the simulated
cloud, the autoscaler under test (the real gangscale :class:`~gangscale.controller.loop.Controller`, or the
baseline per-pod autoscaler, or none) and the emulators (:mod:`gangscale.sim.world` components). Everything
talks to the API server over real HTTP with the production client.

How time moves (:meth:`SimCluster.run_until`): at each instant the driver *settles* — it calls every
component in turn, each once the cluster is quiet (no API request being served, the controller and the cloud
quiet, the request log and the store's revision unchanged for a few polls), waits for quiet again after the
last one, and repeats until a whole round changed nothing. Only then does it move the clock to the next thing
due: a scheduled scenario action, a component's ``next_wake()``, or a timer of the controller or the cloud
(``ManualClock.next_deadline``). So a reaction always happens at the simulated instant it was due, however long
it takes in real time; ``speed`` optionally paces simulated time against the wall clock for watching a run live.

Quietness is each part's own signal (:mod:`gangscale.sim.quiet`): the API server serves nothing and has sent
every watch event, the controller is ``quiet`` (no change, result, due time or running task; a task waiting
only for the clock to move counts as quiet), the simulated cloud marks no node Ready, and the emulators' shared
informer cache (:meth:`SimCluster.cache`, :mod:`gangscale.sim.informers`) has seen every change the store
committed, so that the next round starts from current caches. No real time is waited.

The emulators read through that cache, not with LISTs: one reflector per kind, watched once, instead of a LIST
of every kind by every component on every round.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gangscale.aio import cancel_and_wait
from gangscale.clock import ManualClock
from gangscale.controller.logic.settings import Settings
from gangscale.controller.loop import Controller
from gangscale.kube.client import make_http
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import NodePool
from gangscale.observe.metrics import Metrics
from gangscale.providers.aws import AwsProvider
from gangscale.providers.base import NodePoolProvider
from gangscale.providers.gke.auth import StaticToken
from gangscale.providers.gke.client import Endpoints
from gangscale.providers.gke.provider import GkeProvider
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim import awsdemo
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.aws import FakeEc2
from gangscale.sim.aws.standalone import region_of_pools
from gangscale.sim.aws.standalone import set_up as set_up_ec2
from gangscale.sim.gcp import FakeGcp
from gangscale.sim.gcp.standalone import project_of, set_up
from gangscale.sim.gkedemo import Capacity, configure
from gangscale.sim.informers import Informers
from gangscale.sim.quiet import until_quiet
from gangscale.sim.world import Component, Timeline

log = logging.getLogger(__name__)

Action = Callable[[float], Awaitable[None]]

#: Real seconds between checks while the controller starts (not part of settling).
POLL_SECONDS = 0.002
#: Rounds at one instant before the driver gives up waiting for a fixed point (a guard against a component
#: that writes on every call; it is logged, and time moves on).
MAX_ROUNDS = 60
#: The demo's AWS access key and secret (the fake EC2 checks a signature's scope, not its bytes).
DEMO_KEYS = ("AKIDGANGSCALEDEMO", "demo-secret-key")


@dataclass(order=True)
class _Scheduled:
    at: float
    seq: int
    what: str = field(compare=False)
    action: Action = field(compare=False)


@dataclass
class SimCluster:
    server: EmbeddedAPIServer
    clock: ManualClock
    http: KubeHTTP
    kubeconfig: Path
    pools: tuple[NodePool, ...]
    timeline: Timeline
    provider: NodePoolProvider | None = None
    #: The fake GKE + Compute control plane, when the run uses the gke provider (:meth:`start_gke_provider`), and
    #: the scenario's stock per pool folded into it.
    gcp: FakeGcp | None = None
    capacity: Capacity | None = None
    #: The fake EC2, when the run uses the aws provider (:meth:`start_aws_provider`), and the scenario's stock.
    ec2: FakeEc2 | None = None
    aws_capacity: awsdemo.Capacity | None = None
    controller: Controller | None = None
    #: The emulators' shared informer cache (:meth:`cache`), once one asked for it.
    informers: Informers | None = None
    components: list[Component] = field(default_factory=list)
    _clients: list[KubeHTTP] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _queue: list[_Scheduled] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    #: Rounds that hit MAX_ROUNDS (a component that never settles); the demo reports it.
    unsettled: int = 0

    @property
    def now(self) -> float:
        return self.clock.now()

    # --- parts -----------------------------------------------------------------------------------------

    async def client(self, user_agent: str) -> KubeHTTP:
        """A client of its own for one part, named in the request log as in production."""
        http = await make_http(str(self.kubeconfig), user_agent=user_agent)
        self._clients.append(http)
        return http

    async def start_provider(self) -> SimulatedProvider:
        # No node lifecycle controller runs in a scenario, so nothing would read the kubelets' heartbeats: they are
        # left out (with them a scenario's simulated hours took 4-6 times as long in wall time).
        provider = SimulatedProvider(await self.client("gangscale-simulated-cloud"), self.pools, self.clock,
                                     heartbeats=False)
        self.provider = provider
        await provider.start()
        return provider

    async def start_gke_provider(self) -> GkeProvider:
        """The gke provider against the fake control plane, both on this cluster's clock; the pools need gke
        blocks (:mod:`gangscale.sim.gkedemo`)."""
        gcp = FakeGcp(self.clock, await self.client("gke-kubelets"), project=project_of(self.pools))
        set_up(gcp, self.pools, label_pools=True)
        self.capacity = configure(gcp, self.pools)
        await gcp.start()
        self.gcp = gcp
        provider = GkeProvider(self.pools, self.clock, tokens=StaticToken(gcp.token),
                               endpoints=Endpoints(container=gcp.url, compute=f"{gcp.url}/compute/v1"),
                               kube=await self.client("gangscale"), namespace="default")
        self.provider = provider
        await provider.start()
        return provider

    async def start_aws_provider(self, hosts: Mapping[str, int] | None = None) -> AwsProvider:
        """The aws provider against the fake EC2, both on this cluster's clock, with static keys (the fake reads the
        signature's scope, not its bytes); the pools need aws blocks (:mod:`gangscale.sim.awsdemo`), ``hosts`` the
        instances per scenario unit."""
        ec2 = FakeEc2(self.clock, await self.client("eks-kubelets"), region=region_of_pools(self.pools))
        set_up_ec2(ec2, self.pools)
        self.aws_capacity = awsdemo.configure(ec2, self.pools, hosts)
        await ec2.start()
        self.ec2 = ec2
        provider = AwsProvider(self.pools, self.clock, endpoint_url=ec2.url, credentials=DEMO_KEYS,
                               user_agent="gangscale")
        self.provider = provider
        await provider.start()
        return provider

    async def start_controller(self, settings: Settings) -> Controller:
        """The real controller, with the production client, on the simulated clock and cloud."""
        provider = self.provider or await self.start_provider()
        self.controller = Controller(await self.client("gangscale"), provider, self.pools, settings=settings,
                                     clock=self.clock, metrics=Metrics(dry_run=settings.dry_run))
        task = asyncio.create_task(self.controller.run(), name="gangscale controller (simulated)")
        self._tasks.append(task)
        while not self.controller.ready:
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError("the controller stopped before it was ready")
            await asyncio.sleep(POLL_SECONDS)
        return self.controller

    async def cache(self) -> Informers:
        """The emulators' shared informer cache (:mod:`gangscale.sim.informers`), started on first use; settling
        waits for it to have seen every change (:meth:`settle`)."""
        if self.informers is None:
            informers = Informers(await self.client("sim-informers"), self.server.store)
            self.informers = informers
            await informers.start()
        return self.informers

    def add(self, component: Component) -> None:
        self.components.append(component)

    def schedule(self, at: float, what: str, action: Action) -> None:
        """Run ``action(now)`` when simulated time reaches ``at`` (before the components' round at that instant)."""
        heapq.heappush(self._queue, _Scheduled(at, next(self._seq), what, action))

    # --- time ------------------------------------------------------------------------------------------

    def next_due(self) -> float | None:
        """The earliest simulated time anything is due, or None when nothing is."""
        times = [c for c in (comp.next_wake() for comp in self.components) if c is not None]
        if self._queue:
            times.append(self._queue[0].at)
        deadline = self.clock.next_deadline
        if deadline is not None:
            times.append(deadline)
        return min(times) if times else None

    async def run_until(self, end: float, *, done: Callable[[], bool] | None = None,
                        speed: float | None = None) -> None:
        """Run the cluster until simulated time ``end`` (or earlier, once ``done()`` holds after settling).

        ``speed`` > 0 paces the run: one simulated second takes 1/speed seconds of real time.
        """
        await self.settle()
        while not (done and done()):
            due = self.next_due()
            if due is None or due > end:
                break
            await self._pace(due, speed)
            await self.clock.set(max(due, self.now))
            await self.settle()
        if self.now < end and not (done and done()):
            await self.clock.set(end)
            await self.settle()

    async def _pace(self, due: float, speed: float | None) -> None:
        if speed and speed > 0 and due > self.now:
            await asyncio.sleep((due - self.now) / speed)

    async def settle(self) -> None:
        """Run due actions and component rounds until a round changes nothing and the cluster is quiet."""
        for _ in range(MAX_ROUNDS):
            changed = await self._run_due_actions()
            mark = self._mark()
            for component in self.components:
                # Each component starts from a quiet cluster: the controller's and the cloud's reactions to the
                # last write are done (a component never sees one half-way), and the cache holds them.
                await self._quiet()
                try:
                    changed = await component.sync(self.now) or changed
                except Exception:
                    # An emulator bug must not stop the simulation silently: log it, count it as a change so the
                    # round repeats, and let MAX_ROUNDS bound a component that keeps failing.
                    log.exception("component %s failed at %.0f", component.name, self.now)
                    changed = True
            await self._quiet()
            self._raise_if_stopped()
            if not changed and self._mark() == mark:
                return
        self.unsettled += 1
        log.warning("no fixed point after %d rounds at t=%.0f; moving on", MAX_ROUNDS, self.now)

    async def _run_due_actions(self) -> bool:
        ran = False
        while self._queue and self._queue[0].at <= self.now:
            item = heapq.heappop(self._queue)
            await item.action(self.now)
            ran = True
        return ran

    def _mark(self) -> int:
        # Reads are harmless; a revision bump means somebody (the controller, the cloud) wrote.
        return self.server.store.resource_version

    async def _quiet(self) -> None:
        parts: list[tuple[str, Callable[[], bool]]] = []
        if self.controller is not None:
            controller = self.controller
            parts.append(("controller", lambda: controller.quiet))
        if isinstance(self.provider, SimulatedProvider):
            provider = self.provider
            parts.append(("simulated cloud", lambda: not provider.busy))
        if self.gcp is not None:
            gcp = self.gcp
            parts.append(("fake GCP", lambda: gcp.quiet))
        if self.ec2 is not None:
            ec2 = self.ec2
            parts.append(("fake EC2", lambda: ec2.nodes.pending == 0))
        if self.informers is not None:
            # A round must start from caches that hold every write of the last one.
            parts.append(("emulators' cache", self.informers.current))
        await until_quiet(self.server, parts)

    def _raise_if_stopped(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled():
                task.result()
                raise RuntimeError(f"{task.get_name()} stopped")

    # --- teardown ----------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        if self.informers is not None:
            await self.informers.aclose()
        if self.provider is not None:
            await self.provider.aclose()
        if self.gcp is not None:
            await self.gcp.stop()
        if self.ec2 is not None:
            await self.ec2.aclose()
        for http in self._clients:
            await http.api_client.close()
        self._clients.clear()


@contextlib.asynccontextmanager
async def sim_cluster(workdir: Path, pools: Sequence[NodePool], *, seed: int = 1) -> AsyncIterator[SimCluster]:
    """An embedded API server on a fresh :class:`ManualClock`, with a client for the scenario itself.

    Nothing else runs until the caller starts it (:meth:`SimCluster.start_provider`,
    :meth:`SimCluster.start_controller`, :meth:`SimCluster.add`)."""
    clock = ManualClock()
    server = EmbeddedAPIServer(clock=clock.datetime, bookmark_interval=1.0, seed=seed)
    await server.start()
    kubeconfig = server.write_kubeconfig(workdir / "kubeconfig")
    http = await make_http(str(kubeconfig), user_agent="gangscale-sim")
    cluster = SimCluster(server, clock, http, kubeconfig, tuple(pools), Timeline(clock.now()))
    try:
        yield cluster
    finally:
        await cluster.aclose()
        await http.api_client.close()
        await server.stop()
