"""The kubelet, the pod garbage collector and the simulated run clock, as pure functions.

Kubelet: a pod bound to a Node (``spec.nodeName``) whose ``Ready`` condition is True, still ``Pending``,
starts at once: ``phase: Running``, ``startTime``, conditions ``Initialized``, ``ContainersReady``,
``Ready`` True (``PodScheduled`` is already True from the binding), one running ``containerStatuses`` entry
per container. When its job's work is done it ends ``Succeeded`` (``Ready``/``ContainersReady`` False with
reason ``PodCompleted``, containers terminated with exit code 0). PodGC: a pod bound to a Node that no
longer exists is deleted.

Run clock: a job's work takes the duration in its ``sim.gangscale.io/duration`` annotation and starts only
when *every* pod of the job runs (a gang: JAX and Ray training wait for all hosts); losing a pod before the
end loses the run, which starts again from zero once the whole gang runs again.

Simplified: no image pulls, probes, container restarts or failures; pods on a Node that turns NotReady keep
running (no NoExecute eviction); pods start in the same instant they are bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gangscale.model.pod import pod_requests
from gangscale.model.scheduling import SpecError
from gangscale.sim.jobs.controllers import is_deleting, is_terminal, phase
from gangscale.sim.jobs.kinds import meta, spec, status, uid
from gangscale.sim.world import ACCELERATOR_RESOURCES
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]

#: Extended resources counted as accelerators (devices the workloads here are gangs of).


def accelerators(pod: JSON) -> int:
    try:
        requests = pod_requests(spec(pod))
    except (SpecError, ValueError):
        return 0
    return sum(requests.get(name) for name in ACCELERATOR_RESOURCES)


def node_ready(node: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status(node).get("conditions") or [] if isinstance(c, dict))


def node_of(pod: JSON) -> str:
    return str(spec(pod).get("nodeName") or "")


def startable(pod: JSON, nodes: Mapping[str, JSON]) -> bool:
    node = nodes.get(node_of(pod))
    return (node is not None and node_ready(node) and phase(pod) == "Pending" and not is_deleting(pod))


def orphaned(pod: JSON, nodes: Mapping[str, JSON]) -> bool:
    """PodGC's orphan rule: bound to a Node that is gone."""
    return bool(node_of(pod)) and node_of(pod) not in nodes and not is_deleting(pod)


def _containers(pod: JSON) -> list[JSON]:
    return [c for c in spec(pod).get("containers") or [] if isinstance(c, dict)]


def running_patch(pod: JSON, now: float) -> JSON:
    """The kubelet's status patch (strategic merge: conditions merge by type) for a started pod."""
    ts = rfc3339(now)
    conds = [{"type": t, "status": "True", "lastTransitionTime": ts}
             for t in ("Initialized", "Ready", "ContainersReady")]
    statuses = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": True,
                 "started": True, "restartCount": 0, "state": {"running": {"startedAt": ts}}}
                for c in _containers(pod)]
    return {"status": {"phase": "Running", "startTime": ts, "conditions": conds, "containerStatuses": statuses}}


def succeeded_patch(pod: JSON, now: float) -> JSON:
    ts = rfc3339(now)
    conds = [{"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": ts}
             for t in ("Ready", "ContainersReady")]
    started = {c.get("name"): ((c.get("state") or {}).get("running") or {}).get("startedAt", ts)
               for c in status(pod).get("containerStatuses") or [] if isinstance(c, dict)}
    statuses = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": False,
                 "started": False, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started.get(
                     c.get("name"), ts), "finishedAt": ts}}}
                for c in _containers(pod)]
    return {"status": {"phase": "Succeeded", "conditions": conds, "containerStatuses": statuses}}


# --- run clock ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gang:
    """A job's live pods, seen at one instant."""

    expected: int
    live: tuple[JSON, ...]

    @property
    def complete(self) -> bool:
        """Every expected pod exists and runs."""
        return (self.expected > 0 and len(self.live) == self.expected
                and all(phase(p) == "Running" for p in self.live))

    @property
    def members(self) -> frozenset[str]:
        return frozenset(uid(p) for p in self.live)


def gang(pods: Iterable[JSON], expected: int) -> Gang:
    return Gang(expected, tuple(p for p in pods if not is_deleting(p) and not is_terminal(p)))


@dataclass(frozen=True)
class Run:
    """One attempt at a job's work: which pods, since when."""

    members: frozenset[str]
    start: float


def advance_run(previous: Run | None, current: Gang, now: float) -> Run | None:
    """The run after looking at the gang now: kept while the same pods run, new when the gang (re)forms,
    gone when it broke."""
    if not current.complete:
        return None
    if previous is not None and previous.members == current.members:
        return previous
    return Run(current.members, now)


def due(run: Run, duration: float | None) -> float | None:
    return None if duration is None else run.start + duration


def subject_of(obj: JSON) -> str:
    m = meta(obj)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"
