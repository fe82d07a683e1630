"""KueueCore against the embedded API server over real HTTP, on a settable clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangscale.kube.resources import CLUSTERQUEUES, EVENTS, EVENTS_V1, WORKLOADS
from gangscale.sim import world
from gangscale.timefmt import rfc3339
from tests.sim.kueue import (
    APPLY,
    CHECK_MANAGER,
    KUEUE,
    TPU,
    Env,
    admission_check,
    check_entry,
    cluster_queue,
    condition,
    flavor,
    kueue_cluster,
    local_queue,
    workload,
)

MERGE = "application/merge-patch+json"


def chips(name: str, n: int, *, priority: int | None = None, queue: str = "lq") -> dict[str, object]:
    """A Workload of ``n`` TPU chips (pods of 4), owned by a Job of the same name."""
    return workload(name, [("main", n // 4, {TPU: 4})], owner=name, priority=priority, queue=queue,
                    job_uid=f"{name}-job-uid")


async def tpu_queue(env: Env, **cq: object) -> None:
    checks = cq.get("checks") or ()
    await env.setup(flavor("vlp-24"), cluster_queue("cq", {"vlp-24": {TPU: 24}}, **cq),  # type: ignore[arg-type]
                    local_queue("lq", "cq"), *(admission_check(str(c)) for c in checks))  # type: ignore[attr-defined]


def reserved_order(env: Env) -> list[str]:
    return [e.subject.split("/")[1] for e in env.timeline.of(world.QUOTA_RESERVED)]


async def test_tpu_tutorial_quota(tmp_path: Path) -> None:
    """Kueue's TPU tutorial: 24 chips of vlp-24; Workloads of 24, 16 and 8 chips: only the 24 runs, then 16 + 8."""
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env)
        for name, n in (("big", 24), ("mid", 16), ("small", 8)):
            await env.add_workload(chips(name, n))
        assert await env.settle() == 1
        assert await env.reserved() == ["big"]
        big = await env.wl("big")
        assert big["status"]["admission"] == {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 6, "flavors": {TPU: "vlp-24"}, "resourceUsage": {TPU: "24"}}]}
        assert condition(big, "Admitted")["message"] == "The workload is admitted"  # no checks: admitted at once
        mid = await env.wl("mid")
        assert (condition(mid, "QuotaReserved")["status"], condition(mid, "QuotaReserved")["reason"],
                condition(mid, "QuotaReserved")["message"]) == (
            "False", "Pending", "couldn't assign flavors to pod set main: insufficient unused quota for "
                                "google.com/tpu in flavor vlp-24, 16 more needed")
        assert ("Warning", "Pending", condition(mid, "QuotaReserved")["message"]) in await env.events("mid")
        # events.k8s.io/v1 from the scheduler's recorder (client-go tools/events, as Kueue v0.19.2 records):
        # the core/v1 view names it in reportingComponent and has no source
        raw_events = (await env.http.request("GET", EVENTS_V1.path("default")))["items"]
        assert {(e["reportingController"], e["reportingInstance"], e["regarding"]["kind"], e["action"] == e["reason"])
                for e in raw_events} == {("kueue-admission", "kueue-admission-kueue-controller-manager", "Workload",
                                          True)}
        core = (await env.http.request("GET", EVENTS.path("default")))["items"]
        assert {(e["reportingComponent"], "source" in e) for e in core} == {("kueue-admission", False)}
        status = (await env.cq("cq"))["status"]
        assert (status["pendingWorkloads"], status["reservingWorkloads"], status["admittedWorkloads"]) == (2, 1, 1)
        assert status["flavorsUsage"] == [{"name": "vlp-24", "resources": [
            {"name": TPU, "total": "24", "borrowed": "0"}]}]

        env.advance(300)
        await env.finish("big")
        assert await env.settle() == 1
        assert await env.reserved() == ["big", "mid", "small"]  # a finished Workload keeps its admission, not quota
        assert reserved_order(env) == ["big", "mid", "small"]
        assert [e.at - env.timeline.entries[0].at for e in env.timeline.of(world.ADMITTED)] == [0, 300, 300]
        status = (await env.cq("cq"))["status"]
        assert (status["pendingWorkloads"], status["reservingWorkloads"]) == (0, 2)


