"""Nodes and pods as the controller sees them, kept current one event at a time.

The reflectors keep records, not objects: :func:`parse_node`, :func:`parse_pod` and
:func:`~gangscale.sources.raycluster.worker_pod` are their transforms, applied to each object as it arrives, so the
raw JSON of a node or pod is never kept. A record holds what a decision reads and nothing else: a bound pod is its
node, its requests, whether it is a DaemonSet or mirror pod, and the request it consumes (about 0.3 KiB against
the 11 KiB of the pod's JSON as Python objects). Strings and resource lists that many records repeat (node names,
label keys and values, request shapes, namespaces) are shared, not copied (:func:`shared`).

A node or pod that changes is parsed again, and only it: the sum of the requests of the pods on each node, the
units of each pool, the nodes of each provider token, the consumer pods of each request and the Ray worker pods
of each cluster are indices updated by that one change. So the work per event does not grow with the size of
the cluster, and a planning pass reads a view that is already built (:meth:`ClusterView.snapshot_nodes`).

Each ``apply_*`` returns what the change touched (:class:`Touched`), so the loop can mark exactly the requests
that depend on it.
"""

from __future__ import annotations

import logging
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gangscale.model.interning import Interned
from gangscale.model.nodepool import NodePool
from gangscale.model.pod import pod_requests
from gangscale.model.quantity import QuantityError
from gangscale.model.resources import EMPTY, ResourceList
from gangscale.model.scheduling import SpecError, Taint
from gangscale.model.snapshot import NodeState
from gangscale.providers.base import NodeRef, labelled_node, same_token
from gangscale.sources.provreq import consumed_pr
from gangscale.sources.raycluster import RayWorker, WorkerPod
from gangscale.timefmt import parse_rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)
TERMINATED = ("Succeeded", "Failed")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
PodKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PodInfo:
    node: str
    requests: ResourceList
    #: Pods that do not keep a node from being removed: DaemonSet pods and static (mirror) pods.
    daemon: bool
    #: ``namespace/name`` of the request the pod consumes, if any.
    consumes: str | None


@dataclass(frozen=True, slots=True)
class Readiness:
    """The node's ``Ready`` condition: ``status`` ("True", "False", "Unknown"; "" when the node reports none) and
    its ``lastTransitionTime`` (None when absent or unreadable)."""

    status: str
    since: float | None
    #: Why the node is about to go away, when it says so ("" otherwise): the kubelet's graceful node shutdown (its
    #: Ready condition's message says the node is shutting down: a spot VM's preemption notice), or a termination
    #: handler's taint (:data:`TERMINATION_TAINTS`).
    notice: str = ""


NO_READINESS = Readiness("", None)
#: The kubelet's graceful node shutdown turns Ready False with this in its message (``pkg/kubelet/nodeshutdown``).
SHUTTING_DOWN = "shutting down"
#: Taints that node termination handlers put on a node about to be reclaimed: Kubernetes' k8s-node-termination-handler
#: for GCE preemptions (``cloud.google.com/impending-node-termination``) and AWS's aws-node-termination-handler for a
#: spot interruption notice (``aws-node-termination-handler/spot-itn``).
TERMINATION_TAINTS = ("cloud.google.com/impending-node-termination", "aws-node-termination-handler/spot-itn")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    state: NodeState
    pool: str | None
    unit: str | None
    #: The provider's claim of the token that made the node's unit (``NodePoolProvider.claim``).
    claim: str | None
    deleting: bool
    readiness: Readiness = NO_READINESS


@dataclass
class Touched:
    """What one change touched: provider tokens, node names, units (a unit id, or the name of a node without one),
    requests whose consumers changed, Ray clusters."""

    claims: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    units: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)
    clusters: set[tuple[str, str]] = field(default_factory=set)


#: The field selector of the pods that take room on nodes: bound and not terminated, as the cluster-autoscaler
#: watches them. Pending pods take nothing from nodes and are not listed at all; a pod that succeeds or fails leaves
#: the selection, and the API server's watch reports it as DELETED.
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
#: Resource lists kept shared: pods of one job request the same, so their records hold one object.
shared_requests: Interned[ResourceList] = Interned()


def shared(text: str) -> str:
    """One string object for every equal string (node names, namespaces, label keys and values)."""
    return sys.intern(text)


