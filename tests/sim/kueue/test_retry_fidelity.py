"""Kueue v0.19.2's provisioning retries end to end: KueueCore and the provisioning admission check together on
the embedded API server, the test playing the provisioner (ProvisioningRequest conditions). Each test pins a
behaviour seen on a real v0.19.2 cluster (issue 24) and names the upstream code it follows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import EVENTS_V1, PROVREQCONFIGS, PROVREQS, WORKLOADS
from gangscale.sim import world
from gangscale.sim.kueue.provisioning import ProvisioningCheck
from gangscale.timefmt import rfc3339
from tests.sim.kueue import (
    APPLY,
    CHECK_MANAGER,
    KUEUE,
    TPU,
    Env,
    check_entry,
    cluster_queue,
    condition,
    flavor,
    kueue_cluster,
    local_queue,
    pod_template,
    workload,
)

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"


def prov_check(name: str = "prov") -> JSON:
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": CHECK_MANAGER, "parameters": {
                "apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "prc"}}}


def prc(limit: int = 2, base: int = 2) -> JSON:
    return {"apiVersion": KUEUE, "kind": "ProvisioningRequestConfig", "metadata": {"name": "prc"},
            "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                     "retryStrategy": {"backoffLimitCount": limit, "backoffBaseSeconds": base,
                                       "backoffMaxSeconds": 1800}}}


def tpu_workload(name: str, pods: int, *, priority: int | None = None) -> JSON:
    """``pods`` pods of 4 TPU chips, owned by a Job of the same name (limits too: a real API server wants them
    for an extended resource in the PodTemplate Kueue creates)."""
    obj = workload(name, [("main", pods, {TPU: 4})], owner=name, job_uid=f"{name}-uid", priority=priority)
    obj["spec"]["podSets"][0]["template"] = pod_template({TPU: 4}, limits={TPU: 4})
    return obj


class Both:
    """KueueCore and the provisioning check, run to quiescence at the env's clock."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.prov = ProvisioningCheck(env.http, env.timeline)

    async def run(self, limit: int = 20) -> None:
        for _ in range(limit):
            wrote = await self.env.kueue.sync(self.env.now)
            wrote = await self.prov.sync(self.env.now) or wrote
            if not wrote:
                return
        raise AssertionError("still writing")

    async def requests(self) -> dict[str, str]:
        """Name -> uid of the ProvisioningRequests in ``default``."""
        listed = await self.env.http.request("GET", PROVREQS.path("default"))
        return {i["metadata"]["name"]: i["metadata"]["uid"] for i in listed.get("items") or []}

    async def fail(self, pr: str, message: str = "CA could not find requested capacity") -> None:
        """The provisioner: ``Failed=True`` on the request."""
        cond = {"type": "Failed", "status": "True", "reason": "CapacityIsNotFound", "message": message,
                "lastTransitionTime": rfc3339(self.env.now)}
        await self.env.http.request("PATCH", PROVREQS.path("default", pr, "status"), content_type=APPLY,
                                    query={"fieldManager": "provisioner", "force": True},
                                    body={"apiVersion": PROVREQS.api_version, "kind": "ProvisioningRequest",
                                          "metadata": {"name": pr, "namespace": "default"},
                                          "status": {"conditions": [cond]}})


async def start(env: Env, *, limit: int = 2, base: int = 2, quota: int = 16) -> Both:
    await env.create(PROVREQCONFIGS, prc(limit, base))
    await env.setup(flavor("vlp-24"), cluster_queue("cq", {"vlp-24": {TPU: quota}}, checks=["prov"],
                                                    preemption="LowerPriority"),
                    local_queue("lq", "cq"), prov_check())
    both = Both(env)
    await env.add_workload(tpu_workload("train", 4), step=0)
    await both.run()
    return both


