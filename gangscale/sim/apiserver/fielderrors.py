"""Field-level validation errors rendered exactly as ``k8s.io/apimachinery/pkg/util/validation/field`` does.

Reproduces (Kubernetes 1.36 wording, checked against apimachinery ``field/errors.go`` and ``path.go``):

- the cause types (``FieldValueRequired`` ...) and their display strings (``Required value`` ...);
- ``ErrorBody``: the value is omitted for Required/Forbidden/TooLong/Internal; ints, floats and bools are
  printed bare, strings Go-quoted, anything else as compact JSON (sorted keys, ``<>&`` escaped);
- ``TooLong`` -> ``may not be more than N bytes``; ``TooMany`` -> ``must have at most N items``;
- ``errors.NewInvalid``: ``<Kind>.<group> "<name>" is invalid: <aggregate>`` where the aggregate is the
  single error or ``[e1, e2]`` with duplicate messages dropped (the causes keep every error).

Not reproduced: values that are Go structs with ``String()`` methods (we only ever hold JSON data),
and the ``Origin``/declarative-validation bookkeeping fields, which never reach the wire.
Versions differ: releases before the JSON rendering (kubernetes PR 132314, mid-2025) printed complex values
with ``%#v`` (``map[string]interface {}{...}``); before 1.32 TooLong read ``may not be longer than N``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gangscale.sim.apiserver.errors import Cause, StatusError

REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
TYPE_INVALID = "FieldValueTypeInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
DUPLICATE = "FieldValueDuplicate"
FORBIDDEN = "FieldValueForbidden"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
NOT_FOUND = "FieldValueNotFound"
INTERNAL = "InternalError"

_DISPLAY = {
    REQUIRED: "Required value", INVALID: "Invalid value", TYPE_INVALID: "Invalid value",
    NOT_SUPPORTED: "Unsupported value", DUPLICATE: "Duplicate value", FORBIDDEN: "Forbidden",
    TOO_LONG: "Too long", TOO_MANY: "Too many", NOT_FOUND: "Not found", INTERNAL: "Internal error",
}
# These types never print the offending value (a huge string would otherwise be echoed back).
_VALUELESS = {REQUIRED, FORBIDDEN, TOO_LONG, INTERNAL}


class _Omit:
    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = _Omit()
"""``field.OmitValueType``: the error body names the type but no value."""


@dataclass(frozen=True)
class FieldError:
    type: str
    field: str
    bad_value: Any
    detail: str = ""

    def body(self) -> str:
        text = _DISPLAY[self.type]
        if self.type not in _VALUELESS and self.bad_value is not OMIT:
            text = f"{text}: {go_value(self.bad_value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> Cause:
        return Cause(type=self.type, message=self.body(), field=self.field)


# --- constructors (same names and arguments as the Go helpers) -----------------------------------------

def required(path: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, path, "", detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(INVALID, path, value, detail)


def type_invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(TYPE_INVALID, path, value, detail)


def not_supported(path: str, value: Any, valid: list[str]) -> FieldError:
    detail = "supported values: " + ", ".join(go_quote(v) for v in valid) if valid else ""
    return FieldError(NOT_SUPPORTED, path, value, detail)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(DUPLICATE, path, value)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, path, "", detail)


def too_long(path: str, max_length: int) -> FieldError:
    unit = "byte" if max_length == 1 else "bytes"
    detail = f"may not be more than {max_length} {unit}" if max_length >= 0 else "value is too long"
    return FieldError(TOO_LONG, path, "<value omitted>", detail)


def too_many(path: str, actual: int, maximum: int) -> FieldError:
    unit = "item" if maximum == 1 else "items"
    detail = f"must have at most {maximum} {unit}" if maximum >= 0 else "has too many items"
    return FieldError(TOO_MANY, path, actual if actual >= 0 else OMIT, detail)


# --- paths (``field.Path.String()``) --------------------------------------------------------------------

def child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def index(path: str, i: int | str) -> str:
    return f"{path}[{i}]"


# --- the 422 ---------------------------------------------------------------------------------------------

def to_invalid(kind: str, group: str, name: str, errs: list[FieldError]) -> StatusError:
    """``errors.NewInvalid``: every error becomes a cause, the message aggregates distinct ones."""
    seen: list[str] = []
    for e in errs:
        if str(e) not in seen:
            seen.append(str(e))
    qual = f"{kind}.{group}" if group else kind
    detail = seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"
    message = f'{qual} "{name}" is invalid: {detail}' if seen else f'{qual} "{name}" is invalid'
    return StatusError(422, "Invalid", message, group=group, kind=kind, name=name,
                       causes=[e.cause() for e in errs])


# --- Go rendering ---------------------------------------------------------------------------------------

_SIMPLE_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t",
                   "\v": r"\v", "\\": r"\\", '"': r"\""}


def go_quote(s: str) -> str:
    """``strconv.Quote``: printable runes stay, the rest become Go escapes."""
    out = ['"']
    for ch in s:
        if ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _digits(f: float) -> tuple[str, int]:
    """Shortest round-trip digits and the decimal-point position, as strconv computes them."""
    _, digits, exp = Decimal(repr(abs(f))).normalize().as_tuple()
    text = "".join(str(d) for d in digits)
    return text, len(text) + int(exp)


def go_float(f: float, *, json_style: bool = False) -> str:
    """``%v`` of a float64 (``'g'``, shortest, exponent from 1e+06 on) or its ``encoding/json`` form."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1, f) < 0 and not json_style else "0"
    sign = "-" if f < 0 else ""
    digs, point = _digits(f)
    exp = point - 1
    if json_style:
        use_exp = abs(f) < 1e-6 or abs(f) >= 1e21
    else:
        use_exp = exp < -4 or exp >= 6
    if use_exp:
        mant = digs[0] + ("." + digs[1:] if len(digs) > 1 else "")
        width = 1 if json_style else 2
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):0{width}d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digs}"
    if point >= len(digs):
        return f"{sign}{digs}{'0' * (point - len(digs))}"
    return f"{sign}{digs[:point]}.{digs[point:]}"


_JSON_ESCAPES = re.compile(r'[\x00-\x1f"\\<>&\u2028\u2029]')
_JSON_NAMED = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json_str(s: str) -> str:
    return '"' + _JSON_ESCAPES.sub(lambda m: _JSON_NAMED.get(m.group(), f"\\u{ord(m.group()):04x}"), s) + '"'


class GoStruct(dict[str, Any]):
    """A Go struct value: marshalled in field (insertion) order instead of sorted map order."""


def go_json(v: Any) -> str:
    """``encoding/json.Marshal`` of decoded JSON data: compact, map keys sorted, HTML-safe escapes."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v, json_style=True)
    if isinstance(v, str):
        return _json_str(v)
    if isinstance(v, dict):
        keys = list(v) if isinstance(v, GoStruct) else sorted(v)
        return "{" + ",".join(f"{_json_str(str(k))}:{go_json(v[k])}" for k in keys) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    return _json_str(str(v))


def go_value(v: Any) -> str:
    """How ``ErrorBody`` prints a bad value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, str):
        return go_quote(v)
    return go_json(v)
