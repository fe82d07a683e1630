"""Kubernetes quantities: exact parsing, canonical integers, round-trip formatting, clear errors."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gangscale.model.quantity import QuantityError, canonical, format_quantity, humanize, parse_quantity
from gangscale.model.resources import ResourceList

PARSE = [
    ("plain", "4", Fraction(4)),
    ("milli", "500m", Fraction(1, 2)),
    ("decimal-fraction", "0.1", Fraction(1, 10)),
    ("leading-dot", ".5", Fraction(1, 2)),
    ("trailing-dot", "5.", Fraction(5)),
    ("kilo", "2k", Fraction(2000)),
    ("mega", "3M", Fraction(3_000_000)),
    ("giga", "1G", Fraction(10**9)),
    ("tera", "1T", Fraction(10**12)),
    ("peta", "1P", Fraction(10**15)),
    ("exa", "1E", Fraction(10**18)),
    ("nano", "5n", Fraction(5, 10**9)),
    ("micro", "5u", Fraction(5, 10**6)),
    ("kibi", "1Ki", Fraction(1024)),
    ("mebi", "1.5Mi", Fraction(3 * 2**19)),
    ("gibi", "16Gi", Fraction(16 * 2**30)),
    ("tebi", "1Ti", Fraction(2**40)),
    ("pebi", "1Pi", Fraction(2**50)),
    ("exbi", "1Ei", Fraction(2**60)),
    ("exponent", "1e3", Fraction(1000)),
    ("exponent-upper", "5E2", Fraction(500)),
    ("exponent-negative", "25e-1", Fraction(5, 2)),
    ("exponent-plus", "1e+3", Fraction(1000)),
    ("sign-plus", "+2", Fraction(2)),
    ("sign-minus", "-2", Fraction(-2)),
    ("whitespace", " 2Gi ", Fraction(2 * 2**30)),
    ("yaml-int", 8, Fraction(8)),
    ("yaml-float", 0.5, Fraction(1, 2)),
    ("yaml-float-no-drift", 0.1, Fraction(1, 10)),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in PARSE], ids=[c[0] for c in PARSE])
def test_parse_is_exact(text: object, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


BAD = [
    ("unknown-suffix", "2Gx", "unknown suffix 'Gx'"),
    ("uppercase-k", "1K", "unknown suffix 'K'"),
    ("lowercase-binary", "1gi", "unknown suffix 'gi'"),
    ("empty", "", "expected a number"),
    ("letters", "abc", "expected a number"),
    ("double-dot", "1.2.3", "unknown suffix '.3'"),
    ("suffix-only", "Gi", "expected a number"),
    ("bool", True, "expected a number or a string"),
    ("list", [1], "expected a number or a string"),
    ("nan", float("nan"), "not a finite number"),
    ("huge-exponent", "1e999", "out of range"),
]


@pytest.mark.parametrize(("value", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_malformed_quantities_raise_a_clear_error(value: object, message: str) -> None:
    with pytest.raises(QuantityError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_quantity(value)


CANONICAL = [
    ("cpu-milli", "cpu", "250m", 250),
    ("cpu-cores", "cpu", "2", 2000),
    ("cpu-rounds-up", "cpu", "0.0001", 1),
    ("cpu-nano-rounds-up", "cpu", "1n", 1),
    ("memory-bytes", "memory", "1Gi", 2**30),
    ("memory-rounds-up", "memory", "1.5", 2),
    ("memory-milli-rounds-up", "memory", "100m", 1),
    ("gpu", "nvidia.com/gpu", "8", 8),
    ("tpu-int", "google.com/tpu", 4, 4),
    ("hugepages-fraction-ok", "hugepages-2Mi", "1.5Ki", 1536),
]


@pytest.mark.parametrize(("resource", "value", "expected"), [c[1:] for c in CANONICAL], ids=[c[0] for c in CANONICAL])
def test_canonical_integers_round_up_like_the_scheduler(resource: str, value: object, expected: int) -> None:
    assert canonical(resource, value) == expected


@pytest.mark.parametrize(("resource", "value", "message"), [
    ("nvidia.com/gpu", "0.5", "must be a whole number"),
    ("cpu", "-1", "must not be negative"),
    ("memory", "-1Gi", "must not be negative"),
], ids=["fractional-gpu", "negative-cpu", "negative-memory"])
def test_canonical_rejects_what_the_api_server_rejects(resource: str, value: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        canonical(resource, value)


FORMAT = [
    ("cpu-cores", "cpu", 4000, "4"),
    ("cpu-milli", "cpu", 1500, "1500m"),
    ("memory-gi", "memory", 16 * 2**30, "16Gi"),
    ("memory-mi", "memory", 1536 * 2**20, "1536Mi"),
    ("memory-decimal", "memory", 1_500_000_000, "1500M"),
    ("memory-odd", "memory", 1001, "1001"),
    ("gpu", "nvidia.com/gpu", 8, "8"),
    ("zero", "memory", 0, "0"),
]


@pytest.mark.parametrize(("resource", "amount", "text"), [c[1:] for c in FORMAT], ids=[c[0] for c in FORMAT])
def test_format_round_trips(resource: str, amount: int, text: str) -> None:
    assert format_quantity(resource, amount) == text
    assert canonical(resource, text) == amount


def test_no_float_drift_when_summing() -> None:
    total = ResourceList.parse({"cpu": "0.1"}) + ResourceList.parse({"cpu": "0.2"})
    assert total == ResourceList.parse({"cpu": "0.3"})


def test_resource_list_errors_name_the_entry() -> None:
    with pytest.raises(QuantityError, match=r"spec\.containers\[0\]\.resources\.requests\.memory: .*'2Gx'"):
        ResourceList.parse({"cpu": "1", "memory": "2Gx"}, "spec.containers[0].resources.requests")


def test_resource_list_drops_zeros_and_hashes_by_value() -> None:
    a = ResourceList.parse({"cpu": "1", "nvidia.com/gpu": 0})
    b = ResourceList({"cpu": 1000})
    assert a == b and hash(a) == hash(b) and "nvidia.com/gpu" not in a
    assert (a - {"cpu": 5000}) == ResourceList()
    assert str(ResourceList.parse({"cpu": "500m", "memory": "1Gi"})) == "{cpu: 500m, memory: 1Gi}"


@pytest.mark.parametrize(("resource", "amount", "text"), [
    ("memory", 194_671_909_273, "~181.3Gi"), ("memory", 16 * 2**30, "16Gi"), ("memory", 1001, "1001"),
    ("cpu", 111_650, "111650m"), ("nvidia.com/gpu", 8, "8"),
], ids=["odd-bytes", "exact-gi", "small", "cpu", "gpu"])
def test_humanize(resource: str, amount: int, text: str) -> None:
    assert humanize(resource, amount) == text
