"""The contract between the simulated cluster's emulators and the loop that drives them.

Every emulator (Kueue's scheduler and workload controller, Kueue's provisioning admission check, the job
controllers and "kubelet", the kube-scheduler, the baseline autoscaler) is a :class:`Component`: a
level-triggered reconciler that reads the API server over HTTP, writes what it must, and says whether it
wrote anything. The driver (:mod:`gangscale.sim.driver`) calls every component in turn until a whole round
changes nothing and the real controller is quiet, then moves the shared :class:`~gangscale.clock.ManualClock`
to the next thing due (a component's :meth:`Component.next_wake`, the controller's or the simulated cloud's
own timers, the next scenario arrival). Components never sleep and never read wall-clock time: ``now`` is
an argument.

Components record what a user would want to see in a :class:`Timeline`; the demo prints it and builds its
per-workload table from it. ``subject`` is always the job's ``<namespace>/<name>`` (see
:func:`workload_subject`), or a node pool / node name for capacity events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

JSON = dict[str, Any]

#: Extended resources counted as accelerators (GPUs, TPU chips, other AI chips) in the timeline and report.
ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "google.com/tpu", "amd.com/gpu", "gpu.intel.com/i915",
                         "habana.ai/gaudi", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore")

# Timeline kinds. Emulators add the workload kinds; the driver's observer adds the capacity kinds.
ARRIVED = "arrived"                # a job was created                                     (scenario)
QUOTA_RESERVED = "quota"           # Kueue reserved quota for the job's Workload             (kueue)
PREEMPTED = "preempted"            # the Workload was evicted to make room; data: by=subject (kueue)
EVICTED = "evicted"                # evicted for another reason; data: reason               (kueue)
DEACTIVATED = "deactivated"        # spec.active=false after a Rejected check               (kueue)
CHECK = "check"                    # an admission check changed state; data: check, state   (kueue)
PR_CREATED = "pr"                  # Kueue created a ProvisioningRequest; data: name         (kueue)
ADMITTED = "admitted"              # the Workload is Admitted                               (kueue)
POD_STARTED = "pod"                # one pod started running; data: pod, node, accelerators  (jobs)
RUNNING = "running"                # every pod of the job runs: the gang started            (jobs)
FINISHED = "finished"              # the job completed                                      (jobs)
PROVISIONED = "provisioned"        # a PR got Provisioned=True; data: name, reason          (observer)
NOT_FOUND = "capacity"             # a PR got Provisioned=False or Failed; data: reason     (observer)
SCALE_UP = "scale-up"              # nodes were created; subject = pool; data: nodes        (observer)
NODES_READY = "ready"              # nodes became Ready; subject = pool; data: nodes        (observer)
SCALE_DOWN = "scale-down"          # nodes were deleted; subject = pool; data: nodes        (observer)
SCALE_UP_FAILED = "rolled-back"    # a warning Event of the autoscaler on a PR; data: reason (observer)
RAY_DEMAND = "ray-demand"          # a placement group asked for, placed, released or withdrawn;
                                   # data: demand, group, replicas, event            (ray autoscaler)
RAY_SCALE = "ray-scale"            # the Ray autoscaler patched a RayCluster's worker group;
                                   # data: group, old, new, workersToDelete          (ray autoscaler)


@dataclass(frozen=True, slots=True)
class Entry:
    at: float
    kind: str
    subject: str
    text: str
    data: JSON = field(default_factory=dict)


@dataclass
class Timeline:
    """What happened, in simulated time order (components add entries as they act, so order is append order)."""

    start: float
    entries: list[Entry] = field(default_factory=list)

    def add(self, at: float, kind: str, subject: str, text: str, **data: Any) -> None:
        self.entries.append(Entry(at, kind, subject, text, data))

    def of(self, kind: str, subject: str | None = None) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind and (subject is None or e.subject == subject)]

    def first(self, kind: str, subject: str) -> float | None:
        return next((e.at for e in self.entries if e.kind == kind and e.subject == subject), None)


class Component(Protocol):
    #: Short name for logs and the demo's component list ("kueue", "provisioning-check", "jobs", ...).
    name: str

    async def sync(self, now: float) -> bool:
        """Reconcile once against the API server; True when anything was written (or deleted).

        Must be idempotent: called again with nothing changed, it writes nothing and returns False. It must
        not raise for a single bad object (record the problem where a user would see it and go on).
        """
        ...

    def next_wake(self) -> float | None:
        """The earliest simulated time at which :meth:`sync` must run again even if nothing else changes (a
        backoff ending, a pod finishing its run); None when it only reacts to changes."""
        ...


def owner_of(obj: JSON) -> JSON | None:
    """The controller ownerReference of an object, or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def workload_subject(workload: JSON) -> str:
    """``<namespace>/<job name>`` for a Workload owned by a job, else ``<namespace>/<workload name>``."""
    meta = workload.get("metadata") or {}
    owner = owner_of(workload)
    return f"{meta.get('namespace', '')}/{owner['name'] if owner else meta.get('name', '')}"
