"""How the planner chooses between feasible plans.

A plan's cost is compared criterion by criterion, in the policy's order:

- ``waste``: first the accelerators (any extended resource: GPUs, TPU chips) left unused on the new
  nodes, then the unused CPU on them. Padding hosts of a multi-host slice count as waste.
- ``price``: the sum of ``pricePerUnitHour`` over the new units (a pool without a price counts as 0).
- ``nodes``: the number of new nodes.

Ties after every criterion go to the plan whose steps sort first by pool name, so planning is
deterministic. The default, least waste then price then fewer nodes, keeps the scarce resource for the
next gang; ``[nodes]`` minimises node count; ``[price, nodes]`` is the cheapest plan.
"""

from __future__ import annotations

from dataclasses import dataclass

WASTE = "waste"
PRICE = "price"
NODES = "nodes"
CRITERIA = (WASTE, PRICE, NODES)
DEFAULT_CRITERIA = (WASTE, PRICE, NODES)


@dataclass(frozen=True, slots=True)
class Policy:
    criteria: tuple[str, ...] = DEFAULT_CRITERIA
    #: Pods tolerate taints keyed by an extended resource they request, as the ``ExtendedResourceToleration``
    #: admission plugin would arrange when the real pods are created.
    extended_resource_toleration: bool = True

    def __post_init__(self) -> None:
        unknown = [name for name in self.criteria if name not in CRITERIA]
        if unknown or not self.criteria:
            raise ValueError(f"policy criteria must be a non-empty list drawn from {', '.join(CRITERIA)}; "
                             f"got {list(self.criteria)}")
        if len(set(self.criteria)) != len(self.criteria):
            raise ValueError(f"policy criteria must not repeat; got {list(self.criteria)}")
