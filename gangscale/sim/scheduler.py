"""The simulated kube-scheduler: binds pending pods to nodes through ``pods/binding``, or says why it cannot.

Each :meth:`Scheduler.sync` is one scheduling pass over a fresh list of nodes, pods and ProvisioningRequests:

- It schedules the pods kube-scheduler's default profile would take: no ``spec.nodeName``, phase
  ``Pending``, not being deleted, ``schedulerName`` absent or ``default-scheduler``, no
  ``spec.schedulingGates``. Queue order is the PrioritySort plugin's: higher ``spec.priority`` first, then
  the older pod (then namespace and name, for a stable order).
- Filters are :func:`gangscale.sim.filters.filter_node` (kube-scheduler's default filters, see that module).
  A node's load is the requests and host ports of its non-terminal pods, including those bound earlier in the
  same pass, so one pass never over-commits a node nor binds two pods to one host port (NodePorts). For a
  pod with ``DoNotSchedule`` topology spread constraints, PodTopologySpread's counts are taken afresh over
  every node before its filters, so they too include the pods bound earlier in the pass.
- Among feasible nodes it picks by :func:`gangscale.sim.filters.preference`: the sim's stand-in for a real
  cluster, where kube-scheduler does not know about bookings. Consumers of a ProvisioningRequest (annotation
  ``autoscaling.x-k8s.io/consume-provisioning-request``) prefer the nodes whose ``gangscale.io/token`` label
  is one of the PR's scale-up tokens (``status.provisioningClassDetails["gangscale.io/scale-up"]``); other
  pods stay off nodes booked by a PR that is ``Provisioned=True`` and not ``BookingExpired``/``Failed``;
  then bin packing on accelerators, then the node name.
- A pod that fits nowhere gets ``PodScheduled=False``, reason ``Unschedulable`` and kube-scheduler's
  message (``0/3 nodes are available: 1 Insufficient google.com/tpu, 2 node(s) didn't match Pod's node
  affinity/selector.``), applied to ``pods/status`` under field manager ``default-scheduler`` only when the
  message changes.

Simplified: no preemption (so no ``nominatedNodeName`` and no `` preemption: ...`` suffix), no Events
(``FailedScheduling``/``Scheduled``), no backoff queue (every pass retries every pending pod: the sim moves
in discrete instants, so a retry costs nothing), one profile, and the filters left out in
:mod:`gangscale.sim.filters`. With ``extended_resource_toleration`` (the default) a pod tolerates
``NoSchedule`` taints keyed by the extended resources it requests, as the ``ExtendedResourceToleration``
admission plugin (enabled on GKE) would have arranged at creation; the embedded API server does not run it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangscale.controller.logic.record import from_status
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import NAMESPACES, NODES, PODS, PROVREQS
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.filters import (
    HOSTNAME_LABEL,
    NodeInfo,
    PodInfo,
    filter_node,
    node_info,
    pod_info,
    preference,
    spread_state,
    unschedulable_message,
)
from gangscale.sim.informers import HttpReader, Reader
from gangscale.sim.world import Timeline
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
APPLY = "application/apply-patch+yaml"
TERMINAL_PHASES = ("Succeeded", "Failed")


def condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == ctype:
            return item
    return None


def is_true(obj: Mapping[str, Any], ctype: str) -> bool:
    found = condition(obj, ctype)
    return found is not None and found.get("status") == "True"


def is_pending(pod: Mapping[str, Any]) -> bool:
    """Whether the default scheduler would try to schedule this pod now."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return (not spec.get("nodeName") and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and not meta.get("deletionTimestamp") and spec.get("schedulerName") in (None, "", SCHEDULER_NAME)
            and not spec.get("schedulingGates"))


def is_assigned(pod: Mapping[str, Any]) -> bool:
    """Whether the pod holds resources on a node (bound and not terminal, deleting or not)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def queue_key(pod: PodInfo) -> tuple[int, float, str, str]:
    return -pod.priority, pod.created, pod.namespace, pod.name


@dataclass(frozen=True, slots=True)
class Bookings:
    """Scale-up tokens per ProvisioningRequest, and the tokens of PRs whose capacity is booked right now."""

    tokens: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    booked: frozenset[str] = frozenset()

    def own(self, pod: PodInfo) -> frozenset[str]:
        return self.tokens.get((pod.namespace, pod.consumes), frozenset()) if pod.consumes else frozenset()


def read_bookings(provreqs: Sequence[Mapping[str, Any]]) -> Bookings:
    tokens: dict[tuple[str, str], frozenset[str]] = {}
    booked: set[str] = set()
    for pr in provreqs:
        meta = pr.get("metadata") or {}
        record = from_status(dict(pr.get("status") or {}))
        if record is None:
            continue
        tokens[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = frozenset(record.tokens)
        if is_true(pr, "Provisioned") and not is_true(pr, "BookingExpired") and not is_true(pr, "Failed"):
            booked.update(record.tokens)
    return Bookings(tokens, frozenset(booked))


@dataclass
class Load:
    requested: dict[str, int] = field(default_factory=dict)
    pods: list[PodInfo] = field(default_factory=list)


class ClusterView:
    """Nodes and what is on them, updated as the pass binds pods."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.loads = {node.name: Load() for node in self.nodes}
        self._domains: dict[str, list[str]] = {}
        for node in self.nodes:
            host = node.labels.get(HOSTNAME_LABEL)
            if host is not None:
                self._domains.setdefault(host, []).append(node.name)

    def place(self, pod: PodInfo, node: str) -> None:
        load = self.loads.get(node)
        if load is None:
            return  # bound to a node that does not exist (yet): it loads nothing the filters look at
        for name, amount in pod.requests.items():
            load.requested[name] = load.requested.get(name, 0) + amount
        load.pods.append(pod)

    def neighbours(self, node: NodeInfo) -> list[PodInfo]:
        """Pods in the node's ``kubernetes.io/hostname`` domain (none when the node lacks the label)."""
        host = node.labels.get(HOSTNAME_LABEL)
        if host is None:
            return []
        return [pod for name in self._domains.get(host, ()) for pod in self.loads[name].pods]


