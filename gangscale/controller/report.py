"""What the controller shows about itself, computed when somebody looks: the pool gauges and ``/debug/plans``.

Both walk every unit or request, so they run when ``/metrics`` or ``/debug/plans`` is read, never in a pass.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from gangscale.controller.backoffs import PoolBackoff
from gangscale.controller.request import Phase, RequestState, phase
from gangscale.controller.view import ClusterView
from gangscale.model.nodepool import NodePool
from gangscale.timefmt import rfc3339


def pool_unit_states(view: ClusterView, pools: Mapping[str, NodePool],
                     states: Iterable[RequestState]) -> dict[tuple[str, str], int]:
    """(pool, state) -> units: ready units as booked, idle or busy (and all of them as ready), and units still
    being provisioned by recorded scale-ups."""
    states = list(states)
    booked = {node for st in states if phase(st) is Phase.BOOKED for node in (st.booking or {})}
    out: dict[tuple[str, str], int] = defaultdict(int)
    for pool, pool_units in view.units(pools).items():
        for nodes in pool_units.values():
            if not all(view.ready(n) for n in nodes):
                continue
            state = "booked" if booked & set(nodes) else "idle" if all(map(view.empty, nodes)) else "busy"
            out[(pool, state)] += 1
            out[(pool, "ready")] += 1
    for st in states:
        if phase(st) is Phase.PROVISIONING and st.record is not None:
            for step in st.record.steps:
                out[(step.pool, "provisioning")] += step.units
    return dict(out)


def debug_document(*, dry_run: bool, passes: int, last_pass: float | None, plans: Mapping[str, dict[str, Any]],
                   scale_downs: list[dict[str, Any]], backed_off: Mapping[str, PoolBackoff],
                   states: Mapping[str, RequestState]) -> dict[str, Any]:
    """What ``GET /debug/plans`` shows: the latest decisions, recent scale-downs, every request's phase."""
    return {
        "dryRun": dry_run,
        "passes": passes,
        "lastPass": rfc3339(last_pass) if last_pass is not None else None,
        "decisions": [plans[key] for key in sorted(plans) if key in states],
        "scaleDowns": scale_downs,
        "backedOffPools": {pool: {"until": rfc3339(b.until), "reason": b.reason} for pool, b in backed_off.items()},
        "requests": [{"request": st.key, "class": st.request.class_name, "phase": phase(st).value,
                      "conditions": {t: f"{c.status}/{c.reason}: {c.message}" for t, c in st.conditions.items()},
                      "retryAt": rfc3339(st.retry_at) if st.retry_at else None}
                     for st in sorted(states.values(), key=lambda s: s.key)],
    }
