"""``application/strategic-merge-patch+json`` bodies, applied as kube-apiserver applies them.

Reproduces k8s.io/apimachinery ``StrategicMergeMapPatch`` (server side: parallel lists merged, unmatched
nulls ignored): merge by ``patchMergeKey``, union of primitive lists with the merge strategy, replace
otherwise; ``$patch: replace|delete|merge`` in maps and list items, ``$retainKeys``,
``$deleteFromPrimitiveList/<f>``, ``$setElementOrder/<f>``; errors mapped as
``interpretStrategicMergePatchError`` does (400 for bad directive formats, 422 for lists of lists,
otherwise 500 with the Go message).

Not reproduced:

* The typed round trip that follows a strategic merge patch of a builtin kind: this module only drops
  ``$``-prefixed keys left in the result (the Go struct would drop them); unknown fields, wrong scalar
  types and defaulting are the caller's business.
* Go messages that print a value with ``%v`` show its floats in JSON notation (``1000000``, ``1e-7``)
  where Go prints ``1e+06``, ``1e-07``.
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver.errors import StatusError, bad_request, cannot_unmarshal, generic_invalid
from gangscale.sim.apiserver.goformat import go_v
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.mergepatch import prune_nulls
from gangscale.sim.apiserver.shapes import Path, Shape

JSON = dict[str, Any]
_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_DELETE_PREFIX = "$deleteFromPrimitiveList"
_ORDER_PREFIX = "$setElementOrder"
_BAD_PRIMITIVE = "invalid patch format of primitive list"
_BAD_RETAIN = "invalid patch format of retainKeys"
_BAD_ORDER = "invalid patch format of setElementOrder list"


def _go_v(value: Any) -> str:
    """Go's %v of a decoded JSON value (floats in the notation these messages have always used)."""
    return go_v(value, floats="exact")


def _go_type(value: Any) -> str:
    """reflect.TypeOf of a decoded JSON value, as mergepatch.ErrBadArgType prints it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    return "string" if isinstance(value, str) else "%!s(<nil>)"


def _bad_arg(expected: str, value: Any) -> StatusError:
    return _server_error(f"expected a {expected}, but received a {_go_type(value)}")


def _server_error(message: str) -> StatusError:
    """An error the real server does not map to a status: 500 with the bare Go message."""
    return StatusError(500, "", message)


def _no_merge_key(item: JSON, key: str) -> StatusError:
    return _server_error(f"map: {_go_v(item)} does not contain declared merge key: {key}")


def strategic_merge_patch(target: JSON, patch: Any, shape: Shape) -> JSON:
    """A strategic merge patch of a builtin kind; never mutates its arguments."""
    if patch is None:
        patch = {}
    if not isinstance(patch, dict):
        raise cannot_unmarshal(patch, "map[string]interface {}")
    merged: JSON = _strip_dollar_keys(_Smp(shape).merge_map(json_copy(target), json_copy(patch), ()))
    return merged


def _strip_dollar_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_dollar_keys(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_dollar_keys(v) for v in value]
    return value


def _remove_directives(value: Any) -> tuple[Any, bool]:
    """Drop maps carrying ``$patch`` from a value that is added as is (newer apimachinery does)."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return None, False
        kept = {k: _remove_directives(v) for k, v in value.items()}
        return {k: v for k, (v, keep) in kept.items() if keep}, True
    if isinstance(value, list):
        return [v for v, keep in map(_remove_directives, value) if keep], True
    return value, True


def _added(value: Any) -> tuple[Any, bool]:
    return _remove_directives(prune_nulls(value))


def _go_eq(a: Any, b: Any) -> bool:
    """Go's == on decoded JSON scalars: same dynamic type and value."""
    return type(a) is type(b) and a == b and not isinstance(a, dict | list)


