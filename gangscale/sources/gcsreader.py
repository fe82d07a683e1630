"""Ray's pending demand, read from the head's GCS: ``AutoscalerStateService.GetClusterResourceState``.

The reply (``ray.rpc.autoscaler.GetClusterResourceStateReply``, proto3, field numbers as in Ray 2.60) is decoded
by hand with :mod:`gangscale.sources.protowire` into small dataclasses, so gangscale depends neither on the
``ray`` wheel nor on protobuf generated code. Only the fields gangscale reads are decoded; every other field,
including ones a newer Ray adds, is skipped. The call goes through grpcio's generic API (no stubs): the request
message ``GetClusterResourceStateRequest{last_seen_cluster_resource_state_version = 0}`` encodes as empty bytes.

What is read (ray-accel-spec §2.1-2.3):

- ``ClusterResourceState.cluster_resource_state_version`` (1), ``node_states`` (3), ``pending_resource_requests``
  (4), ``pending_gang_resource_requests`` (5) and ``cluster_resource_constraints`` (6).
- ``NodeState``: ``instance_id`` (2, the pod name on KubeRay), ``ray_node_type_name`` (3, the worker group),
  ``available_resources`` (4), ``total_resources`` (5), ``status`` (8, as its enum name).
- ``GangResourceRequest``: the strategy and state are parsed from ``details`` (2),
  ``"<pg_id_hex>:<STRATEGY>|<STATE>"``, the only place the strategy name appears. The bundles come from the
  FIRST ``bundle_selectors`` entry (3), falling back to the deprecated ``requests`` (1) when there is none.
  Ray 2.60's own scheduler reads only the first selector too: further selectors are fallback alternatives
  (``fallback_strategy``), not extra bundles, so concatenating them would double the gang.

Simplifications and assumptions:

- Label selectors (``ResourceRequest.label_selectors``) and locality requirements are not read: bundles are
  matched to worker groups by resources only.
- The ``_PG_<id>`` affinity / anti-affinity placement constraints are ignored, except as a cross-check when
  ``details`` cannot be parsed: then anti-affinity means ``STRICT_SPREAD`` and affinity ``STRICT_PACK``
  (PACK and SPREAD carry no constraint, so their strategy stays ``""``).
- A singular message field that occurs twice is not merged as protobuf would; the last occurrence wins
  (the GCS never sends one twice).
- No TLS: Ray's GCS port speaks plaintext gRPC unless ``RAY_USE_TLS`` is set, which KubeRay does not do.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.sources.protowire import (
    I64,
    LEN,
    VARINT,
    WireError,
    as_bytes,
    as_double,
    as_int,
    as_int64,
    as_string,
    expect,
    fields,
)

__all__ = [
    "METHOD", "GangRequest", "GcsReader", "GcsUnavailable", "RayNode", "ResourceState", "WireError", "decode_reply",
    "grpc_available", "parse_details", "read_resource_state",
]

METHOD = "/ray.rpc.autoscaler.AutoscalerStateService/GetClusterResourceState"
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
NODE_STATUSES = {0: "UNSPECIFIED", 1: "RUNNING", 2: "DEAD", 3: "IDLE", 4: "DRAINING"}
_PG_LABEL_PREFIX = "_PG_"
# A cluster with thousands of nodes and placement groups can exceed grpcio's 4 MiB default reply size.
_MAX_REPLY_BYTES = 64 * 2**20
# grpcio backs off reconnecting up to 120 s by default; a poller wants to see a restarted head soon.
_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", _MAX_REPLY_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 5000),
)


@dataclass(frozen=True, slots=True)
class GangRequest:
    """One pending placement group (``GangResourceRequest``): the bundles that still need a node."""

    pg_id: str
    strategy: str
    state: str
    bundles: tuple[Mapping[str, float], ...]


@dataclass(frozen=True, slots=True)
class RayNode:
    """One Ray node (``NodeState``)."""

    instance_id: str
    node_type: str
    status: str
    total: Mapping[str, float]
    available: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class ResourceState:
    """``ClusterResourceState``: Ray's nodes and every kind of pending demand."""

    version: int
    nodes: tuple[RayNode, ...]
    gangs: tuple[GangRequest, ...]
    pending: tuple[tuple[Mapping[str, float], int], ...]
    constraints: tuple[tuple[Mapping[str, float], int], ...]


EMPTY_STATE = ResourceState(version=0, nodes=(), gangs=(), pending=(), constraints=())


# --- decoding -----------------------------------------------------------------------------------------------


def decode_reply(data: bytes) -> ResourceState:
    """Decode a ``GetClusterResourceStateReply``; raises :class:`WireError` when it is malformed."""
    state = EMPTY_STATE
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, "GetClusterResourceStateReply.cluster_resource_state")
            state = _cluster_state(as_bytes(value))
    return state