async def test_priority_then_creation_order(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env)
        for name, priority in (("first", 0), ("second", 0), ("urgent", 100), ("third", 0)):
            await env.add_workload(chips(name, 24, priority=priority))
        for _ in range(4):
            await env.settle()
            running = [n for n in await env.reserved() if n not in reserved_order(env)[:-1]]
            await env.finish(running[-1])
            env.advance(10)
        assert reserved_order(env) == ["urgent", "first", "second", "third"]


@pytest.mark.parametrize(("strategy", "expect", "short"), [
    ("StrictFIFO", ["running"], 8),
    ("BestEffortFIFO", ["later-small", "running"], 16),
], ids=["strict-fifo-head-blocks", "best-effort-fifo-lets-smaller-through"])
async def test_queueing_strategies(tmp_path: Path, strategy: str, expect: list[str], short: int) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env, strategy=strategy)
        await env.add_workload(chips("running", 16))
        await env.settle()
        await env.add_workload(chips("head-big", 16))
        await env.add_workload(chips("later-small", 8))
        await env.settle()
        assert await env.reserved() == expect
        head = condition(await env.wl("head-big"), "QuotaReserved")
        assert head["message"].endswith(f"flavor vlp-24, {short} more needed")
        small = condition(await env.wl("later-small"), "QuotaReserved")
        assert (small.get("reason") == "QuotaReserved") == (strategy == "BestEffortFIFO")


async def test_preemption_of_a_lower_priority_admitted_workload(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env, preemption="LowerPriority")
        await env.add_workload(chips("low", 24, priority=1))
        await env.settle()
        await env.add_workload(chips("peer", 8, priority=1))
        await env.add_workload(chips("high", 16, priority=10))
        high_uid = (await env.wl("high"))["metadata"]["uid"]
        await env.settle()

        assert await env.reserved() == ["high", "peer"]
        low = await env.wl("low")
        message = (f"Preempted to accommodate a workload (UID: {high_uid}, JobUID: high-job-uid) due to "
                   "prioritization in the ClusterQueue")
        assert {k: condition(low, "Evicted")[k] for k in ("status", "reason", "message")} == {
            "status": "True", "reason": "Preempted", "message": message}
        assert {k: condition(low, "Preempted")[k] for k in ("status", "reason")} == {
            "status": "True", "reason": "InClusterQueue"}
        admitted = condition(low, "Admitted")
        assert (admitted["status"], admitted["reason"]) == ("False", "NoReservation")
        assert "admission" not in low["status"]
        assert ("Normal", "Preempted", message) in await env.events("low")
        assert [(e.subject, e.data) for e in env.timeline.of(world.PREEMPTED)] == [
            ("default/low", {"by": "default/high"})]
        # the victim waits again, behind the higher priority
        assert condition(low, "QuotaReserved")["reason"] == "Pending"


async def test_no_preemption_by_default(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env)
        await env.add_workload(chips("low", 24, priority=1))
        await env.settle()
        await env.add_workload(chips("high", 16, priority=10))
        await env.settle()
        assert await env.reserved() == ["low"]
        assert env.timeline.of(world.PREEMPTED) == []


