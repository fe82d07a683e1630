"""The object store: one global resourceVersion, per-resource event logs, key-ordered reads at a revision.

Like etcd behind the real server, every committed change takes the next value of one global, monotonic
revision, which becomes the object's ``metadata.resourceVersion``. Each resource keeps the last
``window`` events; a watch that starts from a resourceVersion older than what the window still holds
is answered with ``410 Gone`` (reason ``Expired``), as a compacted etcd / watch cache answers.

Reads at a revision (paged and ``Exact`` lists). Objects are kept under their etcd key below the resource's
prefix (``namespace/name``, or ``name`` when cluster-scoped) and :meth:`Store.scan` walks them in key order, as
they are as of any revision the resource's window still reaches (the *horizon* and later; older ones raise
:class:`TooOldResourceVersion`). The design, and what it costs:

- an ordered index: one sorted list of keys per resource (``bisect``), so a page starts in O(log n) and costs
  O(page) after that. It holds every live key plus the keys deleted within the window (tombstones); a write
  that creates or finally forgets a key inserts or removes it (a ``memmove`` of the list: microseconds at
  100,000 keys). The list is also why lists come out in key order, as etcd and the watch cache return them;
- multi-version values within the window: a key changed by an event the window still holds keeps its
  versions as ``(revision, object or None)``, oldest first, from the state before its first retained change;
  a key with no retained change has only its current object, which is older than the horizon and so valid at
  any readable revision. When an event leaves the window (trimmed, :meth:`Store.compact`, ``set_window``) the
  versions of its key older than it are dropped, and the key itself once it only remains as a deletion.

A paged list is therefore consistent at its first page's revision without copying anything: the cost is a
tuple and a list slot per retained change, since the objects themselves are the ones the event log already
holds for watchers (stored objects are never changed in place: a write stores a new object). The alternative,
copy-on-write snapshots per revision (the real watch cache clones a B-tree per event for ``ListFromCacheSnapshot``,
kubernetes 1.34+), needs a persistent tree: O(log n) node copies per write in Python, and a slower point read,
for no gain over versions this store already retains for watches.

Encodings (:meth:`Store.encoded`). Because a stored object never changes, its JSON encoding (``json.dumps(obj)``
with the server's default separators, as the HTTP side writes every answer) is computed once, the first time a
LIST page, a GET or a watch event serves it, and kept next to it: every later page, GET and watcher of that
object writes the same bytes, as the real watch cache's ``cachingObject`` serializes an object once per encoder
for all its watchers. A LIST page is then the pages' cached encodings joined. An encoding lives exactly as long
as its object is readable: it is dropped when the object is replaced or deleted and that change leaves the window
(trim, :meth:`Store.compact`, ``set_window``), or with its resource (:meth:`Store.drop_resource`), so the cache
holds at most one encoding per live object plus one per retained older version. Only the stored object's own
bytes are cached: an answer that differs from it (another version of a custom resource, events.k8s.io Events,
a Table, the object a filtered watch sends as DELETED) is encoded per request, or once per event for all
its watchers (:meth:`Event.encoding`). ``VERIFY_ENCODINGS`` (tests set it) re-encodes on every use and fails
if the cached bytes are stale.

All methods are synchronous and the store is only touched from the event loop, so each call is atomic
with respect to every other request, as a single etcd transaction is.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import StorageKey

JSON = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace or "", name)
#: One version of a key: from this revision on, the key holds this object (None: it does not exist).
Version = tuple[int, JSON | None]

DEFAULT_WINDOW = 1000
#: For tests (``GANGSCALE_SIM_VERIFY_ENCODINGS=1``, or set by them): every committed object is encoded at once, and
#: every cached encoding is compared with a fresh ``json.dumps`` when it is used and when its object is replaced, so
#: a stale encoding, or a stored object changed in place, fails loudly.
VERIFY_ENCODINGS = os.environ.get("GANGSCALE_SIM_VERIFY_ENCODINGS", "") == "1"
# A watcher that falls this far behind is closed, as the real watch cache closes slow watchers.
WATCHER_QUEUE_LIMIT = 10_000


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    obj: JSON  # stored form, after the change (DELETED: the last stored state)
    prev: JSON | None  # stored form before the change (None for ADDED)
    #: Encodings of what watchers are sent for this event, by what they are (see :meth:`encoding`).
    _encodings: dict[Any, bytes] = field(default_factory=dict, compare=False, repr=False)

    def encoding(self, tag: Any, build: Callable[[], JSON]) -> bytes:
        """The JSON encoding of an object derived from this event (``build()``; ``tag`` names which one, e.g. the
        version it is shown at), computed for the first watcher that is sent it and reused for the others. It
        lives as long as the event (the window's log, the queues of watchers it is still to be sent to)."""
        raw = self._encodings.get(tag)
        if raw is None:
            raw = self._encodings[tag] = json.dumps(build()).encode()
        elif VERIFY_ENCODINGS and json.dumps(build()).encode() != raw:
            raise AssertionError(f"stale encoding of event {self.rv} ({tag!r})")
        return raw


#: What a watcher is sent: (type, the object as its version shows it, that object's JSON encoding when known).
WatchItem = tuple[str, JSON, bytes | None]


@dataclass(eq=False)
class Watcher:
    key: StorageKey
    # Decides what a watcher sees of an event: None to skip, else the item to send (object already converted).
    project: Callable[[Event], WatchItem | None]
    queue: asyncio.Queue[WatchItem | None] = field(default_factory=asyncio.Queue)
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


def storage_path(ns: str, name: str) -> str:
    """An object's key below its resource's prefix, as etcd orders it: ``namespace/name``, or ``name``."""
    return f"{ns}/{name}" if ns else name


def _path_of(obj: JSON) -> str:
    meta = obj["metadata"]
    return storage_path(meta.get("namespace", "") or "", meta["name"])


def _at(versions: list[Version], rv: int) -> JSON | None:
    """The object a key held at revision ``rv`` (None: it did not exist)."""
    for since, obj in reversed(versions):
        if since <= rv:
            return obj
    return None


@dataclass(eq=False)
class _Keyspace:
    """One resource's objects: the current ones, their key order, the versions the window still reaches."""

    objects: dict[str, JSON] = field(default_factory=dict)
    #: Sorted: every key in ``objects``, and every key deleted by an event still in ``log``.
    keys: list[str] = field(default_factory=list)
    #: Keys changed by an event still in ``log``: their versions, oldest first; the last one is the current state.
    versions: dict[str, list[Version]] = field(default_factory=dict)
    log: deque[Event] = field(default_factory=deque)
    #: Highest revision dropped from ``log``: reads and watches must start at or after it.
    horizon: int = 0
    #: ``id(obj) -> (obj, json.dumps(obj).encode())`` for objects in ``objects`` or ``versions`` that were served.
    encoded: dict[int, tuple[JSON, bytes]] = field(default_factory=dict)

    def holds(self, path: str, obj: JSON) -> bool:
        """Whether ``obj`` is ``path``'s current object or one of its retained versions (not a copy of one)."""
        if self.objects.get(path) is obj:
            return True
        chain = self.versions.get(path)
        return chain is not None and any(o is obj for _, o in chain)

    def _forget_encoding(self, obj: JSON | None) -> None:
        if obj is not None:
            self.encoded.pop(id(obj), None)

    def record(self, path: str, rv: int, prev: JSON | None, new: JSON | None) -> None:
        """Note a committed change of ``path`` (``new`` None: deleted) before ``objects`` is updated."""
        chain = self.versions.get(path)
        if chain is None:
            if prev is None:
                bisect.insort(self.keys, path)
                chain = []
            else:
                chain = [(int(prev["metadata"]["resourceVersion"]), prev)]
            self.versions[path] = chain
        chain.append((rv, new))

    def forget_before(self, path: str, rv: int) -> None:
        """The event of ``path`` at ``rv`` left the window: versions older than it can no longer be read."""
        chain = self.versions.get(path)
        if chain is None:
            return
        drop = 0
        while drop < len(chain) and chain[drop][0] < rv:
            drop += 1
        if drop:
            for _, obj in chain[:drop]:
                if obj is not None and self.objects.get(path) is not obj:
                    self._forget_encoding(obj)
            del chain[:drop]
        if len(chain) <= 1:
            del self.versions[path]
            if not chain or chain[0][1] is None:
                self._unindex(path)

    def forget_all(self) -> None:
        for path, chain in self.versions.items():
            current = self.objects.get(path)
            for _, obj in chain:
                if obj is not current:
                    self._forget_encoding(obj)
        gone = {path for path, chain in self.versions.items() if chain[-1][1] is None}
        if gone:
            self.keys = [k for k in self.keys if k not in gone]
        self.versions.clear()

    def _unindex(self, path: str) -> None:
        i = bisect.bisect_left(self.keys, path)
        if i < len(self.keys) and self.keys[i] == path:
            del self.keys[i]

    def span(self, prefix: str, start: str) -> tuple[int, int]:
        """Index range of the keys under ``prefix`` from ``prefix + start`` on."""
        lo = bisect.bisect_left(self.keys, prefix + start)
        if not prefix:
            return lo, len(self.keys)
        # Every key under the prefix sorts before the prefix with its last character raised by one.
        return lo, bisect.bisect_left(self.keys, prefix[:-1] + chr(ord(prefix[-1]) + 1), lo)


class Store:
    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self._rv = 0
        self._window = window
        self._spaces: dict[StorageKey, _Keyspace] = {}
        self._watchers: dict[StorageKey, set[Watcher]] = {}
        # Synchronous observers of every committed event (the emulated controller-manager).
        self.listeners: list[Callable[[StorageKey, Event], None]] = []

    # --- revisions -----------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def set_window(self, window: int) -> None:
        self._window = max(0, window)
        for space in self._spaces.values():
            self._trim(space)

    def compact(self, key: StorageKey | None = None) -> None:
        """Forget every retained event (of one resource, or all): older watches, paged lists and lists at an
        exact older resourceVersion now get 410."""
        for k in [key] if key is not None else list(self._spaces):
            space = self._space(k)
            space.log.clear()
            space.forget_all()
            space.horizon = self._rv

    def horizon(self, key: StorageKey) -> int:
        """The oldest revision of ``key``'s resource that can still be read or watched from."""
        space = self._spaces.get(key)
        return space.horizon if space is not None else 0

    def _space(self, key: StorageKey) -> _Keyspace:
        space = self._spaces.get(key)
        if space is None:
            space = self._spaces[key] = _Keyspace()
        return space

    # --- reads ---------------------------------------------------------------------------------------

    def get(self, key: StorageKey, ns: str, name: str) -> JSON | None:
        space = self._spaces.get(key)
        return space.objects.get(storage_path(ns, name)) if space is not None else None

    def items(self, key: StorageKey, ns: str | None = None) -> Iterator[JSON]:
        """The current objects in key order (of one namespace, when ``ns`` is given)."""
        space = self._spaces.get(key)
        if space is None:
            return
        if ns:
            lo, hi = space.span(ns + "/", "")
            keys = space.keys[lo:hi]
        else:
            keys = list(space.keys)
        for path in keys:
            obj = space.objects.get(path)
            if obj is not None and (ns != "" or "/" not in path):
                yield obj

    def scan(self, key: StorageKey, rv: int, prefix: str = "", start: str = "") -> Iterator[tuple[str, JSON]]:
        """``(key, stored object)`` of the objects under ``prefix`` as they were at revision ``rv``, in key order,
        from the key ``prefix + start`` on. Raises :class:`TooOldResourceVersion` (at once) when ``rv`` is older
        than the window reaches. The caller must consume it before any write (each request does)."""
        space = self._spaces.get(key)
        if space is not None and rv < space.horizon:
            raise TooOldResourceVersion(rv, space.horizon + 1)
        return self._scan(space, rv, prefix, start) if space is not None else iter(())

    @staticmethod
    def _scan(space: _Keyspace, rv: int, prefix: str, start: str) -> Iterator[tuple[str, JSON]]:
        lo, hi = space.span(prefix, start)
        keys, objects, versions = space.keys, space.objects, space.versions
        for i in range(lo, hi):
            path = keys[i]
            chain = versions.get(path)
            obj = objects[path] if chain is None else _at(chain, rv)
            if obj is not None:
                yield path, obj

    def encoded(self, key: StorageKey, obj: JSON, path: str | None = None) -> bytes:
        """``json.dumps(obj).encode()`` of a stored object, computed the first time and kept while the object is
        readable (see the module docstring). ``obj`` is what :meth:`get`, :meth:`items` or :meth:`scan` gave, or an
        ADDED/MODIFIED event's ``obj``; anything else (a copy, a view, a DELETED event's object) is encoded and
        not kept. ``path``: the object's key, when the caller has it."""
        space = self._spaces.get(key)
        if space is None:
            return json.dumps(obj).encode()
        entry = space.encoded.get(id(obj))
        if entry is not None:
            if VERIFY_ENCODINGS and json.dumps(obj).encode() != entry[1]:
                raise AssertionError(f"stale encoding of {_path_of(obj)} at {obj['metadata'].get('resourceVersion')}")
            return entry[1]
        raw = json.dumps(obj).encode()
        if space.holds(path if path is not None else _path_of(obj), obj):
            space.encoded[id(obj)] = (obj, raw)
        return raw

    def encodings(self, key: StorageKey) -> int:
        """How many encodings the store keeps for a resource (at most its live objects plus retained versions)."""
        space = self._spaces.get(key)
        return len(space.encoded) if space is not None else 0

    def count(self, key: StorageKey, rv: int, prefix: str = "", start: str = "") -> int:
        """How many objects :meth:`scan` would give: O(log n), plus O(keys changed within the window)."""
        space = self._spaces.get(key)
        if space is None:
            return 0
        lo, hi = space.span(prefix, start)
        low = space.keys[lo] if lo < hi else ""
        absent = 0
        if lo < hi:
            high = space.keys[hi - 1]
            for path, chain in space.versions.items():
                if low <= path <= high and _at(chain, rv) is None:
                    absent += 1
        return hi - lo - absent

    # --- writes --------------------------------------------------------------------------------------

    def put(self, key: StorageKey, obj: JSON, *, added: bool) -> JSON:
        """Commit ``obj`` (stored form) at the next revision and tell the watchers.

        The store takes ``obj`` over: callers pass an object nothing else holds (every caller has just built it
        with ``to_storage`` or ``json_copy``), and must not change it afterwards. Copying it once more here was a
        measurable share of every write."""
        path = _path_of(obj)
        space = self._space(key)
        prev = space.objects.get(path)
        self._rv += 1
        stored = obj
        stored["metadata"]["resourceVersion"] = str(self._rv)
        space.record(path, self._rv, prev, stored)
        space.objects[path] = stored
        if VERIFY_ENCODINGS:
            self._verify(space, prev)
            self.encoded(key, stored, path)
        self._emit(key, space, Event(self._rv, "ADDED" if added else "MODIFIED", stored, prev))
        return stored

    @staticmethod
    def _verify(space: _Keyspace, obj: JSON | None) -> None:
        entry = space.encoded.get(id(obj)) if obj is not None else None
        if entry is not None and json.dumps(entry[0]).encode() != entry[1]:
            raise AssertionError(f"a stored object was changed in place: {_path_of(entry[0])}")

    def remove(self, key: StorageKey, ns: str, name: str) -> JSON | None:
        space = self._spaces.get(key)
        path = storage_path(ns, name)
        prev = space.objects.pop(path, None) if space is not None else None
        if prev is None or space is None:
            return None
        self._rv += 1
        space.record(path, self._rv, prev, None)
        if VERIFY_ENCODINGS:
            self._verify(space, prev)
        # As etcd's delete event does, the watchers get the last stored state at the delete revision.
        last = json_copy(prev)
        last["metadata"]["resourceVersion"] = str(self._rv)
        self._emit(key, space, Event(self._rv, "DELETED", last, prev))
        return last

    def drop_resource(self, key: StorageKey) -> None:
        """Forget a resource entirely (its CRD is gone); its watchers are closed."""
        self._spaces.pop(key, None)
        for w in self._watchers.pop(key, set()):
            w.close()

    def _emit(self, key: StorageKey, space: _Keyspace, ev: Event) -> None:
        space.log.append(ev)
        self._trim(space)
        for w in list(self._watchers.get(key, ())):
            w.offer(ev)
            if w.closed:
                self._watchers[key].discard(w)
        for listener in self.listeners:
            listener(key, ev)

    def _trim(self, space: _Keyspace) -> None:
        log = space.log
        while len(log) > self._window:
            dropped = log.popleft()
            space.horizon = dropped.rv
            space.forget_before(_path_of(dropped.obj), dropped.rv)

    # --- watch ---------------------------------------------------------------------------------------

    def events_since(self, key: StorageKey, rv: int) -> list[Event]:
        """Retained events after ``rv``; raises :class:`TooOldResourceVersion` if some were dropped."""
        space = self._spaces.get(key)
        if space is None:
            return []
        if rv < space.horizon:
            raise TooOldResourceVersion(rv, space.horizon + 1)
        return [ev for ev in space.log if ev.rv > rv]

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
