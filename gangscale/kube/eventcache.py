"""Event correlation as client-go's recorder does it (``tools/record/events_cache.go``), in plain data.

Three steps, in client-go's order, for each event a recorder is about to send:

1. **Spam filter**: a token bucket per (source, involved object): a burst of 25 events, then one more every
   5 minutes. An event beyond that is dropped (client-go drops it too; it is a courtesy, not a record).
2. **Aggregation**: events that share everything but the message (same source, object, type and reason) are
   counted per 10-minute window; from the 10th distinct message on, they are sent as one event whose message
   is ``(combined from similar events): <latest message>``.
3. **Deduplication**: an event identical to one already sent (same key, message included) is not created
   again: the earlier one is patched with ``count + 1`` and a new ``lastTimestamp``, as ``kubectl get events``
   shows (``3x over 5m``). The cache keeps the last 4096 keys (client-go's LRU size).

Everything here is pure: ``now`` is an input, and :meth:`EventCorrelator.correlate` returns what to send
(:class:`Create`, :class:`Patch` or ``None`` to drop). The recorder does the I/O and reports a patch that
found no event (deleted, expired by the API server's event TTL) by creating it afresh, as client-go does, and
telling :meth:`EventCorrelator.recreated`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

JSON = dict[str, Any]
K = TypeVar("K")
V = TypeVar("V")

#: client-go's defaults (``defaultAggregateMaxEvents``, ``defaultAggregateIntervalInSeconds``, ``maxLruCacheEntries``,
#: ``defaultSpamBurst``, ``defaultSpamQPS``).
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
CACHE_ENTRIES = 4096
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED = "(combined from similar events): "


@dataclass(frozen=True)
class Create:
    """POST this Event."""

    body: JSON


@dataclass(frozen=True)
class Patch:
    """Strategic-merge-patch this change onto the Event ``name`` (an earlier, identical one)."""

    name: str
    namespace: str
    change: JSON
    #: What to create instead if the earlier event is gone.
    body: JSON


@dataclass
class _Seen:
    name: str
    count: int
    first: str


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Bucket:
    tokens: float
    at: float


class _Lru(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


def _object_key(event: JSON) -> tuple[str, ...]:
    source, obj = event.get("source") or {}, event.get("involvedObject") or {}
    return (str(source.get("component", "")), str(source.get("host", "")), str(obj.get("kind", "")),
            str(obj.get("namespace", "")), str(obj.get("name", "")), str(obj.get("uid", "")),
            str(obj.get("apiVersion", "")))


def _similar_key(event: JSON) -> tuple[str, ...]:
    return (*_object_key(event), str(event.get("type", "")), str(event.get("reason", "")),
            str(event.get("reportingComponent", "")), str(event.get("reportingInstance", "")))


def _event_key(event: JSON) -> tuple[str, ...]:
    obj = event.get("involvedObject") or {}
    return (*_similar_key(event), str(obj.get("fieldPath", "")), str(event.get("message", "")))


class EventCorrelator:
    """Decides, per event, whether to create it, patch an identical earlier one, or drop it (module docstring)."""

    def __init__(self, *, entries: int = CACHE_ENTRIES) -> None:
        self._seen: _Lru[tuple[str, ...], _Seen] = _Lru(entries)
        self._similar: _Lru[tuple[str, ...], _Similar] = _Lru(entries)
        self._buckets: _Lru[tuple[str, ...], _Bucket] = _Lru(entries)

    def correlate(self, event: JSON, now: float) -> Create | Patch | None:
        """What to send for ``event`` (a complete core/v1 Event with ``count`` 1 and both timestamps = now)."""
        if not self._allow(_object_key(event), now):
            return None
        event, key = self._aggregate(event, now)
        seen = self._seen.get(key)
        meta = event["metadata"]
        if seen is None:
            self._seen.put(key, _Seen(meta["name"], int(event.get("count") or 1), str(event["firstTimestamp"])))
            return Create(event)
        seen.count += 1
        repeated = {**event, "metadata": {**meta, "name": seen.name}, "count": seen.count,
                    "firstTimestamp": seen.first}
        return Patch(seen.name, meta["namespace"], {"count": seen.count, "lastTimestamp": event["lastTimestamp"],
                                                    "message": event.get("message", "")}, repeated)

    def recreated(self, event: JSON) -> None:
        """The earlier event was gone (deleted, or expired by the API server's event TTL) and ``event`` (a
        :attr:`Patch.body`) was created in its place: later repeats count up on the new one."""
        key = _similar_key(event) if str(event.get("message", "")).startswith(COMBINED) else _event_key(event)
        self._seen.put(key, _Seen(event["metadata"]["name"], int(event.get("count") or 1),
                                  str(event["firstTimestamp"])))

    def _allow(self, key: tuple[str, ...], now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(SPAM_BURST), now)
        bucket.tokens = min(float(SPAM_BURST), bucket.tokens + max(0.0, now - bucket.at) * SPAM_QPS)
        bucket.at = now
        allowed = bucket.tokens >= 1.0
        if allowed:
            bucket.tokens -= 1.0
        self._buckets.put(key, bucket)
        return allowed

    def _aggregate(self, event: JSON, now: float) -> tuple[JSON, tuple[str, ...]]:
        """The event to send and its deduplication key: its own key, or for the 10th distinct message in a row of
        similar ones (each less than 10 minutes after the previous), the combined event keyed by similarity, so
        that further similar events count up on that one event."""
        key = _similar_key(event)
        similar = self._similar.get(key)
        if similar is None or now - similar.last > AGGREGATE_INTERVAL:
            similar = _Similar()
        similar.messages.add(str(event.get("message", "")))
        similar.last = now
        self._similar.put(key, similar)
        if len(similar.messages) < AGGREGATE_MAX_EVENTS:
            return event, _event_key(event)
        similar.messages.pop()  # as client-go: the set stops growing at the limit
        return {**event, "message": (COMBINED + str(event.get("message", "")))[:1024]}, key
