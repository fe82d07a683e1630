"""Structural OpenAPI v3 schema validation of custom resources, as kube-apiserver (1.36) runs it.

Reproduces ``customResourceStrategy.Validate``/``ValidateUpdate`` for a CRD version's schema:

1. kube-openapi's ``SchemaValidator`` (``k8s.io/kube-openapi/pkg/validation/validate``), node by node in
   its order - type, string (maxLength, then minLength, then pattern: first failure only), format,
   number (multipleOf, minimum, maximum), array (items first, then minItems, maxItems), enum, object
   (min/maxProperties stop the object's other checks, then additionalProperties values, properties,
   required) - with its paths (``spec.podSets[0].count``) and messages, converted by apiextensions'
   ``kubeOpenAPIResultToFieldErrors``: Required -> ``Required value``; enum -> ``Unsupported value: "x":
   supported values: "True", "False", "Unknown"``; maxLength -> ``Too long: may not be more than N
   bytes``; maxItems/maxProperties -> ``Too many: 33: must have at most 32 items``; type and format ->
   ``Invalid value: "string": spec.x in body must be of type integer: "string"``; everything else ->
   ``Invalid value: <v>: <path> in body should ...`` (``should have at least 1 items``, ``should match
   '<re>'``, ``should be greater than or equal to 1``, ``should be at least 1 chars long``). Type quirks
   kept: a float passes ``integer`` when ``swag.IsFloat64AJSONInteger`` says so (integral within +-(2^53-1),
   or a positive value within a relative 1e-9 of one); an integer beyond int64 is a float64, as
   apimachinery's ``util/json`` decodes it; a wrong type against an ``int32``/``int64`` field reports the
   format (``must be of type int32: "float64"``); string formats checked: date-time and date.
   Numeric formats are range-checked (kube-openapi since its 2026-01-09 commit "enhance numberValidator to
   enforce numeric formats", in Kubernetes 1.36 - 1.35 and older checked no range): for a schema of exactly
   one type, ``integer`` values must parse as int32 (``format: int32``) or int64 (``int64`` or no format), so
   2147483648 fails int32 and a fraction fails every integer format (1.5 against int32 gets both the type
   error and this one); ``number`` with ``format: float`` must fit float32; ``double`` is not checked.
   ``minimum``/``maximum``/``multipleOf`` are range-checked the same way (``Maximum boundary value ...``), and
   one that fails is compared as a float64. The error is a plain Go error, which apiextensions reports at
   the nil field path with an empty value: ``<nil>: Invalid value: "": Checked value must be of type integer
   with format int32 in spec.podSets[0].count`` (kube-openapi ``validate/values.go``
   ``IsValueValidAgainstRange``; apiextensions ``kubeOpenAPIResultToFieldErrors``).
2. ``x-kubernetes-list-type`` ``set``/``map`` uniqueness (``listtype.ValidateListSetsAndMaps``):
   ``Duplicate value: {"type":"Ready"}`` at the first repeat of each key.
3. ``x-kubernetes-validations`` transition rules ``self == oldSelf`` only, on update, when both the new and
   the correlated old value exist (objects by field, maps by key, list-type=map lists by key): ``Invalid
   value: Value is immutable`` for objects/arrays, ``Invalid value: "new": Value is immutable`` for
   scalars (1.35+; 1.34 and older printed the type, ``"array"``); no message -> ``failed rule: <rule>``;
   ``reason``/``fieldPath`` honoured.
4. Ratcheting (``CRDValidationRatcheting``, GA in 1.33): on update, schema errors inside a value that
   equals its correlated old value are dropped, and list-type errors are only reported if the old object
   had none.

Not reproduced: every other CEL rule (ignored), ``default`` (no defaulting), ``allOf``/``anyOf``/
``oneOf``/``not``, ``uniqueItems``, ``x-kubernetes-map-type``-specific rules, string formats other than
date-time/date, embedded-resource metadata validation (only the ``apiVersion``/``kind`` presence check),
ratcheting correlation of set-type lists, and Go's random order of sibling errors (we use schema order).
``/status`` writes are validated with the whole schema from the root; upstream validates ``status`` with
its own validator rooted there (``ValidateStatusUpdate``, field path ``status``), so its messages name
``conditions[0].reason in body ...`` and its range errors sit at field ``status``, where ours name
``status.conditions[0].reason`` and ``<nil>``. ``multipleOf`` is checked by plain division, not with
upstream's integer and ``IsFloat64AJSONInteger`` variants.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.fielderrors import FieldError
from gangscale.sim.apiserver.metavalidation import object_meta_errors, validate_object_meta
from gangscale.sim.apiserver.pruning import (
    prune,
    unknown_field_messages,
    unknown_fields,
    unknown_fields_error,
)
from gangscale.sim.apiserver.schemarules import (
    MISSING,
    deep_equal,
    list_type_errors,
    map_list_correlator,
    transition_rule_errors,
)

JSON = dict[str, Any]
Schema = dict[str, Any]

__all__ = ["MISSING", "deep_equal", "list_type_errors", "object_meta_errors", "prune", "schema_errors",
           "transition_rule_errors", "unknown_field_messages", "unknown_fields", "unknown_fields_error",
           "validate", "validate_object_meta"]


def validate(obj: JSON, schema: Schema, *, old: JSON | None = None, kind: str, group: str, name: str,
             extra_errors: Sequence[FieldError] = ()) -> None:
    """Raise the real 422 Invalid with every error found; ``extra_errors`` (e.g. metadata) come first."""
    errs = [*extra_errors, *schema_errors(obj, schema, old=old)]
    if errs:
        raise fe.to_invalid(kind, group, name, errs)


def schema_errors(obj: JSON, schema: Schema, *, old: JSON | None = None) -> list[FieldError]:
    errs: list[FieldError] = []
    _node(obj, schema, "", MISSING if old is None else old, errs)
    if old is None or not list_type_errors(old, schema):
        errs += list_type_errors(obj, schema)
    if old is not None:
        errs += transition_rule_errors(obj, old, schema)
    return errs


# --- data helpers ----------------------------------------------------------------------------------------

#: The integer formats' ranges (Go's int32 and int64).
_INT_RANGES = {"int32": (-(2 ** 31), 2 ** 31 - 1), "int64": (-(2 ** 63), 2 ** 63 - 1)}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _data_type(v: Any) -> tuple[str, str]:
    """The JSON type and Go format kube-openapi infers from a decoded value."""
    if v is None:
        return "null", ""
    if isinstance(v, bool):
        return "boolean", ""
    if isinstance(v, int):
        # apimachinery's util/json decodes a number as int64 when it fits, else as float64.
        lo, hi = _INT_RANGES["int64"]
        return ("integer", "int64") if lo <= v <= hi else ("number", "float64")
    if isinstance(v, float):
        return "number", "float64"
    if isinstance(v, str):
        return "string", ""
    return ("array", "") if isinstance(v, list) else ("object", "")


def _types(s: Schema) -> list[str]:
    if s.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    return [s["type"]] if s.get("type") else []


_STRING_FORMATS = {"bsonobjectid", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid", "uuid3",
                   "uuid4", "uuid5", "isbn", "isbn10", "isbn13", "creditcard", "ssn", "hexcolor", "rgbcolor",
                   "byte", "password", "date", "duration", "datetime", "quantity", "k8sshortname",
                   "k8slongname"}


def _format(s: Schema) -> str:
    """``StripUnsupportedFormatsPostProcess``: formats the server does not know are dropped."""
    fmt = str(s.get("format") or "")
    types = _types(s)
    kind = types[0] if len(types) == 1 else ""
    if kind in ("", "string"):
        return fmt if fmt.replace("-", "") in _STRING_FORMATS else ""
    return fmt if (kind, fmt) in {("integer", "int32"), ("integer", "int64"), ("number", "float"),
                                  ("number", "double")} else ""


def _says(path: str, text: str) -> str:
    """kube-openapi's message shape: the path, where the value was (always the body), what is wrong."""
    return f"{path} in body {text}"


