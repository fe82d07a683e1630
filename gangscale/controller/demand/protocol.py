"""Where requests come from: one protocol for every demand source, and what the loop offers a source.

A demand source (the cluster-autoscaler's *processors* idea) turns objects of one kind into requests and takes
their outcomes back: ProvisioningRequests (:mod:`prsource`) and Ray gangs of autoscaling RayClusters
(:mod:`raysource`), later others. The loop knows nothing of either: it gets its sources from the registry
(:func:`~.registry.demand_sources`, which builds each one and makes the one cross-wiring between them), keeps them
by :attr:`DemandSource.name`, reconciles :class:`~.request.RequestState` objects, plans their gangs, and asks the
request's source (``Request.source``) to build a gang, to tell whether the booked pods have arrived, and to write
the outcome where it belongs (a ProvisioningRequest's status, a RayCluster annotation). At startup it asks every
source for the requests recorded on its objects (:meth:`DemandSource.recover`) and for every provider token
recorded there (:meth:`DemandSource.recorded_tokens`), to tell orphaned units from owned ones.

A source talks to the loop only through :class:`Host`. Everything a source does to requests happens in
:meth:`DemandSource.sync`, which the loop calls at the start of each pass: objects that changed since the
last pass become new, changed or forgotten requests. Its reflector handlers only note what changed and wake the
loop. Work of its own that outlives a pass (the Ray source's GCS pollers) runs under the loop's guarded tasks
(:meth:`Host.spawn`, :meth:`Host.run_background`), so that the loop's stop ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Protocol

from gangscale.clock import Clock
from gangscale.controller.logic.reconcile import Consumed
from gangscale.controller.logic.request import Request, RequestState
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.view import ClusterView, PodInfo
from gangscale.kube.reflector import Reflector
from gangscale.model.gang import Gang
from gangscale.model.policy import Policy
from gangscale.observe.metrics import Metrics

JSON = dict[str, Any]


class Host(Protocol):
    """What the loop offers a demand source."""

    settings: Settings
    #: The planner's policy (the pool file's ``planner`` and ``capacityTiers``).
    policy: Policy
    clock: Clock
    metrics: Metrics
    view: ClusterView

    def state(self, key: str) -> RequestState | None: ...

    def requests_of(self, source: str) -> Iterable[RequestState]:
        """Every request of ``source``."""
        ...

    def add(self, st: RequestState) -> None:
        """A new request, to be reconciled in this pass."""
        ...

    def update(self, key: str, request: Request) -> None:
        """The request's description changed (its object did); it is reconciled in this pass."""
        ...

    def forget(self, key: str, why: str) -> None:
        """The request's object is gone: units still coming up for it are released; nothing more is written."""
        ...

    def mark(self, key: str) -> None:
        """Reconcile the request in this pass (something it depends on changed)."""
        ...

    def wake(self) -> None:
        """Something changed outside the reflectors the loop watches: run a pass."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str,
              then: Callable[[Any], None] | None = None) -> None:
        """Run guarded background work. When it ends, ``then`` is called *by the loop*, at the start of its next
        pass, with the result (or the exception): a task never changes state itself."""
        ...

    def run_background(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run long-lived work (a poller): it runs until its owner cancels the returned task or the loop stops (the
        loop cancels it and waits for it); a failure ends it and is logged. Nothing is handed back to the loop:
        the work tells the source what it found, and the source wakes the loop (:meth:`wake`)."""
        ...

    def emit(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        """An Event on an object, outside any request's life."""
        ...


class DemandSource(Protocol):
    #: The name requests carry in ``Request.source``.
    name: str

    async def start(self) -> list[Reflector[Any]]:
        """Find out whether the source can run here and return the reflectors it needs (the loop runs them)."""
        ...

    def recover(self) -> None:
        """After every reflector listed: a request for every scale-up intent recorded on this source's objects,
        for the loop to reconcile with the provider before anything is planned."""
        ...

    def recorded_tokens(self) -> set[str]:
        """After every reflector listed: the provider tokens recorded on this source's objects, including objects
        that made no request (not served, unreadable). Recovery releases units coming up under a token no request
        and no source knows as orphans; these tokens are owned, not orphaned."""
        ...

    def sync(self, now: float) -> None:
        """Apply what changed since the last pass (objects, and whatever else the source watches)."""
        ...

    def gang(self, st: RequestState, *, may_scale: bool | None = None) -> Gang | str | None:
        """The request's gang; a string saying why it has none (the request fails); None while something it
        needs is being looked up (the request waits and is reconciled again when it arrives)."""
        ...

    def consumed(self, st: RequestState) -> Consumed | None: ...

    def consumers(self, st: RequestState) -> Iterable[PodInfo]:
        """The request's pods that have arrived on nodes (its booking shrinks by their requests)."""
        ...

    def status(self, st: RequestState) -> JSON:
        """What is written for the request (compared with what was last written to skip idle writes)."""
        ...

    async def write(self, st: RequestState, body: JSON) -> str:
        """Write ``body``; the object's resourceVersion after it ("" if not known). Raises
        :class:`~gangscale.kube.errors.ApiError` (404: the object is gone; 409: it changed since ``st.version``, or
        it was replaced)."""
        ...

    async def delete(self, st: RequestState) -> None:
        """Delete a request whose outcome is older than the terminal TTL (only if ``Request.deletable``)."""
        ...

    def next_wake(self) -> float | None:
        """The earliest time the source needs a pass by itself (Ray demand still forming)."""
        ...

    def note_events(self, st: RequestState, events: Sequence[tuple[str, str, str]]) -> None:
        """The request's Events are being recorded (also in a dry run, where they are not written)."""
        ...

    def forgotten(self, key: str) -> None:
        """The loop dropped the request (its object went, or it finished): the source drops what it kept for it."""
        ...

    async def aclose(self) -> None: ...
