"""Scale-down carried out: the idle units, the units being removed, and the latest removals.

:mod:`scaledown` decides, without I/O, which units are unneeded and which are ripe for removal; this module is
the loop's side of it. Each pass, :meth:`ScaleDowns.scale_down` looks again at the units a change touched (the
loop marks them on :attr:`ScaleDowns.idle`), starts the removal of those unneeded for long enough as background
tasks of the loop, and keeps the latest removals for ``/debug/plans``. It is apart from the loop because it keeps
state of its own (which units are idle, which are being removed) that the rest of a pass only reads.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from gangscale.controller.actuator import Actuator
from gangscale.controller.indices import RequestIndex
from gangscale.controller.scaledown import IdleUnits, unneeded
from gangscale.controller.settings import Settings
from gangscale.controller.snapshot import unit_count
from gangscale.controller.tasks import Spawn
from gangscale.controller.view import ClusterView
from gangscale.model.nodepool import NodePool
from gangscale.observe.metrics import Metrics
from gangscale.timefmt import rfc3339

log = logging.getLogger(__name__)

#: How many removals ``/debug/plans`` shows.
HISTORY = 50


class ScaleDowns:
    """The units of the managed pools that scale-down watches, and their removal (see the module docstring).

    ``leaving`` (nodes of scale-ups being rolled back) and ``obtaining`` (claims of the tokens whose provider calls
    run) are the loop's own sets, read here; ``spawn`` runs a removal as a guarded task of the loop."""

    def __init__(self, view: ClusterView, pools: Mapping[str, NodePool], index: RequestIndex, actuator: Actuator, *,
                 settings: Settings, metrics: Metrics, leaving: set[str], obtaining: set[str], spawn: Spawn) -> None:
        self.view, self.pools, self.index, self.actuator = view, pools, index, actuator
        self.settings, self.metrics, self._spawn = settings, metrics, spawn
        self._leaving, self._obtaining = leaving, obtaining
        self.idle = IdleUnits()
        #: Units being removed by scale-down.
        self.releasing: set[str] = set()
        #: The latest removals, oldest first, as ``/debug/plans`` shows them.
        self.history: list[dict[str, Any]] = []
        #: Units the actuator released, as the last pass saw them (their scale-down state changes).
        self._released_seen: set[str] = set()

    def due(self) -> float | None:
        """The earliest time a unit becomes removable."""
        return self.idle.due(self.settings.scale_down_unneeded_time)

    def scale_down(self, now: float) -> None:
        """Look again at the units a change touched; remove those unneeded for long enough (``scaledown``)."""
        released = self.actuator.released
        # A unit released by the actuator is gone for scale-down; it is forgotten once its nodes are.
        released.intersection_update(self.view.unit_pool)
        self.idle.mark(released ^ self._released_seen)
        self._released_seen = set(released)
        self.idle.update(now, self._unneeded)
        going = self.releasing | released

        def count(pool: str) -> int:
            units = self.view.units({pool: self.pools[pool]}).get(pool, {})
            return unit_count(self.view, self.pools[pool], units, going, self._leaving)

        for removal in self.idle.ripe(self.pools, count, now, self.settings.scale_down_unneeded_time):
            broken = len(removal.nodes) < self.pools[removal.pool].nodes_per_unit
            self.history = [*self.history[-(HISTORY - 1):], {
                "at": rfc3339(now), "pool": removal.pool, "unit": removal.unit, "nodes": list(removal.nodes),
                "idleSince": rfc3339(removal.idle_since), "dryRun": self.settings.dry_run}]
            self.metrics.scaled(removal.pool, "down", 1)
            log.info("scale down %s: unit %s (%s) %s since %s", removal.pool, removal.unit, ", ".join(removal.nodes),
                     "missing hosts, empty" if broken else "empty", rfc3339(removal.idle_since),
                     extra={"pool": removal.pool, "unit": removal.unit, "dry_run": self.settings.dry_run})
            if not self.settings.dry_run:
                self.idle.forget(removal.unit)
                self.releasing.add(removal.unit)
                self._spawn(self.actuator.release(removal.pool, [removal.unit], f"scale-down-{removal.unit}"),
                            f"scale-down {removal.unit}", functools.partial(self._unit_gone, removal.unit))

    def _unneeded(self, unit: str) -> tuple[str, tuple[str, ...], bool] | None:
        """(pool, nodes, missing hosts) when ``unit`` may be scaled down: a unit of a managed pool that the provider
        made, not being removed, with every node empty and protected by nothing."""
        found = self.view.unit_nodes(unit)
        if found is None or found[0] not in self.pools:
            return None
        pool, nodes = found
        first = self.view.nodes[nodes[0]]
        if first.unit is None or first.deleting or unit in self.releasing or unit in self.actuator.released:
            return None
        if not unneeded(nodes, empty=self.view.empty, protected=self._protected):
            return None
        return pool, nodes, len(nodes) < self.pools[pool].nodes_per_unit

    def _protected(self, node: str) -> bool:
        """Booked, being rolled back, or a node of a scale-up in progress (by token: a scale-up resumed after a
        restart knows its nodes only once its obtain has returned)."""
        if node in self.index.booked_nodes or node in self._leaving:
            return True
        claim = self.view.nodes[node].claim
        return claim is not None and self.index.in_flight(claim, self._obtaining)

    def _unit_gone(self, unit: str, result: object) -> None:
        if isinstance(result, BaseException):
            log.warning("could not scale down unit %s: %s", unit, result)
        self.releasing.discard(unit)
        self.idle.mark([unit])
