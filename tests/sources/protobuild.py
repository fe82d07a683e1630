"""A tiny protobuf wire-format encoder for tests, and builders for the Ray autoscaler messages gangscale reads.

Written independently of the decoder under test (gangscale.sources.protowire), straight from the encoding rules:
key = field << 3 | wire type; varints little-endian base 128; fixed64/32 little-endian; negative ints as
10-byte two's complement varints.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def int_field(field: int, value: int) -> bytes:
    return key(field, 0) + varint(value)


def double_field(field: int, value: float) -> bytes:
    return key(field, 1) + struct.pack("<d", value)


def fixed32_field(field: int, value: int) -> bytes:
    return key(field, 5) + struct.pack("<I", value)


def fixed64_field(field: int, value: int) -> bytes:
    return key(field, 1) + struct.pack("<Q", value)


def bytes_field(field: int, value: bytes) -> bytes:
    return key(field, 2) + varint(len(value)) + value


def str_field(field: int, value: str) -> bytes:
    return bytes_field(field, value.encode())


def message(field: int, *parts: bytes) -> bytes:
    return bytes_field(field, b"".join(parts))


def map_sd(field: int, entries: Mapping[str, float]) -> bytes:
    """A ``map<string, double>`` field: one length-delimited entry message per key."""
    return b"".join(message(field, str_field(1, k), double_field(2, v)) for k, v in entries.items())


# --- ray.rpc.autoscaler messages (field numbers from Ray 2.60's autoscaler.proto) ---------------------------


def resource_request(bundle: Mapping[str, float], *, anti_affinity: str = "", affinity: str = "") -> bytes:
    parts = [map_sd(1, bundle)]
    if anti_affinity:
        parts.append(message(2, message(1, str_field(1, anti_affinity))))
    if affinity:
        parts.append(message(2, message(2, str_field(1, affinity))))
    return b"".join(parts)


def gang(details: str, bundles: Iterable[Mapping[str, float]], *, constraint: str = "", selector: bool = True,
         legacy: bool = True, extra_selectors: Iterable[Iterable[Mapping[str, float]]] = ()) -> bytes:
    """A GangResourceRequest (field 5 of ClusterResourceState). ``constraint`` is ``anti``/``affinity``/``""``."""
    label = "_PG_" + details.split(":", maxsplit=1)[0]
    requests = [resource_request(b, anti_affinity=label if constraint == "anti" else "",
                                 affinity=label if constraint == "affinity" else "") for b in bundles]
    parts = []
    if legacy:
        parts += [bytes_field(1, r) for r in requests]
    parts.append(str_field(2, details))
    if selector:
        parts.append(message(3, *(bytes_field(1, r) for r in requests)))
    for other in extra_selectors:
        parts.append(message(3, *(bytes_field(1, resource_request(b)) for b in other)))
    return message(5, *parts)


def node(instance_id: str, node_type: str, status: int, total: Mapping[str, float],
         available: Mapping[str, float]) -> bytes:
    """A NodeState (field 3 of ClusterResourceState), with the fields gangscale skips filled in too."""
    return message(3, bytes_field(1, b"\x01\x02\xff"), str_field(2, instance_id), str_field(3, node_type),
                   map_sd(4, available), map_sd(5, total), int_field(7, 42), int_field(8, status),
                   int_field(9, 1500), str_field(10, "10.0.0.1"), str_field(12, "Resource: CPU currently in use."),
                   message(13, str_field(1, "ray.io/node-id"), str_field(2, "abc")))


def by_count(field: int, bundle: Mapping[str, float], count: int) -> bytes:
    """A ResourceRequestByCount as field ``field``."""
    return message(field, message(1, resource_request(bundle)), int_field(2, count))


def constraint(*requests: tuple[Mapping[str, float], int]) -> bytes:
    """A ClusterResourceConstraint (field 6 of ClusterResourceState)."""
    return message(6, *(by_count(1, bundle, count) for bundle, count in requests))


def reply(*state_parts: bytes, version: int = 7) -> bytes:
    """A GetClusterResourceStateReply wrapping a ClusterResourceState."""
    return message(1, int_field(1, version), int_field(2, 3), *state_parts, str_field(7, "session_test"))
