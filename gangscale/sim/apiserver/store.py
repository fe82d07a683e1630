"""The object store: one global resourceVersion, per-resource event logs and watchers.

Like etcd behind the real server, every committed change takes the next value of one global, monotonic
revision, which becomes the object's ``metadata.resourceVersion``. Each resource keeps the last
``window`` events; a watch that starts from a resourceVersion older than what the window still holds
is answered with ``410 Gone`` (reason ``Expired``), as a compacted etcd / watch cache answers.

All methods are synchronous and the store is only touched from the event loop, so each call is atomic
with respect to every other request, as a single etcd transaction is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import StorageKey

JSON = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace or "", name)

DEFAULT_WINDOW = 1000
# A watcher that falls this far behind is closed, as the real watch cache closes slow watchers.
WATCHER_QUEUE_LIMIT = 10_000


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    obj: JSON  # stored form, after the change (DELETED: the last stored state)
    prev: JSON | None  # stored form before the change (None for ADDED)


@dataclass(eq=False)
class Watcher:
    key: StorageKey
    # Decides what a watcher sees of an event: None to skip, else (type, object) already converted.
    project: Callable[[Event], tuple[str, JSON] | None]
    queue: asyncio.Queue[tuple[str, JSON] | None] = field(default_factory=asyncio.Queue)
    closed: bool = False
    #: Events offered and not yet written to the stream (queued, or being sent).
    unsent: int = 0

    def offer(self, ev: Event) -> None:
        if self.closed:
            return
        item = self.project(ev)
        if item is None:
            return
        if self.queue.qsize() >= WATCHER_QUEUE_LIMIT:
            self.close()
            return
        self.unsent += 1
        self.queue.put_nowait(item)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class TooOldResourceVersion(Exception):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Store:
    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self._rv = 0
        self._window = window
        self._objects: dict[StorageKey, dict[ObjKey, JSON]] = {}
        self._log: dict[StorageKey, deque[Event]] = {}
        # Highest revision dropped from each resource's log: watches must start at or after it.
        self._horizon: dict[StorageKey, int] = {}
        self._watchers: dict[StorageKey, set[Watcher]] = {}
        # Synchronous observers of every committed event (the emulated controller-manager).
        self.listeners: list[Callable[[StorageKey, Event], None]] = []

    # --- revisions -----------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def set_window(self, window: int) -> None:
        self._window = max(0, window)
        for key in list(self._log):
            self._trim(key)

    def compact(self, key: StorageKey | None = None) -> None:
        """Forget every retained event (of one resource, or all): older watches now get 410."""
        keys = [key] if key is not None else list(self._log)
        for k in keys:
            self._log.get(k, deque()).clear()
            self._horizon[k] = self._rv

    # --- reads ---------------------------------------------------------------------------------------

    def get(self, key: StorageKey, ns: str, name: str) -> JSON | None:
        return self._objects.get(key, {}).get((ns, name))

    def items(self, key: StorageKey, ns: str | None = None) -> Iterator[JSON]:
        objs = self._objects.get(key, {})
        for (ons, _), obj in sorted(objs.items()):
            if ns is None or ons == ns:
                yield obj

    # --- writes --------------------------------------------------------------------------------------

    def put(self, key: StorageKey, obj: JSON, *, added: bool) -> JSON:
        """Commit ``obj`` (stored form) at the next revision and tell the watchers.

        The store takes ``obj`` over: callers pass an object nothing else holds (every caller has just built it
        with ``to_storage`` or ``json_copy``), and must not change it afterwards. Copying it once more here was a
        measurable share of every write."""
        meta = obj["metadata"]
        okey = (meta.get("namespace", "") or "", meta["name"])
        prev = self._objects.get(key, {}).get(okey)
        self._rv += 1
        stored = obj
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self._objects.setdefault(key, {})[okey] = stored
        self._emit(key, Event(self._rv, "ADDED" if added else "MODIFIED", stored, prev))
        return stored

    def remove(self, key: StorageKey, ns: str, name: str) -> JSON | None:
        prev = self._objects.get(key, {}).pop((ns, name), None)
        if prev is None:
            return None
        self._rv += 1
        # As etcd's delete event does, the watchers get the last stored state at the delete revision.
        last = json_copy(prev)
        last["metadata"]["resourceVersion"] = str(self._rv)
        self._emit(key, Event(self._rv, "DELETED", last, prev))
        return last

    def drop_resource(self, key: StorageKey) -> None:
        """Forget a resource entirely (its CRD is gone); its watchers are closed."""
        self._objects.pop(key, None)
        self._log.pop(key, None)
        self._horizon.pop(key, None)
        for w in self._watchers.pop(key, set()):
            w.close()

    def _emit(self, key: StorageKey, ev: Event) -> None:
        log = self._log.setdefault(key, deque())
        log.append(ev)
        self._trim(key)
        for w in list(self._watchers.get(key, ())):
            w.offer(ev)
            if w.closed:
                self._watchers[key].discard(w)
        for listener in self.listeners:
            listener(key, ev)

    def _trim(self, key: StorageKey) -> None:
        log = self._log.get(key)
        if log is None:
            return
        while len(log) > self._window:
            dropped = log.popleft()
            self._horizon[key] = dropped.rv

    # --- watch ---------------------------------------------------------------------------------------

    def events_since(self, key: StorageKey, rv: int) -> list[Event]:
        """Retained events after ``rv``; raises :class:`TooOldResourceVersion` if some were dropped."""
        horizon = self._horizon.get(key, 0)
        if rv < horizon:
            raise TooOldResourceVersion(rv, horizon + 1)
        return [ev for ev in self._log.get(key, ()) if ev.rv > rv]

    def subscribe(self, watcher: Watcher) -> None:
        self._watchers.setdefault(watcher.key, set()).add(watcher)

    def unsubscribe(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.key, set()).discard(watcher)
        watcher.closed = True

    def undelivered(self) -> int:
        """Events offered to open watches and not yet written to their streams (for quiescence checks)."""
        return sum(w.unsent for ws in self._watchers.values() for w in ws if not w.closed)

    def close_all_watchers(self) -> None:
        for ws in self._watchers.values():
            for w in ws:
                w.close()
        self._watchers.clear()