def _split_key(key: str, prefix: str, error: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        raise bad_request(error)
    return rest


class _Smp:
    def __init__(self, shape: Shape) -> None:
        self.shape = shape

    def strategy(self, path: Path) -> tuple[str | None, str]:
        strategy, key = self.shape.smp_strategy(path)
        parts = [p for p in (strategy or "").split(",") if p and p != "retainKeys"]
        return (parts[0] if parts else None), key or ""

    def merge_map(self, original: JSON, patch: JSON, path: Path) -> JSON:
        if _DIRECTIVE in patch:
            directive = patch.pop(_DIRECTIVE)
            if directive == "replace":
                return patch
            if directive == "delete":
                return {}
            patch[_DIRECTIVE] = directive
            raise _server_error(f"unknown patch type: {_go_v(directive)} in map: {_go_v(patch)}")
        _retain_keys(original, patch)
        self.set_element_order(original, patch, path)
        for raw_key, value in patch.items():
            is_delete = raw_key.startswith(_DELETE_PREFIX)
            key = _split_key(raw_key, _DELETE_PREFIX, _BAD_PRIMITIVE) if is_delete else raw_key
            if value is None:
                original.pop(key, None)
                continue
            current = original.get(key)
            if isinstance(current, dict) and isinstance(value, dict):
                replace = self.strategy((*path, key))[0] == "replace"
                original[key] = value if replace else self.merge_map(current, value, (*path, key))
            elif isinstance(current, list) and isinstance(value, list):
                original[key] = self.merge_list_field(current, value, (*path, key), is_delete)
            elif not is_delete:
                added, keep = _added(value)
                if keep:
                    original[key] = added
                else:
                    original.pop(key, None)
        return original

    def merge_list_field(self, original: list[Any], patch: list[Any], path: Path,
                         is_delete: bool) -> list[Any]:
        strategy, key = self.strategy(path)
        if strategy != "merge":
            return patch
        if not original and not patch:
            return original
        is_map = _element_type(original, patch) is dict
        if not is_map:
            if is_delete:
                return [v for v in original if not any(_go_eq(v, d) for d in patch)]
            merged = _dedup([*original, *patch])
        else:
            if not key:
                raise _server_error("cannot merge lists without merge key for type struct")
            original, patch = _special_elements(original, patch, key)
            merged = self.merge_maps_by_key(original, patch, key, path)
        in_patch, server_only = _partition(merged, patch, key if is_map else "")
        return _normalize_order(in_patch, server_only, patch, original, key if is_map else "")

    def merge_maps_by_key(self, original: list[Any], patch: list[Any], key: str, path: Path) -> list[Any]:
        out = list(original)
        for item in patch:
            if key not in item:
                raise _no_merge_key(item, key)
            index = _find(out, key, item[key])
            if index is None:
                added, keep = _added(item)
                if keep:
                    out.append(added)
            else:
                out[index] = self.merge_map(out[index], item, path)
        return out

    def set_element_order(self, original: JSON, patch: JSON, path: Path) -> None:
        for directive in [k for k in patch if k.startswith(_ORDER_PREFIX)]:
            order = patch.pop(directive)
            key = _split_key(directive, _ORDER_PREFIX, _BAD_ORDER) if isinstance(order, list) else ""
            for value in (order, original.get(key, []), patch.get(key, [])):
                if not isinstance(value, list):
                    raise _bad_arg("[]interface {}", value)
            orig, new = original.get(key, []), patch.get(key, [])
            _, merge_key = self.strategy((*path, key))
            _validate_order(new, order, merge_key)
            if key not in original and key not in patch:
                continue
            if key not in patch:
                merged = list(orig)
            elif key not in original:
                merged = _added(new)[0]
            else:
                merged = self.merge_list_field(orig, new, (*path, key), False)
            by = merge_key if _element_type(orig, new) is dict else ""
            in_order, server_only = _partition(merged, order, by)
            original[key] = _normalize_order(in_order, server_only, order, orig, by)
            patch.pop(key, None)


def _retain_keys(original: JSON, patch: JSON) -> None:
    if _RETAIN not in patch:
        return
    retain = patch.pop(_RETAIN)
    if not isinstance(retain, list):
        raise bad_request(_BAD_RETAIN)
    for k, v in patch.items():
        if v is not None and not k.startswith((_DELETE_PREFIX, _ORDER_PREFIX)) and k not in retain:
            raise bad_request(_BAD_RETAIN)
    for k in [k for k in original if k not in retain]:
        del original[k]


def _element_type(*lists: list[Any]) -> type:
    kinds = {type(v) for items in lists for v in items}
    if not kinds:
        raise _server_error("no elements in any of the given slices")
    if list in kinds:
        raise generic_invalid()  # ErrNoListOfLists
    if len(kinds) > 1:
        raise _server_error(f"list element types are not identical: {_go_v(list(lists))}")
    return kinds.pop()


def _dedup(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in items:
        if not any(_go_eq(v, o) for o in out):
            out.append(v)
    return out


def _special_elements(original: list[Any], patch: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    plain, replace = [], False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
        elif item[_DIRECTIVE] == "delete":
            if key not in item:
                raise _no_merge_key(item, key)
            original = [o for o in original if not (isinstance(o, dict) and _go_eq(o.get(key), item[key]))]
        elif item[_DIRECTIVE] == "replace":
            replace = True
        elif item[_DIRECTIVE] == "merge":
            raise _server_error("merging lists cannot yet be specified in the patch")
        else:
            raise _server_error(f"unknown patch type: {_go_v(item[_DIRECTIVE])} in map: {_go_v(item)}")
    return (plain, []) if replace else (original, plain)


def _find(items: list[Any], key: str, value: Any) -> int | None:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _server_error(f"value for key {i} is not a map.")
        if key in item and _go_eq(item[key], value):
            return i
    return None


def _ident(item: Any, key: str) -> Any:
    return item.get(key) if key and isinstance(item, dict) else None if key else item


def _position(order: list[Any], item: Any, key: str) -> int:
    for i, other in enumerate(order):
        if _go_eq(_ident(item, key), _ident(other, key)):
            return i
    return -1


def _partition(items: list[Any], by: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    inside: list[Any] = []
    outside: list[Any] = []
    for item in items:
        if key and (not isinstance(item, dict) or key not in item):
            raise _no_merge_key(item if isinstance(item, dict) else {}, key)
        (inside if _position(by, item, key) >= 0 else outside).append(item)
    return inside, outside


def _normalize_order(patch_items: list[Any], server_only: list[Any], patch_order: list[Any],
                     server_order: list[Any], key: str) -> list[Any]:
    """Patch items in patch order interleaved with server-only items kept in their live order."""
    left = sorted(server_only, key=lambda v: _position(server_order, v, key))
    right = sorted(patch_items, key=lambda v: _position(patch_order, v, key))
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
            continue
        if i < len(left):
            li, ri = _position(server_order, left[i], key), _position(server_order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
                continue
        out.append(right[j])
        j += 1
    return out


def _validate_order(patch_list: list[Any], order: list[Any], key: str) -> None:
    """The patch list must follow ``$setElementOrder`` (deletions and directives aside)."""
    items = [i for i in patch_list if not (key and isinstance(i, dict) and i.get(_DIRECTIVE) == "delete")]
    pi = oi = 0
    while pi < len(items) and oi < len(order):
        if isinstance(items[pi], dict) and _DIRECTIVE in items[pi]:
            pi += 1
            continue
        if key:
            for side in (items[pi], order[oi]):
                if not isinstance(side, dict):
                    raise _bad_arg("map[string]interface {}", side)
                if key not in side:
                    raise _no_merge_key(side, key)
        if _go_eq(_ident(items[pi], key), _ident(order[oi], key)):
            pi += 1
        oi += 1
    if pi < len(items):
        raise _server_error(f"the order in patch list:\n{_go_v(patch_list)}\n doesn't match "
                            f"{_ORDER_PREFIX} list:\n{_go_v(order)}")
