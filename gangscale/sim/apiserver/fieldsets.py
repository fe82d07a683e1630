"""Field sets and the typed walks of server-side apply, as sigs.k8s.io/structured-merge-diff does them.

Reproduces (structured-merge-diff v4/v6, the library behind kube-apiserver's field manager):

* path elements ``f:`` (field), ``k:`` (list-map key, key fields sorted by name), ``v:`` (set value) and
  ``i:`` (index), their total order (fields < keys < values < indexes; numbers < strings < bools <
  lists < maps < null) and their human form (``.spec.containers[name="c"].ports[containerPort=80,
  protocol="TCP"]``, ``[="x"]``, ``[3]``);
* the ``FieldsV1`` wire form: members first merged with children in order, ``.`` for a node that is
  itself a member and has children, ``{}`` for leaves, and its decoding;
* ``ToFieldSet`` (declared struct fields are owned through their children, granular map keys and list
  items are owned themselves, atomic lists/maps are leaves), ``Compare`` (added / modified / removed,
  with a node recorded when it appears or disappears as a whole), ``Merge`` (apply's list ordering),
  ``RemoveItems`` (v6: emptied containers stay ``{}``/``[]``), ``EnsureNamedFieldsAreMembers`` and
  typed validation of list keys (``duplicate entries for key``, ``omits key field``).

Not reproduced:

* Scalar type checking and ``field not declared in schema`` errors; a JSON ``null`` is always treated as
  a scalar leaf (the library skips a null declared struct or list).
* Unions, schema-change reconciliation and version conversion (one version per resource).
* Merging onto a live list with duplicate keys keeps the first item (newer library versions treat
  such items atomically).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from gangscale.sim.apiserver.shapes import ListShape, ListType, Path, Shape

PE = tuple[str, Any]
FieldPath = tuple[PE, ...]
_RANK = {"f": 0, "k": 1, "v": 2, "i": 3}


class TypedError(Exception):
    """A value that does not fit its list types (the library's ValidationErrors)."""


def freeze(value: Any) -> tuple[Any, ...]:
    """A hashable form whose tuple order is the library's value order."""
    if value is None:
        return (5,)
    if isinstance(value, bool):
        return (2, value)
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, list):
        return (3, tuple(freeze(v) for v in value))
    return (4, tuple(sorted((k, freeze(v)) for k, v in value.items())))


def thaw(frozen: tuple[Any, ...]) -> Any:
    tag = frozen[0]
    if tag == 5:
        return None
    if tag == 3:
        return [thaw(v) for v in frozen[1]]
    if tag == 4:
        return {k: thaw(v) for k, v in frozen[1]}
    return frozen[1]


def pe_order(pe: PE) -> tuple[int, Any]:
    return _RANK[pe[0]], pe[1]


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, int | float):
        return isinstance(b, int | float) and a == b
    return type(a) is type(b) and a == b


# --- Go formatting ---------------------------------------------------------------------------------

_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                 "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json(value: Any) -> str:
    """Compact JSON as Go's encoding/json writes it (sorted keys, HTML-safe escapes)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        out = "".join(_JSON_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 else c) for c in value)
        return f'"{out}"'
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    return "{" + ",".join(f"{go_json(k)}:{go_json(value[k])}" for k in sorted(value)) + "}"


def go_float(value: float) -> str:
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if 1e-6 <= abs(value) < 1e21:
        return format(Decimal(repr(value)), "f")
    mantissa, _, exp = repr(value).partition("e")
    return f"{mantissa}e{exp[0]}{exp[1:].lstrip('0') or '0'}"


def go_quote(text: str) -> str:
    """Go's %q (strconv.Quote)."""
    short = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
             '"': '\\"', "\\": "\\\\"}
    parts = []
    for c in text:
        if c in short:
            parts.append(short[c])
        elif c.isprintable():
            parts.append(c)
        else:
            code = ord(c)
            parts.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code < 0x10000
                         else f"\\U{code:08x}")
    return '"' + "".join(parts) + '"'


