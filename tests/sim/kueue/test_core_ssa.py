"""Writing only the fields a manager owns: projecting live objects through managedFields."""

from __future__ import annotations

from typing import Any

from gangscale.sim.kueue.ssa import apply_body, leftovers, owned, project

LIVE: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {"name": "w", "namespace": "ns", "uid": "u", "resourceVersion": "7", "managedFields": [
        {"manager": "kueue-admission", "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": {
            "f:admission": {"f:clusterQueue": {}, "f:podSetAssignments": {}},
            "f:admissionChecks": {"k:{\"name\":\"prov\"}": {".": {}, "f:name": {}, "f:retryCount": {}}},
            "f:conditions": {"k:{\"type\":\"QuotaReserved\"}": {".": {}, "f:type": {}, "f:status": {}}},
            "f:tags": {"v:\"a\"": {}}, "f:slots": {"i:1": {"f:x": {}}}}}},
        {"manager": "kueue.x-k8s.io/provisioning-request", "operation": "Apply", "subresource": "status",
         "fieldsV1": {"f:status": {"f:admissionChecks": {"k:{\"name\":\"prov\"}": {".": {}, "f:state": {}}}}}},
        {"manager": "kueue-admission", "operation": "Update", "fieldsV1": {"f:spec": {"f:active": {}}}}]},
    "spec": {"active": False},
    "status": {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]},
        "admissionChecks": [{"name": "prov", "state": "Ready", "retryCount": 1, "podSetUpdates": [{"name": "x"}]},
                            {"name": "other", "state": "Pending"}],
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                       {"type": "Finished", "status": "True"}],
        "tags": ["a", "b"], "slots": [{"x": 0, "y": 0}, {"x": 1, "y": 1}],
    },
}


def test_owned_takes_exactly_the_managers_fields() -> None:
    assert owned(LIVE, "kueue-admission") == {"status": {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]},
        "admissionChecks": [{"name": "prov", "retryCount": 1}],
        "conditions": [{"type": "QuotaReserved", "status": "True"}],
        "tags": ["a"], "slots": [{"x": 1}]}}
    assert owned(LIVE, "kueue.x-k8s.io/provisioning-request") == {
        "status": {"admissionChecks": [{"name": "prov", "state": "Ready"}]}}
    assert owned(LIVE, "nobody") == {}
    # Update entries are not apply ownership; the main resource has none for this manager
    assert owned(LIVE, "kueue-admission", subresource="") == {}


def test_project_skips_what_is_gone() -> None:
    fields: dict[str, Any] = {"f:a": {}, "f:gone": {}, "f:list": {"k:{\"name\":\"missing\"}": {"f:name": {}}}}
    assert project({"a": 1, "list": []}, fields) == {"a": 1, "list": []}
    assert project(5, {}) == 5


def test_apply_body_carries_preconditions() -> None:
    body = apply_body(LIVE, {"status": {"x": 1}})
    assert body == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "metadata": {"name": "w", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
                    "status": {"x": 1}}


def test_leftovers_guards_indexes_and_removes_entries_last() -> None:
    ops = leftovers(LIVE, ["admission", "requeueState"], {"prov": {"podSetUpdates", "message"}}, {"other"})
    assert ops == [
        {"op": "remove", "path": "/status/admission"},
        {"op": "test", "path": "/status/admissionChecks/0/name", "value": "prov"},
        {"op": "remove", "path": "/status/admissionChecks/0/podSetUpdates"},
        {"op": "test", "path": "/status/admissionChecks/1/name", "value": "other"},
        {"op": "remove", "path": "/status/admissionChecks/1"},
    ]
    assert leftovers(LIVE, [], {}, []) == []
