"""A cache that stops being current stops the decisions (issue 26, point 5), with the real controller on the
embedded API server: the controller's node watch is refused for good (RBAC taken away, say) while every other watch
and request keeps answering. Past ``--api-unreachable-timeout`` without progress, ``/readyz`` fails naming the
watch, ``gangscale_watch_healthy{resource="nodes"}`` is 0, and a new request gets no decision at all, since a plan on
the stale view could scale up for capacity that exists or down a node that is booked. Once the watch is served
again, the request is decided."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from gangscale.sim.apiserver import Fault
from tests.conftest import wait_for
from tests.controller.harness import FAST, running_cluster

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
BOUND = 0.5
#: The controller's client in the harness.
AGENT = "gangscale"
HANG_GUARD = 30.0


async def test_a_watch_refused_for_good_fails_readyz_and_stops_decisions(tmp_path: Path) -> None:
    settings = replace(FAST, api_unreachable_timeout=BOUND)
    async with running_cluster(tmp_path, settings=settings, start=False) as cl:
        # The controller's node watches end after one event, so that the one open when the refusal starts ends.
        short = cl.server.inject(Fault(verb="watch", resource="nodes", user_agent=AGENT, drop_after_events=1,
                                       times=None))
        await cl.start()
        await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
        refused = [cl.server.inject(Fault(verb=verb, resource="nodes", user_agent=AGENT, status=403,
                                          message="nodes is forbidden", times=None)) for verb in ("list", "watch")]
        short.times = short.acted  # used up: the next watch is refused
        await cl.ready_node("static-0", {"cpu": "4", "pods": "110"})  # an event: the open watch ends after it
        deadline = time.monotonic() + HANG_GUARD
        while True:
            await cl.ctl.http.request("GET", "/version")  # the API server answers: only the node watch is stale
            ready, why = cl.ctl.is_ready()
            if not ready:
                break
            assert time.monotonic() < deadline, "readyz never failed"
            await asyncio.sleep(0.05)
        assert why.startswith("the watch of nodes has failed for ") and "403" in why, why
        assert why.endswith("(nothing is decided on a stale cache)")
        metrics = cl.ctl.metrics.render()[0].decode()
        assert 'gangscale_watch_healthy{resource="nodes"} 0.0' in metrics
        assert 'gangscale_watch_healthy{resource="provisioningrequests"} 1.0' in metrics

        await cl.provreq("waits", ("slice", 2))
        await cl.advance(5)
        assert await cl.conditions("waits") == {}
        assert cl.obtains() == []

        for fault in refused:
            fault.times = 0  # used up: served again
        await cl.advance(2)
        await cl.wait_condition("waits", "Accepted", "True", "Accepted", timeout=HANG_GUARD)
        await cl.advance(1)
        await wait_for(lambda: len(cl.obtains()) == 1, timeout=HANG_GUARD)
        assert cl.ctl.is_ready()[0]
