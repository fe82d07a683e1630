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
6. Records, not objects (client-go's ``SetTransform``, taken further): ``transform`` turns each object, as it
   arrives, into what the consumer keeps — a compact record, or None for an object it does not keep (treated as
   absent). The raw JSON of a page or an event is dropped once transformed. Events are emitted only when the record
   changed: a pod whose kubelet rewrote its status without changing what the controller reads wakes nobody.
   With a ``projection`` (:mod:`gangscale.kube.projection`), only the fields the transform reads are decoded at all.
7. Health (:meth:`Reflector.trouble`): the time since the reflector last made progress (a list done, a watch
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
from typing import Any, Generic, TypeVar

from gangscale.kube.decoding import decode, gc_paused
from gangscale.kube.errors import ApiError, WatchExpired
from gangscale.kube.projection import Projection
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.retry import API_WATCH, Backoff

JSON = dict[str, Any]
Key = tuple[str, str]
log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
#: What a reflector keeps of each object (the raw JSON when it has no transform).
T = TypeVar("T")


@dataclass(frozen=True)
class ReflectorEvent(Generic[T]):
    type: str  # ADDED | MODIFIED | DELETED
    obj: T  # DELETED: the last record kept
    old: T | None = None
    #: (namespace, name) of the object: a record need not carry its name.
    key: Key = ("", "")


def object_key(obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", "") or "", meta.get("name", ""))


def as_json(obj: JSON) -> JSON:
    """The object as the server sent it: the transform of a reflector that keeps whole objects."""
    return obj


class Reflector(Generic[T]):
    # mypy cannot type a default for a TypeVar'd parameter: without a transform, T is JSON.
    def __init__(self, http: KubeHTTP, resource: Resource, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 watch_timeout: float = 300.0, page_size: int = 500, backoff: Backoff | None = None,
                 sleep: Sleep = asyncio.sleep, rng: random.Random | None = None,
                 transform: Callable[[JSON], T | None] = as_json,  # type: ignore[assignment]
                 projection: Projection[Any] | None = None) -> None:
        self.http = http
        #: The fields ``transform`` reads, when only those are decoded (:mod:`gangscale.kube.projection`).
        self.projection = projection
        decoders: tuple[Callable[[bytes], Any], Callable[[bytes], Any]] = \
            projection.decoders if projection is not None else (decode, decode)
        self._decode_page, self._decode_event = decoders
        #: Applied to every object as it arrives, before it is cached and handed on: what the consumer keeps of it
        #: (None: nothing, the object is treated as absent).
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
        self.cache: dict[Key, T] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.lists = 0
        self.watches = 0
        #: A fresh list asked for (:meth:`relist`), and set after every list.
        self._relist_wanted = asyncio.Event()
        self._listed = asyncio.Event()
        self._subscribers: list[asyncio.Queue[ReflectorEvent[T]]] = []
        self._handlers: list[Callable[[ReflectorEvent[T]], None]] = []
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

    def subscribe(self) -> asyncio.Queue[ReflectorEvent[T]]:
        q: asyncio.Queue[ReflectorEvent[T]] = asyncio.Queue()
        self._subscribers.append(q)
        return q

    def add_handler(self, handler: Callable[[ReflectorEvent[T]], None]) -> None:
        self._handlers.append(handler)

    def get(self, namespace: str, name: str) -> T | None:
        return self.cache.get((namespace, name))

    def items(self) -> list[T]:
        return [self.cache[k] for k in sorted(self.cache)]

    def _emit(self, ev: ReflectorEvent[T]) -> None:
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
        """One paged LIST into a fresh cache. Each page is transformed as it arrives, so only one page of raw JSON
        is held at a time, and the next page is asked for while this one is transformed (client-go's pager buffers
        pages the same way): the server builds page n+1 while the records of page n are made."""
        fresh: dict[Key, T] = {}
        query = {**self._selectors(), "limit": self.page_size}
        page = await self.http.request("GET", self.resource.path(self.namespace), query=query,
                                       decoder=self._decode_page)
        while True:
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            following = None if token is None else asyncio.ensure_future(self.http.request(
                "GET", self.resource.path(self.namespace), query={**query, "continue": token},
                decoder=self._decode_page))
            try:
                with gc_paused():
                    self._keep(fresh, page.get("items") or ())
                    del page
                if following is None:
                    rv = str(meta.get("resourceVersion", ""))
                    break
                page = await following
            except BaseException:
                if following is not None:
                    following.cancel()
                    await asyncio.gather(following, return_exceptions=True)
                raise
        self.lists += 1
        self._replace(fresh, rv)
        self.backoff.reset()
        self._progress()
        self.synced.set()

    def _keep(self, fresh: dict[Key, T], items: Any) -> None:
        for obj in items:
            record = self._record(obj)
            if record is not None:
                fresh[object_key(obj)] = record

    def _record(self, obj: JSON) -> T | None:
        """The transform's record of ``obj``; an object the transform fails on is logged and not kept, so one bad
        object cannot stop the cache of every other."""
        try:
            return self.transform(obj)
        except Exception:
            log.exception("reflector %s: cannot read %s/%s; not kept", self.resource.plural, *object_key(obj))
            return None

    def _replace(self, fresh: dict[Key, T], rv: str) -> None:
        for key in sorted(self.cache.keys() - fresh.keys()):
            self._emit(ReflectorEvent("DELETED", self.cache.pop(key), key=key))
        for key, record in sorted(fresh.items(), key=_by_key):
            old = self.cache.get(key)
            self.cache[key] = record
            if old is None:
                self._emit(ReflectorEvent("ADDED", record, key=key))
            elif old != record:
                self._emit(ReflectorEvent("MODIFIED", record, old, key=key))
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
                        timeout=timeout + 30.0, opened=self._progress, decoder=self._decode_event):
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
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("reflector %s: unknown watch event type %r", self.resource.plural, etype)
            return
        key = object_key(obj)
        record = self._record(obj)
        old = self.cache.get(key)
        if etype == "DELETED" or record is None:
            if old is not None:
                del self.cache[key]
                # The object's last state where the consumer keeps something of it, else what it kept before.
                self._emit(ReflectorEvent("DELETED", record if record is not None else old, old, key=key))
        elif old is None:
            self.cache[key] = record
            self._emit(ReflectorEvent("ADDED", record, key=key))
        elif old != record:
            self.cache[key] = record
            self._emit(ReflectorEvent("MODIFIED", record, old, key=key))
        if rv:
            self.resource_version = rv


def strip_managed_fields(obj: JSON) -> JSON:
    """The object without ``metadata.managedFields``, which a controller never reads and which is often the
    largest part of an object (client-go's ``TransformStripManagedFields``)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        del meta["managedFields"]
    return obj


def _by_key(item: tuple[Key, Any]) -> Key:
    return item[0]
