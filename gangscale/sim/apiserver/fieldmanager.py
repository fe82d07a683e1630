"""Server-side apply and ``metadata.managedFields`` bookkeeping, as kube-apiserver's field manager does.

Reproduces the k8s.io/apimachinery ``managedfields`` manager chain over structured-merge-diff:

* apply: the applied configuration is merged into the live object; its field set becomes the manager's
  ``Apply`` entry (one per manager and subresource); fields the manager applied before and no other
  manager owns are pruned; a field another manager owns whose value the apply changes is a conflict
  (409 ``Apply failed with N conflict(s)``, causes ``FieldManagerConflict``) unless forced, which moves
  ownership; an unchanged value becomes shared. An object without managedFields first gets a
  ``before-first-apply`` Update entry for what it holds. Manager ``kubectl`` may take over fields its
  ``last-applied-configuration`` annotation records (client-side to server-side upgrade) and keeps that
  annotation in sync.
* update (create, PUT, non-apply PATCH): changed and added fields join the manager's ``Update`` entry
  (one per manager, apiVersion and subresource) and leave every other entry; removed fields leave all;
  requests may replace managedFields, ``[]`` resets them, and an object without them stays untracked;
  at most 10 Update entries are kept, older ones merged into ``ancient-changes``.
* ownership never covers apiVersion, kind, metadata.name/namespace/uid/resourceVersion/generation/
  creationTimestamp/selfLink/managedFields (deletionTimestamp and deletionGracePeriodSeconds are not
  stripped by the real server either); fields a strategy resets (``reset_fields``) are neither owned
  nor conflicting, and their values are restored from the live object.
* timestamps move only when an operation changed the object; entries sort by operation, time, manager,
  apiVersion, subresource; errors carry the real messages and codes.

Not reproduced:

* Version conversion: managers recorded at another apiVersion are compared at the current one.
* The 500 errors the real server returns for untyped failures carry ``reason: ""``; ``StatusError``
  serialises that empty reason instead of omitting it.
* Name/namespace/uid checks happen where the caller calls ``validate_apply_body`` /
  ``check_applied_identity``, not after conflict detection as in the real handler.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gangscale.sim.apiserver.errors import Cause, StatusError, bad_request, conflict, invalid
from gangscale.sim.apiserver.fieldsets import (
    FieldPath,
    FieldSet,
    TypedError,
    compare,
    ensure_named,
    go_json,
    go_quote,
    json_equal,
    merge,
    normalize,
    path_string,
    remove_items,
    set_of_names,
    to_set,
    validate,
)
from gangscale.sim.apiserver.shapes import Path, Shape

JSON = dict[str, Any]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MAX_UPDATE_MANAGERS = 10
FIELD_MANAGER_MAX_LENGTH = 128
_STRIPPED = set_of_names(("apiVersion",), ("kind",), ("metadata",), *(("metadata", n) for n in (
    "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation", "managedFields",
    "resourceVersion")))
_Key = tuple[str, str, str, str]
_REQUIRED_MANAGER = Cause("FieldValueRequired", "Required value: is required for apply patch", "fieldManager")


@dataclass(frozen=True)
class _Entry:
    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    fields: FieldSet

    @property
    def key(self) -> _Key:
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


class ApplyConflict(Exception):
    """Fields of other managers an apply would change; ``conflicts`` is (manager, field path) pairs."""

    def __init__(self, items: Iterable[tuple[_Entry, FieldPath]]) -> None:
        self._items = sorted(items, key=lambda item: item[0].identifier())
        self.conflicts = tuple((entry.manager, path_string(path)) for entry, path in self._items)
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if len(self._items) == 1:
            entry, path = self._items[0]
            return f"Apply failed with 1 conflict: conflict with {entry.printed()}: {path_string(path)}"
        lines: list[str] = []
        last = None
        for entry, path in self._items:
            if entry.identifier() != last:
                lines.append(f"conflicts with {entry.printed()}:")
                last = entry.identifier()
            lines.append(f"- {path_string(path)}")
        return f"Apply failed with {len(self._items)} conflicts: " + "\n".join(lines)

    def to_status_error(self, resource: str = "", group: str = "", name: str = "") -> StatusError:
        """The 409; the real NewApplyConflict names no object, so resource/group/name are not used."""
        causes = [Cause("FieldManagerConflict", f"conflict with {entry.printed()}", path_string(path))
                  for entry, path in self._items]
        return StatusError(409, "Conflict", self.message, causes=causes)


@dataclass(frozen=True)
class _Ctx:
    shape: Shape
    api_version: str
    subresource: str
    now: str
    ignored: FieldSet


# --- managedFields wire form -----------------------------------------------------------------------

def _decode(raw: Any) -> dict[_Key, _Entry]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ValueError("managedFields must be a list")
    out: dict[_Key, _Entry] = {}
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
        entry = _Entry(str(item.get("manager") or ""), item["operation"], str(item["apiVersion"]),
                       str(item.get("subresource") or ""), item.get("time"),
                       FieldSet.from_fields_v1(item.get("fieldsV1") or {}))
        out[entry.key] = entry
    return out


def _decode_or_empty(raw: Any) -> dict[_Key, _Entry]:
    try:
        return _decode(raw)
    except (ValueError, json.JSONDecodeError):
        return {}


def _seconds(time: str | None) -> int:
    try:
        return int(datetime.fromisoformat(time or "").timestamp())
    except ValueError:
        return 0


def _encode(entries: dict[_Key, _Entry]) -> list[JSON]:
    out = []
    for e in sorted(entries.values(),
                    key=lambda e: (e.operation, _seconds(e.time), e.manager, e.api_version, e.subresource)):
        item: JSON = {"manager": e.manager} if e.manager else {}
        item.update({"operation": e.operation, "apiVersion": e.api_version})
        if e.time:
            item["time"] = e.time
        item.update({"fieldsType": "FieldsV1", "fieldsV1": e.fields.to_fields_v1()})
        if e.subresource:
            item["subresource"] = e.subresource
        out.append(item)
    return out


def _meta(obj: Any) -> JSON:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def _managed_of(obj: Any) -> Any:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta.get("managedFields") if isinstance(meta, dict) else None


def _without_managed(obj: JSON) -> JSON:
    out = copy.deepcopy(obj)
    if isinstance(out.get("metadata"), dict):
        out["metadata"].pop("managedFields", None)
    return out


def _with_managed(obj: JSON, entries: dict[_Key, _Entry]) -> JSON:
    if entries:
        obj.setdefault("metadata", {})["managedFields"] = _encode(entries)
    elif isinstance(obj.get("metadata"), dict):
        obj["metadata"].pop("managedFields", None)
    return obj


# --- the managers ----------------------------------------------------------------------------------

def _record(ctx: _Ctx, live: JSON, new: JSON, entries: dict[_Key, _Entry], *,
            manager: str) -> dict[_Key, _Entry]:
    """An Update: the write's changes move to ``manager``'s Update entry."""
    diff = compare(normalize(live, ctx.shape), normalize(new, ctx.shape), ctx.shape).exclude(ctx.ignored)
    changed = diff.modified.union(diff.added)
    out = {}
    for key, e in entries.items():
        kept = e.fields.difference(changed).difference(diff.removed)
        if not kept.empty():
            out[key] = replace(e, fields=kept)
    mine = changed.difference(diff.removed).difference(_STRIPPED)
    if not mine.empty():
        entry = _Entry(manager, "Update", ctx.api_version, ctx.subresource, ctx.now, mine)
        previous = out.get(entry.key)
        out[entry.key] = replace(entry, fields=mine.union(previous.fields)) if previous else entry
    return _cap(out)


def _cap(entries: dict[_Key, _Entry]) -> dict[_Key, _Entry]:
    """Fold the oldest Update entries into per-version ``ancient-changes`` ones beyond the cap."""
    updaters = sorted((k for k, e in entries.items() if e.operation == "Update"),
                      key=lambda k: (_seconds(entries[k].time), entries[k].identifier()))
    out, first, length = dict(entries), {}, len(updaters)
    for key in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        entry = out[key]
        bucket = ("ancient-changes", "Update", entry.api_version, "")
        if entry.api_version not in first:
            first[entry.api_version] = key
            continue
        if bucket not in out:
            oldest = out.pop(first[entry.api_version])
            out[bucket] = replace(oldest, manager="ancient-changes", subresource="")
        out[bucket] = replace(out[bucket], fields=entry.fields.union(out[bucket].fields), time=entry.time)
        del out[key]
        length -= 1
    return out


def _prune(merged: JSON, managers: dict[_Key, _Entry], last: FieldSet | None, shape: Shape) -> JSON:
    """Remove what the applier applied last time, no longer applies and nobody else owns."""
    if last is None or last.empty():
        return merged
    last_named = ensure_named(last, shape)
    pruned = remove_items(merged, last_named, shape)
    owned = FieldSet()
    for e in managers.values():
        owned = owned.union(ensure_named(e.fields, shape))
    everything = ensure_named(to_set(merged, shape), shape)
    kept = ensure_named(to_set(pruned, shape), shape)
    pruned = remove_items(merged, everything.difference(kept.union(owned)), shape)
    kept = ensure_named(to_set(pruned, shape), shape)
    result: JSON = remove_items(merged, everything.difference(kept).intersection(last_named), shape)
    return result


def _apply(ctx: _Ctx, live: JSON, config: JSON, entries: dict[_Key, _Entry], *, manager: str,
           force: bool) -> tuple[JSON, dict[_Key, _Entry]]:
    mine = _Entry(manager, "Apply", ctx.api_version, ctx.subresource, None,
                  to_set(config, ctx.shape).recursive_difference(ctx.ignored))
    last = entries.get(mine.key)
    managers = {**entries, mine.key: replace(mine, time=last.time if last else None)}
    obj = _prune(merge(live, config, ctx.shape), managers, last.fields if last else None, ctx.shape)
    before, after = normalize(live, ctx.shape), normalize(obj, ctx.shape)
    diff = compare(before, after, ctx.shape).exclude(ctx.ignored)
    changed = diff.modified.union(diff.added)
    clashes = [(e, p) for k, e in managers.items() if k != mine.key
               for p in e.fields.intersection(changed).paths()]
    if clashes and not force:
        raise ApplyConflict(clashes)
    out = {}
    for key, e in managers.items():
        kept = e.fields.difference(_STRIPPED) if key == mine.key else (
            e.fields.difference(changed).difference(diff.removed))
        if not kept.empty():
            out[key] = replace(e, fields=kept)
    if mine.key in out and not json_equal(before, after):
        out[mine.key] = replace(out[mine.key], time=ctx.now)
    return obj, out


def _allowed_by_last_applied(ctx: _Ctx, live: JSON) -> FieldSet | None:
    """Fields kubectl's client-side apply recorded and the object still holds as recorded."""
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    try:
        recorded = json.loads(annotations.get(LAST_APPLIED) or "null")
        if not isinstance(recorded, dict) or recorded.get("apiVersion") != ctx.api_version:
            return None
        diff = compare(recorded, normalize(live, ctx.shape), ctx.shape)
    except (ValueError, TypeError, TypedError):
        return None
    held = to_set(recorded, ctx.shape).difference(diff.modified)
    return held.difference(diff.added).difference(diff.removed)


