"""The simulated cloud reclaiming spot VMs: the notice, and the VM's end (:class:`Reclaims`).

Kept apart from :mod:`gangscale.providers.simnodes` (what the machines' kubelets do in the Kubernetes API) and
:mod:`gangscale.providers.simulated` (the cloud's books).

**Reclaims** (:class:`Reclaims`, spot pools only): the cloud takes a VM back, as Compute Engine preempts a Spot VM.
What the API server then sees on a real cluster:

- The notice. GKE: "Spot VMs terminate 30 seconds after receiving a termination notice", and by default "clusters use
  graceful node shutdown. The kubelet notices the termination notice and gracefully terminates Pods" (GKE's "Spot
  VMs" concepts page). The kubelet's shutdown manager (``pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go``)
  on the shutdown event sets ``nodeShuttingDownNow``, syncs the node status at once (``go m.syncNodeStatus()``) and
  kills the pods; its ``ShutdownStatus`` returns the error ``node is shutting down`` from then on. That function is
  the ``nodeShutdownManagerErrorsFunc`` of ``nodestatus.ReadyCondition`` (``pkg/kubelet/nodestatus/setters.go``;
  wired as ``kl.shutdownManager.ShutdownStatus`` in ``pkg/kubelet/kubelet_node_status.go``
  ``defaultNodeStatusFuncs``), which turns any such error into ``Ready=False``, reason ``KubeletNotReady``, message
  the aggregated errors' text: with this error alone, exactly ``node is shutting down``
  (``k8s.io/apimachinery/pkg/util/errors`` ``aggregate.Error`` returns a single error's text as is). Every later
  status post of the kubelet says the same, so the node never reports Ready again; its Lease is still renewed (the
  kubelet runs until the VM stops).
- The end. The cloud node lifecycle controller (``k8s.io/cloud-provider/controllers/nodelifecycle``
  ``CloudNodeLifecycleController.MonitorNodes``) deletes a Node that is not Ready once the cloud says its instance
  no longer exists (``InstanceExists``/``InstanceExistsByProviderID`` false; event ``DeletingNode``). Assumption,
  not verified: GCE's provider answers "no longer exists" only for an instance it cannot find (a 404,
  ``InstanceExistsByProviderID`` in the GCE cloud provider), while a preempted Spot VM is stopped (``TERMINATED``),
  not deleted, and a managed instance group recreates it under the same name; GKE's own docs hint that the Node
  object can then outlive the VM it named. The simulated cloud models the case the controller must survive: the VM
  is gone for good, and its Node is deleted ``noticeSeconds`` after the notice, not recreated.

So a reclaim here: the cloud records the VM's end on the Node (annotation ``simulated.gangscale.io/reclaim-at``,
fenced like every change of the cloud's, so a restarted provider still ends the VM on time), the node's kubelet posts
``Ready=False``/``KubeletNotReady``/``node is shutting down`` (and keeps posting it), and at the recorded time the Node
is deleted and the VM leaves the cloud's books (its unit is then incomplete, or gone with its last node).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, detached_context, wait_event
from gangscale.kube.errors import ApiError
from gangscale.providers.base import ProviderError
from gangscale.providers.simfaults import PoolFaults
from gangscale.providers.simnodes import RECLAIM_AT_ANNOTATION, Kubelets, NodeAPI
from gangscale.retry import SIMULATED_KUBELET

log = logging.getLogger(__name__)
_HOUR = 3600.0


#: What ends a reclaimed VM: delete its Node and take it off the cloud's books (``(pool, node name)``).
VmGone = Callable[[str, str], Awaitable[None]]


class Reclaims:
    """The cloud reclaiming spot VMs (see the module docstring), in one loop for every pool.

    Each Ready node of a pool whose ``PoolFaults.reclaim_per_node_hour`` is set gets an exponential clock when it
    turns Ready (or when the rate changes: the process is memoryless, so drawing afresh then is exact): the nodes are
    reclaimed independently, a Poisson process per node on the provider's clock. ``PoolFaults.reclaim_nodes`` hands
    notices out at once instead. Draws come from one generator per pool, seeded by the pool's name and
    ``reclaim_seed``, in node-name order, so a run on a manual clock is reproducible. A reclaim (an *episode*): the
    cloud records the VM's end on the Node (fenced: a process that lost the lease reclaims nothing), the kubelet posts
    ``node is shutting down``, and ``reclaim_notice_seconds`` later :data:`VmGone` deletes the Node. API-server errors
    are retried as a kubelet's status posts are; a node that is gone meanwhile ends its episode.
    """

    def __init__(self, clock: Clock, kubelets: Kubelets, nodes: NodeAPI, faults: Mapping[str, PoolFaults],
                 gone: VmGone) -> None:
        self.clock, self.kubelets, self.nodes, self.faults, self.gone = clock, kubelets, nodes, faults, gone
        self._rngs: dict[str, random.Random] = {}
        #: Per pool, the rate the pending draws were made with (a change redraws them).
        self._rates: dict[str, float] = {}
        #: Ready nodes' drawn reclaim times (clock seconds).
        self._due: dict[str, float] = {}
        self._episodes: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Episodes talking to the API server now (a harness waits for none).
        self.firing = 0

    @property
    def busy(self) -> bool:
        """An episode writes, or the loop has changes to act on, or a drawn reclaim is due."""
        if self._task is None:
            return False  # not started, or closed
        now = self.clock.now()
        return self.firing > 0 or self._wake.is_set() or any(at <= now for at in self._due.values())

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            # Reclaims belong to no call of the provider's: their sleeps are no job's.
            self._task = asyncio.create_task(self._run(), name="simulated-reclaims", context=detached_context())

    async def aclose(self) -> None:
        tasks = [task for task in (self._task, *self._episodes.values()) if task is not None]
        self._task = None
        self._episodes.clear()
        await cancel_and_wait(tasks)

    def resume(self, name: str, pool: str, gone_at: float) -> None:
        """A node an earlier process reclaimed: its kubelet says so again if it must, and its VM ends at ``gone_at``."""
        if name not in self._episodes:
            self._begin(name, pool, gone_at, noticed=True)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self._plan(self.clock.now())
            if await wait_event(self.clock, self._wake, min(self._due.values(), default=None)):
                continue
            now = self.clock.now()
            for name in sorted(name for name, at in self._due.items() if at <= now):
                del self._due[name]
                self._notice(name)

    def _rng(self, pool: str) -> random.Random:
        if pool not in self._rngs:
            faults = self.faults.get(pool)
            seed = faults.reclaim_seed if faults is not None else 0
            # A str seed is hashed with SHA-512 (``random.seed`` version 2): the same in every process.
            self._rngs[pool] = random.Random(f"gangscale-reclaim/{pool}/{seed}")
        return self._rngs[pool]

    def _rate(self, pool: str) -> float:
        faults = self.faults.get(pool)
        return faults.reclaim_per_node_hour if faults is not None and faults.spot else 0.0

    def _plan(self, now: float) -> None:
        """Draw reclaim times for nodes that turned Ready, forget those of nodes that are not any more, and hand out
        the one-shot reclaims."""
        active = {pool for pool, faults in self.faults.items()
                  if faults.spot and (faults.reclaim_per_node_hour > 0 or faults.reclaim_nodes > 0)}
        if not active and not self._due:
            self._rates.clear()  # nothing to reclaim: a cluster of thousands of nodes pays nothing per change
            return
        up = {kubelet.name: kubelet for kubelet in self.kubelets.up()
              if kubelet.name not in self._episodes and kubelet.pool in active}
        changed = {pool for pool in self.faults if self._rates.get(pool, 0.0) != self._rate(pool)}
        for pool in changed:
            self._rates[pool] = self._rate(pool)
        for name in [name for name in self._due if name not in up or up[name].pool in changed]:
            del self._due[name]
        for name, kubelet in up.items():
            rate = self._rates.get(kubelet.pool, 0.0)
            if rate > 0 and name not in self._due:
                self._due[name] = now + self._rng(kubelet.pool).expovariate(rate / _HOUR)
        for pool, faults in sorted(self.faults.items()):
            if faults.reclaim_nodes <= 0 or not faults.spot:
                continue
            candidates = [name for name, kubelet in up.items() if kubelet.pool == pool]
            chosen = self._rng(pool).sample(candidates, min(faults.reclaim_nodes, len(candidates)))
            faults.reclaim_nodes -= len(chosen)
            for name in sorted(chosen):
                self._due.pop(name, None)
                self._notice(name)

    def _notice(self, name: str) -> None:
        kubelet = self.kubelets.get(name)
        faults = self.faults.get(kubelet.pool) if kubelet is not None else None
        if kubelet is None or faults is None or not kubelet.up:
            return
        self._begin(name, kubelet.pool, self.clock.now() + faults.reclaim_notice_seconds, noticed=False)

    def _begin(self, name: str, pool: str, gone_at: float, *, noticed: bool) -> None:
        task = asyncio.create_task(self._episode(name, pool, gone_at, noticed), name=f"simulated-reclaim-{name}",
                                   context=detached_context())
        self._episodes[name] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._episodes.get(name) is task:
                del self._episodes[name]
            self.wake()

        task.add_done_callback(done)

    async def _episode(self, name: str, pool: str, gone_at: float, noticed: bool) -> None:
        try:
            if not noticed:
                log.info("simulated: reclaiming node %s of pool %s (its VM ends in %.1fs)", name, pool,
                         gone_at - self.clock.now())
                stamp = {RECLAIM_AT_ANNOTATION: repr(gone_at)}
                if not await self._persist(name, "record the reclaim of",
                                           lambda: self.nodes.annotate(name, pool, stamp)):
                    return
            if not await self._persist(name, "post the shutdown of", lambda: self.kubelets.shut_down(name)):
                return
            await self.clock.sleep_until(gone_at)
            await self._persist(name, "end the reclaimed VM of", lambda: self.gone(pool, name))
        except asyncio.CancelledError:
            raise
        except Exception:
            # A lost episode leaves a VM the cloud meant to take; say so loudly rather than die silently.
            log.exception("simulated: the reclaim of node %s failed", name)

    async def _persist(self, name: str, doing: str, call: Callable[[], Awaitable[object]]) -> bool:
        """``call`` until it succeeds (True), retrying API-server trouble as a kubelet does; False when the node is
        gone or this process may no longer change the cloud (the fence), or on any other refusal."""
        failures = 0
        while True:
            self.firing += 1
            try:
                await call()
                return True
            except ProviderError as exc:  # the fence: the next leader resumes the reclaim from the annotation
                log.warning("simulated: did not %s node %s: %s", doing, name, exc.message)
                return False
            except ApiError as exc:
                error = exc
            finally:
                self.firing -= 1
            if error.status == 404:
                return False  # released meanwhile: nothing left to reclaim
            if not error.retryable:
                log.error("simulated: cannot %s node %s: %s", doing, name, error)
                return False
            failures += 1
            delay = SIMULATED_KUBELET.delay(failures, error.retry_after)
            log.warning("simulated: could not %s node %s (retrying in %.1fs): %s", doing, name, delay, error)
            await self.clock.sleep_until(self.clock.now() + delay)
