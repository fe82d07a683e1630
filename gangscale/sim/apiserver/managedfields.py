"""The ``metadata.managedFields`` wire form, as k8s.io/apimachinery's ``managedfields`` package reads and writes it.

Reproduces:

* decoding, failing with the real server's messages for a malformed entry (``operation must be `Apply`
  or `Update```, ``apiVersion must not be empty``, ``missing fieldsType in managed fields entry N``,
  ``invalid fieldsType "X" in managed fields entry N``); entries are keyed by manager, operation,
  subresource and, for ``Update`` only, apiVersion (appliers are one entry whatever version they apply);
* encoding: entries sorted by operation, time, manager, apiVersion, subresource, with the fields in
  ``FieldsV1`` form;
* the manager identifier (the entry's JSON without fields and time, which orders conflicts) and how
  conflict messages name a manager (``"m" with subresource "status" using v1``).

Not reproduced: version conversion; an entry's fields are kept as recorded, whatever its apiVersion.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gangscale.sim.apiserver.fieldpath import FieldSet
from gangscale.sim.apiserver.goformat import go_json, go_quote
from gangscale.sim.apiserver.jsoncopy import json_copy

JSON = dict[str, Any]
EntryKey = tuple[str, str, str, str]


@dataclass(frozen=True)
class Entry:
    """One ``ManagedFieldsEntry``."""

    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    fields: FieldSet

    @property
    def key(self) -> EntryKey:
        # Appliers are one entry whatever version they apply; updaters are one per version.
        version = self.api_version if self.operation == "Update" else ""
        return (self.manager, self.operation, version, self.subresource)

    def identifier(self) -> str:
        """The manager identifier (a ManagedFieldsEntry's JSON without fields and time)."""
        parts = [f'"manager":{go_json(self.manager)}'] if self.manager else []
        parts.append(f'"operation":{go_json(self.operation)}')
        if self.operation == "Update" and self.api_version:
            parts.append(f'"apiVersion":{go_json(self.api_version)}')
        if self.subresource:
            parts.append(f'"subresource":{go_json(self.subresource)}')
        return "{" + ",".join(parts) + "}"

    def printed(self) -> str:
        out = go_quote(self.manager)
        if self.subresource:
            out += f" with subresource {go_quote(self.subresource)}"
        return out + (f" using {self.api_version}" if self.operation == "Update" else "")


def decode_entries(raw: Any) -> dict[EntryKey, Entry]:
    """The entries of a managedFields list; ValueError with the server's message for a malformed one."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ValueError("managedFields must be a list")
    out: dict[EntryKey, Entry] = {}
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ValueError(f"managed fields entry {i} must be an object")
        if item.get("operation") not in ("Apply", "Update"):
            raise ValueError("operation must be `Apply` or `Update`")
        if not item.get("apiVersion"):
            raise ValueError("apiVersion must not be empty")
        if not item.get("fieldsType"):
            raise ValueError(f"missing fieldsType in managed fields entry {i}")
        if item["fieldsType"] != "FieldsV1":
            raise ValueError(f"invalid fieldsType {go_quote(str(item['fieldsType']))} "
                             f"in managed fields entry {i}")
        entry = Entry(str(item.get("manager") or ""), item["operation"], str(item["apiVersion"]),
                      str(item.get("subresource") or ""), item.get("time"),
                      FieldSet.from_fields_v1(item.get("fieldsV1") or {}))
        out[entry.key] = entry
    return out


def decode_or_empty(raw: Any) -> dict[EntryKey, Entry]:
    """The entries, or none when they do not decode."""
    try:
        return decode_entries(raw)
    except (ValueError, json.JSONDecodeError):
        return {}


def entry_seconds(time: str | None) -> int:
    """An entry's time in whole seconds (0 when unset or unreadable), the precision entries sort by."""
    try:
        return int(datetime.fromisoformat(time or "").timestamp())
    except ValueError:
        return 0


def encode_entries(entries: dict[EntryKey, Entry]) -> list[JSON]:
    """The entries as ``metadata.managedFields``, in the library's order."""
    out = []
    for e in sorted(entries.values(),
                    key=lambda e: (e.operation, entry_seconds(e.time), e.manager, e.api_version, e.subresource)):
        item: JSON = {"manager": e.manager} if e.manager else {}
        item.update({"operation": e.operation, "apiVersion": e.api_version})
        if e.time:
            item["time"] = e.time
        item.update({"fieldsType": "FieldsV1", "fieldsV1": e.fields.to_fields_v1()})
        if e.subresource:
            item["subresource"] = e.subresource
        out.append(item)
    return out


def object_meta(obj: Any) -> JSON:
    """An object's ``metadata``, or ``{}`` when it has none."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def managed_of(obj: Any) -> Any:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta.get("managedFields") if isinstance(meta, dict) else None


def without_managed(obj: JSON) -> JSON:
    """A copy of the object without ``metadata.managedFields``."""
    out = json_copy(obj)
    if isinstance(out.get("metadata"), dict):
        out["metadata"].pop("managedFields", None)
    return out


def managed_stripped_view(obj: JSON) -> JSON:
    """The object without ``metadata.managedFields``, sharing everything else: for readers only (a deep copy of
    every old object was a large part of each write's cost)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def with_managed(obj: JSON, entries: dict[EntryKey, Entry]) -> JSON:
    """The object with ``entries`` as its managedFields (the field removed when there are none)."""
    if entries:
        obj.setdefault("metadata", {})["managedFields"] = encode_entries(entries)
    elif isinstance(obj.get("metadata"), dict):
        obj["metadata"].pop("managedFields", None)
    return obj
