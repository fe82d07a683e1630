"""provreq-spec §7 scenarios 29-32 and 37: what Kueue does when a ProvisioningRequest fails, its booking expires or
its capacity is revoked (retry with a new attempt, reject and deactivate), and when it deletes requests — with
every condition written by the real gangscale controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangscale.controller.logic.settings import Settings
from gangscale.kube.resources import EVENTS, NODES, WORKLOADS
from gangscale.timefmt import parse_rfc3339, rfc3339
from tests.e2e.harness import (
    CHECK_NAME,
    E2E,
    FAST,
    PARAM_PREFIX,
    admission_check,
    cluster,
    cluster_queue,
    conditions,
    is_true,
    name_of,
    pod_set,
    prc,
    workload,
)

MANUAL = "manual"
RESET_REJECTED = "Reset to Pending after eviction. Previously: Rejected"
RESET_RETRY = "Reset to Pending after eviction. Previously: Retry"


def _updated(old: str, new: str, message: str) -> str:
    return f"Admission check {CHECK_NAME} updated state from {old} to {new} with message: {message}"




async def test_s29_failed_is_retried_with_a_new_attempt(tmp_path: Path) -> None:
    """``Failed=True`` on attempt 1 (limit 3): ``Retry`` → Kueue v0.19.2 keeps the Workload's quota and request 1
    until ``requeueState.requeueAt`` (= the check's last reset, here the reservation, + 60 s: Kueue does not move the
    check's transition time on Retry) → then, in one instant, the Workload is evicted (``AdmissionCheck``), request
    1 deleted, the check reset to ``Pending`` with ``retryCount: 1``, the quota reserved again and request
    ``<wl>-<check>-2`` created → gangscale provisions it → ``Ready``.

    gangscale fails attempt 1 for real: the pool is out of stock and the request says ``noRetry`` (Workload
    annotation). gangscale decides attempt 2 no sooner than its own backoff for the gang after the failure
    (``--retry-initial``, 60 s by default); the stock is back by then, and its pool backoff (30 s here) is over."""
    settings = Settings(batch_idle=0.0, batch_max=0.0, pool_backoff_initial=30.0)
    async with cluster(tmp_path, settings=settings, stock={"gpu": 0}) as e:
        await e.setup(config=prc(limit=3, base=60))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)],
                                           annotations={f"{PARAM_PREFIX}noRetry": "true"}))
        start = e.now
        await e.until(lambda: _retry(e), within=30, what="Retry")

        [failure] = await e.events("CapacityNotFound", "wl-prov-1")
        failed_at = e.now
        message = f"Retrying after failure: {failure}"
        assert await e.events("AdmissionCheckUpdated", "wl") == [_updated("Pending", "Retry", message)]
        wl = await e.workload()
        assert is_true(wl, "QuotaReserved") and not is_true(wl, "Evicted")  # the quota is held through the backoff
        reserved = conditions(wl)["QuotaReserved"]["lastTransitionTime"]
        assert wl["status"]["requeueState"] == {"requeueAt": _plus(reserved, 60)}
        assert [name_of(pr) for pr in await e.requests()] == ["wl-prov-1"]  # kept until requeueAt

        e.provider.set_stock("gpu", None)
        await e.until(e.admitted, within=300, what="attempt 2 Ready")
        assert e.now >= max(start + 60, failed_at + 60)  # Kueue's requeueAt, then gangscale's backoff for the gang
        [evicted] = await e.events("EvictedDueToAdmissionCheck", "wl")
        assert evicted == f'Evicted due to AdmissionCheck in Retry state: "{CHECK_NAME}" ({message})'
        [pr] = await e.requests()
        assert name_of(pr) == "wl-prov-2"
        assert conditions(pr)["Provisioned"]["status"] == "True"
        entry = await e.check()
        assert entry is not None
        assert (entry.get("retryCount"), entry.get("requeueAfterSeconds")) == (1, 60)
        assert e.check_history() == ["Retry", "Ready"]


async def test_s29_a_late_failure_is_retried_by_kueue_at_once_and_paced_by_gangscale(tmp_path: Path) -> None:
    """Issue 24, point 2: attempt 1 fails two minutes after the quota was reserved (its nodes never turn Ready
    within ``--max-node-provision-time``; re-planned with the pool backed off and ``noRetry``: ``Failed``). Kueue
    v0.19.2 measures the 60-s backoff from the check's last reset (the reservation), which is long past: request 2
    is created in the same instant. gangscale does not hammer the pool: it decides the gang's attempt 2 no sooner
    than its own backoff for the gang (``--retry-initial``) after the failure."""
    settings = Settings(batch_idle=0.0, batch_max=0.0, max_node_provision_time=120.0, pool_backoff_initial=30.0,
                        retry_initial=60.0)
    async with cluster(tmp_path, settings=settings) as e:
        e.provider.faults("gpu").never_ready = True
        await e.setup(config=prc(limit=3, base=60))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)],
                                           annotations={f"{PARAM_PREFIX}noRetry": "true"}))
        start = e.now
        await e.until(lambda: _has_request(e, "wl-prov-2"), within=600, what="request 2")
        created = e.now
        failed_at = await _event_time(e, "CapacityNotFound", "wl-prov-1")
        assert failed_at >= start + 120  # later than Kueue's 60-s backoff after the reservation
        assert created - failed_at <= 1.0  # so Kueue evicted and made request 2 at once (1-s event timestamps)
        assert e.check_history() == ["Retry"]
        [first] = [c for c in e.provider.calls if c.operation == "obtain"]
        e.provider.faults("gpu").never_ready = False

        await e.until(e.admitted, within=600, what="attempt 2 Ready")
        obtains = [c.at for c in e.provider.calls if c.operation == "obtain"]
        assert obtains[0] == first.at and len(obtains) == 2
        assert obtains[1] >= failed_at + 60, (obtains, failed_at)  # gangscale's backoff, not Kueue's (none)
        assert name_of((await e.requests())[0]) == "wl-prov-2"


async def _event_time(e: E2E, reason: str, involved: str) -> float:
    listed = await e.sim.http.request("GET", EVENTS.path("default"))
    [event] = [ev for ev in listed["items"] if ev["reason"] == reason and ev["involvedObject"]["name"] == involved]
    return parse_rfc3339(event["lastTimestamp"]) or 0.0


async def _has_request(e: E2E, name: str) -> bool:
    return name in {name_of(pr) for pr in await e.requests()}


async def _retry(e: E2E) -> bool:
    return await e.check_state() == "Retry"


def _plus(stamp: str, seconds: float) -> str:
    return rfc3339((parse_rfc3339(stamp) or 0.0) + seconds)


@pytest.mark.parametrize("how", ["config-parameter", "annotation"])
async def test_s30_failed_over_the_limit_is_rejected_and_deactivates(tmp_path: Path, how: str) -> None:
    """``Failed=True`` on attempt 1 with ``backoffLimitCount: 0``: ``Rejected`` with the Failed message → the
    Workload is deactivated (event ``AdmissionCheckRejected``) → the check is reset to ``Pending``; the request is
    deleted and none follows.

    gangscale fails the request for real: the gang (6 GPU nodes) is more than the pool can ever hold, and
    ``noRetry`` comes from the config's parameters or from the Workload annotation."""
    params = {"noRetry": "true"} if how == "config-parameter" else None
    annotations = {f"{PARAM_PREFIX}noRetry": "true"} if how == "annotation" else None
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(params=params, limit=0))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 6)], annotations=annotations))
        await e.settle()

        [failure] = await e.events("CapacityNotFound", "wl-prov-1")
        assert await e.events("AdmissionCheckUpdated", "wl") == [_updated("Pending", "Rejected", failure)]
        assert await e.events("AdmissionCheckRejected", "wl") == [
            f'Deactivated due to AdmissionCheck in Rejected state: "{CHECK_NAME}" ({failure})']
        wl = await e.workload()
        assert wl["spec"]["active"] is False
        evicted = conditions(wl)["Evicted"]
        assert (evicted["status"], evicted["reason"]) == ("True", "DeactivatedDueToAdmissionCheck")
        entry = await e.check()
        assert entry is not None
        assert (entry["state"], entry["message"]) == ("Pending", RESET_REJECTED)
        assert "retryCount" not in entry

        await e.advance(30 * 60)
        assert await e.requests() == []
        assert len(await e.events("ProvisioningRequestCreated", "wl")) == 1
        assert await e.nodes() == []


