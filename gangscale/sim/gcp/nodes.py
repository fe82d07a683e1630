"""What a GKE node's kubelet does in the Kubernetes API: register the Node, post Ready, and (for the fake's
convenience, as GKE's node controller would) delete the Node when its VM is gone.

The calls run one at a time, in order, in one worker task (:class:`NodeWorker`), so a Node is never deleted
before it is registered. Shapes follow :mod:`gangscale.providers.simnodes` (Ready as a strategic merge patch on
``/status``; the API server adds the ``not-ready`` taint itself).

With ``heartbeats`` (``gangscale sim gcp`` turns them on), each registered Node's kubelet also heartbeats as a v1.36
kubelet does, with the simulated cloud's kubelets (:class:`gangscale.providers.simnodes.Kubelets`: its Lease in
``kube-node-lease`` every 10 s, its status on change and every 5 minutes), so that a real kube-controller-manager
(or ``gangscale sim apiserver --node-lifecycle``) keeps the fake's Nodes Ready. Off in process: the harnesses, the
demo and the tests run no node lifecycle controller, and the heartbeats would only cost time. A Node registered
by an earlier fake process (found on a 409) is taken over by this one's kubelets.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from gangscale.clock import Clock
from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from gangscale.model.catalog import GPU_LABEL, GPU_RESOURCE, TPU_RESOURCE, machine_labels, node_allocatable
from gangscale.model.quantity import format_quantity
from gangscale.model.resources import CPU, DEFAULT_MAX_PODS, MEMORY, PODS
from gangscale.providers.simnodes import Kubelets, NodeAPI, is_ready
from gangscale.sim.gcp.state import NodePool, Vm
from gangscale.sim.gcp.wire import machine_family, region_of
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)

NODES_PATH = "/api/v1/nodes"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
POOL_LABEL = "cloud.google.com/gke-nodepool"
INSTANCE_ID_ANNOTATION = "container.googleapis.com/instance_id"
#: The Node label carrying the name of the MIG resize request that made the VM: GKE's gcp-controller-manager copies
#: it from the VM's metadata item ``google-compute-mig-resize-request`` (GoogleCloudPlatform/cluster-autoscaler
#: ``pkg/cloudprovider/gke/labels/system_labels.go``, comment in ``pkg/autoprovisioning/injection.go``).
PROVISIONING_REQUEST_LABEL = "autoscaling.gke.io/provisioning-request"
#: On every Node of a flex-start pool: GKE's documented nodeSelector for flex-start VMs (GKE "Run a small batch
#: workload with GPUs and Flex-start VMs", and the PodTemplate of "…flex-start with queued provisioning").
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
#: The taint of queued-provisioning pools, "the taint added to the queued provisioning nodepools"
#: (GoogleCloudPlatform/cluster-autoscaler ``pkg/provisioningrequests/pods/pods.go``; GKE's how-to says
#: ``--enable-queued-provisioning`` adds the ``cloud.google.com/gke-queued`` taint).
QUEUED_TAINT = {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"}
#: GKE's taint effects (API enum) → Kubernetes'.
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}

REGISTER = "register"
READY = "ready"
DELETE = "delete"
#: Mark the Node unschedulable, as the first step of a drain (GKE drains every node of a node pool it deletes).
CORDON = "cordon"


@dataclass(frozen=True)
class NodeAction:
    kind: str
    name: str
    time: float
    body: JSON | None = None


def gpu_count(pool: NodePool) -> int:
    accelerators = pool.config.get("accelerators") or []
    given = sum(int(a.get("acceleratorCount") or 0) for a in accelerators if isinstance(a, dict))
    return given or pool.machine.gpus


def pool_allocatable(pool: NodePool) -> dict[str, int]:
    """What one Node of the pool offers to pods: the catalog's allocatable, with the pool's GPU count."""
    allocatable = dict(node_allocatable(pool.machine))
    gpus = gpu_count(pool)
    if gpus:
        allocatable[GPU_RESOURCE] = gpus
    return allocatable


def node_body(project: str, pool: NodePool, vm: Vm, now: float) -> JSON:
    """The Node a GKE VM registers: GKE's labels and taints, capacity/allocatable from the machine catalog."""
    machine = pool.machine
    labels: dict[str, str] = {
        **{str(k): str(v) for k, v in (pool.config.get("labels") or {}).items()},
        POOL_LABEL: pool.name,
        "kubernetes.io/hostname": vm.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": vm.machine_type,
        "topology.kubernetes.io/zone": vm.zone,
        "topology.kubernetes.io/region": region_of(vm.zone),
        "cloud.google.com/machine-family": machine_family(vm.machine_type),
        **machine_labels(machine, pool.tpu_topology),
    }
    if pool.config.get("spot"):
        labels["cloud.google.com/gke-spot"] = "true"
    if pool.config.get("flexStart"):
        labels[FLEX_START_LABEL] = "true"
    if vm.resize_request is not None:
        labels[PROVISIONING_REQUEST_LABEL] = vm.resize_request
    accelerators = [a for a in pool.config.get("accelerators") or [] if isinstance(a, dict)]
    if accelerators and accelerators[0].get("acceleratorType"):
        labels[GPU_LABEL] = str(accelerators[0]["acceleratorType"])
    taints = [{"key": str(t["key"]), "value": str(t.get("value", "")), "effect": EFFECTS[t["effect"]]}
              for t in pool.config.get("taints") or []]
    gpus = gpu_count(pool)
    if gpus:
        taints.append({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
    if machine.is_tpu:
        taints.append({"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
    queued = (pool.extra.get("queuedProvisioning") or {}).get("enabled")
    if queued and not any((t["key"], t["effect"]) == (QUEUED_TAINT["key"], QUEUED_TAINT["effect"]) for t in taints):
        taints.append(dict(QUEUED_TAINT))
    capacity: dict[str, int] = {CPU: machine.vcpus * 1000, MEMORY: machine.memory, PODS: DEFAULT_MAX_PODS}
    allocatable = pool_allocatable(pool)
    if gpus:
        capacity[GPU_RESOURCE] = gpus
    if machine.tpu_chips:
        capacity[TPU_RESOURCE] = machine.tpu_chips
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": vm.name, "labels": labels, "annotations": {INSTANCE_ID_ANNOTATION: vm.id}},
        "spec": {"providerID": f"gce://{project}/{vm.zone}/{vm.name}", "taints": taints},
        "status": {
            "capacity": {name: format_quantity(name, amount) for name, amount in capacity.items()},
            "allocatable": {name: format_quantity(name, amount) for name, amount in allocatable.items()},
            "conditions": [ready_condition(False, rfc3339(now))],
        },
    }


def ready_condition(ready: bool, stamp: str) -> JSON:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


class NodeWorker:
    """Applies :class:`NodeAction` s to the Kubernetes API one at a time (none without a client)."""

    def __init__(self, kube: KubeHTTP | None, clock: Clock | None = None) -> None:
        self.kube = kube
        #: The registered Nodes' kubelets, when they heartbeat (a client and a clock given).
        self.kubelets = None if kube is None or clock is None else Kubelets(clock, NodeAPI(kube), lambda _: False)
        self.clock = clock
        self.queue: asyncio.Queue[NodeAction] = asyncio.Queue()
        #: Calls that failed for another reason than "already there" / "already gone".
        self.failures: list[str] = []
        #: Calls queued or under way.
        self.pending = 0

    def put(self, action: NodeAction) -> None:
        if self.kube is not None:
            self.pending += 1
            self.queue.put_nowait(action)

    async def settle(self) -> None:
        """Return once every queued call has been made."""
        await self.queue.join()

    async def aclose(self) -> None:
        if self.kubelets is not None:
            await self.kubelets.aclose()

    async def run(self) -> None:
        if self.kubelets is not None:
            self.kubelets.start()
        while True:
            action = await self.queue.get()
            try:
                await self._apply(action)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures.append(f"{action.kind} {action.name}: {exc}")
                log.exception("fake GCP: could not %s node %s", action.kind, action.name)
            finally:
                self.pending -= 1
                self.queue.task_done()

    async def _apply(self, action: NodeAction) -> None:
        assert self.kube is not None
        try:
            if action.kind == REGISTER:
                created = await self.kube.request("POST", NODES_PATH, body=action.body)
                self._heartbeat(created)
            elif action.kind == CORDON:
                await self.kube.request("PATCH", f"{NODES_PATH}/{action.name}", body={"spec": {"unschedulable": True}},
                                        content_type=STRATEGIC_MERGE_PATCH)
            elif action.kind == READY:
                if self.kubelets is not None and action.name in self.kubelets:
                    await self.kubelets.post_ready(action.name)
                    return
                body = {"status": {"conditions": [ready_condition(True, rfc3339(action.time))]}}
                await self.kube.request("PATCH", f"{NODES_PATH}/{action.name}/status", body=body,
                                        content_type=STRATEGIC_MERGE_PATCH)
            else:
                if self.kubelets is not None:
                    self.kubelets.remove([action.name])
                await self.kube.request("DELETE", f"{NODES_PATH}/{action.name}")
        except ApiError as exc:
            if action.kind == REGISTER and exc.status == 409:
                if self.kubelets is not None:
                    self._heartbeat(await self.kube.request("GET", f"{NODES_PATH}/{action.name}"))
                return
            if action.kind != REGISTER and exc.status == 404:
                return
            raise

    def _heartbeat(self, node: JSON) -> None:
        if self.kubelets is not None and self.clock is not None:
            self.kubelets.add(node, ready=is_ready(node), reported=self.clock.now())
