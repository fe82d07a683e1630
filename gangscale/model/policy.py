"""How the planner chooses between feasible plans.

A plan's cost is compared criterion by criterion, in the policy's order:

- ``waste``: first the accelerators (any extended resource: GPUs, TPU chips) left unused on the new
  nodes, then the unused CPU on them. Padding hosts of a multi-host slice count as waste.
- ``price``: the sum of ``pricePerUnitHour`` over the new units (a pool without a price counts as 0).
- ``nodes``: the number of new nodes.

Ties after every criterion go to the plan whose steps sort first by pool name, so planning is
deterministic. The default, least waste then price then fewer nodes, keeps the scarce resource for the
next gang; ``[nodes]`` minimises node count; ``[price, nodes]`` is the cheapest plan.

These criteria compare plans within the tiers a gang may use at once (:mod:`gangscale.model.tiers`): a gang is
placed in the first of its tiers that can hold it, and only a policy that lets tiers mix compares across them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangscale.model.tiers import TierPolicies

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
    #: The capacity tiers gangs may use (the pool file's ``capacityTiers``); a gang's own ``tiers`` overrides them.
    tiers: TierPolicies = field(default_factory=TierPolicies)

    def __post_init__(self) -> None:
        unknown = [name for name in self.criteria if name not in CRITERIA]
        if unknown or not self.criteria:
            raise ValueError(f"policy criteria must be a non-empty list drawn from {', '.join(CRITERIA)}; "
                             f"got {list(self.criteria)}")
        if len(set(self.criteria)) != len(self.criteria):
            raise ValueError(f"policy criteria must not repeat; got {list(self.criteria)}")
