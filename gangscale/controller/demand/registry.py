"""The demand sources the controller runs, built in one place: the loop builds none itself.

:func:`demand_sources` builds each source with the loop as its :class:`~.demand.Host` and makes the one
cross-wiring between them: a ProvisioningRequest of a RayCluster's Workload (an elastic slice) asks only for the
replicas not already on nodes, so the ProvisioningRequest source reads RayClusters from the Ray source's cache
(``ProvReqSource(raycluster=RaySource.raycluster)``). The loop keeps what it gets by name::

    self.sources = {s.name: s for s in demand_sources(http, self)}

To add a source:

1. Implement :class:`~.demand.DemandSource` in a module of its own (``controller/<kind>source.py``) with a
   ``name`` no other source has: requests carry it in ``Request.source``, the loop finds their source by it, and
   keys of its requests must not collide with other sources' (``namespace/name`` for ProvisioningRequests,
   ``namespace/cluster/gang`` for Ray gangs).
2. Talk to the loop only through the :class:`~.demand.Host` it is given; a poller of its own runs under
   ``host.run_background`` and is cancelled in ``aclose`` (or by the loop when it stops).
3. Build it in :func:`demand_sources` below, after any source it reads from, and pass what it needs of the others
   here, as a callable (as ``raycluster`` is), rather than importing the other source.
4. Add its module to the sources' layer of the ``controller-layers`` contract in ``.importlinter``
   (``prsource | raysource``): it may import what lies below it, never the loop, the registry or another source.

The order of the list is the order in which the loop starts the sources' reflectors, recovers their recorded
requests and syncs them in each pass.
"""

from __future__ import annotations

from gangscale.controller.demand.protocol import DemandSource, Host
from gangscale.controller.demand.prsource import ProvReqSource
from gangscale.controller.demand.raysource import RaySource
from gangscale.kube.transport import KubeHTTP


def demand_sources(http: KubeHTTP, host: Host) -> list[DemandSource]:
    """Every demand source, ProvisioningRequests first, wired to ``host``, with distinct names."""
    ray = RaySource(http, host)
    provreqs = ProvReqSource(http, host, raycluster=ray.raycluster)
    return [provreqs, ray]


__all__ = ["demand_sources"]