def value_string(value: Any) -> str:
    """The library's value.ToString, used in paths."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list):
        return "[" + ",".join(value_string(v) for v in value) + "]"
    return "{" + ";".join(f"{k}={value_string(v)}" for k, v in sorted(value.items())) + "}"


def pe_string(pe: PE) -> str:
    kind, payload = pe
    if kind == "f":
        return f".{payload}"
    if kind == "k":
        return "[" + ",".join(f"{name}={value_string(thaw(v))}" for name, v in payload) + "]"
    if kind == "v":
        return f"[={value_string(thaw(payload))}]"
    return f"[{payload}]"


def path_string(path: FieldPath) -> str:
    return "".join(pe_string(pe) for pe in path)


def _pe_wire(pe: PE) -> str:
    kind, payload = pe
    if kind == "f":
        return f"f:{payload}"
    if kind == "k":
        return "k:{" + ",".join(f"{go_json(n)}:{go_json(thaw(v))}" for n, v in payload) + "}"
    if kind == "v":
        return "v:" + go_json(thaw(payload))
    return f"i:{payload}"


def _pe_from_wire(key: str) -> PE | None:
    if len(key) < 2 or key[1] != ":":
        raise ValueError(f"invalid path element {key!r}")
    body = key[2:]
    if key[0] == "f":
        return ("f", body)
    if key[0] == "k":
        fields = json.loads(body)
        if not isinstance(fields, dict):
            raise ValueError(f"invalid key path element {key!r}")
        return ("k", tuple(sorted((n, freeze(v)) for n, v in fields.items())))
    if key[0] == "v":
        return ("v", freeze(json.loads(body)))
    if key[0] == "i":
        return ("i", int(body))
    return None  # the library drops element types it does not know


# --- sets ------------------------------------------------------------------------------------------

class FieldSet:
    """A set of field paths: ``members`` here, ``children`` sets below (never empty)."""

    __slots__ = ("children", "members")

    def __init__(self, members: set[PE] | None = None, children: dict[PE, FieldSet] | None = None) -> None:
        self.members: set[PE] = members if members is not None else set()
        self.children: dict[PE, FieldSet] = children if children is not None else {}

    @classmethod
    def of(cls, *paths: FieldPath) -> FieldSet:
        out = cls()
        for p in paths:
            out.insert(p)
        return out

    def insert(self, path: FieldPath) -> None:
        node = self
        for pe in path[:-1]:
            node = node.children.setdefault(pe, FieldSet())
        node.members.add(path[-1])

    def has(self, path: FieldPath) -> bool:
        node: FieldSet | None = self
        for pe in path[:-1]:
            node = node.children.get(pe) if node else None
        return node is not None and path[-1] in node.members

    def empty(self) -> bool:
        return not self.members and not self.children

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, FieldSet) and self.members == other.members
                and self.children == other.children)

    __hash__ = None  # type: ignore[assignment]

    def union(self, other: FieldSet) -> FieldSet:
        kids = {pe: c.union(other.children[pe]) if pe in other.children else c
                for pe, c in self.children.items()}
        kids.update({pe: c for pe, c in other.children.items() if pe not in self.children})
        return FieldSet(self.members | other.members, kids)

    def intersection(self, other: FieldSet) -> FieldSet:
        kids = {pe: c.intersection(other.children[pe])
                for pe, c in self.children.items() if pe in other.children}
        return FieldSet(self.members & other.members, {pe: c for pe, c in kids.items() if not c.empty()})

    def difference(self, other: FieldSet) -> FieldSet:
        kids = {pe: c.difference(other.children[pe]) if pe in other.children else c
                for pe, c in self.children.items()}
        return FieldSet(self.members - other.members, {pe: c for pe, c in kids.items() if not c.empty()})

    def recursive_difference(self, other: FieldSet) -> FieldSet:
        """Also drops whole subtrees under members of ``other``."""
        kids = {pe: c.recursive_difference(other.children[pe]) if pe in other.children else c
                for pe, c in self.children.items() if pe not in other.members}
        return FieldSet(self.members - other.members, {pe: c for pe, c in kids.items() if not c.empty()})

    def paths(self, prefix: FieldPath = ()) -> Iterator[FieldPath]:
        """Members first, then children, in order (the library's preorder Iterate)."""
        for pe in sorted(self.members, key=pe_order):
            yield (*prefix, pe)
        for pe in sorted(self.children, key=pe_order):
            yield from self.children[pe].paths((*prefix, pe))

    def to_fields_v1(self, include_self: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if include_self and not self.empty():
            out["."] = {}
        for pe in sorted(self.members | set(self.children), key=pe_order):
            child = self.children.get(pe)
            out[_pe_wire(pe)] = child.to_fields_v1(pe in self.members) if child is not None else {}
        return out

    @classmethod
    def from_fields_v1(cls, obj: Any) -> FieldSet:
        found, _ = cls._read(obj)
        return found or cls()

    @classmethod
    def _read(cls, obj: Any) -> tuple[FieldSet | None, bool]:
        if not isinstance(obj, dict):
            raise ValueError("fieldsV1 must be a JSON object")
        node: FieldSet | None = None
        is_member = False
        for key, val in obj.items():
            if key == ".":
                is_member = True
                continue
            pe = _pe_from_wire(key)
            if pe is None:
                continue
            grand, child_member = cls._read(val)
            node = node or cls()
            if child_member:
                node.members.add(pe)
            if grand is not None:
                node.children[pe] = grand
        return node, is_member or node is None


def set_of_names(*paths: Path) -> FieldSet:
    return FieldSet.of(*(tuple(("f", n) for n in p) for p in paths if p))


# --- typed walks -----------------------------------------------------------------------------------
# The schema is asked with the field names of a path; list elements do not change it.

def names(path: FieldPath) -> Path:
    return tuple(pe[1] for pe in path if pe[0] == "f")


def item_pe(item: Any, index: int, ls: ListShape) -> PE:
    """The path element of a list item; TypedError with the library's message if it has none."""
    if ls.type is ListType.ATOMIC:
        return ("i", index)
    if ls.type is ListType.SET:
        if isinstance(item, dict):
            raise TypedError("associative list without keys has an element that's a map type")
        if isinstance(item, list):
            raise TypedError("not supported: associative list with lists as elements")
        if item is None:
            raise TypedError("associative list without keys has an element that's an explicit null")
        return ("v", freeze(item))
    if item is None:
        raise TypedError("associative list with keys may not have a null element")
    if not isinstance(item, dict):
        raise TypedError("associative list with keys may not have non-map elements")
    defaults = dict(ls.key_defaults)
    fields = []
    for key in ls.keys:
        if key not in item and key not in defaults:
            raise TypedError(f"associative list with keys has an element that omits key field "
                             f"{go_quote(key)} (and doesn't have default value)")
        fields.append((key, freeze(item[key] if key in item else defaults[key])))
    return ("k", tuple(sorted(fields)))


def _index(items: Any, path: FieldPath, shape: Shape) -> dict[PE, Any]:
    """Items by path element; repeats are ignored as the library does for live objects."""
    ls = shape.list_shape(names(path))
    out: dict[PE, Any] = {}
    for i, item in enumerate(items if isinstance(items, list) else []):
        try:
            out.setdefault(item_pe(item, i, ls), item)
        except TypedError as exc:
            raise TypedError(f"{path_string(path)}: element {i}: {exc}") from None
    return out


def _atomic(value: Any, path: FieldPath, shape: Shape) -> bool:
    if isinstance(value, dict):
        return bool(path) and shape.map_atomic(names(path))
    return shape.list_shape(names(path)).type is ListType.ATOMIC


def validate(value: Any, shape: Shape, path: FieldPath = ()) -> list[str]:
    """The list-key errors the library reports when it types an applied configuration."""
    errors: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            errors += validate(v, shape, (*path, ("f", k)))
    elif isinstance(value, list):
        ls, seen = shape.list_shape(names(path)), set()
        for i, item in enumerate(value):
            try:
                pe = item_pe(item, i, ls)
            except TypedError as exc:
                errors.append(f"{path_string(path)}: element {i}: {exc}")
                continue
            if pe in seen:
                errors.append(f"{path_string(path)}: duplicate entries for key {pe_string(pe)}")
                continue
            seen.add(pe)
            errors += validate(item, shape, (*path, pe))
    return errors


def to_set(value: Any, shape: Shape, path: FieldPath = (), out: FieldSet | None = None) -> FieldSet:
    """ToFieldSet: every field the value sets, as the library counts ownership."""
    out = FieldSet() if out is None else out
    if isinstance(value, dict | list) and path and _atomic(value, path, shape):
        out.insert(path)
    elif isinstance(value, dict):
        for k, v in value.items():
            child = (*path, ("f", k))
            to_set(v, shape, child, out)
            if not shape.is_field(names(child)):
                out.insert(child)
    elif isinstance(value, list):
        ls = shape.list_shape(names(path))
        for i, item in enumerate(value):
            try:
                child = (*path, item_pe(item, i, ls))
            except TypedError:
                continue
            to_set(item, shape, child, out)
            out.insert(child)
    elif path:
        out.insert(path)
    return out


class Comparison:
    """Compare's result: what the right side added, modified and removed."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.added, self.modified, self.removed = FieldSet(), FieldSet(), FieldSet()

    def exclude(self, ignored: FieldSet) -> Comparison:
        out = Comparison(self.shape)
        out.added = self.added.recursive_difference(ignored)
        out.modified = self.modified.recursive_difference(ignored)
        out.removed = self.removed.recursive_difference(ignored)
        return out

    def walk(self, lhs: Any, rhs: Any, path: FieldPath) -> None:
        kinds = {type(v) for v in (lhs, rhs) if v is not MISSING and v is not None}
        walked = len(kinds) == 1 and kinds <= {dict, list} and self._descend(lhs, rhs, path)
        if not path:
            return
        if lhs is MISSING:
            self.added.insert(path)
        elif rhs is MISSING:
            self.removed.insert(path)
        elif not walked and not json_equal(lhs, rhs):
            self.modified.insert(path)

    def _descend(self, lhs: Any, rhs: Any, path: FieldPath) -> bool:
        """Walk a granular container's children; False for a leaf (atomic, or empty on both sides)."""
        value = lhs if rhs is MISSING or rhs is None else rhs
        if not (lhs or rhs) or (path and _atomic(value, path, self.shape)):
            return False
        if isinstance(value, dict):
            lm, rm = lhs if isinstance(lhs, dict) else {}, rhs if isinstance(rhs, dict) else {}
            for k in [*lm, *(k for k in rm if k not in lm)]:
                self.walk(lm.get(k, MISSING), rm.get(k, MISSING), (*path, ("f", k)))
            return True
        left, right = _index(lhs, path, self.shape), _index(rhs, path, self.shape)
        for pe, item in right.items():
            self.walk(left.get(pe, MISSING), item, (*path, pe))
        for pe, item in left.items():
            if pe not in right:
                self.walk(item, MISSING, (*path, pe))
        return True


class _Missing:
    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


def compare(lhs: Any, rhs: Any, shape: Shape) -> Comparison:
    out = Comparison(shape)
    out.walk(lhs, rhs, ())
    return out


def merge(lhs: Any, rhs: Any, shape: Shape, path: FieldPath = ()) -> Any:
    """Merge an applied configuration (rhs) into the live object (lhs), the library's way."""
    if rhs is None and isinstance(lhs, dict | list):
        rhs = type(lhs)()  # a null container merges like an empty one: the live value stays
    if not (isinstance(lhs, dict | list) and type(lhs) is type(rhs)) or (path and _atomic(rhs, path, shape)):
        return copy.deepcopy(rhs)
    if not lhs and not rhs:
        return copy.deepcopy(rhs)
    if isinstance(lhs, dict) and isinstance(rhs, dict):
        out = {k: merge(v, rhs[k], shape, (*path, ("f", k))) if k in rhs else copy.deepcopy(v)
               for k, v in lhs.items()}
        out.update({k: copy.deepcopy(v) for k, v in rhs.items() if k not in lhs})
        return out
    return _merge_list(_index(lhs, path, shape), _index(rhs, path, shape), path, shape)


def _merge_list(left: dict[PE, Any], right: dict[PE, Any], path: FieldPath, shape: Shape) -> list[Any]:
    """Items of both sides: shared ones in the applied order, live-only ones kept where they were."""
    lorder, rorder = list(left), list(right)
    shared = iter([pe for pe in rorder if pe in left])
    next_shared = next(shared, None)
    out: list[Any] = []
    li = ri = 0
    while li < len(lorder) or ri < len(rorder):
        if li < len(lorder) and ri < len(rorder):
            pe = lorder[li]
            if pe == rorder[ri]:
                out.append(merge(left[pe], right[pe], shape, (*path, pe)))
                li, ri, next_shared = li + 1, ri + 1, next(shared, None)
                continue
            if pe in right and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(lorder) and lorder[li] not in right:
            out.append(copy.deepcopy(left[lorder[li]]))
            li += 1
            continue
        if ri < len(rorder):
            pe = rorder[ri]
            out.append(merge(left[pe], right[pe], shape, (*path, pe)) if pe in left
                       else copy.deepcopy(right[pe]))
            ri += 1
            if next_shared == pe:
                next_shared = next(shared, None)
    return out


def remove_items(value: Any, remove: FieldSet, shape: Shape) -> Any:
    """RemoveItems: drop every member of ``remove`` (and what is under it) from the value."""
    out = _remove(value, remove, shape, ())
    return {} if out is None else out


def _remove(value: Any, remove: FieldSet, shape: Shape, path: FieldPath) -> Any:
    """None where the library's walker produces no value (an empty or atomic container)."""
    if not isinstance(value, dict | list):
        return copy.deepcopy(value)
    if not value or (path and _atomic(value, path, shape)):
        return None
    pairs: list[tuple[PE | None, Any]]
    if isinstance(value, dict):
        pairs = [(("f", k), v) for k, v in value.items()]
    else:
        ls = shape.list_shape(names(path))
        pairs = [(_safe_pe(item, i, ls), item) for i, item in enumerate(value)]
    kept, matched = [], False
    for pe, item in pairs:
        if pe in remove.members:
            continue
        sub = remove.children.get(pe) if pe is not None else None
        matched = matched or sub is not None
        after = _remove(item, sub, shape, (*path, pe)) if sub and pe else copy.deepcopy(item)
        # v6 keeps a container it emptied rather than turning it into null.
        kept.append((pe, type(item)() if after is None and isinstance(item, dict | list) else after))
    if not kept and not matched:
        return None
    return {pe[1]: v for pe, v in kept if pe} if isinstance(value, dict) else [v for _, v in kept]


def _safe_pe(item: Any, index: int, ls: ListShape) -> PE | None:
    try:
        return item_pe(item, index, ls)
    except TypedError:
        return None


def ensure_named(fields: FieldSet, shape: Shape, path: FieldPath = ()) -> FieldSet:
    """EnsureNamedFieldsAreMembers: a declared struct field with owned children is owned too."""
    members = set(fields.members)
    for pe in fields.children:
        if pe[0] == "f" and shape.is_field(names((*path, pe))):
            members.add(pe)
    return FieldSet(members, {pe: ensure_named(c, shape, (*path, pe)) for pe, c in fields.children.items()})


def normalize(value: Any, shape: Shape, path: Path = ()) -> Any:
    """Fill in what the Go zero value serialises, as the typed objects the real server compares do."""
    if isinstance(value, dict):
        out = {k: normalize(v, shape, (*path, k)) for k, v in value.items()}
        for k, zero in shape.zero_fields(path).items():
            if k not in out:
                out[k] = normalize(copy.deepcopy(zero), shape, (*path, k))
        return out
    if isinstance(value, list):
        return [normalize(v, shape, path) for v in value]
    return value