def requests_of(spec: JSON) -> ResourceList:
    """:func:`~gangscale.model.pod.pod_requests`, remembered by the resource fields it reads: the pods of one job
    ask for the same, and reading quantities was most of the cost of a pod's record. A spec whose fields cannot be a
    key (malformed) is read directly, so its error is reported as before."""
    try:
        key = _requests_key(spec)
        found = _REQUESTS_OF.get(key)
    except (TypeError, AttributeError):
        return pod_requests(spec)
    if found is None:
        found = shared_requests(pod_requests(spec))
        if len(_REQUESTS_OF) < shared_requests.bound:
            _REQUESTS_OF[key] = found
    return found


def _requests_key(spec: JSON) -> tuple[Any, ...]:
    """Everything :func:`~gangscale.model.pod.pod_requests` reads, as a hashable value."""
    return (tuple(_resources_key(c) for c in spec.get("containers") or ()),
            tuple((_resources_key(c), c.get("restartPolicy")) for c in spec.get("initContainers") or ()),
            _resources_key(spec), _items(spec.get("overhead")))


def _resources_key(holder: JSON) -> tuple[Any, ...]:
    resources = holder.get("resources") or {}
    return _items(resources.get("requests")), _items(resources.get("limits"))


def _items(mapping: Any) -> tuple[Any, ...]:
    return tuple(mapping.items()) if mapping else ()


_REQUESTS_OF: dict[tuple[Any, ...], ResourceList] = {}


def pod_key(obj: JSON) -> PodKey:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def parse_pod(pod: JSON) -> PodInfo | None:
    """The record of a bound, non-terminated pod; None for any other (pending pods take nothing from nodes).
    The transform of the pods reflector."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in TERMINATED:
        return None
    meta = pod.get("metadata") or {}
    try:
        requests = requests_of(spec)
    except (SpecError, QuantityError) as exc:
        log.warning("pod %s/%s: cannot read its requests (%s); counting none", meta.get("namespace"),
                    meta.get("name"), exc)
        requests = EMPTY
    owners = meta.get("ownerReferences") or []
    daemon = any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners) or \
        MIRROR_ANNOTATION in (meta.get("annotations") or {})
    pr = consumed_pr(pod)
    return PodInfo(shared(str(node)), requests, daemon, shared(f"{meta.get('namespace', '')}/{pr}") if pr else None)


Classify = Callable[[str, Mapping[str, str]], NodeRef | None]


def parse_node(node: JSON, classify: Classify = labelled_node) -> NodeInfo | None:
    """The node as the planner sees it, with no pods yet (the view adds their requests); ``classify`` is the
    provider's ``node_ref``. The transform of the nodes reflector (:meth:`ClusterView.node_record`): images,
    addresses, heartbeats and the rest of the object are not kept."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    name = shared(str(meta.get("name", "")))
    try:
        allocatable = shared_requests(ResourceList.parse(status.get("allocatable"), f"node {name} status.allocatable"))
        taints = tuple(Taint.parse(t, f"node {name} spec.taints[{i}]") for i, t in enumerate(spec.get("taints") or []))
    except (SpecError, QuantityError) as exc:
        log.warning("node %s is unusable for planning: %s", name, exc)
        return None
    readiness = _readiness(status.get("conditions"))
    if not readiness.notice and (ended := next((t.key for t in taints if t.key in TERMINATION_TAINTS), None)):
        readiness = replace(readiness, notice=f"tainted {ended}")
    ready = readiness.status == "True"
    labels = {shared(str(k)): shared(str(v)) for k, v in (meta.get("labels") or {}).items()}
    deleting = bool(meta.get("deletionTimestamp"))
    state = NodeState(name=name, allocatable=allocatable, labels=labels, taints=taints,
                      ready=ready and not deleting, unschedulable=bool(spec.get("unschedulable")))
    ref = classify(name, labels)
    if ref is None:
        return NodeInfo(state, None, None, None, deleting, readiness)
    return NodeInfo(state, ref.pool, ref.unit, ref.claim, deleting, readiness)


def _readiness(conditions: Any) -> Readiness:
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            since, message = cond.get("lastTransitionTime"), str(cond.get("message") or "")
            notice = message if cond.get("status") != "True" and SHUTTING_DOWN in message.lower() else ""
            return Readiness(str(cond.get("status") or ""), parse_rfc3339(since) if isinstance(since, str) else None,
                             notice)
    return NO_READINESS


