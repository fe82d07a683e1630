"""The three non-apply PATCH bodies, applied as kube-apiserver applies them.

Reproduces:

* ``application/merge-patch+json`` as evanphx/json-patch v4 ``MergePatch`` (RFC 7386 plus its quirks:
  nulls are also pruned from objects nested in newly added values and arrays, a null or scalar patch
  fails with ``Invalid JSON Patch`` (the server answers 500), an array patch replaces the document).
* ``application/json-patch+json`` as evanphx/json-patch v4 ``DecodePatch``/``Apply`` (RFC 6902, ``-``
  index, ``~0``/``~1`` escapes, at most 10000 operations (413), ``test`` of a missing member against
  null passes). An undecodable document is a 400 with Go's decoding message; a patch that fails to
  apply is the 422 ``NewGenericServerResponse`` builds, whose message is the fixed "the server rejected
  our request due to an error in our request" (the underlying error is chained as ``__cause__`` for
  debugging; the real server drops it too).
* ``application/strategic-merge-patch+json`` as k8s.io/apimachinery ``StrategicMergeMapPatch``
  (server side: parallel lists merged, unmatched nulls ignored): merge by ``patchMergeKey``, union of
  primitive lists with the merge strategy, replace otherwise; ``$patch: replace|delete|merge`` in maps
  and list items, ``$retainKeys``, ``$deleteFromPrimitiveList/<f>``, ``$setElementOrder/<f>``; errors
  mapped as ``interpretStrategicMergePatchError`` does (400 for bad directive formats, 422 for lists of
  lists, otherwise 500 with the Go message).

Not reproduced:

* The typed round trip that follows a strategic merge patch of a builtin kind: this module only drops
  ``$``-prefixed keys left in the result (the Go struct would drop them); unknown fields, wrong scalar
  types and defaulting are the caller's business.
* ``test`` compares numbers as JSON values (1 equals 1.0); v4's negative array indexes and its
  leniency for paths without a leading ``/`` are rejected instead.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from gangscale.sim.apiserver.errors import StatusError, bad_request
from gangscale.sim.apiserver.fieldsets import go_float, json_equal
from gangscale.sim.apiserver.shapes import Path, Shape

JSON = dict[str, Any]
MAX_JSON_PATCH_OPERATIONS = 10000
_GENERIC_422 = "the server rejected our request due to an error in our request"


def merge_patch(target: Any, patch: Any) -> Any:
    """A JSON merge patch; never mutates its arguments."""
    if isinstance(patch, list):
        return [_prune_nulls(v) for v in copy.deepcopy(patch)]
    if not isinstance(patch, dict):
        raise StatusError(500, "", "Invalid JSON Patch")
    if not isinstance(target, dict):
        return _prune_nulls(copy.deepcopy(patch))
    doc = copy.deepcopy(target)
    _merge_docs(doc, copy.deepcopy(patch))
    return doc


def _merge_docs(doc: JSON, patch: JSON) -> None:
    for key, value in patch.items():
        if value is None:
            doc.pop(key, None)
        elif not isinstance(doc.get(key), dict):
            doc[key] = _prune_nulls(value)
        elif isinstance(value, dict):
            _merge_docs(doc[key], value)
        else:
            doc[key] = value  # replacing an object with a non-object keeps that value's nulls


def _prune_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value]
    return value


# --- JSON patch ------------------------------------------------------------------------------------

class _PatchFailed(Exception):
    pass


def _go_kind(value: Any) -> str:
    """How Go's decoder names a JSON value in an unmarshal type error."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "string"


def _cannot_unmarshal(value: Any, into: str) -> StatusError:
    return bad_request(f"json: cannot unmarshal {_go_kind(value)} into Go value of type {into}")


def json_patch(target: Any, ops: Any) -> Any:
    """An RFC 6902 patch; never mutates its arguments."""
    if ops is None:
        ops = []
    if not isinstance(ops, list):
        raise _cannot_unmarshal(ops, "jsonpatch.Patch")
    for op in ops:
        if op is not None and not isinstance(op, dict):
            raise _cannot_unmarshal(op, "jsonpatch.Operation")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise StatusError(413, "RequestEntityTooLarge", "Request entity too large: The allowed maximum "
                          f"operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}")
    doc = copy.deepcopy(target)
    try:
        for op in ops:
            doc = _apply_op(doc, op or {})
    except _PatchFailed as exc:
        raise StatusError(422, "Invalid", _GENERIC_422) from exc
    return doc


