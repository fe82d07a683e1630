"""The pool file's capacity tiers (issue 28): a pool's ``capacityType`` and reservation, catalog prices for pools
without one, GKE's spot label, and the ``capacityTiers`` section (default and per-class policies), with every
problem named by its place in the file."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.config import ConfigError, parse_pool_file
from gangscale.model.prices import node_hour
from gangscale.model.tiers import FLEX_START, ON_DEMAND, RESERVATION, SPOT, TierPolicy

JSON = dict[str, Any]
GKE = {"project": "p", "location": "us-central1", "cluster": "c"}
A3 = {"name": "a3", "machineType": "a3-highgpu-8g", "zone": "us-central1-a", "maxUnits": 4}


def parsed(*pools: JSON, tiers: JSON | None = None) -> Any:
    data: JSON = {"nodePools": list(pools)}
    if tiers is not None:
        data["capacityTiers"] = tiers
    return parse_pool_file(data, "pools.yaml")


def errors_of(*pools: JSON, tiers: JSON | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parsed(*pools, tiers=tiers)
    return str(caught.value)


@pytest.mark.parametrize(("extra", "tier", "spot_label"), [
    pytest.param({}, ON_DEMAND, None, id="default-on-demand"),
    pytest.param({"capacityType": "spot"}, SPOT, "true", id="spot-labelled-as-gke-does"),
    pytest.param({"capacityType": "reservation", "reservation": {"name": "r1", "nodes": 8}}, RESERVATION, None,
                 id="reservation"),
    pytest.param({"gke": {**GKE, "mode": "flex-start", "nodePool": "flex"}}, FLEX_START, None,
                 id="gke-flex-start-mode"),
    pytest.param({"gke": {**GKE, "mode": "queued-provisioning", "nodePool": "q"}}, FLEX_START, None,
                 id="gke-queued-mode"),
])
def test_capacity_type_of_a_pool(extra: JSON, tier: str, spot_label: str | None) -> None:
    pool = parsed({**A3, **extra}).pools[0]
    assert pool.capacity_type == tier
    assert pool.labels.get("cloud.google.com/gke-spot") == spot_label


def test_a_reservation_bounds_the_units() -> None:
    pool = parsed({**A3, "maxUnits": 10, "capacityType": "reservation", "reservation": {"nodes": 6}}).pools[0]
    assert pool.reservation_nodes == 6 and pool.unit_limit == 6


@pytest.mark.parametrize(("extra", "price"), [
    pytest.param({}, node_hour("a3-highgpu-8g"), id="catalog-on-demand"),
    pytest.param({"capacityType": "spot"}, node_hour("a3-highgpu-8g", SPOT), id="catalog-spot"),
    pytest.param({"pricePerUnitHour": 50.0}, 50.0, id="the-file-wins"),
    pytest.param({"machineType": "custom-8", "allocatable": {"cpu": "8", "memory": "32Gi"}}, None,
                 id="unknown-machine-has-none"),
])
def test_prices_default_from_the_catalog(extra: JSON, price: float | None) -> None:
    assert parsed({**A3, **extra}).pools[0].price_per_unit_hour == price


def test_catalog_prices_per_unit_count_every_host_and_spot_is_cheaper() -> None:
    v5e = parsed({"name": "v5e", "machineType": "ct5lp-hightpu-4t", "tpuTopology": "2x4", "maxUnits": 2}).pools[0]
    per_node = node_hour("ct5lp-hightpu-4t")
    assert per_node is not None and v5e.price_per_unit_hour == pytest.approx(2 * per_node)
    on_demand, spot = node_hour("a3-highgpu-8g"), node_hour("a3-highgpu-8g", SPOT)
    assert on_demand is not None and spot is not None and spot < on_demand


def test_capacity_tiers_default_and_classes() -> None:
    policy = parsed(A3, tiers={"order": ["reservation", "on-demand"], "classes": {
        "atomic-scale-up.gangscale.io": {"order": ["spot", "on-demand"], "waitSeconds": {"spot": 600}},
        "mixed.example.com": {"mixTiers": True}}}).policy.tiers
    assert policy.default == TierPolicy((RESERVATION, ON_DEMAND))
    assert policy.for_class("atomic-scale-up.gangscale.io") == TierPolicy((SPOT, ON_DEMAND), wait={SPOT: 600})
    assert policy.for_class("mixed.example.com") == TierPolicy((RESERVATION, ON_DEMAND), mix=True)
    assert policy.for_class("other") == policy.default


def test_no_section_is_the_default_policy() -> None:
    assert parsed(A3).policy.tiers.default == TierPolicy()


@pytest.mark.parametrize(("pool", "tiers", "message"), [
    pytest.param({**A3, "capacityType": "cheap"}, None,
                 "nodePools[0] (a3).capacityType: must be one of reservation, on-demand, spot, flex-start; "
                 "got 'cheap'", id="unknown-type"),
    pytest.param({**A3, "reservation": {"nodes": 4}}, None,
                 "nodePools[0] (a3).reservation: is for a pool of capacityType reservation", id="reservation-not-res"),
    pytest.param({**A3, "capacityType": "spot", "gke": {**GKE, "mode": "flex-start", "nodePool": "f"}}, None,
                 "nodePools[0] (a3).capacityType: gke mode flex-start makes flex-start capacity; got 'spot'",
                 id="gke-mode-contradicts"),
    pytest.param({**A3, "capacityType": "reservation", "reservation": {"nodes": -1}}, None,
                 "nodePools[0] (a3).reservation.nodes", id="negative-reservation"),
    pytest.param(A3, {"order": ["spot", "cheap"]}, "capacityTiers.order: unknown tier 'cheap'", id="unknown-tier"),
    pytest.param(A3, {"order": ["spot"], "waitSeconds": {"on-demand": 60}},
                 "capacityTiers.waitSeconds: waits given for tiers not in the order (on-demand)",
                 id="wait-not-in-order"),
    pytest.param(A3, {"classes": {"c": {"order": ["spot", "spot"]}}}, "capacityTiers.classes.c.order: repeats a tier",
                 id="class-repeats"),
    pytest.param(A3, {"waitSeconds": {"spot": -5}}, "capacityTiers.waitSeconds: the wait for spot must be a number",
                 id="negative-wait"),
    pytest.param(A3, {"mixtiers": True}, "capacityTiers.mixtiers", id="typo"),
])
def test_tier_errors_name_where_and_why(pool: JSON, tiers: JSON | None, message: str) -> None:
    assert message in errors_of(pool, tiers=tiers)
