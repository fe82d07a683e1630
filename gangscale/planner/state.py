"""The planner's working copy of the cluster: what is still free as gangs take capacity one after another."""

from __future__ import annotations

from collections import defaultdict

from gangscale.model.nodepool import NodePool
from gangscale.model.resources import ResourceList
from gangscale.model.snapshot import NodeState, PoolState, Quota, Snapshot
from gangscale.planner.compat import NodeShape, node_shape


class ClusterState:
    """Free capacity per usable node, headroom per pool and quota left, all consumed by committed plans.

    Only Ready, schedulable nodes offer free capacity; a node's free capacity is its allocatable minus the
    requests of its pods and minus every booking on it. A gang's own bookings are handed back to it while
    it is planned (:meth:`lend_bookings`), so re-planning a booked gang finds its capacity again.
    """

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.pool_states: dict[str, PoolState] = {state.pool.name: state for state in snapshot.pools}
        self.headroom: dict[str, int] = {name: state.headroom for name, state in self.pool_states.items()}
        self.now = now
        self.quotas: tuple[Quota, ...] = snapshot.quotas
        self.quota_left: list[int] = [max(0, quota.remaining) for quota in snapshot.quotas]
        self.nodes: list[NodeState] = [node for node in snapshot.nodes if node.usable]
        self.shapes: list[NodeShape] = [node_shape(node) for node in self.nodes]
        self.free: list[dict[str, int]] = [dict(node.free) for node in self.nodes]
        self.index: dict[str, int] = {node.name: i for i, node in enumerate(self.nodes)}
        #: zone -> node shape -> usable nodes of that shape (compatibility is judged once per shape).
        self.shapes_by_zone: dict[str, dict[NodeShape, list[int]]] = defaultdict(lambda: defaultdict(list))
        for i, node in enumerate(self.nodes):
            self.shapes_by_zone[node.zone][self.shapes[i]].append(i)
        self.bookings: dict[str, list[tuple[int, ResourceList]]] = defaultdict(list)
        for booking in snapshot.bookings:
            where = self.index.get(booking.node)
            if where is None:
                continue  # a booking on a vanished or unready node holds nothing the planner could give away
            self.bookings[booking.owner].append((where, booking.requests))
            self._take(where, booking.requests)

    def _take(self, i: int, amounts: ResourceList | dict[str, int]) -> None:
        free = self.free[i]
        for name, value in amounts.items():
            free[name] = max(0, free.get(name, 0) - value)

    def _give(self, i: int, amounts: ResourceList) -> None:
        free, allocatable = self.free[i], self.nodes[i].allocatable
        for name, value in amounts.items():
            free[name] = min(allocatable.get(name, 0), free.get(name, 0) + value)

    def lend_bookings(self, owner: str) -> None:
        for i, requests in self.bookings.get(owner, ()):
            self._give(i, requests)

    def reclaim_bookings(self, owner: str) -> None:
        """Undo :meth:`lend_bookings` for a gang that got no plan: it keeps what it had booked."""
        for i, requests in self.bookings.get(owner, ()):
            self._take(i, requests)

    def pool(self, name: str) -> NodePool:
        return self.pool_states[name].pool

    def available_pools(self) -> list[PoolState]:
        """Pools not backed off, in name order."""
        return sorted((state for state in self.pool_states.values() if not state.backed_off(self.now)),
                      key=lambda state: state.pool.name)

    def quota_units(self, pool: NodePool, headroom: dict[str, int], quota_left: list[int]) -> int:
        """Units of ``pool`` that ``headroom`` and every applicable quota still allow."""
        allowed = headroom.get(pool.name, 0)
        for quota, left in zip(self.quotas, quota_left, strict=True):
            if quota.applies_to(pool.name):
                per_unit: int = quota.per_unit(pool)
                if per_unit:
                    allowed = min(allowed, left // per_unit)
        return allowed

    def consume(self, taken: dict[int, dict[str, int]], units: dict[str, int]) -> None:
        """Commit a plan: its pods' requests on existing nodes, its new units against headroom and quotas."""
        for i, amounts in taken.items():
            self._take(i, amounts)
        for name, count in units.items():
            pool = self.pool(name)
            self.headroom[name] = max(0, self.headroom[name] - count)
            for q, quota in enumerate(self.quotas):
                if quota.applies_to(name):
                    self.quota_left[q] = max(0, self.quota_left[q] - quota.per_unit(pool) * count)
