"""Field-level validation errors rendered exactly as ``k8s.io/apimachinery/pkg/util/validation/field`` does.

Reproduces (Kubernetes 1.36 wording, checked against apimachinery ``field/errors.go`` and ``path.go``):

- the cause types (``FieldValueRequired`` ...) and their display strings (``Required value`` ...);
- ``ErrorBody``: the value is omitted for Required/Forbidden/TooLong/Internal; ints, floats and bools are
  printed bare, strings Go-quoted, anything else as compact JSON (sorted keys, ``<>&`` escaped);
- ``TooLong`` -> ``may not be more than N bytes``; ``TooMany`` -> ``must have at most N items``;
- ``errors.NewInvalid``: ``<Kind>.<group> "<name>" is invalid: <aggregate>`` where the aggregate is the
  single error or ``[e1, e2]`` with duplicate messages dropped (the causes keep every error).

The Go renderings (``go_quote``, ``go_float``, ``go_json``, ``GoStruct``) are ``goformat``'s, re-exported here
for the validators.

Not reproduced: values that are Go structs with ``String()`` methods (we only ever hold JSON data),
and the ``Origin``/declarative-validation bookkeeping fields, which never reach the wire.
Versions differ: releases before the JSON rendering (kubernetes PR 132314, mid-2025) printed complex values
with ``%#v`` (``map[string]interface {}{...}``); before 1.32 TooLong read ``may not be longer than N``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gangscale.sim.apiserver.errors import Cause, StatusError
from gangscale.sim.apiserver.goformat import GoStruct, go_float, go_json, go_quote, go_scalar

__all__ = [
    "DUPLICATE", "FORBIDDEN", "INTERNAL", "INVALID", "NOT_FOUND", "NOT_SUPPORTED", "OMIT", "REQUIRED",
    "TOO_LONG", "TOO_MANY", "TYPE_INVALID", "FieldError", "GoStruct", "child", "duplicate", "forbidden",
    "go_float", "go_json", "go_quote", "go_value", "index", "invalid", "not_supported", "required",
    "to_invalid", "too_long", "too_many", "type_invalid",
]

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

def go_value(v: Any) -> str:
    """How ``ErrorBody`` prints a bad value: ``%v`` for bools and numbers, ``%q`` for strings, else JSON."""
    scalar = go_scalar(v)
    if scalar is not None:
        return scalar
    return go_quote(v) if isinstance(v, str) else go_json(v)
