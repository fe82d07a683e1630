"""What a demo run shows: the timeline, a table per workload, totals, and the JSON form of all three.

**Accelerator-hours lost to partial gangs** (the figure gangscale exists to drive to zero): for every pod of
a workload that started running before the workload's last pod did, its accelerators (GPUs, TPU chips)
times the time it ran alone — until every pod of the gang ran, or until it was stopped (preemption,
eviction, or the end of the run). A gang's pods are useless until all of them run (JAX, NCCL and Ray
training wait for every host), so that time is paid for and wasted.

**Accelerator-hours billed**: for every node of a managed pool, its accelerators times the time from its
creation until it was deleted (or the run ended) — what the cloud charges, idle or not.

**By tier, and the cost** (:func:`billing`): the same hours split by the capacity tier of each node's pool (the
scenario's ``capacityType``), and the cost of every node (accelerators or not) at its pool's
``pricePerUnitHour``: node-hours * price / ``nodesPerUnit``. Assumed: a node of no scenario pool is on-demand and
has no price; a pool without a price (not in the price catalog, none given) costs nothing, and the output names
it as left out of the cost rather than guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gangscale.model.nodepool import NodePool
from gangscale.model.tiers import CAPACITY_TYPES, ON_DEMAND
from gangscale.sim.observer import NodeLife
from gangscale.sim.runner import RunResult
from gangscale.sim.world import (
    ADMITTED,
    ARRIVED,
    CHECK,
    DEACTIVATED,
    EVICTED,
    FINISHED,
    POD_STARTED,
    PREEMPTED,
    PROVISIONED,
    QUOTA_RESERVED,
    RUNNING,
    Entry,
)

JSON = dict[str, Any]

#: Kinds left out of the printed timeline (one line per pod would drown the rest); they stay in the JSON.
QUIET_KINDS = frozenset({POD_STARTED, CHECK})
_STOPS = (PREEMPTED, EVICTED, DEACTIVATED)


@dataclass(frozen=True)
class WorkloadRow:
    subject: str
    arrived: float | None
    quota: float | None
    provisioned: float | None
    admitted: float | None
    running: float | None
    finished: float | None
    preemptions: int
    nodes: int
    lost_accelerator_hours: float
    #: The capacity tiers of the nodes its pods ran on, first used first: two for a gang split across tiers.
    tiers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Billing:
    """What a run's nodes were billed, by capacity tier, and what they cost (see the module docstring)."""

    #: Accelerator-hours per tier that had a node, in :data:`~gangscale.model.tiers.CAPACITY_TYPES` order.
    accelerator_hours: dict[str, float] = field(default_factory=dict)
    cost: float = 0.0
    #: Pools whose nodes ran without a price: their node-hours are not in ``cost``.
    unpriced: tuple[str, ...] = ()


@dataclass(frozen=True)
class Totals:
    mode: str
    finished: int
    workloads: int
    makespan: float | None
    nodes_created: int
    billed_accelerator_hours: float
    lost_accelerator_hours: float
    #: ``billed_accelerator_hours`` split by the tier of each node's pool (the parts add up to it).
    billed_accelerator_hours_by_tier: dict[str, float] = field(default_factory=dict)
    #: Every node's hours at its pool's price per unit-hour (see :func:`billing`).
    cost: float = 0.0
    #: Pools left out of ``cost`` for want of a price.
    unpriced_pools: tuple[str, ...] = ()


def pools_by_name(result: RunResult) -> dict[str, NodePool]:
    """The scenario's pools, resolved as ``gangscale run`` resolves a pool file (tiers and default prices)."""
    return {pool.name: pool for pool in result.scenario.pools()}


def tier_of(pool: str, pools: Mapping[str, NodePool]) -> str:
    """The capacity tier of a node of ``pool``; a node of no scenario pool counts as on-demand."""
    known = pools.get(pool)
    return known.capacity_type if known is not None else ON_DEMAND


