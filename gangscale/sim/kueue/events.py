"""Events as Kueue v0.19.2 writes them: ``events.k8s.io/v1``, one reporting controller per Kueue controller.

Kueue's controllers record through controller-runtime's ``GetEventRecorder(name)`` (``cmd/kueue/main.go``,
``pkg/controller/core/core.go``), which since controller-runtime v0.23 is client-go's ``tools/events`` recorder:
``Eventf(regarding, related, type, reason, action, note)``. Reproduced from client-go v0.36
(``tools/events/event_recorder.go`` ``makeEvent``, ``event_broadcaster.go`` ``NewRecorder``/``recordToSink``/
``getKey``):

- an ``events.k8s.io/v1`` Event named ``<regarding name>.<unix nanoseconds in hex>``, in the object's namespace,
  with ``eventTime`` (microseconds), ``reportingController`` = the recorder's name (``kueue-admission`` for the
  scheduler, ``kueue-workload-controller``, ``kueue-provisioning-request-controller``), ``reportingInstance`` =
  ``<controller>-<hostname>``, ``action``, ``reason``, ``regarding`` (the object's reference, resourceVersion
  included), ``note`` (Kueue cuts it to 1024 characters with " ..." at the end, ``api.TruncateEventMessage``)
  and ``type``; no ``deprecatedSource``, so the core/v1 view of it has no ``source`` and names the controller in
  ``reportingComponent``;
- an isomorphic event (same type, action, reason, controller, instance and ``regarding``, the note aside) within
  six minutes of the last one becomes a series: the first Event is patched with ``series.count`` and
  ``series.lastObservedTime`` (strategic merge) and keeps its note.

Simplified: the name's nanoseconds are the simulated time's plus a sequence number shared by the recorders (so
that events of one instant do not collide); the 30-minute series refresh and the final series write are not
made; a failed write is logged and dropped rather than retried.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import EVENTS_V1
from gangscale.kube.transport import KubeHTTP

JSON = dict[str, Any]
log = logging.getLogger(__name__)

#: Kueue's recorders (``pkg/constants``: ``AdmissionName``, ``WorkloadControllerName``; ``cmd/kueue/main.go``).
SCHEDULER = "kueue-admission"
WORKLOAD_CONTROLLER = "kueue-workload-controller"
PROVISIONING_CONTROLLER = "kueue-provisioning-request-controller"
#: The hostname part of ``reportingInstance`` (a Kueue pod's name in a real cluster).
DEFAULT_HOST = "kueue-controller-manager"
MAX_NOTE = 1024
SERIES_FINISH = 6 * 60.0  # client-go's finishTime
STRATEGIC = "application/strategic-merge-patch+json"
_MAX_NAME = 253
#: Shared by every recorder: events of one simulated instant about one object get distinct names.
_SEQUENCE = itertools.count()


def micro_time(now: float) -> str:
    """``metav1.MicroTime`` on the wire: RFC 3339 with six fractional digits, UTC."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_note(message: str) -> str:
    """Kueue's ``api.TruncateEventMessage``."""
    return message if len(message) <= MAX_NOTE else message[:MAX_NOTE - 4] + " ..."


def reference(obj: Mapping[str, Any]) -> JSON:
    """client-go's ``reference.GetReference``: kind, namespace, name, uid, apiVersion, resourceVersion."""
    meta = obj.get("metadata") or {}
    ref = {"kind": obj.get("kind"), "namespace": meta.get("namespace"), "name": meta.get("name"),
           "uid": meta.get("uid"), "apiVersion": obj.get("apiVersion"), "resourceVersion": meta.get("resourceVersion")}
    return {k: v for k, v in ref.items() if v}


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    last: float


class KueueEventRecorder:
    """One Kueue controller's ``events.k8s.io/v1`` recorder (see the module docstring)."""

    def __init__(self, http: KubeHTTP, controller: str, *, host: str = DEFAULT_HOST) -> None:
        self.http = http
        self.controller = controller
        self.instance = f"{controller}-{host}"[:128]
        self._seen: dict[str, _Seen] = {}
        self.sent = 0

    def _name(self, regarding: JSON, now: float) -> str:
        nanos = round(now * 1e9) + next(_SEQUENCE) % 1_000_000
        name = f"{regarding.get('name') or ''}.{nanos:x}"
        if len(name) > _MAX_NAME:  # client-go falls back to a random UUID; a digest keeps runs repeatable
            name = hashlib.sha1(name.encode()).hexdigest()
        return name

    async def record(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str, now: float,
                     action: str | None = None) -> None:
        regarding = reference(obj)
        namespace = str(regarding.get("namespace") or "default")
        action = action or reason
        key = json.dumps([event_type, action, reason, self.controller, self.instance, regarding], sort_keys=True)
        self._expire(now)
        try:
            seen = self._seen.get(key)
            if seen is not None:
                seen.count += 1
                seen.last = now
                await self.http.request("PATCH", EVENTS_V1.path(seen.namespace, seen.name), content_type=STRATEGIC,
                                        body={"series": {"count": seen.count, "lastObservedTime": micro_time(now)}})
            else:
                name = self._name(regarding, now)
                body: JSON = {"apiVersion": EVENTS_V1.api_version, "kind": "Event",
                              "metadata": {"name": name, "namespace": namespace},
                              "eventTime": micro_time(now), "reportingController": self.controller,
                              "reportingInstance": self.instance, "action": action, "reason": reason,
                              "regarding": regarding, "note": truncate_note(message), "type": event_type}
                await self.http.request("POST", EVENTS_V1.path(namespace), body=body)
                self._seen[key] = _Seen(name, namespace, 1, now)
            self.sent += 1
        except ApiError as exc:
            if seen is not None and exc.not_found:
                self._seen.pop(key, None)  # gone (event TTL): the next one starts afresh
            log.warning("could not record event %s on %s/%s: %s", reason, namespace, regarding.get("name"), exc)

    def _expire(self, now: float) -> None:
        """client-go's ``finishSeries``: an entry last seen more than six minutes ago is forgotten."""
        for key in [k for k, s in self._seen.items() if s.last < now - SERIES_FINISH]:
            del self._seen[key]
