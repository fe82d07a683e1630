"""Host ports and topology spread (issue 25): the planner never plans a gang onto fewer nodes than kube-scheduler's
NodePorts and PodTopologySpread filters need, and says so when the pools cannot give that many."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from gangscale.model.decision import Decision, Outcome, ReasonCode
from gangscale.model.gang import Gang
from gangscale.model.nodepool import ZONE_LABEL, NodePool
from gangscale.model.snapshot import Snapshot
from gangscale.planner import plan
from gangscale.planner.explain import summarize
from tests.planner.builders import (
    CPU_NODE,
    TPU_NODE,
    gang,
    host_port,
    node,
    pod_set,
    pool,
    snapshot,
    spread,
    state,
)

NOW = 1_000_000.0
ONE_CPU = {"cpu": "1"}
#: Two of these fill a CPU_NODE (16 cpu); three of the next.
HALF_NODE = {"cpu": "7"}
THIRD_NODE = {"cpu": "5"}
APP = {"app": "w"}
ZONE = ZONE_LABEL


def cpu_pool(max_units: int = 10, name: str = "cpu", zone: str = "zone-a", **kwargs: Any) -> NodePool:
    return pool(name, CPU_NODE, max_units=max_units, zone=zone, **kwargs)


def ports(name: str, count: int, *entries: dict[str, Any], requests: dict[str, str] | None = None) -> Any:
    return pod_set(name, count, requests or ONE_CPU, ports=list(entries))


def spreading(count: int, *constraints: dict[str, Any], requests: dict[str, str] | None = None,
              name: str = "w", **kwargs: Any) -> Any:
    return pod_set(name, count, requests or ONE_CPU, labels=APP, spread=list(constraints), **kwargs)


def pods_per_node(decision: Decision) -> list[int]:
    """Pods on each new node, one entry per node (pod sets summed), fullest first."""
    sizes: list[int] = []
    for group in decision.new_nodes:
        sizes += [sum(count for _, count in group.pods)] * group.nodes
    return sorted(sizes, reverse=True)


@dataclass
class Case:
    id: str
    snapshot: Snapshot
    gang: Gang
    outcome: Outcome
    #: pool -> units added (scale-ups)
    steps: dict[str, int] = field(default_factory=dict)
    #: pods on each new node, fullest first (None: not checked)
    layout: list[int] | None = None
    #: reason codes that must appear (infeasible gangs), and words the one-line summary must hold
    reasons: set[ReasonCode] = field(default_factory=set)
    says: tuple[str, ...] = ()


PORT_CASES = [
    Case("same-port-twice-one-per-node", snapshot([cpu_pool()]), gang("g", ports("w", 3, host_port(8080))),
         Outcome.SCALE_UP, {"cpu": 3}, [1, 1, 1]),
    Case("container-port-alone-takes-no-node-port", snapshot([cpu_pool()]),
         gang("g", pod_set("w", 3, ONE_CPU, ports=[{"containerPort": 8080}])), Outcome.SCALE_UP, {"cpu": 1}, [3]),
    Case("different-ports-share-a-node", snapshot([cpu_pool()]),
         gang("g", ports("a", 1, host_port(8080)), ports("b", 1, host_port(9090))), Outcome.SCALE_UP, {"cpu": 1}, [2]),
    Case("same-port-in-two-pod-sets-apart", snapshot([cpu_pool()]),
         gang("g", ports("a", 1, host_port(8080)), ports("b", 1, host_port(8080))), Outcome.SCALE_UP, {"cpu": 2},
         [1, 1]),
    Case("different-protocols-share-a-node", snapshot([cpu_pool()]),
         gang("g", ports("a", 1, host_port(8080, "TCP")), ports("b", 1, host_port(8080, "UDP"))),
         Outcome.SCALE_UP, {"cpu": 1}, [2]),
    Case("specific-ip-conflicts-with-wildcard", snapshot([cpu_pool()]),
         gang("g", ports("a", 1, host_port(8080, host_ip="10.0.0.1")), ports("b", 1, host_port(8080))),
         Outcome.SCALE_UP, {"cpu": 2}, [1, 1]),
    Case("two-specific-ips-share-a-node", snapshot([cpu_pool()]),
         gang("g", ports("a", 1, host_port(8080, host_ip="10.0.0.1")),
              ports("b", 1, host_port(8080, host_ip="10.0.0.2"))), Outcome.SCALE_UP, {"cpu": 1}, [2]),
    Case("port-free-pod-set-joins-a-port-node", snapshot([cpu_pool()]),
         gang("g", ports("a", 2, host_port(8080)), pod_set("b", 2, ONE_CPU)), Outcome.SCALE_UP, {"cpu": 2}),
    Case("host-ports-need-more-nodes-than-max-units", snapshot([cpu_pool(max_units=2)]),
         gang("g", ports("w", 3, host_port(8080))), Outcome.INFEASIBLE,
         reasons={ReasonCode.MAX_UNITS, ReasonCode.CAPACITY},
         says=("needs 3 nodes for pod set 'w' (one pod a node: host port 8080/TCP)",)),
    Case("host-ports-on-existing-nodes-one-each", snapshot(
            [state(cpu_pool(), units=2)], [node("n1", cpu_pool()), node("n2", cpu_pool())]),
         gang("g", ports("w", 3, host_port(8080))), Outcome.SCALE_UP, {"cpu": 1}, [1]),
]

SPREAD_CASES = [
    Case("hostname-min-domains-3-one-pod-on-each-of-3-nodes", snapshot([cpu_pool(max_units=3)]),
         gang("g", spreading(3, spread(1, min_domains=3))), Outcome.SCALE_UP, {"cpu": 3}, [1, 1, 1]),
    Case("hostname-min-domains-3-pool-of-2-is-infeasible", snapshot([cpu_pool(max_units=2)]),
         gang("g", spreading(3, spread(1, min_domains=3))), Outcome.INFEASIBLE,
         reasons={ReasonCode.SPREAD, ReasonCode.MAX_UNITS},
         says=("topology spread maxSkew 1 on kubernetes.io/hostname, minDomains 3 needs the 3 pods it selects on "
               "at least 3 nodes",)),
    Case("hostname-skew-1-two-nodes-take-2-plus-2", snapshot([cpu_pool(max_units=2)]),
         gang("g", spreading(4, spread(1), requests=HALF_NODE)), Outcome.SCALE_UP, {"cpu": 2}, [2, 2]),
    Case("hostname-skew-1-a-lone-node-is-the-only-domain", snapshot([cpu_pool(max_units=2)]),
         gang("g", spreading(4, spread(1))), Outcome.SCALE_UP, {"cpu": 1}, [4]),
    Case("hostname-skew-1-7-pods-go-3-2-2-not-3-3-1", snapshot([cpu_pool()]),
         gang("g", spreading(7, spread(1, min_domains=3), requests=THIRD_NODE)), Outcome.SCALE_UP, {"cpu": 3},
         [3, 2, 2]),
    Case("hostname-skew-1-7-pods-two-a-node", snapshot([cpu_pool()]),
         gang("g", spreading(7, spread(1, min_domains=3), requests=HALF_NODE)), Outcome.SCALE_UP, {"cpu": 4},
         [2, 2, 2, 1]),
    Case("hostname-skew-1-20-pods-go-10-10-not-16-4", snapshot([cpu_pool()]),
         gang("g", spreading(20, spread(1))), Outcome.SCALE_UP, {"cpu": 2}, [10, 10]),
    Case("hostname-min-domains-4-5-pods-on-4-nodes", snapshot([cpu_pool()]),
         gang("g", spreading(5, spread(1, min_domains=4))), Outcome.SCALE_UP, {"cpu": 4}, [2, 1, 1, 1]),
    Case("hostname-skew-2-min-domains-3", snapshot([cpu_pool()]),
         gang("g", spreading(6, spread(2, min_domains=3))), Outcome.SCALE_UP, {"cpu": 3}, [2, 2, 2]),
    Case("hostname-full-eligible-node-makes-every-node-take-max-skew", snapshot(
            [state(cpu_pool(), units=1)], [node("full", cpu_pool(), used={"cpu": "16"})]),
         gang("g", spreading(4, spread(1))), Outcome.SCALE_UP, {"cpu": 4}, [1, 1, 1, 1]),
    Case("hostname-node-outside-the-selector-is-no-domain", snapshot(
            [cpu_pool(labels={"tier": "a"}), state(cpu_pool(name="other", labels={"tier": "b"}), units=1)],
            [node("full", cpu_pool(name="other", labels={"tier": "b"}), used={"cpu": "16"})]),
         gang("g", spreading(4, spread(1), selector={"tier": "a"})), Outcome.SCALE_UP, {"cpu": 1}, [4]),
    Case("hostname-node-affinity-policy-ignore-counts-every-node", snapshot(
            [cpu_pool(labels={"tier": "a"}), state(cpu_pool(name="other", labels={"tier": "b"}), units=1)],
            [node("full", cpu_pool(name="other", labels={"tier": "b"}), used={"cpu": "16"})]),
         gang("g", spreading(4, spread(1, nodeAffinityPolicy="Ignore"), selector={"tier": "a"})),
         Outcome.SCALE_UP, {"cpu": 4}, [1, 1, 1, 1]),
    Case("hostname-tainted-node-counts-unless-taints-policy-honor", snapshot(
            [cpu_pool(), state(cpu_pool(name="ml", taints=["dedicated=ml:NoSchedule"]), units=1)],
            [node("ml-1", cpu_pool(name="ml", taints=["dedicated=ml:NoSchedule"]), used={"cpu": "16"})]),
         gang("g", spreading(4, spread(1))), Outcome.SCALE_UP, {"cpu": 4}, [1, 1, 1, 1]),
    Case("hostname-taints-policy-honor-skips-the-tainted-node", snapshot(
            [cpu_pool(), state(cpu_pool(name="ml", taints=["dedicated=ml:NoSchedule"]), units=1)],
            [node("ml-1", cpu_pool(name="ml", taints=["dedicated=ml:NoSchedule"]), used={"cpu": "16"})]),
         gang("g", spreading(4, spread(1, nodeTaintsPolicy="Honor"))), Outcome.SCALE_UP, {"cpu": 1}, [4]),
    Case("hostname-units-in-flight-are-empty-domains-to-come", snapshot([state(cpu_pool(), inflight=1)]),
         gang("g", spreading(4, spread(1))), Outcome.SCALE_UP, {"cpu": 4}, [1, 1, 1, 1]),
    Case("hostname-padding-node-of-a-slice-is-a-domain", snapshot(
            [pool("tpu", TPU_NODE, max_units=4, nodes_per_unit=2)]),
         gang("g", spreading(3, spread(1))), Outcome.SCALE_UP, {"tpu": 1}, [2, 1]),
    Case("hostname-selector-spanning-two-pod-sets", snapshot([cpu_pool()]),
         gang("g", spreading(2, spread(1, min_domains=4), name="a"), pod_set("b", 2, ONE_CPU, labels=APP)),
         Outcome.SCALE_UP, {"cpu": 3}, [2, 1, 1]),
    Case("schedule-anyway-is-not-planned-for", snapshot([cpu_pool(max_units=2)]),
         gang("g", spreading(3, spread(1, min_domains=None, when="ScheduleAnyway"))), Outcome.SCALE_UP, {"cpu": 1},
         [3]),
    Case("zone-only-one-zone-has-nodes-so-one-domain", snapshot(
            [cpu_pool(name="a", zone="zone-a"), cpu_pool(name="b", zone="zone-b")]),
         gang("g", spreading(3, spread(1, ZONE))), Outcome.SCALE_UP, {"a": 1}, [3]),
    Case("zone-another-zone-with-an-eligible-node-caps-a-one-zone-gang", snapshot(
            [state(cpu_pool(name="a", zone="zone-a"), units=1), state(cpu_pool(name="b", zone="zone-b"), units=1)],
            [node("a-1", cpu_pool(name="a", zone="zone-a"), used={"cpu": "16"}),
             node("b-1", cpu_pool(name="b", zone="zone-b"), used={"cpu": "16"})]),
         gang("g", spreading(3, spread(1, ZONE))), Outcome.INFEASIBLE, reasons={ReasonCode.SPREAD},
         says=("at most 1 of the 3 pods it selects may share a zone",)),
    Case("zone-min-domains-2-caps-a-one-zone-gang", snapshot([cpu_pool(name="a", zone="zone-a")]),
         gang("g", spreading(3, spread(1, ZONE, min_domains=2))), Outcome.INFEASIBLE, reasons={ReasonCode.SPREAD},
         says=("fewer than minDomains",)),
    Case("zone-few-pods-within-max-skew", snapshot([cpu_pool(name="a", zone="zone-a")]),
         gang("g", spreading(3, spread(3, ZONE, min_domains=2))), Outcome.SCALE_UP, {"a": 1}, [3]),
]


def check(case: Case) -> None:
    decision, = plan(case.snapshot, [case.gang], NOW)
    assert decision.outcome is case.outcome, summarize(decision)
    assert {step.pool: step.units for step in decision.steps} == case.steps, summarize(decision)
    if case.layout is not None:
        assert pods_per_node(decision) == case.layout, decision.new_nodes
    assert case.reasons <= {reason.code for reason in decision.reasons}, decision.reasons
    for words in case.says:
        assert words in summarize(decision)


@pytest.mark.parametrize("case", PORT_CASES, ids=[case.id for case in PORT_CASES])
def test_host_ports(case: Case) -> None:
    check(case)


@pytest.mark.parametrize("case", SPREAD_CASES, ids=[case.id for case in SPREAD_CASES])
def test_topology_spread(case: Case) -> None:
    check(case)


def test_pods_sharing_a_port_never_share_a_node_across_pod_sets() -> None:
    """Each node holds at most one pod using 8080/TCP, whichever pod set it belongs to."""
    decision, = plan(snapshot([cpu_pool()]), [gang("g", ports("a", 2, host_port(8080)), ports("b", 3, host_port(8080)),
                                                   pod_set("c", 4, ONE_CPU))], NOW)
    assert decision.outcome is Outcome.SCALE_UP
    for group in decision.new_nodes:
        with_port = sum(count for name, count in group.pods if name in ("a", "b"))
        assert with_port <= 1, decision.new_nodes
    assert sum(step.units for step in decision.steps) == 5


def test_a_check_capacity_gang_is_held_to_min_domains_on_free_capacity() -> None:
    p = cpu_pool()
    snap = snapshot([state(p, units=2)], [node("n1", p), node("n2", p)])
    g = gang("g", spreading(3, spread(1, min_domains=3)), may_scale=False)
    decision, = plan(snap, [g], NOW)
    assert decision.outcome is Outcome.INFEASIBLE and not decision.steps
    assert ReasonCode.SPREAD in {reason.code for reason in decision.reasons}
    fits, = plan(snap, [gang("g", spreading(2, spread(1, min_domains=3)), may_scale=False)], NOW)
    assert fits.outcome is Outcome.FITS
    assert Counter(p.node for p in fits.placements) == {"n1": 1, "n2": 1}


def test_nodes_planned_for_a_gang_ahead_are_empty_domains_for_the_next() -> None:
    """The first gang's new nodes of the pool will be eligible domains holding none of the second gang's pods, so
    the second gang may not rely on being the pool's only nodes."""
    first = gang("first", pod_set("x", 1, {"cpu": "2"}), created=1)
    second = gang("second", spreading(4, spread(1)), created=2)
    _, decision = plan(snapshot([cpu_pool()]), [first, second], NOW)
    assert decision.gang == "second" and pods_per_node(decision) == [1, 1, 1, 1]
