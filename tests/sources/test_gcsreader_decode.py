"""Decoding GetClusterResourceStateReply (replies built with the test encoder, and one recorded from Ray 2.60), and
how the client reports failures without a Ray head (the live ones are in tests/ray)."""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from gangscale.sources.gcsreader import (
    EMPTY_STATE,
    GangRequest,
    GcsUnavailable,
    RayNode,
    _unavailable,
    decode_reply,
    grpc_available,
    parse_details,
    read_resource_state,
)
from gangscale.sources.protowire import WireError
from tests.sources import protobuild as pb

SS_ID = "a29d6f012c96b85a0dbc6d11f25401000000"
SP_ID = "124e99179ad4cfc928da99f0114f01000000"
RUNNING, IDLE = 1, 3


def full_reply() -> bytes:
    return pb.reply(
        pb.node("raycluster-gpu-worker-abcde", "gpu", RUNNING, {"CPU": 8.0, "GPU": 1.0, "memory": 3.2e10},
                {"CPU": 6.0, "GPU": 0.0, "memory": 3.2e10}),
        pb.node("raycluster-cpu-worker-fghij", "cpu", IDLE, {"CPU": 16.0}, {"CPU": 16.0}),
        pb.by_count(4, {"CPU": 1.0, "GPU": 1.0}, 3),
        pb.by_count(4, {"CPU": 0.5}, 10),
        pb.gang(f"{SS_ID}:STRICT_SPREAD|PENDING", [{"GPU": 1.0}] * 4, constraint="anti"),
        pb.gang(f"{SP_ID}:STRICT_PACK|RESCHEDULING", [{"CPU": 1.0}] * 8, constraint="affinity"),
        pb.constraint(({"CPU": 4.0}, 2), ({"GPU": 8.0}, 1)),
        pb.constraint(({"TPU": 4.0}, 4)),
        version=123,
    )


def test_full_reply() -> None:
    state = decode_reply(full_reply())
    assert state.version == 123
    assert state.nodes == (
        RayNode(instance_id="raycluster-gpu-worker-abcde", node_type="gpu", status="RUNNING",
                total={"CPU": 8.0, "GPU": 1.0, "memory": 3.2e10}, available={"CPU": 6.0, "GPU": 0.0, "memory": 3.2e10}),
        RayNode(instance_id="raycluster-cpu-worker-fghij", node_type="cpu", status="IDLE", total={"CPU": 16.0},
                available={"CPU": 16.0}),
    )
    assert state.gangs == (
        GangRequest(pg_id=SS_ID, strategy="STRICT_SPREAD", state="PENDING", bundles=({"GPU": 1.0},) * 4),
        GangRequest(pg_id=SP_ID, strategy="STRICT_PACK", state="RESCHEDULING", bundles=({"CPU": 1.0},) * 8),
    )
    assert state.pending == (({"CPU": 1.0, "GPU": 1.0}, 3), ({"CPU": 0.5}, 10))
    assert state.constraints == (({"CPU": 4.0}, 2), ({"GPU": 8.0}, 1), ({"TPU": 4.0}, 4))


def test_unknown_fields_at_every_level_are_skipped() -> None:
    unknown = pb.int_field(99, 5) + pb.fixed64_field(98, 1) + pb.bytes_field(97, b"\xff\x00") + pb.fixed32_field(96, 2)
    bundle = pb.map_sd(1, {"GPU": 2.0}) + unknown
    gang = pb.message(5, unknown, pb.str_field(2, "ab:PACK|PENDING"),
                      pb.message(3, pb.bytes_field(1, bundle), unknown), pb.message(8, unknown))
    node = pb.message(3, unknown, pb.str_field(3, "gpu"), pb.int_field(8, RUNNING),
                      pb.message(5, pb.str_field(1, "CPU"), pb.double_field(2, 4.0), unknown))
    data = pb.message(1, unknown, pb.int_field(1, 9), node, gang, pb.message(8, pb.str_field(1, "virtual")),
                      unknown) + unknown
    state = decode_reply(data)
    assert state.version == 9
    assert state.nodes == (RayNode(instance_id="", node_type="gpu", status="RUNNING", total={"CPU": 4.0},
                                   available={}),)
    assert state.gangs == (GangRequest(pg_id="ab", strategy="PACK", state="PENDING", bundles=({"GPU": 2.0},)),)


