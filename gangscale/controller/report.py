"""What the controller shows about itself: the pool gauges and ``/debug/plans``, and the decisions it keeps for them.

Both walk every unit or request, so they run when ``/metrics`` or ``/debug/plans`` is read, never in a pass (a
pass only keeps its decisions, :func:`record_plans`).
``/debug/plans?pr=NAMESPACE/NAME`` is one request's document (:func:`request_document`: phase, conditions, the
latest decision with its per-pool reasons and hints, the scale-up in flight, the booking), which
``gangscale explain`` renders; ``gangscale explain --offline`` builds the same document from the cluster.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoff
from gangscale.controller.logic.poolhealth import ScaleUpOutcome, Unhealthy
from gangscale.controller.logic.reconcile import deadline
from gangscale.controller.logic.request import Phase, RequestState, phase
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.view import ClusterView
from gangscale.model.decision import Decision, Hint, Outcome, PoolReason
from gangscale.model.nodepool import NodePool
from gangscale.observe.metrics import Metrics
from gangscale.planner import explain, summarize
from gangscale.timefmt import rfc3339

log = logging.getLogger(__name__)

#: Placements on existing nodes listed per decision in a request's document before the rest are counted.
MAX_PLACEMENTS = 50


def record_plans(plans: dict[str, dict[str, Any]], decisions: Sequence[Decision], by_key: Mapping[str, RequestState],
                 now: float, *, dry_run: bool, metrics: Metrics) -> None:
    """Keep a pass's decisions in ``plans`` (request -> its latest decision, as ``/debug/plans`` shows it) and log
    those that change something (in a dry run, every one; the scale-ups it would make are counted)."""
    for d in decisions:
        plans[d.gang] = {"at": rfc3339(now), "request": d.gang, "class": by_key[d.gang].request.class_name,
                         "outcome": d.outcome.value, "summary": summarize(d), "explain": explain(d),
                         "dryRun": dry_run}
        if dry_run or d.outcome is not Outcome.FITS:
            log.info("%s %s", "would" if dry_run and d.outcome is Outcome.SCALE_UP else "decided", explain(d),
                     extra={"pr": d.gang, "outcome": d.outcome.value, "dry_run": dry_run})
            if dry_run and d.outcome is Outcome.SCALE_UP:
                for step in d.steps:
                    metrics.scaled(step.pool, "up", step.units)


def export_gauges(metrics: Metrics, *, leading: bool, counts: Mapping[tuple[str, str], int],
                  backed_off: Iterable[str], view: ClusterView, pools: Mapping[str, NodePool],
                  states: Iterable[RequestState], unhealthy: Iterable[str] = ()) -> None:
    """Set the gauges (``counts``: requests per (class, phase))."""
    metrics.set_leader(leading)
    metrics.set_requests(dict(counts))
    booked_requests = sum(n for (_, state), n in counts.items() if state == Phase.BOOKED.lower())
    metrics.set_bookings(booked_requests)
    metrics.set_backed_off(backed_off)
    metrics.set_unhealthy(unhealthy)
    metrics.set_pool_units(pool_unit_states(view, pools, states))


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


def backed_off_json(backed_off: Mapping[str, PoolBackoff]) -> dict[str, Any]:
    return {pool: {"until": rfc3339(b.until), "reason": b.reason} for pool, b in backed_off.items()}


#: An unhealthy pool's verdict and the outcomes its buffer holds now (oldest first).
UnhealthyPools = Mapping[str, tuple[Unhealthy, Sequence[ScaleUpOutcome]]]


def unhealthy_json(unhealthy: UnhealthyPools) -> dict[str, Any]:
    """``unhealthyPools``: per pool, since and until when it is skipped, why (``message``), the outcomes that made
    it unhealthy (``outcomes``) and those recorded since (``recent``: the whole buffer now)."""
    return {pool: {"since": rfc3339(v.since), "until": rfc3339(v.until), "message": v.message,
                   "outcomes": [o.value for o in v.outcomes], "recent": [o.value for o in recent]}
            for pool, (v, recent) in sorted(unhealthy.items())}


def debug_document(*, dry_run: bool, passes: int, last_pass: float | None, plans: Mapping[str, dict[str, Any]],
                   scale_downs: list[dict[str, Any]], backed_off: Mapping[str, PoolBackoff],
                   states: Mapping[str, RequestState], unhealthy: UnhealthyPools | None = None) -> dict[str, Any]:
    """What ``GET /debug/plans`` shows: the latest decisions, recent scale-downs, every request's phase."""
    return {
        "dryRun": dry_run,
        "passes": passes,
        "lastPass": rfc3339(last_pass) if last_pass is not None else None,
        "decisions": [plans[key] for key in sorted(plans) if key in states],
        "scaleDowns": scale_downs,
        "backedOffPools": backed_off_json(backed_off),
        "unhealthyPools": unhealthy_json(unhealthy or {}),
        "requests": [{"request": st.key, "class": st.request.class_name, "phase": phase(st).value,
                      "conditions": {t: f"{c.status}/{c.reason}: {c.message}" for t, c in st.conditions.items()},
                      "retryAt": rfc3339(st.retry_at) if st.retry_at else None}
                     for st in sorted(states.values(), key=lambda s: s.key)],
    }


