"""A whole cluster for controller tests: the embedded API server, the simulated cloud and the real controller,
all on one :class:`ManualClock`, talking over real HTTP. Tests drive time with ``advance``; they never sleep."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gangscale.clock import ManualClock
from gangscale.config import parse_pool_yaml
from gangscale.controller.logic.record import Record, from_status
from gangscale.controller.logic.settings import Settings
from gangscale.controller.loop import Controller
from gangscale.kube.client import make_http
from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.observe.metrics import Metrics
from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.quiet import until_quiet
from tests.builders import NODES, PODS, PODTEMPLATES, PROVREQS, requirements
from tests.conftest import step_through, wait_for

JSON = dict[str, Any]
NS = "default"

#: Pools used by most controller tests: a TPU v5e 2x4 slice pool (2 hosts per unit), GPU pools in two
#: zones-alike, and a CPU pool. Zero provisioning delay unless a test says otherwise.
POOLS_YAML = """
nodePools:
  - name: tpu-a
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: zone-a
    maxUnits: 2
    simulated: {provisionSeconds: 30}
  - name: tpu-b
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: zone-a
    maxUnits: 2
    simulated: {provisionSeconds: 30}
  - name: gpu
    machineType: a3-highgpu-8g
    zone: zone-a
    maxUnits: 4
    simulated: {provisionSeconds: 30}
  - name: cpu
    zone: zone-a
    maxUnits: 4
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 30}
"""

FAST = Settings(batch_idle=0.0, batch_max=0.0)


def pools(text: str = POOLS_YAML) -> tuple[NodePool, ...]:
    return parse_pool_yaml(text).pools


@dataclass
class Cluster:
    server: EmbeddedAPIServer
    clock: ManualClock
    http: KubeHTTP
    pools: tuple[NodePool, ...]
    settings: Settings
    provider: SimulatedProvider | None = None
    controller: Controller | None = None
    task: asyncio.Task[None] | None = None
    history: list[SimulatedProvider] = field(default_factory=list)
    kubeconfig: Path = Path("kubeconfig")
    ctl_http: KubeHTTP | None = None
    cloud_http: KubeHTTP | None = None
    #: The planner's policy (a pool file's ``planner`` and ``capacityTiers``).
    policy: Policy = field(default_factory=Policy)

    @property
    def ctl(self) -> Controller:
        assert self.controller is not None
        return self.controller

    @property
    def cloud(self) -> SimulatedProvider:
        assert self.provider is not None
        return self.provider

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def start(self, **settings: Any) -> None:
        """Start (or restart) the controller with a fresh provider instance, as a new process would."""
        if settings:
            self.settings = replace(self.settings, **settings)
        # The controller and the cloud get clients of their own, named as in production, so that the request
        # log tells who did what (the RBAC test relies on it).
        self.ctl_http = await make_http(str(self.kubeconfig), user_agent="gangscale")
        self.cloud_http = await make_http(str(self.kubeconfig), user_agent="gangscale-simulated-cloud")
        self.provider = SimulatedProvider(self.cloud_http, self.pools, self.clock)
        self.history.append(self.provider)
        self.controller = Controller(self.ctl_http, self.provider, self.pools, settings=self.settings,
                                     policy=self.policy, clock=self.clock,
                                     metrics=Metrics(dry_run=self.settings.dry_run))
        self.task = asyncio.create_task(self.controller.run(), name="controller under test")
        await wait_for(lambda: self.ctl.ready or self.task is None or self.task.done(), timeout=10)
        if self.task.done():  # it stopped while starting: its error is the caller's (stop() will not raise it again)
            failed, self.task = self.task, None
            failed.result()

    async def stop(self) -> None:
        """Kill the controller (a crash: nothing is flushed) and the provider instance with it."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
        if self.provider is not None:
            await self.provider.aclose()
        for client in (self.ctl_http, self.cloud_http):
            if client is not None:
                await client.api_client.close()
        self.ctl_http = self.cloud_http = None

    async def advance(self, seconds: float) -> None:
        """Let the cluster react to what just happened, at the time it happened; then move the clock in one jump."""
        await self.idle()
        await self.clock.advance(seconds)
        await self.idle()

    async def advance_stepwise(self, seconds: float) -> None:
        """Like :meth:`advance`, but stopping at every timer on the way and letting the cluster react before the
        clock moves on, so each reaction happens at the time it was due (a unit that becomes empty when a timer
        fires starts its scale-down countdown then, not at the end of one long jump)."""
        await step_through(self.clock, seconds, self.idle)

    async def idle(self) -> None:
        """Until the API server, the simulated cloud and the controller are all quiet: no request, watch event,
        Ready timer, change, task or due time under way (``gangscale.sim.quiet``; no sleeping)."""
        parts: list[tuple[str, Callable[[], bool]]] = []
        if self.controller is not None and self.task is not None and not self.task.done():
            parts.append(("controller", lambda: self.ctl.quiet))
        if self.provider is not None:
            parts.append(("simulated cloud", lambda: not self.cloud.busy))
        await until_quiet(self.server, parts)

    # -- objects ----------------------------------------------------------------------------------------------

    async def create(self, resource: Any, obj: JSON, namespace: str | None = NS) -> JSON:
        return await self.http.request("POST", resource.path(namespace if resource.namespaced else None), body=obj)

    async def template(self, name: str, requests: dict[str, str] | None = None, *,
                       limits: dict[str, str] | None = None, selector: dict[str, str] | None = None,
                       tolerations: Sequence[JSON] = (), anti_affinity: bool = False) -> JSON:
        resources: JSON = {}
        if requests:
            resources["requests"] = requests
        if limits:
            resources["limits"] = limits
        spec: JSON = {"containers": [{"name": "main", "image": "trainer:v1", "resources": resources}]}
        if selector:
            spec["nodeSelector"] = selector
        if tolerations:
            spec["tolerations"] = list(tolerations)
        labels = {"app": name}
        if anti_affinity:
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels}}]}}
        return await self.create(PODTEMPLATES, {"apiVersion": "v1", "kind": "PodTemplate",
                                                "metadata": {"name": name},
                                                "template": {"metadata": {"labels": labels}, "spec": spec}})

    async def provreq(self, name: str, *pod_sets: tuple[str, int], cls: str = "atomic-scale-up.gangscale.io",
                      parameters: dict[str, str] | None = None, owner: JSON | None = None) -> JSON:
        meta: JSON = {"name": name}
        if owner:
            meta["ownerReferences"] = [owner]
        spec: JSON = {"provisioningClassName": cls, "parameters": parameters or {},
                      "podSets": [{"podTemplateRef": {"name": t}, "count": c} for t, c in pod_sets]}
        return await self.create(PROVREQS, {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                                            "metadata": meta, "spec": spec})

    async def get_pr(self, name: str) -> JSON | None:
        try:
            return await self.http.request("GET", PROVREQS.path(NS, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def conditions(self, name: str) -> dict[str, tuple[str, str, str]]:
        pr = await self.get_pr(name) or {}
        return {c["type"]: (c["status"], c["reason"], c["message"])
                for c in (pr.get("status") or {}).get("conditions") or []}

    async def condition(self, name: str, ctype: str) -> tuple[str, str] | None:
        got = (await self.conditions(name)).get(ctype)
        return (got[0], got[1]) if got else None

    async def wait_condition(self, name: str, ctype: str, status: str, reason: str, timeout: float = 10) -> None:
        async def check() -> bool:
            return await self.condition(name, ctype) == (status, reason)
        await wait_for(check, timeout=timeout)

    async def nodes(self, pool: str | None = None) -> list[JSON]:
        query = {"labelSelector": f"gangscale.io/node-pool={pool}"} if pool else {}
        return (await self.http.request("GET", NODES.path(), query=query)).get("items") or []

    async def ready_nodes(self, pool: str | None = None) -> list[str]:
        return sorted(n["metadata"]["name"] for n in await self.nodes(pool)
                      if any(c.get("type") == "Ready" and c.get("status") == "True"
                             for c in (n.get("status") or {}).get("conditions") or []))

    async def ready_node(self, name: str, allocatable: dict[str, str], labels: dict[str, str] | None = None) -> JSON:
        """A node that exists outside any managed pool (registered by hand), Ready."""
        return await self.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": name, "labels": labels or {}},
                                         "status": {"allocatable": allocatable, "capacity": allocatable,
                                                    "conditions": [{"type": "Ready", "status": "True",
                                                                    "reason": "KubeletReady", "message": ""}]}},
                                 namespace=None)

    async def consumer(self, name: str, pr: str, node: str, requests: dict[str, str]) -> JSON:
        """A pod that consumes ``pr``, already bound to ``node`` (as kube-scheduler would leave it)."""
        return await self.create(PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {
                "autoscaling.x-k8s.io/consume-provisioning-request": pr,
                "autoscaling.x-k8s.io/provisioning-class-name": "atomic-scale-up.gangscale.io"}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x",
                                                        "resources": requirements(requests)}]}})

    def obtains(self) -> list[Any]:
        return [call for p in self.history for call in p.calls if call.operation == "obtain"]


