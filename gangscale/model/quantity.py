"""Kubernetes resource quantities, parsed exactly.

A quantity is ``<sign><number><suffix>``: the suffix is a binary SI one (``Ki`` … ``Ei``), a decimal SI one
(``n u m k M G T P E``, or none) or a decimal exponent (``e3``, ``E-2``). Parsing goes through
:class:`fractions.Fraction`, so ``0.1`` + ``0.2`` is exactly ``0.3`` and nothing drifts.

gangscale works on integers, the way the scheduler does (``k8s.io/apimachinery`` ``Quantity.MilliValue``
and ``Value``, which round up): CPU in millicores, everything else in whole units (bytes for memory and
storage, devices for extended resources). :func:`canonical` does that conversion.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

BINARY_SUFFIXES: dict[str, int] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}

_QUANTITY = re.compile(r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>.*)$")
_EXPONENT = re.compile(r"^[eE](?P<exp>[+-]?[0-9]+)$")
_SUFFIX_HELP = "m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3"

#: Resources that the scheduler measures in thousandths (``MilliValue``).
MILLI_RESOURCES = frozenset({"cpu"})
#: Resources that are not "extended": they may be fractional in a pod spec.
NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "storage", "pods"})


class QuantityError(ValueError):
    """A value that is not a valid Kubernetes quantity for its resource; the message says why."""


def parse_quantity(value: object) -> Fraction:
    """The exact value of ``value`` (a quantity string, or an int/float as YAML hands them over)."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}: expected a number or a string such as '500m' or '4Gi'")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}: not a finite number")
        # repr() is the shortest decimal that round-trips, which is what the user typed in YAML.
        return parse_quantity(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"invalid quantity {value!r}: expected a number or a string such as '500m' or '4Gi'")
    text = value.strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"invalid quantity {value!r}: expected a number followed by an optional suffix "
                            f"({_SUFFIX_HELP})")
    number = Fraction(match["number"])
    suffix = match["suffix"]
    if suffix in BINARY_SUFFIXES:
        scaled = number * BINARY_SUFFIXES[suffix]
    elif suffix in DECIMAL_SUFFIXES:
        scaled = number * DECIMAL_SUFFIXES[suffix]
    elif (exponent := _EXPONENT.match(suffix)) is not None:
        power = int(exponent["exp"])
        if abs(power) > 64:
            raise QuantityError(f"invalid quantity {value!r}: exponent {power} is out of range")
        scaled = number * Fraction(10) ** power
    else:
        raise QuantityError(f"invalid quantity {value!r}: unknown suffix {suffix!r} (use {_SUFFIX_HELP})")
    return -scaled if match["sign"] == "-" else scaled


def is_extended(resource: str) -> bool:
    """Extended resources (``nvidia.com/gpu``, ``google.com/tpu``, …) are whole devices; hugepages are not."""
    return resource not in NATIVE_RESOURCES and not resource.startswith("hugepages-")


def canonical(resource: str, value: object) -> int:
    """``value`` as the non-negative integer the scheduler compares for ``resource``.

    CPU becomes millicores and anything else whole units, rounding up as ``MilliValue``/``Value`` do.
    Extended resources must be whole numbers, as the API server's validation demands.

    Remembered for the last few thousand (resource, value) pairs: a cluster's pods repeat a handful of quantities,
    and exact parsing (``Fraction``) was most of the cost of reading a pod's requests.
    """
    if isinstance(value, str | int | float):
        return _canonical(resource, value)
    return _canonical_uncached(resource, value)


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True and 1 are different inputs (a bool is refused)
def _canonical(resource: str, value: object) -> int:
    return _canonical_uncached(resource, value)


def _canonical_uncached(resource: str, value: object) -> int:
    exact = parse_quantity(value)
    if exact < 0:
        raise QuantityError(f"invalid quantity {value!r} for {resource}: must not be negative")
    if resource in MILLI_RESOURCES:
        return math.ceil(exact * 1000)
    if is_extended(resource) and exact.denominator != 1:
        raise QuantityError(f"invalid quantity {value!r} for {resource}: an extended resource must be a whole number")
    return math.ceil(exact)


def format_quantity(resource: str, amount: int) -> str:
    """The shortest exact text for a canonical amount: ``500m``, ``4``, ``16Gi``, ``1500M``."""
    if resource in MILLI_RESOURCES:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount == 0 or is_extended(resource) or resource == "pods":
        return str(amount)
    for suffix, factor in reversed(BINARY_SUFFIXES.items()):
        if amount % factor == 0:
            return f"{amount // factor}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        factor = int(DECIMAL_SUFFIXES[suffix])
        if amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)


def humanize(resource: str, amount: int) -> str:
    """:func:`format_quantity`, but an odd byte count reads as ``~181.3Gi`` rather than 12 digits."""
    text = format_quantity(resource, amount)
    if text.isdigit() and amount >= 2**30 and resource not in MILLI_RESOURCES and not is_extended(resource) \
            and resource != "pods":
        return f"~{amount / 2**30:.1f}Gi"
    return text
