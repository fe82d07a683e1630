"""EC2 failures as the provider's error classes (``cloud-providers.md`` §3.2 and §4.2).

Codes come from EC2's error reference (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html) and
reach the provider three ways: a whole call refused (botocore's ``ClientError``, code in ``Error.Code``), an item of
a fleet's ``Errors`` (``ErrorCode``), and the state reason of an instance that ended at launch
(``StateReason.Code``, such as ``Server.InsufficientInstanceCapacity``).

- STOCKOUT: ``InsufficientInstanceCapacity``, ``InsufficientCapacity``, ``UnfulfillableCapacity``,
  ``InsufficientHostCapacity``, ``ReservationCapacityExceeded``, ``Unsupported`` (the offering is not available in
  the zone), and a fleet of type instant that launched nothing without saying why (its ``MinTargetCapacity`` unmet).
- QUOTA, apart from stockouts (Karpenter lumps them together as "unfulfillable capacity", ``pkg/errors/errors.go``;
  gangscale backs a quota off for longer and tells an operator): ``VcpuLimitExceeded``, ``InstanceLimitExceeded``,
  ``MaxSpotInstanceCountExceeded``, ``MaxFleetCountExceeded``, ``InsufficientFreeAddressesInSubnet``, and any other
  ``…LimitExceeded`` but ``RequestLimitExceeded``.
- TRANSIENT: throttling (``RequestLimitExceeded``, HTTP 503, ``EC2ThrottledException``, ``Throttling``: what
  botocore's standard retry mode treats as throttling, ``botocore/data/_retry.json``), server errors
  (``InternalError``, ``ServiceUnavailable``, ``Unavailable``, any HTTP 5xx) and connection failures. A throttled call
  was not applied; a server error or a lost connection leaves the outcome unknown (``rolled_back=False``): the
  caller repeats the call with the same token, which the fleet's ``ClientToken`` makes safe.
- PERMANENT: everything else (``IdempotentParameterMismatch``, ``UnauthorizedOperation``, ``AuthFailure``,
  ``InvalidParameterValue``, ``InvalidLaunchTemplateId.NotFound``, ``InvalidUserData.Malformed``, …).

``x-amz-retry-after`` (milliseconds, the header botocore's standard retry mode honours,
``botocore/retries/standard.py``) becomes ``retry_after`` in seconds. botocore is imported only when an error is
classified, so importing the provider stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gangscale.providers.base import ErrorClass, ProviderError

STOCKOUT_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "UnfulfillableCapacity",
                            "InsufficientHostCapacity", "ReservationCapacityExceeded", "Unsupported"})
QUOTA_CODES = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded",
                         "MaxFleetCountExceeded", "InsufficientFreeAddressesInSubnet"})
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "EC2ThrottledException", "Throttling", "ThrottlingException"})
SERVER_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})
#: A fleet of type instant that launched nothing and listed no error: its minimum target capacity was not met.
UNFULFILLED = "MinTargetCapacityNotMet"


def error_class(code: str, http_status: int = 0) -> ErrorClass:
    """The class of an EC2 error code (``Server.``/``Client.`` prefixes of state reasons ignored)."""
    code = code.removeprefix("Server.").removeprefix("Client.")
    if code in STOCKOUT_CODES:
        return ErrorClass.STOCKOUT
    if code in QUOTA_CODES or (code.endswith("LimitExceeded") and code != "RequestLimitExceeded"):
        return ErrorClass.QUOTA
    if code in THROTTLE_CODES or code in SERVER_CODES or http_status >= 500:
        return ErrorClass.TRANSIENT
    return ErrorClass.PERMANENT


def unknown_outcome(code: str, http_status: int) -> bool:
    """Whether a whole-call error leaves it unknown if the call was applied: a server error may come after the
    work; a throttle, a quota or a refused request comes before any."""
    return error_class(code, http_status) is ErrorClass.TRANSIENT and code not in THROTTLE_CODES


def retry_after(headers: Mapping[str, Any]) -> float | None:
    """``x-amz-retry-after`` in seconds (the header is in milliseconds); None when absent or malformed."""
    raw = next((value for key, value in headers.items() if str(key).lower() == "x-amz-retry-after"), None)
    try:
        return max(0.0, float(raw) / 1000.0) if raw is not None else None
    except (TypeError, ValueError):
        return None


def from_exception(exc: Exception, pool: str, *, rolled_back: bool = True) -> ProviderError:
    """A failed call: botocore's ``ClientError`` by its code, a connection failure or timeout as TRANSIENT with an
    unknown outcome, any other botocore failure (no credentials, a parameter botocore refused) as PERMANENT.
    ``rolled_back``: whether nothing of the obtain is left if the call was not applied (the caller says)."""
    from botocore.exceptions import (  # noqa: PLC0415 (lazy: importing the provider stays cheap)
        BotoCoreError,
        ClientError,
        HTTPClientError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError  # noqa: PLC0415

    if isinstance(exc, ClientError):
        response: Mapping[str, Any] = exc.response or {}
        error = response.get("Error") or {}
        meta = response.get("ResponseMetadata") or {}
        code, status = str(error.get("Code") or "Unknown"), int(meta.get("HTTPStatusCode") or 0)
        return ProviderError(error_class(code, status), code, str(error.get("Message") or exc), pool=pool,
                             retry_after=retry_after(meta.get("HTTPHeaders") or {}),
                             rolled_back=rolled_back and not unknown_outcome(code, status))
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return ProviderError(ErrorClass.TRANSIENT, "Unavailable", f"{type(exc).__name__}: {exc}", pool=pool,
                             rolled_back=False)
    if isinstance(exc, BotoCoreError):
        return ProviderError(ErrorClass.PERMANENT, type(exc).__name__, str(exc), pool=pool, rolled_back=rolled_back)
    raise TypeError(f"not a botocore failure: {exc!r}")


def is_aws_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of a call to EC2 (what :func:`from_exception` classifies)."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    return isinstance(exc, BotoCoreError | ClientError)


def from_fleet_errors(errors: Iterable[Mapping[str, Any]], pool: str, *, rolled_back: bool = True) -> ProviderError:
    """A fleet's ``Errors[] {ErrorCode, ErrorMessage}``: a stockout code first, then a quota code, then the first
    code; no error at all is the fleet's minimum target capacity unmet (a stockout)."""
    items = [(str(e.get("ErrorCode") or ""), str(e.get("ErrorMessage") or "")) for e in errors]
    message = "; ".join(f"{code}: {text}" for code, text in items) or \
        "the fleet launched fewer instances than its minimum target capacity and gave no reason"
    for wanted in (ErrorClass.STOCKOUT, ErrorClass.QUOTA, ErrorClass.TRANSIENT):
        code = next((code for code, _ in items if code and error_class(code) is wanted), None)
        if code is not None:
            return ProviderError(wanted, code, message, pool=pool, rolled_back=rolled_back)
    if items and items[0][0]:
        return ProviderError(ErrorClass.PERMANENT, items[0][0], message, pool=pool, rolled_back=rolled_back)
    return ProviderError(ErrorClass.STOCKOUT, UNFULFILLED, message, pool=pool, rolled_back=rolled_back)


def from_state_reason(instance_id: str, reason: Mapping[str, Any], pool: str) -> ProviderError:
    """An instance that ended at launch (``StateReason``), the obtain rolled back: by its code, a stockout when it
    gives none (the capacity was not there to run it)."""
    code = str(reason.get("Code") or "")
    message = f"instance {instance_id} ended at launch: {reason.get('Message') or code or 'no reason given'}"
    cls = error_class(code) if code else ErrorClass.STOCKOUT
    if cls is ErrorClass.PERMANENT and code.startswith("Server."):
        cls = ErrorClass.STOCKOUT
    return ProviderError(cls, code or "InstanceTerminated", message, pool=pool, rolled_back=True)
