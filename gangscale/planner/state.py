"""The planner's working copy of the cluster: what is still free as gangs take capacity one after another."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Iterator, Mapping

from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.model.resources import ResourceList
from gangscale.model.snapshot import NodeState, PoolState, Quota, Snapshot
from gangscale.model.tiers import tier_of_labels

#: An entry of a free-capacity index: (free amount, node name, node index); sorted, it is "tightest first".
IndexEntry = tuple[int, str, int]


class ClusterState:
    """Free capacity per usable node, headroom per pool and quota left, all consumed by committed plans.

    Only Ready, schedulable nodes offer free capacity; a node's free capacity is its allocatable minus the
    requests of its pods and minus every booking on it. A gang's own bookings are handed back to it while
    it is planned (:meth:`lend_bookings`), so re-planning a booked gang finds its capacity again.

    Nodes are grouped by zone and *shape* (labels and taints): compatibility is judged once per shape. Per
    (zone, shape, resource) a sorted index of free amounts is built on first use and kept current as
    capacity is taken, so finding "nodes with at least 4 free GPUs, tightest first" skips the full ones
    without looking at them.
    """

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.pool_states: dict[str, PoolState] = {state.pool.name: state for state in snapshot.pools}
        self.headroom: dict[str, int] = {name: state.headroom for name, state in self.pool_states.items()}
        self.now = now
        self.quotas: tuple[Quota, ...] = snapshot.quotas
        self.quota_left: list[int] = [max(0, quota.remaining) for quota in snapshot.quotas]
        #: pool -> [(quota index, quota consumed per unit)], for the quotas that apply to it.
        self.quota_cost: dict[str, list[tuple[int, int]]] = {}
        for name, state in self.pool_states.items():
            costs = [(q, quota.per_unit(state.pool)) for q, quota in enumerate(self.quotas) if quota.applies_to(name)]
            if costs := [(q, per_unit) for q, per_unit in costs if per_unit]:
                self.quota_cost[name] = costs
        self.nodes: list[NodeState] = [node for node in snapshot.nodes if node.usable]
        #: Every node, usable or not: kube-scheduler counts unready and cordoned nodes as topology spread domains.
        self.all_nodes: tuple[NodeState, ...] = snapshot.nodes
        self.free: list[dict[str, int]] = [node.free.to_dict() for node in self.nodes]
        self.index: dict[str, int] = {node.name: i for i, node in enumerate(self.nodes)}
        # By identity: equal shapes are one object (NodeState shares them), and hashing one hashes all its taints.
        shape_ids: dict[int, int] = {}
        self.shape_of: list[int] = [shape_ids.setdefault(id(node.shape), len(shape_ids)) for node in self.nodes]
        #: zone -> shape id -> usable nodes of that zone and shape.
        self.zone_shapes: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        for i, node in enumerate(self.nodes):
            self.zone_shapes[node.zone][self.shape_of[i]].append(i)
        self._sorted: dict[tuple[str, int, str], list[IndexEntry]] = {}
        self._shape_tiers: dict[int, str] = {}
        self._tiers_present: set[str] | None = None
        self._indexed: dict[int, list[str]] = defaultdict(list)  # node -> resources it is indexed by
        self.bookings: dict[str, list[tuple[int, ResourceList]]] = defaultdict(list)
        for booking in snapshot.bookings:
            where = self.index.get(booking.node)
            if where is None:
                continue  # a booking on a vanished or unready node holds nothing the planner could give away
            self.bookings[booking.owner].append((where, booking.requests))
            self._take(where, booking.requests)

    # -- free capacity ----------------------------------------------------------------------------------

    def sorted_by(self, zone: str, shape: int, resource: str) -> list[IndexEntry]:
        """The nodes of (zone, shape), ascending by free ``resource`` then name. Do not mutate."""
        key = (zone, shape, resource)
        entries = self._sorted.get(key)
        if entries is None:
            members = self.zone_shapes[zone][shape]
            entries = sorted((self.free[i].get(resource, 0), self.nodes[i].name, i) for i in members)
            self._sorted[key] = entries
            for i in members:
                self._indexed[i].append(resource)
        return entries

    def _change(self, i: int, amounts: Mapping[str, int], sign: int) -> None:
        free, allocatable, node = self.free[i], self.nodes[i].allocatable, self.nodes[i]
        before = {resource: free.get(resource, 0) for resource in self._indexed.get(i, ())}
        for name, value in amounts.items():
            if sign < 0:
                free[name] = max(0, free.get(name, 0) - value)
            else:
                free[name] = min(allocatable.get(name, 0), free.get(name, 0) + value)
        for resource, old in before.items():
            new = free.get(resource, 0)
            if new != old:
                entries = self._sorted[(node.zone, self.shape_of[i], resource)]
                del entries[bisect_left(entries, (old, node.name, i))]
                insort(entries, (new, node.name, i))

    def _take(self, i: int, amounts: Mapping[str, int]) -> None:
        self._change(i, amounts, -1)

    def lend_bookings(self, owner: str) -> None:
        for i, requests in self.bookings.get(owner, ()):
            self._change(i, requests, +1)

    def reclaim_bookings(self, owner: str) -> None:
        """Undo :meth:`lend_bookings` for a gang that got no plan: it keeps what it had booked."""
        for i, requests in self.bookings.get(owner, ()):
            self._take(i, requests)

    def zones_of_nodes(self) -> Iterator[str]:
        return iter(self.zone_shapes)

    # -- tiers ------------------------------------------------------------------------------------------

    def node_tier(self, node: NodeState) -> str:
        """A node's capacity tier: its pool's, for a node of a pool gangscale knows; else what its labels say."""
        pool = self.pool_states.get(node.labels.get(POOL_LABEL, ""))
        return pool.pool.capacity_type if pool is not None else tier_of_labels(node.labels)

    def shape_tier(self, shape: int, member: int) -> str:
        """The tier of every node of ``shape`` (a shape is labels and taints, so its nodes share one tier)."""
        tier = self._shape_tiers.get(shape)
        if tier is None:
            tier = self._shape_tiers[shape] = self.node_tier(self.nodes[member])
        return tier

    def tiers_present(self) -> set[str]:
        """The tiers of every pool and of every usable node: a tier with neither cannot hold anything."""
        if self._tiers_present is None:
            present = {state.pool.capacity_type for state in self.pool_states.values()}
            for shapes in self.zone_shapes.values():
                present.update(self.shape_tier(shape, members[0]) for shape, members in shapes.items())
            self._tiers_present = present
        return self._tiers_present

    # -- pools ------------------------------------------------------------------------------------------

    def pool_growing(self, name: str) -> bool:
        """Whether nodes of the pool not in the snapshot are on their way: units in flight, or units planned for
        gangs ahead in this plan."""
        state = self.pool_states[name]
        return state.inflight_units > 0 or self.headroom[name] < state.headroom

    def pool(self, name: str) -> NodePool:
        return self.pool_states[name].pool

    def available_pools(self) -> list[PoolState]:
        """Pools not backed off, in name order."""
        return sorted((state for state in self.pool_states.values() if not state.backed_off(self.now)),
                      key=lambda state: state.pool.name)

    def consume(self, taken: dict[int, dict[str, int]], units: dict[str, int]) -> None:
        """Commit a plan: its pods' requests on existing nodes, its new units against headroom and quotas."""
        for i, amounts in taken.items():
            self._take(i, amounts)
        for name, count in units.items():
            self.headroom[name] = max(0, self.headroom[name] - count)
            for q, per_unit in self.quota_cost.get(name, ()):
                self.quota_left[q] = max(0, self.quota_left[q] - per_unit * count)
