"""A decoder for the protobuf wire format, just enough to read a few fixed Ray messages without protobuf.

A protobuf message on the wire is a flat sequence of ``(key, value)`` records: the key is a varint holding
``field_number << 3 | wire_type``; the wire type says how long the value is (0 varint, 1 eight bytes, 2 a
varint length then that many bytes, 5 four bytes). Nested messages, strings, bytes, map entries and packed
repeated scalars are all wire type 2; the schema, not the wire, says which. :func:`fields` walks one level
and hands back raw values; the caller, who knows the schema, decodes nested messages by calling it again on
the bytes and converts scalars with the ``as_*`` helpers.

Left out on purpose: encoding, groups (wire types 3 and 4, deprecated since proto2 and never used by Ray;
they are rejected rather than skipped), packed repeated fields (no field gangscale reads is one) and zigzag
``sint`` types. A varint longer than 10 bytes or one that overflows 64 bits is an error, as in protobuf.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT = 0
I64 = 1
LEN = 2
I32 = 5
WIRE_TYPE_NAMES = {VARINT: "varint", I64: "fixed64", LEN: "length-delimited", I32: "fixed32"}

_MAX_VARINT_BYTES = 10
_UINT64 = (1 << 64) - 1
_MAX_FIELD_NUMBER = (1 << 29) - 1


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message (or not the message the caller expected)."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint starting at ``data[pos]`` and the position just after it."""
    result = 0
    for index in range(_MAX_VARINT_BYTES):
        if pos + index >= len(data):
            raise WireError(f"truncated varint at byte {pos}: the input ends inside it")
        byte = data[pos + index]
        result |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            if result > _UINT64:
                raise WireError(f"varint at byte {pos} does not fit in 64 bits")
            return result, pos + index + 1
    raise WireError(f"varint at byte {pos} is longer than {_MAX_VARINT_BYTES} bytes")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Every ``(field number, wire type, value)`` of one message level, in wire order.

    Varints, fixed64 and fixed32 come back as the raw unsigned integer (convert with :func:`as_int64`,
    :func:`as_double`, :func:`as_float`); length-delimited values as bytes. Raises :class:`WireError` on
    truncated input, field number 0 or out of range, and wire types 3, 4, 6 and 7.
    """
    pos = 0
    end = len(data)
    while pos < end:
        key_pos = pos
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 0x7
        if number == 0 or number > _MAX_FIELD_NUMBER:
            raise WireError(f"invalid field number {number} at byte {key_pos}")
        value: int | bytes
        if wire_type == VARINT:
            value, pos = read_varint(data, pos)
        elif wire_type == I64:
            value, pos = _fixed(data, pos, 8, number)
        elif wire_type == I32:
            value, pos = _fixed(data, pos, 4, number)
        elif wire_type == LEN:
            length, pos = read_varint(data, pos)
            if pos + length > end:
                raise WireError(f"truncated field {number} at byte {key_pos}: {length} bytes announced, "
                                f"{end - pos} left")
            value, pos = bytes(data[pos:pos + length]), pos + length
        else:
            raise WireError(f"unsupported wire type {wire_type} for field {number} at byte {key_pos} "
                            "(groups and reserved wire types are not valid here)")
        yield number, wire_type, value


def _fixed(data: bytes, pos: int, size: int, number: int) -> tuple[int, int]:
    if pos + size > len(data):
        raise WireError(f"truncated field {number} at byte {pos}: {size} bytes needed, {len(data) - pos} left")
    return int.from_bytes(data[pos:pos + size], "little"), pos + size


def expect(number: int, wire_type: int, value: int | bytes, want: int, what: str) -> None:
    """Fail unless a known field arrived with the wire type its schema gives it (``what`` names the field)."""
    if wire_type != want:
        raise WireError(f"{what} (field {number}) has wire type {WIRE_TYPE_NAMES.get(wire_type, wire_type)}, "
                        f"expected {WIRE_TYPE_NAMES[want]}")


def as_int(value: int | bytes) -> int:
    """A varint or fixed field's raw integer (after :func:`expect` checked the wire type)."""
    if isinstance(value, bytes):
        raise WireError("expected an integer field, got length-delimited bytes")
    return value


def as_bytes(value: int | bytes) -> bytes:
    """A length-delimited field's bytes (after :func:`expect` checked the wire type)."""
    if not isinstance(value, bytes):
        raise WireError("expected a length-delimited field, got an integer")
    return value


def as_int64(bits: int) -> int:
    """A varint read as a signed 64-bit integer: negative ``int64``/``int32`` values are 10-byte varints."""
    bits &= _UINT64
    return bits - (1 << 64) if bits >> 63 else bits


def as_double(bits: int) -> float:
    """The IEEE 754 double whose little-endian bit pattern ``bits`` is (a fixed64 value)."""
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def as_float(bits: int) -> float:
    """The IEEE 754 single whose bit pattern ``bits`` is (a fixed32 value)."""
    return float(struct.unpack("<f", bits.to_bytes(4, "little"))[0])


def as_string(b: bytes) -> str:
    """A ``string`` field: proto3 requires UTF-8, so anything else is a wire error."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"string field is not valid UTF-8: {exc}") from None
