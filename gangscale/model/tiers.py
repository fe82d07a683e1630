"""Capacity tiers: how surely, and at what price, a pool's nodes can be had — and which tiers a gang may use.

The four capacity types (a pool has one; :attr:`~gangscale.model.nodepool.NodePool.capacity_type`):

- ``reservation``: capacity reserved ahead (a GCE specific reservation, an AWS capacity reservation or Capacity
  Block), paid for whether used or not; bounded by the reservation's size.
- ``on-demand``: the list price; obtainable unless the zone is out of stock or the quota is spent.
- ``spot``: 60 to 91 % cheaper on GCE (Google's Spot VM pricing page), reclaimable by the cloud at any time with a
  30-second notice (GKE's Spot VM page: "Spot VMs terminate 30 seconds after receiving a termination notice").
- ``flex-start``: GKE's Dynamic Workload Scheduler capacity (flex-start node pools, queued provisioning):
  obtained when available, for a limited run time (at most 7 days).

A gang is placed whole in one tier (:class:`TierPolicy`): the planner tries the gang's tiers in order and takes the
first that can hold all of it now, so a 16-node job never runs 10 nodes on spot and 6 on-demand, where a reclaim of
one spot node would stall all sixteen. The tier binds the pod sets that ask for accelerators; in a gang that has
such pod sets, those that ask for none (a Ray head, a launcher) may use any tier the policy has open, so a CPU head
on on-demand beside spot workers is one gang, as users run it. A gang without accelerators is kept in one tier.
A policy may allow mixing (``mix``); then the gang's open tiers are one
search, ranked by the planner's cost as before. ``wait`` keeps later tiers closed for a while: ``spot`` with a wait
of 600 s opens on-demand only 600 s after the gang was created ("spot, but on-demand after 10 minutes").

Nodes that no pool of gangscale's describes get their tier from the labels the clouds and Karpenter put on them
(:func:`tier_of_labels`); a node with none of them is counted on-demand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

RESERVATION = "reservation"
ON_DEMAND = "on-demand"
SPOT = "spot"
FLEX_START = "flex-start"
CAPACITY_TYPES = (RESERVATION, ON_DEMAND, SPOT, FLEX_START)
#: Reserved capacity first (paid for already), then what can be had surely, then what may be taken back or may take
#: long: spot and flex-start are opted into by naming them first in a class's order.
DEFAULT_ORDER = (RESERVATION, ON_DEMAND, SPOT, FLEX_START)

#: Node labels that tell a node's capacity type, with the value of each that means each tier. Sources: GKE labels
#: Spot VM nodes ``cloud.google.com/gke-spot=true`` (GKE's "Use Spot VMs" page; preemptible VMs
#: ``cloud.google.com/gke-preemptible=true``) and flex-start nodes ``cloud.google.com/gke-flex-start=true``
#: (GKE's flex-start page, its documented nodeSelector); Karpenter labels every node ``karpenter.sh/capacity-type``
#: ``spot`` / ``on-demand`` / ``reserved``; EKS managed node groups label ``eks.amazonaws.com/capacityType``
#: ``ON_DEMAND`` / ``SPOT`` / ``CAPACITY_BLOCK``.
TIER_LABELS: tuple[tuple[str, Mapping[str, str]], ...] = (
    ("cloud.google.com/gke-spot", {"true": SPOT}),
    ("cloud.google.com/gke-preemptible", {"true": SPOT}),
    ("cloud.google.com/gke-flex-start", {"true": FLEX_START}),
    ("karpenter.sh/capacity-type", {"spot": SPOT, "on-demand": ON_DEMAND, "reserved": RESERVATION}),
    ("eks.amazonaws.com/capacityType", {"SPOT": SPOT, "ON_DEMAND": ON_DEMAND, "CAPACITY_BLOCK": RESERVATION}),
)


def tier_of_labels(labels: Mapping[str, str]) -> str:
    """The capacity type a node's labels say (on-demand when none says anything)."""
    for key, values in TIER_LABELS:
        tier = values.get(labels.get(key, ""))
        if tier is not None:
            return tier
    return ON_DEMAND


class TierError(ValueError):
    """A tier policy gangscale cannot use (unknown tier, repeated tier, a wait that is not a number of seconds)."""


@dataclass(frozen=True, slots=True)
class Opening:
    """Which of a policy's tiers are open at one instant, and the tier waited for (with until when) if any."""

    open: tuple[str, ...]
    waiting_for: str | None = None
    until: float | None = None


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """The tiers a gang may use, in order; whether one gang may span tiers; how long to wait for each tier (seconds
    after the gang's creation, cumulative) before the next one opens."""

    order: tuple[str, ...] = DEFAULT_ORDER
    mix: bool = False
    wait: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_order(self.order)
        unknown = sorted(set(self.wait) - set(self.order))
        if unknown:
            raise TierError(f"waits given for tiers not in the order ({', '.join(unknown)}); the order is "
                            f"{', '.join(self.order)}")
        for tier, seconds in self.wait.items():
            if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
                raise TierError(f"the wait for {tier} must be a number of seconds, 0 or more; got {seconds!r}")
        object.__setattr__(self, "wait", MappingProxyType(dict(self.wait)))

    def opening(self, created: float, now: float) -> Opening:
        """The tiers open ``now`` for a gang created at ``created``: each tier in order, and the next only once the
        waits of the tiers before it have passed."""
        opened: list[str] = []
        until = created
        for tier in self.order:
            opened.append(tier)
            until += self.wait.get(tier, 0.0)
            if now < until and tier != self.order[-1]:
                return Opening(tuple(opened), tier, until)
        return Opening(tuple(opened))


def check_order(order: Iterable[str]) -> tuple[str, ...]:
    order = tuple(order)
    if not order:
        raise TierError(f"names no tier; tiers are {', '.join(CAPACITY_TYPES)}")
    unknown = [tier for tier in order if tier not in CAPACITY_TYPES]
    if unknown:
        raise TierError(f"unknown tier {unknown[0]!r}; tiers are {', '.join(CAPACITY_TYPES)}")
    if len(set(order)) != len(order):
        raise TierError(f"repeats a tier: {', '.join(order)}")
    return order


def parse_tiers(text: str) -> tuple[tuple[str, ...], dict[str, float]]:
    """A ProvisioningRequest parameter's tiers: ``spot:600,on-demand`` (tier, and optionally ``:`` and the seconds to
    wait for it) into the order and the waits; raises :class:`TierError`."""
    order: list[str] = []
    wait: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        tier, sep, seconds = part.partition(":")
        tier = tier.strip().lower()
        order.append(tier)
        if sep:
            try:
                wait[tier] = float(seconds.strip().removesuffix("s"))
            except ValueError:
                raise TierError(f"the wait for {tier} must be a number of seconds; got {seconds.strip()!r}") from None
    check_order(order)
    return tuple(order), wait


@dataclass(frozen=True, slots=True)
class TierPolicies:
    """The pool file's ``capacityTiers``: the default policy, and one per ProvisioningRequest class."""

    default: TierPolicy = field(default_factory=TierPolicy)
    classes: Mapping[str, TierPolicy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", MappingProxyType(dict(self.classes)))

    def for_class(self, class_name: str) -> TierPolicy:
        return self.classes.get(class_name, self.default)
