"""Where GKE queues a ``queued-provisioning.gke.io`` ProvisioningRequest, and for how many nodes: the node pool its
PodTemplate selects, the zone, and the bin-packed node count (:class:`Plan`), or the reason it cannot be queued
(a ``(reason, message)`` pair of :mod:`.queuedstatus`). Pure: it reads the fake's node pools, never changes them.

Sources: only MIGs of node pools with ``queuedProvisioning.enabled`` are candidates
(GoogleCloudPlatform/cluster-autoscaler ``scaleup/reasons/reasons.go: IsNodeGroupQueued``), all pods in one MIG, i.e.
one zone of one pool (``scaleup/orchestrator.go: canScheduleWholeProvReqOnMig``), the node count estimated by
bin-packing the pods onto the MIG's template (``computeExpansionOption``), within the pool's maximum size
(``NodepoolSizeReached``). ``AcceleratorType`` is the pool's ``config.accelerators[].acceleratorType`` joined with
``,``, or else the TPU type (``manager.go: detailsFromSpec``); the fake falls back to the machine's built-in GPU type.
The fake's own simplification: the pool is the one the template's ``cloud.google.com/gke-nodepool`` selector names
(see :mod:`.queued`), the zone that of its ``topology.kubernetes.io/zone`` selector, else the pool's first location.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.model.catalog import GPU_LABEL, TPU_ACCELERATOR_LABEL, machine_labels
from gangscale.model.pod import pod_requests
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import SpecError
from gangscale.sim.gcp import queuedstatus as Q
from gangscale.sim.gcp.nodes import pool_allocatable
from gangscale.sim.gcp.state import Mig, NodePool

JSON = dict[str, Any]


@dataclass(frozen=True)
class Plan:
    pool: NodePool
    mig: Mig
    nodes: int
    templates: list[str]


def is_queued(pool: NodePool) -> bool:
    return bool((pool.extra.get("queuedProvisioning") or {}).get("enabled"))


def make_plan(pools: Sequence[NodePool], pod_sets: Sequence[tuple[int, JSON]],
              names: list[str]) -> Plan | tuple[str, str]:
    """``pod_sets``: (count, PodTemplate object) of each podSet; ``names``: the templates' names."""
    specs = [(count, (template.get("template") or {}).get("spec") or {}) for count, template in pod_sets]
    selectors = [spec.get("nodeSelector") or {} for _, spec in specs]
    wanted = {selector.get(Q.NODEPOOL_SELECTOR) for selector in selectors}
    pool = next((p for p in pools if is_queued(p) and p.name in wanted), None) if len(wanted) == 1 else None
    if pool is None:
        return Q.NO_QUEUED_POOL
    zones = {str(selector[Q.ZONE_SELECTOR]) for selector in selectors if Q.ZONE_SELECTOR in selector}
    if len(zones) > 1 or not zones <= set(pool.migs):
        return Q.not_schedulable(pool.name, "node(s) didn't match Pod's node affinity/selector")
    mig = pool.migs[zones.pop() if zones else pool.locations[0]]
    try:
        requests = [(count, pod_requests(spec, "template.spec")) for count, spec in specs]
    except SpecError as exc:
        return Q.not_schedulable(pool.name, str(exc))
    needed = Q.nodes_needed(requests, ResourceList(pool_allocatable(pool)))
    if isinstance(needed, str):
        return Q.not_schedulable(pool.name, needed)
    if over_max(pool, mig, needed):
        return Q.size_reached(pool.name)
    return Plan(pool, mig, needed, names)


def over_max(pool: NodePool, mig: Mig, nodes: int) -> bool:
    """Whether ``nodes`` more would pass the pool's autoscaling maximum (per zone, or in total)."""
    scaling = pool.autoscaling
    if not scaling.get("enabled"):
        return False
    if "totalMaxNodeCount" in scaling:
        return sum(m.target_size for m in pool.migs.values()) + nodes > int(scaling["totalMaxNodeCount"])
    return "maxNodeCount" in scaling and mig.target_size + nodes > int(scaling["maxNodeCount"])


def accelerator_type(pool: NodePool) -> str:
    accelerators = [str(a.get("acceleratorType")) for a in pool.config.get("accelerators") or []
                    if isinstance(a, dict) and a.get("acceleratorType")]
    labels = machine_labels(pool.machine, pool.tpu_topology)
    return ",".join(accelerators) or labels.get(TPU_ACCELERATOR_LABEL) or labels.get(GPU_LABEL) or ""
