"""Watch: what a watcher is sent, and in which order, as the real watch cache sends it.

- ``resourceVersion`` unset or ``"0"``: synthetic ``ADDED`` events for every matching object first, then
  changes ("Get State and Start at Most Recent" / "Start at Any").
- ``resourceVersion=N``: every change after N; if the retained window no longer reaches N, a single
  ``ERROR`` event with a 410 ``Expired`` Status (``too old resource version: N (M)``).
- ``sendInitialEvents=true`` (with ``resourceVersionMatch=NotOlderThan``): the synthetic ``ADDED``
  events, then a ``BOOKMARK`` annotated ``k8s.io/initial-events-end: "true"``.
- Filtered watches (label/field selectors): an object that starts matching arrives as ``ADDED``, one
  that stops matching as ``DELETED`` carrying its previous state at the new resourceVersion
  (``cacheWatcher.convertToWatchEvent``).
- ``allowWatchBookmarks=true``: a ``BOOKMARK`` (object with only ``kind``, ``apiVersion`` and
  ``metadata.resourceVersion``) every ``bookmark_interval`` seconds.
- ``timeoutSeconds``: the stream ends cleanly after that long (default 1800 s, the real
  ``--min-request-timeout``).

Each object is encoded once for all its watchers, as the watch cache's ``cachingObject`` does: an object sent as
stored (ADDED/MODIFIED at the stored version, the synthetic ADDED events) carries the store's cached encoding
(``Store.encoded``, shared with LIST pages); one that is converted or derived from the event (another version,
a DELETED event's last state, the previous state a filtered watch sends as DELETED) is encoded once per event
and version (``Event.encoding``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gangscale.sim.apiserver.conversion import from_storage, storage_view
from gangscale.sim.apiserver.listing import served_as_stored
from gangscale.sim.apiserver.resources import ResourceType, storage_key
from gangscale.sim.apiserver.store import Event, Store, TooOldResourceVersion, Watcher, WatchItem

JSON = dict[str, Any]
Matcher = Callable[[JSON], bool]


@dataclass(frozen=True)
class WatchRequest:
    rt: ResourceType
    namespace: str | None  # None: all namespaces / cluster scope
    matches: Matcher
    resource_version: str
    send_initial_events: bool = False


def _projector(store: Store, req: WatchRequest) -> Callable[[Event], WatchItem | None]:
    rt, ns = req.rt, req.namespace
    key = storage_key(rt)
    version = (rt.group, rt.version, rt.kind)

    def shown(obj: JSON) -> JSON:
        # Events are only serialized, and stored objects are never changed in place (a write stores a new
        # object): the stored object itself, or a shallow view, is enough (no deep copy per event and watcher).
        return obj if served_as_stored(rt, obj) else storage_view(rt, obj)

    def in_scope(obj: JSON | None) -> bool:
        if obj is None:
            return False
        if ns is not None and rt.namespaced and obj["metadata"].get("namespace", "") != ns:
            return False
        return req.matches(shown(obj))

    def current(etype: str, ev: Event) -> WatchItem:
        """The event's object (the committed one): the store's encoding when it is sent as stored."""
        if served_as_stored(rt, ev.obj):
            return etype, ev.obj, store.encoded(key, ev.obj)
        view = storage_view(rt, ev.obj)
        return etype, view, ev.encoding(("obj", *version), lambda: view)

    def gone(ev: Event) -> JSON:
        assert ev.prev is not None
        out = storage_view(rt, ev.prev)
        out["metadata"] = {**out["metadata"], "resourceVersion": str(ev.rv)}
        return out

    def project(ev: Event) -> WatchItem | None:
        cur_ok = ev.type != "DELETED" and in_scope(ev.obj)
        prev_ok = in_scope(ev.prev) if ev.type != "DELETED" else in_scope(ev.obj)
        if ev.type == "DELETED":
            if not prev_ok:
                return None
            # The last state at the delete revision: a copy the store does not keep, encoded once per event.
            view = shown(ev.obj)
            return "DELETED", view, ev.encoding(("obj", *version), lambda: view)
        if cur_ok and prev_ok:
            return current("MODIFIED", ev)
        if cur_ok:
            return current("ADDED", ev)
        if prev_ok and ev.prev is not None:
            view = gone(ev)
            return "DELETED", view, ev.encoding(("gone", *version), lambda: view)
        return None

    return project


def bookmark(rt: ResourceType, rv: int, *, initial_events_end: bool = False) -> JSON:
    meta: JSON = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}


def open_watch(store: Store, req: WatchRequest) -> tuple[Watcher, list[WatchItem]]:
    """Subscribe and return the backlog to send first. Raises TooOldResourceVersion."""
    key = storage_key(req.rt)
    project = _projector(store, req)
    watcher = Watcher(key=key, project=project)
    backlog: list[WatchItem] = []
    rv = req.resource_version
    if rv in ("", "0") or req.send_initial_events:
        for obj in store.items(key, req.namespace if req.rt.namespaced else None):
            if served_as_stored(req.rt, obj):
                if req.matches(obj):
                    backlog.append(("ADDED", obj, store.encoded(key, obj)))
            elif req.matches(storage_view(req.rt, obj)):
                backlog.append(("ADDED", from_storage(req.rt, obj), None))
        if req.send_initial_events:
            backlog.append(("BOOKMARK", bookmark(req.rt, store.resource_version, initial_events_end=True), None))
    else:
        try:
            start = int(rv)
        except ValueError as exc:
            raise TooOldResourceVersion(-1, 0) from exc
        for ev in store.events_since(key, start):
            item = project(ev)
            if item is not None:
                backlog.append(item)
    store.subscribe(watcher)
    return watcher, backlog
