"""The cluster as the planner sees it at one instant: pools, nodes, bookings, quotas."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gangscale.model.interning import Interned
from gangscale.model.nodepool import POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.model.pod import HOSTNAME_LABEL
from gangscale.model.resources import EMPTY, ResourceList
from gangscale.model.scheduling import Taint

#: Pseudo-resource a :class:`Quota` may count: the number of nodes.
NODES_QUOTA = "nodes"


#: What decides placement on a node besides its free capacity and its name: its labels (the hostname label aside)
#: and taints. Nodes of one shape admit the same pods.
NodeShape = tuple[frozenset[tuple[str, str]], tuple[Taint, ...]]


#: Equal shapes are one object: a cluster's thousands of nodes have a few dozen, and a plan tells them apart by
#: identity (past the bound, a node keeps a shape of its own: planned the same, only less cheaply).
_shared_shape: Interned[NodeShape] = Interned()


@dataclass(frozen=True, slots=True)
class NodeState:
    """A registered node. Only Ready, schedulable nodes offer free capacity.

    ``requested`` is the sum of the requests of the pods bound to it (terminated pods excluded). ``free`` and
    ``shape`` are worked out once, when the node state is made (a pod event makes a new one), not by every plan:
    a plan over thousands of nodes read them for each.
    """

    name: str
    allocatable: ResourceList
    requested: ResourceList = EMPTY
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    free: ResourceList = field(init=False, repr=False, compare=False)
    shape: NodeShape = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        labels = self.labels
        if not isinstance(labels, MappingProxyType):  # another node state's labels are read-only already
            labels = MappingProxyType(dict(labels))
            object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "free", self.allocatable - self.requested)
        shape = (frozenset((k, v) for k, v in labels.items() if k != HOSTNAME_LABEL), self.taints)
        object.__setattr__(self, "shape", _shared_shape(shape))

    @property
    def zone(self) -> str:
        return self.labels.get(ZONE_LABEL, "")

    @property
    def pool(self) -> str | None:
        return self.labels.get(POOL_LABEL)

    @property
    def usable(self) -> bool:
        return self.ready and not self.unschedulable


@dataclass(frozen=True, slots=True)
class PoolState:
    """A pool's units: ``units`` have registered nodes, ``inflight_units`` were asked for and have not.

    ``backoff_until`` (seconds since the epoch) keeps the planner off a pool after a stockout;
    ``backoff_reason`` says why, for the human reading the plan.
    """

    pool: NodePool
    units: int = 0
    inflight_units: int = 0
    backoff_until: float | None = None
    backoff_reason: str = ""
    #: At most this many more units can be obtained now (learnt from a stockout or quota error that said the
    #: cloud could not give more); None: no such limit is known. ``ceiling_until`` and ``ceiling_reason`` say
    #: until when and why, for the messages.
    ceiling: int | None = None
    ceiling_until: float | None = None
    ceiling_reason: str = ""

    @property
    def max_headroom(self) -> int:
        """Units that may still be added under ``maxUnits`` (and the reservation's size, for a reservation)."""
        return max(0, self.pool.unit_limit - self.units - self.inflight_units)

    @property
    def headroom(self) -> int:
        """Units that may still be added: under ``maxUnits`` and under the ceiling, if any."""
        return self.max_headroom if self.ceiling is None else min(self.max_headroom, self.ceiling)

    def backed_off(self, now: float) -> bool:
        return self.backoff_until is not None and now < self.backoff_until


@dataclass(frozen=True, slots=True)
class Booking:
    """Capacity held on a node for a gang (a Provisioned ProvisioningRequest whose pods have not all arrived)."""

    owner: str
    node: str
    requests: ResourceList


@dataclass(frozen=True, slots=True)
class Quota:
    """A cloud quota: ``remaining`` of ``resource`` (or of :data:`NODES_QUOTA`) across ``pools`` (None: all)."""

    name: str
    resource: str
    remaining: int
    pools: frozenset[str] | None = None

    def applies_to(self, pool: str) -> bool:
        return self.pools is None or pool in self.pools

    def per_unit(self, pool: NodePool) -> int:
        """How much of the quota one unit of ``pool`` consumes."""
        per_node = 1 if self.resource == NODES_QUOTA else pool.allocatable.get(self.resource)
        return per_node * pool.nodes_per_unit


@dataclass(frozen=True, slots=True)
class Snapshot:
    pools: tuple[PoolState, ...] = ()
    nodes: tuple[NodeState, ...] = ()
    bookings: tuple[Booking, ...] = ()
    quotas: tuple[Quota, ...] = ()
