"""The part of Kubernetes JSONPath that CRD ``additionalPrinterColumns`` use.

The real table convertor parses each column's ``jsonPath`` with ``k8s.io/client-go/util/jsonpath`` (missing keys
allowed) and prints the first value found. Supported here: ``.field`` steps, ``[n]`` (negative counts from
the end), ``[*]``, and filters ``[?(@.a.b == "x")]`` / ``!=`` / ``<`` / ``<=`` / ``>`` / ``>=`` with a string
(single or double quotes), number or ``true``/``false`` literal, or ``[?(@.a)]`` (the field exists). Not
supported: recursive descent (``..``), slices (``[1:3]``), unions (``[0,1]``), bracketed keys (``['a.b']``)
and functions; a path using them finds nothing.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_FIELD = re.compile(r"\.([^.\[\]]+)")
_INDEX = re.compile(r"\[(-?\d+|\*)\]")
_FILTER = re.compile(r"\[\?\(\s*@((?:\.[^.\s=!<>()\[\]]+)+)\s*"  # [?(@.a.b
                     r"(?:(==|!=|<=|>=|<|>)\s*(\"[^\"]*\"|'[^']*'|[^\s)]+)\s*)?\)\]")  # == "x")]
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


@dataclass(frozen=True)
class _Step:
    kind: str  # "field", "index", "all", "filter"
    key: str = ""
    index: int = 0
    path: tuple[str, ...] = ()
    op: str = ""
    literal: Any = None


def _literal(text: str) -> Any:
    if text[:1] in "\"'":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse(path: str) -> list[_Step] | None:
    """The steps of ``path`` (with or without the ``{...}`` braces); None when outside the subset."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    steps: list[_Step] = []
    pos = 0
    while pos < len(text):
        if m := _FIELD.match(text, pos):
            steps.append(_Step("field", key=m.group(1)))
        elif m := _INDEX.match(text, pos):
            raw = m.group(1)
            steps.append(_Step("all") if raw == "*" else _Step("index", index=int(raw)))
        elif m := _FILTER.match(text, pos):
            try:
                literal = _literal(m.group(3)) if m.group(3) is not None else None
            except ValueError:
                return None
            steps.append(_Step("filter", path=tuple(m.group(1).lstrip(".").split(".")), op=m.group(2) or "",
                               literal=literal))
        else:
            return None
        pos = m.end()
    return steps


_MISSING = object()


def _lookup(value: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _keep(item: Any, step: _Step) -> bool:
    found = _lookup(item, step.path)
    if found is _MISSING:
        return False
    if not step.op:
        return True
    comparable = isinstance(found, str) == isinstance(step.literal, str) and not isinstance(found, dict | list)
    try:
        return comparable and _OPS[step.op](found, step.literal)
    except TypeError:
        return False


def _apply(step: _Step, value: Any) -> list[Any]:
    if step.kind == "field":
        return [value[step.key]] if isinstance(value, dict) and step.key in value else []
    if not isinstance(value, list):
        return list(value.values()) if step.kind == "all" and isinstance(value, dict) else []
    if step.kind == "all":
        return list(value)
    if step.kind == "index":
        return [value[step.index]] if -len(value) <= step.index < len(value) else []
    return [item for item in value if _keep(item, step)]


def find(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``obj``, in document order (empty when none, or outside the subset)."""
    steps = parse(path)
    if steps is None:
        return []
    current = [obj]
    for step in steps:
        current = [out for value in current for out in _apply(step, value)]
    return current
