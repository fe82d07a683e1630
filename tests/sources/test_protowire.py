"""The protobuf wire-format decoder: scalars, nesting, skipping, and every way input can be malformed."""

from __future__ import annotations

import math

import pytest

from gangscale.sources.protowire import (
    I32,
    I64,
    LEN,
    VARINT,
    WireError,
    as_double,
    as_float,
    as_int64,
    as_string,
    expect,
    fields,
)
from tests.sources import protobuild as pb


@pytest.mark.parametrize(("data", "value"), [
    (b"\x08\x00", 0),
    (b"\x08\x01", 1),
    (b"\x08\x7f", 127),
    (b"\x08\x80\x01", 128),
    (b"\x08\xac\x02", 300),
    (b"\x08\xff\xff\xff\xff\x0f", 2**32 - 1),
    (b"\x08" + b"\xff" * 9 + b"\x01", 2**64 - 1),
], ids=["zero", "one", "max-1-byte", "min-2-byte", "300", "uint32-max", "uint64-max"])
def test_varint_values(data: bytes, value: int) -> None:
    assert list(fields(data)) == [(1, VARINT, value)]


@pytest.mark.parametrize("value", [-1, -2, -300, -(2**63), 2**63 - 1, 0, 5],
                         ids=["-1", "-2", "-300", "int64-min", "int64-max", "0", "5"])
def test_int64_round_trip_through_10_byte_varints(value: int) -> None:
    data = pb.int_field(1, value)
    if value < 0:
        assert len(data) == 11  # key + 10-byte varint
    [(_, _, raw)] = fields(data)
    assert isinstance(raw, int)
    assert as_int64(raw) == value


def test_negative_one_is_ten_bytes_of_ones() -> None:
    [(number, wire_type, raw)] = fields(b"\x10" + b"\xff" * 9 + b"\x01")
    assert (number, wire_type) == (2, VARINT)
    assert isinstance(raw, int)
    assert as_int64(raw) == -1


@pytest.mark.parametrize("value", [0.0, 1.0, -2.5, 1e300, 17559369319.0, 0.1, math.inf],
                         ids=["zero", "one", "negative", "huge", "memory-bytes", "tenth", "inf"])
def test_fixed64_doubles(value: float) -> None:
    [(number, wire_type, raw)] = fields(pb.double_field(3, value))
    assert (number, wire_type) == (3, I64)
    assert isinstance(raw, int)
    assert as_double(raw) == value


def test_double_known_bit_pattern() -> None:
    # 1.0 is 0x3FF0000000000000, little-endian on the wire.
    [(_, _, raw)] = fields(b"\x09\x00\x00\x00\x00\x00\x00\xf0\x3f")
    assert raw == 0x3FF0000000000000
    assert isinstance(raw, int)
    assert as_double(raw) == 1.0


def test_fixed32_floats() -> None:
    [(number, wire_type, raw)] = fields(b"\x25\x00\x00\xc0\x3f")  # field 4, float 1.5
    assert (number, wire_type, raw) == (4, I32, 0x3FC00000)
    assert isinstance(raw, int)
    assert as_float(raw) == 1.5


def test_length_delimited_nesting() -> None:
    inner = pb.str_field(1, "GPU") + pb.double_field(2, 8.0)
    data = pb.message(4, inner) + pb.str_field(2, "héllo") + pb.bytes_field(9, b"")
    out = list(fields(data))
    assert [(n, w) for n, w, _ in out] == [(4, LEN), (2, LEN), (9, LEN)]
    nested = out[0][2]
    assert isinstance(nested, bytes)
    [(key_number, key_type, key), (bits_number, bits_type, bits)] = list(fields(nested))
    assert (key_number, key_type, bits_number, bits_type) == (1, LEN, 2, I64)
    assert isinstance(key, bytes)
    assert isinstance(bits, int)
    assert (as_string(key), as_double(bits)) == ("GPU", 8.0)
    assert isinstance(out[1][2], bytes)
    assert as_string(out[1][2]) == "héllo"
    assert out[2][2] == b""


def test_every_skippable_wire_type_is_walked_past() -> None:
    data = (pb.int_field(100, 2**40) + pb.fixed64_field(101, 7) + pb.bytes_field(102, b"\x08\x01junk")
            + pb.fixed32_field(103, 9) + pb.str_field(1, "kept"))
    out = list(fields(data))
    assert [(n, w) for n, w, _ in out] == [(100, VARINT), (101, I64), (102, LEN), (103, I32), (1, LEN)]
    assert out[-1][2] == b"kept"


def test_large_field_numbers() -> None:
    assert list(fields(pb.int_field(2**29 - 1, 5))) == [(2**29 - 1, VARINT, 5)]


def test_empty_input_has_no_fields() -> None:
    assert list(fields(b"")) == []


@pytest.mark.parametrize("data", [
    b"\x80",                                  # key varint cut
    b"\x08",                                  # varint value missing
    b"\x08\x80",                              # varint value cut
    b"\x09\x00\x00\x00",                      # fixed64 cut
    b"\x0d\x00\x00",                          # fixed32 cut
    b"\x0a\x05abc",                           # length says 5, 3 left
    b"\x0a",                                  # length missing
    pb.str_field(1, "ok") + b"\x12\x02a",     # a good field, then a cut one
], ids=["key", "varint-missing", "varint-cut", "fixed64", "fixed32", "len-short", "len-missing", "after-good"])
def test_truncated_input(data: bytes) -> None:
    with pytest.raises(WireError, match="truncated"):
        list(fields(data))


@pytest.mark.parametrize("wire_type", [3, 4, 6, 7], ids=["start-group", "end-group", "reserved-6", "reserved-7"])
def test_unsupported_wire_types(wire_type: int) -> None:
    with pytest.raises(WireError, match=f"unsupported wire type {wire_type}"):
        list(fields(bytes([1 << 3 | wire_type, 0])))


@pytest.mark.parametrize(("data", "message"), [
    (b"\x00\x01", "invalid field number 0"),
    (b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    (b"\x08" + b"\xff" * 9 + b"\x02", "does not fit in 64 bits"),
    (pb.varint((2**29) << 3) + b"\x00", "invalid field number"),
], ids=["field-zero", "varint-11-bytes", "varint-overflow", "field-too-large"])
def test_malformed_keys_and_varints(data: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        list(fields(data))


def test_invalid_utf8_string() -> None:
    with pytest.raises(WireError, match="UTF-8"):
        as_string(b"\xff\xfe")


def test_expect_names_the_field_on_a_wire_type_mismatch() -> None:
    expect(3, LEN, b"", LEN, "NodeState.node_type")
    with pytest.raises(WireError, match=r"NodeState.status \(field 8\) has wire type length-delimited, "
                                        "expected varint"):
        expect(8, LEN, b"x", VARINT, "NodeState.status")
