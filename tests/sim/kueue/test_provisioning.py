"""The provisioning admission check component against the embedded API server: what it creates for a Workload
that holds quota (spec §7 scenarios 22-26), the AdmissionCheck ``Active`` condition (35), create errors."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.kube.resources import ADMISSIONCHECKS, PODTEMPLATES, PROVREQCONFIGS, PROVREQS, RESOURCEFLAVORS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.world import CHECK, PR_CREATED
from tests.sim.kueue.test_prov_support import (
    NOW,
    TOLERATION,
    Kube,
    admission_check,
    assignment,
    check_entry,
    component,
    condition,
    config,
    container,
    flavor,
    pod_set,
    reserve,
    setup,
    workload,
)

JSON = dict[str, Any]
GPU = "example.org/gpu"


async def test_no_request_without_quota_reservation(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube)
    await kube.workload_status(admissionChecks=[check_entry()])
    comp, _ = component(http)
    await comp.sync(NOW)  # writes the AdmissionCheck's Active condition, and nothing for the Workload
    assert await kube.names(PROVREQS) == []
    assert await kube.names(PODTEMPLATES) == []
    assert await kube.check() == check_entry()
    assert await comp.sync(NOW + 1) is False


async def test_request_and_templates_shape_and_ownership(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube, wl=workload(pod_sets=[pod_set("ps1", 4), pod_set("ps2", 3, container(None, {"cpu": "2"}))]))
    wl = await reserve(kube)
    comp, timeline = component(http)

    assert await comp.sync(NOW) is True

    assert await kube.names(PROVREQS) == ["wl-check1-1"]
    pr = await kube.get(PROVREQS, "wl-check1-1")
    assert pr is not None
    assert pr["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
    assert pr["metadata"]["ownerReferences"] == [{
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "wl",
        "uid": wl["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert pr["spec"] == {"provisioningClassName": "class1", "parameters": {"p1": "v1"},
                          "podSets": [{"podTemplateRef": {"name": "ppt-wl-check1-1-ps1"}, "count": 4},
                                      {"podTemplateRef": {"name": "ppt-wl-check1-1-ps2"}, "count": 3}]}
    assert "status" not in pr or not pr["status"].get("conditions")

    assert await kube.names(PODTEMPLATES) == ["ppt-wl-check1-1-ps1", "ppt-wl-check1-1-ps2"]
    for name in ("ppt-wl-check1-1-ps1", "ppt-wl-check1-1-ps2"):
        pt = await kube.get(PODTEMPLATES, name)
        assert pt is not None
        assert pt["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
        assert pt["metadata"]["ownerReferences"] == [{
            "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "name": "wl-check1-1",
            "uid": pr["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        assert pt["template"]["spec"]["nodeSelector"] == {"f1l1": "v1"}
        assert pt["template"]["spec"]["tolerations"] == [TOLERATION]
    ps2 = await kube.get(PODTEMPLATES, "ppt-wl-check1-1-ps2")
    assert ps2 is not None
    assert ps2["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2"}

    assert await kube.events("ProvisioningRequestCreated") == ['Created ProvisioningRequest: "wl-check1-1"']
    assert [(e.kind, e.subject, e.data) for e in timeline.entries] == [
        (PR_CREATED, "default/wl", {"name": "wl-check1-1"})]
    # The request has no condition yet and the check is Pending with no message: nothing more to do.
    assert await comp.sync(NOW + 1) is False
    assert await kube.check() == check_entry()


async def test_workload_annotations_become_parameters(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube, wl=workload(annotations={"provreq.kueue.x-k8s.io/ValidUntilSeconds": "0",
                                               "provreq.kueue.x-k8s.io/p1": "override", "unrelated": "x"}))
    await reserve(kube)
    comp, _ = component(http)
    await comp.sync(NOW)
    pr = await kube.get(PROVREQS, "wl-check1-1")
    assert pr is not None
    assert pr["spec"]["parameters"] == {"p1": "override", "ValidUntilSeconds": "0"}


async def test_no_request_needed_when_no_pod_set_uses_a_managed_resource(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube, prc=config(managedResources=[GPU]))
    await reserve(kube)
    comp, timeline = component(http)
    assert await comp.sync(NOW + 5) is True
    assert await kube.names(PROVREQS) == []
    assert await kube.check() == check_entry(state="Ready", message="the provisioning request is not needed")
    assert await kube.events("AdmissionCheckUpdated") == [
        "Admission check check1 updated state from Pending to Ready with message: the provisioning request is not "
        "needed"]
    assert [(e.kind, e.data) for e in timeline.of(CHECK)] == [(CHECK, {"check": "check1", "state": "Ready"})]
    assert await comp.sync(NOW + 6) is False


@pytest.mark.parametrize("gpu_container", [container({"cpu": "1", GPU: "1"}), container({"cpu": "1"}, {GPU: "1"})],
                         ids=["request", "limit"])
async def test_only_pod_sets_using_a_managed_resource_are_requested(http: KubeHTTP, gpu_container: JSON) -> None:
    kube = Kube(http)
    await setup(kube, prc=config(managedResources=[GPU]),
                wl=workload(pod_sets=[pod_set("ps1", 4), pod_set("ps2", 3, gpu_container)]))
    await reserve(kube)
    comp, _ = component(http)
    await comp.sync(NOW)
    pr = await kube.get(PROVREQS, "wl-check1-1")
    assert pr is not None
    assert pr["spec"]["podSets"] == [{"podTemplateRef": {"name": "ppt-wl-check1-1-ps2"}, "count": 3}]
    assert await kube.names(PODTEMPLATES) == ["ppt-wl-check1-1-ps2"]


async def test_merge_policy_folds_identical_pod_sets(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube, prc=config(podSetMergePolicy="IdenticalWorkloadSchedulingRequirements"),
                wl=workload(pod_sets=[pod_set("ps1", 4, labels={"role": "a"}),
                                      pod_set("ps2", 3, labels={"role": "b"})]))
    await reserve(kube)
    comp, _ = component(http)
    await comp.sync(NOW)
    pr = await kube.get(PROVREQS, "wl-check1-1")
    assert pr is not None
    assert pr["spec"]["podSets"] == [{"podTemplateRef": {"name": "ppt-wl-check1-1-ps1"}, "count": 7}]
    assert await kube.names(PODTEMPLATES) == ["ppt-wl-check1-1-ps1"]

    await kube.provisioner("wl-check1-1", condition("Accepted"), condition("Provisioned", message="done"))
    assert await comp.sync(NOW + 1) is True
    check = await kube.check()
    assert [u["name"] for u in check["podSetUpdates"]] == ["ps1"]


async def test_admitted_counts_are_requested(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube)
    await reserve(kube, assignments=[assignment("ps1", 2), assignment("ps2")])
    comp, _ = component(http)
    await comp.sync(NOW)
    pr = await kube.get(PROVREQS, "wl-check1-1")
    assert pr is not None
    assert [p["count"] for p in pr["spec"]["podSets"]] == [2, 3]


AC_CASES = [
    ("no-parameters", admission_check(prc=None), "missing parameters reference"),
    ("empty-name", admission_check(parameters={"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                               "name": ""}), "empty name: bad parameters reference"),
    ("bad-group", admission_check(parameters={"apiGroup": "example.com", "kind": "ProvisioningRequestConfig",
                                              "name": "prc"}),
     'wrong group "example.com", expecting "kueue.x-k8s.io": bad parameters reference'),
    ("bad-kind", admission_check(parameters={"apiGroup": "kueue.x-k8s.io", "kind": "Other", "name": "prc"}),
     'wrong kind "Other", expecting "ProvisioningRequestConfig": bad parameters reference'),
    ("config-missing", admission_check(prc="later"), 'provisioningrequestconfigs.kueue.x-k8s.io "later" not found'),
]


@pytest.mark.parametrize(("ac", "message"), [(a, m) for _, a, m in AC_CASES], ids=[i for i, _, _ in AC_CASES])
async def test_admission_check_bad_parameters_ref(http: KubeHTTP, ac: JSON, message: str) -> None:
    kube = Kube(http)
    await kube.create(ADMISSIONCHECKS, ac)
    await kube.create(ADMISSIONCHECKS, admission_check("other", controller="example.com/other"))
    comp, _ = component(http)
    assert await comp.sync(NOW) is True
    got = await kube.get(ADMISSIONCHECKS, "check1", None)
    assert got is not None
    [cond] = got["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "Active", "False", "BadParametersRef", message)
    other = await kube.get(ADMISSIONCHECKS, "other", None)
    assert other is not None and not (other.get("status") or {}).get("conditions")
    assert await comp.sync(NOW + 1) is False


async def test_admission_check_becomes_active_once_its_config_exists(http: KubeHTTP) -> None:
    kube = Kube(http)
    await kube.create(ADMISSIONCHECKS, admission_check(prc="later"))
    comp, _ = component(http)
    await comp.sync(NOW)
    await kube.create(PROVREQCONFIGS, config("later"))
    assert await comp.sync(NOW + 10) is True
    got = await kube.get(ADMISSIONCHECKS, "check1", None)
    assert got is not None
    [cond] = got["status"]["conditions"]
    assert (cond["status"], cond["reason"], cond["message"], cond["lastTransitionTime"]) == (
        "True", "Active", "The admission check is active", "2025-10-09T08:53:30Z")
    assert await comp.sync(NOW + 11) is False


async def test_failed_create_is_reported_on_the_check_and_cleared_later(http: KubeHTTP) -> None:
    kube = Kube(http)
    await setup(kube, flavors=[])
    await reserve(kube)
    comp, _ = component(http)

    assert await comp.sync(NOW) is True
    message = 'Error creating PodTemplate "ppt-wl-check1-1-ps1": resourceflavors.kueue.x-k8s.io "flv1" not found'
    assert await kube.check() == check_entry(message=message)
    assert await kube.events("FailedCreate") == [message]
    assert await kube.names(PROVREQS) == []
    assert await comp.sync(NOW + 1) is False  # same error, nothing new to write

    # Once the flavor exists the request is created; with no condition on it the stale message goes (scenario 38).
    await kube.create(RESOURCEFLAVORS, flavor("flv1", {"f1l1": "v1"}))
    assert await comp.sync(NOW + 2) is True
    assert await kube.names(PROVREQS) == ["wl-check1-1"]
    assert (await kube.check())["message"] == message
    assert await comp.sync(NOW + 3) is True
    assert await kube.check() == check_entry()
    assert await comp.sync(NOW + 4) is False