def billing(nodes: Iterable[NodeLife], pools: Mapping[str, NodePool], end: float) -> Billing:
    """Accelerator-hours by tier and the cost of ``nodes``, each billed from its creation until it was deleted or
    ``end`` (the end of the run). Pure: plain node records and pools in, figures out."""
    hours: dict[str, float] = {}
    cost = 0.0
    unpriced: set[str] = set()
    for node in nodes:
        alive = ((node.gone if node.gone is not None else end) - node.created) / 3600.0
        tier = tier_of(node.pool, pools)
        hours[tier] = hours.get(tier, 0.0) + node.accelerators * alive
        pool = pools.get(node.pool)
        if pool is None or pool.price_per_unit_hour is None:
            unpriced.add(node.pool)
            continue
        cost += alive * pool.price_per_unit_hour / pool.nodes_per_unit
    ordered = {tier: hours[tier] for tier in CAPACITY_TYPES if tier in hours}
    return Billing(ordered, cost, tuple(sorted(unpriced)))


def workload_tiers(result: RunResult, subject: str, pools: Mapping[str, NodePool]) -> tuple[str, ...]:
    """The tiers the subject's pods ran on, in the order its pods first started on each (a node the observer did
    not see, outside every managed pool, counts as on-demand)."""
    seen: list[str] = []
    for e in result.timeline.of(POD_STARTED, subject):
        node = result.nodes.get(str(e.data.get("node")))
        tier = tier_of(node.pool, pools) if node is not None else ON_DEMAND
        if tier not in seen:
            seen.append(tier)
    return tuple(seen)


def tiers_text(hours: Mapping[str, float]) -> str:
    """``on-demand 23.47, spot 5.87``: accelerator-hours per tier."""
    return ", ".join(f"{tier} {value:.2f}" for tier, value in hours.items()) or "-"


def cost_text(t: Totals) -> str:
    """``cost 1,234.56`` and, when some pool has no price, which pools the figure leaves out."""
    text = f"cost {t.cost:,.2f}"
    if t.unpriced_pools:
        text += f" (excludes {', '.join(t.unpriced_pools)}: no price)"
    return text


def lost_hours(entries: Iterable[Entry], subject: str, end: float) -> float:
    """Accelerator-hours the subject's pods ran while the rest of their gang had not started."""
    mine = [e for e in entries if e.subject == subject]
    lost = 0.0
    for i, e in enumerate(mine):
        if e.kind != POD_STARTED:
            continue
        stop = next((later.at for later in mine[i + 1:] if later.kind in (RUNNING, *_STOPS)), end)
        lost += float(e.data.get("accelerators", 0)) * max(0.0, stop - e.at)
    return lost / 3600.0


def rows(result: RunResult) -> list[WorkloadRow]:
    tl = result.timeline
    pools = pools_by_name(result)
    out = []
    for subject in result.workloads:
        nodes = {e.data.get("node") for e in tl.of(POD_STARTED, subject)}
        out.append(WorkloadRow(
            subject=subject, arrived=_rel(tl.first(ARRIVED, subject), result),
            quota=_rel(tl.first(QUOTA_RESERVED, subject), result),
            provisioned=_rel(_last(tl.of(PROVISIONED, subject)), result),
            admitted=_rel(_last(tl.of(ADMITTED, subject)), result),
            running=_rel(_last(tl.of(RUNNING, subject)), result),
            finished=_rel(tl.first(FINISHED, subject), result),
            preemptions=len(tl.of(PREEMPTED, subject)), nodes=len(nodes - {None}),
            lost_accelerator_hours=lost_hours(tl.entries, subject, result.end),
            tiers=workload_tiers(result, subject, pools)))
    return out


def totals(result: RunResult, table: list[WorkloadRow]) -> Totals:
    billed = sum(n.accelerators * ((n.gone if n.gone is not None else result.end) - n.created)
                 for n in result.nodes.values()) / 3600.0
    bill = billing(result.nodes.values(), pools_by_name(result), result.end)
    finished = [r.finished for r in table if r.finished is not None]
    return Totals(mode=result.mode, finished=len(finished), workloads=len(table),
                  makespan=max(finished) if len(finished) == len(table) and finished else None,
                  nodes_created=len(result.nodes), billed_accelerator_hours=billed,
                  lost_accelerator_hours=sum(r.lost_accelerator_hours for r in table),
                  billed_accelerator_hours_by_tier=bill.accelerator_hours, cost=bill.cost,
                  unpriced_pools=bill.unpriced)