def _apply_as_kubectl(ctx: _Ctx, live: JSON, config: JSON, entries: dict[_Key, _Entry], *, manager: str,
                      force: bool) -> tuple[JSON, dict[_Key, _Entry]]:
    try:
        return _apply(ctx, live, config, entries, manager=manager, force=force)
    except ApplyConflict as exc:
        allowed = _allowed_by_last_applied(ctx, live) if manager == "kubectl" else None
        if allowed is None:
            raise
        left = [(e, p) for e, p in exc._items if not allowed.has(p)]
        if left:
            raise ApplyConflict(left) from None
        return _apply(ctx, live, config, entries, manager=manager, force=True)


def _gvk(api_version: Any, kind: Any) -> str:
    version = api_version if isinstance(api_version, str) else ""
    group, _, ver = version.rpartition("/") if version.count("/") <= 1 else ("", "", "")
    return f"{group}/{ver}, Kind={kind if isinstance(kind, str) else ''}"


def _restore(obj: JSON, live: JSON, paths: Iterable[Path]) -> JSON:
    """Put back what the strategy resets (its PrepareForCreate/PrepareForUpdate)."""
    for path in paths:
        src: Any = live
        for name in path:
            src = src.get(name) if isinstance(src, dict) else None
        dst = obj
        for name in path[:-1]:
            dst = dst.setdefault(name, {}) if src is not None else dst.get(name) or {}
        if src is not None:
            dst[path[-1]] = copy.deepcopy(src)
        elif isinstance(dst, dict):
            dst.pop(path[-1], None)
    return obj


