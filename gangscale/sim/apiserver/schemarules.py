"""CRD schema rules checked after kube-openapi: list-type uniqueness and ``self == oldSelf`` transitions.

Reproduces apiextensions-apiserver's ``listtype.ValidateListSetsAndMaps`` (``x-kubernetes-list-type``
``set``: whole items unique; ``map``: items must be objects, keys unique; the error is ``Duplicate value:``
with the key object as compact JSON, e.g. ``{"type":"Ready"}``, at the first repeat of each key, keys
compared by type and value so ``1``, ``1.0`` and ``"1"`` differ) and, of the CEL validator
(``schema/cel/validation.go``), only rules whose expression is exactly ``self == oldSelf``: evaluated on
update when the new value and a correlated old value both exist (object fields by name, map entries by
key, list-type=map items by key; other list items never correlate, so rules under them never run). A
failure is ``Invalid value`` with the value omitted for objects/arrays and printed for scalars (1.35+;
1.34 and older printed the schema type, ``"array"``), the rule's trimmed ``message`` or ``failed rule:
<rule>``, and the rule's ``reason`` (Forbidden/Required/Duplicate) and ``fieldPath`` honoured.

Not reproduced: any other CEL expression (ignored), ``messageExpression``, cost budgets, and the
``optionalOldSelf`` mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.fielderrors import FieldError

Schema = dict[str, Any]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""No correlated old value (create, or the field/item is new)."""


def deep_equal(a: Any, b: Any) -> bool:
    """``reflect.DeepEqual`` on decoded JSON: 1, 1.0 and True are three different values."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# --- list-type map correlation -----------------------------------------------------------------------------

def map_list_correlator(s: Schema, old: Any) -> Callable[[Any], Any]:
    """For a list-type=map list, find an item's old counterpart by its keys; other lists never correlate."""
    keys: list[str] = s.get("x-kubernetes-list-map-keys") or []
    if s.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old, list):
        return lambda _item: MISSING

    def key_of(item: Any) -> str | None:
        return fe.go_json({k: item.get(k) for k in keys}) if isinstance(item, dict) else None

    by_key = {key_of(o): o for o in reversed(old) if key_of(o) is not None}
    return lambda item: by_key.get(key_of(item), MISSING) if key_of(item) is not None else MISSING


# --- x-kubernetes-list-type uniqueness ------------------------------------------------------------------

def _identity(x: Any) -> str:
    # Go keys scalars by (type, value) and compounds by their JSON; "1", 1, 1.0 and true all differ.
    return f"{type(x).__name__}:{fe.go_json(x)}"


def _repeats(values: list[Any]) -> list[int]:
    """Indices of the first repeat of each duplicated value."""
    counts: dict[str, int] = {}
    out: list[int] = []
    for i, x in enumerate(values):
        ident = _identity(x)
        counts[ident] = counts.get(ident, 0) + 1
        if counts[ident] == 2:
            out.append(i)
    return out


def _list_map_errors(path: str, s: Schema, items: list[Any]) -> list[FieldError]:
    for i, x in enumerate(items):
        if x is not None and not isinstance(x, dict):
            return [fe.invalid(f"{path}[{i}]", x, "must be an object for an array of list-type map")]
    keys: list[str] = s.get("x-kubernetes-list-map-keys") or []
    unset = object()
    if len(keys) == 1:
        raw = [(x or {}).get(keys[0], unset) for x in items]
        ids = [{} if r is unset else {keys[0]: r} for r in raw]
        marks = [("unset" if r is unset else _identity(r)) for r in raw]
    else:
        ids = [{k: (x or {})[k] for k in keys if k in (x or {})} for x in items]
        marks = [fe.go_json(i) for i in ids]
    seen: dict[str, int] = {}
    errs: list[FieldError] = []
    for i, mark in enumerate(marks):
        seen[mark] = seen.get(mark, 0) + 1
        if seen[mark] == 2:
            errs.append(fe.duplicate(f"{path}[{i}]", ids[i]))
    return errs


def list_type_errors(obj: Any, s: Schema | None, path: str = "") -> list[FieldError]:
    if not isinstance(s, dict):
        return []
    errs: list[FieldError] = []
    if isinstance(obj, dict):
        extra = s.get("additionalProperties")
        for key, value in obj.items():
            if isinstance(extra, dict):
                errs += list_type_errors(value, extra, f"{path}[{key}]")
            if key in (s.get("properties") or {}):
                errs += list_type_errors(value, s["properties"][key], fe.child(path, key))
    elif isinstance(obj, list):
        list_type = s.get("x-kubernetes-list-type")
        if list_type == "set":
            errs += [fe.duplicate(f"{path}[{i}]", obj[i]) for i in _repeats(obj)]
        elif list_type == "map":
            errs += _list_map_errors(path, s, obj)
        errs += [e for i, x in enumerate(obj) for e in list_type_errors(x, s.get("items"), f"{path}[{i}]")]
    return errs


# --- x-kubernetes-validations: transition rule self == oldSelf ----------------------------------------------

_REASONS: dict[str, Callable[[str, Any, str], FieldError]] = {
    "FieldValueForbidden": lambda p, _v, d: fe.forbidden(p, d),
    "FieldValueRequired": lambda p, _v, d: fe.required(p, d),
    "FieldValueDuplicate": lambda p, v, _d: fe.duplicate(p, v),
}


def _rule_errors(new: Any, old: Any, s: Schema, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for rule in s.get("x-kubernetes-validations") or []:
        if str(rule.get("rule", "")).strip() != "self == oldSelf" or deep_equal(new, old):
            continue
        detail = str(rule.get("message") or "").strip() or f"failed rule: {str(rule['rule']).strip()}"
        rule_path = path
        if rule.get("fieldPath"):
            rule_path = fe.child(path, str(rule["fieldPath"]).lstrip("."))
        value = fe.OMIT if s.get("type") in ("object", "array") else new
        make = _REASONS.get(str(rule.get("reason") or ""), fe.invalid)
        errs.append(make(rule_path, value, detail))
    return errs


def transition_rule_errors(new: Any, old: Any, s: Schema | None, path: str = "") -> list[FieldError]:
    """Evaluate ``self == oldSelf`` rules wherever a new value has a correlated old one."""
    if not isinstance(s, dict) or new is None or old is None:
        return []
    errs = _rule_errors(new, old, s, path)
    if isinstance(new, dict) and isinstance(old, dict):
        props: dict[str, Schema] = s.get("properties") or {}
        extra = s.get("additionalProperties")
        for key, value in new.items():
            if key in props and key in old:
                errs += transition_rule_errors(value, old[key], props[key], fe.child(path, key))
            elif isinstance(extra, dict) and key in old:
                errs += transition_rule_errors(value, old[key], extra, f"{path}[{key}]")
    elif isinstance(new, list) and isinstance(old, list):
        olds = map_list_correlator(s, old)
        for i, item in enumerate(new):
            prior = olds(item)
            if prior is not MISSING:
                errs += transition_rule_errors(item, prior, s.get("items"), f"{path}[{i}]")
    return errs
