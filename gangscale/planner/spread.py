"""Topology spread constraints (``whenUnsatisfiable: DoNotSchedule``) of one gang: what the packer enforces, and
the check every plan must pass.

kube-scheduler's ``PodTopologySpread`` filter (``pkg/scheduler/framework/plugins/podtopologyspread/filtering.go``)
lets a pod onto a node whose domain (its host, its zone) holds ``count`` pods the constraint selects when
``count + 1 - min <= maxSkew`` (``+ 1`` when the pod is selected itself), ``min`` being the fewest selected pods
in any *eligible* domain, or 0 while fewer than ``minDomains`` domains are eligible. Eligible are the domains of
every node that has the topology label and passes the inclusion policies (by default: matches the pod's
nodeSelector and required node affinity, taints or not; ``common.go``), whether or not it has room, is Ready or is
cordoned. Placing pods level by level, a final layout is reachable when every domain that holds one of the
constraint's own pods holds at most ``min + maxSkew`` selected pods (``min`` over the final layout, 0 with fewer
domains than ``minDomains``); for a constraint that selects only its own pods, only then.

How the planner holds a plan to that:

- On ``kubernetes.io/hostname`` the packer caps the selected pods on each node that holds the owner's pods
  (:class:`~gangscale.planner.pack.NodeCap`), and new nodes opened for the owner take its pods as evenly as they
  can (3 + 2 + 2, never 3 + 3 + 1). A cap of ``maxSkew`` is always safe (``min >= 0``). Larger caps
  (``ceil(pods / k)`` over at least ``k`` nodes, for ``k`` from ``minDomains`` on, so 4 pods with ``maxSkew: 1``
  may go 2 + 2 on two nodes) are tried first, and a plan made with them is kept only if
  :meth:`GangSpread.violation` finds the layout reachable: only when the plan's nodes are all the eligible domains
  there are, every one holding selected pods. Those few caps can miss a cheaper balanced plan (one that also uses
  existing nodes, say); the search then settles for more nodes, never for fewer than the filter needs.
- Any other eligible domain counts as an empty one: an existing node the plan leaves alone (any node, Ready or
  not), a padding node of a multi-host unit, and nodes still to come of an eligible pool (units in flight, or
  planned for gangs ahead in this plan). A larger cap is not even tried when such nodes are coming.
- On ``topology.kubernetes.io/zone`` nothing is enforced while packing; the same check rejects a plan whose zones
  are too uneven. A gang is packed in one zone unless it may spread, so it passes when its selected pods number at
  most ``maxSkew``, or when no other zone has a node its pods may use and ``minDomains`` is 1. A gang that may
  spread may be called infeasible although a more even plan exists: the check is exact, the search is not.

Not modelled: pods already running that a selector matches (the planner's view of a node holds no pod labels),
nodes that join after the plan for gangs planned later (they would be new empty domains; a plan with more than
``maxSkew`` selected pods on a node relies on there being none), and spread on any other topology key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace

from gangscale.model.pod import HOSTNAME_LABEL, PodDemand
from gangscale.model.scheduling import HONOR, SpreadConstraint, Taint
from gangscale.model.snapshot import NodeShape
from gangscale.planner.compat import Compatibility, node_shape
from gangscale.planner.pack import Group, NewBin, NodeCap, ceil_div
from gangscale.planner.state import ClusterState

#: Larger per-node caps tried before ``maxSkew`` itself: for ``k`` = minDomains .. minDomains + RELAX_STEPS - 1 nodes.
RELAX_STEPS = 4


@dataclass(frozen=True, slots=True)
class SpreadRule:
    """The constraint of group ``owner``; ``members`` are the groups whose pods its selector matches."""

    owner: int
    constraint: SpreadConstraint
    members: frozenset[int]
    #: Pods of the members: all the pods of the gang the constraint counts.
    pods: int

    @property
    def on_hosts(self) -> bool:
        return self.constraint.topology_key == HOSTNAME_LABEL


def spread_rules(groups: Sequence[Group]) -> tuple[SpreadRule, ...]:
    """The gang's constraints that could bind: those selecting more of its pods than ``maxSkew`` (one selecting none
    concerns only pods outside the gang, which the planner does not see; with at most ``maxSkew`` selected pods,
    ``count + 1 - min <= maxSkew`` holds wherever they go)."""
    rules: list[SpreadRule] = []
    for group in groups:
        for constraint in group.demand.spread:
            members = frozenset(other.index for other in groups if constraint.selector.matches(other.demand.label_map))
            pods = sum(groups[m].count for m in members)
            if pods > constraint.max_skew:
                rules.append(SpreadRule(group.index, constraint, members, pods))
    return tuple(rules)


@dataclass(slots=True)
class _Domains:
    """Where a rule's pods count: the eligible existing nodes' domains, the eligible pools, pools still growing."""

    #: Eligible existing node name -> its domain (its hostname, or its zone).
    nodes: dict[str, str] = field(default_factory=dict)
    pools: set[str] = field(default_factory=set)
    #: Eligible pools with nodes on their way (in flight, or planned for gangs ahead): empty domains to come.
    growing: list[str] = field(default_factory=list)
    #: The domains known before any plan: those of the eligible nodes and (zones) of the growing pools.
    values: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Layout:
    """Selected pods per domain in one plan, and the domains that hold the owner's pods."""

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    owners: set[str] = field(default_factory=set)
    #: New nodes (hostname rules): (selected pods on each, how many such nodes, whether they hold the owner).
    new_hosts: list[tuple[int, int, bool]] = field(default_factory=list)
    unlabelled: str = ""