def apply(current: JSON | None, applied: JSON, *, manager: str, force: bool, shape: Shape, api_version: str,
          subresource: str | None, now: str, allowed_roots: frozenset[str] | None = None,
          reset_fields: Iterable[Path] = ()) -> JSON:
    """Server-side apply of ``applied`` to ``current`` (None: create by apply); returns the new object.

    ``reset_fields`` are the paths the resource's strategy resets for this endpoint (see
    ``reset_fields_for``): not owned, never conflicting, values kept from ``current``. ``allowed_roots``
    is a shorthand: every other top-level field except apiVersion/kind/metadata is reset.
    Call ``validate_apply_body`` first. Raises ``ApplyConflict`` or ``StatusError``.
    """
    meta = _meta(applied)
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    errors = validate(applied, shape)
    if errors:
        gvk = _gvk(applied.get("apiVersion"), applied.get("kind"))
        where = f"{meta.get('namespace', '')}/{meta.get('name', '')}; {gvk}"
        detail = errors[0] if len(errors) == 1 else "errors:\n" + "\n".join(f"  {e}" for e in errors)
        raise StatusError(500, "", f"failed to create typed patch object ({where}): {detail}")
    live = _without_managed(current) if current is not None else {}
    paths = list(reset_fields)
    if allowed_roots is not None:
        roots = {*applied, *live} - set(allowed_roots) - {"apiVersion", "kind", "metadata"}
        paths += [(root,) for root in sorted(roots)]
    ctx = _Ctx(shape, api_version, subresource or "", now, set_of_names(*paths))
    try:
        entries = _decode(_managed_of(current))
    except (ValueError, json.JSONDecodeError) as exc:
        raise StatusError(500, "", f"failed to decode managed fields: {exc}") from exc
    try:
        if current is not None and not entries:
            entries = _record(ctx, {}, live, {}, manager="before-first-apply")
        obj, entries = _apply_as_kubectl(ctx, live, applied, entries, manager=manager or "unknown",
                                         force=force)
    except TypedError as exc:
        raise StatusError(500, "", f"failed to create typed live object: {exc}") from exc
    obj = _restore(obj, live, paths)
    if manager == "kubectl":
        _sync_last_applied(obj, applied)
    return _with_managed(obj, entries)


