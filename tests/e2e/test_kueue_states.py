"""provreq-spec §7 scenarios 27, 28, 33, 36 and 38: how Kueue's provisioning admission check maps what the
provisioner writes on a ProvisioningRequest to the Workload's check state — with the conditions written by the
real gangscale controller wherever a correct provisioner can produce them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangscale.kube.resources import PROVREQS, WORKLOADS
from tests.e2e.harness import (
    ATOMIC,
    CHECK_NAME,
    CLASS_ANNOTATION,
    CONSUME,
    FOREIGN_CLASS,
    PARAM_PREFIX,
    cluster,
    conditions,
    is_true,
    name_of,
    pod_set,
    prc,
    workload,
)

DETAIL = "gangscale.io/scale-up"



@pytest.mark.parametrize(("workers", "reason"), [
    (6, "CapacityIsNotFound"),   # 6 GPU nodes: more than the pool's 4
    (2, "ScaleUpInProgress"),    # obtained, nodes not Ready yet
], ids=["capacity-not-found", "nodes-coming-up"])
async def test_s27_accepted_not_provisioned_is_pending_with_its_message(tmp_path: Path, workers: int,
                                                                        reason: str) -> None:
    """``Accepted=True`` + ``Provisioned=False`` (message M, written by gangscale): the check is ``Pending`` with
    message M, and follows M as gangscale updates it."""
    async with cluster(tmp_path) as e:
        await e.setup()
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", workers)]))
        await e.settle()

        pr = await e.request("wl-prov-1")
        conds = conditions(pr)
        assert conds["Accepted"]["status"] == "True"
        provisioned = conds["Provisioned"]
        assert (provisioned["status"], provisioned["reason"]) == ("False", reason)
        assert provisioned["message"]
        entry = await e.check()
        assert entry is not None
        assert (entry["state"], entry["message"]) == ("Pending", provisioned["message"])
        assert not is_true(await e.workload(), "Admitted")

        if reason == "CapacityIsNotFound":
            assert await e.nodes() == []  # all or nothing: no partial scale-up
            await e.advance(61)  # gangscale re-plans after its backoff and writes a new ETA
            provisioned = conditions(await e.request("wl-prov-1"))["Provisioned"]
            assert provisioned["reason"] == "CapacityIsNotFound"
            entry = await e.check()
            assert entry is not None
            assert (entry["state"], entry["message"]) == ("Pending", provisioned["message"])


async def test_s28_provisioned_is_ready_with_pod_set_updates(tmp_path: Path) -> None:
    """``Provisioned=True`` (message M) with ``provisioningClassDetails["gangscale.io/scale-up"]`` = V, and a config
    whose ``podSetUpdates.nodeSelector`` maps key K to that detail: the check is ``Ready`` with message M and
    podSetUpdates ``{annotations: consume + class, nodeSelector: {K: V}}``; a selector naming a detail the
    request does not have is skipped."""
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(podSetUpdates={"nodeSelector": [
            {"key": "example.com/scale-up", "valueFromProvisioningClassDetail": DETAIL},
            {"key": "gangscale.io/node-pool", "valueFromProvisioningClassDetail": "gangscale.io/node-pool"},
            {"key": "example.com/absent", "valueFromProvisioningClassDetail": "example.com/no-such-detail"}]}))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)]))
        await e.until(e.admitted, within=120, what="check Ready")

        pr = await e.request("wl-prov-1")
        assert pr is not None
        provisioned = conditions(pr)["Provisioned"]
        assert (provisioned["status"], provisioned["reason"]) == ("True", "CapacityIsProvisioned")
        detail = pr["status"]["provisioningClassDetails"][DETAIL]
        assert detail
        entry = await e.check()
        assert entry is not None
        assert (entry["state"], entry["message"]) == ("Ready", provisioned["message"])
        assert entry["podSetUpdates"] == [{"name": "workers",
                                           "annotations": {CONSUME: "wl-prov-1", CLASS_ANNOTATION: ATOMIC},
                                           "nodeSelector": {"example.com/scale-up": detail,
                                                            "gangscale.io/node-pool": "gpu"}}]
        # The pool detail is a valid label value, so the admitted pods can be pinned to the pool made for them.
        assert pr["status"]["provisioningClassDetails"]["gangscale.io/node-pool"] == "gpu"


async def test_s33_failed_wins_over_provisioned(tmp_path: Path) -> None:
    """``Failed=True`` and ``Provisioned=True`` together: Kueue treats the request as failed (Retry, eviction),
    never Ready.

    A correct provisioner never writes both (gangscale's Failed is terminal and it never sets Provisioned after
    it), so the conditions are server-side applied by the test under another field manager, on a request of a
    class gangscale does not serve — gangscale leaves that request alone, as the test checks first."""
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(cls=FOREIGN_CLASS))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)]))
        await e.settle()
        pr = await e.request("wl-prov-1")
        assert pr is not None
        assert conditions(pr) == {}
        assert "gangscale" not in {m.get("manager") for m in pr["metadata"].get("managedFields") or []}

        stamp = "2026-01-01T00:00:00Z"
        await e.apply_status(PROVREQS, "wl-prov-1", "ProvisioningRequest", {"conditions": [
            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "accepted",
             "lastTransitionTime": stamp},
            {"type": "Provisioned", "status": "True", "reason": "CapacityIsProvisioned", "message": "capacity is up",
             "lastTransitionTime": stamp},
            {"type": "Failed", "status": "True", "reason": "CapacityLost", "message": "the cloud took it back",
             "lastTransitionTime": stamp}]}, "another-provisioner")
        await e.settle()

        updates = await e.events("AdmissionCheckUpdated", "wl")
        retry = "Retrying after failure: the cloud took it back"
        assert updates == [f"Admission check prov updated state from Pending to Retry with message: {retry}"]
        wl = await e.workload()
        assert not is_true(wl, "Admitted") and is_true(wl, "QuotaReserved")  # Kueue v0.19.2 holds it until requeueAt
        assert wl["status"].get("requeueState", {}).get("requeueAt")

        await e.advance(60)  # the backoff, from the check's last reset (the reservation)
        assert await e.events("EvictedDueToAdmissionCheck", "wl") == [
            f'Evicted due to AdmissionCheck in Retry state: "{CHECK_NAME}" ({retry})']
        entry = await e.check()
        assert entry is not None and entry.get("retryCount") == 1
        assert not is_true(await e.workload(), "Admitted")


async def test_s36_ready_request_deleted_is_not_recreated(tmp_path: Path) -> None:
    """The check is Ready and the request is deleted: no new request is created, the check stays Ready and the
    Workload stays admitted (also long after gangscale's booking would have ended)."""
    async with cluster(tmp_path) as e:
        await e.setup()
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)]))
        await e.until(e.admitted, within=120, what="check Ready")

        await e.delete(PROVREQS, "wl-prov-1")
        await e.settle()
        await e.advance(15 * 60)
        assert await e.requests() == []
        entry = await e.check()
        assert entry is not None
        assert entry["state"] == "Ready"
        assert is_true(await e.workload(), "Admitted")
        assert await e.events("ProvisioningRequestCreated", "wl") == ['Created ProvisioningRequest: "wl-prov-1"']


