"""A gangscale pool as the ``aws`` provider sees it: where its instances are launched, and how they are recognised.

Built from the pool's ``aws:`` section (validated by :mod:`gangscale.configschema` ``AwsSpec`` and
:func:`gangscale.config._aws_issues`); ``capacityReservationId`` is the pool's ``reservation.name``, which
:mod:`gangscale.config` copies into the section for ``capacityType: reservation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.model.nodepool import POOL_LABEL, NodePool

#: EKS labels a managed node group's nodes with the group's name (EKS's "Managed node groups" documentation).
EKS_NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


@dataclass(frozen=True)
class AwsPool:
    pool: NodePool
    region: str
    cluster: str
    launch_template: str
    launch_template_version: str
    subnet: str
    node_group: str = ""
    placement_group: str = ""
    capacity_block: bool = False
    #: ``capacityType: reservation``: the capacity reservation (``cr-…``) the fleets launch into.
    reservation: str = ""

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def zone(self) -> str:
        return self.pool.zone

    @property
    def instance_type(self) -> str:
        return self.pool.machine_type

    @property
    def capacity_type(self) -> str:
        return self.pool.capacity_type

    @property
    def identifying_label(self) -> tuple[str, str]:
        """The label (key, value) that, with the zone, tells this pool's nodes: the managed node group's, else
        gangscale's pool label (which the launch template's ``--node-labels`` must set)."""
        if self.node_group:
            return EKS_NODEGROUP_LABEL, self.node_group
        return POOL_LABEL, self.name

    @property
    def template_is_id(self) -> bool:
        return self.launch_template.startswith("lt-")


def aws_pools(pools: Mapping[str, NodePool]) -> dict[str, AwsPool]:
    out = {}
    for name, pool in pools.items():
        raw: Mapping[str, Any] | None = pool.provider.get("aws")
        if raw is None:
            continue
        out[name] = AwsPool(pool, str(raw["region"]), str(raw["cluster"]), str(raw["launchTemplate"]),
                            str(raw.get("launchTemplateVersion", "$Default")), str(raw.get("subnet", "")),
                            str(raw.get("nodeGroup", "")), str(raw.get("placementGroup", "")),
                            bool(raw.get("capacityBlock", False)), str(raw.get("capacityReservationId", "")))
    return out