def explain_document(st: RequestState, view: ClusterView, settings: Settings, now: float, *, passes: int,
                     last_pass: float | None, decided_at: str | None,
                     backed_off: Mapping[str, PoolBackoff], unhealthy: UnhealthyPools | None = None) -> dict[str, Any]:
    """What ``GET /debug/plans?pr=`` shows: the request's document (:func:`request_document`) and the controller's
    state around it."""
    return {"dryRun": settings.dry_run, "passes": passes,
            "lastPass": rfc3339(last_pass) if last_pass is not None else None,
            **request_document(st, view, settings, now, decided_at),
            "backedOffPools": backed_off_json(backed_off), "unhealthyPools": unhealthy_json(unhealthy or {})}


def request_document(st: RequestState, view: ClusterView, settings: Settings, now: float,
                     decided_at: str | None) -> dict[str, Any]:
    """One request as ``gangscale explain`` reads it: phase, conditions, the latest decision (``decided_at``: when),
    the scale-up in flight, the booking."""
    decision = decision_json(st.decision) if st.decision is not None else None
    if decision is not None:
        decision["at"] = decided_at
    return {
        "request": st.key, "class": st.request.class_name, "phase": phase(st).value,
        "conditions": [st.conditions[t].to_json() for t in C.OWNED_TYPES if t in st.conditions],
        "retryAt": rfc3339(st.retry_at) if st.retry_at else None,
        "decision": decision, "scaleUp": _scale_up_json(st, view), "booking": _booking_json(st, view, settings, now),
    }


def decision_json(d: Decision) -> dict[str, Any]:
    return {
        "outcome": d.outcome.value, "summary": summarize(d), "zone": d.zone,
        "steps": [{"pool": s.pool, "units": s.units, "nodes": s.nodes} for s in d.steps],
        "placements": [{"podSet": p.pod_set, "node": p.node, "count": p.count}
                       for p in d.placements[:MAX_PLACEMENTS]],
        "reasons": [reason_json(r) for r in d.reasons],
    }


def reason_json(reason: PoolReason) -> dict[str, Any]:
    return {"pool": reason.pool, "code": reason.code.value, "message": reason.message,
            "hint": _hint_json(reason.hint) if reason.hint is not None else None}


def _hint_json(hint: Hint) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if hint.until is not None:
        out["until"] = rfc3339(hint.until)
    if hint.needed is not None or hint.allowed is not None:
        out.update(needed=hint.needed, allowed=hint.allowed, of=hint.of)
    if hint.taint is not None:
        out["taint"] = {"key": hint.taint.key, "value": hint.taint.value, "effect": hint.taint.effect}
    if hint.pod_set:
        out["podSet"] = hint.pod_set
    if hint.fits is not None:
        out["fits"] = hint.fits
    return out


def _scale_up_json(st: RequestState, view: ClusterView) -> dict[str, Any] | None:
    record = st.record
    if record is None:
        return None
    nodes = sorted({name for token in record.tokens for name in view.nodes_of(token)})
    return {"attempt": record.attempt, "phase": record.phase, "deadline": rfc3339(record.deadline),
            "steps": [{"pool": step.pool, "units": step.units} for step in record.steps],
            "nodes": nodes, "ready": sum(1 for name in nodes if view.ready(name))}


def _booking_json(st: RequestState, view: ClusterView, settings: Settings, now: float) -> dict[str, Any] | None:
    if phase(st) is not Phase.BOOKED:
        return None
    until = deadline(st, settings, now)
    nodes = []
    for name in sorted(st.booking or ()):
        info = view.nodes.get(name)
        nodes.append({"node": name, "pool": info.pool if info else None, "unit": info.unit if info else None})
    return {"until": rfc3339(until) if until is not None else None, "nodes": nodes}
