"""Kueue's scheduler decisions for one ClusterQueue, as pure functions of parsed objects.

- **Order** (:func:`queue_order`): priority first (higher first), then the queue-order time: the creation
  time, or the time of an eviction by an admission check (such a Workload goes to the back of its priority).
- **Requests** (:func:`pod_set_totals`): per pod set, the pods' effective requests (limits where requests are
  missing) times ``count``; ``pods`` counts the pods only when the ClusterQueue covers ``pods``; zero
  requests are dropped, so a resource requested at 0 needs no quota.
- **Flavors** (:func:`assign_flavors`): per pod set and resource group, the first flavor (in the order the
  ClusterQueue lists them) that the pod set's node selector / required node affinity matches (only label
  keys the group's flavors define are compared, as Kueue does), whose blocking taints the pod set tolerates,
  and where every resource of the group fits ``nominalQuota - usage`` (usage includes earlier pod sets of the
  same Workload). When no flavor fits, the first flavor whose nominal quota could hold the request is kept
  for preemption. A resource no group covers makes the Workload inadmissible. Messages are Kueue's.
- **Preemption** (:func:`preemption_targets`): ``withinClusterQueue`` ``LowerPriority`` (strictly lower
  priority) or ``LowerOrNewerEqualPriority`` (also equal priority, queued later). Candidates are reserving
  Workloads that hold a flavor/resource the preemptor lacks, lowest priority first, most recently reserved
  first among equals; they are removed in that order until the preemptor fits, then each but the last is put
  back if the preemptor still fits without evicting it — the fewest, lowest-priority victims.
- **Plan** (:func:`plan_queue`): walk the pending Workloads in order; reserve those that fit; a head that
  does not fit may preempt (the queue then stops for this round: the victims' quota is released and the
  preemptor is reserved next round); otherwise it gets a ``Pending`` message and, under ``StrictFIFO``,
  blocks everything behind it (a namespace mismatch does not block, as upstream, nor does a Workload whose
  pod sets cannot be read).

Simplified: no cohorts, so no borrowing, lending or reclaiming and no fair sharing; no partial admission,
no topology-aware scheduling, no flavor fungibility knobs (always try the next flavor), no ``stopPolicy``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from gangscale.model.quantity import format_quantity
from gangscale.model.resources import PODS, ResourceList
from gangscale.model.scheduling import NodeAffinity, NodeSelectorTerm, untolerated
from gangscale.sim.kueue.objects import (
    EVICTED,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    LOWER_PRIORITY,
    NAMESPACE_MISMATCH,
    QUOTA_RESERVED,
    REASON_ADMISSION_CHECK,
    STRICT_FIFO,
    ClusterQueue,
    Flavor,
    ResourceGroup,
)
from gangscale.sim.kueue.workload import PodSet, Workload

FlavorResource = tuple[str, str]
Usage = dict[FlavorResource, int]


class Mode(IntEnum):
    """How a flavor can take a request, worst first (Kueue's FlavorAssignmentMode)."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


def queue_time(wl: Workload) -> float:
    """The time a pending Workload queues by: its eviction by an admission check, else its creation."""
    evicted = wl.conditions.get(EVICTED) or {}
    if evicted.get("status") == "True" and evicted.get("reason") == REASON_ADMISSION_CHECK:
        return wl.transition_of(EVICTED) or wl.created
    return wl.created


def queue_order(workloads: Iterable[Workload]) -> list[Workload]:
    return sorted(workloads, key=lambda w: (-w.priority, queue_time(w), w.created, w.namespace, w.name))


def pod_set_totals(ps: PodSet, cq: ClusterQueue) -> ResourceList:
    total = dict(ps.requests.scaled(ps.count))
    if cq.group_for(PODS) is not None:
        total[PODS] = ps.count
    return ResourceList(total)


def cluster_queue_usage(workloads: Iterable[Workload], cq_name: str) -> Usage:
    """What the Workloads reserving in ``cq_name`` hold; finished ones hold nothing."""
    usage: Usage = {}
    for wl in workloads:
        if wl.reserved and not wl.finished and wl.reserved_in == cq_name:
            add_usage(usage, wl.usage())
    return usage


def add_usage(usage: Usage, more: Mapping[FlavorResource, int], sign: int = 1) -> None:
    for fr, amount in more.items():
        usage[fr] = usage.get(fr, 0) + sign * amount


# --- flavor assignment ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodSetAssignment:
    name: str
    count: int
    flavors: Mapping[str, str]   # resource -> flavor
    usage: ResourceList          # resource -> total amount

    def to_api(self) -> dict[str, object]:
        return {"name": self.name, "count": self.count, "flavors": dict(sorted(self.flavors.items())),
                "resourceUsage": {r: format_quantity(r, v) for r, v in self.usage.items()}}


@dataclass(frozen=True)
class Assignment:
    pod_sets: tuple[PodSetAssignment, ...]
    mode: Mode
    message: str = ""

    @property
    def fits(self) -> bool:
        return self.mode == Mode.FIT

    def usage(self) -> Usage:
        out: Usage = {}
        for psa in self.pod_sets:
            for resource, amount in psa.usage.items():
                fr = (psa.flavors[resource], resource)
                out[fr] = out.get(fr, 0) + amount
        return out

    @property
    def flavors(self) -> set[str]:
        return {f for psa in self.pod_sets for f in psa.flavors.values()}

    def to_api(self) -> list[dict[str, object]]:
        return [psa.to_api() for psa in self.pod_sets]


def _filtered_affinity(affinity: NodeAffinity | None, keys: set[str]) -> NodeAffinity | None:
    """Required node affinity reduced to the label keys the group's flavors define (Kueue's flavorSelector)."""
    if affinity is None:
        return None
    terms = []
    for term in affinity.terms:
        expressions = tuple(r for r in term.expressions if r.key in keys)
        if not expressions:
            return None  # an OR-ed term with no relevant key matches every flavor
        terms.append(NodeSelectorTerm(expressions))
    return NodeAffinity(tuple(terms)) if terms else None


def _placement_problem(ps: PodSet, flavor: Flavor, label_keys: set[str]) -> str | None:
    taint = untolerated(flavor.node_taints, (*ps.tolerations, *flavor.tolerations))
    if taint is not None:
        return f"untolerated taint {taint} in flavor {flavor.name}"
    selector_ok = all(flavor.node_labels.get(k) == v for k, v in ps.node_selector.items() if k in label_keys)
    affinity = _filtered_affinity(ps.affinity, label_keys)
    if not selector_ok or (affinity is not None and not affinity.matches(flavor.node_labels, None)):
        return f"flavor {flavor.name} doesn't match node affinity"
    return None


def _quota_mode(cq: ClusterQueue, flavor: str, resource: str, amount: int, usage: Usage,
                reasons: list[str]) -> Mode:
    nominal = cq.nominal(flavor, resource)
    available = nominal - usage.get((flavor, resource), 0)
    if amount > nominal:
        reasons.append(f"insufficient quota for {resource} in flavor {flavor}, request > maximum capacity "
                       f"({format_quantity(resource, amount)} > {format_quantity(resource, nominal)})")
        return Mode.NO_FIT
    if amount <= available:
        return Mode.FIT
    reasons.append(f"insufficient unused quota for {resource} in flavor {flavor}, "
                   f"{format_quantity(resource, amount - available)} more needed")
    return Mode.PREEMPT


def _pick_flavor(cq: ClusterQueue, group: ResourceGroup, flavors: Mapping[str, Flavor], ps: PodSet,
                 needs: Mapping[str, int], usage: Usage, reasons: list[str]) -> tuple[str | None, Mode]:
    label_keys = {k for q in group.flavors if q.name in flavors for k in flavors[q.name].node_labels}
    best: tuple[str | None, Mode] = (None, Mode.NO_FIT)
    for quotas in group.flavors:
        flavor = flavors.get(quotas.name)
        if flavor is None:
            reasons.append(f"flavor {quotas.name} not found")
            continue
        problem = _placement_problem(ps, flavor, label_keys)
        if problem:
            reasons.append(problem)
            continue
        mode = Mode.FIT
        for resource, amount in needs.items():
            mode = min(mode, _quota_mode(cq, quotas.name, resource, amount, usage, reasons))
            if mode == Mode.NO_FIT:
                break
        if mode == Mode.FIT:
            return quotas.name, mode
        if mode > best[1]:
            best = (quotas.name, mode)
    return best


def assign_flavors(cq: ClusterQueue, flavors: Mapping[str, Flavor], wl: Workload, usage: Usage) -> Assignment:
    """Flavors for every pod set of ``wl`` given the ClusterQueue's ``usage`` (see the module docstring)."""
    own: Usage = {}  # what earlier pod sets of this Workload take
    done: list[PodSetAssignment] = []
    worst = Mode.FIT
    messages: list[str] = []
    for ps in wl.pod_sets:
        totals = pod_set_totals(ps, cq)
        chosen: dict[str, str] = {}
        reasons: list[str] = []
        ps_mode = Mode.FIT
        for resource in totals:
            if resource in chosen:
                continue
            group = cq.group_for(resource)
            if group is None:
                msg = f"couldn't assign flavors to pod set {ps.name}: resource {resource} unavailable in ClusterQueue"
                return Assignment(tuple(done), Mode.NO_FIT, "; ".join([*messages, msg]))
            needs = {r: v for r, v in totals.items() if r in group.covered}
            seen = {fr: usage.get(fr, 0) + own.get(fr, 0) for fr in {*usage, *own}}
            tried: list[str] = []
            name, mode = _pick_flavor(cq, group, flavors, ps, needs, seen, tried)
            if name is None:
                msg = f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(tried))}"
                return Assignment(tuple(done), Mode.NO_FIT, "; ".join([*messages, msg]))
            if mode != Mode.FIT:
                reasons.extend(tried)
            ps_mode = min(ps_mode, mode)
            chosen.update(dict.fromkeys(needs, name))
        if ps_mode != Mode.FIT:
            messages.append(f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(reasons))}")
        worst = min(worst, ps_mode)
        psa = PodSetAssignment(ps.name, ps.count, chosen, totals)
        done.append(psa)
        add_usage(own, Assignment((psa,), Mode.FIT).usage())
    return Assignment(tuple(done), worst, "; ".join(messages))