def _sync_last_applied(obj: JSON, applied: JSON) -> None:
    """kubectl's server-side apply keeps an existing client-side apply annotation current."""
    annotations = (obj.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict) or not annotations.get(LAST_APPLIED):
        return
    config = copy.deepcopy(applied)
    config_annotations = (config.get("metadata") or {}).get("annotations")
    if isinstance(config_annotations, dict):
        config_annotations.pop(LAST_APPLIED, None)
    annotations[LAST_APPLIED] = go_json(config) + "\n"


def record_update(old: JSON | None, new: JSON, *, manager: str, shape: Shape, api_version: str,
                  subresource: str | None, now: str, reset_fields: Iterable[Path] = ()) -> JSON:
    """managedFields after a create (``old`` None), PUT or non-apply PATCH; returns ``new`` updated."""
    result = copy.deepcopy(new)
    requested = _managed_of(new)
    if subresource:
        entries = _decode_or_empty(_managed_of(old))  # a subresource cannot rewrite managedFields
    elif requested in ([], [{}]):
        entries = {}
    else:
        entries = _decode_or_empty(requested) or _decode_or_empty(_managed_of(old))
    result = _without_managed(result)
    if not entries and old is not None:
        return result  # an object whose managedFields were reset stays untracked
    ctx = _Ctx(shape, api_version, subresource or "", now, set_of_names(*reset_fields))
    try:
        entries = _record(ctx, _without_managed(old) if old is not None else {}, result, entries,
                          manager=manager or "unknown")
    except TypedError:
        # UpdateNoErrors: keep the live object's managedFields rather than failing the write.
        return _with_managed(result, _decode_or_empty(_managed_of(old)))
    return _with_managed(result, entries)


