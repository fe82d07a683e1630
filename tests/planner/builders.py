"""Builders for planner tests: pools, nodes, pod sets and gangs with short, readable defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gangscale.model.gang import Gang, PodSet
from gangscale.model.nodepool import POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.model.pod import HOSTNAME_LABEL, pod_demand
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint
from gangscale.model.snapshot import Booking, NodeState, PoolState, Quota, Snapshot
from gangscale.model.tiers import TierPolicy

TPU_V5E = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
L4 = {"cloud.google.com/gke-accelerator": "nvidia-l4"}

GPU_NODE = {"cpu": "200", "memory": "1800Gi", "nvidia.com/gpu": "8", "pods": "110"}
L4_NODE = {"cpu": "44", "memory": "170Gi", "nvidia.com/gpu": "4", "pods": "110"}
CPU_NODE = {"cpu": "16", "memory": "64Gi", "pods": "110"}
TPU_NODE = {"cpu": "110", "memory": "180Gi", "google.com/tpu": "4", "pods": "110"}


def taint(text: str) -> Taint:
    """``key=value:Effect`` or ``key:Effect``."""
    head, effect = text.rsplit(":", 1)
    key, _, value = head.partition("=")
    return Taint(key, value, effect)


def pool(name: str, allocatable: Mapping[str, Any] = CPU_NODE, *, max_units: int = 10, nodes_per_unit: int = 1,
         zone: str = "zone-a", labels: Mapping[str, str] | None = None, taints: Sequence[str] = (),
         price: float | None = None, tier: str = "on-demand", reservation: int | None = None) -> NodePool:
    all_labels = {POOL_LABEL: name, ZONE_LABEL: zone, **(labels or {})}
    return NodePool(name=name, allocatable=ResourceList.parse(allocatable), max_units=max_units,
                    labels=all_labels, taints=tuple(taint(t) for t in taints), nodes_per_unit=nodes_per_unit,
                    zone=zone, price_per_unit_hour=price, capacity_type=tier, reservation_nodes=reservation)


def state(p: NodePool, units: int = 0, inflight: int = 0, backoff_until: float | None = None,
          backoff_reason: str = "") -> PoolState:
    return PoolState(p, units, inflight, backoff_until, backoff_reason)


def node(name: str, p: NodePool | None = None, *, used: Mapping[str, Any] | None = None,
         allocatable: Mapping[str, Any] | None = None, ready: bool = True, unschedulable: bool = False,
         labels: Mapping[str, str] | None = None, taints: Sequence[str] | None = None) -> NodeState:
    """A node of pool ``p`` (its labels, taints, allocatable) with ``used`` already requested by pods."""
    base_labels = dict(p.labels) if p else {}
    alloc = ResourceList.parse(allocatable) if allocatable is not None else (p.allocatable if p else ResourceList())
    node_taints = tuple(taint(t) for t in taints) if taints is not None else (p.taints if p else ())
    return NodeState(name=name, allocatable=alloc, requested=ResourceList.parse(used or {}),
                     labels={**base_labels, HOSTNAME_LABEL: name, **(labels or {})}, taints=node_taints,
                     ready=ready, unschedulable=unschedulable)


def template(requests: Mapping[str, Any] | None = None, *, limits: Mapping[str, Any] | None = None,
             selector: Mapping[str, str] | None = None, tolerations: Sequence[Mapping[str, Any]] = (),
             affinity: Mapping[str, Any] | None = None, labels: Mapping[str, str] | None = None,
             one_per_node: bool = False, ports: Sequence[Mapping[str, Any]] = (),
             spread: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A pod template dict as Kubernetes serves it; ``ports`` are the container's, ``spread`` its
    ``topologySpreadConstraints``."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", "resources": resources}]}
    if ports:
        spec["containers"][0]["ports"] = [dict(port) for port in ports]
    if spread:
        spec["topologySpreadConstraints"] = [dict(constraint) for constraint in spread]
    if selector:
        spec["nodeSelector"] = dict(selector)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    pod_labels = dict(labels or {})
    affinity = dict(affinity or {})
    if one_per_node:
        pod_labels.setdefault("gang", "member")
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"gang": pod_labels["gang"]}}}]}
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": {"labels": pod_labels}, "spec": spec}


def host_port(port: int, protocol: str | None = None, host_ip: str | None = None) -> dict[str, Any]:
    """A container port entry that takes ``port`` on the node."""
    entry: dict[str, Any] = {"containerPort": port, "hostPort": port}
    if protocol:
        entry["protocol"] = protocol
    if host_ip:
        entry["hostIP"] = host_ip
    return entry


def spread(max_skew: int = 1, key: str = HOSTNAME_LABEL, *, min_domains: int | None = None,
           match: Mapping[str, str] | None = None, when: str = "DoNotSchedule", **extra: Any) -> dict[str, Any]:
    """A topology spread constraint selecting pods labelled ``match`` (default ``app: w``)."""
    constraint: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
                                  "labelSelector": {"matchLabels": dict(match or {"app": "w"})}, **extra}
    if min_domains is not None:
        constraint["minDomains"] = min_domains
    return constraint


def pod_set(name: str, count: int, requests: Mapping[str, Any] | None = None, **kwargs: Any) -> PodSet:
    return PodSet(name, count, pod_demand(template(requests, **kwargs), name))


def gang(key: str, *pod_sets: PodSet, priority: int = 0, created: float = 0.0, spread: bool = False,
         may_scale: bool = True, tiers: TierPolicy | None = None) -> Gang:
    return Gang(key, tuple(pod_sets), priority=priority, created=created, spread_zones=spread, may_scale=may_scale,
                tiers=tiers)


def snapshot(pools: Sequence[PoolState | NodePool] = (), nodes: Sequence[NodeState] = (),
             bookings: Sequence[Booking] = (), quotas: Sequence[Quota] = ()) -> Snapshot:
    states = tuple(p if isinstance(p, PoolState) else PoolState(p) for p in pools)
    return Snapshot(states, tuple(nodes), tuple(bookings), tuple(quotas))
