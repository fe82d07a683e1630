"""Field paths and field sets, as sigs.k8s.io/structured-merge-diff's ``fieldpath`` package has them.

Reproduces (structured-merge-diff v4/v6, the library behind kube-apiserver's field manager):

* path elements ``f:`` (field), ``k:`` (list-map key, key fields sorted by name), ``v:`` (set value) and
  ``i:`` (index), their total order (fields < keys < values < indexes; numbers < strings < bools <
  lists < maps < null) and their human form (``.spec.containers[name="c"].ports[containerPort=80,
  protocol="TCP"]``, ``[="x"]``, ``[3]``);
* ``Set``: members and children, union / intersection / difference / recursive difference, and the
  preorder iteration (members first, then children, in order);
* the ``FieldsV1`` wire form: members first merged with children in order, ``.`` for a node that is
  itself a member and has children, ``{}`` for leaves, and its decoding (element types the library does
  not know are dropped).

Not reproduced:

* Values in the human form of a path print as ``value.ToString`` does except for floats, which print in
  JSON notation (``1000000``) where the library uses Go's ``%v`` (``1e+06``); maps print as
  ``{k=v;k2=v2}`` (library releases differ in how they join the pairs).
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from gangscale.sim.apiserver.goformat import go_json, go_quote, go_scalar
from gangscale.sim.apiserver.shapes import Path

PE = tuple[str, Any]
FieldPath = tuple[PE, ...]
_RANK = {"f": 0, "k": 1, "v": 2, "i": 3}


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


# --- human and wire forms --------------------------------------------------------------------------

def value_string(value: Any) -> str:
    """The library's value.ToString, used in paths."""
    if value is None:
        return "null"
    scalar = go_scalar(value, "exact")
    if scalar is not None:
        return scalar
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


_KEY_WIRE: dict[Any, str] = {}
_FIELD_WIRE: dict[str, str] = {}
#: The FieldsV1 forms built, hash-consed: a node's dict is shared by every entry whose subtree there is the same, and
#: every leaf is one empty dict. The managedFields of objects made from one template (pods of a Deployment, whose
#: entries differ in nothing but their time) then share all of their FieldsV1 — half of such an object's JSON, and
#: most of its memory as dicts. They are parts of stored objects, which are never changed in place (nor are these
#: changed by anything that reads them). A key holds the ids of its children, alive as long as its dict is; the
#: table is emptied when it reaches _CANONICAL_MAX nodes (the objects keep what they hold).
_LEAF: dict[str, Any] = {}
_CANONICAL: dict[tuple[Any, ...], dict[str, Any]] = {}
_CANONICAL_MAX = 1 << 17


def _pe_wire(pe: PE) -> str:
    kind, payload = pe
    if kind == "f":
        text = _FIELD_WIRE.get(payload)
        if text is None:
            if len(_FIELD_WIRE) > 1 << 16:
                _FIELD_WIRE.clear()
            text = _FIELD_WIRE[payload] = "f:" + payload
        return text
    if kind == "k":
        # Keys of strings only (a container's name, a condition's type) are cached: equal payloads print alike
        # (a number is not cached: 1e21 equals 10**21 and prints otherwise).
        cacheable = all(v[0] == 1 for _, v in payload)
        if cacheable:
            text = _KEY_WIRE.get(payload)
            if text is not None:
                return text
        text = "k:{" + ",".join(f"{go_json(n, exact=True)}:{go_json(thaw(v), exact=True)}" for n, v in payload) + "}"
        if cacheable:
            if len(_KEY_WIRE) > 1 << 16:
                _KEY_WIRE.clear()
            _KEY_WIRE[payload] = text
        return text
    if kind == "v":
        return "v:" + go_json(thaw(payload), exact=True)
    return f"i:{payload}"


@functools.lru_cache(maxsize=1 << 16)
def _pe_from_wire(key: str) -> PE | None:
    """(Cached: objects of one kind repeat the same keys, and a path element is an immutable tuple.)"""
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
            child = node.children.get(pe)
            if child is None:
                child = node.children[pe] = FieldSet()
            node = child
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
        """(``self`` itself when ``other`` takes nothing from it: sets are not changed once built, and an entry that
        keeps its set keeps its wire form, see ``to_fields_v1``.)"""
        if other.empty():
            return self
        kids = {pe: c.difference(other.children[pe]) if pe in other.children else c
                for pe, c in self.children.items()}
        members = self.members - other.members
        if len(members) == len(self.members) and all(kids[pe] is c for pe, c in self.children.items()):
            return self
        return FieldSet(members, {pe: c for pe, c in kids.items() if not c.empty()})

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
        if not include_self:
            known = _SET_WIRE.get(id(self))
            if known is not None and known[0] is self:
                return known[1]
            out = self._wire(False)
            _remember(self, out)
            return out
        return self._wire(include_self)

    def _wire(self, include_self: bool) -> dict[str, Any]:
        members, children = self.members, self.children
        pes = members | children.keys() if children else members
        items = [(_pe_wire(pe), children[pe]._wire(pe in members) if pe in children else _LEAF)
                 for pe in (sorted(pes, key=pe_order) if len(pes) > 1 else pes)]
        dot = include_self and bool(pes)
        # Hash-consed: equal wire forms are one dict (see _CANONICAL), found by their keys and children's identities.
        key = (dot, *((k, id(v)) for k, v in items))
        out = _CANONICAL.get(key)
        if out is None:
            out = {".": _LEAF} if dot else {}
            out.update(items)
            if len(_CANONICAL) >= _CANONICAL_MAX:
                _CANONICAL.clear()
            _CANONICAL[key] = out
        return out

    @classmethod
    def from_fields_v1(cls, obj: Any) -> FieldSet:
        known = _WIRE_SET.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        found, _ = cls._read(obj)
        out = found or cls()
        _remember(out, obj)
        return out

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


# The wire forms built or read lately, both ways. A FieldSet is not changed once built (the set operations build new
# ones, sharing unchanged children), nor is a FieldsV1 dict once it is part of an object (stored objects are never
# changed in place), so an entry a write keeps is not encoded again, and one read back from the object it was
# written into is not decoded again (a managedFields entry is read and written on every write). Each holds both
# objects, so an id is not reused while it is remembered; the last _REMEMBERED pairs are kept.
_REMEMBERED = 512
_SET_WIRE: OrderedDict[int, tuple[FieldSet, dict[str, Any]]] = OrderedDict()
_WIRE_SET: OrderedDict[int, tuple[Any, FieldSet]] = OrderedDict()


def _remember(fields: FieldSet, wire: dict[str, Any]) -> None:
    _SET_WIRE[id(fields)] = (fields, wire)
    _WIRE_SET[id(wire)] = (wire, fields)
    while len(_SET_WIRE) > _REMEMBERED:
        _SET_WIRE.popitem(last=False)
    while len(_WIRE_SET) > _REMEMBERED:
        _WIRE_SET.popitem(last=False)


def set_of_names(*paths: Path) -> FieldSet:
    return FieldSet.of(*(tuple(("f", n) for n in p) for p in paths if p))