def _pointer(op: JSON, field: str) -> list[str]:
    raw = op.get(field)
    if not isinstance(raw, str):
        raise _PatchFailed(f"operation missing {field} field")
    if raw == "":
        return []
    if not raw.startswith("/"):
        raise _PatchFailed(f"invalid JSON pointer {raw!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in raw[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and re.fullmatch(r"\d+", token) and int(token) < len(node):
            node = node[int(token)]
        else:
            raise _PatchFailed("doc is missing path")
    if not isinstance(node, dict | list):
        raise _PatchFailed("doc is missing path")
    return node


def _index(node: list[Any], token: str, *, allow_end: bool) -> int:
    limit = len(node) + (1 if allow_end else 0)
    if not re.fullmatch(r"\d+", token) or int(token) >= limit:
        raise _PatchFailed(f"Unable to access invalid index: {token}")
    return int(token)


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    node = _parent(doc, tokens)
    if isinstance(node, dict):
        if tokens[-1] not in node:
            raise _PatchFailed("doc is missing key")
        return node[tokens[-1]]
    return node[_index(node, tokens[-1], allow_end=False)]


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    node = _parent(doc, tokens)
    if isinstance(node, dict):
        node[tokens[-1]] = value
    elif tokens[-1] == "-":
        node.append(value)
    else:
        node.insert(_index(node, tokens[-1], allow_end=True), value)
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _PatchFailed("cannot remove the document root")
    node = _parent(doc, tokens)
    if isinstance(node, dict):
        if tokens[-1] not in node:
            raise _PatchFailed(f"Unable to remove nonexistent key: {tokens[-1]}")
        del node[tokens[-1]]
    else:
        del node[_index(node, tokens[-1], allow_end=False)]
    return doc


def _test(doc: Any, tokens: list[str], op: JSON) -> None:
    node = _parent(doc, tokens) if tokens else None
    missing = isinstance(node, dict) and tokens[-1] not in node
    # v4 passes a test for null (or no value) against a member that is absent or null.
    actual = None if missing else _get(doc, tokens)
    if actual is None and op.get("value") is None:
        return
    if not json_equal(actual, op.get("value")):
        raise _PatchFailed("testing value failed")


def _apply_op(doc: Any, op: JSON) -> Any:
    kind = op.get("op") if isinstance(op.get("op"), str) else "unknown"
    if kind == "add":
        return _add(doc, _pointer(op, "path"), copy.deepcopy(op.get("value")))
    if kind == "remove":
        return _remove(doc, _pointer(op, "path"))
    if kind == "replace":
        tokens = _pointer(op, "path")
        if not tokens:
            return copy.deepcopy(op.get("value"))
        _get(doc, tokens)  # replace needs the member to exist
        node = _parent(doc, tokens)
        node[tokens[-1] if isinstance(node, dict) else _index(node, tokens[-1], allow_end=False)] = (
            copy.deepcopy(op.get("value")))
        return doc
    if kind in ("move", "copy"):
        source = _pointer(op, "from")
        value = copy.deepcopy(_get(doc, source))
        if kind == "move":
            doc = _remove(doc, source)
        return _add(doc, _pointer(op, "path"), value)
    if kind == "test":
        _test(doc, _pointer(op, "path"), op)
        return doc
    raise _PatchFailed(f"Unexpected kind: {kind}")


# --- strategic merge patch -------------------------------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_DELETE_PREFIX = "$deleteFromPrimitiveList"
_ORDER_PREFIX = "$setElementOrder"
_BAD_PRIMITIVE = "invalid patch format of primitive list"
_BAD_RETAIN = "invalid patch format of retainKeys"
_BAD_ORDER = "invalid patch format of setElementOrder list"


def _go_v(value: Any) -> str:
    """Go's %v of a decoded JSON value."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_v(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_v(v) for v in value) + "]"
    return str(value)


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
        raise _cannot_unmarshal(patch, "map[string]interface {}")
    merged: JSON = _strip_dollar_keys(_Smp(shape).merge_map(copy.deepcopy(target), copy.deepcopy(patch), ()))
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
    return _remove_directives(_prune_nulls(value))


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
        raise StatusError(422, "Invalid", _GENERIC_422)  # ErrNoListOfLists
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
