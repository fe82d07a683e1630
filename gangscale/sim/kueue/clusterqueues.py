"""A ClusterQueue's status as Kueue's ClusterQueue controller keeps it, as pure functions.

- ``Active``: True/``Ready`` ("Can admit new workloads") when every referenced ResourceFlavor and
  AdmissionCheck exists and every check's own ``Active`` condition is True; otherwise False with the first
  of upstream's reasons that applies (``FlavorNotFound``, ``AdmissionCheckNotFound``,
  ``AdmissionCheckInactive``) and all the problems in one message ("Can't admit new workloads: references
  missing AdmissionCheck(s): a,b."). An inactive queue reserves nothing. ``Invalid`` (not an upstream
  reason: Kueue's webhook would reject the object) covers a spec the emulator cannot read.
- ``pendingWorkloads``, ``reservingWorkloads``, ``admittedWorkloads``; ``flavorsReservation`` (what
  reserving Workloads hold) and ``flavorsUsage`` (what admitted ones hold), every flavor and covered
  resource listed, ``borrowed`` always 0 (no cohorts).

Not kept: LocalQueue status, ``fairSharing``, the ``stopPolicy`` states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gangscale.model.quantity import format_quantity
from gangscale.sim.kueue.objects import (
    ACTIVE,
    CQ_CHECK_INACTIVE,
    CQ_CHECK_NOT_FOUND,
    CQ_FLAVOR_NOT_FOUND,
    CQ_INVALID,
    CQ_READY,
    ClusterQueue,
    conditions_of,
)
from gangscale.sim.kueue.quota import admission_usage_by_flavor
from gangscale.sim.kueue.workload import Workload
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]


def active_state(cq: ClusterQueue, flavors: Iterable[str], checks: Mapping[str, bool]) -> tuple[bool, str, str]:
    """(active, reason, message) of the ClusterQueue's ``Active`` condition; ``checks`` is name -> active."""
    if cq.problem:
        return False, CQ_INVALID, f"Can't admit new workloads: {cq.problem}."
    known = set(flavors)
    missing_flavors = [f for f in cq.flavor_names if f not in known]
    names = sorted({rule.name for rule in cq.checks})
    missing = [n for n in names if n not in checks]
    inactive = [n for n in names if n in checks and not checks[n]]
    problems = [(CQ_FLAVOR_NOT_FOUND, "references missing ResourceFlavor(s)", missing_flavors),
                (CQ_CHECK_NOT_FOUND, "references missing AdmissionCheck(s)", missing),
                (CQ_CHECK_INACTIVE, "references inactive AdmissionCheck(s)", inactive)]
    found = [(reason, f"{text}: {','.join(items)}") for reason, text, items in problems if items]
    if not found:
        return True, *CQ_READY
    return False, found[0][0], f"Can't admit new workloads: {', '.join(m for _, m in found)}."


def _usage_list(by_flavor: Mapping[str, Mapping[str, int]]) -> list[JSON]:
    return [{"name": flavor, "resources": [{"name": r, "total": format_quantity(r, amount), "borrowed": "0"}
                                           for r, amount in resources.items()]}
            for flavor, resources in by_flavor.items()]


def desired_status(cq: ClusterQueue, active: tuple[bool, str, str], workloads: Iterable[Workload],
                   pending: int, now: float) -> JSON:
    """The status fields the emulator owns on ``cq`` (the ``Active`` condition keeps its transition time)."""
    status_value = "True" if active[0] else "False"
    old = conditions_of(cq.raw).get(ACTIVE) or {}
    stamp = old["lastTransitionTime"] if old.get("status") == status_value and old.get("lastTransitionTime") \
        else rfc3339(now)
    mine = [w for w in workloads if w.reserved and not w.finished and w.reserved_in == cq.name]
    return {
        "conditions": [{"type": ACTIVE, "status": status_value, "reason": active[1], "message": active[2],
                        "lastTransitionTime": stamp}],
        "pendingWorkloads": pending,
        "reservingWorkloads": len(mine),
        "admittedWorkloads": sum(1 for w in mine if w.admitted),
        "flavorsReservation": _usage_list(admission_usage_by_flavor(mine, cq, only_admitted=False)),
        "flavorsUsage": _usage_list(admission_usage_by_flavor(mine, cq, only_admitted=True)),
    }


def status_differs(cq: ClusterQueue, desired: Mapping[str, Any]) -> bool:
    current = cq.raw.get("status") or {}
    old = conditions_of(cq.raw).get(ACTIVE) or {}
    new = desired["conditions"][0]
    if (old.get("status"), old.get("reason"), old.get("message")) != (new["status"], new["reason"], new["message"]):
        return True
    return any(current.get(k) != v for k, v in desired.items() if k != "conditions")