async def test_s31_booking_expired_before_admission_retries_then_rejects(tmp_path: Path) -> None:
    """``BookingExpired=True`` on a Workload that is not admitted (a second check nobody serves holds it back):
    attempt 1 (limit 1) goes to ``Retry`` with ``Retrying after booking expired: <msg>`` and a new attempt is made;
    attempt 2, over the limit, goes to ``Rejected`` and the Workload is deactivated.

    gangscale's booking TTL (2 min here) expires on its own: nothing consumes the capacity."""
    settings = Settings(batch_idle=0.0, batch_max=0.0, booking_ttl=120.0)
    async with cluster(tmp_path, settings=settings) as e:
        await e.setup(config=prc(limit=1, base=60), checks=[admission_check(MANUAL, controller="example.com/manual")],
                      cq=cluster_queue(checks=(CHECK_NAME, MANUAL)))
        await e.activate_check(MANUAL)
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)]))
        await e.until(e.ready, within=120, what="attempt 1 Ready")
        assert not is_true(await e.workload(), "Admitted")
        ready_at = e.now

        async def attempt_2() -> bool:
            return [name_of(pr) for pr in await e.requests()] == ["wl-prov-2"]

        # The booking expires 120 s after Ready, more than the 60 s backoff after the check's last reset (its
        # transition time, which Kueue does not move on Ready or Retry): Kueue evicts, deletes request 1, reserves
        # again and makes request 2 in the same instant.
        await e.until(attempt_2, within=300, what="attempt 2 made after the booking expired")
        assert e.now >= ready_at + 120
        expired = "Capacity reservation time is expired"
        retry = f"Retrying after booking expired: {expired}"
        updates = await e.events("AdmissionCheckUpdated", "wl")
        assert _updated("Ready", "Retry", retry) in updates
        assert await e.events("EvictedDueToAdmissionCheck", "wl") == [
            f'Evicted due to AdmissionCheck in Retry state: "{CHECK_NAME}" ({retry})']
        entry = await e.check()
        assert entry is not None and entry.get("retryCount") == 1

        await e.until(e.ready, within=300, what="attempt 2 Ready")
        await e.until(e.deactivated, within=300, what="deactivated after attempt 2 expired")
        updates = await e.events("AdmissionCheckUpdated", "wl")
        assert updates[-1] == _updated("Ready", "Rejected", expired)
        assert await e.events("AdmissionCheckRejected", "wl") == [
            f'Deactivated due to AdmissionCheck in Rejected state: "{CHECK_NAME}" ({expired})']
        entry = await e.check()
        assert entry is not None
        assert (entry["state"], entry["message"]) == ("Pending", RESET_REJECTED)
        assert not is_true(await e.workload(), "Admitted")
        assert e.check_history() == ["Ready", "Retry", "Ready", "Rejected"]