@pytest.mark.parametrize(("details", "constraint", "expected"), [
    ("0a1b", "", ("0a1b", "", "")),
    ("0a1b", "anti", ("0a1b", "STRICT_SPREAD", "")),
    ("0a1b", "affinity", ("0a1b", "STRICT_PACK", "")),
    ("0a1b:STRICT_SPREAD", "", ("0a1b", "", "")),
    ("0a1b|PENDING", "", ("0a1b", "", "")),
    ("", "", ("", "", "")),
    ("0a1b:SPREAD|PENDING", "", ("0a1b", "SPREAD", "PENDING")),
    ("0a1b:STRICT_SPREAD|PENDING", "affinity", ("0a1b", "STRICT_SPREAD", "PENDING")),
], ids=["no-separators", "no-separators-anti-affinity", "no-separators-affinity", "no-bar", "no-colon", "empty",
        "spread", "details-win-over-constraints"])
def test_details_parsing_and_constraint_cross_check(details: str, constraint: str,
                                                    expected: tuple[str, str, str]) -> None:
    [gang] = decode_reply(pb.reply(pb.gang(details, [{"CPU": 1.0}] * 2, constraint=constraint))).gangs
    assert (gang.pg_id, gang.strategy, gang.state) == expected
    assert gang.bundles == ({"CPU": 1.0},) * 2


@pytest.mark.parametrize(("details", "expected"), [
    ("ff:PACK|PENDING", ("ff", "PACK", "PENDING")),
    ("ff:STRICT_PACK|", ("ff", "STRICT_PACK", "")),
    ("ff:|PENDING", ("ff", "", "PENDING")),
    ("ff:NEW_STRATEGY|PENDING", ("ff", "NEW_STRATEGY", "PENDING")),
    ("ff", ("ff", "", "")),
], ids=["pack", "empty-state", "empty-strategy", "unknown-strategy-kept", "bare-id"])
def test_parse_details(details: str, expected: tuple[str, str, str]) -> None:
    assert parse_details(details) == expected


def test_legacy_requests_when_there_are_no_bundle_selectors() -> None:
    [gang] = decode_reply(pb.reply(pb.gang("ee:STRICT_SPREAD|PENDING", [{"GPU": 1.0}, {"GPU": 2.0}],
                                           selector=False))).gangs
    assert gang.bundles == ({"GPU": 1.0}, {"GPU": 2.0})


def test_first_bundle_selector_only() -> None:
    # Further selectors are fallback alternatives, not more bundles.
    [gang] = decode_reply(pb.reply(pb.gang("ee:PACK|PENDING", [{"GPU": 1.0}] * 2, legacy=False,
                                           extra_selectors=[[{"CPU": 8.0}] * 3]))).gangs
    assert gang.bundles == ({"GPU": 1.0},) * 2


def test_selectors_win_over_legacy_requests() -> None:
    legacy = pb.bytes_field(1, pb.resource_request({"CPU": 99.0}))
    selector = pb.message(3, pb.bytes_field(1, pb.resource_request({"GPU": 1.0})))
    data = pb.reply(pb.message(5, legacy, pb.str_field(2, "e:PACK|PENDING"), selector))
    [gang] = decode_reply(data).gangs
    assert gang.bundles == ({"GPU": 1.0},)


def test_unknown_node_status_and_defaults() -> None:
    [node] = decode_reply(pb.reply(pb.message(3, pb.int_field(8, 9)), pb.message(3))).nodes[:1]
    assert node.status == "UNKNOWN_9"
    assert decode_reply(pb.reply(pb.message(3))).nodes[0] == RayNode("", "", "UNSPECIFIED", {}, {})


def test_map_entry_without_key_or_value_uses_proto3_defaults() -> None:
    node = pb.message(3, pb.message(5, pb.str_field(1, "CPU")), pb.message(5, pb.double_field(2, 3.0)))
    assert decode_reply(pb.reply(node)).nodes[0].total == {"CPU": 0.0, "": 3.0}


@pytest.mark.parametrize("data", [b"", pb.message(1), pb.int_field(5, 1)], ids=["empty", "empty-state", "unknown-only"])
def test_empty_replies(data: bytes) -> None:
    assert decode_reply(data) == EMPTY_STATE


@pytest.mark.parametrize(("data", "message"), [
    (pb.int_field(1, 3), r"cluster_resource_state \(field 1\) has wire type varint"),
    (pb.message(1, pb.str_field(1, "x")), r"cluster_resource_state_version \(field 1\) has wire type length"),
    (pb.reply(pb.message(3, pb.str_field(8, "RUNNING"))), r"NodeState.status \(field 8\)"),
    (pb.reply(pb.message(3, pb.message(4, pb.str_field(1, "CPU"), pb.int_field(2, 1)))),
     r"NodeState.available_resources value \(field 2\) has wire type varint, expected fixed64"),
    (pb.reply(pb.message(5, pb.int_field(2, 1))), r"GangResourceRequest.details"),
    (pb.reply(pb.message(3, pb.bytes_field(2, b"\xff"))), "UTF-8"),
    (full_reply()[:-9], "truncated"),
], ids=["reply-field-varint", "version-bytes", "status-string", "map-value-varint", "details-varint", "bad-utf8",
        "truncated"])
