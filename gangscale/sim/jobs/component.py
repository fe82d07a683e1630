"""``JobEmulator``: Kueue's job framework, the Job/JobSet/KubeRay controllers and the kubelet as one
:class:`~gangscale.sim.world.Component` (see the package docstring for what each part does).

One ``sync`` reads everything (a :class:`~gangscale.sim.jobs.snapshot.Snapshot`) and runs five steps in
the order the real controllers would react: Kueue's job reconciler, the workload controllers (pods, child
Jobs, RayClusters), the kubelet and PodGC, the run clock, then the controllers' status writes. After a
step that wrote, the next one reads afresh, so one call carries a job as far as it can go at this instant.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import PODS, WORKLOADS
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.informers import HttpReader, Reader
from gangscale.sim.jobs import controllers as ctl
from gangscale.sim.jobs import framework as fw
from gangscale.sim.jobs import kubelet as kl
from gangscale.sim.jobs import raycontrollers as ray
from gangscale.sim.jobs.kinds import (
    JOB,
    JOBSET,
    KINDS,
    RAYCLUSTER,
    RAYJOB,
    KindInfo,
    duration_of,
    expected_pods,
    finished,
    is_managed,
    is_suspended,
    key,
    meta,
    pods_ready,
    status,
    true_condition,
    uid,
)
from gangscale.sim.jobs.snapshot import POD, Snapshot, load
from gangscale.sim.world import FINISHED, POD_STARTED, RUNNING, Timeline, owner_of

JSON = dict[str, Any]
log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
JOB_CONTROLLER = "kube-controller-manager"
JOBSET_CONTROLLER = "jobset-controller"
RAY_OPERATOR = "kuberay-operator"
KUBELET = "kubelet"
_BACKGROUND = {"propagationPolicy": "Background"}


class JobEmulator:
    """Jobs, JobSets, RayJobs and RayClusters, from Kueue's suspend gate to their last pod's exit."""

    name = "jobs"

    def __init__(self, http: KubeHTTP, timeline: Timeline, *, seed: int = 0, reader: Reader | None = None) -> None:
        self.http = http
        #: Where the reads come from: the driver's informer cache, else a LIST per read.
        self.reader = reader or HttpReader(http)
        self.timeline = timeline
        self.rng = random.Random(seed)
        self._runs: dict[str, kl.Run] = {}
        self._finished: set[str] = set()
        self._wake: float | None = None

    def next_wake(self) -> float | None:
        return self._wake

    async def sync(self, now: float) -> bool:
        wrote = False
        try:
            snap = await load(self.reader)
            for step in (self._framework, self._controllers, self._kubelet, self._run_clock, self._statuses):
                if await step(snap, now):
                    wrote = True
                    snap = await load(self.reader)
        except ApiError as exc:  # the API server is down or failing: try again next round
            log.warning("jobs: cannot read the cluster: %s", exc)
        return wrote

    # --- helpers ---------------------------------------------------------------------------------------

    async def _each(self, items: Iterable[tuple[str, JSON]],
                    fn: Callable[[str, JSON], Awaitable[bool]]) -> bool:
        """Run ``fn`` per object; one object's failure is logged and does not stop the others."""
        wrote = False
        for kind, obj in items:
            try:
                wrote = await fn(kind, obj) or wrote
            except ApiError as exc:
                level = logging.DEBUG if exc.conflict or exc.not_found else logging.WARNING
                log.log(level, "jobs: %s %s/%s: %s", kind, *key(obj), exc)
            except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
                log.warning("jobs: %s %s/%s cannot be handled: %s", kind, *key(obj), exc)
        return wrote

    async def _patch_object(self, res: Resource, old: JSON, new: JSON, manager: str) -> bool:
        """A merge patch taking ``old`` to ``new``, guarded by ``old``'s resourceVersion."""
        diff = fw.merge_patch_diff(old, new)
        if not diff:
            return False
        diff.setdefault("metadata", {})["resourceVersion"] = meta(old).get("resourceVersion")
        ns, name = key(old)
        await self.http.request("PATCH", res.path(ns, name), body=diff, content_type=MERGE,
                                query={"fieldManager": manager})
        return True

    async def _patch_status(self, res: Resource, obj: JSON, desired: JSON, manager: str,
                            content_type: str = MERGE) -> bool:
        diff = fw.merge_patch_diff(status(obj), desired)
        if not diff:
            return False
        ns, name = key(obj)
        await self.http.request("PATCH", res.path(ns, name, "status"), body={"status": diff},
                                content_type=content_type, query={"fieldManager": manager})
        return True

    async def _pod_status(self, pod: JSON, body: JSON) -> None:
        """The kubelet's status writes are strategic merge patches: conditions merge by type."""
        ns, name = key(pod)
        await self.http.request("PATCH", PODS.path(ns, name, "status"), body=body, content_type=STRATEGIC,
                                query={"fieldManager": KUBELET})

    async def _delete(self, res: Resource, obj: JSON) -> bool:
        ns, name = key(obj)
        try:
            await self.http.request("DELETE", res.path(ns, name), query=_BACKGROUND)
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    async def _delete_all(self, res: Resource, objs: Iterable[JSON]) -> bool:
        wrote = False
        for obj in objs:
            wrote = await self._delete(res, obj) or wrote
        return wrote

    async def _create(self, res: Resource, body: JSON, manager: str) -> bool:
        try:
            await self.http.request("POST", res.path(meta(body).get("namespace", "")), body=body,
                                    query={"fieldManager": manager})
        except ApiError as exc:
            if exc.status == 409:  # created by an earlier round whose answer we did not see
                return False
            raise
        return True

    def _runnable(self, kind: str, obj: JSON, snap: Snapshot) -> bool:
        """Never run pods of a Kueue-managed job that is not admitted, whatever its ``suspend`` says."""
        if not is_managed(kind, obj):
            return True
        wl = snap.workload_of(obj)
        return (wl is not None and true_condition(wl, "Admitted") is not None
                and true_condition(wl, "Evicted") is None)

    # --- Kueue's job reconciler ------------------------------------------------------------------------

    async def _framework(self, snap: Snapshot, now: float) -> bool:
        managed = [(k, o) for k, o in snap.top_level_jobs() if is_managed(k, o) and not ctl.is_deleting(o)]

        async def one(kind: str, obj: JSON) -> bool:
            return await self._reconcile(KINDS[kind], obj, snap, now)

        wrote = await self._each(managed, one)
        return await self._each((("Workload", wl) for wl in self._orphans(snap)), self._release_orphan) or wrote

    def _orphans(self, snap: Snapshot) -> list[JSON]:
        """Workloads being deleted, holding Kueue's finalizer, whose job is gone or going: the job reconciler's
        ``finalizeWorkloads`` (``workload.FinalizeOrphanedWorkload``) drops the finalizer."""
        live = {uid(o) for k in KINDS for o in snap.jobs(k) if not ctl.is_deleting(o)}
        out = []
        for wl in snap.workloads:
            ref = owner_of(wl)
            if (meta(wl).get("deletionTimestamp") and fw.has_finalizer(wl) and ref is not None
                    and ref.get("kind") in KINDS and str(ref.get("uid", "")) not in live):
                out.append(wl)
        return out

    async def _release_orphan(self, _: str, wl: JSON) -> bool:
        return await self._drop_finalizer(wl)

    async def _drop_finalizer(self, wl: JSON) -> bool:
        """``workload.RemoveFinalizer`` (an update guarded by the resourceVersion)."""
        if not fw.has_finalizer(wl):
            return False
        kept = [f for f in meta(wl).get("finalizers") or [] if f != fw.RESOURCE_IN_USE]
        new_meta = {k: v for k, v in meta(wl).items() if k != "finalizers"}
        if kept:
            new_meta["finalizers"] = kept
        return await self._patch_object(WORKLOADS, wl, {**wl, "metadata": new_meta}, fw.FIELD_MANAGER)

    def _pods_ready(self, info: KindInfo, job: JSON, snap: Snapshot) -> bool:
        clusters = snap.owned(job, RAYCLUSTER.kind) if info.kind == RAYJOB.kind else []
        return pods_ready(info.kind, job, clusters[0] if clusters else None)

    async def _reconcile(self, info: KindInfo, job: JSON, snap: Snapshot, now: float) -> bool:
        wl = snap.workload_of(job)
        step = fw.decide(info.kind, job, wl, self._pods_ready(info, job, snap))
        if step is fw.Step.NONE:
            return False
        if step is fw.Step.CREATE:
            return await self._create_workload(info, job, snap)
        assert wl is not None
        if step is fw.Step.FINALIZE:
            return await self._drop_finalizer(wl)
        if step is fw.Step.RELEASE:
            stopped = await self._patch_object(info.resource, job, fw.stopped(info, job, wl), fw.FIELD_MANAGER)
            return await self._drop_finalizer(wl) or stopped
        if step is fw.Step.PODS_READY:
            wanted = fw.pods_ready_condition(wl, self._pods_ready(info, job, snap))
            assert wanted is not None
            ns, name = key(wl)
            await self.http.request("PATCH", WORKLOADS.path(ns, name, "status"),
                                    body=fw.pods_ready_patch(wl, wanted, now), content_type=APPLY,
                                    query={"fieldManager": fw.PODS_READY_MANAGER, "force": "true"})
            return True
        if step is fw.Step.FINISH:
            message, success = finished(info.kind, job) or ("", True)
            return await self._finish_workload(wl, message, success, now)
        if step is fw.Step.UPDATE_QUEUE:
            return await self._patch_object(WORKLOADS, wl, {**wl, "spec": {**wl["spec"],
                                                                            "queueName": fw.queue_name(job)}},
                                            fw.FIELD_MANAGER)
        if step is fw.Step.STOP:
            return await self._patch_object(info.resource, job, fw.stopped(info, job, wl), fw.FIELD_MANAGER)
        try:
            started = fw.started(info, job, fw.admission_infos(wl, snap.flavors))
        except fw.AdmissionError as exc:
            if not exc.permanent:
                log.info("jobs: %s %s/%s cannot start yet: %s", info.kind, *key(job), exc)
                return False
            return await self._finish_workload(wl, str(exc), False, now, reason="FailedToStart")
        return await self._patch_object(info.resource, job, started, fw.FIELD_MANAGER)

    async def _create_workload(self, info: KindInfo, job: JSON, snap: Snapshot) -> bool:
        wrote = False
        if not is_suspended(job):  # what Kueue's webhook does at creation, and its reconciler otherwise
            wrote = await self._patch_object(info.resource, job, {**job, "spec": {**job["spec"], "suspend": True}},
                                             fw.FIELD_MANAGER)
        priority = 0
        pc = fw.priority_class(job)
        if pc is not None:
            wpc = snap.priority_classes.get(pc)
            if wpc is None:
                log.info("jobs: %s %s/%s: WorkloadPriorityClass %r not found", info.kind, *key(job), pc)
                return wrote
            priority = int(wpc.get("value", 0) or 0)
        return await self._create(WORKLOADS, fw.build_workload(info, job, priority), fw.FIELD_MANAGER) or wrote

    async def _finish_workload(self, wl: JSON, message: str, success: bool, now: float,
                               reason: str | None = None) -> bool:
        ns, name = key(wl)
        await self.http.request("PATCH", WORKLOADS.path(ns, name, "status"),
                                body=fw.finished_patch(wl, message, success, now, reason), content_type=APPLY,
                                query={"fieldManager": fw.FIELD_MANAGER, "force": "true"})
        return True

    # --- workload controllers --------------------------------------------------------------------------

    async def _controllers(self, snap: Snapshot, now: float) -> bool:
        taken = snap.pod_names()

        async def one(kind: str, obj: JSON) -> bool:
            if kind == JOB.kind:
                return await self._job_pods(obj, snap, taken)
            if kind == JOBSET.kind:
                return await self._jobset_children(obj, snap)
            if kind == RAYCLUSTER.kind:
                return await self._raycluster_pods(obj, snap, taken)
            return await self._rayjob_cluster(obj, snap, now)

        return await self._each(((k, o) for k in KINDS for o in snap.jobs(k)), one)

    async def _job_pods(self, job: JSON, snap: Snapshot, taken: set[str]) -> bool:
        pods = snap.owned(job, POD)
        wrote = await self._delete_all(PODS, ctl.job_pods_to_delete(job, pods))
        if self._runnable(JOB.kind, job, snap):
            for pod in ctl.job_pods_to_create(job, pods, self.rng, taken):
                wrote = await self._create(PODS, pod, JOB_CONTROLLER) or wrote
        return wrote

    async def _jobset_children(self, js: JSON, snap: Snapshot) -> bool:
        children = snap.owned(js, JOB.kind)
        if finished(JOBSET.kind, js) is not None or ctl.is_deleting(js):
            return False
        if is_suspended(js):
            wrote = False
            for child in children:
                wrote = await self._delete_all(PODS, snap.owned(child, POD)) or wrote
                wrote = await self._delete(JOB.resource, child) or wrote
            return wrote
        if not self._runnable(JOBSET.kind, js, snap):
            return False
        have = {meta(c).get("name") for c in children}
        wrote = False
        for child in ctl.child_jobs(js):
            if meta(child).get("name") not in have:
                wrote = await self._create(JOB.resource, child, JOBSET_CONTROLLER) or wrote
        return wrote

    async def _raycluster_pods(self, rc: JSON, snap: Snapshot, taken: set[str]) -> bool:
        plan = ray.raycluster_pod_plan(rc, snap.owned(rc, POD), self.rng, taken)
        wrote = await self._delete_all(PODS, plan.delete)
        if self._runnable(RAYCLUSTER.kind, rc, snap):
            for pod in plan.create:
                wrote = await self._create(PODS, pod, RAY_OPERATOR) or wrote
        return wrote

    async def _rayjob_cluster(self, rj: JSON, snap: Snapshot, now: float) -> bool:
        clusters = snap.owned(rj, RAYCLUSTER.kind)
        if is_suspended(rj) or ray.rayjob_finished(rj):
            wrote = False
            for rc in clusters:
                wrote = await self._delete_all(PODS, snap.owned(rc, POD)) or wrote
                wrote = await self._delete(RAYCLUSTER.resource, rc) or wrote
            return wrote
        if clusters or ctl.is_deleting(rj) or not self._runnable(RAYJOB.kind, rj, snap):
            return False
        name = status(rj).get("rayClusterName")
        wrote = False
        if not name:
            taken = {str(meta(rc).get("name", "")) for rc in snap.jobs(RAYCLUSTER.kind)}
            name = ray.rayjob_cluster_name(rj, self.rng, taken)
            wrote = await self._patch_status(RAYJOB.resource, rj, ray.rayjob_status(rj, name, False, now),
                                             RAY_OPERATOR)
        return await self._create(RAYCLUSTER.resource, ray.rayjob_cluster(rj, str(name)), RAY_OPERATOR) or wrote

    # --- kubelet and PodGC -----------------------------------------------------------------------------

    async def _kubelet(self, snap: Snapshot, now: float) -> bool:
        async def one(_: str, pod: JSON) -> bool:
            if kl.orphaned(pod, snap.nodes):
                return await self._delete(PODS, pod)
            if not kl.startable(pod, snap.nodes):
                return False
            await self._pod_status(pod, kl.running_patch(pod, now))
            top = snap.top_level_of(pod)
            subject = kl.subject_of(top[1] if top else pod)
            node = kl.node_of(pod)
            self.timeline.add(now, POD_STARTED, subject, f"pod {meta(pod).get('name')} running on {node}",
                              pod=meta(pod).get("name", ""), node=node, accelerators=kl.accelerators(pod))
            return True

        return await self._each(((POD, p) for p in snap.pods), one)

    # --- run clock -------------------------------------------------------------------------------------

    async def _run_clock(self, snap: Snapshot, now: float) -> bool:
        dues: list[float] = []

        async def one(kind: str, obj: JSON) -> bool:
            job_uid = uid(obj)
            # An autoscaling RayCluster's work is its Ray demand, run by the Ray autoscaler emulator
            # (gangscale.sim.rayautoscaler): its pod count changes all the time and is no gang.
            if (finished(kind, obj) is not None or is_suspended(obj) or ctl.is_deleting(obj)
                    or (kind == RAYCLUSTER.kind and ray.autoscaling_enabled(obj))):
                self._runs.pop(job_uid, None)
                return False
            current = kl.gang(snap.pods_of(kind, obj), expected_pods(kind, obj))
            previous = self._runs.get(job_uid)
            run = kl.advance_run(previous, current, now)
            if run is None:
                self._runs.pop(job_uid, None)
                return False
            self._runs[job_uid] = run
            if run is not previous:
                self.timeline.add(now, RUNNING, kl.subject_of(obj), f"all {current.expected} pods running",
                                  pods=current.expected)
            end = kl.due(run, None if kind == RAYCLUSTER.kind else duration_of(obj))
            if end is None:
                return False
            if end > now:
                dues.append(end)
                return False
            return await self._complete(kind, obj, current, run, now)

        wrote = await self._each(snap.top_level_jobs(), one)
        self._wake = min(dues) if dues else None
        return wrote

    async def _complete(self, kind: str, obj: JSON, current: kl.Gang, run: kl.Run, now: float) -> bool:
        if kind == RAYJOB.kind:
            await self._patch_status(RAYJOB.resource, obj, ray.rayjob_completed_status(obj, now), RAY_OPERATOR)
        else:
            for pod in current.live:
                await self._pod_status(pod, kl.succeeded_patch(pod, now))
        self._runs.pop(uid(obj), None)
        if uid(obj) not in self._finished:
            self._finished.add(uid(obj))
            self.timeline.add(now, FINISHED, kl.subject_of(obj), f"completed after {now - run.start:g}s of work",
                              seconds=now - run.start)
        return True

    # --- controllers' status ---------------------------------------------------------------------------

    async def _statuses(self, snap: Snapshot, now: float) -> bool:
        async def one(kind: str, obj: JSON) -> bool:
            if kind == JOB.kind:
                return await self._patch_status(JOB.resource, obj, ctl.job_status(obj, snap.owned(obj, POD), now),
                                                JOB_CONTROLLER)
            if kind == JOBSET.kind:
                desired = ctl.jobset_status(obj, snap.owned(obj, JOB.kind), now)
                return await self._patch_status(JOBSET.resource, obj, desired, JOBSET_CONTROLLER)
            if kind == RAYCLUSTER.kind:
                desired = ray.raycluster_status(obj, snap.owned(obj, POD))
                return await self._patch_status(RAYCLUSTER.resource, obj, desired, RAY_OPERATOR)
            clusters = [c for c in snap.owned(obj, RAYCLUSTER.kind) if not ctl.is_deleting(c)]
            name = meta(clusters[0]).get("name") if clusters else None
            desired = ray.rayjob_status(obj, str(name) if name else None, uid(obj) in self._runs, now)
            return await self._patch_status(RAYJOB.resource, obj, desired, RAY_OPERATOR)

        return await self._each(((k, o) for k in KINDS for o in snap.jobs(k) if not ctl.is_deleting(o)), one)
