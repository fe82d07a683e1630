"""provreq-spec §7 scenarios 22-26, 34 and 35: when Kueue's provisioning admission check creates a
ProvisioningRequest, what it looks like, and how it follows its ProvisioningRequestConfig — with Kueue emulated
and the real gangscale controller serving the requests it creates."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangscale.kube.resources import ADMISSIONCHECKS, CLUSTERQUEUES, PROVREQCONFIGS, WORKLOADS
from tests.e2e.harness import (
    ATOMIC,
    CHECK_CAPACITY,
    CHECK_NAME,
    CLASS_ANNOTATION,
    CONSUME,
    CQ,
    GPU,
    JSON,
    MANAGED_LABEL,
    PARAM_PREFIX,
    PRC_NAME,
    TOLERATION,
    admission_check,
    cluster,
    cluster_queue,
    conditions,
    config_ref,
    is_true,
    name_of,
    pod_set,
    prc,
    workload,
)


def _meta(obj: JSON) -> JSON:
    return dict(obj.get("metadata") or {})


async def test_s22_no_request_before_quota_is_reserved(tmp_path: Path) -> None:
    """A Workload whose ClusterQueue cannot hold it gets no ProvisioningRequest (and no PodTemplates); the
    request appears as soon as the quota is raised and Kueue reserves it."""
    async with cluster(tmp_path) as e:
        await e.setup(cq=cluster_queue(gpus=8))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)]))  # 16 GPUs > 8
        await e.advance(120)

        wl = await e.workload()
        reserved = conditions(wl)["QuotaReserved"]
        assert (reserved["status"], reserved["reason"]) == ("False", "Pending")
        assert "insufficient quota for nvidia.com/gpu in flavor gpu" in reserved["message"]
        assert await e.requests() == []
        assert await e.templates() == []
        assert await e.check() is None
        assert await e.events("ProvisioningRequestCreated") == []

        await e.merge(CLUSTERQUEUES, CQ, {"spec": {"resourceGroups": cluster_queue(gpus=64)["spec"]["resourceGroups"]}})
        await e.settle()
        assert is_true(await e.workload(), "QuotaReserved")
        assert [name_of(pr) for pr in await e.requests()] == ["wl-prov-1"]


async def test_s23_request_and_templates_on_quota_reservation(tmp_path: Path) -> None:
    """Quota reserved: request ``<wl>-<check>-1`` owned by the Workload, class and parameters from the config, one
    podSet per Workload podSet with the admitted count, PodTemplates owned by the request carrying the flavor's
    node labels and tolerations, event ``ProvisioningRequestCreated``; gangscale serves it to Ready."""
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(params={"bookingSeconds": "900"}))
        pod_sets = [pod_set("workers", 2), pod_set("launcher", 1, {"cpu": "1"})]
        created = await e.create(WORKLOADS, workload("wl", pod_sets))
        await e.settle()

        wl = await e.workload()
        assigned = {a["name"]: a.get("count") for a in wl["status"]["admission"]["podSetAssignments"]}
        assert assigned == {"workers": 2, "launcher": 1}
        [pr] = await e.requests()
        meta = _meta(pr)
        assert meta["name"] == f"wl-{CHECK_NAME}-1"
        assert meta["labels"] == {MANAGED_LABEL: "true"}
        assert meta["ownerReferences"] == [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "wl",
                                            "uid": _meta(created)["uid"], "controller": True,
                                            "blockOwnerDeletion": True}]
        assert pr["spec"]["provisioningClassName"] == ATOMIC
        assert pr["spec"]["parameters"] == {"bookingSeconds": "900"}
        assert pr["spec"]["podSets"] == [{"podTemplateRef": {"name": "ppt-wl-prov-1-workers"}, "count": 2},
                                         {"podTemplateRef": {"name": "ppt-wl-prov-1-launcher"}, "count": 1}]

        templates = {name_of(t): t for t in await e.templates()}
        assert sorted(templates) == ["ppt-wl-prov-1-launcher", "ppt-wl-prov-1-workers"]
        for name, ps in (("ppt-wl-prov-1-workers", "workers"), ("ppt-wl-prov-1-launcher", "launcher")):
            t = templates[name]
            assert _meta(t)["labels"] == {MANAGED_LABEL: "true"}
            assert [(r["kind"], r["name"], r["uid"], r.get("controller")) for r in _meta(t)["ownerReferences"]] == [
                ("ProvisioningRequest", meta["name"], meta["uid"], True)]
            spec = t["template"]["spec"]
            assert spec["nodeSelector"] == {"gangscale.io/node-pool": "gpu"}
            assert TOLERATION in spec["tolerations"]
            wanted = next(p for p in wl["spec"]["podSets"] if p["name"] == ps)
            assert spec["containers"][0]["resources"] == wanted["template"]["spec"]["containers"][0]["resources"]
        assert await e.events("ProvisioningRequestCreated", "wl") == ['Created ProvisioningRequest: "wl-prov-1"']

        # The real controller took it: accepted at once, Ready (and admitted) once its nodes are.
        assert is_true(await e.request("wl-prov-1"), "Accepted")
        await e.until(e.admitted, within=120, what="check Ready and Workload admitted")
        assert len(await e.nodes()) == 2


async def test_s24_parameters_from_workload_annotations(tmp_path: Path) -> None:
    """``provreq.kueue.x-k8s.io/*`` annotations become parameters (prefix stripped) next to the config's; other
    annotations are ignored. gangscale does not act on ``ValidUntilSeconds`` and provisions the request anyway."""
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(params={"bookingSeconds": "900"}))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 1)], annotations={
            f"{PARAM_PREFIX}ValidUntilSeconds": "0", "ValidUntilSeconds": "7", "example.com/team": "vision"}))
        await e.settle()

        [pr] = await e.requests()
        assert pr["spec"]["parameters"] == {"bookingSeconds": "900", "ValidUntilSeconds": "0"}
        await e.until(e.admitted, within=120, what="check Ready")


@pytest.mark.parametrize(("case", "main"), [
    ("not-needed", None),
    ("request", pod_set("workers", 2, {"cpu": "4", GPU: "8"})),
    ("limit", pod_set("workers", 2, limits={"cpu": "4", GPU: "8"})),
], ids=["not-needed", "request", "limit"])
async def test_s25_managed_resources(tmp_path: Path, case: str, main: JSON | None) -> None:
    """``managedResources``: a Workload that uses none gets no request and a Ready check ("the provisioning request
    is not needed"), and is admitted; otherwise only the podSets that use one (by request or by limit) are in the
    request, and only they get podSetUpdates."""
    async with cluster(tmp_path) as e:
        managed = ["example.org/gpu"] if main is None else [GPU]
        await e.setup(config=prc(managedResources=managed))
        await e.create(WORKLOADS, workload("wl", [*([main] if main else []),
                                                 pod_set("launcher", 1, {"cpu": "1"})]))
        if case == "not-needed":
            await e.settle()
            assert await e.requests() == []
            assert await e.templates() == []
            entry = await e.check()
            assert entry is not None
            assert (entry["state"], entry["message"]) == ("Ready", "the provisioning request is not needed")
            assert "podSetUpdates" not in entry
            assert is_true(await e.workload(), "Admitted")
            return
        await e.settle()
        [pr] = await e.requests()
        assert pr["spec"]["podSets"] == [{"podTemplateRef": {"name": "ppt-wl-prov-1-workers"}, "count": 2}]
        assert [name_of(t) for t in await e.templates()] == ["ppt-wl-prov-1-workers"]
        await e.until(e.admitted, within=120, what="check Ready")
        entry = await e.check()
        assert entry is not None
        assert [u["name"] for u in entry["podSetUpdates"]] == ["workers"]


async def test_s26_identical_scheduling_requirements_are_merged(tmp_path: Path) -> None:
    """``podSetMergePolicy: IdenticalWorkloadSchedulingRequirements``: podSets with equal requests, selectors and
    tolerations (their labels differ) become one request podSet with the summed count, named after the first; a
    podSet with other requests stays apart. gangscale provisions the merged gang whole."""
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(podSetMergePolicy="IdenticalWorkloadSchedulingRequirements"))
        await e.create(WORKLOADS, workload("wl", [pod_set("a", 2), pod_set("b", 1), pod_set("c", 1, {"cpu": "1"})]))
        await e.settle()

        [pr] = await e.requests()
        assert pr["spec"]["podSets"] == [{"podTemplateRef": {"name": "ppt-wl-prov-1-a"}, "count": 3},
                                         {"podTemplateRef": {"name": "ppt-wl-prov-1-c"}, "count": 1}]
        assert [name_of(t) for t in await e.templates()] == ["ppt-wl-prov-1-a", "ppt-wl-prov-1-c"]
        await e.until(e.admitted, within=120, what="check Ready")
        assert len(await e.nodes()) == 3
        entry = await e.check()
        assert entry is not None
        updates = {u["name"]: u["annotations"] for u in entry["podSetUpdates"]}
        assert updates["a"] == {CONSUME: "wl-prov-1", CLASS_ANNOTATION: ATOMIC}


@pytest.mark.parametrize(("changed", "expect"), [
    ({"provisioningClassName": CHECK_CAPACITY}, (CHECK_CAPACITY, {"bookingSeconds": "600"})),
    ({"parameters": {"bookingSeconds": "300"}}, (ATOMIC, {"bookingSeconds": "300"})),
], ids=["class", "parameters"])
async def test_s34_request_follows_its_config(tmp_path: Path, changed: JSON, expect: tuple[str, JSON]) -> None:
    """While the check is Pending (gangscale cannot place the gang), a change of the config's class or parameters
    replaces the request by one with the new values and the same attempt number; re-pointing the AdmissionCheck
    at a missing config deletes the request and the check says ``the check is not active``."""
    async with cluster(tmp_path) as e:
        await e.setup(config=prc(params={"bookingSeconds": "600"}))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 6)]))  # 6 GPU nodes: more than the pool has
        await e.settle()
        [old] = await e.requests()
        assert conditions(old)["Provisioned"]["reason"] == "CapacityIsNotFound"
        assert await e.check_state() == "Pending"

        await e.merge(PROVREQCONFIGS, PRC_NAME, {"spec": changed})
        await e.settle()
        [new] = await e.requests()
        assert name_of(new) == "wl-prov-1"
        assert _meta(new)["uid"] != _meta(old)["uid"]
        assert (new["spec"]["provisioningClassName"], new["spec"]["parameters"]) == expect
        assert is_true(new, "Accepted")  # gangscale serves the new class too
        assert await e.check_state() == "Pending"
        assert len(await e.events("ProvisioningRequestCreated", "wl")) == 2

        await e.merge(ADMISSIONCHECKS, CHECK_NAME, {"spec": {"parameters": config_ref("no-such-config")}})
        await e.settle()
        assert await e.requests() == []
        assert await e.templates() == []
        entry = await e.check()
        assert entry is not None
        assert (entry["state"], entry["message"]) == ("Pending", "the check is not active")


@pytest.mark.parametrize(("ref", "message"), [
    (config_ref("later"), 'provisioningrequestconfigs.kueue.x-k8s.io "later" not found'),
    (config_ref(group="example.com"),
     'wrong group "example.com", expecting "kueue.x-k8s.io": bad parameters reference'),
    (config_ref(kind="ConfigMap"),
     'wrong kind "ConfigMap", expecting "ProvisioningRequestConfig": bad parameters reference'),
], ids=["config-missing", "bad-group", "bad-kind"])
async def test_s35_admission_check_active_condition(tmp_path: Path, ref: JSON, message: str) -> None:
    """An AdmissionCheck whose parameters do not resolve to a config is ``Active=False/BadParametersRef`` (and its
    ClusterQueue admits nothing); once it points at an existing config it is ``Active=True/Active`` and the
    Workload gets its request and is admitted."""
    async with cluster(tmp_path) as e:
        await e.setup(with_config=False, check=admission_check(ref=ref))
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 1)]))
        await e.settle()

        active = conditions(await e.get(ADMISSIONCHECKS, CHECK_NAME))["Active"]
        assert (active["status"], active["reason"], active["message"]) == ("False", "BadParametersRef", message)
        assert not is_true(await e.get(CLUSTERQUEUES, CQ), "Active")
        assert not is_true(await e.workload(), "QuotaReserved")
        assert await e.requests() == []

        await e.create(PROVREQCONFIGS, prc(name="later"))
        await e.merge(ADMISSIONCHECKS, CHECK_NAME, {"spec": {"parameters": config_ref("later")}})
        await e.settle()
        active = conditions(await e.get(ADMISSIONCHECKS, CHECK_NAME))["Active"]
        assert (active["status"], active["reason"], active["message"]) == ("True", "Active",
                                                                           "The admission check is active")
        assert [name_of(pr) for pr in await e.requests()] == ["wl-prov-1"]
        await e.until(e.admitted, within=120, what="check Ready")