@pytest.mark.parametrize("case", ["admitted", "not-admitted", "finished"])
async def test_s32_capacity_revoked(tmp_path: Path, case: str) -> None:
    """A booked node is deleted before any pod consumed it: gangscale sets ``CapacityRevoked=True``; on an active,
    unfinished Workload (admitted or not) the check becomes ``Rejected`` with that message and the Workload is
    deactivated.

    On a finished Workload nothing changes: Kueue deletes a finished Workload's requests (scenario 37) before the
    node goes, so there is no request left to revoke and the check stays Ready."""
    async with cluster(tmp_path) as e:
        extra = [admission_check(MANUAL, controller="example.com/manual")] if case == "not-admitted" else []
        await e.setup(checks=extra, cq=cluster_queue(checks=(CHECK_NAME, *(c["metadata"]["name"] for c in extra))))
        if extra:
            await e.activate_check(MANUAL)
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)]))
        await e.until(e.ready, within=120, what="check Ready")
        assert is_true(await e.workload(), "Admitted") is (case != "not-admitted")
        if case == "finished":
            await _finish(e)
            await e.settle()
            assert await e.requests() == []

        victim = name_of((await e.nodes())[0])
        await e.delete(NODES, victim)
        await e.settle()

        wl = await e.workload()
        if case == "finished":
            assert await e.check_state() == "Ready"
            assert wl["spec"].get("active", True) is True
            assert await e.events("AdmissionCheckRejected", "wl") == []
            assert await e.events("CapacityRevoked") == []
            return
        [revoked] = await e.events("CapacityRevoked", "wl-prov-1")
        assert victim in revoked
        assert (await e.events("AdmissionCheckUpdated", "wl"))[-1] == _updated("Ready", "Rejected", revoked)
        assert await e.events("AdmissionCheckRejected", "wl") == [
            f'Deactivated due to AdmissionCheck in Rejected state: "{CHECK_NAME}" ({revoked})']
        assert wl["spec"]["active"] is False
        assert conditions(wl)["Evicted"]["reason"] == "DeactivatedDueToAdmissionCheck"
        entry = await e.check()
        assert entry is not None
        assert (entry["state"], entry["message"]) == ("Pending", RESET_REJECTED)


async def _finish(e: E2E, wl: str = "wl") -> None:
    """``Finished=True``, as Kueue's job framework writes it when the job completes."""
    await e.apply_status(WORKLOADS, wl, "Workload", {"conditions": [
        {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished successfully",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "kueue-job-controller")


@pytest.mark.parametrize("case", ["finished", "deactivated", "preempted"])
async def test_s37_requests_deleted_when_finished_or_evicted(tmp_path: Path, case: str) -> None:
    """When the Workload finishes, or is evicted (deactivated by its user, or preempted by a higher-priority
    Workload), every request it owns is deleted, and its PodTemplates with it."""
    async with cluster(tmp_path, settings=FAST) as e:
        await e.setup(cq=cluster_queue(gpus=16, preemption="LowerPriority"))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)], priority=0))
        await e.until(e.admitted, within=120, what="check Ready")
        assert [name_of(pr) for pr in await e.requests()] == ["wl-prov-1"]
        assert len(await e.templates()) == 1

        if case == "finished":
            await _finish(e)
        elif case == "deactivated":
            await e.merge(WORKLOADS, "wl", {"spec": {"active": False}})
        else:
            await e.create(WORKLOADS, workload("high", [pod_set("workers", 2)], priority=100))
        await e.settle()

        wl = await e.workload()
        if case == "finished":
            assert is_true(wl, "Finished")
        else:
            reason = {"deactivated": "Deactivated", "preempted": "Preempted"}[case]
            assert conditions(wl)["Evicted"]["reason"] == reason
        mine = [name_of(pr) for pr in await e.requests() if name_of(pr).startswith("wl-")]
        assert mine == []
        assert [name_of(t) for t in await e.templates() if name_of(t).startswith("ppt-wl-")] == []
        if case == "preempted":
            assert [name_of(pr) for pr in await e.requests()] == ["high-prov-1"]
