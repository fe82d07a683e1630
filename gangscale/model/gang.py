"""Gangs: sets of pods that are useless unless every one of them runs."""

from __future__ import annotations

from dataclasses import dataclass

from gangscale.model.pod import PodDemand
from gangscale.model.tiers import TierPolicy


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` pods alike (a ProvisioningRequest podSet, a Ray worker group, a JobSet replicated job)."""

    name: str
    count: int
    demand: PodDemand

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"pod set {self.name!r}: count must not be negative, got {self.count}")


@dataclass(frozen=True, slots=True)
class Gang:
    """All-or-nothing demand.

    ``key`` identifies it (``namespace/name`` of the ProvisioningRequest or RayCluster); ``priority`` and
    ``created`` (seconds since the epoch) order it; ``spread_zones`` lets its nodes span zones, which is
    otherwise forbidden because data-parallel jobs need one network fabric. ``may_scale=False`` (the
    check-capacity classes) confines the gang to free capacity on Ready nodes: no pool is ever grown for it.
    ``tiers`` is the capacity tiers it may use, in order (None: the policy's default; see
    :mod:`gangscale.model.tiers`).
    """

    key: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    created: float = 0.0
    spread_zones: bool = False
    may_scale: bool = True
    tiers: TierPolicy | None = None

    @property
    def pods(self) -> int:
        return sum(pod_set.count for pod_set in self.pod_sets)

    @property
    def order(self) -> tuple[int, float, str]:
        """Planning order: higher priority first, then older, then by key (so the order is total)."""
        return (-self.priority, self.created, self.key)