async def test_retry_holds_the_quota_until_requeue_at_then_evicts_and_reserves_again(tmp_path: Path) -> None:
    """Kueue v0.19.2 keeps the quota through a Retry backoff: ``WorkloadReconciler.Reconcile``
    (``pkg/controller/core/workload_controller.go``) first sets ``requeueState.requeueAt`` from the Retry check
    (``workload.NeedsRequeueAtUpdate`` / ``GetMaxRetryTime`` / ``SetRequeueState(wl, t, false)``, no count) and
    returns ``RequeueAfter`` while it is ahead; only then ``reconcileCheckBasedEviction`` evicts, and the
    Workload is reserved again at once (its ``requeueAt`` has passed). Seen on a real cluster: the failed
    request is kept and the quota held until ``requeueAt``, then eviction and re-reservation within ~0.1 s.
    (The emulator used to evict at once and wait out the backoff unreserved, and counted the retry.)"""
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env, checks=["prov"])
        await env.add_workload(chips("train", 16))
        await env.settle()
        wl = await env.wl("train")
        assert check_entry(wl, "prov") == {"name": "prov", "state": "Pending", "message": "",
                                           "lastTransitionTime": rfc3339(env.now)}
        assert not condition(wl, "Admitted")  # waits for its check

        failed_at = env.now
        # a controller that moves lastTransitionTime with the state (Kueue's own does not: see test_prov_lifecycle)
        await env.set_check("train", "prov", "Retry", "Retrying after failure: no capacity", requeue_after=60)
        await env.settle()
        wl = await env.wl("train")
        assert condition(wl, "QuotaReserved")["status"] == "True" and "admission" in wl["status"]
        assert not condition(wl, "Evicted")
        assert wl["status"]["requeueState"] == {"requeueAt": rfc3339(failed_at + 60)}  # no count
        assert check_entry(wl, "prov")["state"] == "Retry"
        assert await env.reserved() == ["train"]
        assert env.kueue.next_wake() == failed_at + 60

        env.advance(59)
        assert await env.settle() == 0 and await env.reserved() == ["train"]
        env.advance(1)
        await env.settle()
        wl = await env.wl("train")
        message = 'Evicted due to AdmissionCheck in Retry state: "prov" (Retrying after failure: no capacity)'
        assert ("Normal", "EvictedDueToAdmissionCheck", message) in await env.events("train")
        assert await env.reserved() == ["train"]  # evicted and reserved again in the same instant
        assert (condition(wl, "Requeued")["status"], condition(wl, "Requeued")["reason"]) == ("True", "BackoffFinished")
        assert (condition(wl, "Evicted")["status"], condition(wl, "Evicted")["message"]) == (
            "False", f"Previously: {message}")
        assert "requeueState" not in wl["status"]  # requeueAt cleared, and there never was a count
        assert check_entry(wl, "prov") == {
            "name": "prov", "state": "Pending", "message": "Reset to Pending after eviction. Previously: Retry",
            "lastTransitionTime": rfc3339(env.now), "requeueAfterSeconds": 60, "retryCount": 1}
        assert env.kueue.next_wake() is None
        assert [e.kind for e in env.timeline.entries] == [world.QUOTA_RESERVED, world.EVICTED, world.QUOTA_RESERVED]


async def test_retry_past_its_requeue_at_evicts_at_once(tmp_path: Path) -> None:
    """``NeedsRequeueAtUpdate`` returns nil when the Retry check's ``lastTransitionTime + requeueAfterSeconds``
    has already passed, so ``reconcileCheckBasedEviction`` evicts in the same reconcile and no ``requeueAt`` is
    set at all (seen: eviction 0.0-0.1 s after Retry when the check's time is older than the backoff)."""
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env, checks=["prov"])
        await env.add_workload(chips("train", 16))
        await env.settle()
        added_at = env.now
        env.advance(300)
        entry = {"name": "prov", "state": "Retry", "message": "Retrying after failure: no capacity",
                 "lastTransitionTime": rfc3339(added_at), "requeueAfterSeconds": 60}
        await env.http.request("PATCH", WORKLOADS.path("default", "train", "status"), content_type=APPLY,
                               query={"fieldManager": CHECK_MANAGER, "force": True},
                               body={"apiVersion": KUEUE, "kind": "Workload",
                                     "metadata": {"name": "train", "namespace": "default"},
                                     "status": {"admissionChecks": [entry]}})
        assert await env.sync() is True  # evicts
        wl = await env.wl("train")
        assert condition(wl, "Evicted")["reason"] == "AdmissionCheck" and "admission" not in wl["status"]
        assert "requeueState" not in wl["status"]
        await env.settle()
        assert await env.reserved() == ["train"]
        assert [e.kind for e in env.timeline.entries] == [world.QUOTA_RESERVED, world.EVICTED, world.QUOTA_RESERVED]