async def test_retry_keeps_the_quota_and_the_failed_request_until_requeue_at(tmp_path: Path) -> None:
    """Issue 24, points 1 and 3. ``WorkloadReconciler.Reconcile`` (``pkg/controller/core/workload_controller.go``)
    sets ``requeueState.requeueAt`` from the Retry check (``workload.NeedsRequeueAtUpdate``,
    ``SetRequeueState(wl, t, false)``: no count) and waits for it with the quota held; the provisioning
    controller (``syncOwnedProvisionRequest``) creates no successor while the check is Retry, so the failed
    request stays. At ``requeueAt`` ``reconcileCheckBasedEviction`` evicts, the request is deleted
    (``CleanupProvisioningRequestsOnEviction``), the Workload is reserved again and attempt 2 is created, all at
    the same instant. Meanwhile nobody else can take the quota."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env)
        t0 = env.now
        assert await env.reserved() == ["train"] and list(await both.requests()) == ["train-prov-1"]

        env.advance(1)
        await both.fail("train-prov-1")
        await both.run()
        wl = await env.wl("train")
        entry = check_entry(wl, "prov")
        assert (entry["state"], entry["requeueAfterSeconds"], entry["lastTransitionTime"]) == ("Retry", 2, rfc3339(t0))
        assert condition(wl, "QuotaReserved")["status"] == "True" and not condition(wl, "Evicted")
        assert wl["status"]["requeueState"] == {"requeueAt": rfc3339(t0 + 2)}
        assert list(await both.requests()) == ["train-prov-1"]  # the failed request is kept

        assert env.kueue.next_wake() == t0 + 2
        env.advance(1)
        await both.run()
        wl = await env.wl("train")
        assert await env.reserved() == ["train"]  # evicted and reserved again at t0 + 2
        assert list(await both.requests()) == ["train-prov-2"]
        assert check_entry(wl, "prov")["retryCount"] == 1
        assert "requeueState" not in wl["status"]  # requeueAt cleared, no count ever written
        assert [e.at for e in env.timeline.of(world.EVICTED)] == [t0 + 2]
        assert [e.kind for e in env.timeline.entries if e.subject == "default/train"] == [
            world.QUOTA_RESERVED, world.PR_CREATED, world.CHECK, world.EVICTED, world.QUOTA_RESERVED, world.PR_CREATED]


async def test_the_held_quota_is_nobody_elses_during_the_backoff(tmp_path: Path) -> None:
    """Point 1 seen from another Workload: while ``train`` backs off with its quota held, ``other`` cannot be
    reserved (the emulator used to release the quota at the Retry and let it in). Once ``train`` is evicted it
    queues by its eviction time (``Ordering.GetQueueOrderTimestamp``, ``IsEvictedByAdmissionCheck``), behind
    ``other``, which then goes first."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env, quota=20)
        t0 = env.now
        await env.add_workload(tpu_workload("other", 2), step=0)  # 8 chips: fits only once train is gone
        env.advance(1)
        await both.fail("train-prov-1")
        await both.run()
        assert await env.reserved() == ["train"]
        env.advance(0.5)
        await both.run()
        assert await env.reserved() == ["train"]
        env.advance(0.5)
        await both.run()
        assert await env.reserved() == ["other"]
        assert [e.at for e in env.timeline.of(world.EVICTED)] == [t0 + 2]


