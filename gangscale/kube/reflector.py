"""List-then-watch cache of one resource (a client-go Reflector + Store, in asyncio).

The loop, and why each step is there:

1. LIST (paged) and replace the cache; the list's ``metadata.resourceVersion`` is where the watch starts.
   Differences against the previous cache are emitted as events, so a re-list after a gap reports
   objects that were deleted meanwhile as ``DELETED`` — kubernetes_asyncio's ``Watch`` and lightkube
   re-watch without re-listing and lose those.
2. ``synced`` is set after the first complete list: nothing may be decided on a partial view.
3. WATCH from that resourceVersion with ``allowWatchBookmarks`` and a jittered ``timeoutSeconds``;
   each event (bookmarks too) advances the resourceVersion. When the server ends the stream, or the
   connection drops, the watch resumes from the last resourceVersion without a list.
4. ``ERROR`` 410 (``Expired``) on the stream, or a 410 answer: the resourceVersion is too old — back to 1.
   Unlike kubernetes_asyncio (which retries once with the same stale resourceVersion) or kr8s (which
   loops on it), a 410 always leads to a fresh list. A 410 again before anything was delivered from that
   list (a server that cannot serve the versions it lists) backs off before the next list, so a 410 loop
   is bounded in rate as well as in kind.
5. 429 and 5xx answers and connection errors back off with jitter, honouring ``Retry-After`` (the
   ``API_WATCH`` preset of :mod:`gangscale.retry`): on a list they lead to another list, on a watch to a
   new watch from the same resourceVersion. A watch that ends at once without any event also backs off,
   so a misbehaving server cannot make us spin.
   Other errors (403, 400...) back off and re-list.
6. Health (:meth:`Reflector.trouble`): the time since the reflector last made progress (a list done, a watch
   accepted, an event or bookmark) while it keeps failing, and whether its task has ended. The controller stops
   deciding when a cache goes stale this way: everything else keeps answering, so nothing else would notice.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gangscale.kube.errors import ApiError, WatchExpired
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.retry import API_WATCH, Backoff

JSON = dict[str, Any]
Key = tuple[str, str]
log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class ReflectorEvent:
    type: str  # ADDED | MODIFIED | DELETED
    obj: JSON
    old: JSON | None = None


def object_key(obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", "") or "", meta.get("name", ""))


class Reflector:
    def __init__(self, http: KubeHTTP, resource: Resource, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 watch_timeout: float = 300.0, page_size: int = 500, backoff: Backoff | None = None,
                 sleep: Sleep = asyncio.sleep, rng: random.Random | None = None,
                 transform: Callable[[JSON], JSON] | None = None) -> None:
        self.http = http
        #: Applied to every object before it is cached and handed on (client-go's ``SetTransform``): a
        #: controller keeps only what it reads.
        self.transform = transform
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.backoff = backoff or Backoff(API_WATCH)
        #: Paces re-lists after 410s that come one after another with nothing delivered in between.
        self._expiry_backoff = self.backoff.fresh()
        self._delivered = False
        self.rng = rng or random.Random()
        self._sleep = sleep
        self.cache: dict[Key, JSON] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.lists = 0
        self.watches = 0
        #: A fresh list asked for (:meth:`relist`), and set after every list.
        self._relist_wanted = asyncio.Event()
        self._listed = asyncio.Event()
        self._subscribers: list[asyncio.Queue[ReflectorEvent]] = []
        self._handlers: list[Callable[[ReflectorEvent], None]] = []
        #: Monotonic time of the first failure since the last progress (None: not failing), and why.
        self.failing_since: float | None = None
        self.failure = ""
        #: Why :meth:`run` ended (an exception, or a cancellation: the loop cancels it only when it stops itself).
        self.ended: str | None = None

    # --- health --------------------------------------------------------------------------------------

    def _progress(self) -> None:
        self.failing_since, self.failure = None, ""

    def _failing(self, why: object) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self.failure = str(why)

    def trouble(self, bound: float) -> str | None:
        """Why this cache may be stale: the reflector ended, or has failed for more than ``bound`` seconds without
        progress; None when it is healthy (or still starting: the first list is what ``synced`` waits for)."""
        if self.ended is not None:
            return f"the watch of {self.resource.plural} stopped: {self.ended}"
        if self.failing_since is not None and (silent := time.monotonic() - self.failing_since) > bound:
            return f"the watch of {self.resource.plural} has failed for {silent:.0f}s: {self.failure}"
        return None

    # --- consumers -----------------------------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[ReflectorEvent]:
        q: asyncio.Queue[ReflectorEvent] = asyncio.Queue()
        self._subscribers.append(q)
        return q

    def add_handler(self, handler: Callable[[ReflectorEvent], None]) -> None:
        self._handlers.append(handler)

    def get(self, namespace: str, name: str) -> JSON | None:
        return self.cache.get((namespace, name))

    def items(self) -> list[JSON]:
        return [self.cache[k] for k in sorted(self.cache)]

    def _emit(self, ev: ReflectorEvent) -> None:
        for q in self._subscribers:
            q.put_nowait(ev)
        for h in self._handlers:
            try:
                h(ev)
            except Exception:
                log.exception("reflector %s: event handler failed", self.resource.plural)

    # --- the loop ------------------------------------------------------------------------------------

    def _selectors(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector, "fieldSelector": self.field_selector}

    async def run(self, *, iterations: int | None = None) -> None:
        """List and watch until cancelled (or for ``iterations`` list+watch rounds, for tests)."""
        try:
            await self._run(iterations)
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise
        except Exception as exc:
            self.ended = f"{type(exc).__name__}: {exc}"
            raise

    async def _run(self, iterations: int | None) -> None:
        done = 0
        expired_in_a_row = 0
        while iterations is None or done < iterations:
            done += 1
            self._delivered = False
            try:
                self._relist_wanted.clear()
                await self._list()
                self._listed.set()
                await self._watch_unless_relist_wanted()
            except WatchExpired:
                self._failing("410 Expired")
                log.warning("reflector %s: resourceVersion %s expired (410), re-listing",
                         self.resource.plural, self.resource_version)
                expired_in_a_row = 1 if self._delivered else expired_in_a_row + 1
                if expired_in_a_row == 1:
                    self._expiry_backoff.reset()
                else:
                    # Expired again before the watch of the fresh list delivered anything: re-listing at once
                    # would loop as fast as the server answers.
                    await self._sleep(self._expiry_backoff.next())
            except ApiError as exc:
                if exc.gone:
                    continue
                self._failing(exc)
                delay = self.backoff.next(exc.retry_after)
                log.warning("reflector %s: %s; retrying in %.2fs", self.resource.plural, exc, delay)
                await self._sleep(delay)

    async def relist(self) -> None:
        """List afresh now and return once that list is in the cache (its differences emitted as events).

        For a replica that just became leader: a standby's watch may be behind (dropped, in backoff), and what
        the leader decides first — a booked node missing, free room — must not rest on a stale cache."""
        self._listed.clear()
        self._relist_wanted.set()
        await self._listed.wait()

    async def _watch_unless_relist_wanted(self) -> None:
        if self._relist_wanted.is_set():
            return
        watch = asyncio.ensure_future(self._watch_until_expired())
        wanted = asyncio.ensure_future(self._relist_wanted.wait())
        try:
            await asyncio.wait({watch, wanted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (watch, wanted):
                task.cancel()
            await asyncio.gather(watch, wanted, return_exceptions=True)
        if watch.done() and not watch.cancelled() and watch.exception() is not None:
            raise watch.exception()  # type: ignore[misc]

    async def _list(self) -> None:
        items: list[JSON] = []
        token: str | None = None
        while True:
            page = await self.http.request("GET", self.resource.path(self.namespace), query={
                **self._selectors(), "limit": self.page_size, "continue": token})
            found = page.get("items") or []
            items.extend(found if self.transform is None else map(self.transform, found))
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                rv = str(meta.get("resourceVersion", ""))
                break
        self.lists += 1
        self._replace(items, rv)
        self.backoff.reset()
        self._progress()
        self.synced.set()

    def _replace(self, items: list[JSON], rv: str) -> None:
        fresh = {object_key(o): o for o in items}
        for key in sorted(set(self.cache) - set(fresh)):
            self._emit(ReflectorEvent("DELETED", self.cache.pop(key)))
        for key, obj in sorted(fresh.items()):
            old = self.cache.get(key)
            self.cache[key] = obj
            if old is None:
                self._emit(ReflectorEvent("ADDED", obj))
            elif _rv(old) != _rv(obj):
                self._emit(ReflectorEvent("MODIFIED", obj, old))
        self.resource_version = rv

    async def _watch_until_expired(self) -> None:
        """Watch, resuming after clean ends and dropped connections; returns never, raises to re-list."""
        while True:
            timeout = self.watch_timeout * (1.0 + self.rng.random())
            got_event = False
            self.watches += 1
            try:
                async for event in self.http.stream(self.resource.path(self.namespace), {
                        **self._selectors(), "resourceVersion": self.resource_version,
                        "allowWatchBookmarks": True, "timeoutSeconds": int(timeout)},
                        timeout=timeout + 30.0, opened=self._progress):
                    got_event = True
                    self._handle(event)
            except ApiError as exc:
                if exc.gone:
                    raise WatchExpired() from exc
                if not exc.retryable:
                    raise
                # Throttled, a server error or a dropped connection: the resourceVersion is still
                # good, so resume the watch from it (as client-go does) instead of paying a re-list.
                self._failing(exc)
                log.warning("reflector %s: watch interrupted (%s), resuming from %s",
                         self.resource.plural, exc, self.resource_version)
                await self._sleep(self.backoff.next(exc.retry_after))
                continue
            if got_event:
                self.backoff.reset()
            else:
                # Nothing at all before the server closed: do not hammer it.
                await self._sleep(self.backoff.next())

    def _handle(self, event: JSON) -> None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            code = int(obj.get("code", 0) or 0)
            if code == 410:
                raise WatchExpired()
            raise ApiError(code or 500, str(obj.get("reason", "")), str(obj.get("message", "")), obj)
        self._delivered = True
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if etype == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        if self.transform is not None:
            obj = self.transform(obj)
        key = object_key(obj)
        old = self.cache.get(key)
        if etype == "DELETED":
            self.cache.pop(key, None)
            self._emit(ReflectorEvent("DELETED", obj, old))
        elif etype in ("ADDED", "MODIFIED"):
            self.cache[key] = obj
            self._emit(ReflectorEvent("MODIFIED" if old is not None else "ADDED", obj, old))
        else:
            log.warning("reflector %s: unknown watch event type %r", self.resource.plural, etype)
            return
        if rv:
            self.resource_version = rv


def strip_managed_fields(obj: JSON) -> JSON:
    """The object without ``metadata.managedFields``, which a controller never reads and which is often the
    largest part of an object (client-go's ``TransformStripManagedFields``)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        del meta["managedFields"]
    return obj


def slim_node(obj: JSON) -> JSON:
    """A Node as a controller keeps it: without managedFields and the list of images on it (neither is read; on a
    real node the image list is often most of the object)."""
    status = obj.get("status")
    if isinstance(status, dict):
        status.pop("images", None)
    return strip_managed_fields(obj)


def _rv(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