async def test_rejected_check_deactivates(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env, checks=["prov"])
        await env.add_workload(chips("train", 16))
        await env.settle()
        await env.set_check("train", "prov", "Ready", "Provisioned")
        await env.settle()
        await env.set_check("train", "prov", "Rejected", "capacity revoked")
        await env.settle()
        wl = await env.wl("train")
        assert wl["spec"]["active"] is False
        assert condition(wl, "Evicted")["observedGeneration"] == wl["metadata"]["generation"] == 2
        text = 'AdmissionCheck in Rejected state: "prov" (capacity revoked)'
        assert {k: condition(wl, "Evicted")[k] for k in ("reason", "message")} == {
            "reason": "DeactivatedDueToAdmissionCheck", "message": f"The workload is deactivated due to {text}"}
        assert (condition(wl, "Admitted")["status"], condition(wl, "Admitted")["reason"]) == (
            "False", "NoReservationUnsatisfiedChecks")
        assert check_entry(wl, "prov")["message"] == "Reset to Pending after eviction. Previously: Rejected"
        events = await env.events("train")
        assert ("Warning", "AdmissionCheckRejected", f"Deactivated due to {text}") in events
        assert [e.kind for e in env.timeline.of(world.DEACTIVATED)] == [world.DEACTIVATED]
        env.advance(3600)
        assert await env.settle() == 0 and await env.reserved() == []


async def test_user_deactivation_evicts(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env)
        await env.add_workload(chips("train", 8))
        await env.settle()
        await env.http.request("PATCH", WORKLOADS.path("default", "train"), body={"spec": {"active": False}},
                               content_type=MERGE)
        await env.settle()
        wl = await env.wl("train")
        assert (condition(wl, "Evicted")["reason"], condition(wl, "Evicted")["message"]) == (
            "Deactivated", "The workload is deactivated")
        assert await env.reserved() == []
        assert ("Normal", "EvictedDueToDeactivated", "The workload is deactivated") in await env.events("train")


