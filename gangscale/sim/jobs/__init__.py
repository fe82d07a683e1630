"""Job emulators for the simulated cluster: what happens to a batch/v1 Job, a JobSet, a RayJob or a
RayCluster between its creation and its last pod's exit, apart from Kueue's queueing and the scheduler.

:class:`JobEmulator` (component ``jobs``) plays four parts, each in its own module:

- ``framework``: Kueue's job framework. A job labelled ``kueue.x-k8s.io/queue-name`` is suspended until its
  Workload is admitted; its Workload (upstream name, pod sets per kind with their ``topologyRequest``,
  priority from the WorkloadPriorityClass, ``provreq.kueue.x-k8s.io/`` annotations, the
  ``kueue.x-k8s.io/resource-in-use`` finalizer) is created for it, and carries ``PodsReady`` from then on;
  admission merges the Workload/pod-set/queue marks, the flavors' node labels and tolerations and the
  admission checks' ``podSetUpdates`` into the pod templates and unsuspends; eviction, loss of admission or
  deactivation suspends the job and restores its templates from the Workload's copy; a finished job gets
  ``Finished=True`` on its Workload (SSA on ``/status``, field manager ``kueue-job-controller``), and a
  finished or deleted Workload loses the finalizer.
- ``controllers`` / ``raycontrollers``: the batch Job controller (pods), the JobSet controller (child Jobs),
  KubeRay (RayCluster pods; a RayJob's RayCluster), with upstream names, labels and controller owners;
  suspension deletes what they created. Random name suffixes come from a seeded ``random.Random``, so runs
  repeat.
- ``kubelet``: bound pods on Ready nodes run; pods on vanished nodes are deleted (PodGC); the run clock: a job
  works for its ``sim.gangscale.io/duration`` once *all* its pods run, then its pods succeed and the job
  completes (Job ``Complete``, JobSet ``Completed``, RayJob ``SUCCEEDED``/``Complete`` with its RayCluster
  deleted). A RayCluster runs until it is deleted or suspended (Kueue never finishes one; a duration on it is
  ignored); an autoscaling one's run and finish are its placement groups', recorded by the Ray autoscaler
  emulator (``gangscale.sim.rayautoscaler``).

Timeline entries: ``POD_STARTED`` (pod, node, accelerators), ``RUNNING`` (the whole gang runs), ``FINISHED``.

Simplified versus the real system (each module says more): no container restarts, pod failures, retries or
``backoffLimit``; no PodsReady timeout eviction, no elastic jobs (workload slices), no partial admission, no
prebuilt Workloads; a RayJob's submission (submitter Job, HTTP) is not modelled beyond the
duration, though its ``submitter`` pod set is in the Workload as upstream; the run clock is kept in memory
(an emulator restarted mid-run starts running gangs' clocks again); Kueue's job webhooks are applied by the
reconciler instead (a job created unsuspended is suspended before any pod exists, not at admission time).
"""

from gangscale.sim.jobs.component import JobEmulator

__all__ = ["JobEmulator"]
