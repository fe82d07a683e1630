"""How the emulators read the cluster: every LIST they made, served from one shared informer cache.

Each emulator reads a whole picture on every call (a level-triggered reconciler), and the driver calls every one
of them several times per simulated instant; as HTTP LISTs this was most of a demo's cost (``docs/benchmarks.md``).
:class:`Informers` keeps one :class:`~gangscale.kube.reflector.Reflector` (list, then watch) per kind the emulators
read, all on one client of their own, so a read is a copy out of memory. :class:`HttpReader` is the same
:class:`Reader` over plain LISTs, for an emulator used on its own (unit tests).

Reading from a cache must not mean reading a stale one: the driver settles an instant by calling the components
until a round changes nothing, so an emulator acting on a cache that misses a write would let the clock move
early. The cache knows exactly when it is current: it listens to the embedded API server's store (its synchronous
``listeners``) for the revision of the last change to each resource, and a reflector is current once its
resourceVersion has reached that revision. :meth:`Informers.items` waits for every reflector to be current before
it answers — the answer is what a LIST at that moment would have returned — and the driver counts the cache as
one more part that must be quiet before a round ends (:meth:`Informers.current`).

Watch bookmarks count: the embedded server sends one only when every event of the stream up to its revision has
been sent (as a real server's watch cache does), so a reflector at a bookmark's revision has seen every change.

A resource the server does not serve when the cache starts answers every read with that 404, as its LIST did.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gangscale.aio import cancel_and_wait
from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector
from gangscale.kube.resources import (
    ADMISSIONCHECKS,
    CLUSTERQUEUES,
    EVENTS,
    JOBS,
    JOBSETS,
    LOCALQUEUES,
    NAMESPACES,
    NODES,
    PODS,
    PODTEMPLATES,
    PROVREQCONFIGS,
    PROVREQS,
    RAYCLUSTERS,
    RAYJOBS,
    RESOURCEFLAVORS,
    WORKLOADPRIORITYCLASSES,
    WORKLOADS,
)
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Event, Store

JSON = dict[str, Any]
Where = Callable[[JSON], bool]
log = logging.getLogger(__name__)

#: Every kind an emulator reads (Kueue, its provisioning check, the job controllers and kubelet, the scheduler,
#: the Ray and baseline autoscalers, the demo's observer).
WATCHED: tuple[Resource, ...] = (
    WORKLOADS, PROVREQS, PODTEMPLATES, PODS, NODES, NAMESPACES, EVENTS, JOBS, JOBSETS, RAYJOBS, RAYCLUSTERS,
    CLUSTERQUEUES, LOCALQUEUES, RESOURCEFLAVORS, ADMISSIONCHECKS, PROVREQCONFIGS, WORKLOADPRIORITYCLASSES)
#: A hang guard (real seconds), not a timer: a cache that never catches up fails loudly.
HANG_GUARD = 20.0
#: Longer than any run: a watch that the server ends is resumed anyway, this only avoids needless restarts.
WATCH_SECONDS = 3600.0


class Reader(Protocol):
    async def items(self, resource: Resource, where: Where | None = None) -> list[JSON]:
        """Every object of ``resource`` in all namespaces (those ``where`` accepts), ordered by namespace and
        name, as a LIST answers; the caller owns the objects. Raises :class:`ApiError` as the LIST would."""
        ...


class HttpReader:
    """A :class:`Reader` that LISTs over HTTP on every read."""

    def __init__(self, http: KubeHTTP) -> None:
        self.http = http

    async def items(self, resource: Resource, where: Where | None = None) -> list[JSON]:
        answer = await self.http.request("GET", resource.path())
        return [o for o in answer.get("items") or [] if isinstance(o, dict) and (where is None or where(o))]


class Informers:
    """The shared cache; :meth:`start` before use, :meth:`aclose` after."""

    def __init__(self, http: KubeHTTP, store: Store, resources: Iterable[Resource] = WATCHED, *,
                 guard: float = HANG_GUARD) -> None:
        self.http = http
        self.store = store
        self.resources = tuple(resources)
        self.guard = guard
        self._reflectors: dict[StorageKey, Reflector[JSON]] = {}
        self._unserved: dict[StorageKey, ApiError] = {}
        #: The revision of the last committed change of each resource, from the store's listener.
        self._latest: dict[StorageKey, int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @staticmethod
    def _key(resource: Resource) -> StorageKey:
        return StorageKey(resource.group, resource.plural)

    def _committed(self, key: StorageKey, event: Event) -> None:
        self._latest[key] = event.rv

    async def start(self) -> None:
        self.store.listeners.append(self._committed)
        rng = random.Random(0)
        for resource in self.resources:
            try:
                await self.http.request("GET", resource.path(), query={"limit": 1})
            except ApiError as exc:
                if not exc.not_found:
                    raise
                self._unserved[self._key(resource)] = exc
                continue
            reflector: Reflector[JSON] = Reflector(self.http, resource, watch_timeout=WATCH_SECONDS, rng=rng)
            self._reflectors[self._key(resource)] = reflector
            self._tasks.append(asyncio.create_task(reflector.run(), name=f"sim informer {resource.plural}"))
        await self.until_current()

    def current(self) -> bool:
        """Whether every reflector has listed and seen every change the store has committed to its resource."""
        return all(r.synced.is_set() and int(r.resource_version or 0) >= self._latest.get(key, 0)
                   for key, r in self._reflectors.items())

    async def until_current(self) -> None:
        deadline = time.monotonic() + self.guard
        while not self.current():
            for task in self._tasks:
                if task.done():
                    task.result()  # raises what stopped it
                    raise RuntimeError(f"{task.get_name()} stopped")
            if time.monotonic() > deadline:
                behind = [k.plural for k, r in self._reflectors.items()
                          if not r.synced.is_set() or int(r.resource_version or 0) < self._latest.get(k, 0)]
                raise TimeoutError(f"the emulators' cache did not catch up within {self.guard:g}s: "
                                   f"{', '.join(behind)} behind")
            await asyncio.sleep(0)

    async def items(self, resource: Resource, where: Where | None = None) -> list[JSON]:
        key = self._key(resource)
        if key in self._unserved:
            raise self._unserved[key]
        reflector = self._reflectors.get(key)
        if reflector is None:
            raise KeyError(f"{resource.plural} is not cached (add it to Informers' resources)")
        await self.until_current()
        return [json_copy(o) for o in reflector.items() if where is None or where(o)]

    async def aclose(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        if self._committed in self.store.listeners:
            self.store.listeners.remove(self._committed)