@contextlib.asynccontextmanager
async def running_cluster(tmp_path: Path, *, pool_yaml: str = POOLS_YAML, settings: Settings = FAST,
                          start: bool = True) -> AsyncIterator[Cluster]:
    """A running controller on the embedded server; ``pool_yaml`` gives its pools and its planner policy."""
    clock = ManualClock()
    server = EmbeddedAPIServer(clock=clock.datetime, bookmark_interval=0.2, seed=1)
    await server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    http = await make_http(str(kubeconfig), user_agent="gangscale-tests")
    cluster = Cluster(server, clock, http, pools(pool_yaml), settings, kubeconfig=kubeconfig,
                      policy=parse_pool_yaml(pool_yaml).policy)
    try:
        if start:
            await cluster.start()
        yield cluster
    finally:
        await cluster.stop()
        await http.api_client.close()
        await server.stop()


async def record(cl: Cluster, name: str) -> Record | None:
    """The scale-up intent recorded on the PR (``provisioningClassDetails["gangscale.io/scale-up"]``)."""
    pr = await cl.get_pr(name) or {}
    return from_status(pr.get("status") or {})


async def wait_record(cl: Cluster, name: str, phase: str) -> Record:
    async def check() -> Record | None:
        got = await record(cl, name)
        return got if got is not None and got.phase == phase else None
    found: Record = await wait_for(check)
    return found
