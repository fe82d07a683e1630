"""May a pod of this demand run on that node, or on a new node of that pool? And if not, why not.

Answers are cached per (demand, node shape) for the length of one ``plan`` call: a cluster has thousands
of nodes but only a few dozen distinct label/taint combinations, and gangs repeat the same pod shapes.
"""

from __future__ import annotations

from collections.abc import Mapping

from gangscale.model.decision import PoolReason, ReasonCode
from gangscale.model.nodepool import NodePool
from gangscale.model.pod import PodDemand
from gangscale.model.policy import Policy
from gangscale.model.quantity import format_quantity
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint
from gangscale.model.snapshot import NodeShape, NodeState


def node_shape(node: NodeState) -> NodeShape:
    """What decides placement on a node besides its free capacity (its name aside)."""
    return node.shape


def placement_problem(demand: PodDemand, labels: Mapping[str, str], taints: tuple[Taint, ...],
                      policy: Policy, node_name: str | None = None) -> tuple[ReasonCode, str] | None:
    """``None`` if the labels and taints admit the pod, else a reason code and a sentence."""
    mismatch = demand.selects(labels, node_name)
    if mismatch is not None:
        code = ReasonCode.SELECTOR if mismatch.startswith("nodeSelector") else ReasonCode.AFFINITY
        return code, mismatch
    taint = demand.blocking_taint(taints, policy.extended_resource_toleration)
    if taint is not None:
        return ReasonCode.TAINT, f"does not tolerate taint {taint}"
    return None


def too_large(requests: ResourceList, allocatable: ResourceList) -> str | None:
    """Why one pod cannot fit even on an empty node with ``allocatable``, or ``None``."""
    short = requests.shortfall(allocatable)
    if not short:
        return None
    parts = [f"{name} {format_quantity(name, need)} > {format_quantity(name, have)}"
             for name, (need, have) in short.items()]
    return "one pod needs more than a whole node offers: " + ", ".join(parts)


class Compatibility:
    """Cached compatibility of pod demands with node shapes and pools."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._nodes: dict[tuple[object, int], bool] = {}
        self._pools: dict[tuple[object, ResourceList, str], PoolReason | None] = {}
        self._usable: dict[tuple[object, ResourceList, tuple[str, ...]], list[NodePool]] = {}

    def node_ok(self, demand: PodDemand, node: NodeState, shape: int) -> bool:
        """Whether ``node`` (of shape id ``shape``, see ``ClusterState.shape_of``) admits the pod."""
        if demand.names_nodes:
            return placement_problem(demand, node.labels, node.taints, self.policy, node.name) is None
        key = (demand.placement, shape)
        cached = self._nodes.get(key)
        if cached is None:
            cached = placement_problem(demand, node.labels, node.taints, self.policy, node.name) is None
            self._nodes[key] = cached
        return cached

    def pool_problem(self, demand: PodDemand, pool: NodePool) -> PoolReason | None:
        """Why a new node of ``pool`` could never take a pod of ``demand`` (``None``: it could)."""
        key = (demand.placement, demand.requests, pool.name)
        if key in self._pools:
            return self._pools[key]
        problem = placement_problem(demand, pool.labels, pool.taints, self.policy)
        reason = None if problem is None else PoolReason(pool.name, problem[0], problem[1])
        if reason is None and (large := too_large(demand.requests, pool.allocatable)) is not None:
            reason = PoolReason(pool.name, ReasonCode.TOO_LARGE, large)
        self._pools[key] = reason
        return reason

    def usable_pools(self, demand: PodDemand, pools: list[NodePool]) -> list[NodePool]:
        """The pools among ``pools`` whose new nodes could take a pod of ``demand``.

        Keyed by the pool names too: gangs of one plan are offered different lists (a check-capacity gang none,
        an atomic one every pool not backed off), and an answer for one list must never serve another."""
        key = (demand.placement, demand.requests, tuple(pool.name for pool in pools))
        usable = self._usable.get(key)
        if usable is None:
            usable = self._usable[key] = [pool for pool in pools if self.pool_problem(demand, pool) is None]
        return usable
