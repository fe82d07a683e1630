"""The ``spec.parameters`` of a ProvisioningRequest that gangscale reads, checked once when the object is parsed.

Parameters are free-form strings (the CRD types them ``map[string]Parameter``, a string of at most 255 characters),
filled by Kueue from the ProvisioningRequestConfig and from ``provreq.kueue.x-k8s.io/<name>`` annotations on the
job, so anything can arrive. A value gangscale cannot use is not an error of the request: the default is used
instead, and :func:`read` says which parameter, which value, and what is used, for an Event the user sees.

Bounds (assumptions, also in the README):

- ``bookingSeconds``: a finite number of seconds, 0 or more, at most 7 days. Seven days is how long a request lives
  after its outcome: gangscale's ``--terminal-ttl`` and the cluster-autoscaler both delete a ProvisioningRequest
  7 days after its ``Provisioned`` condition changed (``defaultTerminalProvReqTTL``), so a longer booking would
  outlive its object. A larger value is cut to 7 days; a negative, non-numeric, NaN or infinite one is ignored.
- ``provisionedWhen``: ``Ready`` or ``Requested`` (case-insensitive); anything else means ``Ready``.
- ``noRetry``, ``spreadZones``: ``true`` or ``false`` (case-insensitive); anything else means ``false``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gangscale.sources.provreq import BOOKING_SECONDS, NO_RETRY, PROVISIONED_WHEN, SPREAD_ZONES

#: The longest booking: the 7 days after which a request's object is deleted (see the module docstring).
MAX_BOOKING_SECONDS = 7 * 86400.0
READY, REQUESTED = "ready", "requested"
_BOOLEANS = ("true", "false")


@dataclass(frozen=True, slots=True)
class Parameters:
    #: None: the controller's ``--booking-ttl``.
    booking_seconds: float | None = None
    provisioned_when_requested: bool = False
    no_retry: bool = False
    spread_zones: bool = False
    #: One sentence per parameter that was not used as given: name, value, and what is used instead.
    problems: tuple[str, ...] = ()


def read(parameters: Mapping[str, str]) -> Parameters:
    problems: list[str] = []
    booking = _booking_seconds(parameters.get(BOOKING_SECONDS), problems)
    when = str(parameters.get(PROVISIONED_WHEN, "")).strip()
    if when and when.lower() not in (READY, REQUESTED):
        problems.append(f"parameter {PROVISIONED_WHEN} {when!r} is neither Ready nor Requested; Ready is used")
    return Parameters(booking_seconds=booking, provisioned_when_requested=when.lower() == REQUESTED,
                      no_retry=_flag(parameters, NO_RETRY, problems),
                      spread_zones=_flag(parameters, SPREAD_ZONES, problems), problems=tuple(problems))


def _booking_seconds(raw: str | None, problems: list[str]) -> float | None:
    if raw is None or not str(raw).strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        problems.append(f"parameter {BOOKING_SECONDS} {raw!r} is not a number of seconds from 0 to "
                        f"{MAX_BOOKING_SECONDS:.0f}; the controller's --booking-ttl is used")
        return None
    if value > MAX_BOOKING_SECONDS:
        problems.append(f"parameter {BOOKING_SECONDS} {raw!r} is more than 7 days (the request is deleted 7 days after "
                        f"its outcome); {MAX_BOOKING_SECONDS:.0f} is used")
        return MAX_BOOKING_SECONDS
    return value


def _flag(parameters: Mapping[str, str], name: str, problems: list[str]) -> bool:
    raw = str(parameters.get(name, "")).strip()
    if raw and raw.lower() not in _BOOLEANS:
        problems.append(f"parameter {name} {raw!r} is neither true nor false; false is used")
    return raw.lower() == "true"