# --- preemption -----------------------------------------------------------------------------------------------

def _fits(cq: ClusterQueue, needed: Mapping[FlavorResource, int], usage: Usage) -> bool:
    return all(amount + usage.get(fr, 0) <= cq.nominal(*fr) for fr, amount in needed.items())


def _may_preempt(cq: ClusterQueue, preemptor: Workload, candidate: Workload) -> bool:
    if candidate.priority < preemptor.priority:
        return cq.within_cluster_queue in (LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY)
    return (cq.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY and candidate.priority == preemptor.priority
            and queue_time(candidate) > queue_time(preemptor))


def preemption_targets(cq: ClusterQueue, preemptor: Workload, assignment: Assignment,
                       reserving: Sequence[Workload], usage: Usage) -> list[Workload]:
    """The Workloads to evict so that ``assignment`` fits, or ``[]`` when no allowed set of victims is enough."""
    needed = assignment.usage()
    short = {fr for fr, amount in needed.items() if amount + usage.get(fr, 0) > cq.nominal(*fr)}
    candidates = [w for w in reserving if w.key != preemptor.key and not w.finished and w.reserved_in == cq.name
                  and short & set(w.usage()) and _may_preempt(cq, preemptor, w)]
    candidates.sort(key=lambda w: (w.priority, -(w.transition_of(QUOTA_RESERVED) or w.created), w.key))
    remaining = dict(usage)
    targets: list[Workload] = []
    for candidate in candidates:
        add_usage(remaining, candidate.usage(), -1)
        targets.append(candidate)
        if _fits(cq, needed, remaining):
            break
    else:
        return []
    # Put back every victim but the last whose eviction turns out not to be needed.
    for candidate in reversed(targets[:-1]):
        add_usage(remaining, candidate.usage())
        if _fits(cq, needed, remaining):
            targets.remove(candidate)
        else:
            add_usage(remaining, candidate.usage(), -1)
    return targets


