"""Go's text forms of decoded JSON values, as the real server's Go code prints them.

Reproduces:

* ``strconv.Quote`` (``%q``): the escapes ``\\a \\b \\f \\n \\r \\t \\v \\" \\\\``, printable runes kept as they
  are (non-ASCII included), every other rune as ``\\xNN`` (below U+0080), ``\\uNNNN`` or ``\\UNNNNNNNN``.
* a float64 as ``fmt``'s ``%v`` prints it (``'g'`` with the shortest round-trip digits: exponent form
  below 1e-4 and from 1e+06 on, exponents of at least two digits, ``NaN``, ``+Inf``, ``-0``) and as
  ``encoding/json`` writes it (positional from 1e-6 up to 1e21, otherwise ``1e+21``, ``1e-7``).
* ``encoding/json.Marshal`` of decoded JSON: compact, map keys sorted, ``<``, ``>``, ``&``, U+2028 and
  U+2029 escaped (``\\u003c`` ...), other control characters as ``\\u00XX``; a :class:`GoStruct` keeps
  its field order.
* ``%v`` of decoded JSON: ``<nil>``, ``map[k:v k2:v2]`` (keys sorted), ``[a b]``, strings as they are.

Not reproduced:

* ``encoding/json`` writes U+0008 and U+000C as ``\\b`` and ``\\f`` (Go 1.22 on); we write ``\\u0008`` and
  ``\\u000c``. It writes negative zero as ``-0`` (we write ``0``) and fails on NaN and ±Inf, which the
  ``"json"`` float style prints as ``%v`` does.
* The ``"exact"`` float style and ``go_json(..., exact=True)`` keep the form the field-set, managedFields
  and patch-error code has always printed: integral floats below 1e21 show every digit of their exact
  value (2**60 as ``1152921504606846976``, where Go prints ``1152921504606847000``), NaN and ±Inf raise
  ``ValueError``, and a map key that is not a string (YAML decodes ``1:`` as an int) is written as a
  bare JSON value instead of a string.
* Values that are not JSON data: a tuple is written as a list, anything else (a YAML date, say) as
  ``str(value)``, JSON-quoted by ``go_json``; Go structs with ``String()`` methods have no counterpart.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Literal

FloatStyle = Literal["%v", "json", "exact"]
"""How :func:`go_float` prints: ``fmt``'s ``%v``, ``encoding/json``, or ``encoding/json`` with exact integers."""

_QUOTE_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t",
                  "\v": r"\v", "\\": r"\\", '"': r"\""}
_JSON_ESCAPES = re.compile(r'[\x00-\x1f"\\<>&\u2028\u2029]')
_JSON_NAMED = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class GoStruct(dict[str, Any]):
    """A Go struct value: marshalled in field (insertion) order instead of sorted map order."""


def go_quote(text: str) -> str:
    """``strconv.Quote``: printable runes stay, the rest become Go escapes."""
    out = ['"']
    for ch in text:
        if ch in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[ch])
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
    """Shortest round-trip digits of ``|f|`` and the decimal-point position, as strconv computes them."""
    _, digits, exp = Decimal(repr(abs(f))).normalize().as_tuple()
    text = "".join(str(d) for d in digits)
    return text, len(text) + int(exp)


def go_float(f: float, style: FloatStyle = "%v") -> str:
    """A float64 as ``%v`` prints it, or (``"json"``/``"exact"``) as ``encoding/json`` writes it."""
    if not math.isfinite(f):
        text = "NaN" if math.isnan(f) else "+Inf" if f > 0 else "-Inf"
        if style == "exact":
            raise ValueError(f"json: unsupported value: {text}")
        return text
    if style == "exact" and f.is_integer() and abs(f) < 1e21:
        return str(int(f))
    if f == 0:
        return "-0" if style == "%v" and math.copysign(1, f) < 0 else "0"
    sign = "-" if f < 0 else ""
    digs, point = _digits(f)
    exp = point - 1
    if style == "%v":
        use_exp, width = exp < -4 or exp >= 6, 2
    else:
        use_exp, width = abs(f) < 1e-6 or abs(f) >= 1e21, 1
    if use_exp:
        mant = digs[0] + ("." + digs[1:] if len(digs) > 1 else "")
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):0{width}d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digs}"
    if point >= len(digs):
        return f"{sign}{digs}{'0' * (point - len(digs))}"
    return f"{sign}{digs[:point]}.{digs[point:]}"


def go_scalar(v: Any, floats: FloatStyle = "%v") -> str | None:
    """A bool, int or float as both ``%v`` and ``encoding/json`` print it; None for any other value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v, floats)
    return None


def _json_str(s: str) -> str:
    return '"' + _JSON_ESCAPES.sub(lambda m: _JSON_NAMED.get(m.group(), f"\\u{ord(m.group()):04x}"), s) + '"'


def _json_key(key: Any, exact: bool) -> str:
    return go_json(key, exact=True) if exact and not isinstance(key, str) else _json_str(str(key))


def go_json(v: Any, *, exact: bool = False) -> str:
    """``encoding/json.Marshal`` of decoded JSON data: compact, map keys sorted, HTML-safe escapes."""
    if v is None:
        return "null"
    scalar = go_scalar(v, "exact" if exact else "json")
    if scalar is not None:
        return scalar
    if isinstance(v, str):
        return _json_str(v)
    if isinstance(v, dict):
        keys = list(v) if isinstance(v, GoStruct) else sorted(v)
        return "{" + ",".join(f"{_json_key(k, exact)}:{go_json(v[k], exact=exact)}" for k in keys) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(go_json(x, exact=exact) for x in v) + "]"
    return _json_str(str(v))


def go_v(v: Any, *, floats: FloatStyle = "%v") -> str:
    """``fmt``'s ``%v`` of decoded JSON data (``map[...]`` keys sorted, as fmt sorts them)."""
    if v is None:
        return "<nil>"
    scalar = go_scalar(v, floats)
    if scalar is not None:
        return scalar
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_v(v[k], floats=floats)}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(go_v(x, floats=floats) for x in v) + "]"
    return str(v)