class Scheduler:
    """A Component: see the module docstring."""

    name = "scheduler"

    def __init__(self, http: KubeHTTP, timeline: Timeline, *, extended_resource_toleration: bool = True,
                 reader: Reader | None = None) -> None:
        self.http = http
        #: Where the reads come from: the driver's informer cache, else a LIST per read.
        self.reader = reader or HttpReader(http)
        self.timeline = timeline
        self.extended_resource_toleration = extended_resource_toleration

    def next_wake(self) -> float | None:
        return None

    async def sync(self, now: float) -> bool:
        nodes = [node_info(n) for n in await self._items(NODES)]
        cluster = ClusterView(nodes)
        queue: list[tuple[PodInfo, JSON]] = []
        for pod in await self._items(PODS):
            assigned, pending = is_assigned(pod), is_pending(pod)
            if not (assigned or pending):
                continue
            info = self._info(pod)
            if info is None:
                continue
            if assigned:
                cluster.place(info, str(pod["spec"]["nodeName"]))
            else:
                queue.append((info, pod))
        if not queue:
            return False
        queue.sort(key=lambda item: queue_key(item[0]))
        bookings = read_bookings(await self._items(PROVREQS, optional=True))
        namespace_labels = await self._namespace_labels(cluster, [info for info, _ in queue])
        wrote = False
        for info, pod in queue:
            wrote = await self._schedule(info, pod, cluster, bookings, namespace_labels, now) or wrote
        return wrote

    # --- one pod ------------------------------------------------------------------------------------------

    async def _schedule(self, pod: PodInfo, raw: JSON, cluster: ClusterView, bookings: Bookings,
                        namespace_labels: Mapping[str, Mapping[str, str]], now: float) -> bool:
        reasons: list[list[str]] = []
        feasible: list[NodeInfo] = []
        spread = spread_state(pod, [(node, cluster.loads[node.name].pods) for node in cluster.nodes]) \
            if pod.spread else None
        for node in cluster.nodes:
            load = cluster.loads[node.name]
            why = filter_node(pod, node, load.requested, len(load.pods), cluster.neighbours(node), namespace_labels,
                              on_node=load.pods, spread=spread)
            if why:
                reasons.append(why)
            else:
                feasible.append(node)
        if not feasible:
            return await self._mark_unschedulable(raw, unschedulable_message(len(cluster.nodes), reasons), now)
        own = bookings.own(pod)
        best = min(feasible, key=lambda n: preference(pod, n, cluster.loads[n.name].requested, own,
                                                      bookings.booked - own))
        if await self._bind(pod, best.name):
            cluster.place(pod, best.name)
            return True
        return False

    async def _bind(self, pod: PodInfo, node: str) -> bool:
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod.name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            await self.http.request("POST", PODS.path(pod.namespace, pod.name, "binding"), body=body)
        except ApiError as exc:
            # Bound or deleted meanwhile: the next pass sees where it went. Anything else: retried next pass.
            level = logging.DEBUG if exc.conflict or exc.not_found else logging.WARNING
            log.log(level, "scheduler: binding %s to %s failed: %s", pod.key, node, exc)
            return False
        log.debug("scheduler: bound %s to %s", pod.key, node)
        return True

    async def _mark_unschedulable(self, pod: JSON, message: str, now: float) -> bool:
        current = condition(pod, "PodScheduled") or {}
        if (current.get("status"), current.get("reason"), current.get("message")) == \
                ("False", "Unschedulable", message):
            return False
        meta = pod.get("metadata") or {}
        since = current.get("lastTransitionTime") if current.get("status") == "False" else None
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                           "message": message, "lastTransitionTime": since or rfc3339(now)}]}}
        try:
            await self.http.request("PATCH", PODS.path(meta.get("namespace"), meta.get("name"), "status"),
                                    query={"fieldManager": SCHEDULER_NAME, "force": "true"}, body=body,
                                    content_type=APPLY)
        except ApiError as exc:
            log.log(logging.DEBUG if exc.not_found else logging.WARNING,
                    "scheduler: could not mark %s/%s unschedulable: %s", meta.get("namespace"), meta.get("name"), exc)
            return False
        return True

    # --- reading --------------------------------------------------------------------------------------------

    def _info(self, pod: JSON) -> PodInfo | None:
        try:
            return pod_info(pod, extended_resource_toleration=self.extended_resource_toleration)
        except ValueError as exc:  # the API server validates quantities; a bad one must not stop the pass
            meta = pod.get("metadata") or {}
            log.warning("scheduler: skipping pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
            return None

    async def _items(self, resource: Resource, *, optional: bool = False) -> list[JSON]:
        try:
            return await self.reader.items(resource)
        except ApiError as exc:
            if optional and exc.not_found:  # the CRD is not installed
                return []
            raise

    async def _namespace_labels(self, cluster: ClusterView, queue: Sequence[PodInfo]) -> dict[str, dict[str, str]]:
        """Namespace labels, read only when some anti-affinity term has a ``namespaceSelector``."""
        pods = list(queue) + [pod for load in cluster.loads.values() for pod in load.pods]
        if not any(term.namespace_selector is not None for pod in pods for term in pod.anti_affinity):
            return {}
        return {str(ns["metadata"]["name"]): dict((ns.get("metadata") or {}).get("labels") or {})
                for ns in await self._items(NAMESPACES, optional=True)}
