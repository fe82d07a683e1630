"""The simulated scheduler's NodePorts and PodTopologySpread (DoNotSchedule) filters: tables on the pure filters,
then a few passes of the scheduler against the embedded API server."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.filters import (
    NODE_PORTS,
    SPREAD,
    SPREAD_MISSING_LABEL,
    NodeInfo,
    filter_node,
    node_info,
    pod_info,
    spread_state,
)
from gangscale.sim.scheduler import Scheduler
from gangscale.sim.world import Timeline
from tests.sim.test_scheduler import CPU_NODE, add_node, add_pod, placement, scheduled_condition

JSON = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def port(host_port: int | None = 8080, *, container_port: int = 8080, **extra: Any) -> JSON:
    entry: JSON = {"containerPort": container_port, **extra}
    if host_port is not None:
        entry["hostPort"] = host_port
    return entry


def pod_with(name: str = "p", *, namespace: str = "default", labels: dict[str, str] | None = None,
             ports: list[JSON] | None = None, sidecar_ports: list[JSON] | None = None,
             init_ports: list[JSON] | None = None, deleting: bool = False, **spec: Any) -> JSON:
    containers = [{"name": "main", "image": "x", "ports": ports or []}]
    init = [{"name": "side", "image": "x", "restartPolicy": "Always", "ports": sidecar_ports}] if sidecar_ports else []
    init += [{"name": "init", "image": "x", "ports": init_ports}] if init_ports else []
    meta: JSON = {"name": name, "namespace": namespace, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": containers, "initContainers": init, **spec}}


def make_node(name: str, labels: dict[str, str] | None = None, *, taints: list[JSON] | None = None) -> NodeInfo:
    return node_info({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})


# --- NodePorts --------------------------------------------------------------------------------------------

PORTS = [
    # id, the new pod, the pod already on the node, conflicts
    ("same-port-default-tcp", pod_with(ports=[port()]), pod_with("old", ports=[port()]), True),
    ("explicit-tcp-vs-default", pod_with(ports=[port(protocol="TCP")]), pod_with("old", ports=[port()]), True),
    ("different-protocols-share", pod_with(ports=[port(protocol="UDP")]), pod_with("old", ports=[port()]), False),
    ("different-ports-share", pod_with(ports=[port(9090)]), pod_with("old", ports=[port()]), False),
    ("wildcard-vs-specific-ip", pod_with(ports=[port()]), pod_with("old", ports=[port(hostIP="10.0.0.1")]), True),
    ("specific-ip-vs-wildcard", pod_with(ports=[port(hostIP="10.0.0.1")]), pod_with("old", ports=[port()]), True),
    ("explicit-wildcard-vs-specific", pod_with(ports=[port(hostIP="0.0.0.0")]),
     pod_with("old", ports=[port(hostIP="10.0.0.2")]), True),
    ("same-specific-ip", pod_with(ports=[port(hostIP="10.0.0.1")]),
     pod_with("old", ports=[port(hostIP="10.0.0.1")]), True),
    ("different-specific-ips-share", pod_with(ports=[port(hostIP="10.0.0.1")]),
     pod_with("old", ports=[port(hostIP="10.0.0.2")]), False),
    ("container-port-alone-takes-none", pod_with(ports=[port(None)]), pod_with("old", ports=[port(None)]), False),
    ("host-network-container-port-is-host-port", pod_with(ports=[port(None)], hostNetwork=True),
     pod_with("old", ports=[port()]), True),
    ("host-network-existing-pod", pod_with(ports=[port()]), pod_with("old", ports=[port(None)], hostNetwork=True),
     True),
    ("sidecar-port-counts", pod_with(ports=[port()]), pod_with("old", sidecar_ports=[port()]), True),
    ("new-pod-sidecar-port-counts", pod_with(sidecar_ports=[port()]), pod_with("old", ports=[port()]), True),
    ("regular-init-container-port-ignored", pod_with(ports=[port()]), pod_with("old", init_ports=[port()]), False),
    ("no-host-port-never-conflicts", pod_with(), pod_with("old", ports=[port()]), False),
]


@pytest.mark.parametrize(("new", "old", "conflicts"), [p[1:] for p in PORTS], ids=[p[0] for p in PORTS])
def test_node_ports(new: JSON, old: JSON, conflicts: bool) -> None:
    got = filter_node(pod_info(new), make_node("n"), {}, 1, [pod_info(old)])
    assert got == ([NODE_PORTS] if conflicts else [])


def test_node_ports_looks_at_the_node_not_the_hostname_domain() -> None:
    new, old = pod_info(pod_with(ports=[port()])), pod_info(pod_with("old", ports=[port()]))
    assert filter_node(new, make_node("n"), {}, 1, [old], on_node=[]) == []
    assert filter_node(new, make_node("n"), {}, 1, [], on_node=[old]) == [NODE_PORTS]


# --- PodTopologySpread ------------------------------------------------------------------------------------

def spread(max_skew: int = 1, key: str = ZONE, selector: JSON | None = None, **extra: Any) -> JSON:
    constraint: JSON = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", **extra}
    constraint["labelSelector"] = {"matchLabels": {"app": "w"}} if selector is None else selector
    return constraint


W = {"app": "w"}
TWO_ZONES = {"a": {ZONE: "a"}, "b": {ZONE: "b"}}
SPREAD_CASES: list[tuple[str, JSON, dict[str, dict[str, str]], dict[str, list[JSON]], dict[str, str | None]]] = [
    # id, the new pod's spec, nodes (labels), pods already on them, expected reason per node
    ("full-domain-refused", {"topologySpreadConstraints": [spread()]}, TWO_ZONES,
     {"a": [pod_with("o", labels=W)]}, {"a": SPREAD, "b": None}),
    ("max-skew-2-allows", {"topologySpreadConstraints": [spread(2)]}, TWO_ZONES,
     {"a": [pod_with("o", labels=W)]}, {"a": None, "b": None}),
    ("balanced-domains-take", {"topologySpreadConstraints": [spread()]}, TWO_ZONES,
     {"a": [pod_with("o1", labels=W)], "b": [pod_with("o2", labels=W)]}, {"a": None, "b": None}),
    ("non-matching-pods-not-counted", {"topologySpreadConstraints": [spread()]}, TWO_ZONES,
     {"a": [pod_with("o", labels={"app": "x"})]}, {"a": None, "b": None}),
    ("other-namespace-not-counted", {"topologySpreadConstraints": [spread()]}, TWO_ZONES,
     {"a": [pod_with("o", namespace="team", labels=W)]}, {"a": None, "b": None}),
    ("deleting-pod-not-counted", {"topologySpreadConstraints": [spread()]}, TWO_ZONES,
     {"a": [pod_with("o", labels=W, deleting=True)]}, {"a": None, "b": None}),
    ("pod-not-selecting-itself", {"topologySpreadConstraints": [spread(selector={"matchLabels": {"app": "v"}})]},
     TWO_ZONES, {"a": [pod_with("o", labels={"app": "v"})]}, {"a": None, "b": None}),
    ("schedule-anyway-not-a-filter",
     {"topologySpreadConstraints": [{**spread(), "whenUnsatisfiable": "ScheduleAnyway"}]}, TWO_ZONES,
     {"a": [pod_with("o", labels=W)]}, {"a": None, "b": None}),
    ("min-domains-above-domains-min-is-zero", {"topologySpreadConstraints": [spread(minDomains=3)]}, TWO_ZONES,
     {"a": [pod_with("o1", labels=W)], "b": [pod_with("o2", labels=W)]}, {"a": SPREAD, "b": SPREAD}),
    ("min-domains-met", {"topologySpreadConstraints": [spread(minDomains=2)]}, TWO_ZONES,
     {"a": [pod_with("o1", labels=W)], "b": [pod_with("o2", labels=W)]}, {"a": None, "b": None}),
    ("node-without-topology-key", {"topologySpreadConstraints": [spread()]}, {**TWO_ZONES, "c": {}},
     {}, {"a": None, "b": None, "c": SPREAD_MISSING_LABEL}),
    ("keyless-node-is-no-domain", {"topologySpreadConstraints": [spread()]}, {"a": {ZONE: "a"}, "c": {}},
     {"c": [pod_with("o", labels=W)]}, {"a": None, "c": SPREAD_MISSING_LABEL}),
    ("node-affinity-honored-by-default", {"topologySpreadConstraints": [spread()], "nodeSelector": {"pool": "x"}},
     {"a": {ZONE: "a", "pool": "x"}, "b": {ZONE: "b", "pool": "y"}}, {"a": [pod_with("o", labels=W)]},
     {"a": None, "b": "node(s) didn't match Pod's node affinity/selector"}),
    ("node-affinity-policy-ignore",
     {"topologySpreadConstraints": [spread(nodeAffinityPolicy="Ignore")], "nodeSelector": {"pool": "x"}},
     {"a": {ZONE: "a", "pool": "x"}, "b": {ZONE: "b", "pool": "y"}}, {"a": [pod_with("o", labels=W)]},
     {"a": SPREAD, "b": "node(s) didn't match Pod's node affinity/selector"}),
    ("tainted-domain-counts-by-default", {"topologySpreadConstraints": [spread()]},
     {"a": {ZONE: "a"}, "tainted": {ZONE: "b"}}, {"a": [pod_with("o", labels=W)]},
     {"a": SPREAD, "tainted": "node(s) had untolerated taint {dedicated: ml}"}),
    ("node-taints-policy-honor", {"topologySpreadConstraints": [spread(nodeTaintsPolicy="Honor")]},
     {"a": {ZONE: "a"}, "tainted": {ZONE: "b"}}, {"a": [pod_with("o", labels=W)]},
     {"a": None, "tainted": "node(s) had untolerated taint {dedicated: ml}"}),
    ("match-label-keys-other-job-not-counted", {"topologySpreadConstraints": [spread(matchLabelKeys=["job"])]},
     TWO_ZONES, {"a": [pod_with("o", labels={"app": "w", "job": "2"})]}, {"a": None, "b": None}),
    ("match-label-keys-same-job-counted", {"topologySpreadConstraints": [spread(matchLabelKeys=["job"])]},
     TWO_ZONES, {"a": [pod_with("o", labels={"app": "w", "job": "1"})]}, {"a": SPREAD, "b": None}),
    ("hostname-key", {"topologySpreadConstraints": [spread(key="kubernetes.io/hostname")]}, TWO_ZONES,
     {"a": [pod_with("o", labels=W)]}, {"a": SPREAD, "b": None}),
]


@pytest.mark.parametrize(("spec", "nodes", "existing", "expected"), [s[1:] for s in SPREAD_CASES],
                         ids=[s[0] for s in SPREAD_CASES])
def test_pod_topology_spread(spec: JSON, nodes: dict[str, dict[str, str]], existing: dict[str, list[JSON]],
                             expected: dict[str, str | None]) -> None:
    pod = pod_info(pod_with("new", labels={"app": "w", "job": "1"}, **spec))
    infos = [make_node(name, labels, taints=[TAINT] if name == "tainted" else None) for name, labels in nodes.items()]
    on = {name: [pod_info(p) for p in existing.get(name, [])] for name in nodes}
    state = spread_state(pod, [(node, on[node.name]) for node in infos])
    got = {node.name: filter_node(pod, node, {}, len(on[node.name]), on[node.name], spread=state) for node in infos}
    assert got == {name: [reason] if reason else [] for name, reason in expected.items()}


# --- the scheduler ----------------------------------------------------------------------------------------

@pytest.fixture
def scheduler(http: KubeHTTP, clock: ManualClock) -> Scheduler:
    return Scheduler(http, Timeline(clock.now()))


async def test_host_port_pods_never_share_a_node(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                                                 scheduler: Scheduler) -> None:
    for name in ("node-a", "node-b"):
        await add_node(http, apiserver, name, CPU_NODE)
    containers = [{"name": "main", "image": "x", "ports": [{"containerPort": 8080, "hostPort": 8080}]}]
    for name in ("p1", "p2", "p3"):
        await add_pod(http, name, {"cpu": "1"}, containers=containers)
        await clock.advance(1)

    await scheduler.sync(clock.now())

    assert await placement(http) == {"p1": "node-a", "p2": "node-b", "p3": None}
    assert await scheduled_condition(http, "p3") == (
        "False", "Unschedulable", f"0/2 nodes are available: 2 {NODE_PORTS}.")


async def test_host_network_and_other_protocol(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                                               scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "node-a", CPU_NODE)
    await add_pod(http, "net", {"cpu": "1"}, hostNetwork=True,
                  containers=[{"name": "main", "image": "x", "ports": [{"containerPort": 53}]}])
    await clock.advance(1)
    await add_pod(http, "udp", {"cpu": "1"},
                  containers=[{"name": "main", "image": "x", "ports": [{"containerPort": 1, "hostPort": 53,
                                                                         "protocol": "UDP"}]}])
    await clock.advance(1)
    await add_pod(http, "tcp", {"cpu": "1"},
                  containers=[{"name": "main", "image": "x", "ports": [{"containerPort": 1, "hostPort": 53,
                                                                         "hostIP": "10.0.0.1"}]}])

    await scheduler.sync(clock.now())

    assert await placement(http) == {"net": "node-a", "udp": "node-a", "tcp": None}


def _spread_spec(**extra: Any) -> JSON:
    return {"topologySpreadConstraints": [spread(**extra)]}


async def test_spread_max_skew_1_places_two_and_two(http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock,
                                                     scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "node-a", CPU_NODE, labels={ZONE: "a"})
    await add_node(http, apiserver, "node-b", CPU_NODE, labels={ZONE: "b"})
    for i in range(4):
        await add_pod(http, f"w{i}", {"cpu": "1"}, labels=W, **_spread_spec())
        await clock.advance(1)

    await scheduler.sync(clock.now())

    placed = await placement(http)
    assert sorted(placed.values()) == ["node-a", "node-a", "node-b", "node-b"]  # bin packing alone: 4 on node-a


async def test_spread_min_domains_3_on_2_nodes_leaves_third_pending(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "node-a", CPU_NODE, labels={ZONE: "a"})
    await add_node(http, apiserver, "node-b", CPU_NODE, labels={ZONE: "b"})
    for i in range(3):
        await add_pod(http, f"w{i}", {"cpu": "1"}, labels=W, **_spread_spec(minDomains=3))
        await clock.advance(1)

    await scheduler.sync(clock.now())

    assert await placement(http) == {"w0": "node-a", "w1": "node-b", "w2": None}
    assert await scheduled_condition(http, "w2") == (
        "False", "Unschedulable", f"0/2 nodes are available: 2 {SPREAD}.")


async def test_spread_node_without_topology_key_does_not_fit(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, scheduler: Scheduler) -> None:
    await add_node(http, apiserver, "node-a", CPU_NODE)  # no zone label, first by name
    await add_node(http, apiserver, "node-b", CPU_NODE, labels={ZONE: "b"})
    await add_pod(http, "w0", {"cpu": "1"}, labels=W, **_spread_spec())
    await clock.advance(1)
    await add_pod(http, "w1", {"cpu": "1"}, labels=W, **_spread_spec(key="example.com/rack"))

    await scheduler.sync(clock.now())

    assert await placement(http) == {"w0": "node-b", "w1": None}
    assert await scheduled_condition(http, "w1") == (
        "False", "Unschedulable", f"0/2 nodes are available: 2 {SPREAD_MISSING_LABEL}.")
