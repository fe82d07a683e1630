"""An emulator of Kueue's core — its scheduler and workload controller — over the embedded API server.

:class:`KueueCore` is a :class:`~gangscale.sim.world.Component` (name ``kueue``) working on Kueue v1beta2
objects exactly as a user or Kueue's job integrations write them: ResourceFlavor, ClusterQueue, LocalQueue,
AdmissionCheck (its ``Active`` condition only), WorkloadPriorityClass (resolved into ``spec.priority`` by
whoever creates the Workload) and Workload. It reproduces:

- **queueing**: per ClusterQueue, pending Workloads (active, unfinished, no quota, LocalQueue and
  ClusterQueue present, ``requeueState.requeueAt`` passed, namespace matching ``namespaceSelector`` —
  null admits none, ``{}`` all) in priority-then-creation order; ``StrictFIFO`` (the head blocks) and
  ``BestEffortFIFO`` (a Workload that does not fit lets later ones through);
- **quota reservation**: usage is the pods' effective requests (limits where requests are missing) times
  ``count``, per pod set; the first flavor of the covering resource group that matches the pod set's node
  selector/affinity and tolerations and has ``nominalQuota - usage`` for every resource; Kueue's
  ``status.admission``, conditions, messages ("couldn't assign flavors to pod set main: insufficient unused
  quota for google.com/tpu in flavor vlp-24, 8 more needed") and Events;
- **admission checks**: a ``Pending`` entry per check of the ClusterQueue on reservation; ``Admitted`` when
  all are ``Ready`` (at once without checks); on ``Retry`` the quota is held until ``requeueState.requeueAt``
  (the check's ``lastTransitionTime + requeueAfterSeconds``, no retry count on the Workload), then the
  Workload is evicted and queued again at once; deactivation on ``Rejected``; the reset of every check after
  an eviction (Kueue's exact messages, and the fields another manager owns left in place, as one apply
  leaves them); a ClusterQueue whose ResourceFlavor or AdmissionCheck is missing, or whose check is not
  ``Active``, is inactive and reserves nothing;
- **preemption** within a ClusterQueue (``LowerPriority``, ``LowerOrNewerEqualPriority``), fewest and
  lowest-priority victims, Kueue's ``Evicted``/``Preempted`` conditions and message;
- ClusterQueue status: ``Active``, workload counts, ``flavorsReservation``/``flavorsUsage``;
- ``events.k8s.io/v1`` Events from the recorder of the Kueue controller whose part is played
  (:mod:`~gangscale.sim.kueue.events`).

Simplified or left out (each also said where it is implemented):

- quota is released in the same write as the eviction, not after the job framework confirms the job
  stopped (the job emulator stops the job when it sees ``Evicted``); deactivation is one pass, without
  upstream's intermediate ``DeactivationTarget`` condition;
- no cohorts (so no borrowing, lending, reclaiming), no fair sharing, no partial admission, no
  topology-aware scheduling, no ``flavorFungibility`` knobs (a flavor that does not fit always moves on to
  the next), no ``stopPolicy``, no WaitForPodsReady / PodsReady eviction, no MultiKueue, no
  ``maximumExecutionTimeSeconds``, no admission gates or preemption gates, no LocalQueue status, no
  ``resourceRequests`` status; the provisioning admission check itself (ProvisioningRequests) is another
  component (:mod:`gangscale.sim.kueue.provisioning`);
- one pass reads everything and acts level-triggered, instead of Kueue's watch-driven queues and its
  one-head-per-ClusterQueue scheduling cycles; a preemptor gets its quota in the pass after its victims
  are evicted.

Modules: ``objects`` (queue-side views, vocabulary), ``workload`` (the Workload view), ``quota`` (ordering,
flavors, preemption, per-queue plan), ``lifecycle`` (the status changes of each transition), ``clusterqueues``
(queue status), ``ssa`` (writing only the fields the manager owns), ``events`` (Kueue's Events), ``core`` (the
component). docs/apiserver-fidelity.md ("Kueue") lists what follows Kueue v0.19.2 and what is left out.
"""

from gangscale.sim.kueue.core import KueueCore

__all__ = ["KueueCore"]
