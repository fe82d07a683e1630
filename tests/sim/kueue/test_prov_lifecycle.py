"""The provisioning admission check over a request's life: conditions -> check states (spec §7 scenarios 27-38),
config changes, retries and cleanup. The tests play Kueue's core and the provisioner."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.resources import ADMISSIONCHECKS, PODTEMPLATES, PROVREQCONFIGS, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.kueue.provisioning import ProvisioningCheck
from gangscale.sim.world import CHECK, Timeline
from tests.sim.kueue.test_prov_support import (
    NOW,
    Kube,
    admission_check,
    check_entry,
    component,
    condition,
    config,
    reserve,
    setup,
)

JSON = dict[str, Any]
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS = "autoscaling.x-k8s.io/provisioning-class-name"
TEMPLATES = ["ppt-wl-check1-1-ps1", "ppt-wl-check1-1-ps2"]


async def started(http: KubeHTTP, prc: JSON | None = None) -> tuple[Kube, ProvisioningCheck, Timeline]:
    """Setup, quota reserved, first sync done: request wl-check1-1 and its templates exist."""
    kube = Kube(http)
    await setup(kube, prc=prc)
    await reserve(kube)
    comp, timeline = component(http)
    await comp.sync(NOW)
    assert await kube.names(PROVREQS) == ["wl-check1-1"]
    return kube, comp, timeline


async def test_conditions_drive_the_check_to_ready(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube, prc=config(params={"p1": "v1"}, podSetUpdates={"nodeSelector": [
        {"key": "example.com/reservation", "valueFromProvisioningClassDetail": "reservation"},
        {"key": "example.com/missing", "valueFromProvisioningClassDetail": "absent"}]}))
    await kube.create(ADMISSIONCHECKS, admission_check("other", controller="example.com/other"))
    other = check_entry("other", message="theirs")
    await reserve(kube, checks=[check_entry(), other])
    comp, timeline = component(http)
    await comp.sync(NOW)

    await kube.provisioner("wl-check1-1", condition("Accepted"),
                           condition("Provisioned", "False", message="ETA 2025-10-09T09:00:00Z"))
    assert await comp.sync(NOW + 10) is True
    assert await kube.check() == check_entry(message="ETA 2025-10-09T09:00:00Z")  # no state change, same LTT

    await kube.provisioner("wl-check1-1", condition("Accepted"),
                           condition("Provisioned", message="capacity is ready"), details={"reservation": "r-7"})
    assert await comp.sync(NOW + 20) is True
    updates = [{"name": ps, "annotations": {CONSUME: "wl-check1-1", CLASS: "class1"},
                "nodeSelector": {"example.com/reservation": "r-7"}} for ps in ("ps1", "ps2")]
    # lastTransitionTime stays the entry's (syncCheckStates -> patching.SetAdmissionCheckState keeps a non-zero one)
    assert await kube.check() == check_entry(state="Ready", message="capacity is ready", podSetUpdates=updates)
    assert await kube.check("other") == other
    assert await kube.events("AdmissionCheckUpdated") == [
        "Admission check check1 updated state from Pending to Ready with message: capacity is ready"]
    assert [(e.at, e.data) for e in timeline.of(CHECK, "default/wl")] == [
        (NOW + 20, {"check": "check1", "state": "Ready"})]
    assert await comp.sync(NOW + 30) is False


async def test_failure_retries_then_the_next_attempt_is_created(http: KubeHTTP) -> None:
    kube, comp, timeline = await started(http)
    await kube.provisioner("wl-check1-1", condition("Failed", message="CA could not find requested capacity"))
    assert await comp.sync(NOW + 5) is True
    assert await kube.check() == check_entry(
        state="Retry", message="Retrying after failure: CA could not find requested capacity",
        requeueAfterSeconds=60)  # lastTransitionTime not moved: the backoff counts from NOW, not NOW + 5
    assert await comp.sync(NOW + 6) is False  # Retry: no successor yet, the request stays

    # Kueue's core evicts: the request and its templates go.
    await kube.workload_status(conditions=[condition("QuotaReserved", reason="QuotaReserved"),
                                           condition("Evicted", reason="AdmissionCheck")])
    assert await comp.sync(NOW + 7) is True
    assert await kube.names(PROVREQS) == []
    assert await kube.names(PODTEMPLATES) == []

    # Reset to Pending with retryCount 1, requeued, quota reserved again: attempt 2.
    await kube.workload_status(conditions=[condition("QuotaReserved", reason="QuotaReserved"),
                                           condition("Evicted", "False", reason="QuotaReserved")],
                               admissionChecks=[check_entry(message="Reset to Pending after eviction. Previously: "
                                                                    "Retry", at=NOW + 7, retryCount=1)])
    assert await comp.sync(NOW + 70) is True
    assert await kube.names(PROVREQS) == ["wl-check1-2"]
    assert await kube.names(PODTEMPLATES) == ["ppt-wl-check1-2-ps1", "ppt-wl-check1-2-ps2"]
    await comp.sync(NOW + 71)
    await kube.provisioner("wl-check1-2", condition("Provisioned", message="ok"))
    assert await comp.sync(NOW + 72) is True
    check = await kube.check()
    assert (check["state"], check["retryCount"]) == ("Ready", 1)
    assert check["podSetUpdates"][0]["annotations"][CONSUME] == "wl-check1-2"
    # The reset to Pending was Kueue core's doing, not the component's.
    assert [e.data["state"] for e in timeline.of(CHECK)] == ["Retry", "Ready"]


async def test_failure_over_the_limit_rejects(http: KubeHTTP) -> None:
    kube, comp, _ = await started(http, prc=config(retryStrategy={"backoffLimitCount": 0}))
    await kube.provisioner("wl-check1-1", condition("Failed", message="no capacity anywhere"))
    assert await comp.sync(NOW + 5) is True
    assert await kube.check() == check_entry(state="Rejected", message="no capacity anywhere")
    assert await comp.sync(NOW + 6) is False
    assert await kube.names(PROVREQS) == ["wl-check1-1"]


async def test_old_failed_request_kept_by_the_gate_gets_a_successor_once_pending(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube)
    await reserve(kube)
    comp, _ = component(http, cleanup_on_eviction=False)
    await comp.sync(NOW)
    await kube.provisioner("wl-check1-1", condition("Failed", message="m"))
    await comp.sync(NOW + 1)
    assert (await kube.check())["state"] == "Retry"
    # Evicted with the cleanup gate off: the failed request stays.
    await kube.workload_status(conditions=[condition("QuotaReserved", reason="QuotaReserved"),
                                           condition("Evicted", reason="AdmissionCheck")])
    assert await comp.sync(NOW + 2) is False
    assert await kube.names(PROVREQS) == ["wl-check1-1"]
    # Reset and re-reserved: attempt 1 was already counted (retryCount 1), so its failure only sets the
    # message, and with the check Pending attempt 2 is created.
    await kube.workload_status(conditions=[condition("QuotaReserved", reason="QuotaReserved"),
                                           condition("Evicted", "False", reason="QuotaReserved")],
                               admissionChecks=[check_entry(message="Reset", retryCount=1)])
    assert await comp.sync(NOW + 3) is True
    # requeueAfterSeconds survives the reset, as Kueue keeps it.
    assert await kube.check() == check_entry(message="Retrying after failure: m", retryCount=1,
                                             requeueAfterSeconds=60)
    assert await kube.names(PROVREQS) == ["wl-check1-1", "wl-check1-2"]
    assert await comp.sync(NOW + 4) is True  # attempt 2 is now the current one: attempt 1 goes
    assert await kube.names(PROVREQS) == ["wl-check1-2"]
    assert await kube.check() == check_entry(retryCount=1, requeueAfterSeconds=60)
    assert await comp.sync(NOW + 5) is False


@pytest.mark.parametrize(("admitted", "state", "message"), [
    (False, "Retry", "Retrying after booking expired: Capacity reservation time is expired"),
    (True, "Ready", "ok"),
], ids=["not-admitted-retries", "admitted-unchanged"])
async def test_booking_expired(http: KubeHTTP, admitted: bool, state: str, message: str) -> None:
    kube, comp, _ = await started(http)
    await kube.provisioner("wl-check1-1", condition("Provisioned", message="ok"))
    await comp.sync(NOW + 1)
    if admitted:
        await kube.workload_status(conditions=[condition("QuotaReserved", reason="QuotaReserved"),
                                               condition("Admitted", reason="Admitted")])
    await kube.provisioner("wl-check1-1", condition("Provisioned", message="ok"),
                           condition("BookingExpired", message="Capacity reservation time is expired"))
    await comp.sync(NOW + 600)
    check = await kube.check()
    assert (check["state"], check["message"]) == (state, message)


async def test_capacity_revoked_rejects_an_active_workload(http: KubeHTTP) -> None:
    kube, comp, _ = await started(http)
    await kube.provisioner("wl-check1-1", condition("Provisioned", message="ok"),
                           condition("CapacityRevoked", message="nodes reclaimed"))
    assert await comp.sync(NOW + 5) is True
    check = await kube.check()
    assert (check["state"], check["message"]) == ("Rejected", "nodes reclaimed")


async def test_config_change_replaces_the_request_with_the_same_attempt(http: KubeHTTP) -> None:
    kube, comp, _ = await started(http)
    old = await kube.get(PROVREQS, "wl-check1-1")
    assert old is not None
    await kube.merge(PROVREQCONFIGS, "prc", {"spec": {"provisioningClassName": "class2"}}, None)
    assert await comp.sync(NOW + 5) is True
    new = await kube.get(PROVREQS, "wl-check1-1")
    assert new is not None
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["provisioningClassName"] == "class2"
    assert await kube.names(PODTEMPLATES) == TEMPLATES
    for name in TEMPLATES:
        pt = await kube.get(PODTEMPLATES, name)
        assert pt is not None
        assert [r["uid"] for r in pt["metadata"]["ownerReferences"]] == [new["metadata"]["uid"]]
    assert await comp.sync(NOW + 6) is False

    # Re-pointed to a config that does not exist: the request goes and the check is inactive.
    await kube.merge(ADMISSIONCHECKS, "check1", {"spec": {"parameters": {"name": "missing"}}}, None)
    assert await comp.sync(NOW + 7) is True
    assert await kube.names(PROVREQS) == []
    assert await kube.names(PODTEMPLATES) == []
    assert await kube.check() == check_entry(message="the check is not active")


async def test_ready_check_keeps_working_without_its_request(http: KubeHTTP) -> None:
    kube, comp, _ = await started(http)
    await kube.provisioner("wl-check1-1", condition("Provisioned", message="ok"))
    await comp.sync(NOW + 1)
    ready = await kube.check()
    assert ready["state"] == "Ready"
    await kube.delete(PROVREQS, "wl-check1-1")
    assert await comp.sync(NOW + 2) is False
    assert await kube.names(PROVREQS) == []
    assert await kube.check() == ready


@pytest.mark.parametrize(("conditions", "cleanup", "kept"), [
    ([condition("QuotaReserved", reason="QuotaReserved"), condition("Finished", reason="Succeeded")], True, False),
    ([condition("Finished", reason="Succeeded")], True, False),
    ([condition("QuotaReserved", reason="QuotaReserved"), condition("Evicted", reason="Preempted")], True, False),
    ([condition("Evicted", reason="Preempted")], True, False),
    ([condition("QuotaReserved", reason="QuotaReserved"), condition("Evicted", reason="Preempted")], False, True),
    ([condition("QuotaReserved", "False", reason="Pending")], True, True),
], ids=["finished", "finished-without-quota", "evicted", "evicted-without-quota", "evicted-gate-off",
        "quota-lost"])
async def test_cleanup(http: KubeHTTP, conditions: list[dict[str, str]], cleanup: bool, kept: bool) -> None:
    kube = Kube(http)
    await setup(kube)
    await reserve(kube)
    comp, _ = component(http, cleanup_on_eviction=cleanup)
    await comp.sync(NOW)
    await kube.workload_status(conditions=conditions)
    assert await comp.sync(NOW + 1) is not kept
    assert await kube.names(PROVREQS) == (["wl-check1-1"] if kept else [])
    assert await kube.names(PODTEMPLATES) == (TEMPLATES if kept else [])


async def test_stale_message_is_cleared_when_the_request_has_no_conditions(http: KubeHTTP) -> None:
    kube, comp, _ = await started(http)
    await kube.workload_status(admissionChecks=[check_entry(message='Error creating ProvisioningRequest "x"')])
    assert await comp.sync(NOW + 1) is True
    assert await kube.check() == check_entry()


async def test_requests_of_removed_checks_are_deleted(http: KubeHTTP) -> None:
    kube, comp, _ = await started(http)
    await kube.workload_status(admissionChecks=[])
    assert await comp.sync(NOW + 1) is True
    assert await kube.names(PROVREQS) == []
    assert await kube.names(PODTEMPLATES) == []
