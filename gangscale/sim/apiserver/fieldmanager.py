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
* An Update whose objects cannot be typed (an associative list with duplicate keys, say) keeps the live
  managedFields, as ``UpdateNoErrors`` does, only when the untypable part changed: an unchanged subtree is not
  walked (``Comparison.walk``). Newer servers tolerate duplicates in live objects and own such lists whole.
* The 500 errors the real server returns for untyped failures carry ``reason: ""``; ``StatusError``
  serialises that empty reason instead of omitting it.
* Name/namespace/uid checks happen where the caller calls ``validate_apply_body`` /
  ``check_applied_identity``, not after conflict detection as in the real handler.
* The ``last-applied-configuration`` annotation kubectl's apply keeps in sync is written in
  ``goformat``'s exact JSON form: an integral float beyond 2**53 shows its exact digits and a non-string
  YAML key is written bare, where the real server writes Go's shortest digits and a string key.

The managedFields wire form is ``managedfields``'s, the request checks are ``applychecks``'s; both are
re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from gangscale.sim.apiserver.applychecks import (
    FIELD_MANAGER_MAX_LENGTH,
    check_applied_identity,
    gvk_string,
    manager_from_user_agent,
    missing_manager_error,
    validate_apply_body,
    validate_patch_options,
)
from gangscale.sim.apiserver.errors import Cause, StatusError, bad_request
from gangscale.sim.apiserver.fieldpath import FieldPath, FieldSet, path_string, set_of_names
from gangscale.sim.apiserver.fieldsets import (
    TypedError,
    compare,
    compare_normalized,
    ensure_named,
    json_equal,
    merge,
    normalize,
    remove_items,
    to_set,
    validate,
)
from gangscale.sim.apiserver.goformat import go_json
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.managedfields import (
    Entry,
    EntryKey,
    decode_entries,
    decode_or_empty,
    entry_seconds,
    managed_of,
    managed_stripped_view,
    object_meta,
    with_managed,
    without_managed,
)
from gangscale.sim.apiserver.shapes import Path, Shape

__all__ = [
    "FIELD_MANAGER_MAX_LENGTH", "LAST_APPLIED", "MAX_UPDATE_MANAGERS", "ApplyConflict", "apply",
    "check_applied_identity", "manager_from_user_agent", "missing_manager_error", "record_update",
    "record_update_entries",
    "reset_fields_for", "validate_apply_body", "validate_patch_options",
]

JSON = dict[str, Any]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MAX_UPDATE_MANAGERS = 10
_STRIPPED = set_of_names(("apiVersion",), ("kind",), ("metadata",), *(("metadata", n) for n in (
    "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation", "managedFields",
    "resourceVersion")))


class ApplyConflict(Exception):
    """Fields of other managers an apply would change; ``conflicts`` is (manager, field path) pairs."""

    def __init__(self, items: Iterable[tuple[Entry, FieldPath]]) -> None:
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


# --- the managers ----------------------------------------------------------------------------------

def _record(ctx: _Ctx, live: JSON, new: JSON, entries: dict[EntryKey, Entry], *,
            manager: str) -> dict[EntryKey, Entry]:
    """An Update: the write's changes move to ``manager``'s Update entry."""
    diff = compare_normalized(live, new, ctx.shape).exclude(ctx.ignored)
    changed = diff.modified.union(diff.added)
    out = {}
    for key, e in entries.items():
        kept = e.fields.difference(changed).difference(diff.removed)
        if not kept.empty():
            out[key] = replace(e, fields=kept)
    mine = changed.difference(diff.removed).difference(_STRIPPED)
    if not mine.empty():
        entry = Entry(manager, "Update", ctx.api_version, ctx.subresource, ctx.now, mine)
        previous = out.get(entry.key)
        out[entry.key] = replace(entry, fields=mine.union(previous.fields)) if previous else entry
    return _cap(out)


def _cap(entries: dict[EntryKey, Entry]) -> dict[EntryKey, Entry]:
    """Fold the oldest Update entries into per-version ``ancient-changes`` ones beyond the cap."""
    updaters = sorted((k for k, e in entries.items() if e.operation == "Update"),
                      key=lambda k: (entry_seconds(entries[k].time), entries[k].identifier()))
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


def _prune(merged: JSON, managers: dict[EntryKey, Entry], last: FieldSet | None, shape: Shape) -> JSON:
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