class ClusterView:
    """Parsed nodes and bound pods with their indices; see the module docstring."""

    def __init__(self, classify: Classify = labelled_node, claim: Callable[[str], str] = same_token) -> None:
        #: The provider's ``node_ref`` and ``claim``: how its nodes are recognised.
        self.classify, self.claim = classify, claim
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[PodKey, PodInfo] = {}
        self.pods_on: dict[str, dict[PodKey, PodInfo]] = defaultdict(dict)
        self.consumers: dict[str, dict[PodKey, PodInfo]] = defaultdict(dict)
        self.requested: dict[str, ResourceList] = {}
        #: node -> resource -> the sum of its bound pods' requests, changed in place as pods come and go.
        self._sums: dict[str, dict[str, int]] = {}
        #: pool -> unit id (or node name for a node without one) -> node names.
        self._units: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        #: unit id -> its pool, for nodes of any pool.
        self.unit_pool: dict[str, str] = {}
        #: claim -> names of the nodes of units made under it.
        self.by_claim: dict[str, set[str]] = defaultdict(set)
        self.workers: dict[tuple[str, str], dict[PodKey, WorkerPod]] = defaultdict(dict)
        self._worker_of: dict[PodKey, tuple[str, str]] = {}
        #: Ray clusters whose worker pods changed since the Ray source last looked.
        self._changed_clusters: set[tuple[str, str]] = set()
        #: Bumped on every change of nodes or bound pods, so a consumer can tell whether anything moved.
        self.version = 0

    # -- changes ----------------------------------------------------------------------------------------------------

    def node_record(self, obj: JSON) -> NodeInfo | None:
        """The nodes reflector's transform: :func:`parse_node` with this view's provider."""
        return parse_node(obj, self.classify)

    def reclassified(self, info: NodeInfo) -> NodeInfo:
        """``info`` with the pool, unit and claim the provider gives its name and labels now."""
        ref = self.classify(info.state.name, info.state.labels)
        if ref is None:
            return replace(info, pool=None, unit=None, claim=None)
        return replace(info, pool=ref.pool, unit=ref.unit, claim=ref.claim)

    def apply_node(self, name: str, info: NodeInfo | None) -> Touched:
        """The node's record now (:meth:`node_record`; None: gone or unusable)."""
        touched = Touched(nodes={name})
        old = self.nodes.pop(name, None)
        if old is not None:
            self._unindex_node(name, old)
            touched.units.add(old.unit or name)
            if old.claim:
                touched.claims.add(old.claim)
        if info is not None:
            info = replace(info, state=replace(info.state, requested=self.requested.get(name, EMPTY)))
            self.nodes[name] = info
            self._index_node(name, info)
            touched.units.add(info.unit or name)
            if info.claim:
                touched.claims.add(info.claim)
        self.version += 1
        return touched

    def apply_pod(self, key: PodKey, info: PodInfo | None) -> Touched:
        """The bound pod's record now (:func:`parse_pod`; None: gone, terminated or not bound)."""
        return self.apply_pods({key: info})

    def apply_pods(self, changes: Mapping[PodKey, PodInfo | None]) -> Touched:
        """:meth:`apply_pod` for many pods; each node they touched is brought up to date once, not once a pod (the
        first pass after the first list applies every pod of the cluster)."""
        touched = Touched()
        for key, info in changes.items():
            old = self.pods.pop(key, None)
            if old is not None:
                self._unbind(key, old, touched)
            if info is not None:
                self.pods[key] = info
                self._bind(key, info, touched)
            if old is not None or info is not None:
                self.version += 1
        for node in touched.nodes:
            self._update_requested(node)
        return touched

    # -- reads ------------------------------------------------------------------------------------------------------

    def units(self, pools: Mapping[str, NodePool]) -> dict[str, dict[str, list[str]]]:
        """pool -> unit id -> node names (sorted), for nodes of the configured pools; a node without a unit label
        is a unit of its own."""
        return {pool: {unit: sorted(names) for unit, names in sorted(units.items())}
                for pool, units in self._units.items() if pool in pools and units}

    def unit_count(self, pool: NodePool, units: Mapping[str, list[str]]) -> int:
        labelled = sum(1 for nodes in units.values() if self.nodes[nodes[0]].unit is not None)
        loose = sum(len(nodes) for nodes in units.values() if self.nodes[nodes[0]].unit is None)
        return labelled + -(-loose // pool.nodes_per_unit)

    def unit_nodes(self, unit: str) -> tuple[str, tuple[str, ...]] | None:
        """The pool of ``unit`` and its nodes (sorted); None for a unit with no node now."""
        pool = self.unit_pool.get(unit)
        if pool is None:
            return None
        return pool, tuple(sorted(self._units[pool][unit]))

    def nodes_of(self, token: str) -> set[str]:
        """The nodes of the units made under ``token`` that exist now."""
        return self.by_claim.get(self.claim(token), set())

    def unit_of(self, node: str) -> str | None:
        info = self.nodes.get(node)
        return None if info is None else info.unit or node

    def empty(self, node: str) -> bool:
        return all(info.daemon for info in self.pods_on.get(node, {}).values())

    def ready(self, node: str) -> bool:
        info = self.nodes.get(node)
        return info is not None and info.state.ready

    def readiness(self, node: str) -> Readiness | None:
        info = self.nodes.get(node)
        return None if info is None else info.readiness

    def take_changed_clusters(self) -> set[tuple[str, str]]:
        changed, self._changed_clusters = self._changed_clusters, set()
        return changed

    def snapshot_nodes(self, leaving: set[str]) -> Iterator[NodeState]:
        return (info.state for name, info in self.nodes.items() if name not in leaving)

    # -- indices ----------------------------------------------------------------------------------------------------

    def _index_node(self, name: str, info: NodeInfo) -> None:
        if info.pool is not None:
            self._units[info.pool][info.unit or name].add(name)
            self.unit_pool[info.unit or name] = info.pool
        if info.claim:
            self.by_claim[info.claim].add(name)

    def _unindex_node(self, name: str, info: NodeInfo) -> None:
        if info.pool is not None:
            units = self._units[info.pool]
            unit = units.get(info.unit or name)
            if unit is not None:
                unit.discard(name)
                if not unit:
                    del units[info.unit or name]
                    self.unit_pool.pop(info.unit or name, None)
            if not units:
                del self._units[info.pool]
        if info.claim:
            names = self.by_claim.get(info.claim)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.by_claim[info.claim]

    def _bind(self, key: PodKey, info: PodInfo, touched: Touched) -> None:
        self.pods_on[info.node][key] = info
        if info.consumes:
            self.consumers[info.consumes][key] = info
            touched.consumers.add(info.consumes)
        self._add_requests(info.node, info.requests, +1)
        touched.nodes.add(info.node)
        if (unit := self.unit_of(info.node)) is not None:
            touched.units.add(unit)

    def _unbind(self, key: PodKey, info: PodInfo, touched: Touched) -> None:
        on = self.pods_on.get(info.node)
        if on is not None:
            on.pop(key, None)
            if not on:
                del self.pods_on[info.node]
        if info.consumes:
            mine = self.consumers.get(info.consumes)
            if mine is not None:
                mine.pop(key, None)
                if not mine:
                    del self.consumers[info.consumes]
            touched.consumers.add(info.consumes)
        self._add_requests(info.node, info.requests, -1)
        touched.nodes.add(info.node)
        if (unit := self.unit_of(info.node)) is not None:
            touched.units.add(unit)

    def _add_requests(self, node: str, requests: ResourceList, sign: int) -> None:
        """Exact integer sums per node: a pod leaving takes away exactly what it added."""
        if not requests:
            return
        sums = self._sums.setdefault(node, {})
        for name, amount in requests.items():
            left = sums.get(name, 0) + sign * amount
            if left:
                sums[name] = left
            else:
                del sums[name]
        if not sums:
            del self._sums[node]

    def _update_requested(self, node: str) -> None:
        sums = self._sums.get(node)
        total = ResourceList(sums) if sums else EMPTY
        if total == self.requested.get(node, EMPTY):
            return
        if total:
            self.requested[node] = total
        else:
            self.requested.pop(node, None)
        info_node = self.nodes.get(node)
        if info_node is not None:
            self.nodes[node] = replace(info_node, state=replace(info_node.state, requested=total))

    def apply_worker(self, key: PodKey, found: RayWorker | None) -> Touched:
        """The Ray worker pod's record now (:func:`~gangscale.sources.raycluster.worker_pod`, bound or not; None:
        gone)."""
        touched = Touched()
        cluster = self._worker_of.pop(key, None)
        if cluster is not None:
            workers = self.workers.get(cluster)
            if workers is not None:
                workers.pop(key, None)
                if not workers:
                    del self.workers[cluster]
            touched.clusters.add(cluster)
        if found is not None:
            cluster, worker = found
            self.workers[cluster][key] = worker
            self._worker_of[key] = cluster
            touched.clusters.add(cluster)
        self._changed_clusters |= touched.clusters
        return touched
