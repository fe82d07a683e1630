"""Node pools as the planner sees them: what one node of the pool offers, and in what units it comes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gangscale.model.quantity import is_extended
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint
from gangscale.model.tiers import CAPACITY_TYPES, ON_DEMAND, RESERVATION

POOL_LABEL = "gangscale.io/node-pool"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass(frozen=True, slots=True)
class NodePool:
    """A resolved node pool (the file's fields with the machine catalog applied).

    ``labels``, ``taints`` and ``allocatable`` are exactly what each new node of the pool will have.
    A unit is ``nodes_per_unit`` nodes obtained and released together (a multi-host TPU slice); scaling is
    counted in units between ``min_units`` and ``max_units``.
    """

    name: str
    allocatable: ResourceList
    max_units: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    nodes_per_unit: int = 1
    min_units: int = 0
    zone: str = ""
    machine_type: str = ""
    tpu_topology: str = ""
    price_per_unit_hour: float | None = None
    #: The tier its nodes come from (:mod:`gangscale.model.tiers`): reservation, on-demand, spot or flex-start.
    capacity_type: str = ON_DEMAND
    #: A reservation's size in nodes (``capacity_type`` reservation): no more units than it holds are asked for.
    reservation_nodes: int | None = None
    #: Provider sections of the pool file (``simulated``, ``gke``), validated by each provider.
    provider: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.nodes_per_unit < 1:
            raise ValueError(f"pool {self.name}: nodesPerUnit must be at least 1")
        if not 0 <= self.min_units <= self.max_units:
            raise ValueError(f"pool {self.name}: need 0 <= minUnits <= maxUnits, "
                             f"got {self.min_units}..{self.max_units}")
        if self.capacity_type not in CAPACITY_TYPES:
            raise ValueError(f"pool {self.name}: capacityType must be one of {', '.join(CAPACITY_TYPES)}, "
                             f"got {self.capacity_type!r}")
        if self.reservation_nodes is not None and (self.capacity_type != RESERVATION or self.reservation_nodes < 0):
            raise ValueError(f"pool {self.name}: a reservation size is for a pool of capacityType reservation, "
                             "and 0 or more nodes")
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    @property
    def unit_limit(self) -> int:
        """The most units the pool may have: ``max_units``, and no more than its reservation holds."""
        if self.reservation_nodes is None:
            return self.max_units
        return min(self.max_units, self.reservation_nodes // self.nodes_per_unit)

    @property
    def accelerators(self) -> tuple[str, ...]:
        """The extended resources a node offers (``nvidia.com/gpu``, ``google.com/tpu``, …)."""
        return tuple(name for name in self.allocatable if is_extended(name))

    def unit_allocatable(self) -> ResourceList:
        return self.allocatable.scaled(self.nodes_per_unit)

    def __hash__(self) -> int:
        return hash(self.name)