async def test_a_failure_later_than_the_backoff_is_retried_at_once(tmp_path: Path) -> None:
    """Issue 24, point 2 (an upstream bug the emulator keeps). The provisioning controller's ``syncCheckStates``
    hands ``patching.SetAdmissionCheckState`` a copy of the entry that carries its old, non-zero
    ``lastTransitionTime``, which is kept on Pending->Retry (and ->Ready, ->Rejected): it stays at the time the
    entry was added or last reset. ``requeueAt`` = that time + ``requeueAfterSeconds``
    (``workload.GetMaxRetryTime``) is then already past for a request that fails more than the backoff after
    the reset, so ``NeedsRequeueAtUpdate`` sets nothing and the Workload is evicted in the same instant."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env)
        env.advance(1)
        await both.fail("train-prov-1")
        await both.run()
        env.advance(1)
        await both.run()  # first retry: waited out with the quota held (see above)
        reset_at = env.now
        assert list(await both.requests()) == ["train-prov-2"]

        env.advance(10)  # longer than the second backoff (4 s)
        await both.fail("train-prov-2")
        failed_at = env.now
        await both.run()
        wl = await env.wl("train")
        evictions = env.timeline.of(world.EVICTED)
        assert [e.at for e in evictions] == [reset_at, failed_at]  # no wait at all
        entry = check_entry(wl, "prov")
        assert (entry["state"], entry["retryCount"], entry["requeueAfterSeconds"]) == ("Pending", 2, 4)
        assert "requeueState" not in wl["status"]
        assert list(await both.requests()) == ["train-prov-3"] and await env.reserved() == ["train"]
        # every Retry while the check's clock was old: Pending -> Retry never moved lastTransitionTime
        retry = [e for e in env.timeline.of(world.CHECK) if e.data["state"] == "Retry"]
        assert [e.at for e in retry] == [reset_at - 1, failed_at]


async def test_retry_count_survives_a_rejected_reset(tmp_path: Path) -> None:
    """Issue 24, point 4. ``evict.resetChecksOnEviction`` drops ``retryCount`` of a check that was not in Retry, but
    Kueue applies the reset (``patching.PatchAdmissionStatus``, manager ``kueue-admission``) while the
    provisioning controller's manager ``kueue.x-k8s.io/provisioning-request`` co-owns the field (``syncCheckStates``
    applies the whole entry), so the API server keeps it: after the Rejected check is reset ``retryCount`` is still
    2, and once the Workload is reactivated its next request is attempt 3 (``syncOwnedProvisionRequest``:
    ``retryCount + 1``), re-created under a name an earlier attempt used."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env)
        for attempt in (1, 2):
            env.advance(1)
            await both.fail(f"train-prov-{attempt}")
            await both.run()
            env.advance(30)
            await both.run()
        old = await both.requests()
        assert list(old) == ["train-prov-3"]

        env.advance(1)
        await both.fail("train-prov-3")  # attempt 3 > backoffLimitCount 2: Rejected
        await both.run()
        wl = await env.wl("train")
        assert wl["spec"]["active"] is False and condition(wl, "Evicted")["reason"] == "DeactivatedDueToAdmissionCheck"
        entry = check_entry(wl, "prov")
        assert (entry["state"], entry["message"], entry["retryCount"]) == (
            "Pending", "Reset to Pending after eviction. Previously: Rejected", 2)
        owners = [e["manager"] for e in wl["metadata"]["managedFields"]
                  if "f:retryCount" in e["fieldsV1"].get("f:status", {}).get("f:admissionChecks", {}).get(
                      'k:{"name":"prov"}', {})]
        assert CHECK_MANAGER in owners
        assert "count" not in (wl["status"].get("requeueState") or {})
        assert await both.requests() == {}

        await env.http.request("PATCH", WORKLOADS.path("default", "train"), body={"spec": {"active": True}},
                               content_type=MERGE)
        await both.run()
        new = await both.requests()
        assert list(new) == ["train-prov-3"] and new["train-prov-3"] != old["train-prov-3"]