def _cluster_state(data: bytes) -> ResourceState:
    version = 0
    nodes: list[RayNode] = []
    gangs: list[GangRequest] = []
    pending: list[tuple[Mapping[str, float], int]] = []
    constraints: list[tuple[Mapping[str, float], int]] = []
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, VARINT, "ClusterResourceState.cluster_resource_state_version")
            version = as_int64(as_int(value))
        elif number == 3:
            expect(number, wire_type, value, LEN, "ClusterResourceState.node_states")
            nodes.append(_node(as_bytes(value)))
        elif number == 4:
            expect(number, wire_type, value, LEN, "ClusterResourceState.pending_resource_requests")
            pending.append(_request_by_count(as_bytes(value)))
        elif number == 5:
            expect(number, wire_type, value, LEN, "ClusterResourceState.pending_gang_resource_requests")
            gangs.append(_gang(as_bytes(value)))
        elif number == 6:
            expect(number, wire_type, value, LEN, "ClusterResourceState.cluster_resource_constraints")
            constraints.extend(_constraint(as_bytes(value)))
    return ResourceState(version=version, nodes=tuple(nodes), gangs=tuple(gangs), pending=tuple(pending),
                         constraints=tuple(constraints))


def _node(data: bytes) -> RayNode:
    instance_id = node_type = ""
    status = NODE_STATUSES[0]
    total: dict[str, float] = {}
    available: dict[str, float] = {}
    for number, wire_type, value in fields(data):
        if number == 2:
            expect(number, wire_type, value, LEN, "NodeState.instance_id")
            instance_id = as_string(as_bytes(value))
        elif number == 3:
            expect(number, wire_type, value, LEN, "NodeState.ray_node_type_name")
            node_type = as_string(as_bytes(value))
        elif number == 4:
            expect(number, wire_type, value, LEN, "NodeState.available_resources")
            _put_entry(available, as_bytes(value), "NodeState.available_resources")
        elif number == 5:
            expect(number, wire_type, value, LEN, "NodeState.total_resources")
            _put_entry(total, as_bytes(value), "NodeState.total_resources")
        elif number == 8:
            expect(number, wire_type, value, VARINT, "NodeState.status")
            code = as_int64(as_int(value))
            status = NODE_STATUSES.get(code, f"UNKNOWN_{code}")
    return RayNode(instance_id=instance_id, node_type=node_type, status=status, total=total, available=available)


def _put_entry(target: dict[str, float], data: bytes, what: str) -> None:
    """One ``map<string, double>`` entry (key 1, value 2; absent ones are the proto3 defaults)."""
    key, amount = "", 0.0
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, f"{what} key")
            key = as_string(as_bytes(value))
        elif number == 2:
            expect(number, wire_type, value, I64, f"{what} value")
            amount = as_double(as_int(value))
    target[key] = amount


def _resource_request(data: bytes) -> tuple[dict[str, float], str]:
    """A ``ResourceRequest``: its bundle, and ``STRICT_SPREAD``/``STRICT_PACK`` if it carries a PG constraint."""
    bundle: dict[str, float] = {}
    implied = ""
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, "ResourceRequest.resources_bundle")
            _put_entry(bundle, as_bytes(value), "ResourceRequest.resources_bundle")
        elif number == 2:
            expect(number, wire_type, value, LEN, "ResourceRequest.placement_constraints")
            implied = _constraint_strategy(as_bytes(value)) or implied
    return bundle, implied


def _constraint_strategy(data: bytes) -> str:
    for number, wire_type, value in fields(data):
        if number in (1, 2):
            expect(number, wire_type, value, LEN, "PlacementConstraint")
            if _label_name(as_bytes(value)).startswith(_PG_LABEL_PREFIX):
                return "STRICT_SPREAD" if number == 1 else "STRICT_PACK"
    return ""


def _label_name(data: bytes) -> str:
    name = ""
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, "PlacementConstraint.label_name")
            name = as_string(as_bytes(value))
    return name


def _request_by_count(data: bytes) -> tuple[Mapping[str, float], int]:
    bundle: Mapping[str, float] = {}
    count = 0
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, "ResourceRequestByCount.request")
            bundle, _ = _resource_request(as_bytes(value))
        elif number == 2:
            expect(number, wire_type, value, VARINT, "ResourceRequestByCount.count")
            count = as_int64(as_int(value))
    return bundle, count


def _constraint(data: bytes) -> Iterator[tuple[Mapping[str, float], int]]:
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, "ClusterResourceConstraint.resource_requests")
            yield _request_by_count(as_bytes(value))


