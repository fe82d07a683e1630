"""PodTemplate and ProvisioningRequest bodies, parameters, config lookup and podSetUpdates (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.sim.kueue.checkstate import RetryStrategy
from gangscale.sim.kueue.prconfig import config_from_ref, request_parameters, retry_strategy, synced_with_config
from gangscale.sim.kueue.prmerge import MergedPodSet
from gangscale.sim.kueue.prtemplates import TemplateError, pod_template_body, ready_pod_set_updates, request_body
from tests.sim.kueue.test_prov_support import TOLERATION, assignment, container, flavor, pod_set, workload

JSON = dict[str, Any]
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS = "autoscaling.x-k8s.io/provisioning-class-name"
WL = {**workload(), "metadata": {"name": "wl", "namespace": "ns", "uid": "wl-uid"}}
FLAVORS = {"flv1": flavor("flv1", {"f1l1": "v1"}, [TOLERATION]),
           "flv2": flavor("flv2", {"f2l1": "v2", "f1l1": "other"}, [{"key": "t2", "operator": "Exists"}])}


def merged(ps: JSON, psa: JSON, count: int = 1) -> MergedPodSet:
    return MergedPodSet(ps["name"], ps, psa, count)


def spec_of(body: JSON) -> JSON:
    return dict(body["template"]["spec"])


def test_pod_template_carries_flavor_selector_tolerations_and_owner() -> None:
    ps = pod_set("ps1", 4, nodeSelector={"zone": "a"})
    body = pod_template_body(WL, "ppt-wl-check1-1-ps1", merged(ps, assignment("ps1")), FLAVORS)
    assert body["metadata"] == {
        "name": "ppt-wl-check1-1-ps1", "namespace": "ns", "labels": {"kueue.x-k8s.io/managed": "true"},
        "ownerReferences": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "wl",
                             "uid": "wl-uid", "controller": True, "blockOwnerDeletion": True}]}
    assert spec_of(body)["nodeSelector"] == {"zone": "a", "f1l1": "v1"}
    assert spec_of(body)["tolerations"] == [TOLERATION]
    assert ps["template"]["spec"] == {"containers": [container({"cpu": "1"})], "nodeSelector": {"zone": "a"}}


def test_several_flavors_first_label_wins_and_tolerations_are_not_duplicated() -> None:
    ps = pod_set("ps1", 1, tolerations=[TOLERATION])
    psa = {"name": "ps1", "flavors": {"cpu": "flv1", "memory": "flv2", "pods": "flv1"}}
    spec = spec_of(pod_template_body(WL, "t", merged(ps, psa), FLAVORS))
    assert spec["nodeSelector"] == {"f1l1": "v1", "f2l1": "v2"}
    assert spec["tolerations"] == [TOLERATION, {"key": "t2", "operator": "Exists"}]


@pytest.mark.parametrize(("ps", "psa", "error"), [
    (pod_set("ps1", 1), assignment("ps1", flavor_name="nope"), 'resourceflavors.kueue.x-k8s.io "nope" not found'),
    (pod_set("ps1", 1, nodeSelector={"f1l1": "mine"}), assignment("ps1"),
     "invalid admission check PodSetUpdate: conflict for nodeSelector: conflict for key=f1l1, value1=mine, "
     "value2=v1"),
], ids=["missing-flavor", "selector-conflict"])
def test_pod_template_errors(ps: JSON, psa: JSON, error: str) -> None:
    with pytest.raises(TemplateError) as exc:
        pod_template_body(WL, "t", merged(ps, psa), FLAVORS)
    assert str(exc.value) == error


def test_limits_fill_missing_requests_and_stale_consumer_marks_are_dropped() -> None:
    ps = pod_set("ps1", 1, container({"cpu": "1"}, {"cpu": "2", "example.org/gpu": "4"}),
                 initContainers=[container(None, {"memory": "1Gi"}, name="init")],
                 schedulingGates=[{"name": "kueue.x-k8s.io/topology"}])
    ps["template"]["metadata"] = {"annotations": {CONSUME: "old-pr", CLASS: "c", "keep": "me"}}
    body = pod_template_body(WL, "t", merged(ps, {"name": "ps1"}), FLAVORS)
    spec = spec_of(body)
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "1", "example.org/gpu": "4"}
    assert spec["initContainers"][0]["resources"]["requests"] == {"memory": "1Gi"}
    assert "schedulingGates" not in spec
    assert body["template"]["metadata"]["annotations"] == {"keep": "me"}
    assert "nodeSelector" not in spec


def test_request_body() -> None:
    wl = {**WL, "metadata": {**WL["metadata"], "annotations": {
        "provreq.kueue.x-k8s.io/ValidUntilSeconds": "0", "provreq.kueue.x-k8s.io/p1": "from-wl", "other": "x"}}}
    sets = [merged(pod_set("ps1", 4), assignment("ps1"), 4), merged(pod_set("ps2", 3), assignment("ps2"), 3)]
    body = request_body(wl, "wl-check1-1", {"provisioningClassName": "class1", "parameters": {"p1": "v1", "p2": "v2"}},
                        sets)
    assert body["apiVersion"] == "autoscaling.x-k8s.io/v1"
    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "wl-uid"
    assert body["spec"] == {
        "provisioningClassName": "class1",
        "parameters": {"p1": "from-wl", "p2": "v2", "ValidUntilSeconds": "0"},
        "podSets": [{"podTemplateRef": {"name": "ppt-wl-check1-1-ps1"}, "count": 4},
                    {"podTemplateRef": {"name": "ppt-wl-check1-1-ps2"}, "count": 3}]}


def test_parameters_are_always_a_map() -> None:
    assert request_parameters({"provisioningClassName": "c"}, WL) == {}


@pytest.mark.parametrize(("spec", "prc", "synced"), [
    ({"provisioningClassName": "c", "parameters": {"a": "1", "b": "2"}},
     {"provisioningClassName": "c", "parameters": {"a": "1"}}, True),
    ({"provisioningClassName": "c"}, {"provisioningClassName": "d"}, False),
    ({"provisioningClassName": "c", "parameters": {"a": "1"}},
     {"provisioningClassName": "c", "parameters": {"a": "2"}}, False),
    ({"provisioningClassName": "c"}, {"provisioningClassName": "c", "parameters": {"a": "1"}}, False),
], ids=["extra-request-params-ok", "class-changed", "param-changed", "param-added"])
def test_synced_with_config(spec: JSON, prc: JSON, synced: bool) -> None:
    assert synced_with_config({"spec": spec}, prc) is synced


REF = {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "prc"}


@pytest.mark.parametrize(("ref", "error", "missing"), [
    (None, "missing parameters reference", False),
    ({**REF, "name": ""}, "empty name: bad parameters reference", False),
    ({**REF, "apiGroup": "not-kueue.x-k8s.io"},
     'wrong group "not-kueue.x-k8s.io", expecting "kueue.x-k8s.io": bad parameters reference', False),
    ({**REF, "kind": "Other"}, 'wrong kind "Other", expecting "ProvisioningRequestConfig": bad parameters reference',
     False),
    ({**REF, "name": "absent"}, 'provisioningrequestconfigs.kueue.x-k8s.io "absent" not found', True),
    (REF, "", False),
], ids=["nil", "empty-name", "bad-group", "bad-kind", "not-found", "found"])
def test_config_from_ref(ref: JSON | None, error: str, missing: bool) -> None:
    lookup = config_from_ref(ref, {"prc": {"metadata": {"name": "prc"}}})
    assert (lookup.error, lookup.missing, lookup.config is not None) == (error, missing, not error)


@pytest.mark.parametrize(("spec", "want"), [
    ({}, RetryStrategy(3, 60, 1800)),
    ({"retryStrategy": {"backoffLimitCount": 0}}, RetryStrategy(0, 60, 1800)),
    ({"retryStrategy": {"backoffLimitCount": 1, "backoffBaseSeconds": 5, "backoffMaxSeconds": 9}},
     RetryStrategy(1, 5, 9)),
], ids=["defaults", "partial", "full"])
def test_retry_strategy(spec: JSON, want: RetryStrategy) -> None:
    assert retry_strategy(spec) == want


def _request(details: dict[str, str] | None = None) -> JSON:
    return {"metadata": {"name": "wl-check1-1"},
            "spec": {"provisioningClassName": "class1",
                     "podSets": [{"podTemplateRef": {"name": "ppt-wl-check1-1-ps1"}, "count": 7}]},
            "status": {"provisioningClassDetails": details or {}}}


ANNOTATIONS = {CONSUME: "wl-check1-1", CLASS: "class1"}


@pytest.mark.parametrize(("details", "prc_updates", "want"), [
    (None, None, [{"name": "ps1", "annotations": ANNOTATIONS}]),
    ({"rid": "r-1", "zone": "z"},
     {"nodeSelector": [{"key": "res", "valueFromProvisioningClassDetail": "rid"},
                       {"key": "topology.kubernetes.io/zone", "valueFromProvisioningClassDetail": "zone"}]},
     [{"name": "ps1", "annotations": ANNOTATIONS, "nodeSelector": {"res": "r-1", "topology.kubernetes.io/zone": "z"}}]),
    ({"zone": "z"}, {"nodeSelector": [{"key": "res", "valueFromProvisioningClassDetail": "rid"},
                                      {"key": "zone", "valueFromProvisioningClassDetail": "zone"}]},
     [{"name": "ps1", "annotations": ANNOTATIONS, "nodeSelector": {"zone": "z"}}]),
    ({}, {"nodeSelector": [{"key": "res", "valueFromProvisioningClassDetail": "rid"}]},
     [{"name": "ps1", "annotations": ANNOTATIONS}]),
], ids=["annotations-only", "node-selector-from-details", "missing-detail-skipped", "all-details-missing"])
def test_ready_pod_set_updates(details: dict[str, str] | None, prc_updates: JSON | None, want: list[JSON]) -> None:
    # ps2 was merged into ps1 (one request podSet): it gets no update, as in Kueue.
    prc: JSON = {"provisioningClassName": "class1"}
    if prc_updates is not None:
        prc["podSetUpdates"] = prc_updates
    assert ready_pod_set_updates(WL, _request(details), prc) == want
