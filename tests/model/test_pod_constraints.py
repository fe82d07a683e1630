"""Host ports and topology spread constraints read from a pod template as kube-scheduler reads them (issue 25)."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.model.nodepool import ZONE_LABEL
from gangscale.model.pod import HOSTNAME_LABEL, PodDemand, pod_demand
from gangscale.model.scheduling import HostPort, LabelSelector, SpecError, SpreadConstraint

LABELS = {"app": "w", "job": "train"}


def port(**entry: Any) -> dict[str, Any]:
    return {"containerPort": 80, **entry}


def demand(*, containers: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None,
           **spec: Any) -> PodDemand:
    body = {"containers": containers or [{"name": "main", "image": "x"}], **spec}
    return pod_demand({"metadata": {"labels": LABELS if labels is None else labels}, "spec": body})


def with_ports(*entries: dict[str, Any], **spec: Any) -> PodDemand:
    return demand(containers=[{"name": "main", "image": "x", "ports": list(entries)}], **spec)


PORTS = [
    ("defaults-tcp-on-every-ip", [port(hostPort=8080)], {}, (HostPort(8080, "TCP", "0.0.0.0"),)),
    ("protocol-and-ip-kept", [port(hostPort=53, protocol="UDP", hostIP="10.0.0.1")], {},
     (HostPort(53, "UDP", "10.0.0.1"),)),
    ("container-port-alone-is-no-host-port", [port()], {}, ()),
    ("host-port-0-is-no-host-port", [port(hostPort=0)], {}, ()),
    ("host-network-makes-container-ports-host-ports", [port(containerPort=9000)], {"hostNetwork": True},
     (HostPort(9000),)),
    ("host-network-keeps-an-explicit-host-port", [port(containerPort=9000, hostPort=9001)], {"hostNetwork": True},
     (HostPort(9001),)),
    ("same-entry-twice-counted-once", [port(hostPort=8080), port(containerPort=81, hostPort=8080)], {},
     (HostPort(8080),)),
]


@pytest.mark.parametrize(("entries", "spec", "expected"), [c[1:] for c in PORTS], ids=[c[0] for c in PORTS])
def test_host_ports(entries: list[dict[str, Any]], spec: dict[str, Any], expected: tuple[HostPort, ...]) -> None:
    got = with_ports(*entries, **spec)
    assert got.host_ports == expected
    assert any("host ports are checked between the gang's own pods only" in note for note in got.ignored) is bool(
        expected)


def test_sidecar_ports_count_and_a_regular_init_containers_do_not() -> None:
    sidecar = {"name": "proxy", "image": "x", "restartPolicy": "Always", "ports": [port(hostPort=15001)]}
    setup = {"name": "setup", "image": "x", "ports": [port(hostPort=7000)]}
    got = demand(initContainers=[setup, sidecar])
    assert got.host_ports == (HostPort(15001),)


CONFLICTS = [
    ("same-port", HostPort(8080), HostPort(8080), True),
    ("other-port", HostPort(8080), HostPort(8081), False),
    ("other-protocol", HostPort(8080, "TCP"), HostPort(8080, "UDP"), False),
    ("wildcard-vs-ip", HostPort(8080), HostPort(8080, host_ip="10.0.0.1"), True),
    ("ip-vs-wildcard", HostPort(8080, host_ip="10.0.0.1"), HostPort(8080), True),
    ("same-ip", HostPort(8080, host_ip="10.0.0.1"), HostPort(8080, host_ip="10.0.0.1"), True),
    ("other-ip", HostPort(8080, host_ip="10.0.0.1"), HostPort(8080, host_ip="10.0.0.2"), False),
    ("ipv6-any-is-not-a-wildcard", HostPort(8080, host_ip="::"), HostPort(8080, host_ip="10.0.0.1"), False),
]


@pytest.mark.parametrize(("a", "b", "conflict"), [c[1:] for c in CONFLICTS], ids=[c[0] for c in CONFLICTS])
def test_host_port_conflicts(a: HostPort, b: HostPort, conflict: bool) -> None:
    assert a.conflicts(b) is conflict and b.conflicts(a) is conflict


def test_conflicting_ports_repel_and_name_the_port() -> None:
    web = with_ports(port(hostPort=8080))
    dns = with_ports(port(hostPort=8080, protocol="UDP"))
    assert web.repels(web) and web.port_conflict(web) == HostPort(8080)
    assert not web.repels(dns) and web.port_conflict(dns) is None
    assert str(HostPort(8080)) == "host port 8080/TCP"
    assert str(HostPort(53, "UDP", "10.0.0.1")) == "host port 10.0.0.1:53/UDP"
    assert web != with_ports(port(hostPort=9090)) and hash(web) == hash(with_ports(port(hostPort=8080)))


BAD_PORTS = [
    ("port-out-of-range", port(hostPort=70000), r"ports\[0\]\.hostPort: must be an integer between 1 and 65535"),
    ("port-not-a-number", port(hostPort="8080"), r"ports\[0\]\.hostPort: must be an integer"),
    ("unknown-protocol", port(hostPort=8080, protocol="HTTP"), r"ports\[0\]\.protocol: must be one of TCP, UDP, SCTP"),
]


@pytest.mark.parametrize(("entry", "pattern"), [c[1:] for c in BAD_PORTS], ids=[c[0] for c in BAD_PORTS])
def test_malformed_host_ports_name_the_field(entry: dict[str, Any], pattern: str) -> None:
    with pytest.raises(SpecError, match=r"template\.spec\.containers\[0\]\." + pattern):
        with_ports(entry)


def constraint(key: str = HOSTNAME_LABEL, **fields: Any) -> dict[str, Any]:
    return {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "w"}}, **fields}


SELECT_W = LabelSelector((("app", "w"),))

SPREAD = [
    ("defaults", constraint(), SpreadConstraint(1, HOSTNAME_LABEL, SELECT_W)),
    ("zone-min-domains-and-policies", constraint(ZONE_LABEL, maxSkew=2, minDomains=3, nodeAffinityPolicy="Ignore",
                                                 nodeTaintsPolicy="Honor"),
     SpreadConstraint(2, ZONE_LABEL, SELECT_W, 3, "Ignore", "Honor")),
    ("match-label-keys-merged", constraint(matchLabelKeys=["job"]),
     SpreadConstraint(1, HOSTNAME_LABEL, LabelSelector((("app", "w"), ("job", "train"))))),
    ("null-selector-with-match-label-keys", constraint(labelSelector=None, matchLabelKeys=["job"]),
     SpreadConstraint(1, HOSTNAME_LABEL, LabelSelector((("job", "train"),)))),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in SPREAD], ids=[c[0] for c in SPREAD])
def test_spread_constraints(raw: dict[str, Any], expected: SpreadConstraint) -> None:
    got = demand(topologySpreadConstraints=[raw])
    assert got.spread == (expected,)
    assert "topology spread is judged against the gang's own pods: running pods its selector matches are not " \
           "counted" in got.ignored


NOT_PLANNED = [
    ("schedule-anyway", constraint(whenUnsatisfiable="ScheduleAnyway"),
     "topology spread on 'kubernetes.io/hostname' with ScheduleAnyway is a preference: not planned for"),
    ("other-topology-key", constraint("cloud.google.com/gke-nodepool"),
     "topology spread on 'cloud.google.com/gke-nodepool' is not planned for (only kubernetes.io/hostname and "
     "topology.kubernetes.io/zone are)"),
]


@pytest.mark.parametrize(("raw", "note"), [c[1:] for c in NOT_PLANNED], ids=[c[0] for c in NOT_PLANNED])
def test_spread_the_planner_does_not_model_is_noted(raw: dict[str, Any], note: str) -> None:
    got = demand(topologySpreadConstraints=[raw])
    assert got.spread == () and got.ignored == (note,)


def test_a_null_selector_selects_nothing_and_is_dropped() -> None:
    got = demand(topologySpreadConstraints=[constraint(labelSelector=None)])
    assert got.spread == () and got.ignored == ()


def test_spread_kept_with_notes_for_what_the_template_cannot_tell() -> None:
    other = constraint(labelSelector={"matchLabels": {"app": "ps"}}, matchLabelKeys=["pod-template-hash"])
    got = demand(topologySpreadConstraints=[other])
    assert got.spread == (SpreadConstraint(1, HOSTNAME_LABEL, LabelSelector((("app", "ps"),))),)
    assert any("matchLabelKeys pod-template-hash not in the template's labels" in note for note in got.ignored)
    assert any("does not select the pod's own labels" in note for note in got.ignored)


def test_spread_is_part_of_the_demand_identity() -> None:
    one, two = (demand(topologySpreadConstraints=[constraint(maxSkew=skew)]) for skew in (1, 2))
    assert one != two and one == demand(topologySpreadConstraints=[constraint()])
    assert str(two.spread[0]) == "topology spread maxSkew 2 on kubernetes.io/hostname"
    assert str(demand(topologySpreadConstraints=[constraint(minDomains=3)]).spread[0]) == \
        "topology spread maxSkew 1 on kubernetes.io/hostname, minDomains 3"


BAD_SPREAD = [
    ("max-skew-zero", constraint(maxSkew=0), r"\[0\]\.maxSkew: must be an integer of at least 1, got 0"),
    ("min-domains-zero", constraint(minDomains=0), r"\[0\]\.minDomains: must be an integer of at least 1"),
    ("no-topology-key", constraint(topologyKey=""), r"\[0\]\.topologyKey: must be a non-empty string"),
    ("unknown-when", constraint(whenUnsatisfiable="Sometimes"),
     r"\[0\]\.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway"),
    ("unknown-policy", constraint(nodeTaintsPolicy="Maybe"), r"\[0\]\.nodeTaintsPolicy: must be Honor or Ignore"),
    ("bad-selector", constraint(labelSelector={"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
     r"\[0\]\.labelSelector\.matchExpressions\[0\]\.operator"),
]


@pytest.mark.parametrize(("raw", "pattern"), [c[1:] for c in BAD_SPREAD], ids=[c[0] for c in BAD_SPREAD])
def test_malformed_spread_names_the_field(raw: dict[str, Any], pattern: str) -> None:
    with pytest.raises(SpecError, match=r"template\.spec\.topologySpreadConstraints" + pattern):
        demand(topologySpreadConstraints=[raw])