async def test_a_preempted_pending_check_reuses_its_request_name(tmp_path: Path) -> None:
    """Issue 24, point 5 (already matched). A check that was Pending when its Workload was evicted keeps no
    ``retryCount`` (``resetChecksOnEviction`` skips Pending checks), so after the next reservation
    ``syncOwnedProvisionRequest`` creates attempt 1 again: the same name, a new uid."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env, quota=16)
        old = await both.requests()
        env.advance(1)
        await env.add_workload(tpu_workload("urgent", 4, priority=100), step=0)
        await both.run()
        assert await env.reserved() == ["urgent"]
        await env.http.request("DELETE", WORKLOADS.path("default", "urgent"))
        await both.run()
        assert await env.reserved() == ["train"]
        new = await both.requests()
        assert list(new) == ["train-prov-1"] and new["train-prov-1"] != old["train-prov-1"]
        assert "retryCount" not in check_entry(await env.wl("train"), "prov")


async def test_requeue_at_is_ahead_when_the_check_was_reset_recently(tmp_path: Path) -> None:
    """The other side of point 2: a failure soon after the entry was added waits the rest of the backoff, counted
    from the entry's time (``GetMaxRetryTime``), not from the failure."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env, base=60)
        t0 = env.now
        env.advance(45)
        await both.fail("train-prov-1")
        await both.run()
        wl = await env.wl("train")
        assert wl["status"]["requeueState"] == {"requeueAt": rfc3339(t0 + 60)}  # 15 s after the failure
        env.advance(14)
        await both.run()
        assert list(await both.requests()) == ["train-prov-1"]
        env.advance(1)
        await both.run()
        assert list(await both.requests()) == ["train-prov-2"]


async def test_deactivation_during_the_backoff_evicts_at_once(tmp_path: Path) -> None:
    """A Workload deactivated during its backoff is evicted at once: the wait in ``Reconcile`` is only for active
    Workloads (the ``!IsActive`` branch evicts and clears ``requeueState``)."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env, base=60)
        env.advance(1)
        await both.fail("train-prov-1")
        await both.run()
        assert (await env.wl("train"))["status"]["requeueState"]["requeueAt"]
        await env.http.request("PATCH", WORKLOADS.path("default", "train"), body={"spec": {"active": False}},
                               content_type=MERGE)
        await both.run()
        wl = await env.wl("train")
        assert condition(wl, "Evicted")["reason"] == "Deactivated" and await env.reserved() == []
        assert "requeueState" not in wl["status"]
        try:
            await env.http.request("GET", PROVREQS.path("default", "train-prov-1"))
        except ApiError as exc:
            assert exc.not_found
        else:
            raise AssertionError("the request should be gone")


async def test_events_are_events_k8s_io_v1_from_each_kueue_controller(tmp_path: Path) -> None:
    """Kueue v0.19.2 records through controller-runtime's ``GetEventRecorder`` (client-go ``tools/events``):
    ``events.k8s.io/v1`` Events whose ``reportingController`` is the recorder's name: ``kueue-admission`` for the
    scheduler (``QuotaReserved``, ``scheduler.go``), ``kueue-workload-controller`` for the workload controller
    (``Admitted``, ``EvictedDueTo*`` from ``evict.Evict``, ``AdmissionCheckRejected`` from
    ``reconcileCheckBasedEviction``), ``kueue-provisioning-request-controller`` for the provisioning controller
    (``ProvisioningRequestCreated`` with action ``Created``, ``AdmissionCheckUpdated``)."""
    async with kueue_cluster(tmp_path) as env:
        both = await start(env, limit=0)
        env.advance(1)
        await both.fail("train-prov-1")  # attempt 1 > backoffLimitCount 0: Rejected
        await both.run()
        listed = (await env.http.request("GET", EVENTS_V1.path("default")))["items"]
        seen = {(e["reason"], e["reportingController"], e["action"], e["type"]) for e in listed
                if e["regarding"]["name"] == "train"}
        assert seen == {
            ("QuotaReserved", "kueue-admission", "QuotaReserved", "Normal"),
            ("ProvisioningRequestCreated", "kueue-provisioning-request-controller", "Created", "Normal"),
            ("AdmissionCheckUpdated", "kueue-provisioning-request-controller", "AdmissionCheckUpdated", "Normal"),
            ("AdmissionCheckRejected", "kueue-workload-controller", "AdmissionCheckRejected", "Warning"),
            ("EvictedDueToDeactivatedDueToAdmissionCheck", "kueue-workload-controller",
             "EvictedDueToDeactivatedDueToAdmissionCheck", "Normal")}
        assert all(e["reportingInstance"] == f"{e['reportingController']}-kueue-controller-manager" and e["eventTime"]
                   and e["metadata"]["name"].startswith("train.") for e in listed)
