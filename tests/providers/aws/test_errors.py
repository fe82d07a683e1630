"""EC2 error codes as error classes (cloud-providers.md §3.2 and §4.2): stockouts apart from quotas, throttles and
server errors transient, the rest permanent; whole-call failures as botocore raises them."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from gangscale.providers.aws.errors import (
    UNFULFILLED,
    error_class,
    from_exception,
    from_fleet_errors,
    from_state_reason,
    retry_after,
)
from gangscale.providers.base import ErrorClass

S, Q, T, P = ErrorClass.STOCKOUT, ErrorClass.QUOTA, ErrorClass.TRANSIENT, ErrorClass.PERMANENT


@pytest.mark.parametrize(("code", "status", "expected"), [
    ("InsufficientInstanceCapacity", 500, S),
    ("InsufficientCapacity", 400, S),
    ("UnfulfillableCapacity", 400, S),
    ("InsufficientHostCapacity", 400, S),
    ("ReservationCapacityExceeded", 400, S),
    ("Unsupported", 400, S),
    ("Server.InsufficientInstanceCapacity", 0, S),
    ("VcpuLimitExceeded", 400, Q),
    ("InstanceLimitExceeded", 400, Q),
    ("MaxSpotInstanceCountExceeded", 400, Q),
    ("MaxFleetCountExceeded", 400, Q),
    ("InsufficientFreeAddressesInSubnet", 400, Q),
    ("VolumeLimitExceeded", 400, Q),
    ("Client.VolumeLimitExceeded", 0, Q),
    ("RequestLimitExceeded", 503, T),
    ("EC2ThrottledException", 400, T),
    ("Throttling", 400, T),
    ("InternalError", 500, T),
    ("ServiceUnavailable", 503, T),
    ("Unavailable", 503, T),
    ("SomethingNew", 502, T),
    ("IdempotentParameterMismatch", 400, P),
    ("UnauthorizedOperation", 403, P),
    ("AuthFailure", 401, P),
    ("InvalidParameterValue", 400, P),
    ("InvalidLaunchTemplateId.NotFound", 400, P),
    ("InvalidUserData.Malformed", 400, P),
])
def test_error_codes_map_to_classes(code: str, status: int, expected: ErrorClass) -> None:
    assert error_class(code, status) is expected


def client_error(code: str, status: int, headers: dict[str, str] | None = None) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": f"{code} said"},
                     "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}}}
    return ClientError(response, "CreateFleet")


@pytest.mark.parametrize(("code", "status", "expected", "rolled_back"), [
    ("VcpuLimitExceeded", 400, Q, True),
    ("InsufficientInstanceCapacity", 500, S, True),
    ("RequestLimitExceeded", 503, T, True),  # throttled before any work: nothing was made
    ("InternalError", 500, T, False),  # maybe after the work: the outcome is unknown
    ("Unavailable", 503, T, False),
    ("UnauthorizedOperation", 403, P, True),
])
def test_a_refused_call_keeps_its_code_and_says_whether_anything_may_be_left(
        code: str, status: int, expected: ErrorClass, rolled_back: bool) -> None:
    error = from_exception(client_error(code, status), "gpu")
    assert (error.error_class, error.code, error.message, error.pool, error.rolled_back) == \
        (expected, code, f"{code} said", "gpu", rolled_back)


def test_x_amz_retry_after_is_milliseconds() -> None:
    error = from_exception(client_error("RequestLimitExceeded", 503, {"x-amz-retry-after": "1500"}), "gpu")
    assert error.retry_after == 1.5
    assert from_exception(client_error("RequestLimitExceeded", 503), "gpu").retry_after is None
    assert retry_after({"X-Amz-Retry-After": "250"}) == 0.25
    assert retry_after({"x-amz-retry-after": "soon"}) is None


@pytest.mark.parametrize("exc", [
    EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"),
    ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
    ConnectionClosedError(endpoint_url="http://127.0.0.1:1"),
])
def test_a_lost_connection_is_transient_with_an_unknown_outcome(exc: Exception) -> None:
    error = from_exception(exc, "gpu")
    assert (error.error_class, error.rolled_back) == (T, False)


def test_other_botocore_failures_are_permanent() -> None:
    error = from_exception(NoCredentialsError(), "gpu")
    assert (error.error_class, error.code, error.rolled_back) == (P, "NoCredentialsError", True)
    with pytest.raises(TypeError):
        from_exception(ValueError("not EC2's"), "gpu")


@pytest.mark.parametrize(("codes", "expected", "code"), [
    (["InsufficientInstanceCapacity"], S, "InsufficientInstanceCapacity"),
    (["VcpuLimitExceeded"], Q, "VcpuLimitExceeded"),
    (["VcpuLimitExceeded", "InsufficientInstanceCapacity"], S, "InsufficientInstanceCapacity"),
    (["InvalidParameterValue"], P, "InvalidParameterValue"),
    (["InternalError"], T, "InternalError"),
    ([], S, UNFULFILLED),
])
def test_fleet_errors(codes: list[str], expected: ErrorClass, code: str) -> None:
    error = from_fleet_errors([{"ErrorCode": c, "ErrorMessage": f"{c}!"} for c in codes], "gpu")
    assert (error.error_class, error.code, error.rolled_back) == (expected, code, True)
    assert all(f"{c}: {c}!" in error.message for c in codes)


def test_an_instance_ended_at_launch() -> None:
    error = from_state_reason("i-1", {"Code": "Server.InsufficientInstanceCapacity", "Message": "no room"}, "gpu")
    assert (error.error_class, error.code, error.rolled_back) == (S, "Server.InsufficientInstanceCapacity", True)
    assert (from_state_reason("i-1", {}, "gpu").error_class, from_state_reason("i-1", {"Code": "Server.Odd"},
                                                                                "gpu").error_class) == (S, S)