# --- request checks --------------------------------------------------------------------------------

def validate_apply_body(body: Any, *, api_version: str, kind: str, name: str | None = None,
                        namespace: str | None = None) -> None:
    """What the real server rejects in an apply body before merging (all 400 BadRequest)."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        what = "array" if isinstance(body, list) else "string" if isinstance(body, str) else "number"
        raise bad_request("error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
                          f"unmarshal {what} into Go value of type map[string]interface {{}}")
    if body.get("apiVersion") != api_version or body.get("kind") != kind:
        raise bad_request(f"invalid object type: {_gvk(body.get('apiVersion'), body.get('kind'))}")
    meta = _meta(body)
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    if name is not None and meta.get("name") and meta["name"] != name:
        raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                          f"({name})")
    if namespace and meta.get("namespace") and meta["namespace"] != namespace:
        raise bad_request(f"the namespace of the object ({meta['namespace']}) does not match the namespace "
                          f"on the request ({namespace})")


def check_applied_identity(obj: JSON, *, created: bool, resource: str, group: str, name: str) -> None:
    """The checks after an apply: no uid on create, and a name (a create-by-apply body may omit it)."""
    meta = _meta(obj)
    if created and meta.get("uid"):
        raise conflict(resource, group, name, "uid mismatch: the provided object specified uid "
                       f"{meta['uid']}, and no existing object was found")
    if not meta.get("name"):
        raise bad_request(f"the name of the object ({name} based on URL) was undeterminable: "
                          "name must be provided")


def validate_patch_options(*, apply: bool, field_manager: str | None, force_given: bool) -> None:
    """ValidatePatchOptions: 422 on PatchOptions.meta.k8s.io."""
    causes = []
    if not apply and force_given:
        causes.append(Cause("FieldValueForbidden", "Forbidden: may not be specified for non-apply patch",
                            "force"))
    if apply and not field_manager:
        causes.append(_REQUIRED_MANAGER)
    manager = field_manager or ""
    if len(manager.encode()) > FIELD_MANAGER_MAX_LENGTH:
        causes.append(Cause("FieldValueTooLong",
                            f"Too long: must have at most {FIELD_MANAGER_MAX_LENGTH} bytes", "fieldManager"))
    for index, char in enumerate(manager):
        if not char.isprintable():
            position = len(manager[:index].encode())  # Go ranges over bytes
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {go_quote(manager)}: invalid character "
                                f"U+{ord(char):04X} (at position {position})", "fieldManager"))
    if causes:
        raise invalid("PatchOptions", "meta.k8s.io", "", causes)


def missing_manager_error() -> StatusError:
    """The 422 for an apply patch without ``fieldManager``."""
    return invalid("PatchOptions", "meta.k8s.io", "", [_REQUIRED_MANAGER])


def manager_from_user_agent(field_manager: str | None, user_agent: str) -> str:
    """The manager of a non-apply write: ``fieldManager``, else the User-Agent up to its first ``/``."""
    if field_manager:
        return field_manager
    out = ""
    for char in user_agent.split("/", maxsplit=1)[0]:
        if char.isprintable():
            if len((out + char).encode()) > FIELD_MANAGER_MAX_LENGTH:
                break
            out += char
    return out


def reset_fields_for(kind: str, *, subresource: str | None, status_subresource: bool) -> tuple[Path, ...]:
    """The strategies' GetResetFields for the kinds served (custom resources included)."""
    if subresource == "status":
        if kind == "Pod":
            return (("spec",), ("metadata", "deletionTimestamp"), ("metadata", "ownerReferences"))
        return (("spec",),)
    return (("status",),) if status_subresource or kind in ("Pod", "Node", "Namespace") else ()
