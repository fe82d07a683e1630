"""Build info, process metrics and the time of the last pass, as a scraper reads them."""

from __future__ import annotations

import platform
from pathlib import Path

from gangscale import __version__
from gangscale.observe.metrics import Metrics
from tests.controller.harness import running_cluster
from tests.observe.test_metrics import labels, scrape


def test_build_info_names_the_version_and_python() -> None:
    assert scrape(Metrics())["gangscale_build_info"] == {
        labels(version=__version__, python_version=platform.python_version()): 1}


def test_process_and_python_metrics_are_on_the_private_registry() -> None:
    samples = scrape(Metrics())
    assert "python_info" in samples and "python_gc_collections_total" in samples
    if Path("/proc/self/stat").exists():  # prometheus_client reads the process metrics from /proc
        assert samples["process_resident_memory_bytes"][labels()] > 0
        assert "process_cpu_seconds_total" in samples


def test_the_last_pass_time_is_zero_until_a_pass_then_the_pass_clock() -> None:
    metrics = Metrics()
    assert scrape(metrics)["gangscale_last_pass_timestamp_seconds"] == {labels(): 0}
    metrics.pass_finished(1_700_000_000.5)
    assert scrape(metrics)["gangscale_last_pass_timestamp_seconds"] == {labels(): 1_700_000_000.5}


async def test_the_controller_sets_the_last_pass_time_at_every_pass(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cl:
        await cl.idle()
        await cl.advance(61)  # an idle controller still passes once a minute
        await cl.idle()
        last = cl.ctl.last_pass
        value = scrape(cl.ctl.metrics)["gangscale_last_pass_timestamp_seconds"][labels()]
    assert last is not None and value == last > 0