async def test_two_managers_share_the_check_entry_without_clobbering(tmp_path: Path) -> None:
    """The check controller owns the entry fields it applies; Kueue's writes keep them. Kueue's reset after an
    eviction (``evict.resetChecksOnEviction`` inside one forced apply by ``patching.PatchAdmissionStatus``, no
    follow-up write) takes over what it sets and leaves out ``podSetUpdates`` and, after any state but Retry,
    ``retryCount``: the server keeps a left-out field another manager still owns. Kueue's provisioning
    controller applies whole entries (``syncCheckStates``), so it owns both, and both survive the reset: seen on
    a real v0.19.2 cluster, ``retryCount`` stays 2 after a Rejected check is reset, owned by
    ``kueue.x-k8s.io/provisioning-request`` (together with ``requeueAfterSeconds``). The emulator used to remove
    them with a JSON patch after the reset."""
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env, checks=["prov"])
        await env.add_workload(chips("train", 16))
        await env.settle()
        updates = [{"name": "main", "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "pr-1"}}]
        env.advance(5)
        await env.set_check("train", "prov", "Ready", "Provisioned", pod_set_updates=updates)
        await env.settle()  # Kueue admits: a kueue-admission apply while the controller owns the entry
        wl = await env.wl("train")
        assert condition(wl, "Admitted")["status"] == "True"
        assert check_entry(wl, "prov") == {"name": "prov", "state": "Ready", "message": "Provisioned",
                                           "lastTransitionTime": rfc3339(env.now), "podSetUpdates": updates}

        env.advance(5)
        await env.set_check("train", "prov", "Retry", "failed", requeue_after=30, pod_set_updates=updates)
        await env.settle()  # the quota is held until requeueAt
        env.advance(30)
        await env.settle()  # evicted, reset, reserved again
        entry = check_entry(await env.wl("train"), "prov")
        assert entry == {"name": "prov", "state": "Pending", "lastTransitionTime": rfc3339(env.now),
                         "message": "Reset to Pending after eviction. Previously: Retry", "requeueAfterSeconds": 30,
                         "retryCount": 1, "podSetUpdates": updates}  # still owned by the controller
        assert await env.reserved() == ["train"]

        # the controller's next apply, as Kueue's does it: the entry whole, retryCount included
        await env.set_check("train", "prov", "Pending", "", requeue_after=30, retry_count=1)
        assert await env.settle() == 0
        wl = await env.wl("train")
        assert check_entry(wl, "prov") == {"name": "prov", "state": "Pending", "message": "",
                                           "lastTransitionTime": rfc3339(env.now), "requeueAfterSeconds": 30,
                                           "retryCount": 1}
        owners = {e["manager"]: e["fieldsV1"]["f:status"].get("f:admissionChecks", {}).get('k:{"name":"prov"}', {})
                  for e in wl["metadata"]["managedFields"] if e.get("subresource") == "status"}
        assert "f:retryCount" in owners["kueue-admission"] and "f:retryCount" in owners[CHECK_MANAGER]
        assert "f:message" in owners[CHECK_MANAGER] and "f:message" not in owners["kueue-admission"]

        # Rejected: the deactivation's reset leaves retryCount out of Kueue's apply; the controller keeps it
        await env.set_check("train", "prov", "Rejected", "no capacity", requeue_after=30, retry_count=1)
        await env.settle()
        wl = await env.wl("train")
        assert wl["spec"]["active"] is False and condition(wl, "Evicted")["reason"] == "DeactivatedDueToAdmissionCheck"
        assert check_entry(wl, "prov") == {
            "name": "prov", "state": "Pending", "message": "Reset to Pending after eviction. Previously: Rejected",
            "lastTransitionTime": rfc3339(env.now), "requeueAfterSeconds": 30, "retryCount": 1}


async def test_inactive_cluster_queue_with_a_missing_admission_check(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await env.setup(flavor("vlp-24"), cluster_queue("cq", {"vlp-24": {TPU: 24}}, checks=["prov"]),
                        local_queue("lq", "cq"))
        await env.add_workload(chips("train", 8))
        await env.settle()
        active = condition(await env.cq("cq"), "Active")
        assert (active["status"], active["reason"], active["message"]) == (
            "False", "AdmissionCheckNotFound", "Can't admit new workloads: references missing AdmissionCheck(s): prov.")
        wl = await env.wl("train")
        assert (condition(wl, "QuotaReserved")["reason"], condition(wl, "QuotaReserved")["message"]) == (
            "Inadmissible", "ClusterQueue cq is inactive")

        await env.setup(admission_check("prov"))
        await env.set_check_active("prov", False)
        await env.settle()
        assert condition(await env.cq("cq"), "Active")["reason"] == "AdmissionCheckInactive"
        assert await env.reserved() == []

        await env.set_check_active("prov", True)
        await env.settle()
        active = condition(await env.cq("cq"), "Active")
        assert (active["status"], active["reason"], active["message"]) == ("True", "Ready", "Can admit new workloads")
        assert await env.reserved() == ["train"]


async def test_missing_flavor_makes_the_queue_inactive(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await env.setup(cluster_queue("cq", {"vlp-24": {TPU: 24}}), local_queue("lq", "cq"))
        await env.add_workload(chips("train", 8))
        await env.settle()
        active = condition(await env.cq("cq"), "Active")
        assert (active["reason"], active["message"]) == (
            "FlavorNotFound", "Can't admit new workloads: references missing ResourceFlavor(s): vlp-24.")
        assert await env.reserved() == []


@pytest.mark.parametrize(("queue_setup", "wl_queue", "pod_requests", "reason", "message"), [
    ("plain", "nope", {TPU: 4}, "Inadmissible", "LocalQueue nope doesn't exist"),
    ("orphan-lq", "lq2", {TPU: 4}, "Inadmissible", "ClusterQueue gone doesn't exist"),
    ("null-selector", "lq", {TPU: 4}, "Pending", "Workload namespace doesn't match ClusterQueue selector"),
    ("plain", "lq", {TPU: 4, "memory": "1Gi"}, "Pending",
     "couldn't assign flavors to pod set main: resource memory unavailable in ClusterQueue"),
], ids=["missing-local-queue", "missing-cluster-queue", "null-namespace-selector", "uncovered-resource"])
async def test_why_a_workload_waits(tmp_path: Path, queue_setup: str, wl_queue: str, pod_requests: dict[str, object],
                                    reason: str, message: str) -> None:
    async with kueue_cluster(tmp_path) as env:
        cq = cluster_queue("cq", {"vlp-24": {TPU: 24}}, selector_unset=queue_setup == "null-selector")
        await env.setup(flavor("vlp-24"), cq, local_queue("lq", "cq"), local_queue("lq2", "gone"))
        await env.add_workload(workload("w", [("main", 1, pod_requests)], queue=wl_queue))
        assert await env.settle() == 1
        wl = await env.wl("w")
        got = condition(wl, "QuotaReserved")
        assert (got["status"], got["reason"], got["message"]) == ("False", reason, message)
        events = await env.events("w")
        assert events == ([("Warning", "Pending", message)] if reason == "Pending" else [])


async def test_second_pass_writes_nothing(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env, checks=["prov"], preemption="LowerPriority")
        await env.add_workload(chips("a", 16, priority=1))
        await env.add_workload(chips("b", 16, priority=1))
        await env.sync()
        await env.set_check("a", "prov", "Ready", "ok")
        await env.add_workload(chips("c", 8, priority=5))
        await env.settle()

        async def versions() -> dict[str, str]:
            items = [*(await env.http.request("GET", WORKLOADS.path()))["items"],
                     *(await env.http.request("GET", CLUSTERQUEUES.path()))["items"]]
            return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}

        before = (await versions(), len(env.timeline.entries), sum(r.sent for r in env.kueue.recorders.values()))
        env.advance(1000)
        assert await env.sync() is False
        assert await env.sync() is False
        sent = sum(r.sent for r in env.kueue.recorders.values())
        assert (await versions(), len(env.timeline.entries), sent) == before


async def test_quota_of_a_workload_evicted_by_someone_else_is_released(tmp_path: Path) -> None:
    async with kueue_cluster(tmp_path) as env:
        await tpu_queue(env)
        await env.add_workload(chips("train", 24))
        await env.settle()
        await env.add_workload(chips("next", 24, priority=5))  # no preemption: it waits
        await env.settle()
        evicted = {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "message": "Exceeded the timeout",
                   "lastTransitionTime": rfc3339(env.now)}
        await env.http.request("PATCH", WORKLOADS.path("default", "train", "status"), content_type=APPLY,
                               query={"fieldManager": "someone-else", "force": True},
                               body={"apiVersion": KUEUE, "kind": "Workload",
                                     "metadata": {"name": "train", "namespace": "default"},
                                     "status": {"conditions": [evicted]}})
        await env.settle()
        train = await env.wl("train")
        assert "admission" not in train["status"]
        assert (condition(train, "Admitted")["status"], condition(train, "Admitted")["reason"]) == (
            "False", "NoReservation")
        assert (condition(train, "Requeued")["status"], condition(train, "Requeued")["reason"]) == (
            "False", "PodsReadyTimeout")
        assert await env.reserved() == ["next"]  # the freed quota goes to the first in line
        assert [(e.kind, e.subject) for e in env.timeline.entries[-3:]] == [
            (world.EVICTED, "default/train"), (world.QUOTA_RESERVED, "default/next"), (world.ADMITTED, "default/next")]
