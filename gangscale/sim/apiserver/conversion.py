"""Conversion between the served versions of one stored resource.

Custom resources convert as a CRD with ``conversion.strategy: None`` does: only ``apiVersion`` changes.
Events are stored in the core ``v1`` shape; ``events.k8s.io/v1`` reads and writes are converted field by
field with the renames of the upstream conversion (``regarding`` is ``involvedObject``, ``note`` is
``message``, ``reportingController`` is ``reportingComponent``, the ``deprecated*`` fields are the old
``source``/``firstTimestamp``/``lastTimestamp``/``count``).
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import ResourceType

JSON = dict[str, Any]

# events.k8s.io/v1 field -> core v1 field
_EVENT_RENAMES = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_EVENT_SHARED = ("metadata", "reason", "type", "action", "related", "series", "eventTime",
                 "reportingInstance")


def _is_events_api(rt: ResourceType) -> bool:
    return rt.kind == "Event" and rt.group == "events.k8s.io"


def to_storage(rt: ResourceType, obj: JSON, *, owned: bool = False) -> JSON:
    """The object as stored, from the shape of ``rt``'s version. Returns a new dict; with ``owned`` (the caller
    built ``obj`` and hands it over: nothing else holds any part of it that anyone will change), ``obj`` itself
    when only its ``apiVersion`` changes."""
    if _is_events_api(rt):
        out: JSON = {"apiVersion": "v1", "kind": "Event"}
        for key in _EVENT_SHARED:
            if key in obj:
                out[key] = json_copy(obj[key])
        for new, old in _EVENT_RENAMES.items():
            if new in obj:
                out[old] = json_copy(obj[new])
        return out
    out = obj if owned else json_copy(obj)
    if rt.custom or rt.kind != "Event":
        storage_av = f"{rt.group}/{rt.storage_version}" if rt.group else rt.storage_version
        out["apiVersion"] = storage_av or rt.api_version
    return out


def storage_view(rt: ResourceType, stored: JSON) -> JSON:
    """The stored object as ``rt``'s version shows it, for reading only (selectors): only the top level is new,
    everything below it is the stored object's own."""
    if _is_events_api(rt):
        return from_storage(rt, stored)
    return {**stored, "apiVersion": rt.api_version, "kind": rt.kind}


def from_storage(rt: ResourceType, stored: JSON) -> JSON:
    """The stored object as ``rt``'s version shows it. Returns a new dict."""
    if _is_events_api(rt):
        out: JSON = {"apiVersion": rt.api_version, "kind": "Event"}
        for key in _EVENT_SHARED:
            if key in stored:
                out[key] = json_copy(stored[key])
        for new, old in _EVENT_RENAMES.items():
            if old in stored:
                out[new] = json_copy(stored[old])
        return out
    out = json_copy(stored)
    out["apiVersion"] = rt.api_version
    out["kind"] = rt.kind
    return out
