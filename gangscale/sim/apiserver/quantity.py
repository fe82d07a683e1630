"""Resource quantities as ``k8s.io/apimachinery/pkg/api/resource`` decodes, compares and prints them.

Reproduces (Kubernetes 1.36, ``quantity.go`` and ``suffix.go``):

- ``ParseQuantity``: ``<sign><digits>[.<digits>]<suffix>`` where the suffix is a decimal SI one
  (``n u m "" k M G T P E``), a binary SI one (``Ki`` ... ``Ei``) or an exponent (``e3``, ``E-2``);
  the errors ``quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'``
  and ``unable to parse quantity's suffix``; values are rounded up to nano precision;
- ``UnmarshalJSON``: ``null`` is zero, JSON numbers are read from their text, surrounding quotes and
  whitespace are stripped;
- ``String()`` (``CanonicalizeBytes``): decimal values as ``<integer><SI suffix>`` with the exponent a
  multiple of 3 (``1500m``, ``2``, ``1k``, ``500m``), binary values as ``<integer><Ki..Ei>`` when whole and
  at least 1024 in magnitude (else printed as decimal), exponent values as ``<integer>e<n>``;
- ``MilliValue`` (rounded up), ``Cmp`` (exact).
- the decode failure of a built-in object holding a malformed quantity: 400 BadRequest
  ``<Kind> in version "<version>" cannot be handled as a <Kind>: <parse error>``.

Deliberately separate from :mod:`gangscale.model.quantity`, the controller's own parser: the fake server
mirrors Go's decoder (its errors, its canonical printing), and a fake that shared the parser of the code it
tests could not catch that parser's mistakes.

Not reproduced: ``ErrNumeric`` (numbers too large for the int64/inf.Dec fast paths) and the
protobuf form.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gangscale.sim.apiserver.errors import StatusError, bad_request

JSON = dict[str, Any]

SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT = f"quantities must match the regular expression '{SPLIT_RE}'"
ERR_SUFFIX = "unable to parse quantity's suffix"

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BINARY_BY_EXP = {v: k for k, v in _BINARY.items()}
_SUFFIX_CHARS = set("eEinumkKMGTP")
_NANO = Fraction(1, 10**9)


class QuantityError(ValueError):
    """A string ``ParseQuantity`` refuses; the message is the Go error's."""


@dataclass(frozen=True)
class Quantity:
    value: Fraction
    format: str  # "DecimalSI", "BinarySI" or "DecimalExponent"

    def cmp(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def milli_value(self) -> int:
        return math.ceil(self.value * 1000)

    def int_value(self) -> int:
        return math.ceil(self.value)

    def __str__(self) -> str:
        return canonical(self)


def _split(text: str) -> tuple[bool, str, str, str]:
    """``parseQuantityString``: sign, integer digits, fraction digits, suffix."""
    pos, end, positive = 0, len(text), True
    if text[:1] in ("-", "+"):
        positive, pos = text[0] != "-", 1
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    num = text[start:pos]
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        dstart = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denom = text[dstart:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    if pos < end:
        raise QuantityError(ERR_FORMAT)
    return positive, num or "0", denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    """``quantitySuffixer.interpret``: (base, exponent, format)."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], "DecimalSI"
    if suffix in _BINARY:
        return 2, _BINARY[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE":
        try:
            return 10, int(suffix[1:]), "DecimalExponent"
        except ValueError:
            pass
    raise QuantityError(ERR_SUFFIX)


# Objects repeat the same few quantity strings ("8", "110", "1872Gi") on every write; Fraction arithmetic made
# parsing them a tenth of the server's time under load. Quantity is frozen, so a parsed one can be shared.
@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Quantity:
    """``resource.ParseQuantity``."""
    if not text:
        raise QuantityError(ERR_FORMAT)
    positive, num, denom, suffix = _split(text)
    base, exponent, fmt = _interpret(suffix)
    amount = Fraction(int(num + denom), 10 ** len(denom)) * Fraction(base) ** exponent
    amount = math.ceil(amount / _NANO) * _NANO  # precision beyond nano rounds up, as upstream
    return Quantity(amount if positive else -amount, fmt)


def decode_quantity(raw: Any) -> Quantity:
    """``Quantity.UnmarshalJSON`` of the decoded JSON value ``raw``."""
    if raw is None:
        return Quantity(Fraction(0), "DecimalSI")
    if isinstance(raw, bool):
        text = "true" if raw else "false"
    elif isinstance(raw, int):
        text = str(raw)
    elif isinstance(raw, float):
        text = repr(raw) if math.isfinite(raw) else str(raw)
    elif isinstance(raw, str):
        text = raw
    else:
        text = "{" if isinstance(raw, dict) else "["
    return parse_quantity(text.strip())


def _strip_tens(n: int, exp: int, step: int) -> tuple[int, int]:
    while n != 0 and n % (10**step) == 0:
        n //= 10**step
        exp += step
    return n, exp


def _decimal_parts(value: Fraction) -> tuple[int, int]:
    """An integer mantissa and a base-10 exponent that is a multiple of 3, trailing thousands removed."""
    exp = 0
    while value.denominator != 1:
        value *= 1000
        exp -= 3
    return _strip_tens(int(value), exp, 3)


def _suffix10(exp: int, fmt: str) -> str:
    if fmt == "DecimalSI" and exp in _DECIMAL_BY_EXP:
        return _DECIMAL_BY_EXP[exp]
    return "" if exp == 0 else f"e{exp}"


def canonical(q: Quantity) -> str:
    """``Quantity.String()``."""
    if q.value == 0:
        return "0"
    fmt = q.format
    if fmt == "BinarySI" and (abs(q.value) < 1024 or q.value.denominator != 1):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        n, exp = int(q.value), 0
        while n % 1024 == 0 and exp < 60:
            n //= 1024
            exp += 10
        return f"{n}{_BINARY_BY_EXP.get(exp, '')}"
    n, exp = _decimal_parts(q.value)
    return f"{n}{_suffix10(exp, fmt)}"


# --- where built-in kinds hold quantities -----------------------------------------------------------------

def _pod_spec_maps(spec: Any) -> Iterator[Any]:
    if not isinstance(spec, dict):
        return
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            res = c.get("resources") if isinstance(c, dict) else None
            if isinstance(res, dict):
                yield res.get("limits")
                yield res.get("requests")
    yield spec.get("overhead")
    res = spec.get("resources")
    if isinstance(res, dict):
        yield res.get("limits")
        yield res.get("requests")


def _quantity_maps(kind: str, obj: JSON) -> Iterator[Any]:
    if kind == "Pod":
        yield from _pod_spec_maps(obj.get("spec"))
    elif kind == "PodTemplate":
        yield from _pod_spec_maps((obj.get("template") or {}).get("spec"))
    elif kind == "Job":
        yield from _pod_spec_maps(((obj.get("spec") or {}).get("template") or {}).get("spec"))
    elif kind == "Node":
        status = obj.get("status") or {}
        yield status.get("capacity")
        yield status.get("allocatable")


def check_decodable(kind: str, version: str, obj: JSON) -> None:
    """Raise the real decode 400 when a quantity of a built-in object does not parse."""
    for quantities in _quantity_maps(kind, obj):
        if not isinstance(quantities, dict):
            continue
        for raw in quantities.values():
            try:
                decode_quantity(raw)
            except QuantityError as exc:
                raise decode_error(kind, version, str(exc)) from None


def decode_error(kind: str, version: str, why: str) -> StatusError:
    return bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {why}')