def _field(name: str) -> str:
    # kube-openapi names start with "." at the root; apiextensions trims one leading dot.
    return name[1:] if name.startswith(".") else name


def _invalid(path: str, value: Any, text: str) -> FieldError:
    return fe.invalid(_field(path), value, _says(path, text))


# --- kube-openapi node validation ------------------------------------------------------------------------

def _node(v: Any, s: Schema, path: str, old: Any, errs: list[FieldError]) -> None:
    if old is not MISSING and deep_equal(v, old):
        return  # ratcheting: an unchanged value keeps whatever errors it already had
    _check_type(v, s, path, errs)
    if isinstance(v, str):
        _check_string(v, s, path, errs)
        _check_format(v, s, path, errs)
    elif _is_number(v):
        _check_number(_go_number(v), s, path, errs)
    elif isinstance(v, list):
        _check_array(v, s, path, old, errs)
    _check_enum(v, s, path, errs)
    if isinstance(v, dict):
        _check_object(v, s, path, old, errs)


def _type_error(path: str, type_name: str, value: str) -> FieldError:
    return fe.type_invalid(_field(path), value,
                           f"{path} in body must be of type {type_name}: {fe.go_quote(value)}")


_MAX_JSON_INTEGER = float(2 ** 53 - 1)


def _is_json_integer(f: float) -> bool:
    """go-openapi ``swag.IsFloat64AJSONInteger`` (v0.23.0, kube-openapi's): within +-(2^53-1), and integral - or,
    for a positive value, within a relative 1e-9 of its integer part (so 100000000.01 passes ``integer``; a
    negative value's ``uint64`` conversion never comes that close)."""
    if not math.isfinite(f) or abs(f) > _MAX_JSON_INTEGER:
        return False
    if f.is_integer():
        return True
    whole = float(int(f))
    return f > 0 and whole > 0 and (f - whole) / (f + whole) < 1e-9