def _gang(data: bytes) -> GangRequest:
    legacy: list[tuple[dict[str, float], str]] = []
    selectors: list[bytes] = []
    details = ""
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, "GangResourceRequest.requests")
            legacy.append(_resource_request(as_bytes(value)))
        elif number == 2:
            expect(number, wire_type, value, LEN, "GangResourceRequest.details")
            details = as_string(as_bytes(value))
        elif number == 3:
            expect(number, wire_type, value, LEN, "GangResourceRequest.bundle_selectors")
            selectors.append(as_bytes(value))
    requests = _selector_requests(selectors[0]) if selectors else legacy
    pg_id, strategy, state = parse_details(details)
    if not strategy:
        strategy = next((implied for _, implied in requests if implied), "")
    return GangRequest(pg_id=pg_id, strategy=strategy, state=state,
                       bundles=tuple(bundle for bundle, _ in requests))


def _selector_requests(data: bytes) -> list[tuple[dict[str, float], str]]:
    requests = []
    for number, wire_type, value in fields(data):
        if number == 1:
            expect(number, wire_type, value, LEN, "BundleSelector.resource_requests")
            requests.append(_resource_request(as_bytes(value)))
    return requests


def parse_details(details: str) -> tuple[str, str, str]:
    """``"<pg_id>:<STRATEGY>|<STATE>"`` -> ``(pg_id, strategy, state)``; strategy and state are ``""`` unless
    both separators are there (the id is then whatever precedes the first separator)."""
    head, colon, rest = details.partition(":")
    strategy, bar, state = rest.partition("|")
    if colon and bar:
        return head, strategy, state
    return details.split(":", 1)[0].split("|", 1)[0], "", ""


# --- the gRPC client ----------------------------------------------------------------------------------------


class GcsUnavailable(Exception):
    """The GCS could not be read; the message says why. ``reason`` is one of ``not-installed``, ``unreachable``,
    ``unauthenticated``, ``timeout``, ``unimplemented`` or ``error``; ``code`` the gRPC status code name."""

    def __init__(self, message: str, *, address: str = "", reason: str = "error", code: str | None = None) -> None:
        super().__init__(message)
        self.address = address
        self.reason = reason
        self.code = code


def grpc_available() -> bool:
    """Whether grpcio (the ``gangscale[ray]`` extra) is installed."""
    return importlib.util.find_spec("grpc") is not None


def _grpc() -> Any:
    try:
        import grpc  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: PLC0415
        import grpc.aio  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: PLC0415
    except ImportError as exc:
        raise GcsUnavailable(f"cannot read Ray's GCS: grpcio is not installed ({exc}); install gangscale[ray]",
                             reason="not-installed") from None
    return grpc


async def read_resource_state(address: str, *, token: str | None = None, timeout: float = 5.0) -> ResourceState:
    """One ``GetClusterResourceState`` call on ``address`` (``host:port`` of the GCS) over a fresh channel.

    Sends ``authorization: Bearer <token>`` when ``token`` is given. Raises :class:`GcsUnavailable` when the
    call fails and :class:`WireError` when the reply is malformed.
    """
    reader = GcsReader()
    try:
        return await reader.read(address, token, timeout)
    finally:
        await reader.aclose()


class GcsReader:
    """Reads GCS state over one ``grpc.aio`` channel per address, reused across calls.

    A channel whose call failed with ``UNAVAILABLE`` or a timeout is closed and dropped, so the next read dials
    afresh instead of waiting out grpcio's reconnect backoff. Not safe to share between event loops.
    """

    def __init__(self) -> None:
        self._channels: dict[str, Any] = {}

    async def read(self, address: str, token: str | None = None, timeout: float = 5.0) -> ResourceState:
        grpc = _grpc()
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)
            self._channels[address] = channel
        call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        try:
            raw = await call(b"", timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                await self._drop(address)
            raise _unavailable(grpc, address, exc, token is not None, timeout) from None
        return decode_reply(bytes(raw))

    async def _drop(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def aclose(self) -> None:
        """Close every channel."""
        while self._channels:
            await self._drop(next(iter(self._channels)))


def _unavailable(grpc: Any, address: str, exc: Any, sent_token: bool, timeout: float) -> GcsUnavailable:
    code = exc.code()
    name = str(getattr(code, "name", code))
    details = exc.details() or ""
    status = f"{name}: {details}" if details else name
    if code == grpc.StatusCode.UNAUTHENTICATED:
        why = "the token sent was rejected" if sent_token else \
            "no token was sent, but the cluster uses token authentication"
        reason, message = "unauthenticated", f"authentication failed ({status}); {why}"
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        reason, message = "timeout", f"no answer within {timeout:g}s ({status})"
    elif code == grpc.StatusCode.UNAVAILABLE:
        reason, message = "unreachable", f"unreachable ({status})"
    elif code == grpc.StatusCode.UNIMPLEMENTED:
        reason, message = "unimplemented", f"{METHOD} is not served ({status}); is this a Ray version without " \
            "the autoscaler state service?"
    else:
        reason, message = "error", f"the call failed ({status})"
    return GcsUnavailable(f"Ray GCS at {address}: {message}", address=address, reason=reason, code=name)
