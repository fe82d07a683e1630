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
- ``capacityTiers``: the request's own tier order and waits, overriding its class's (the pool file's
  ``capacityTiers``): tiers separated by commas, each optionally with ``:`` and the seconds to wait for it before the
  next opens (``spot:600,on-demand``). A value that does not parse (an unknown or repeated tier, a wait that is not
  a number of seconds) is ignored: the class's policy is used.
- ``mixCapacityTiers``: ``true`` lets the request's gang span its tiers; ``false`` keeps it in one; anything else
  (or absent) leaves the class's choice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gangscale.model.tiers import TierError, TierPolicy, parse_tiers
from gangscale.sources.provreq import (
    BOOKING_SECONDS,
    CAPACITY_TIERS,
    MIX_CAPACITY_TIERS,
    NO_RETRY,
    PROVISIONED_WHEN,
    SPREAD_ZONES,
)

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
    #: ``capacityTiers``: the tier order and waits (None: the class's).
    tier_order: tuple[str, ...] | None = None
    tier_wait: tuple[tuple[str, float], ...] = ()
    #: ``mixCapacityTiers`` (None: the class's).
    mix_tiers: bool | None = None
    #: One sentence per parameter that was not used as given: name, value, and what is used instead.
    problems: tuple[str, ...] = ()


def read(parameters: Mapping[str, str]) -> Parameters:
    problems: list[str] = []
    booking = _booking_seconds(parameters.get(BOOKING_SECONDS), problems)
    when = str(parameters.get(PROVISIONED_WHEN, "")).strip()
    if when and when.lower() not in (READY, REQUESTED):
        problems.append(f"parameter {PROVISIONED_WHEN} {when!r} is neither Ready nor Requested; Ready is used")
    order, wait = _tiers(parameters.get(CAPACITY_TIERS), problems)
    mix_raw = str(parameters.get(MIX_CAPACITY_TIERS, "")).strip()
    return Parameters(booking_seconds=booking, provisioned_when_requested=when.lower() == REQUESTED,
                      no_retry=_flag(parameters, NO_RETRY, problems),
                      spread_zones=_flag(parameters, SPREAD_ZONES, problems), tier_order=order,
                      tier_wait=tuple(sorted(wait.items())),
                      mix_tiers=_flag(parameters, MIX_CAPACITY_TIERS, problems) if mix_raw else None,
                      problems=tuple(problems))


def tier_policy(params: Parameters, base: TierPolicy) -> TierPolicy:
    """The request's tier policy: its class's (``base``) with the parameters' overrides."""
    if params.tier_order is None and params.mix_tiers is None:
        return base
    order = base.order if params.tier_order is None else params.tier_order
    wait = dict(params.tier_wait) if params.tier_order is not None else dict(base.wait)
    return TierPolicy(order, base.mix if params.mix_tiers is None else params.mix_tiers, wait)


def _tiers(raw: str | None, problems: list[str]) -> tuple[tuple[str, ...] | None, dict[str, float]]:
    if raw is None or not str(raw).strip():
        return None, {}
    try:
        order, wait = parse_tiers(str(raw))
        TierPolicy(order, wait=wait)  # the waits' own checks (finite, 0 or more)
    except TierError as exc:
        problems.append(f"parameter {CAPACITY_TIERS} {raw!r}: {exc}; the class's capacity tiers are used")
        return None, {}
    return order, wait


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