# --- one ClusterQueue's round -----------------------------------------------------------------------------------

@dataclass
class QueuePlan:
    reserve: list[tuple[Workload, Assignment]] = field(default_factory=list)
    #: (victim, preemptor)
    preempt: list[tuple[Workload, Workload]] = field(default_factory=list)
    #: Workload key -> why it waits (Kueue's QuotaReserved=False/Pending message).
    pending: dict[str, str] = field(default_factory=dict)


def plan_queue(cq: ClusterQueue, flavors: Mapping[str, Flavor], pending: Iterable[Workload],
               reserving: Sequence[Workload], namespace_labels: Mapping[str, Mapping[str, str]]) -> QueuePlan:
    """What the scheduler does in ``cq`` this round; ``pending`` are Workloads eligible for quota now."""
    plan = QueuePlan()
    usage = cluster_queue_usage(reserving, cq.name)
    for wl in queue_order(pending):
        labels = namespace_labels.get(wl.namespace) or {"kubernetes.io/metadata.name": wl.namespace}
        if cq.namespace_selector is None or not cq.namespace_selector.matches(labels):
            plan.pending[wl.key] = NAMESPACE_MISMATCH
            continue
        if wl.problem:
            plan.pending[wl.key] = f"failed to assign flavors: {wl.problem}"
            continue
        assignment = assign_flavors(cq, flavors, wl, usage)
        if assignment.fits:
            plan.reserve.append((wl, assignment))
            add_usage(usage, assignment.usage())
            continue
        if assignment.mode == Mode.PREEMPT:
            targets = preemption_targets(cq, wl, assignment, reserving, usage)
            if targets:
                plan.preempt.extend((t, wl) for t in targets)
                break
        plan.pending[wl.key] = assignment.message
        if cq.strategy == STRICT_FIFO:
            break
    return plan


def admission_usage_by_flavor(workloads: Iterable[Workload], cq: ClusterQueue,
                              only_admitted: bool) -> dict[str, dict[str, int]]:
    """flavor -> resource -> amount held in ``cq`` (by reserving, or only by admitted Workloads), every
    flavor and covered resource of the queue listed (zero when unused), as ClusterQueue status shows it."""
    out = {q.name: dict.fromkeys(g.covered, 0) for g in cq.groups for q in g.flavors}
    for wl in workloads:
        if not wl.reserved or wl.finished or wl.reserved_in != cq.name:
            continue
        if only_admitted and not wl.admitted:
            continue
        for (flavor, resource), amount in wl.usage().items():
            out.setdefault(flavor, {})[resource] = out.get(flavor, {}).get(resource, 0) + amount
    return out