def _check_type(v: Any, s: Schema, path: str, errs: list[FieldError]) -> None:
    types, fmt = _types(s), _format(s)
    if not types and not fmt:
        return
    if v is None:
        if types and "null" not in types and not s.get("nullable"):
            errs.append(_type_error(path, ",".join(types), "null"))
        return
    data_type, data_format = _data_type(v)
    float_int = data_type == "number" and _is_json_integer(float(_go_number(v))) and "integer" in types
    int_float = data_type == "integer" and "number" in types
    ok = data_type in types or float_int or int_float
    str_or_list = isinstance(v, str | list)
    if fmt and not str_or_list and not (ok or data_format == fmt):
        errs.append(_type_error(path, fmt, data_format))
    elif fmt and str_or_list and "number" not in types and "integer" not in types:
        return  # upstream skips the type check for formatted string schemas given strings or arrays
    elif not ok:
        errs.append(_type_error(path, ",".join(types), data_type))


_FLAG_GROUP = re.compile(r"\(\?([imsU]+)\)")


@functools.lru_cache(maxsize=512)
def _go_regex(pattern: str) -> re.Pattern[str] | str:
    """Compile an RE2 pattern for Python; ``$`` is end-of-text in Go, so it must not match before a final
    newline. An inline flag group such as ``(?i)`` may appear anywhere in RE2 and holds to the end of its
    group; Python accepts one only at the start, so it becomes a scoped group ``(?i:...)`` closed where the
    enclosing group closes (exact unless an alternation follows the flag in the same group).
    Returns the error text when the pattern does not compile."""
    out, in_class, i = [], False, 0
    closers = [0]  # per open group: scoped flag groups to close with it
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append("\\Z" if pattern[i + 1] == "z" and not in_class else pattern[i:i + 2])
            i += 2
            continue
        if not in_class and (flag := _FLAG_GROUP.match(pattern, i)) is not None:
            out.append(f"(?{flag.group(1).replace('U', '')}:")
            closers[-1] += 1
            i = flag.end()
            continue
        if not in_class and ch == "(":
            closers.append(0)
        elif not in_class and ch == ")" and len(closers) > 1:
            out.append(")" * closers.pop())
        in_class = (in_class and ch != "]") or (not in_class and ch == "[")
        out.append("\\Z" if ch == "$" and not in_class else ch)
        i += 1
    out.append(")" * closers[0])
    try:
        return re.compile("".join(out))
    except re.error as exc:
        return str(exc)