class GangSpread:
    """The spread rules of one gang against one :class:`ClusterState`: caps to pack with and the plan check."""

    def __init__(self, state: ClusterState, compat: Compatibility, groups: Sequence[Group]) -> None:
        self.state, self.compat, self.groups = state, compat, tuple(groups)
        self.rules = spread_rules(groups)
        self.domains = [self._domains(rule) for rule in self.rules]

    # -- eligibility ------------------------------------------------------------------------------------------

    def _eligible(self, demand: PodDemand, constraint: SpreadConstraint, labels: Mapping[str, str],
                  taints: tuple[Taint, ...], name: str | None) -> bool:
        """Whether a node with these labels and taints is one of the constraint's domains (its inclusion policies)."""
        if constraint.node_affinity_policy == HONOR and demand.selects(labels, name) is not None:
            return False
        return not (constraint.node_taints_policy == HONOR
                    and demand.blocking_taint(taints, self.compat.policy.extended_resource_toleration) is not None)

    def _domains(self, rule: SpreadRule) -> _Domains:
        demand, constraint, key = self.groups[rule.owner].demand, rule.constraint, rule.constraint.topology_key
        found = _Domains()
        alike: dict[NodeShape, bool] = {}  # answers per node shape: thousands of nodes, a few shapes
        for node in self.state.all_nodes:
            value = node.labels.get(key)
            if value is None:
                continue  # a node without the topology label is no domain
            if demand.names_nodes:
                ok = self._eligible(demand, constraint, node.labels, node.taints, node.name)
            else:
                shape = node_shape(node)
                if (known := alike.get(shape)) is None:
                    known = alike[shape] = self._eligible(demand, constraint, node.labels, node.taints, node.name)
                ok = known
            if ok:
                found.nodes[node.name] = value
        for name, pool_state in self.state.pool_states.items():
            pool = pool_state.pool
            if (rule.on_hosts or key in pool.labels) and self._eligible(demand, constraint, pool.labels,
                                                                        pool.taints, None):
                found.pools.add(name)
                if self.state.pool_growing(name):
                    found.growing.append(name)
        coming = set() if rule.on_hosts else {self.state.pool(name).labels[key] for name in found.growing}
        found.values = frozenset(found.nodes.values()) | coming
        return found

    # -- caps for the packer ----------------------------------------------------------------------------------

    def variants(self, groups: tuple[Group, ...]) -> list[tuple[Group, ...]]:
        """The gang's groups with per-node caps, loosest first, ending with every cap at ``maxSkew``.

        A relaxed cap ``ceil(pods / k)`` comes with ``k`` as the least number of new nodes the owner's pods are
        spread over (``k`` nodes at that cap is the balanced layout the cap stands for)."""
        options: list[list[tuple[int, int]]] = []  # per rule: (cap, least nodes), loosest first
        for rule, domains in zip(self.rules, self.domains, strict=True):
            if not rule.on_hosts:
                options.append([])
                continue
            skew, least = rule.constraint.max_skew, rule.constraint.min_domains
            relaxed = {} if domains.growing else {max(skew, ceil_div(rule.pods, k)): k
                                                  for k in reversed(range(least, least + RELAX_STEPS))}
            relaxed[skew] = 0
            options.append(sorted(relaxed.items(), reverse=True))
        steps = max([len(o) for o in options] + [1])  # zone rules alone: one variant, without caps
        variants: list[tuple[Group, ...]] = []
        for step in range(steps):
            capped = self._with_caps(groups, [o[min(step, len(o) - 1)] if o else (0, 0) for o in options])
            if capped not in variants:
                variants.append(capped)
        return variants

    def _with_caps(self, groups: tuple[Group, ...], caps: list[tuple[int, int]]) -> tuple[Group, ...]:
        per_group: dict[int, list[NodeCap]] = defaultdict(list)
        limits: dict[int, str] = {}
        least: dict[int, int] = {}
        for rule, (cap, nodes) in zip(self.rules, caps, strict=True):
            if not rule.on_hosts or (cap >= rule.pods and nodes <= 1):
                continue  # no node could hold more than the cap, nor need the pods spread: nothing to enforce
            node_cap = NodeCap(rule.owner, rule.members, cap)
            for g in rule.members | {rule.owner}:
                per_group[g].append(node_cap)
            if rule.owner in rule.members:
                limits.setdefault(rule.owner, f"at most {cap} pod{'s' if cap > 1 else ''} a node: {rule.constraint}")
                least[rule.owner] = max(least.get(rule.owner, 0), nodes)
        return tuple(replace(group, caps=tuple(per_group[group.index]), min_nodes=least.get(group.index, 0),
                             limit=group.limit or limits.get(group.index, ""))
                     if group.index in per_group else group for group in groups)

    def min_nodes(self, rule: SpreadRule) -> int:
        """The fewest nodes that can hold the rule's pods, resources aside (0 for a zone rule)."""
        if not rule.on_hosts:
            return 0
        strict = ceil_div(rule.pods, rule.constraint.max_skew)
        domains = self.domains[self.rules.index(rule)]
        return strict if domains.growing else min(strict, rule.constraint.min_domains)

    # -- the check --------------------------------------------------------------------------------------------

    def violation(self, placements: Sequence[tuple[int, int, int]], bins: Sequence[NewBin]) -> str | None:
        """Why kube-scheduler could not place the plan's pods as laid out (``None``: it can), for the first rule
        broken. ``placements`` are (group, usable node index, pods) on existing nodes."""
        for rule, domains in zip(self.rules, self.domains, strict=True):
            layout = self._layout(rule, domains, placements, bins)
            if layout.unlabelled:
                return f"pod set {self.groups[rule.owner].name!r}: {rule.constraint}: {layout.unlabelled}"
            problem = self._skew(rule, domains, layout)
            if problem is not None:
                return f"pod set {self.groups[rule.owner].name!r}: {rule.constraint}: {problem}"
        return None

    def _layout(self, rule: SpreadRule, domains: _Domains, placements: Sequence[tuple[int, int, int]],
                bins: Sequence[NewBin]) -> _Layout:
        layout = _Layout()
        for g, i, count in placements:
            node = self.state.nodes[i]
            value = domains.nodes.get(node.name)
            if value is None:
                if g == rule.owner:  # the owner's own nodes pass its inclusion policies: the label is missing
                    layout.unlabelled = f"node {node.name} has no {rule.constraint.topology_key} label"
                continue  # kube-scheduler counts no pod on a node that is no domain
            if g in rule.members:
                layout.counts[value] += count
            if g == rule.owner:
                layout.owners.add(value)
        key = rule.constraint.topology_key
        for bin_ in bins:
            if bin_.pool not in domains.pools:
                if bin_.pods.get(rule.owner) and not rule.on_hosts:
                    layout.unlabelled = f"pool {bin_.pool} has no {key} label"
                continue
            selected = sum(bin_.pods.get(m, 0) for m in rule.members)
            if rule.on_hosts:
                layout.new_hosts.append((selected, bin_.mult, bool(bin_.pods.get(rule.owner))))
                continue
            value = self.state.pool(bin_.pool).labels[key]
            layout.counts[value] += selected * bin_.mult
            if bin_.pods.get(rule.owner):
                layout.owners.add(value)
        return layout

    def _skew(self, rule: SpreadRule, domains: _Domains, layout: _Layout) -> str | None:
        word = word_for(rule)
        values = domains.values | layout.counts.keys()
        size = len(values) + sum(mult for _, mult, _ in layout.new_hosts) + (len(domains.growing) > 0) * rule.on_hosts
        emptiest = min([layout.counts.get(v, 0) for v in values] + [count for count, _, _ in layout.new_hosts]
                       + ([0] if rule.on_hosts and domains.growing else []), default=0)
        if size < rule.constraint.min_domains:
            floor, why = 0, f"only {size} {word}s may take its pods, fewer than minDomains"
        else:
            floor, why = emptiest, self._emptiest(rule, domains, layout, values, emptiest)
        allowed = floor + rule.constraint.max_skew
        fullest = max([layout.counts[v] for v in layout.owners]
                      + [count for count, _, owner in layout.new_hosts if owner], default=0)
        if fullest <= allowed:
            return None
        return (f"at most {allowed} of the {rule.pods} pods it selects may share a {word} ({why}); the plan puts "
                f"{fullest} on one")

    def _emptiest(self, rule: SpreadRule, domains: _Domains, layout: _Layout, values: Set[str], emptiest: int) -> str:
        """Words for the emptiest eligible domain, which sets how full any other may be."""
        if rule.on_hosts and domains.growing and emptiest == 0:
            return f"new nodes of pool {domains.growing[0]} are on their way and would hold none"
        for value in sorted(values):
            if layout.counts.get(value, 0) == emptiest:
                return f"{word_for(rule)} {value}, which its pods may use, would hold {emptiest}"
        return f"a new node would hold {emptiest}"


def word_for(rule: SpreadRule) -> str:
    return "node" if rule.on_hosts else "zone"
