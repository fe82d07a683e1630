"""Decisions in words: one line for conditions and events, a few lines for ``explain`` and the demo."""

from __future__ import annotations

from gangscale.model.decision import Decision, Outcome, PoolReason
from gangscale.model.quantity import format_quantity
from gangscale.model.resources import CPU

#: Existing nodes listed by name in :func:`explain` before the rest are counted.
MAX_LISTED_NODES = 10


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _zone(decision: Decision) -> str:
    return f" in zone {decision.zone}" if decision.zone else ""


def _reason(reason: PoolReason) -> str:
    tier = f"{reason.tier} " if reason.tier else ""
    if reason.pool:
        return f"{tier}pool {reason.pool}: {reason.message}"
    return f"{reason.tier}: {reason.message}" if reason.tier else reason.message


def _tier(decision: Decision) -> str:
    return f" on {decision.tier} capacity" if decision.tier else ""


def _existing(decision: Decision) -> tuple[int, int]:
    return sum(p.count for p in decision.placements), len({p.node for p in decision.placements})


def summarize(decision: Decision) -> str:
    """One sentence: what was decided and, for an infeasible gang, the reasons."""
    pods, nodes = _existing(decision)
    match decision.outcome:
        case Outcome.FITS if not decision.placements:
            return "nothing to place: the gang has no pods"
        case Outcome.FITS:
            where = f"{_plural(nodes, 'existing node')}{_zone(decision)}"
            return f"fits on free capacity: {_plural(pods, 'pod')} on {where}{_tier(decision)}"
        case Outcome.SCALE_UP:
            steps = ", ".join(
                f"{step.pool} +{_plural(step.units, 'unit')}" + (f" ({step.nodes} nodes)" if step.nodes != step.units
                                                                  else "")
                for step in decision.steps)
            existing = f"; {_plural(pods, 'pod')} on {_plural(nodes, 'existing node')}" if pods else ""
            return f"scale up {steps}{_zone(decision)}{_tier(decision)}{existing}"
        case Outcome.INFEASIBLE:
            return "cannot place every pod: " + "; ".join(_reason(reason) for reason in decision.reasons)
    raise AssertionError(decision.outcome)  # pragma: no cover - the match is exhaustive


def explain(decision: Decision) -> str:
    """A few lines for a person: the outcome, where each pod set goes, the cost, or every reason."""
    lines = [f"{decision.gang}: {decision.outcome.value} — {summarize(decision)}"]
    if decision.steps:
        lines.append("  new nodes:")
        for group in decision.new_nodes:
            pods = ", ".join(f"{count} x {name}" for name, count in group.pods) or "nothing (rest of the unit)"
            lines.append(f"    {_plural(group.nodes, 'node')} of {group.pool}, each with {pods}")
        cost = decision.cost
        lines.append(f"  cost: {cost.accelerator_waste} accelerators and {format_quantity(CPU, cost.cpu_waste)} "
                     f"CPU unused on new nodes, {cost.price:g}/h, {_plural(cost.nodes, 'new node')}")
    if decision.placements:
        lines.append("  on existing nodes:")
        for placement in decision.placements[:MAX_LISTED_NODES]:
            lines.append(f"    {placement.node}: {placement.count} x {placement.pod_set}")
        if len(decision.placements) > MAX_LISTED_NODES:
            lines.append(f"    … and {len(decision.placements) - MAX_LISTED_NODES} more")
    if decision.reasons:
        lines.append("  reasons:")
        lines.extend(f"    [{reason.code.value}] {_reason(reason)}" for reason in decision.reasons)
    return "\n".join(lines)
