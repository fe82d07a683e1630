"""Nodes, Events (core and events.k8s.io), Leases validated as kube-apiserver 1.36 does; quantity printing."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from gangscale.kube.resources import EVENTS, LEASES, NODES
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver.quantity import QuantityError, canonical, parse_quantity
from tests.apiserver.validation_support import DUP, ENUM, FORB, INV, JSON, NS, REQ, Cause, causes_of, rejected

EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/default/events"
APPLY = "application/apply-patch+yaml"
NOW = "2026-08-01T10:00:00.000000Z"


def node(taints: list[JSON] | None = None, **status: Any) -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "spec": {"taints": taints or []}, "status": status}


NODE_CASES: list[tuple[str, JSON, list[Cause]]] = [
    ("taint-effect-missing", node([{"key": "gpu"}]), [(REQ, "metadata.taints[0].effect", "Required value")]),
    ("taint-effect-unsupported", node([{"key": "gpu", "effect": "Sometimes"}]),
     [(ENUM, "metadata.taints[0].effect",
       'Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')]),
    ("taint-duplicate", node([{"key": "gpu", "effect": "NoSchedule"}, {"key": "gpu", "value": "x",
                                                                      "effect": "NoSchedule"}]),
     [(DUP, "metadata.taints[1]", 'Duplicate value: {"Key":"gpu","Value":"x","Effect":"NoSchedule","TimeAdded":null}: '
       "taints must be unique by key and effect pair")]),
    ("taint-value", node([{"key": "gpu", "value": "a b", "effect": "NoSchedule"}]),
     [(INV, "metadata.taints[0].value",
       "Invalid value: \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', "
       "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
       "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")]),
    ("negative-capacity", node(capacity={"cpu": "-1"}, allocatable={"cpu": "2"}),
     [(INV, "status.capacity.cpu", 'Invalid value: "-1": must be greater than or equal to 0')]),
    ("fractional-extended-allocatable", node(allocatable={"example.com/fpga": "1500m"}),
     [(INV, "status.allocatable.example.com/fpga", 'Invalid value: "1500m": must be an integer')]),
]


@pytest.mark.parametrize(("body", "want"), [c[1:] for c in NODE_CASES], ids=[c[0] for c in NODE_CASES])
async def test_node_rules(http: KubeHTTP, body: JSON, want: list[Cause]) -> None:
    err = await rejected(http, "POST", NODES.path(), copy.deepcopy(body))
    assert (err.status, err.reason) == (422, "Invalid")
    assert causes_of(err) == want
    assert err.message.startswith('Node "n1" is invalid: ')


async def test_node_updates_and_apply_are_validated(http: KubeHTTP) -> None:
    await http.request("POST", NODES.path(), body=node(capacity={"cpu": "4"}))
    apply = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
             "spec": {"taints": [{"key": "gpu"}]}}
    err = await rejected(http, "PATCH", NODES.path(None, "n1"), apply, content_type=APPLY,
                         query={"fieldManager": "t", "force": "true"})
    assert (err.status, causes_of(err)) == (422, [(REQ, "metadata.taints[0].effect", "Required value")])
    err = await rejected(http, "PATCH", NODES.path(None, "n1", "status"), {"status": {"capacity": {"cpu": "four"}}},
                         content_type="application/merge-patch+json")
    assert (err.status, err.reason) == (400, "BadRequest")
    assert err.message.startswith('Node in version "v1" cannot be handled as a Node: quantities must match')
    await http.request("PATCH", NODES.path(None, "n1"), body={"spec": {"providerID": "sim://n1"}},
                       content_type="application/merge-patch+json")
    err = await rejected(http, "PATCH", NODES.path(None, "n1"), {"spec": {"providerID": "sim://other"}},
                         content_type="application/merge-patch+json")
    assert causes_of(err) == [(FORB, "spec.providerID",
                               'Forbidden: node updates may not change providerID except from "" to valid')]


def core_event(**over: Any) -> JSON:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": NS},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": NS}, "reason": "Started",
            "message": "hi", "type": "Normal", **over}


def v1_event(**over: Any) -> JSON:
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": NS}, "reason": "Started", "note": "hi",
            "type": "Normal", "eventTime": NOW, "reportingController": "gangscale.io/sim",
            "reportingInstance": "sim-1", "action": "Start", **over}


EVENT_CASES: list[tuple[str, str, JSON, list[Cause]]] = [
    ("core-namespace-mismatch", EVENTS.path(NS), core_event(involvedObject={"kind": "Pod", "namespace": "other"}),
     [(INV, "involvedObject.namespace", 'Invalid value: "other": does not match event.namespace')]),
    ("core-cluster-object-outside-default", EVENTS.path("kube-public"),
     {**core_event(involvedObject={"kind": "Node", "name": "n1"}), "metadata": {"name": "e"}},
     [(INV, "involvedObject.namespace", 'Invalid value: "": does not match event.namespace')]),
    ("core-with-event-time-needs-action", EVENTS.path(NS),
     core_event(eventTime=NOW, reportingComponent="gangscale.io/sim", reportingInstance="sim-1"),
     [(REQ, "action", "Required value")]),
    ("core-reason-too-long", EVENTS.path(NS),
     core_event(eventTime=NOW, reportingComponent="sim", reportingInstance="i", action="A", reason="r" * 129),
     [(INV, "reason", 'Invalid value: "": can have at most 128 characters')]),
    ("v1-event-time-required", EVENTS_V1, {k: v for k, v in v1_event().items() if k != "eventTime"},
     [(REQ, "eventTime", "Required value")]),
    ("v1-type", EVENTS_V1, v1_event(type="Info"), [(INV, "type", 'Invalid value: "": has invalid value: Info')]),
    ("v1-deprecated-count", EVENTS_V1, v1_event(deprecatedCount=3),
     [(INV, "count", 'Invalid value: "": needs to be unset')]),
    ("v1-series-count", EVENTS_V1, v1_event(series={"count": 1, "lastObservedTime": NOW}),
     [(INV, "series.count", 'Invalid value: "": should be at least 2')]),
]


@pytest.mark.parametrize(("path", "body", "want"), [c[1:] for c in EVENT_CASES], ids=[c[0] for c in EVENT_CASES])
async def test_event_rules(http: KubeHTTP, path: str, body: JSON, want: list[Cause]) -> None:
    err = await rejected(http, "POST", path, copy.deepcopy(body))
    assert (err.status, err.reason) == (422, "Invalid")
    assert causes_of(err) == want
    qual = "Event.events.k8s.io" if path == EVENTS_V1 else "Event"
    assert err.message.startswith(f'{qual} "e" is invalid: ')


async def test_valid_events_are_accepted(http: KubeHTTP) -> None:
    await http.request("POST", EVENTS.path(NS), body=core_event())
    await http.request("POST", EVENTS_V1, body=v1_event(metadata={"name": "e2"}))
    err = await rejected(http, "PATCH", f"{EVENTS_V1}/e2", {"note": "changed"},
                         content_type="application/merge-patch+json")
    assert causes_of(err) == [(INV, "message", 'Invalid value: "changed": field is immutable')]


def lease(**spec: Any) -> JSON:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
            "spec": {"holderIdentity": "me", **spec}}


LEASE_CASES: list[tuple[str, JSON, list[Cause]]] = [
    ("duration-zero", lease(leaseDurationSeconds=0),
     [(INV, "spec.leaseDurationSeconds", "Invalid value: 0: must be greater than 0")]),
    ("transitions-negative", lease(leaseTransitions=-1),
     [(INV, "spec.leaseTransitions", "Invalid value: -1: must be greater than or equal to 0")]),
    ("preferred-holder-without-strategy", lease(preferredHolder="you"),
     [(FORB, "spec.preferredHolder", "Forbidden: may only be specified if `strategy` is defined")]),
    ("strategy", lease(strategy="Newest"),
     [(ENUM, "spec.strategy.strategy", 'Unsupported value: "Newest": supported values: "OldestEmulationVersion"')]),
]


@pytest.mark.parametrize(("body", "want"), [c[1:] for c in LEASE_CASES], ids=[c[0] for c in LEASE_CASES])
async def test_lease_rules(http: KubeHTTP, body: JSON, want: list[Cause]) -> None:
    err = await rejected(http, "POST", LEASES.path(NS), copy.deepcopy(body))
    assert (err.status, err.reason) == (422, "Invalid")
    assert causes_of(err) == want
    assert err.message.startswith('Lease.coordination.k8s.io "l" is invalid: ')


CANONICAL = [
    ("1500m", "1500m"), ("2000m", "2"), ("0.5", "500m"), ("1000", "1k"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"),
    ("1.5Ki", "1536"), ("512", "512"), ("0.5Gi", "512Mi"), ("1e3", "1e3"), ("12e2", "1200"), ("-1Gi", "-1Gi"),
    ("0", "0"), ("0.0000000001", "1n"), ("+3", "3"), ("100Ki", "100Ki"),
]


@pytest.mark.parametrize(("text", "want"), CANONICAL, ids=[c[0] for c in CANONICAL])
def test_quantities_print_as_go_does(text: str, want: str) -> None:
    assert canonical(parse_quantity(text)) == want


def test_quantity_values_are_exact() -> None:
    assert parse_quantity("1.5Gi").value == Fraction(3 * 2**29)
    assert parse_quantity("250m").milli_value() == 250
    assert parse_quantity("1").cmp(parse_quantity("1000m")) == 0


@pytest.mark.parametrize("text", ["abc", "1Gb", "1.2.3", "", "1e", "--1"], ids=str)
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
