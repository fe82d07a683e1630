"""The scale-up intent gangscale records on a ProvisioningRequest before it calls the provider (decision 12).

It lives in ``status.provisioningClassDetails["gangscale.io/scale-up"]`` as compact JSON, written with the
conditions under the ``gangscale`` field manager, so one status write both records the intent and tells the
user what is happening. Each step carries the idempotency token the provider is called with: after a crash,
calling ``obtain`` again with the same token returns the same units instead of creating more.

Phases: ``obtaining`` (written before the first provider call), ``obtained`` (every unit granted; waiting
for the nodes to be Ready), ``releasing`` (being handed back; see :data:`RELEASING`). The record stays after
``Provisioned=True`` so the booked units stay known. When the cloud deletes the units by itself at the end of a run
duration (GKE flex-start and queued provisioning), the ``obtained`` record says when (``reclaim``), so a restarted
process still ends the booking then.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Any

DETAIL_KEY = "gangscale.io/scale-up"
#: The one pool a scale-up used, when it used one: a valid label value (pool names are DNS labels), so a Kueue
#: ProvisioningRequestConfig can turn it into a nodeSelector on the admitted pods (``podSetUpdates.nodeSelector``
#: entry ``{key: gangscale.io/node-pool, valueFromProvisioningClassDetail: gangscale.io/node-pool}``).
POOL_DETAIL_KEY = "gangscale.io/node-pool"
OBTAINING = "obtaining"
OBTAINED = "obtained"
#: Every unit of the scale-up is being handed back (it timed out, failed, or was found broken): the request is
#: planned again only once no node of it is left, and a process that takes over resumes the release. Without it a
#: new leader took the units of a released scale-up for orphans and re-planned the request while their VMs were
#: still being deleted (found by hack/chaos.py, seed 11109: a gang with two nodes alive at once).
RELEASING = "releasing"


@dataclass(frozen=True, slots=True)
class Step:
    pool: str
    units: int
    token: str


@dataclass(frozen=True, slots=True)
class Record:
    attempt: int
    phase: str
    deadline: float
    steps: tuple[Step, ...]
    #: The leader identity of the process that decided the scale-up ("" without leader election): a new leader
    #: tells a predecessor's scale-up from its own, and adopts it.
    holder: str = ""
    #: When the cloud deletes the units by itself (the earliest of the steps'; None: never).
    reclaim: float | None = None
    #: Nodes that already existed and that the decided plan also puts pods on. A process that resumes the scale-up
    #: after a restart has no decision in memory; it holds these nodes until the booking is rebuilt, so scale-down
    #: cannot take the free room the gang was planned on while the new units come up (found by ``hack/chaos.py``:
    #: a new leader removed such a unit as empty, and the request was then Provisioned on half its capacity).
    nodes: tuple[str, ...] = ()

    def to_detail(self) -> str:
        data: dict[str, Any] = {"attempt": self.attempt, "phase": self.phase, "deadline": round(self.deadline, 3),
                                "steps": [{"pool": s.pool, "units": s.units, "token": s.token} for s in self.steps]}
        if self.holder:
            data["holder"] = self.holder
        if self.reclaim is not None:
            data["reclaim"] = round(self.reclaim, 3)
        if self.nodes:
            data["nodes"] = list(self.nodes)
        return json.dumps(data, separators=(",", ":"))

    def with_phase(self, phase: str, reclaim: float | None = None) -> Record:
        return replace(self, phase=phase, reclaim=reclaim)

    @property
    def single_pool(self) -> str | None:
        pools = {step.pool for step in self.steps}
        return pools.pop() if len(pools) == 1 else None

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(step.token for step in self.steps)


def step_token(uid: str, attempt: int, index: int, now: float, version: str) -> str:
    """A token unique to (request, scale-up, step), short enough for a label value (≤ 63 characters).

    A provider derives its unit ids and node names from the token, so a token must never name two scale-ups,
    in one process or across restarts. ``version`` is the request's ``resourceVersion`` as seen when the
    scale-up was decided: the intent is written on the request before any provider call, so once a token has
    obtained anything the request has moved past that version, and a restarted process (whose first list is a
    consistent read) decides from a later one. Within a process the attempt counter tells apart scale-ups
    decided from the same version (a watch that lags the controller's own writes). Same inputs, same token: a
    demo replays identically.
    """
    digest = hashlib.sha256(f"{attempt}/{version}/{now!r}".encode()).hexdigest()[:12]
    return f"{uid[:36]}-{digest}-{index % 100}"


def from_status(status: dict[str, Any]) -> Record | None:
    """The record in a PR's status, or None (absent or unreadable: a record we cannot read is not ours)."""
    return parse_detail((status.get("provisioningClassDetails") or {}).get(DETAIL_KEY))


def parse_detail(raw: str | None) -> Record | None:
    """A record from its JSON text (:meth:`Record.to_detail`), or None when absent or unreadable."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        steps = tuple(Step(str(s["pool"]), int(s["units"]), str(s["token"])) for s in data["steps"])
        reclaim = None if data.get("reclaim") is None else float(data["reclaim"])
        if reclaim is not None and not math.isfinite(reclaim):
            reclaim = None
        nodes = data.get("nodes") or []
        if not isinstance(nodes, list):
            raise TypeError("nodes")
        return Record(int(data["attempt"]), str(data["phase"]), float(data["deadline"]), steps,
                      str(data.get("holder") or ""), reclaim, tuple(str(n) for n in nodes))
    except (ValueError, KeyError, TypeError):
        return None
