"""What the running controller reports: metrics series, readiness and health, for a real scale-up."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_for
from tests.controller.harness import running_cluster

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
ATOMIC = "atomic-scale-up.gangscale.io"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_a_scale_up_after_a_stockout_shows_in_every_series(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        assert cl.ctl.is_ready() == (True, "ok") and cl.ctl.healthy() == (True, "ok")
        cl.cloud.faults("tpu-a").stockout = True
        await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
        await cl.provreq("ms", ("slice", 2))
        await cl.wait_condition("ms", "Provisioned", "False", "ScaleUpInProgress")

        async def fallback_nodes_exist() -> bool:  # the clock may move only once their Ready timers are armed
            return len(await cl.nodes("tpu-b")) == 2

        await wait_for(fallback_nodes_exist)
        await cl.advance(30)
        await cl.wait_condition("ms", "Provisioned", "True", "CapacityIsProvisioned")
        await cl.advance(1)
        body, _ = cl.ctl.metrics.render()
    got = samples(body.decode())

    def value(name: str, **labels: str) -> float:
        return got.get((name, tuple(sorted(labels.items()))), 0.0)

    dry = {"dry_run": "false"}
    assert value("gangscale_provisioning_request_outcomes_total", **{"class": ATOMIC}, outcome="Accepted", **dry) == 1
    assert value("gangscale_provisioning_request_outcomes_total", **{"class": ATOMIC},
                 outcome="CapacityIsProvisioned", **dry) == 1
    # Provisioned was first written 0 s after creation (ScaleUpInProgress): one latency sample per condition type.
    assert value("gangscale_decision_latency_seconds_count", **{"class": ATOMIC}, condition="Provisioned", **dry) == 1
    assert value("gangscale_decision_latency_seconds_count", **{"class": ATOMIC}, condition="Accepted", **dry) == 1
    assert value("gangscale_provider_errors_total", provider="simulated", operation="obtain",
                 error_class="stockout") == 1
    assert value("gangscale_provider_call_duration_seconds_count", provider="simulated", operation="obtain") == 2
    assert value("gangscale_pool_backoffs_total", pool="tpu-a", reason="stockout") == 1
    assert value("gangscale_pool_backed_off", pool="tpu-a") == 1
    assert value("gangscale_pool_units", pool="tpu-b", state="ready") == 1
    assert value("gangscale_pool_units", pool="tpu-b", state="booked") == 1
    assert value("gangscale_bookings") == 1
    assert value("gangscale_provisioning_requests", **{"class": ATOMIC}, state="booked") == 1
    assert value("gangscale_scaled_units_total", pool="tpu-b", direction="up", **dry) == 1
