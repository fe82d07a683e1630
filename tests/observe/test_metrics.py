"""Metrics: series names, labels and values as a scraper sees them (the parsed exposition), replace semantics."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gangscale.observe.metrics import DECISION_LATENCY_BUCKETS, Metrics

Labels = frozenset[tuple[str, str]]


def scrape(metrics: Metrics) -> dict[str, dict[Labels, float]]:
    """Sample name -> label set -> value, from the rendered exposition."""
    body, _ = metrics.render()
    out: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def labels(**kv: str) -> Labels:
    return frozenset(kv.items())


def klass(cls: str, **kv: str) -> Labels:
    return frozenset({"class": cls, **kv}.items())


def test_render_is_prometheus_text() -> None:
    body, content_type = Metrics().render()
    assert content_type.startswith("text/plain")
    assert b"# TYPE gangscale_bookings gauge" in body


def test_registries_are_private() -> None:
    # Two controllers in one process must neither clash on registration nor see each other's samples.
    a, b = Metrics(), Metrics()
    a.set_bookings(3)
    assert scrape(a)["gangscale_bookings"] == {labels(): 3}
    assert scrape(b)["gangscale_bookings"] == {labels(): 0}


@pytest.mark.parametrize(("dry_run", "label"), [(False, "false"), (True, "true")], ids=["live", "dry-run"])
def test_outcomes_count_per_class_and_reason(dry_run: bool, label: str) -> None:
    m = Metrics(dry_run=dry_run)
    m.outcome("queued-provisioning.gke.io", "CapacityIsProvisioned")
    m.outcome("queued-provisioning.gke.io", "CapacityIsProvisioned")
    m.outcome("check-capacity.autoscaling.x-k8s.io", "CapacityIsNotFound")
    assert scrape(m)["gangscale_provisioning_request_outcomes_total"] == {
        klass("queued-provisioning.gke.io", outcome="CapacityIsProvisioned", dry_run=label): 2,
        klass("check-capacity.autoscaling.x-k8s.io", outcome="CapacityIsNotFound", dry_run=label): 1,
    }


@pytest.mark.parametrize(("dry_run", "label"), [(False, "false"), (True, "true")], ids=["live", "dry-run"])
def test_decision_latency_histogram(dry_run: bool, label: str) -> None:
    m = Metrics(dry_run=dry_run)
    m.condition_latency("c", "Provisioned", 0.3)
    m.condition_latency("c", "Provisioned", 45.0)
    m.condition_latency("c", "Accepted", 0.004)
    s = scrape(m)
    key = klass("c", condition="Provisioned", dry_run=label)
    assert s["gangscale_decision_latency_seconds_count"][key] == 2
    assert s["gangscale_decision_latency_seconds_sum"][key] == pytest.approx(45.3)
    buckets = {
        dict(lbls)["le"]: v
        for lbls, v in s["gangscale_decision_latency_seconds_bucket"].items()
        if dict(lbls)["condition"] == "Provisioned"
    }
    assert buckets["0.25"] == 0
    assert buckets["0.5"] == 1
    assert buckets["30.0"] == 1
    assert buckets["60.0"] == 2
    assert buckets["+Inf"] == 2
    assert len(buckets) == len(DECISION_LATENCY_BUCKETS) + 1
    assert min(DECISION_LATENCY_BUCKETS) == 0.005
    assert max(DECISION_LATENCY_BUCKETS) == 3600
    accepted = klass("c", condition="Accepted", dry_run=label)
    assert s["gangscale_decision_latency_seconds_count"][accepted] == 1


def test_negative_latency_is_clamped() -> None:
    # A creation timestamp truncated to whole seconds can be later than the controller's notion of "now".
    m = Metrics()
    m.condition_latency("c", "Accepted", -0.4)
    s = scrape(m)
    key = klass("c", condition="Accepted", dry_run="false")
    assert s["gangscale_decision_latency_seconds_sum"][key] == 0
    assert s["gangscale_decision_latency_seconds_bucket"][key | {("le", "0.005")}] == 1


# (setter, sample name, first update, second update, expected after the second, as label sets)
ReplaceCase = tuple[
    Callable[[Metrics, dict[tuple[str, ...], int]], None],
    str,
    dict[tuple[str, ...], int],
    dict[tuple[str, ...], int],
    dict[Labels, float],
]
REPLACE: list[tuple[str, ReplaceCase]] = [
    (
        "requests",
        (
            lambda m, v: m.set_requests({(c, st): n for (c, st), n in v.items()}),
            "gangscale_provisioning_requests",
            {("c1", "pending"): 2, ("c1", "booked"): 1, ("c2", "failed"): 4},
            {("c1", "pending"): 1, ("c2", "done"): 3},
            {klass("c1", state="pending"): 1, klass("c2", state="done"): 3},
        ),
    ),
    (
        "pool-units",
        (
            lambda m, v: m.set_pool_units({(p, st): n for (p, st), n in v.items()}),
            "gangscale_pool_units",
            {("tpu-a", "ready"): 4, ("tpu-a", "idle"): 2, ("tpu-b", "provisioning"): 8},
            {("tpu-a", "ready"): 6},
            {labels(pool="tpu-a", state="ready"): 6},
        ),
    ),
    (
        "backed-off",
        (
            lambda m, v: m.set_backed_off(p for (p,) in v),
            "gangscale_pool_backed_off",
            {("tpu-a",): 1, ("tpu-b",): 1},
            {("tpu-b",): 1, ("tpu-c",): 1},
            {labels(pool="tpu-b"): 1, labels(pool="tpu-c"): 1},
        ),
    ),
]


@pytest.mark.parametrize("case", [c for _, c in REPLACE], ids=[i for i, _ in REPLACE])
def test_gauges_replace_previous_values(case: ReplaceCase) -> None:
    setter, name, first, second, expected = case
    m = Metrics()
    setter(m, first)
    assert len(scrape(m)[name]) == len(first)
    setter(m, second)
    assert scrape(m)[name] == expected
    setter(m, {})
    assert name not in scrape(m)


def test_replace_rejects_a_bad_key_without_half_replacing() -> None:
    m = Metrics()
    m.set_pool_units({("tpu-a", "ready"): 4})
    with pytest.raises(ValueError, match="label tuples of 2"):
        m.set_pool_units({("tpu-b", "ready"): 1, ("tpu-c",): 1})  # type: ignore[dict-item]
    assert scrape(m)["gangscale_pool_units"] == {labels(pool="tpu-a", state="ready"): 4}


@pytest.mark.parametrize(
    ("error_class", "errors"),
    [(None, {}), ("QuotaExceeded", {labels(provider="gke", operation="resize", error_class="QuotaExceeded"): 1})],
    ids=["success", "failure"],
)
def test_provider_call(error_class: str | None, errors: dict[Labels, float]) -> None:
    m = Metrics()
    m.provider_call("gke", "resize", 1.5, error_class)
    s = scrape(m)
    key = labels(provider="gke", operation="resize")
    assert s["gangscale_provider_call_duration_seconds_count"] == {key: 1}
    assert s["gangscale_provider_call_duration_seconds_sum"] == {key: 1.5}
    assert s.get("gangscale_provider_errors_total", {}) == errors


def test_bookings_gauge() -> None:
    m = Metrics()
    m.set_bookings(5)
    m.set_bookings(2)
    assert scrape(m)["gangscale_bookings"] == {labels(): 2}


def test_backoffs_count_per_pool_and_reason() -> None:
    m = Metrics()
    m.backoff("tpu-a", "stockout")
    m.backoff("tpu-a", "stockout")
    m.backoff("tpu-b", "quota")
    assert scrape(m)["gangscale_pool_backoffs_total"] == {
        labels(pool="tpu-a", reason="stockout"): 2,
        labels(pool="tpu-b", reason="quota"): 1,
    }


@pytest.mark.parametrize(("dry_run", "label"), [(False, "false"), (True, "true")], ids=["live", "dry-run"])
def test_scaled_units(dry_run: bool, label: str) -> None:
    m = Metrics(dry_run=dry_run)
    m.scaled("tpu-a", "up", 4)
    m.scaled("tpu-a", "up", 2)
    m.scaled("tpu-a", "down", 1)
    assert scrape(m)["gangscale_scaled_units_total"] == {
        labels(pool="tpu-a", direction="up", dry_run=label): 6,
        labels(pool="tpu-a", direction="down", dry_run=label): 1,
    }


@pytest.mark.parametrize(
    ("direction", "units", "match"),
    [("sideways", 1, "direction"), ("up", -1, "negative")],
    ids=["bad-direction", "negative-units"],
)
def test_scaled_rejects_bad_input(direction: str, units: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Metrics().scaled("tpu-a", direction, units)


def test_plan_pass() -> None:
    m = Metrics()
    m.plan_pass(0.002, 7)
    m.plan_pass(0.004, 3)
    s = scrape(m)
    assert s["gangscale_plan_pass_duration_seconds_count"] == {labels(): 2}
    assert s["gangscale_plan_pass_duration_seconds_sum"][labels()] == pytest.approx(0.006)
    assert s["gangscale_gangs_planned"] == {labels(): 3}


def test_every_pass_is_timed_and_stamped() -> None:
    m = Metrics()
    m.pass_finished(1_700_000_000.0, 0.003)
    m.pass_finished(1_700_000_001.0, 0.2)
    m.pass_finished(1_700_000_002.0)  # a stamp without a duration is no observation
    s = scrape(m)
    assert s["gangscale_pass_duration_seconds_count"] == {labels(): 2}
    assert s["gangscale_pass_duration_seconds_sum"][labels()] == pytest.approx(0.203)
    assert s["gangscale_last_pass_timestamp_seconds"] == {labels(): 1_700_000_002.0}