def _apply(ctx: _Ctx, live: JSON, config: JSON, entries: dict[EntryKey, Entry], *, manager: str,
           force: bool) -> tuple[JSON, dict[EntryKey, Entry]]:
    mine = Entry(manager, "Apply", ctx.api_version, ctx.subresource, None,
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


def _apply_as_kubectl(ctx: _Ctx, live: JSON, config: JSON, entries: dict[EntryKey, Entry], *, manager: str,
                      force: bool) -> tuple[JSON, dict[EntryKey, Entry]]:
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
            dst[path[-1]] = json_copy(src)
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
    meta = object_meta(applied)
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    errors = validate(applied, shape)
    if errors:
        gvk = gvk_string(applied.get("apiVersion"), applied.get("kind"))
        where = f"{meta.get('namespace', '')}/{meta.get('name', '')}; {gvk}"
        detail = errors[0] if len(errors) == 1 else "errors:\n" + "\n".join(f"  {e}" for e in errors)
        raise StatusError(500, "", f"failed to create typed patch object ({where}): {detail}")
    live = without_managed(current) if current is not None else {}
    paths = list(reset_fields)
    if allowed_roots is not None:
        roots = {*applied, *live} - set(allowed_roots) - {"apiVersion", "kind", "metadata"}
        paths += [(root,) for root in sorted(roots)]
    ctx = _Ctx(shape, api_version, subresource or "", now, set_of_names(*paths))
    try:
        entries = decode_entries(managed_of(current))
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
    return with_managed(obj, entries)


def _sync_last_applied(obj: JSON, applied: JSON) -> None:
    """kubectl's server-side apply keeps an existing client-side apply annotation current."""
    annotations = (obj.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict) or not annotations.get(LAST_APPLIED):
        return
    config = json_copy(applied)
    config_annotations = (config.get("metadata") or {}).get("annotations")
    if isinstance(config_annotations, dict):
        config_annotations.pop(LAST_APPLIED, None)
    annotations[LAST_APPLIED] = go_json(config, exact=True) + "\n"


def record_update(old: JSON | None, new: JSON, *, manager: str, shape: Shape, api_version: str,
                  subresource: str | None, now: str, reset_fields: Iterable[Path] = ()) -> JSON:
    """managedFields after a create (``old`` None), PUT or non-apply PATCH: ``new`` with its managedFields, a new
    object whose top level and metadata are new, everything else ``new``'s own (``new`` itself is not changed)."""
    if subresource:
        live = decode_or_empty(managed_of(old))  # a subresource cannot rewrite managedFields
    else:
        requested = managed_of(new)
        live = {} if requested in ([], [{}]) else decode_or_empty(requested) or decode_or_empty(managed_of(old))
    result, entries = record_update_entries(old, live, new, manager=manager, shape=shape, api_version=api_version,
                                            subresource=subresource, now=now, reset_fields=reset_fields,
                                            on_error=lambda: decode_or_empty(managed_of(old)))
    return with_managed(result, entries) if entries is not None else result


def record_update_entries(old: JSON | None, live: dict[EntryKey, Entry], new: JSON, *, manager: str, shape: Shape,
                          api_version: str, subresource: str | None, now: str, reset_fields: Iterable[Path] = (),
                          on_error: Callable[[], dict[EntryKey, Entry]] | None = None,
                          ) -> tuple[JSON, dict[EntryKey, Entry] | None]:
    """``record_update`` with the managedFields entries the write starts from (``live``: decoded from ``old`` or the
    request, as it decides) given and the result's returned undecoded: ``(new without managedFields, its entries, or
    None when it stays untracked)``. For a caller that writes an object twice in a row (a bulk load's create, then
    its status) without encoding the entries in between. ``on_error``: the entries kept when the objects cannot be
    typed (default ``live``)."""
    # Not a deep copy: the callers own ``new`` and drop it for the result (a copy of every written object here was
    # a tenth of a write's cost).
    result = dict(new)
    meta = new.get("metadata")
    if isinstance(meta, dict):
        result["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    if not live and old is not None:
        return result, None  # an object whose managedFields were reset stays untracked
    ctx = _Ctx(shape, api_version, subresource or "", now, set_of_names(*reset_fields))
    try:
        # _record only reads the old object (normalize builds new values), so a view will do.
        entries = _record(ctx, managed_stripped_view(old) if old is not None else {}, result, live,
                          manager=manager or "unknown")
    except TypedError:
        # UpdateNoErrors: keep the live object's managedFields rather than failing the write.
        return result, on_error() if on_error is not None else live
    return result, entries


def reset_fields_for(kind: str, *, subresource: str | None, status_subresource: bool) -> tuple[Path, ...]:
    """The strategies' GetResetFields for the kinds served (custom resources included)."""
    if subresource == "status":
        if kind == "Pod":
            return (("spec",), ("metadata", "deletionTimestamp"), ("metadata", "ownerReferences"))
        return (("spec",),)
    return (("status",),) if status_subresource or kind in ("Pod", "Node", "Namespace") else ()