def test_malformed_replies(data: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        decode_reply(data)


# GetClusterResourceStateReply recorded from a Ray 2.60.0 head (2 CPUs, no GPU) holding a placed detached
# 1-CPU PACK placement group and two pending ones: 4x{GPU:1} STRICT_SPREAD and 8x{CPU:1} STRICT_PACK.
# The expectations below were read off Ray's own parser (autoscaler_pb2 from the wheel), not this decoder.
RAY_260_REPLY = base64.b64decode("""
    CucUCA0atgcKHKMBMBEYgqTJ0W3d/ocW9Cz5G14tovc8j0clYmgiHgoTb2JqZWN0X3N0b3JlX21lbW9yeREAAGBmuvj7QSI8CjFi
    dW5kbGVfZ3JvdXBfZDU5YmIzMWM4NzIxNjZkZDZiZWE5NjhkZjc0NDAxMDAwMDAwEQAAAAAAQI9AIjkKLkNQVV9ncm91cF9kNTli
    YjMxYzg3MjE2NmRkNmJlYTk2OGRmNzQ0MDEwMDAwMDARAAAAAAAA8D8iEQoGbWVtb3J5EQAAaGYXURBCIiEKFm5vZGU6X19pbnRl
    cm5hbF9oZWFkX18RAAAAAAAA8D8iOwowQ1BVX2dyb3VwXzBfZDU5YmIzMWM4NzIxNjZkZDZiZWE5NjhkZjc0NDAxMDAwMDAwEQAA
    AAAAAPA/IhkKDm5vZGU6MTI3LjAuMC4xEQAAAAAAAPA/Ij4KM2J1bmRsZV9ncm91cF8wX2Q1OWJiMzFjODcyMTY2ZGQ2YmVhOTY4
    ZGY3NDQwMTAwMDAwMBEAAAAAAECPQCIOCgNDUFURAAAAAAAA8D8qEQoGbWVtb3J5EQAAaGYXURBCKjsKMENQVV9ncm91cF8wX2Q1
    OWJiMzFjODcyMTY2ZGQ2YmVhOTY4ZGY3NDQwMTAwMDAwMBEAAAAAAADwPyo5Ci5DUFVfZ3JvdXBfZDU5YmIzMWM4NzIxNjZkZDZi
    ZWE5NjhkZjc0NDAxMDAwMDAwEQAAAAAAAPA/KjwKMWJ1bmRsZV9ncm91cF9kNTliYjMxYzg3MjE2NmRkNmJlYTk2OGRmNzQ0MDEw
    MDAwMDARAAAAAABAj0AqIQoWbm9kZTpfX2ludGVybmFsX2hlYWRfXxEAAAAAAADwPyo+CjNidW5kbGVfZ3JvdXBfMF9kNTliYjMx
    Yzg3MjE2NmRkNmJlYTk2OGRmNzQ0MDEwMDAwMDARAAAAAABAj0AqHgoTb2JqZWN0X3N0b3JlX21lbW9yeREAAGBmuvj7QSoZCg5u
    b2RlOjEyNy4wLjAuMREAAAAAAADwPyoOCgNDUFURAAAAAAAAAEAyLAooX1BHX2Q1OWJiMzFjODcyMTY2ZGQ2YmVhOTY4ZGY3NDQw
    MTAwMDAwMBIAOA1AAVIJMTI3LjAuMC4xYh9SZXNvdXJjZTogQ1BVIGN1cnJlbnRseSBpbiB1c2UuakoKDnJheS5pby9ub2RlLWlk
    EjhhMzAxMzAxMTE4ODJhNGM5ZDE2ZGRkZmU4NzE2ZjQyY2Y5MWI1ZTJkYTJmNzNjOGY0NzI1NjI2OCq/BAo+Cg4KA0dQVREAAAAA
    AADwPxIsCioKKF9QR181ODA5ZjUwZDQ4ZWVlMmI2MDYzNmZiYmEyNzNjMDEwMDAwMDAKPgoOCgNHUFURAAAAAAAA8D8SLAoqCihf
    UEdfNTgwOWY1MGQ0OGVlZTJiNjA2MzZmYmJhMjczYzAxMDAwMDAwCj4KDgoDR1BVEQAAAAAAAPA/EiwKKgooX1BHXzU4MDlmNTBk
    NDhlZWUyYjYwNjM2ZmJiYTI3M2MwMTAwMDAwMAo+Cg4KA0dQVREAAAAAAADwPxIsCioKKF9QR181ODA5ZjUwZDQ4ZWVlMmI2MDYz
    NmZiYmEyNzNjMDEwMDAwMDASOjU4MDlmNTBkNDhlZWUyYjYwNjM2ZmJiYTI3M2MwMTAwMDAwMDpTVFJJQ1RfU1BSRUFEfFBFTkRJ
    TkcagAIKPgoOCgNHUFURAAAAAAAA8D8SLAoqCihfUEdfNTgwOWY1MGQ0OGVlZTJiNjA2MzZmYmJhMjczYzAxMDAwMDAwCj4KDgoD
    R1BVEQAAAAAAAPA/EiwKKgooX1BHXzU4MDlmNTBkNDhlZWUyYjYwNjM2ZmJiYTI3M2MwMTAwMDAwMAo+Cg4KA0dQVREAAAAAAADw
    PxIsCioKKF9QR181ODA5ZjUwZDQ4ZWVlMmI2MDYzNmZiYmEyNzNjMDEwMDAwMDAKPgoOCgNHUFURAAAAAAAA8D8SLAoqCihfUEdf
    NTgwOWY1MGQ0OGVlZTJiNjA2MzZmYmJhMjczYzAxMDAwMDAwKr0ICj4KDgoDQ1BVEQAAAAAAAPA/EiwSKgooX1BHXzMyZWExYzQ4
    OWY2NmY5YjI1MDY4OWFhN2IxY2IwMTAwMDAwMAo+Cg4KA0NQVREAAAAAAADwPxIsEioKKF9QR18zMmVhMWM0ODlmNjZmOWIyNTA2
    ODlhYTdiMWNiMDEwMDAwMDAKPgoOCgNDUFURAAAAAAAA8D8SLBIqCihfUEdfMzJlYTFjNDg5ZjY2ZjliMjUwNjg5YWE3YjFjYjAx
    MDAwMDAwCj4KDgoDQ1BVEQAAAAAAAPA/EiwSKgooX1BHXzMyZWExYzQ4OWY2NmY5YjI1MDY4OWFhN2IxY2IwMTAwMDAwMAo+Cg4K
    A0NQVREAAAAAAADwPxIsEioKKF9QR18zMmVhMWM0ODlmNjZmOWIyNTA2ODlhYTdiMWNiMDEwMDAwMDAKPgoOCgNDUFURAAAAAAAA
    8D8SLBIqCihfUEdfMzJlYTFjNDg5ZjY2ZjliMjUwNjg5YWE3YjFjYjAxMDAwMDAwCj4KDgoDQ1BVEQAAAAAAAPA/EiwSKgooX1BH
    XzMyZWExYzQ4OWY2NmY5YjI1MDY4OWFhN2IxY2IwMTAwMDAwMAo+Cg4KA0NQVREAAAAAAADwPxIsEioKKF9QR18zMmVhMWM0ODlm
    NjZmOWIyNTA2ODlhYTdiMWNiMDEwMDAwMDASODMyZWExYzQ4OWY2NmY5YjI1MDY4OWFhN2IxY2IwMTAwMDAwMDpTVFJJQ1RfUEFD
    S3xQRU5ESU5HGoAECj4KDgoDQ1BVEQAAAAAAAPA/EiwSKgooX1BHXzMyZWExYzQ4OWY2NmY5YjI1MDY4OWFhN2IxY2IwMTAwMDAw
    MAo+Cg4KA0NQVREAAAAAAADwPxIsEioKKF9QR18zMmVhMWM0ODlmNjZmOWIyNTA2ODlhYTdiMWNiMDEwMDAwMDAKPgoOCgNDUFUR
    AAAAAAAA8D8SLBIqCihfUEdfMzJlYTFjNDg5ZjY2ZjliMjUwNjg5YWE3YjFjYjAxMDAwMDAwCj4KDgoDQ1BVEQAAAAAAAPA/EiwS
    KgooX1BHXzMyZWExYzQ4OWY2NmY5YjI1MDY4OWFhN2IxY2IwMTAwMDAwMAo+Cg4KA0NQVREAAAAAAADwPxIsEioKKF9QR18zMmVh
    MWM0ODlmNjZmOWIyNTA2ODlhYTdiMWNiMDEwMDAwMDAKPgoOCgNDUFURAAAAAAAA8D8SLBIqCihfUEdfMzJlYTFjNDg5ZjY2Zjli
    MjUwNjg5YWE3YjFjYjAxMDAwMDAwCj4KDgoDQ1BVEQAAAAAAAPA/EiwSKgooX1BHXzMyZWExYzQ4OWY2NmY5YjI1MDY4OWFhN2Ix
    Y2IwMTAwMDAwMAo+Cg4KA0NQVREAAAAAAADwPxIsEioKKF9QR18zMmVhMWM0ODlmNjZmOWIyNTA2ODlhYTdiMWNiMDEwMDAwMDA6
    KHNlc3Npb25fMjAyNi0xMS0yMV8xMS00Mi0wMl8wMjc3NjlfMTE4NjQ="""
)
RAY_PLACED_PG = "d59bb31c872166dd6bea968df74401000000"


def test_reply_recorded_from_ray_2_60() -> None:
    state = decode_reply(RAY_260_REPLY)
    assert state.version == 13
    [node] = state.nodes
    assert (node.instance_id, node.node_type, node.status) == ("", "", "RUNNING")
    assert node.total["CPU"] == 2.0
    assert node.available["CPU"] == 1.0
    assert node.total[f"CPU_group_{RAY_PLACED_PG}"] == 1.0
    assert node.total[f"bundle_group_0_{RAY_PLACED_PG}"] == 1000.0
    assert node.total["memory"] == 17519991194.0
    assert state.gangs == (
        GangRequest(pg_id="5809f50d48eee2b60636fbba273c01000000", strategy="STRICT_SPREAD", state="PENDING",
                    bundles=({"GPU": 1.0},) * 4),
        GangRequest(pg_id="32ea1c489f66f9b250689aa7b1cb01000000", strategy="STRICT_PACK", state="PENDING",
                    bundles=({"CPU": 1.0},) * 8),
    )
    assert state.pending == ()
    assert state.constraints == ()


# --- the client's failures ---------------------------------------------------------------------------------


async def test_without_grpcio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # makes ``import grpc`` raise ImportError
    monkeypatch.setitem(sys.modules, "grpc.aio", None)
    assert not grpc_available()
    with pytest.raises(GcsUnavailable, match=r"grpcio is not installed .*; install gangscale\[ray\]") as err:
        await read_resource_state("127.0.0.1:6379")
    assert err.value.reason == "not-installed"


@dataclass
class FakeRpcError:
    status: Any
    text: str

    def code(self) -> Any:
        return self.status

    def details(self) -> str:
        return self.text


@pytest.mark.parametrize(("code", "details", "token", "reason", "message"), [
    ("UNAUTHENTICATED", "InvalidAuthToken: Authentication token is missing or incorrect", False, "unauthenticated",
     "authentication failed (UNAUTHENTICATED: InvalidAuthToken: Authentication token is missing or incorrect); "
     "no token was sent, but the cluster uses token authentication"),
    ("UNAUTHENTICATED", "", True, "unauthenticated", "authentication failed (UNAUTHENTICATED); the token sent was "
     "rejected"),
    ("DEADLINE_EXCEEDED", "Deadline Exceeded", False, "timeout", "no answer within 2.5s (DEADLINE_EXCEEDED: "
     "Deadline Exceeded)"),
    ("UNAVAILABLE", "failed to connect to all addresses", False, "unreachable",
     "unreachable (UNAVAILABLE: failed to connect to all addresses)"),
    ("UNIMPLEMENTED", "", False, "unimplemented", "/ray.rpc.autoscaler.AutoscalerStateService/"
     "GetClusterResourceState is not served (UNIMPLEMENTED)"),
    ("RESOURCE_EXHAUSTED", "too big", False, "error", "the call failed (RESOURCE_EXHAUSTED: too big)"),
], ids=["no-token", "wrong-token", "timeout", "unreachable", "unimplemented", "other"])
def test_failure_messages(code: str, details: str, token: bool, reason: str, message: str) -> None:
    grpc = pytest.importorskip("grpc")
    error = _unavailable(grpc, "rc-head-svc.ns.svc:6379", FakeRpcError(getattr(grpc.StatusCode, code), details),
                         token, 2.5)
    assert (error.reason, error.code, error.address) == (reason, code, "rc-head-svc.ns.svc:6379")
    assert str(error).startswith(f"Ray GCS at rc-head-svc.ns.svc:6379: {message}")
