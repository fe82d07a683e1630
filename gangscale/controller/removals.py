"""Scale-down carried out: the idle units, the units being removed, and the latest removals.

:mod:`unneeded` decides, without I/O, which units are unneeded and which are ripe for removal; this module is
the loop's side of it. Each pass, :meth:`Removals.scale_down` looks again at the units a change touched (the
loop marks them on :attr:`Removals.idle`), starts the removal of those unneeded for long enough as background
tasks of the loop, and keeps the latest removals for ``/debug/plans``. It is apart from the loop because it keeps
state of its own (which units are idle, which are being removed) that the rest of a pass only reads.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from gangscale.controller.actuator import Actuator
from gangscale.controller.logic.holdings import unit_count
from gangscale.controller.logic.indices import RequestIndex
from gangscale.controller.logic.ledger import Ledger
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.unneeded import IdleUnits, unneeded
from gangscale.controller.logic.view import ClusterView
from gangscale.controller.tasks import Spawn
from gangscale.model.nodepool import NodePool
from gangscale.observe.metrics import Metrics
from gangscale.timefmt import rfc3339

log = logging.getLogger(__name__)

#: How many removals ``/debug/plans`` shows.
HISTORY = 50


class Removals:
    """The units of the managed pools that scale-down watches, and their removal (see the module docstring).

    What is in flight (units being removed or released, nodes being handed back, scale-ups in progress) is the
    pass's :class:`~.ledger.Ledger`, read and told of removals here; ``spawn`` runs a removal as a guarded task of
    the loop."""

    def __init__(self, view: ClusterView, pools: Mapping[str, NodePool], index: RequestIndex, actuator: Actuator, *,
                 settings: Settings, metrics: Metrics, ledger: Ledger, spawn: Spawn) -> None:
        self.view, self.pools, self.index, self.actuator = view, pools, index, actuator
        self.settings, self.metrics, self._spawn = settings, metrics, spawn
        self.ledger = ledger
        self.idle = IdleUnits()
        #: The latest removals, oldest first, as ``/debug/plans`` shows them.
        self.history: list[dict[str, Any]] = []

    def due(self) -> float | None:
        """The earliest time a unit becomes removable."""
        return self.idle.due(self.settings.scale_down_unneeded_time)

    def scale_down(self, now: float) -> None:
        """Look again at the units a change touched; remove those unneeded for long enough (:mod:`unneeded`)."""
        self.idle.update(now, self._unneeded)
        going = self.ledger.going_units()
        leaving = self.ledger.leaving_nodes(lambda claim: self.view.by_claim.get(claim, ()))

        def count(pool: str) -> int:
            units = self.view.units({pool: self.pools[pool]}).get(pool, {})
            return unit_count(self.view, self.pools[pool], units, going, leaving)

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
                self.ledger.start_removal(removal.unit)
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
        if first.unit is None or first.deleting or self.ledger.is_going(unit):
            return None
        if not unneeded(nodes, empty=self.view.empty, protected=self._protected):
            return None
        return pool, nodes, len(nodes) < self.pools[pool].nodes_per_unit

    def _protected(self, node: str) -> bool:
        """Booked, being rolled back, or a node of a scale-up in progress (by token: a scale-up resumed after a
        restart knows its nodes only once its obtain has returned)."""
        if node in self.index.booked_nodes or self.ledger.is_leaving(node):
            return True
        claim = self.view.nodes[node].claim
        return claim is not None and self.ledger.in_progress(claim)

    def _unit_gone(self, unit: str, result: object) -> None:
        if isinstance(result, BaseException):
            log.warning("could not scale down unit %s: %s", unit, result)
        self.ledger.removal_returned(unit)
        self.idle.mark([unit])
