"""A request's document (``/debug/plans?pr=``, or ``gangscale explain --offline``) in words a person can act on.

For each pool that could not take the gang: why, and what would change it (a backoff's end, the units maxUnits or
the quota would have to allow, the toleration to add, the request a node can hold, a smaller count that fits).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from gangscale.model.quantity import humanize

JSON = Mapping[str, Any]


def render(doc: JSON) -> str:
    """The whole explanation, one line per fact, ending with a newline."""
    lines = [f"{doc['request']} ({doc.get('class') or '?'}): {doc['phase']}"]
    if doc.get("source") == "offline":
        lines.append(f"  (read from the cluster at {doc.get('at')}; pool backoffs and stockouts the controller learnt "
                     "are not known offline)")
    summary = (doc.get("decision") or {}).get("summary") or "\0"
    for cond in doc.get("conditions") or ():
        if cond.get("type") != "Accepted":
            # A message that repeats the decision is said once, with the decision below.
            message = "" if cond["message"].startswith(summary) else f": {cond['message']}"
            lines.append(f"  {cond['type']}={cond['status']} {cond['reason']}{message}")
    if doc.get("problem"):
        lines.append(f"  its pods cannot be built: {doc['problem']}")
    lines += _booking(doc.get("booking")) + _scale_up(doc.get("scaleUp"))
    if doc.get("booking") is None:
        lines += _decision(doc.get("decision"), doc.get("retryAt"))
    lines += _backed_off(doc)
    return "\n".join(lines) + "\n"


def _booking(booking: JSON | None) -> list[str]:
    if booking is None:
        return []
    nodes = booking.get("nodes") or []
    by_pool: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for node in nodes:
        by_pool[node.get("pool") or "(no pool)"][node.get("unit") or node["node"]].append(node["node"])
    lines = [f"  provisioned: capacity booked until {booking.get('until')} (or until every pod is scheduled) on "
             f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}"]
    for pool, units in sorted(by_pool.items()):
        for unit, names in sorted(units.items()):
            lines.append(f"    pool {pool}, unit {unit}: {', '.join(sorted(names))}")
    return lines


def _scale_up(record: JSON | None) -> list[str]:
    if record is None:
        return []
    steps = ", ".join(f"{s['pool']} +{s['units']} unit{'s' if s['units'] != 1 else ''}" for s in record["steps"])
    nodes = record.get("nodes") or []
    return [f"  scale-up (attempt {record['attempt']}, {record['phase']}): {steps}; {len(nodes)} node(s) registered, "
            f"{record.get('ready', 0)} Ready; given up at {record['deadline']}"]


def _decision(decision: JSON | None, retry_at: str | None) -> list[str]:
    if decision is None:
        return ["  no decision yet: the request has not been planned (its templates may still be looked up)"]
    said = "per pool and for the gang:" if decision["outcome"] == "Infeasible" else decision["summary"]
    lines = [f"  decision at {decision.get('at') or '?'}: {decision['outcome']}: {said}"]
    for reason in decision.get("reasons") or ():
        where = f"pool {reason['pool']}" if reason["pool"] else "the gang"
        lines.append(f"  - {where} [{reason['code']}]: {reason['message']}")
        hint = hint_text(reason)
        if hint:
            lines.append(f"      what would change it: {hint}")
    if decision["outcome"] == "Infeasible" and retry_at:
        lines.append(f"  next attempt at {retry_at}")
    return lines


def _backed_off(doc: JSON) -> list[str]:
    """Backed-off pools the decision does not name already; unhealthy pools with their recent scale-ups."""
    named = {reason["pool"] for reason in (doc.get("decision") or {}).get("reasons") or ()}
    pools = doc.get("backedOffPools") or {}
    unhealthy = doc.get("unhealthyPools") or {}
    lines = [f"  pool {pool} is backed off until {b['until']} after {b['reason']}"
             for pool, b in sorted(pools.items()) if pool not in named and pool not in unhealthy]
    for _, u in sorted(unhealthy.items()):
        lines.append(f"  {u['message']}")
        recent = ", ".join(u.get("recent") or ()) or "none"
        lines.append(f"      its last scale-ups, oldest first: {recent}; it is tried afresh once the cooldown ends")
    return lines


def hint_text(reason: JSON) -> str | None:
    """What would let the gang past ``reason``, from its structured hint; None when there is nothing to add."""
    hint: JSON = reason.get("hint") or {}
    code, pool = reason["code"], reason["pool"]
    smaller = (f"; or a smaller gang: pod set {hint['podSet']!r} fits with count ≤ {hint['fits']}"
               if hint.get("fits") else "")
    match code:
        case "BackedOff" if hint.get("allowed") is not None:
            return (f"after a stockout the cloud is taken to have {hint['allowed']} more unit(s), {hint['needed']} "
                    f"needed, until {hint.get('until')}: wait until then{smaller}")
        case "BackedOff":
            return (f"wait until {hint.get('until')}, when gangscale tries pool {pool} again (another pool that fits "
                    "is used meanwhile)")
        case "MaxUnits":
            more = hint["needed"] - hint["allowed"]
            return (f"maxUnits leaves {hint['allowed']} more unit(s), {hint['needed']} needed: raise maxUnits of "
                    f"pool {pool} by {more}, or wait for units in use to be released{smaller}")
        case "Quota":
            return (f"the quota leaves {hint['allowed']} {hint['of']}, {hint['needed']} needed: raise the quota"
                    f"{smaller}")
        case "Taint" if hint.get("taint"):
            return (f"add to the pod template of pod set {hint.get('podSet')!r} the toleration "
                    f"{toleration(hint['taint'])}")
        case "PodTooLarge" if hint.get("of"):
            of = hint["of"]
            return (f"one pod asks for {humanize(of, hint['needed'])} {of} and a node of pool {pool} has "
                    f"{humanize(of, hint['allowed'])}: ask for at most that per pod (more, smaller pods), or add a "
                    "pool of bigger machines")
        case "NodeSelector" | "NodeAffinity":
            return (f"make the nodeSelector/affinity of pod set {hint.get('podSet')!r} match the labels of pool "
                    f"{pool}'s nodes, or give a pool the labels it asks for")
        case "Capacity" | "Zone" if hint.get("fits"):
            return f"pod set {hint['podSet']!r} fits with count ≤ {hint['fits']} now; or wait for capacity"
    return None


def toleration(taint: JSON) -> str:
    """The toleration, as YAML flow, that admits pods past ``taint``."""
    if taint.get("value"):
        return f"{{key: {taint['key']}, operator: Equal, value: \"{taint['value']}\", effect: {taint['effect']}}}"
    return f"{{key: {taint['key']}, operator: Exists, effect: {taint['effect']}}}"
