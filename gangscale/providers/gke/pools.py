"""A gangscale pool as the ``gke`` provider sees it: where it lives on GKE, and what a new unit is made of."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.model.catalog import GPU_RESOURCE, TPU_RESOURCE
from gangscale.model.nodepool import NodePool
from gangscale.model.scheduling import Taint

#: Label prefixes GKE and Kubernetes set on nodes themselves; a node pool's ``config.labels`` may not carry them.
RESERVED_PREFIXES = ("cloud.google.com/", "kubernetes.io/", "node.kubernetes.io/", "topology.kubernetes.io/",
                     "k8s.io/", "gangscale.io/")
#: Taints GKE puts on GPU and TPU nodes by itself.
GKE_TAINTS = frozenset({GPU_RESOURCE, TPU_RESOURCE})
EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
#: The run duration of flex-start and queued-provisioning capacity when the pool file gives none: 7 days, what GKE
#: asks for (GKE's published autoscaler: ``maxRunDurationSeconds`` or 7 days; its documentation: at most 7 days).
DEFAULT_RUN_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class GkePool:
    pool: NodePool
    project: str
    location: str
    cluster: str
    mode: str
    node_pool: str
    #: ``flex-start``/``queued-provisioning``: the run duration asked for (None: GKE's default).
    run_seconds: int | None = None

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def zone(self) -> str:
        return self.pool.zone

    @property
    def cluster_path(self) -> str:
        return f"/v1/projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    @property
    def operations_path(self) -> str:
        return f"/v1/projects/{self.project}/locations/{self.location}/operations"

    @property
    def cluster_key(self) -> tuple[str, str, str]:
        return self.project, self.location, self.cluster

    def node_labels(self) -> dict[str, str]:
        """The pool file's own labels (GKE and gangscale set the others)."""
        return {k: v for k, v in self.pool.labels.items() if not k.startswith(RESERVED_PREFIXES)}

    def node_taints(self) -> list[dict[str, str]]:
        """The pool file's own taints in the container API's form (GKE adds the GPU and TPU ones)."""
        return [_taint(t) for t in self.pool.taints if t.key not in GKE_TAINTS]


def gke_pools(pools: Mapping[str, NodePool]) -> dict[str, GkePool]:
    out = {}
    for name, pool in pools.items():
        raw: Mapping[str, Any] | None = pool.provider.get("gke")
        if raw is None:
            continue
        run = raw.get("maxRunDurationSeconds")
        out[name] = GkePool(pool, str(raw["project"]), str(raw["location"]), str(raw["cluster"]),
                            str(raw.get("mode", "slice")), str(raw.get("nodePool", "")),
                            None if run is None else int(run))
    return out


def _taint(taint: Taint) -> dict[str, str]:
    return {"key": taint.key, "value": taint.value, "effect": EFFECTS.get(taint.effect, taint.effect)}
