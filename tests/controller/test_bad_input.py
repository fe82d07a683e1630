"""One request's bad input or failure is that request's (issue 25, point 1), with the real controller on the embedded
API server: unusable parameters are replaced and told in an Event naming the parameter and the value used, and a step
that raises on one request is told on that request and retried later, while the pass goes on for everyone else."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from gangscale.controller.logic import reconcile as reconcile_module
from gangscale.controller.logic.request import RequestState
from gangscale.kube.resources import EVENTS
from gangscale.sources.provreqparams import MAX_BOOKING_SECONDS
from gangscale.timefmt import parse_rfc3339
from tests.controller.harness import NS, Cluster, running_cluster

POOLS = """
nodePools:
  - name: cpu
    zone: zone-a
    maxUnits: 16
    allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
    simulated: {provisionSeconds: 30}
"""
GOOD = [f"good-{i}" for i in range(10)]


async def events(cl: Cluster, involved: str, reason: str) -> list[str]:
    listed = await cl.http.request("GET", EVENTS.path(NS))
    return [e["message"] for e in listed["items"]
            if e["involvedObject"]["name"] == involved and e["reason"] == reason]


async def booked_until(cl: Cluster, name: str) -> float:
    message = (await cl.conditions(name))["Provisioned"][2]
    return parse_rfc3339(message.split("capacity booked until ")[1].split(" ")[0]) or 0.0


async def test_unusable_parameters_are_replaced_and_told_and_disturb_no_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = {"forever": {"bookingSeconds": "999999999999"}, "infinite": {"bookingSeconds": "1e400"},
           "words": {"bookingSeconds": "ten minutes", "provisionedWhen": "Immediately", "noRetry": "yes"}}
    async with running_cluster(tmp_path, pool_yaml=POOLS) as cl:
        await cl.template("w", {"cpu": "12"})
        for name in GOOD[:5]:
            await cl.provreq(name, ("w", 1))
        for name, parameters in bad.items():
            await cl.provreq(name, ("w", 1), parameters=parameters)
        for name in GOOD[5:]:
            await cl.provreq(name, ("w", 1))
        await cl.advance_stepwise(31)
        provisioned_at = cl.clock.now()

        for name in [*GOOD, *bad]:
            assert await cl.condition(name, "Provisioned") == ("True", "CapacityIsProvisioned"), name
        assert await booked_until(cl, "forever") == pytest.approx(provisioned_at - 1 + MAX_BOOKING_SECONDS, abs=2)
        assert await booked_until(cl, "infinite") == pytest.approx(provisioned_at - 1 + 600, abs=2)
        assert await events(cl, "forever", "InvalidParameter") == [
            "parameter bookingSeconds '999999999999' is more than 7 days (the request is deleted 7 days after its "
            "outcome); 604800 is used"]
        assert await events(cl, "infinite", "InvalidParameter") == [
            "parameter bookingSeconds '1e400' is not a number of seconds from 0 to 604800; the controller's "
            "--booking-ttl is used"]
        assert sorted(await events(cl, "words", "InvalidParameter")) == [
            "parameter bookingSeconds 'ten minutes' is not a number of seconds from 0 to 604800; the controller's "
            "--booking-ttl is used",
            "parameter noRetry 'yes' is neither true nor false; false is used",
            "parameter provisionedWhen 'Immediately' is neither Ready nor Requested; Ready is used"]
        for name in GOOD:
            assert await events(cl, name, "InvalidParameter") == []
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_a_step_that_raises_on_one_request_is_that_requests_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Fault injection: writing ``Provisioned=True`` raises for one request (as ``rfc3339`` did for a booking of
    10^12 s). The ten others are provisioned in the same pass; the bad one gets ``ReconcileError`` and one
    traceback in the log, and is tried again after ``--retry-initial`` — and succeeds once the fault is gone."""
    real = reconcile_module.provisioned

    def faulty(st: RequestState, *args: Any) -> None:
        if st.key == f"{NS}/bad":
            raise ValueError("year 33715 is out of range")
        real(st, *args)

    monkeypatch.setattr(reconcile_module, "provisioned", faulty)
    async with running_cluster(tmp_path, pool_yaml=POOLS) as cl:
        await cl.template("w", {"cpu": "12"})
        for name in GOOD[:5]:
            await cl.provreq(name, ("w", 1))
        await cl.provreq("bad", ("w", 1))
        for name in GOOD[5:]:
            await cl.provreq(name, ("w", 1))
        await cl.advance_stepwise(31)
        for name in GOOD:
            assert await cl.condition(name, "Provisioned") == ("True", "CapacityIsProvisioned"), name
        status, reason, message = (await cl.conditions("bad"))["Provisioned"]
        assert (status, reason) == ("False", "ReconcileError")
        assert message.startswith("gangscale could not reconcile this request (ValueError: year 33715 is out of "
                                  "range); this is a bug in gangscale or input it does not handle; next attempt at ")
        assert len(await events(cl, "bad", "ReconcileError")) == 1
        tracebacks = [r for r in caplog.records if r.exc_info]
        assert [r.getMessage() for r in tracebacks] == [
            "default/bad: could not reconcile (attempt 1): ValueError: year 33715 is out of range"]
        # Within its backoff the request is not looked at, though its nodes keep changing (kubelet heartbeats).
        await cl.advance_stepwise(30)
        assert [r.getMessage() for r in caplog.records if r.exc_info] == [
            "default/bad: could not reconcile (attempt 1): ValueError: year 33715 is out of range"]
        assert len(await events(cl, "bad", "ReconcileError")) == 1

        monkeypatch.setattr(reconcile_module, "provisioned", real)
        await cl.advance_stepwise(31)
        assert await cl.condition("bad", "Provisioned") == ("True", "CapacityIsProvisioned")
