"""Server-side apply that writes only what one field manager owns, and changes only what it means to.

An apply patch declares the manager's complete intent: a field it applied before and now leaves out is
removed (unless another manager also owns it). So each write starts from :func:`owned`, the live values of
exactly the fields the manager's ``Apply`` entry in ``metadata.managedFields`` records, and changes those.
Fields other managers own are never sent, so they are never taken over or clobbered: in a Workload's
``status.admissionChecks`` (a list-type=map keyed by ``name``) the provisioning admission check owns the
fields of its entry that it applied, Kueue's admission the ones it applied (a forced apply of a field
moves its ownership, as when Kueue resets a check after an eviction).

:func:`leftovers` lists what an apply could not remove because another manager still owns it (an entry's
``podSetUpdates`` after a reset, a stale entry) as JSON-patch operations, each guarded by a ``test`` of the
entry's name, for a follow-up ``application/json-patch+json`` write.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

JSON = dict[str, Any]

APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"

_CHILD_PREFIXES = ("f:", "k:", "v:", "i:")


def fields_of(obj: Mapping[str, Any], manager: str, subresource: str = "") -> JSON:
    """The FieldsV1 set of ``manager``'s Apply entry for ``subresource`` ("" is the main resource)."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if (entry.get("manager") == manager and entry.get("operation") == "Apply"
                and (entry.get("subresource") or "") == subresource):
            fields = entry.get("fieldsV1")
            return dict(fields) if isinstance(fields, Mapping) else {}
    return {}


def _has_children(fields: Mapping[str, Any]) -> bool:
    return any(key.startswith(_CHILD_PREFIXES) for key in fields)


def project(live: Any, fields: Mapping[str, Any]) -> Any:
    """The part of ``live`` that ``fields`` (FieldsV1) covers; a leaf set takes the whole value."""
    if not _has_children(fields):
        return live
    if isinstance(live, Mapping):
        out: JSON = {}
        for key, sub in fields.items():
            if key.startswith("f:") and key[2:] in live:
                out[key[2:]] = project(live[key[2:]], sub if isinstance(sub, Mapping) else {})
        return out
    if isinstance(live, list):
        items: list[Any] = []
        for key, raw_sub in fields.items():
            sub = raw_sub if isinstance(raw_sub, Mapping) else {}
            if key.startswith("k:"):
                wanted = json.loads(key[2:])
                item = next((i for i in live if isinstance(i, Mapping)
                             and all(i.get(k) == v for k, v in wanted.items())), None)
                if item is not None:
                    items.append({**project(item, sub), **wanted})
            elif key.startswith("v:"):
                value = json.loads(key[2:])
                if value in live:
                    items.append(value)
            elif key.startswith("i:") and int(key[2:]) < len(live):
                items.append(project(live[int(key[2:])], sub))
        return items
    return live


def owned(obj: Mapping[str, Any], manager: str, subresource: str = "status") -> JSON:
    """``{"status": {...}}`` (or the main resource's fields): the live values ``manager`` owns by apply."""
    fields = fields_of(obj, manager, subresource)
    live = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    result = project(live, fields) if fields else {}
    return result if isinstance(result, dict) else {}


def apply_body(obj: Mapping[str, Any], content: Mapping[str, Any]) -> JSON:
    """An apply patch for ``obj`` carrying ``content``, with uid and resourceVersion preconditions."""
    meta = obj.get("metadata") or {}
    identity = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if meta.get(k)}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": identity, **content}


def leftovers(obj: Mapping[str, Any], unset: Iterable[str], entry_unset: Mapping[str, Iterable[str]],
              drop_entries: Iterable[str], list_field: str = "admissionChecks") -> list[JSON]:
    """JSON-patch operations removing what must be gone but is still there.

    ``unset``: top-level status fields; ``entry_unset``: entry name -> fields of that ``status.<list_field>``
    entry; ``drop_entries``: whole entries. Index paths are guarded by a ``test`` of the entry's name.
    """
    status = obj.get("status") or {}
    ops: list[JSON] = [{"op": "remove", "path": f"/status/{name}"} for name in unset if name in status]
    entries = status.get(list_field) or []
    drop = set(drop_entries)
    removals: list[JSON] = []
    for index, entry in enumerate(entries):
        name = entry.get("name")
        path = f"/status/{list_field}/{index}"
        if name in drop:
            removals.append({"index": index, "ops": [{"op": "test", "path": f"{path}/name", "value": name},
                                                     {"op": "remove", "path": path}]})
            continue
        gone = [f for f in entry_unset.get(name, ()) if f in entry]
        if gone:
            ops.append({"op": "test", "path": f"{path}/name", "value": name})
            ops.extend({"op": "remove", "path": f"{path}/{f}"} for f in gone)
    # Whole entries last and from the end, so earlier indexes stay valid.
    for removal in sorted(removals, key=lambda r: -int(r["index"])):
        ops.extend(removal["ops"])
    return ops