def _check_string(v: str, s: Schema, path: str, errs: list[FieldError]) -> None:
    if "maxLength" in s and len(v) > s["maxLength"]:
        errs.append(fe.too_long(_field(path), int(s["maxLength"])))
    elif "minLength" in s and len(v) < s["minLength"]:
        errs.append(_invalid(path, v, f"should be at least {s['minLength']} chars long"))
    elif s.get("pattern"):
        rx = _go_regex(str(s["pattern"]))
        if isinstance(rx, str):
            errs.append(_invalid(path, v, f"should match '{s['pattern']}, but pattern is invalid: {rx}'"))
        elif not rx.search(v):
            errs.append(_invalid(path, v, f"should match '{s['pattern']}'"))


_TIME_RE = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")


def _is_date(s: str) -> bool:
    try:
        return bool(re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", s)) and bool(datetime.date.fromisoformat(s))
    except ValueError:
        return False


def _is_date_time(s: str) -> bool:
    """go-openapi ``strfmt.IsDateTime``: RFC 3339 date, ``T``, time, fraction, ``Z`` or offset."""
    parts = s.lower().split("t")
    if len(s) < 4 or len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME_RE.fullmatch(parts[1])
    return m is not None and m[1] <= "23" and m[2] <= "59" and m[3] <= "59"


_FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {"datetime": _is_date_time, "date": _is_date}


def _check_format(v: str, s: Schema, path: str, errs: list[FieldError]) -> None:
    fmt = _format(s)
    check = _FORMAT_CHECKS.get(fmt.replace("-", ""))
    if check is not None and not check(v):
        errs.append(_type_error(path, fmt, v))


# --- numbers: kube-openapi's numberValidator (validator.go) and IsValueValidAgainstRange (values.go) -------

_FLOAT32 = struct.Struct("<f")
#: ``validate.ValidateCustomResource(nil, ...)``: errors that are not kube-openapi ``Validation`` errors (the range
#: checks') are reported by ``kubeOpenAPIResultToFieldErrors`` at this nil field path, with the value "".
NIL_PATH = "<nil>"


def _go_number(v: float) -> float:
    """The number as Go holds it after decoding: an int beyond int64 is a float64 (infinite beyond float64's
    range, where Go refuses the body with a 400 instead - not reproduced)."""
    lo, hi = _INT_RANGES["int64"]
    if isinstance(v, int) and not lo <= v <= hi:
        try:
            return float(v)
        except OverflowError:
            return math.copysign(math.inf, v)
    return v


def _range_type(s: Schema) -> tuple[str, str]:
    """``SchemaValidator.numberValidator``: the Type and Format it range-checks against - only a schema with
    exactly one type, and only a format that suits it (int32/int64, float/double)."""
    kind = s.get("type")
    if s.get("x-kubernetes-int-or-string") or kind not in ("integer", "number"):
        return "", ""
    return kind, _format(s)


def _out_of_range(x: float, type_name: str, fmt: str) -> bool:
    """``IsValueValidAgainstRange``: does ``x``, as Go prints it (``strconv.FormatInt``, or ``FormatFloat(f,
    'f', -1, 64)`` for a float64), parse as ``type_name``/``fmt`` (``strconv.ParseInt``/``ParseFloat``)?

    A float with a fraction never parses as an integer, whatever its format (``"1.5"`` is not an integer to
    ``ParseInt``); an integral one is checked by its value (``2147483648.0`` prints ``2147483648``)."""
    if type_name == "integer":
        if isinstance(x, float) and not (math.isfinite(x) and x.is_integer()):
            return True
        lo, hi = _INT_RANGES.get(fmt, _INT_RANGES["int64"])  # no format: the int64 default
        return not lo <= int(x) <= hi
    if type_name == "number" and fmt == "float":
        # Rounding the float64 to float32 overflows exactly where ParseFloat(s, 32) returns ErrRange (but for a
        # double rounding at the midpoint, which no JSON number written by a person reaches).
        try:
            _FLOAT32.pack(float(x))
        except OverflowError:
            return True
    return False  # double and unformatted numbers: no float64 overflows after decoding


def _range_error(prefix: str, type_name: str, fmt: str, path: str) -> FieldError:
    """A range error: a plain Go error, so ``kubeOpenAPIResultToFieldErrors`` reports it at the nil path."""
    form = f"with format {fmt}" if fmt else "(default format)"
    return fe.invalid(NIL_PATH, "", f"{prefix} value must be of type {type_name} {form} in {path}")


def _native(v: float, bound: float, ok: bool) -> tuple[float, float, str]:
    """The value, the bound and the bound's text as compared: ``*NativeType`` compares an int64 value with the
    bound truncated to int64 and prints it so, a float64 as float64; a bound that failed its range check is
    compared ``as general number`` (both float64, ``%v``)."""
    if ok and isinstance(v, int):
        return v, int(bound), str(int(bound))
    return float(v), float(bound), fe.go_float(float(bound))


def _check_number(v: float, s: Schema, path: str, errs: list[FieldError]) -> None:
    type_name, fmt = _range_type(s)
    if _out_of_range(v, type_name, fmt):
        errs.append(_range_error("Checked", type_name, fmt, path))
    # Each constraint is range-checked against the same type and format before it is applied.
    factor = s.get("multipleOf")
    if factor:
        ok = not _out_of_range(factor, type_name, fmt)
        if not ok:
            errs.append(_range_error("MultipleOf", type_name, fmt, path))
        value, _, text = _native(v, factor, ok)
        if math.isfinite(v / factor) and (v / factor) != int(v / factor):
            errs.append(_invalid(path, value, f"should be a multiple of {text}"))
    for key, prefix, below in (("minimum", "Minimum boundary", True), ("maximum", "Maximum boundary", False)):
        limit = s.get(key)
        if limit is None:
            continue
        ok = not _out_of_range(limit, type_name, fmt)
        if not ok:
            errs.append(_range_error(prefix, type_name, fmt, path))
        value, bound, text = _native(v, limit, ok)
        excl = bool(s.get("exclusiveMinimum" if below else "exclusiveMaximum"))
        if (value < bound if below else value > bound) or (excl and value == bound):
            word = ("greater than" if below else "less than") + ("" if excl else " or equal to")
            errs.append(_invalid(path, value, f"should be {word} {text}"))


def _check_array(v: list[Any], s: Schema, path: str, old: Any, errs: list[FieldError]) -> None:
    items = s.get("items")
    if isinstance(items, dict):
        olds = map_list_correlator(s, old)
        for i, item in enumerate(v):
            _node(item, items, f"{path}[{i}]", olds(item), errs)
    if "minItems" in s and len(v) < s["minItems"]:
        errs.append(_invalid(path, len(v), f"should have at least {s['minItems']} items"))
    if "maxItems" in s and len(v) > s["maxItems"]:
        errs.append(fe.too_many(_field(path), len(v), int(s["maxItems"])))


def _enum_equal(v: Any, e: Any) -> bool:
    if _is_number(v) and _is_number(e):
        return bool(v == e)
    return deep_equal(v, e)


def _check_enum(v: Any, s: Schema, path: str, errs: list[FieldError]) -> None:
    enum = s.get("enum") or []
    if enum and (v is None or not any(_enum_equal(v, e) for e in enum)):
        shown = [e if isinstance(e, str) else fe.go_json(e) for e in enum]
        errs.append(fe.not_supported(_field(path), v, shown))


def _old_child(old: Any, key: str) -> Any:
    return old[key] if isinstance(old, dict) and key in old else MISSING


def _check_object(v: JSON, s: Schema, path: str, old: Any, errs: list[FieldError]) -> None:
    n, field = len(v), _field(path)
    if "minProperties" in s and n < s["minProperties"]:
        errs.append(_invalid(path, n, f"should have at least {s['minProperties']} properties"))
        return
    if "maxProperties" in s and n > s["maxProperties"]:
        errs.append(fe.too_many(field, n, int(s["maxProperties"])))
        return
    props: dict[str, Schema] = s.get("properties") or {}
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        for key, value in v.items():
            if key not in props:
                _node(value, extra, f"{path}.{key}", _old_child(old, key), errs)
    for key, sub in props.items():
        if key in v:
            _node(v[key], sub, fe.child(path, key), _old_child(old, key), errs)
    errs.extend(fe.required(_field(f"{path}.{key}")) for key in s.get("required") or [] if key not in v)
    if s.get("x-kubernetes-embedded-resource"):
        errs.extend(fe.required(fe.child(field, key), "must not be empty")
                    for key in ("apiVersion", "kind") if key not in v)