async def test_s38_message_reset_when_request_has_no_conditions(tmp_path: Path) -> None:
    """A request creation that failed leaves its error as the check message (``FailedCreate``); once the request
    exists and has no conditions, the message is reset to ``""`` with the check ``Pending``.

    The failure is real: a ``provreq.kueue.x-k8s.io/`` annotation longer than the 255 characters the request CRD
    allows a parameter; the user then removes it. The request's class is one gangscale does not serve: gangscale
    writes ``Accepted`` as soon as it sees a request of its own (and ``Accepted`` alone leaves the check as it
    is), so "no conditions" lasts only while nobody serves the request."""
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(cls=FOREIGN_CLASS))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 1)],
                                           annotations={f"{PARAM_PREFIX}note": "x" * 300}))
        await e.settle()
        entry = await e.check()
        assert entry is not None
        assert entry["state"] == "Pending"
        assert entry["message"].startswith('Error creating ProvisioningRequest "wl-prov-1"')
        assert "255" in entry["message"]
        assert len(await e.events("FailedCreate", "wl")) == 1
        assert await e.requests() == []

        await e.merge(WORKLOADS, "wl", {"metadata": {"annotations": {f"{PARAM_PREFIX}note": None}}})
        await e.settle()
        [pr] = await e.requests()
        assert name_of(pr) == "wl-prov-1"
        assert conditions(pr) == {}
        entry = await e.check()
        assert entry is not None
        assert (entry["state"], entry["message"]) == ("Pending", "")
