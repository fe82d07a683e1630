"""``spec.parameters`` read with bounds (``gangscale.sources.provreqparams``): a table of values and what is used."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gangscale.model.tiers import ON_DEMAND, SPOT, TierPolicy
from gangscale.sources.provreqparams import MAX_BOOKING_SECONDS, Parameters, read, tier_policy


@dataclass(frozen=True)
class Case:
    id: str
    parameters: dict[str, str]
    want: Parameters
    #: Substrings of each problem, in order.
    problems: tuple[str, ...] = ()


CASES = [
    Case("none", {}, Parameters()),
    Case("booking", {"bookingSeconds": "90"}, Parameters(booking_seconds=90.0)),
    Case("booking-zero", {"bookingSeconds": "0"}, Parameters(booking_seconds=0.0)),
    Case("booking-fraction", {"bookingSeconds": " 1.5 "}, Parameters(booking_seconds=1.5)),
    Case("booking-exactly-7-days", {"bookingSeconds": "604800"}, Parameters(booking_seconds=MAX_BOOKING_SECONDS)),
    Case("booking-forever-is-cut", {"bookingSeconds": "999999999999"},
         Parameters(booking_seconds=MAX_BOOKING_SECONDS), ("bookingSeconds '999999999999' is more than 7 days",)),
    Case("booking-overflow-is-ignored", {"bookingSeconds": "1e400"}, Parameters(), ("bookingSeconds '1e400'",)),
    Case("booking-inf", {"bookingSeconds": "inf"}, Parameters(), ("bookingSeconds 'inf'",)),
    Case("booking-nan", {"bookingSeconds": "nan"}, Parameters(), ("bookingSeconds 'nan'",)),
    Case("booking-negative", {"bookingSeconds": "-5"}, Parameters(), ("bookingSeconds '-5'",)),
    Case("booking-words", {"bookingSeconds": "ten minutes"}, Parameters(),
         ("bookingSeconds 'ten minutes' is not a number of seconds from 0 to 604800; the controller's --booking-ttl",)),
    Case("booking-empty", {"bookingSeconds": ""}, Parameters()),
    Case("requested", {"provisionedWhen": "requested"}, Parameters(provisioned_when_requested=True)),
    Case("ready", {"provisionedWhen": "Ready"}, Parameters()),
    Case("when-unknown", {"provisionedWhen": "Immediately"}, Parameters(),
         ("provisionedWhen 'Immediately' is neither Ready nor Requested; Ready is used",)),
    Case("no-retry", {"noRetry": "TRUE"}, Parameters(no_retry=True)),
    Case("no-retry-false", {"noRetry": "false"}, Parameters()),
    Case("no-retry-yes", {"noRetry": "yes"}, Parameters(), ("noRetry 'yes' is neither true nor false; false is used",)),
    Case("spread", {"spreadZones": "true"}, Parameters(spread_zones=True)),
    Case("spread-1", {"spreadZones": "1"}, Parameters(), ("spreadZones '1'",)),
    Case("several", {"bookingSeconds": "x", "noRetry": "y"}, Parameters(), ("bookingSeconds 'x'", "noRetry 'y'")),
    Case("others-are-not-ours", {"maxRunDurationSeconds": "nonsense"}, Parameters()),
    Case("tiers", {"capacityTiers": "spot:600, on-demand"},
         Parameters(tier_order=("spot", "on-demand"), tier_wait=(("spot", 600.0),))),
    Case("tiers-unknown", {"capacityTiers": "spot,cheap"}, Parameters(),
         ("parameter capacityTiers 'spot,cheap': unknown tier 'cheap'; tiers are reservation, on-demand, spot, "
          "flex-start; the class's capacity tiers are used",)),
    Case("tiers-negative-wait", {"capacityTiers": "spot:-1,on-demand"}, Parameters(),
         ("capacityTiers 'spot:-1,on-demand': the wait for spot must be a number of seconds, 0 or more",)),
    Case("mix", {"mixCapacityTiers": "true"}, Parameters(mix_tiers=True)),
    Case("mix-false", {"mixCapacityTiers": "False"}, Parameters(mix_tiers=False)),
    Case("mix-maybe", {"mixCapacityTiers": "maybe"}, Parameters(mix_tiers=False),
         ("mixCapacityTiers 'maybe' is neither true nor false",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_parameters(case: Case) -> None:
    got = read(case.parameters)
    assert (got.booking_seconds, got.provisioned_when_requested, got.no_retry, got.spread_zones) == (
        case.want.booking_seconds, case.want.provisioned_when_requested, case.want.no_retry, case.want.spread_zones)
    assert (got.tier_order, got.tier_wait, got.mix_tiers) == (case.want.tier_order, case.want.tier_wait,
                                                              case.want.mix_tiers)
    assert len(got.problems) == len(case.problems), got.problems
    for problem, part in zip(got.problems, case.problems, strict=True):
        assert part in problem


@pytest.mark.parametrize(("parameters", "want"), [
    pytest.param({}, TierPolicy((SPOT, ON_DEMAND), wait={SPOT: 60}), id="the-class-policy"),
    pytest.param({"capacityTiers": "on-demand"}, TierPolicy((ON_DEMAND,)), id="order-replaces-order-and-waits"),
    pytest.param({"mixCapacityTiers": "true"}, TierPolicy((SPOT, ON_DEMAND), mix=True, wait={SPOT: 60}),
                 id="mix-only"),
    pytest.param({"capacityTiers": "bogus"}, TierPolicy((SPOT, ON_DEMAND), wait={SPOT: 60}), id="bad-keeps-class"),
])
def test_a_request_overrides_its_class_tier_policy(parameters: dict[str, str], want: TierPolicy) -> None:
    assert tier_policy(read(parameters), TierPolicy((SPOT, ON_DEMAND), wait={SPOT: 60})) == want
