"""Which units of the managed pools to remove (DESIGN decision 9), kept current one changed unit at a time.

A unit (a node, or every host of a multi-host slice) is unneeded when each of its nodes runs nothing but
DaemonSet or static pods, holds no booking, and belongs to no scale-up still in progress. It is removed once
it has been unneeded for ``unneeded_time`` without a break, oldest first, never below the pool's
``minUnits``. Only units the provider created (nodes labelled ``gangscale.io/unit``) are removed: gangscale
never deletes nodes it did not make.

A *broken* unit (fewer nodes than the pool's hosts per unit, and no scale-up in progress bringing the rest:
a removal cut short by a crash, a host lost) is removed as soon as it is empty, without waiting: a slice
missing a host can run no slice workload, and it is kept out of planning (:func:`broken_units`).

:class:`IdleUnits` holds which units are unneeded and since when. The loop marks the units that a change may
have touched (a node or pod of the unit, a booking or scale-up on its nodes, a release) and only those are
looked at again, so the cost of a pass does not grow with the number of nodes. :func:`plan_scale_down` is the
same decision over a whole cluster at once, for tests and one-off use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gangscale.model.nodepool import NodePool


@dataclass(frozen=True, slots=True)
class Removal:
    pool: str
    unit: str
    nodes: tuple[str, ...]
    idle_since: float


@dataclass(frozen=True, slots=True)
class Idle:
    """An unneeded unit: its pool and nodes, since when, and whether it misses hosts."""

    pool: str
    nodes: tuple[str, ...]
    since: float
    broken: bool


#: What the loop says of one unit now: (pool, nodes, missing hosts) when it is unneeded, else None.
Look = Callable[[str], tuple[str, tuple[str, ...], bool] | None]


def unneeded(nodes: Iterable[str], *, empty: Callable[[str], bool], protected: Callable[[str], bool]) -> bool:
    return all(empty(node) and not protected(node) for node in nodes)


class IdleUnits:
    """Unneeded units and since when (see the module docstring)."""

    def __init__(self) -> None:
        self.units: dict[str, Idle] = {}
        self._dirty: set[str] = set()
        self._due: float | None = None
        self._due_stale = False

    def mark(self, units: Iterable[str]) -> None:
        """These units may have changed: :meth:`update` looks at them again."""
        self._dirty.update(units)

    @property
    def since(self) -> dict[str, float]:
        return {unit: idle.since for unit, idle in self.units.items()}

    def update(self, now: float, look: Look) -> None:
        """Look at every marked unit again: a unit newly unneeded is idle from ``now``; one needed again (or gone)
        is forgotten, so its idle time starts over if it becomes unneeded later."""
        dirty, self._dirty = self._dirty, set()
        for unit in dirty:
            found = look(unit)
            known = self.units.get(unit)
            if found is None:
                if known is not None:
                    del self.units[unit]
                    self._due_stale = True
                continue
            pool, nodes, broken = found
            since = known.since if known is not None else now
            if known is None or known.nodes != nodes or known.broken != broken:
                self.units[unit] = Idle(pool, nodes, since, broken)
                self._due_stale = True

    def restore(self, unit: str, idle: Idle) -> None:
        """Take up what was known of a unit (a unit idle since before; it is looked at again)."""
        self.units[unit] = idle
        self._dirty.add(unit)
        self._due_stale = True

    def forget(self, unit: str) -> None:
        if self.units.pop(unit, None) is not None:
            self._due_stale = True

    def due(self, unneeded_time: float) -> float | None:
        """The earliest time a unit becomes removable (a broken unit: the moment it was found)."""
        if self._due_stale:
            self._due = min((idle.since if idle.broken else idle.since + unneeded_time
                             for idle in self.units.values()), default=None)
            self._due_stale = False
        return self._due

    def ripe(self, pools: Mapping[str, NodePool], unit_count: Callable[[str], int], now: float,
             unneeded_time: float) -> list[Removal]:
        """Units to remove now: per pool, broken ones first, then the longest idle, down to ``minUnits``."""
        due = self.due(unneeded_time)
        if due is None or due > now:
            return []
        by_pool: dict[str, list[Removal]] = {}
        for unit, idle in self.units.items():
            if idle.broken or now - idle.since >= unneeded_time:
                by_pool.setdefault(idle.pool, []).append(Removal(idle.pool, unit, idle.nodes, idle.since))
        removals: list[Removal] = []
        for pool_name, ripe in sorted(by_pool.items()):
            pool = pools[pool_name]
            spare = unit_count(pool_name) - pool.min_units
            # Broken units go first: they count as units of the pool but serve nothing.
            ripe.sort(key=lambda r: (len(r.nodes) >= pool.nodes_per_unit, r.idle_since, r.unit))
            removals.extend(ripe[:max(0, spare)])
        return removals


def plan_scale_down(pools: Mapping[str, NodePool], units: Mapping[str, Mapping[str, list[str]]],
                    unit_counts: Mapping[str, int], *, empty: Callable[[str], bool], protected: frozenset[str],
                    labelled: Callable[[str], bool], idle_since: dict[str, float], now: float,
                    unneeded_time: float) -> list[Removal]:
    """Units to remove now, over the whole cluster at once. Updates ``idle_since`` (unit id -> first time it was
    seen unneeded) in place."""
    idle = IdleUnits()
    for pool_name, pool_units in units.items():
        for unit, nodes in pool_units.items():
            if unit in idle_since:
                idle.restore(unit, Idle(pool_name, tuple(nodes), idle_since[unit],
                                        len(nodes) < pools[pool_name].nodes_per_unit))
    idle.mark(unit for pool_units in units.values() for unit in pool_units)
    idle.mark(idle_since)
    where = {unit: (pool_name, nodes) for pool_name, pool_units in units.items() for unit, nodes in pool_units.items()}

    def look(unit: str) -> tuple[str, tuple[str, ...], bool] | None:
        if unit not in where:
            return None
        pool_name, nodes = where[unit]
        if not labelled(nodes[0]) or not unneeded(nodes, empty=empty, protected=protected.__contains__):
            return None
        return pool_name, tuple(nodes), len(nodes) < pools[pool_name].nodes_per_unit

    idle.update(now, look)
    idle_since.clear()
    idle_since.update(idle.since)
    return idle.ripe(pools, lambda name: unit_counts.get(name, 0), now, unneeded_time)


def broken_units(pools: Mapping[str, NodePool], units: Mapping[str, Mapping[str, list[str]]],
                 labelled: Callable[[str], bool], in_flight: Callable[[str], bool]) -> dict[str, tuple[str, ...]]:
    """Units the provider made that miss hosts and that no scale-up in progress is completing: unit -> nodes."""
    out = {}
    for pool_name, pool_units in units.items():
        for unit, nodes in pool_units.items():
            if len(nodes) < pools[pool_name].nodes_per_unit and labelled(nodes[0]) and not any(map(in_flight, nodes)):
                out[unit] = tuple(nodes)
    return out
