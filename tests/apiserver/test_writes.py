"""Patch types, server-side apply, the status subresource and CRD validation, over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from tests import builders as b

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


async def _pr(http: KubeHTTP, name: str = "pr1") -> JSON:
    return await http.request("POST", b.PROVREQS.path("default"), body=b.provreq(name))


async def apply_status(http: KubeHTTP, manager: str, conditions: list[JSON], *, force: bool = False,
                       name: str = "pr1") -> JSON:
    body = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": "default"}, "status": {"conditions": conditions}}
    return await http.request("PATCH", b.PROVREQS.path("default", name, "status"), body=body,
                              content_type=APPLY, query={"fieldManager": manager, "force": force or None})


async def test_json_patch_and_failed_test_op(http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    out = await http.request("PATCH", b.NODES.path(name="n1"), content_type=JSONPATCH,
                             body=[{"op": "add", "path": "/metadata/labels", "value": {"pool": "a3"}}])
    assert out["metadata"]["labels"] == {"pool": "a3"}
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", b.NODES.path(name="n1"), content_type=JSONPATCH,
                           body=[{"op": "test", "path": "/metadata/labels/pool", "value": "other"}])
    assert err.value.status == 422


async def test_strategic_merge_merges_containers_by_name(http: KubeHTTP) -> None:
    await http.request("POST", b.PODTEMPLATES.path("default"), body={
        "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
        "template": {"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}})
    out = await http.request("PATCH", b.PODTEMPLATES.path("default", "t"), content_type=SMP,
                             body={"template": {"spec": {"containers": [{"name": "b", "image": "b:2"}]}}})
    images = {c["name"]: c["image"] for c in out["template"]["spec"]["containers"]}
    assert images == {"a": "a:1", "b": "b:2"}
    merged = await http.request("PATCH", b.PODTEMPLATES.path("default", "t"), content_type=MERGE,
                                body={"template": {"spec": {"containers": [{"name": "b", "image": "b:3"}]}}})
    assert [c["name"] for c in merged["template"]["spec"]["containers"]] == ["b"]  # merge patch replaces lists


async def test_strategic_merge_patch_is_415_for_custom_resources(http: KubeHTTP) -> None:
    await _pr(http)
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", b.PROVREQS.path("default", "pr1"), content_type=SMP,
                           body={"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 415 and err.value.reason == "UnsupportedMediaType"


async def test_main_endpoint_ignores_status_and_status_endpoint_ignores_spec(http: KubeHTTP) -> None:
    await _pr(http)
    out = await http.request("PATCH", b.PROVREQS.path("default", "pr1"), content_type=MERGE,
                             body={"status": {"conditions": [b.condition("Provisioned")]}})
    assert "status" not in out or not out["status"].get("conditions")
    out = await http.request("PATCH", b.PROVREQS.path("default", "pr1", "status"), content_type=MERGE,
                             body={"spec": {"provisioningClassName": "other.example.com"},
                                   "metadata": {"labels": {"ignored": "yes"}},
                                   "status": {"conditions": [b.condition("Accepted")]}})
    assert out["spec"]["provisioningClassName"] == "atomic-scale-up.gangscale.io"
    assert "ignored" not in (out["metadata"].get("labels") or {})
    assert [c["type"] for c in out["status"]["conditions"]] == ["Accepted"]


async def test_create_drops_status_of_custom_resources_with_status_subresource(http: KubeHTTP) -> None:
    body = b.provreq("pr1")
    body["status"] = {"conditions": [b.condition("Provisioned")]}
    out = await http.request("POST", b.PROVREQS.path("default"), body=body)
    assert "status" not in out


async def test_server_side_apply_merges_conditions_by_type_across_managers(http: KubeHTTP) -> None:
    await _pr(http)
    await apply_status(http, "gangscale", [b.condition("Accepted"), b.condition("Provisioned", "False",
                                                                                 "CapacityIsNotFound")])
    out = await apply_status(http, "other", [b.condition("Failed", "False", "NotFailed")])
    assert [c["type"] for c in out["status"]["conditions"]] == ["Accepted", "Provisioned", "Failed"]
    managers = {(m["manager"], m["operation"], m.get("subresource")) for m in out["metadata"]["managedFields"]}
    assert ("gangscale", "Apply", "status") in managers and ("other", "Apply", "status") in managers
    mine = next(m for m in out["metadata"]["managedFields"] if m["manager"] == "gangscale")
    owned = mine["fieldsV1"]["f:status"]["f:conditions"]
    assert 'k:{"type":"Provisioned"}' in owned and 'k:{"type":"Failed"}' not in owned


async def test_server_side_apply_conflict_and_force(http: KubeHTTP) -> None:
    await _pr(http)
    await apply_status(http, "gangscale", [b.condition("Provisioned", "False", "CapacityIsNotFound")])
    with pytest.raises(ApiError) as err:
        await apply_status(http, "intruder", [b.condition("Provisioned", "True", "CapacityIsProvisioned")])
    assert err.value.status == 409 and err.value.reason == "Conflict"
    assert "intruder" not in err.value.message and "gangscale" in err.value.message
    out = await apply_status(http, "intruder", [b.condition("Provisioned", "True", "CapacityIsProvisioned")],
                             force=True)
    assert out["status"]["conditions"][0]["status"] == "True"


async def test_server_side_apply_same_value_is_shared_not_conflict(http: KubeHTTP) -> None:
    await _pr(http)
    cond = b.condition("Accepted")
    await apply_status(http, "a", [cond])
    out = await apply_status(http, "b", [cond])
    assert {m["manager"] for m in out["metadata"]["managedFields"]} >= {"a", "b"}


async def test_apply_dropping_a_condition_removes_it(http: KubeHTTP) -> None:
    await _pr(http)
    await apply_status(http, "gangscale", [b.condition("Accepted"), b.condition("Provisioned")])
    out = await apply_status(http, "gangscale", [b.condition("Accepted")])
    assert [c["type"] for c in out["status"]["conditions"]] == ["Accepted"]


async def test_apply_creates_and_requires_field_manager(http: KubeHTTP) -> None:
    body = b.provreq("applied")
    body["metadata"]["namespace"] = "default"
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", b.PROVREQS.path("default", "applied"), body=body, content_type=APPLY)
    assert err.value.status in (400, 422)
    out = await http.request("PATCH", b.PROVREQS.path("default", "applied"), body=body, content_type=APPLY,
                             query={"fieldManager": "kueue"})
    assert out["metadata"]["generation"] == 1
    assert out["metadata"]["managedFields"][0]["manager"] == "kueue"
    assert out["metadata"]["managedFields"][0]["operation"] == "Apply"


async def test_update_records_managed_fields_by_manager(http: KubeHTTP) -> None:
    out = await http.request("POST", b.NODES.path(), body=b.node("n1"), query={"fieldManager": "creator"})
    assert [(m["manager"], m["operation"]) for m in out["metadata"]["managedFields"]] == [("creator", "Update")]


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda s: s["status"]["conditions"][0].update(reason="has spaces"), "status.conditions[0].reason"),
    (lambda s: s["status"]["conditions"][0].pop("message"), "status.conditions[0].message"),
    (lambda s: s["status"]["conditions"][0].update(status="Maybe"), "status.conditions[0].status"),
], ids=["reason-pattern", "message-required", "status-enum"])
async def test_provreq_status_condition_validation(http: KubeHTTP, mutate: Any, field: str) -> None:
    await _pr(http)
    body: JSON = {"status": {"conditions": [b.condition("Accepted", message="ok")]}}
    mutate(body)
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", b.PROVREQS.path("default", "pr1", "status"), body=body, content_type=MERGE)
    assert err.value.status == 422 and err.value.reason == "Invalid"
    assert field in [c.get("field") for c in err.value.body["details"]["causes"]]


@pytest.mark.parametrize(("spec_patch", "field"), [
    ({"podSets": []}, "spec.podSets"),
    ({"podSets": [{"podTemplateRef": {"name": "t"}, "count": 0}]}, "spec.podSets[0].count"),
], ids=["empty-podsets", "count-zero"])
async def test_provreq_spec_bounds_on_create(http: KubeHTTP, spec_patch: JSON, field: str) -> None:
    body = b.provreq("bad")
    body["spec"].update(spec_patch)
    with pytest.raises(ApiError) as err:
        await http.request("POST", b.PROVREQS.path("default"), body=body)
    assert err.value.status == 422
    assert field in [c.get("field") for c in err.value.body["details"]["causes"]]


async def test_provreq_count_beyond_int32_is_a_range_error_at_the_nil_path(http: KubeHTTP) -> None:
    # Kubernetes 1.36's kube-openapi range-checks format int32; the error is a plain Go error, which
    # apiextensions reports at the nil field path (see gangscale.sim.apiserver.validation).
    with pytest.raises(ApiError) as err:
        await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("big", count=2 ** 31))
    detail = 'Invalid value: "": Checked value must be of type integer with format int32 in spec.podSets[0].count'
    assert (err.value.status, err.value.reason) == (422, "Invalid")
    assert err.value.message == f'ProvisioningRequest.autoscaling.x-k8s.io "big" is invalid: <nil>: {detail}'
    assert err.value.body["details"]["causes"] == [{"reason": "FieldValueInvalid", "message": detail,
                                                    "field": "<nil>"}]
    created = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("max", count=2 ** 31 - 1))
    assert created["spec"]["podSets"][0]["count"] == 2 ** 31 - 1


async def test_provreq_spec_is_immutable(http: KubeHTTP) -> None:
    await _pr(http)
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", b.PROVREQS.path("default", "pr1"), content_type=MERGE,
                           body={"spec": {"podSets": [{"podTemplateRef": {"name": "tmpl"}, "count": 2}]}})
    assert err.value.status == 422
    assert "immutable" in err.value.message


async def test_strict_field_validation_rejects_unknown_fields(http: KubeHTTP) -> None:
    body = b.provreq("pr1")
    body["spec"]["bogus"] = 1
    with pytest.raises(ApiError) as err:
        await http.request("POST", b.PROVREQS.path("default"), body=body, query={"fieldValidation": "Strict"})
    assert err.value.status == 400 and "bogus" in err.value.message
    out = await http.request("POST", b.PROVREQS.path("default"), body=body, query={"fieldValidation": "Ignore"})
    assert "bogus" not in out["spec"]  # pruned, as structural schemas prune