def _rel(at: float | None, result: RunResult) -> float | None:
    return None if at is None else at - result.start


def _last(entries: list[Entry]) -> float | None:
    return entries[-1].at if entries else None


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def render_timeline(result: RunResult, width: int = 200) -> str:
    """One line per entry; texts longer than ``width`` are cut (the JSON keeps them whole)."""
    lines = [f"Timeline ({result.mode}) — scenario {result.scenario.name}"]
    for e in result.timeline.entries:
        if e.kind in QUIET_KINDS:
            continue
        who = e.subject.split("/", 1)[-1]
        text = e.text if len(e.text) <= width else e.text[:width - 1] + "…"
        lines.append(f"  +{clock(e.at - result.start):>8}  {e.kind:<11} {who:<22} {text}")
    return "\n".join(lines)


def render_table(result: RunResult) -> str:
    table = rows(result)
    header = ("workload", "arrived", "quota", "provisioned", "admitted", "running", "finished", "preempted",
              "nodes", "tiers", "lost acc-h")
    body = [(r.subject.split("/", 1)[-1], clock(r.arrived), clock(r.quota), clock(r.provisioned),
             clock(r.admitted), clock(r.running), clock(r.finished), str(r.preemptions), str(r.nodes),
             "+".join(r.tiers) or "-", f"{r.lost_accelerator_hours:.2f}") for r in table]
    t = totals(result, table)
    out = [_grid(header, body), "",
           f"  {t.finished}/{t.workloads} workloads finished; makespan {clock(t.makespan)}; "
           f"{t.nodes_created} nodes created; accelerator-hours billed {t.billed_accelerator_hours:.2f} "
           f"({tiers_text(t.billed_accelerator_hours_by_tier)}), "
           f"lost to partial gangs {t.lost_accelerator_hours:.2f}; {cost_text(t)}"]
    if result.unsettled:
        out.append(f"  warning: {result.unsettled} instants did not settle (an emulator kept writing)")
    return "\n".join(out)


def render_comparison(results: list[RunResult]) -> str:
    header = ("policy", "finished", "makespan", "nodes created", "acc-h billed", "acc-h lost to partial gangs",
              "acc-h by tier", "cost")
    body = []
    unpriced: set[str] = set()
    for result in results:
        t = totals(result, rows(result))
        unpriced.update(t.unpriced_pools)
        body.append((t.mode, f"{t.finished}/{t.workloads}", clock(t.makespan), str(t.nodes_created),
                     f"{t.billed_accelerator_hours:.2f}", f"{t.lost_accelerator_hours:.2f}",
                     tiers_text(t.billed_accelerator_hours_by_tier), f"{t.cost:,.2f}"))
    note = f"\n  cost excludes {', '.join(sorted(unpriced))}: no price" if unpriced else ""
    return "Side by side\n" + _grid(header, body) + note


def _grid(header: tuple[str, ...], body: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths)),
                      *(fmt.format(*row) for row in body)])


def to_json(result: RunResult) -> JSON:
    table = rows(result)
    pools = pools_by_name(result)
    return {
        "scenario": result.scenario.name, "mode": result.mode, "simulatedSeconds": result.end - result.start,
        "totals": asdict(totals(result, table)), "workloads": [asdict(r) for r in table],
        "timeline": [{"at": e.at - result.start, "kind": e.kind, "subject": e.subject, "text": e.text,
                      "data": e.data} for e in result.timeline.entries],
        "nodes": [{"name": n.name, "pool": n.pool, "tier": tier_of(n.pool, pools), "unit": n.unit,
                   "accelerators": n.accelerators,
                   "created": n.created - result.start,
                   "ready": None if n.ready is None else n.ready - result.start,
                   "deleted": None if n.gone is None else n.gone - result.start}
                  for n in result.nodes.values()],
        "unsettledInstants": result.unsettled,
    }
