"""Which units of the managed pools to remove (DESIGN decision 9), as a pure function of the cluster.

A unit (a node, or every host of a multi-host slice) is unneeded when each of its nodes runs nothing but
DaemonSet or static pods, holds no booking, and belongs to no scale-up still in progress. It is removed once
it has been unneeded for ``unneeded_time`` without a break, oldest first, never below the pool's
``minUnits``. Only units the provider created (nodes labelled ``gangscale.io/unit``) are removed: gangscale
never deletes nodes it did not make.

A *broken* unit (fewer nodes than the pool's hosts per unit, and no scale-up in progress bringing the rest:
a removal cut short by a crash, a host lost) is removed as soon as it is empty, without waiting: a slice
missing a host can run no slice workload, and it is kept out of planning (:func:`broken_units`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gangscale.model.nodepool import NodePool


@dataclass(frozen=True, slots=True)
class Removal:
    pool: str
    unit: str
    nodes: tuple[str, ...]
    idle_since: float


def plan_scale_down(pools: Mapping[str, NodePool], units: Mapping[str, Mapping[str, list[str]]],
                    unit_counts: Mapping[str, int], *, empty: Callable[[str], bool], protected: frozenset[str],
                    labelled: Callable[[str], bool], idle_since: dict[str, float], now: float,
                    unneeded_time: float) -> list[Removal]:
    """Units to remove now. Updates ``idle_since`` (unit id -> first pass it was seen unneeded) in place."""
    seen: set[str] = set()
    removals: list[Removal] = []
    for pool_name, pool_units in sorted(units.items()):
        pool = pools[pool_name]
        ripe: list[Removal] = []
        for unit, nodes in sorted(pool_units.items()):
            if not labelled(nodes[0]) or any(node in protected or not empty(node) for node in nodes):
                continue
            seen.add(unit)
            since = idle_since.setdefault(unit, now)
            if now - since >= unneeded_time or len(nodes) < pool.nodes_per_unit:
                ripe.append(Removal(pool_name, unit, tuple(nodes), since))
        spare = unit_counts.get(pool_name, 0) - pool.min_units
        # Broken units go first: they count as units of the pool but serve nothing.
        ripe.sort(key=lambda r: (len(r.nodes) >= pool.nodes_per_unit, r.idle_since, r.unit))
        removals.extend(ripe[:max(0, spare)])
    for unit in set(idle_since) - seen:
        del idle_since[unit]
    return removals


def broken_units(pools: Mapping[str, NodePool], units: Mapping[str, Mapping[str, list[str]]],
                 labelled: Callable[[str], bool], in_flight: Callable[[str], bool]) -> dict[str, tuple[str, ...]]:
    """Units the provider made that miss hosts and that no scale-up in progress is completing: unit -> nodes."""
    out = {}
    for pool_name, pool_units in units.items():
        for unit, nodes in pool_units.items():
            if len(nodes) < pools[pool_name].nodes_per_unit and labelled(nodes[0]) and not any(map(in_flight, nodes)):
                out[unit] = tuple(nodes)
    return out


def next_due(idle_since: Mapping[str, float], unneeded_time: float) -> float | None:
    return min((since + unneeded_time for since in idle_since.values()), default=None)
