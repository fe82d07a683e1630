"""batch/v1 Jobs and jobset.x-k8s.io/v1alpha2 JobSets are served: create, get, list, status, discovery."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, BatchV1Api

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import JOBS, JOBSETS
from gangscale.kube.transport import KubeHTTP

JSON = dict[str, Any]
NS = "default"
MERGE = "application/merge-patch+json"


def job(name: str, **spec: Any) -> JSON:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": template, **spec}}


def jobset(name: str) -> JSON:
    rjob = {"name": "workers", "replicas": 2,
            "template": {"spec": {"parallelism": 2, "template": {"spec": {
                "containers": [{"name": "main", "image": "busybox:1.36"}]}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"suspend": True, "replicatedJobs": [rjob]}}


async def test_job_create_defaults_selector_labels_and_generation(http: KubeHTTP) -> None:
    created = await http.request("POST", JOBS.path(NS), body=job("train"))
    meta, spec = created["metadata"], created["spec"]
    uid = meta["uid"]
    assert meta["generation"] == 1
    assert created["status"] == {}
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"], spec["completionMode"],
            spec["suspend"]) == (1, 1, 6, "NonIndexed", False)
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "train",
        "controller-uid": uid, "job-name": "train"}
    assert spec["template"]["spec"]["dnsPolicy"] == "ClusterFirst"  # pod spec defaults apply to the template


async def test_job_parallelism_without_completions_stays_a_work_queue(http: KubeHTTP) -> None:
    created = await http.request("POST", JOBS.path(NS), body=job("queue", parallelism=4))
    assert created["spec"]["parallelism"] == 4 and "completions" not in created["spec"]


async def test_job_rejects_restart_policy_always(http: KubeHTTP) -> None:
    body = job("bad")
    del body["spec"]["template"]["spec"]["restartPolicy"]
    with pytest.raises(ApiError) as err:
        await http.request("POST", JOBS.path(NS), body=body)
    assert err.value.status == 422
    # Upstream reports the defaulted Always as missing, not as an unsupported value.
    assert err.value.message == ('Job.batch "bad" is invalid: spec.template.spec.restartPolicy: Required value: '
                                 'valid values: "OnFailure", "Never"')


async def test_job_status_subresource_and_generation(http: KubeHTTP) -> None:
    await http.request("POST", JOBS.path(NS), body=job("train"))
    # A status write through the main endpoint is ignored; through /status it lands and keeps generation.
    main = await http.request("PATCH", JOBS.path(NS, "train"), body={"status": {"active": 3}}, content_type=MERGE)
    assert main["status"] == {}
    status = await http.request("PATCH", JOBS.path(NS, "train", "status"),
                                body={"status": {"active": 1}, "spec": {"parallelism": 9}}, content_type=MERGE)
    assert status["status"] == {"active": 1} and status["spec"]["parallelism"] == 1
    assert status["metadata"]["generation"] == 1
    bumped = await http.request("PATCH", JOBS.path(NS, "train"), body={"spec": {"suspend": True}},
                                content_type=MERGE)
    assert bumped["metadata"]["generation"] == 2 and bumped["status"] == {"active": 1}


async def test_job_list_and_typed_client(http: KubeHTTP, api_client: ApiClient) -> None:
    await http.request("POST", JOBS.path(NS), body=job("a"))
    await http.request("POST", JOBS.path(NS), body=job("b"))
    listing = await http.request("GET", JOBS.path(NS))
    assert listing["kind"] == "JobList" and [j["metadata"]["name"] for j in listing["items"]] == ["a", "b"]
    typed = await BatchV1Api(api_client).read_namespaced_job("a", NS)
    assert typed.spec.template.spec.restart_policy == "Never"


async def test_job_discovery(http: KubeHTTP) -> None:
    resources = (await http.request("GET", "/apis/batch/v1"))["resources"]
    by_name = {r["name"]: r for r in resources}
    assert by_name["jobs"]["kind"] == "Job" and by_name["jobs"]["namespaced"] is True
    assert by_name["jobs"]["categories"] == ["all"] and "shortNames" not in by_name["jobs"]
    assert "jobs/status" in by_name


async def test_jobset_create_get_list_status(http: KubeHTTP) -> None:
    created = await http.request("POST", JOBSETS.path(NS), body=jobset("js"))
    assert created["metadata"]["generation"] == 1 and "status" not in created
    got = await http.request("GET", JOBSETS.path(NS, "js"))
    assert got["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2  # unknown fields kept
    listing = await http.request("GET", JOBSETS.path(NS))
    assert listing["kind"] == "JobSetList" and len(listing["items"]) == 1
    cond = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
            "message": "jobset completed successfully", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    out = await http.request(
        "PATCH", JOBSETS.path(NS, "js", "status"),
        body={"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
              "status": {"conditions": [cond], "terminalState": "Completed"}},
        query={"fieldManager": "jobset", "force": "true"}, content_type="application/apply-patch+yaml")
    assert out["status"]["conditions"] == [cond] and out["metadata"]["generation"] == 1


async def test_jobset_condition_schema_is_enforced(http: KubeHTTP) -> None:
    await http.request("POST", JOBSETS.path(NS), body=jobset("js"))
    bad = {"type": "Completed", "status": "True", "reason": "has spaces", "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"}
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", JOBSETS.path(NS, "js", "status"), body={"status": {"conditions": [bad]}},
                           content_type=MERGE)
    assert err.value.status == 422


async def test_jobset_network_is_immutable(http: KubeHTTP) -> None:
    body = jobset("js")
    body["spec"]["network"] = {"enableDNSHostnames": True}
    await http.request("POST", JOBSETS.path(NS), body=body)
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", JOBSETS.path(NS, "js"), body={"spec": {"network": {"subdomain": "x"}}},
                           content_type=MERGE)
    assert err.value.status == 422 and "Value is immutable" in err.value.message


async def test_jobset_crd_and_discovery(http: KubeHTTP) -> None:
    crd = await http.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io")
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha2"]
    resources = (await http.request("GET", "/apis/jobset.x-k8s.io/v1alpha2"))["resources"]
    assert {r["name"] for r in resources} == {"jobsets", "jobsets/status"}
