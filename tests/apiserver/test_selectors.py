"""Label and field selectors: parsing, exact 400 messages, matching and per-kind field sets."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.selectors import (
    check_field_selector,
    field_set,
    field_set_from_jsonpaths,
    parse_field_selector,
    parse_label_selector,
    selected_fields,
    supported_fields,
)

LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
OPERATORS = "in, notin, =, ==, !=, gt, lt"
REQ = "unable to parse requirement: "


def _error(fn: Any, *args: Any) -> StatusError:
    with pytest.raises(StatusError) as info:
        fn(*args)
    return info.value


# --- label selectors: matching ------------------------------------------------------------------------

MATCH_CASES = [
    ("", {}, True),
    ("", {"a": "b"}, True),
    ("   ", {"a": "b"}, True),
    ("app=web", {"app": "web"}, True),
    ("app=web", {"app": "db"}, False),
    ("app=web", {}, False),
    ("app==web", {"app": "web"}, True),
    ("app!=web", {"app": "db"}, True),
    ("app!=web", {}, True),
    ("app!=web", {"app": "web"}, False),
    ("app", {"app": ""}, True),
    ("app", {}, False),
    ("!app", {}, True),
    ("!app", {"app": "x"}, False),
    ("env in (prod, staging)", {"env": "staging"}, True),
    ("env in (prod,staging)", {"env": "dev"}, False),
    ("env in (prod)", {}, False),
    ("env notin (prod)", {}, True),
    ("env notin (prod)", {"env": "prod"}, False),
    ("env in (,prod)", {"env": ""}, True),
    ("env in ()", {"env": ""}, True),
    ("env=", {"env": ""}, True),
    ("env=", {"env": "x"}, False),
    ("gpus>2", {"gpus": "3"}, True),
    ("gpus>2", {"gpus": "2"}, False),
    ("gpus<2", {"gpus": "1"}, True),
    ("gpus>2", {"gpus": "many"}, False),
    ("gpus>2", {}, False),
    ("a=1,b=2", {"a": "1", "b": "2"}, True),
    ("a=1,b=2", {"a": "1"}, False),
    ("in in (in)", {"in": "in"}, True),
    ("  app  =  web  ,  tier  ", {"app": "web", "tier": "x"}, True),
    ("example.com/role=gpu", {"example.com/role": "gpu"}, True),
    ("a=b\t,\nc", {"a": "b", "c": "d"}, True),
]


@pytest.mark.parametrize(("selector", "labels", "expected"), MATCH_CASES,
                         ids=[f"{s!r}-{sorted(lbl.items())}" for s, lbl, _ in MATCH_CASES])
def test_label_selector_matches(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


def test_label_selector_sorts_requirements_and_values() -> None:
    sel = parse_label_selector("z notin (b,a),a=1,m")
    assert str(sel) == "a=1,m,z notin (a,b)"
    assert not sel.empty()
    assert parse_label_selector("").empty()


# --- label selectors: errors ----------------------------------------------------------------------------

LABEL_ERRORS = [
    ("missing-operator", "a b", f"{REQ}found 'b', expected: {OPERATORS}"),
    ("gt-word-is-not-an-operator", "a gt 1", f"{REQ}found 'gt', expected: {OPERATORS}"),
    ("trailing-comma", "a=b,", "found '', expected: identifier after ','"),
    ("leading-comma", ",a", "found ',', expected: !, identifier, or 'end of string'"),
    ("two-values", "a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("operator-after-not", "!a=b", "found '=', expected: ',' or 'end of string'"),
    ("in-without-parens", "a in x", "unable to parse requirement: found 'x' expected: '('"),
    ("space-in-set", "a in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'"),
    ("operator-in-set", "a in (x,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
    ("paren-after-in", "a in =", "unable to parse requirement: found '=' expected: '('"),
    ("bad-set-start", "a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
    ("paren-value", "a=(b)", "unable to parse requirement: found '(', expected: identifier"),
    ("not-an-integer", "a>b", "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' "
                              "operators, the value must be an integer"),
    ("bad-value", "a=-b", f'{REQ}values[0][a]: Invalid value: "-b": {LABEL_VALUE_MSG}'),
    ("two-bad-values", "a in (-x,-y)",
     f'unable to parse requirement: [values[0][a]: Invalid value: "-x": {LABEL_VALUE_MSG}, '
     f'values[1][a]: Invalid value: "-y": {LABEL_VALUE_MSG}]'),
    ("key-with-two-slashes", "a/b/c",
     f'unable to parse requirement: <nil>: Invalid value: "a/b/c": a valid label key {LABEL_KEY_MSG} with an '
     "optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
    ("key-name-too-long", "a" * 64,
     f'unable to parse requirement: <nil>: Invalid value: "{"a" * 64}": name part must be no more than 63 '
     "characters"),
    ("empty-prefix", "/x", f'{REQ}<nil>: Invalid value: "/x": prefix part must be non-empty'),
]


@pytest.mark.parametrize(("selector", "message"), [c[1:] for c in LABEL_ERRORS],
                         ids=[c[0] for c in LABEL_ERRORS])
def test_label_selector_errors(selector: str, message: str) -> None:
    err = _error(parse_label_selector, selector)
    assert (err.code, err.reason, err.message) == (400, "BadRequest", message)
    assert err.to_json()["message"] == message


# --- field selectors ---------------------------------------------------------------------------------

FIELD_MATCH = [
    ("", {"metadata.name": "x"}, True),
    ("metadata.name=x", {"metadata.name": "x"}, True),
    ("metadata.name==x", {"metadata.name": "x"}, True),
    ("metadata.name=x", {"metadata.name": "y"}, False),
    ("metadata.name!=x", {"metadata.name": "y"}, True),
    ("spec.nodeName=", {"spec.nodeName": ""}, True),
    ("spec.nodeName=", {}, True),
    ("spec.nodeName!=", {}, False),
    ("status.phase=Running,spec.nodeName=n1", {"status.phase": "Running", "spec.nodeName": "n1"}, True),
    ("status.phase=Running,spec.nodeName=n1", {"status.phase": "Running", "spec.nodeName": "n2"}, False),
    ("metadata.name=a\\,b", {"metadata.name": "a,b"}, True),
    ("metadata.name=a\\=b", {"metadata.name": "a=b"}, True),
    ("metadata.name=a\\\\b", {"metadata.name": "a\\b"}, True),
    (",,metadata.name=x,", {"metadata.name": "x"}, True),
    ("metadata.name = x", {"metadata.name ": " x"}, True),
]


@pytest.mark.parametrize(("selector", "fields", "expected"), FIELD_MATCH,
                         ids=[repr(c[0]) for c in FIELD_MATCH])
def test_field_selector_matches(selector: str, fields: dict[str, str], expected: bool) -> None:
    assert parse_field_selector(selector).matches(fields) is expected


def test_field_selector_fields_and_whitespace() -> None:
    sel = parse_field_selector("b=1,a!=2")
    assert sel.fields() == ["a", "b"]  # terms are sorted before parsing, as upstream
    assert parse_field_selector("metadata.name = x").fields() == ["metadata.name "]
    assert parse_field_selector("").empty()


FIELD_ERRORS = [
    ("no-operator", "x", "invalid selector: 'x'; can't understand 'x'"),
    ("second-term-bad", "a=b,x", "invalid selector: 'a=b,x'; can't understand 'x'"),
    ("bare-equals-in-value", "a=b=c", "invalid field selector: unescaped character in value: 61"),
    ("bad-escape", "a=b\\x", "invalid field selector: invalid escape sequence: \\x"),
    ("dangling-backslash", "a=b\\", "invalid field selector: invalid escape sequence: \\"),
]


@pytest.mark.parametrize(("selector", "message"), [c[1:] for c in FIELD_ERRORS],
                         ids=[c[0] for c in FIELD_ERRORS])
def test_field_selector_errors(selector: str, message: str) -> None:
    err = _error(parse_field_selector, selector)
    assert (err.code, err.reason, err.message) == (400, "BadRequest", message)


NOT_SUPPORTED = "field label not supported: "
UNSUPPORTED = [
    ("pod", "Pod", True, "spec.foo", f"{NOT_SUPPORTED}spec.foo"),
    ("node-namespace", "Node", False, "metadata.namespace", f"{NOT_SUPPORTED}metadata.namespace"),
    ("namespace-kind", "Namespace", False, "spec.finalizers", f"{NOT_SUPPORTED}spec.finalizers"),
    ("event", "Event", True, "message", f"{NOT_SUPPORTED}message"),
    ("default-conversion", "ConfigMap", True, "data",
     '"data" is not a known field selector: only "metadata.name", "metadata.namespace"'),
    ("custom-resource", "", True, "spec.queueName", f"{NOT_SUPPORTED}spec.queueName"),
    ("cluster-scoped-custom", "", False, "metadata.namespace", f"{NOT_SUPPORTED}metadata.namespace"),
]


@pytest.mark.parametrize(("kind", "namespaced", "field", "message"), [c[1:] for c in UNSUPPORTED],
                         ids=[c[0] for c in UNSUPPORTED])
def test_unsupported_field_labels(kind: str, namespaced: bool, field: str, message: str) -> None:
    selector = parse_field_selector(f"{field}=x")
    err = _error(lambda: check_field_selector(selector, kind, namespaced=namespaced))
    assert (err.code, err.reason, err.message) == (400, "BadRequest", message)


def test_supported_fields() -> None:
    assert supported_fields("Pod") >= {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase",
                                       "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork",
                                       "status.podIP", "status.nominatedNodeName", "spec.restartPolicy"}
    assert supported_fields("Node") == {"metadata.name", "spec.unschedulable"}
    assert supported_fields("Namespace") == {"metadata.name", "status.phase"}
    assert supported_fields("", [".status.admission.clusterQueue"]) == {
        "metadata.name", "metadata.namespace", "status.admission.clusterQueue"}


def test_pod_spec_host_is_renamed_to_node_name() -> None:
    sel = check_field_selector(parse_field_selector("spec.host=n1"), "Pod")
    assert sel.fields() == ["spec.nodeName"]
    pod = {"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1"}}
    assert sel.matches(field_set("Pod", pod))


# --- field sets --------------------------------------------------------------------------------------

POD = {
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n1", "schedulerName": "default-scheduler", "serviceAccountName": "sa",
             "restartPolicy": "Never", "hostNetwork": True},
    "status": {"phase": "Pending", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
               "nominatedNodeName": "n2"},
}
EVENT = {
    "metadata": {"name": "e", "namespace": "ns"},
    "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u1", "apiVersion": "v1",
                       "resourceVersion": "7", "fieldPath": "spec.containers{c}"},
    "reason": "Scheduled", "type": "Normal", "reportingComponent": "kubelet",
}
FIELD_SETS = [
    ("pod", "Pod", POD, {
        "metadata.name": "p", "metadata.namespace": "ns", "spec.nodeName": "n1", "spec.host": "n1",
        "spec.restartPolicy": "Never", "spec.schedulerName": "default-scheduler",
        "spec.serviceAccountName": "sa",
        "spec.hostNetwork": "true", "status.phase": "Pending", "status.podIP": "10.0.0.1",
        "status.nominatedNodeName": "n2"}),
    ("pod-defaults", "Pod", {"metadata": {"name": "p", "namespace": "ns"}}, {
        "metadata.name": "p", "metadata.namespace": "ns", "spec.nodeName": "", "spec.host": "",
        "spec.restartPolicy": "", "spec.schedulerName": "", "spec.serviceAccountName": "",
        "spec.hostNetwork": "false", "status.phase": "", "status.podIP": "", "status.nominatedNodeName": ""}),
    ("node", "Node", {"metadata": {"name": "n"}, "spec": {"unschedulable": True}},
     {"metadata.name": "n", "spec.unschedulable": "true"}),
    ("namespace", "Namespace", {"metadata": {"name": "d"}, "status": {"phase": "Active"}},
     {"metadata.name": "d", "status.phase": "Active"}),
    ("event-source-falls-back", "Event", EVENT, {
        "metadata.name": "e", "metadata.namespace": "ns", "involvedObject.kind": "Pod",
        "involvedObject.namespace": "ns", "involvedObject.name": "p", "involvedObject.uid": "u1",
        "involvedObject.apiVersion": "v1", "involvedObject.resourceVersion": "7",
        "involvedObject.fieldPath": "spec.containers{c}", "reason": "Scheduled",
        "reportingComponent": "kubelet", "source": "kubelet", "type": "Normal"}),
    ("lease-default", "Lease", {"metadata": {"name": "l", "namespace": "kube-node-lease"}},
     {"metadata.name": "l", "metadata.namespace": "kube-node-lease"}),
]


@pytest.mark.parametrize(("kind", "obj", "expected"), [c[1:] for c in FIELD_SETS],
                         ids=[c[0] for c in FIELD_SETS])
def test_field_set(kind: str, obj: dict[str, Any], expected: dict[str, str]) -> None:
    assert field_set(kind, obj) == expected


ODD_POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": 7, "hostNetwork": "yes"},
           "status": {"phase": None, "podIPs": ["not-an-object"], "podIP": "10.0.0.2"}}


@pytest.mark.parametrize(("kind", "obj"), [*((c[1], c[2]) for c in FIELD_SETS), ("Pod", ODD_POD),
                                           ("Pod", {"metadata": {"name": "p"}, "spec": "not-an-object"})],
                         ids=[*(c[0] for c in FIELD_SETS), "pod-odd-values", "pod-spec-not-an-object"])
def test_selected_fields_are_the_field_set_restricted(kind: str, obj: dict[str, Any]) -> None:
    """What a selector reads of each object (only its fields) is what the whole field set says of them."""
    full = field_set(kind, obj)
    for name in sorted(supported_fields(kind)):
        got = selected_fields(kind, obj, [name])
        assert got.get(name, "") == full.get(name, ""), name
    assert selected_fields(kind, obj, sorted(full)) == full


def test_event_source_prefers_source_component() -> None:
    event = {**EVENT, "source": {"component": "scheduler"}}
    assert field_set("Event", event)["source"] == "scheduler"


def test_field_set_from_jsonpaths() -> None:
    wl = {"metadata": {"name": "w", "namespace": "team"},
          "status": {"admission": {"clusterQueue": "cq"}, "flag": True, "n": 3, "obj": {"a": 1}}}
    paths = [".status.admission.clusterQueue", "status.flag", "status.n", "status.obj", "status.missing"]
    got = field_set_from_jsonpaths(wl, paths)
    assert got == {"metadata.name": "w", "metadata.namespace": "team",
                   "status.admission.clusterQueue": "cq", "status.flag": "true", "status.n": "3"}
    assert field_set_from_jsonpaths(wl, [], namespaced=False) == {"metadata.name": "w"}
    sel = parse_field_selector("status.admission.clusterQueue=cq,metadata.namespace=team")
    assert sel.matches(got)
