"""``gangscale sim gcp``: the fake control plane as a process, set up from a pool file.

Every cluster the pool file's ``gke:`` blocks name is created (its zones: those of its pools), and every node
pool they name as existing (the ``nodePool`` of a ``resize``, ``flex-start`` or ``queued-provisioning`` pool, a
``slice`` pool's template) is created with no VM, so that ``gangscale run --provider gke`` finds what it expects.
The node pool of a ``flex-start`` pool is made as ``gcloud container node-pools create --flex-start
[--max-run-duration]`` makes one (``config.flexStart``, ``config.maxRunDuration`` from the pool's
``maxRunDurationSeconds``, no autoscaling; GKE "Run a small batch workload with GPUs and Flex-start VMs"); that of a
``queued-provisioning`` pool as GKE's queued-provisioning how-to does (``--enable-queued-provisioning
--flex-start --enable-autoscaling --num-nodes=0 --total-max-nodes --location-policy=ANY --reservation-affinity=none``:
``queuedProvisioning.enabled``, ``config.flexStart``, autoscaling from 0, ``NO_RESERVATION``), except that
auto-repair stays on: the fake refuses it off in a release channel (GKE's how-to turns it off). One project per
process: the fake serves a single project. Time is the wall clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.sim.gcp.server import FakeGcp

#: ``--total-max-nodes`` of a queued-provisioning node pool when the pool file's pools allow fewer nodes.
QUEUED_MAX_NODES = 1000


def project_of(pools: Sequence[NodePool]) -> str:
    projects = {str(pool.provider["gke"]["project"]) for pool in pools if "gke" in pool.provider}
    if len(projects) != 1:
        raise ValueError("the fake serves one project; the pool file's gke blocks name "
                         f"{', '.join(sorted(projects)) or 'none'}")
    return projects.pop()


def _extra(gke: Any, nodes: int) -> dict[str, Any]:
    """NodePool fields of the existing pool a gke block's mode needs."""
    mode = str(gke.get("mode", "slice"))
    if mode == "flex-start":
        config: dict[str, Any] = {"flexStart": True}
        if gke.get("maxRunDurationSeconds"):
            config["maxRunDuration"] = f"{int(gke['maxRunDurationSeconds'])}s"
        return {"config": config}
    if mode == "queued-provisioning":
        return {"queuedProvisioning": {"enabled": True},
                "config": {"flexStart": True, "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}},
                "autoscaling": {"enabled": True, "totalMinNodeCount": 0,
                                "totalMaxNodeCount": max(nodes, QUEUED_MAX_NODES), "locationPolicy": "ANY"}}
    return {}


def set_up(gcp: FakeGcp, pools: Sequence[NodePool], *, label_pools: bool = False) -> None:
    """The clusters and existing node pools ``pools`` expect. ``label_pools``: an existing node pool's config
    labels name the gangscale pool (``gangscale.io/node-pool``), as an operator may set them, so its nodes are
    found by that label too (the demo's observer does)."""
    zones: dict[tuple[str, str], set[str]] = defaultdict(set)
    existing: dict[tuple[str, str, str], dict[str, Any]] = {}
    for pool in pools:
        gke = pool.provider.get("gke")
        if gke is None:
            continue
        cluster = (str(gke["location"]), str(gke["cluster"]))
        zones[cluster].add(pool.zone)
        if gke.get("nodePool"):
            found = existing.setdefault((*cluster, str(gke["nodePool"])),
                                        {"machine_type": pool.machine_type, "zones": set(), "gke": gke, "nodes": 0,
                                         "tpu_topology": pool.tpu_topology if pool.nodes_per_unit > 1 else "",
                                         "labels": {POOL_LABEL: pool.name} if label_pools else None})
            found["zones"].add(pool.zone)
            found["nodes"] += pool.max_units * pool.nodes_per_unit
    for (location, cluster_name), cluster_zones in sorted(zones.items()):
        gcp.add_cluster(location, cluster_name, sorted(cluster_zones))
    for (location, cluster_name, name), spec in sorted(existing.items()):
        gcp.add_node_pool((location, cluster_name), name, machine_type=spec["machine_type"],
                          zones=sorted(spec["zones"]), tpu_topology=spec["tpu_topology"], labels=spec["labels"],
                          extra=_extra(spec["gke"], spec["nodes"]))
