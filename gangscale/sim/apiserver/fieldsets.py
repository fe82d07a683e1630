"""The typed walks of server-side apply, as sigs.k8s.io/structured-merge-diff's ``typed`` package does them.

Reproduces (structured-merge-diff v4/v6, the library behind kube-apiserver's field manager), over the
paths and sets of ``fieldpath`` (``FieldSet``, ``FieldPath``, ``path_string`` and ``set_of_names`` are
re-exported here):

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

import weakref
from typing import Any

from gangscale.sim.apiserver.fieldpath import (
    PE,
    FieldPath,
    FieldSet,
    freeze,
    path_string,
    pe_string,
    set_of_names,
)
from gangscale.sim.apiserver.goformat import go_quote
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.shapes import ListShape, ListType, Path, Shape

__all__ = [
    "MISSING", "PE", "Comparison", "FieldPath", "FieldSet", "TypedError", "compare", "compare_normalized",
    "ensure_named",
    "item_pe", "json_equal", "merge", "names", "normalize", "path_string", "remove_items", "set_of_names",
    "to_set", "validate",
]


class TypedError(Exception):
    """A value that does not fit its list types (the library's ValidationErrors)."""


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 equals 1.0."""
    kind = type(a)
    if (kind is dict or kind is list) and a == b:
        # Python's == (in C) already holds but for booleans against numbers; equal reprs rule those out too (True
        # prints as True, 1 as 1), at C speed. NaN, which == between containers takes as equal to itself, is left
        # to the walk below.
        text = repr(a)
        if text == repr(b) and "nan" not in text:
            return True
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, int | float):
        return isinstance(b, int | float) and a == b
    return type(a) is type(b) and a == b


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
    return _index_items(items, path, shape.list_shape(names(path)))


def _index_items(items: Any, path: FieldPath, ls: ListShape) -> dict[PE, Any]:
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
        # Most of an object is unchanged by a write: an equal subtree adds, modifies and removes nothing, and
        # comparing it (``==`` in C first, then JSON's own equality, in which true is not 1) is far cheaper than
        # walking it field by field.
        if lhs is not MISSING and rhs is not MISSING and lhs == rhs and json_equal(lhs, rhs):
            return
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


class _Level:
    """What a shape says of one names path, asked once: the walks below go down a tree of these by field name
    instead of hashing the whole path at every node (five lookups a node, each hashing a tuple as deep as it)."""

    __slots__ = ("_kids", "list_atomic", "list_shape", "map_atomic", "npath", "shape", "zero")

    #: Children remembered per level at most: the keys of a free-form map (labels, a CRD's unknown fields) are data.
    MAX_CHILDREN = 1024

    def __init__(self, shape: Shape, npath: Path) -> None:
        self.shape, self.npath = shape, npath
        self.zero = shape.zero_fields(npath)
        self.map_atomic = bool(npath) and shape.map_atomic(npath)
        self.list_shape = shape.list_shape(npath)
        self.list_atomic = self.list_shape.type is ListType.ATOMIC
        self._kids: dict[str, _Level] = {}

    def child(self, name: str) -> _Level:
        level = self._kids.get(name)
        if level is None:
            level = _Level(self.shape, (*self.npath, name))
            if len(self._kids) < self.MAX_CHILDREN:
                self._kids[name] = level
        return level


_LEVELS: weakref.WeakKeyDictionary[Any, _Level] = weakref.WeakKeyDictionary()


def _root_level(shape: Shape) -> _Level:
    try:
        level = _LEVELS.get(shape)
    except TypeError:  # a shape that cannot be weakly referenced: not remembered
        return _Level(shape, ())
    if level is None:
        level = _LEVELS[shape] = _Level(shape, ())
    return level


class _NormalizingComparison(Comparison):
    """``Compare`` of the normalized values (``normalize``) of two raw ones, normalizing only the containers it
    walks into: a subtree equal on both sides is skipped before it is normalized (normalizing both whole objects
    first, two deep copies, cost more than the comparison of a write that changes a few fields).

    Each step is the parent class's on the normalized values: raw values that are equal normalize equal; a walked
    container is normalized one level (``_shallow``: the zero fields it lacks, its children still raw) so that its
    truthiness, key order, list item keys and the children walked are the normalized ones; a container that is
    not walked into (atomic, or empty) is normalized whole before it is compared."""

    def walk_raw(self, lhs: Any, rhs: Any, path: FieldPath, level: _Level) -> None:
        if lhs is MISSING and path:
            self._add_all(rhs, path, level, self._node(path[:-1]))
            return
        if lhs is not MISSING and rhs is not MISSING and lhs == rhs and json_equal(lhs, rhs):
            return
        lhs, rhs = _shallow(lhs, level), _shallow(rhs, level)
        kinds = {type(v) for v in (lhs, rhs) if v is not MISSING and v is not None}
        walked = len(kinds) == 1 and kinds <= {dict, list} and self._descend_raw(lhs, rhs, path, level)
        if not path:
            return
        if lhs is MISSING:
            self.added.insert(path)
        elif rhs is MISSING:
            self.removed.insert(path)
        elif not walked and not json_equal(normalize(lhs, self.shape, level.npath),
                                           normalize(rhs, self.shape, level.npath)):
            self.modified.insert(path)

    def _node(self, path: FieldPath) -> FieldSet:
        """The node of ``added`` at ``path``, made if missing."""
        node = self.added
        for pe in path:
            child = node.children.get(pe)
            if child is None:
                child = node.children[pe] = FieldSet()
            node = child
        return node

    def _add_all(self, value: Any, path: FieldPath, level: _Level, parent: FieldSet) -> None:
        """``walk_raw(MISSING, value, path, level)``: every node of the normalized value is added (a created
        object's fields, a new list item's): ``parent`` is ``added``'s node at ``path[:-1]``, ``path`` not empty."""
        value = _shallow(value, level)
        kind = type(value)
        if kind is dict and value and not level.map_atomic:
            node = parent.children.get(path[-1])
            if node is None:
                node = parent.children[path[-1]] = FieldSet()
            for k, v in value.items():
                self._add_all(v, (*path, ("f", k)), level.child(k), node)
        elif kind is list and value and not level.list_atomic:
            node = parent.children.get(path[-1])
            if node is None:
                node = parent.children[path[-1]] = FieldSet()
            for pe, item in _index_items([_shallow(v, level) for v in value], path, level.list_shape).items():
                self._add_all(item, (*path, pe), level, node)
        parent.members.add(path[-1])

    def _descend_raw(self, lhs: Any, rhs: Any, path: FieldPath, level: _Level) -> bool:
        value = lhs if rhs is MISSING or rhs is None else rhs
        if not (lhs or rhs) or (path and (level.map_atomic if isinstance(value, dict) else level.list_atomic)):
            return False
        if isinstance(value, dict):
            lm, rm = lhs if isinstance(lhs, dict) else {}, rhs if isinstance(rhs, dict) else {}
            for k in [*lm, *(k for k in rm if k not in lm)]:
                self.walk_raw(lm.get(k, MISSING), rm.get(k, MISSING), (*path, ("f", k)), level.child(k))
            return True
        # List items are normalized at the list's own names path; their keys are read from the normalized items.
        ls = level.list_shape
        left = _index_items([_shallow(v, level) for v in lhs] if isinstance(lhs, list) else [], path, ls)
        right = _index_items([_shallow(v, level) for v in rhs] if isinstance(rhs, list) else [], path, ls)
        for pe, item in right.items():
            self.walk_raw(left.get(pe, MISSING), item, (*path, pe), level)
        for pe, item in left.items():
            if pe not in right:
                self.walk_raw(item, MISSING, (*path, pe), level)
        return True


def _shallow(value: Any, level: _Level) -> Any:
    """``normalize`` one level down: a dict gets the zero fields it lacks (normalized when walked into)."""
    if type(value) is not dict:
        return value
    zero = level.zero
    if not zero or all(k in value for k in zero):
        return value
    return {**value, **{k: json_copy(z) for k, z in zero.items() if k not in value}}


def compare_normalized(lhs: Any, rhs: Any, shape: Shape) -> Comparison:
    """``compare(normalize(lhs, shape), normalize(rhs, shape), shape)``, without normalizing what is equal."""
    out = _NormalizingComparison(shape)
    out.walk_raw(lhs, rhs, (), _root_level(shape))
    return out


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
        return json_copy(rhs)
    if not lhs and not rhs:
        return json_copy(rhs)
    if isinstance(lhs, dict) and isinstance(rhs, dict):
        out = {k: merge(v, rhs[k], shape, (*path, ("f", k))) if k in rhs else json_copy(v)
               for k, v in lhs.items()}
        out.update({k: json_copy(v) for k, v in rhs.items() if k not in lhs})
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
            out.append(json_copy(left[lorder[li]]))
            li += 1
            continue
        if ri < len(rorder):
            pe = rorder[ri]
            out.append(merge(left[pe], right[pe], shape, (*path, pe)) if pe in left
                       else json_copy(right[pe]))
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
        return json_copy(value)
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
        after = _remove(item, sub, shape, (*path, pe)) if sub and pe else json_copy(item)
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
                out[k] = normalize(json_copy(zero), shape, (*path, k))
        return out
    if isinstance(value, list):
        return [normalize(v, shape, path) for v in value]
    return value
