"""Pods and child objects as the real controllers create them: names, labels, owners, per kind."""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import pytest

from gangscale.kube.resources import JOBS, RAYCLUSTERS
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.jobs import JobEmulator
from gangscale.sim.jobs import controllers as ctl
from gangscale.sim.world import Timeline
from tests.sim.jobs import support as s

JSON = dict[str, Any]
SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"


@pytest.fixture
def em(http: KubeHTTP) -> JobEmulator:
    return JobEmulator(http, Timeline(s.T0), seed=7)


async def _admitted(http: KubeHTTP, em: JobEmulator, body: JSON) -> JSON:
    await s.flavor(http, "default", {})
    created = await s.create(http, body)
    await s.settle(em, s.T0)
    await s.admit(http, await s.workload_of(http, body["metadata"]["name"]))
    await s.settle(em, s.T0)
    return created


def _owner(obj: JSON) -> JSON:
    [ref] = obj["metadata"]["ownerReferences"]
    return dict(ref)


async def test_job_pods(http: KubeHTTP, em: JobEmulator) -> None:
    job = await _admitted(http, em, s.job("train", parallelism=3))
    pods = await s.pods(http)
    assert len(pods) == 3
    uid = job["metadata"]["uid"]
    for pod in pods:
        assert re.fullmatch(f"train-{SUFFIX}", pod["metadata"]["name"])
        labels = pod["metadata"]["labels"]
        assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "train"
        assert labels["controller-uid"] == labels["batch.kubernetes.io/controller-uid"] == uid
        assert _owner(pod) == {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
                               "controller": True, "blockOwnerDeletion": True}
        assert pod["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert await em.sync(s.T0) is False


async def test_indexed_job_pods(http: KubeHTTP, em: JobEmulator) -> None:
    await _admitted(http, em, s.job("idx", parallelism=2, completionMode="Indexed"))
    pods = sorted(await s.pods(http), key=lambda p: p["metadata"]["labels"][ctl.COMPLETION_INDEX])
    for i, pod in enumerate(pods):
        assert re.fullmatch(f"idx-{i}-{SUFFIX}", pod["metadata"]["name"])
        assert pod["metadata"]["annotations"][ctl.COMPLETION_INDEX] == str(i)
        assert pod["spec"]["hostname"] == f"idx-{i}"


def test_names_repeat_with_the_same_seed() -> None:
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"},
           "spec": {"parallelism": 3, "template": {"spec": {}}}}
    first = [p["metadata"]["name"] for p in ctl.job_pods_to_create(job, [], random.Random(3), set())]
    again = [p["metadata"]["name"] for p in ctl.job_pods_to_create(job, [], random.Random(3), set())]
    assert first == again and len(set(first)) == 3


async def test_jobset_child_jobs_and_pods(http: KubeHTTP, em: JobEmulator) -> None:
    js = await _admitted(http, em, s.jobset("slice", replicated=[("workers", 2, 2), ("coord", 1, 1)]))
    jobs = {j["metadata"]["name"]: j for j in await s.items(http, JOBS)}
    assert sorted(jobs) == ["slice-coord-0", "slice-workers-0", "slice-workers-1"]
    child = jobs["slice-workers-1"]
    assert _owner(child) == {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "slice",
                             "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    labels = child["metadata"]["labels"]
    assert {k: labels[k] for k in (ctl.JOBSET_NAME, ctl.REPLICATED_JOB_NAME, ctl.JOB_INDEX,
                                   ctl.REPLICATED_JOB_REPLICAS, ctl.GLOBAL_REPLICAS, ctl.JOB_GLOBAL_INDEX,
                                   ctl.RESTART_ATTEMPT)} == {
        ctl.JOBSET_NAME: "slice", ctl.REPLICATED_JOB_NAME: "workers", ctl.JOB_INDEX: "1",
        ctl.REPLICATED_JOB_REPLICAS: "2", ctl.GLOBAL_REPLICAS: "3", ctl.JOB_GLOBAL_INDEX: "1",
        ctl.RESTART_ATTEMPT: "0"}
    assert labels[ctl.JOB_KEY] == hashlib.sha1(b"default/slice-workers-1").hexdigest()
    assert jobs["slice-coord-0"]["metadata"]["labels"][ctl.JOB_GLOBAL_INDEX] == "2"
    assert child["spec"]["completionMode"] == "Indexed"
    assert child["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert "kueue.x-k8s.io/queue-name" not in labels
    await s.settle(em, s.T0)  # the Job controller turns the child Jobs into pods
    pods = await s.pods(http)
    assert len(pods) == 5
    mine = [p for p in pods if p["metadata"]["labels"][ctl.REPLICATED_JOB_NAME] == "workers"
            and p["metadata"]["labels"][ctl.JOB_INDEX] == "1"]
    assert sorted(p["metadata"]["labels"][ctl.COMPLETION_INDEX] for p in mine) == ["0", "1"]
    for pod in mine:
        assert re.fullmatch(f"slice-workers-1-[01]-{SUFFIX}", pod["metadata"]["name"])
        assert _owner(pod)["kind"] == "Job" and _owner(pod)["name"] == "slice-workers-1"
        assert pod["spec"]["subdomain"] == "slice"
    assert await em.sync(s.T0) is False


async def test_multi_host_ray_groups(http: KubeHTTP, em: JobEmulator) -> None:
    rc = await _admitted(http, em, s.raycluster("rc", [("tpu", 2, 4), ("cpu", 1, 1)]))
    pods = await s.pods(http)
    assert len(pods) == 1 + 8 + 1
    heads = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    assert len(heads) == 1 and re.fullmatch(f"rc-head-{SUFFIX}", heads[0]["metadata"]["name"])
    assert heads[0]["metadata"]["labels"]["ray.io/group"] == "headgroup"
    tpu = [p for p in pods if p["metadata"]["labels"].get("ray.io/group") == "tpu"]
    assert all(re.fullmatch(f"rc-tpu-worker-{SUFFIX}", p["metadata"]["name"]) for p in tpu)
    replicas: dict[str, set[str]] = {}
    for pod in tpu:
        labels = pod["metadata"]["labels"]
        assert labels["ray.io/cluster"] == "rc" and labels["ray.io/node-type"] == "worker"
        replicas.setdefault(labels["ray.io/worker-group-replica-name"], set()).add(labels["ray.io/replica-host-index"])
        assert _owner(pod) == {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc",
                               "uid": rc["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    assert sorted(replicas.values(), key=sorted) == [{"0", "1", "2", "3"}] * 2
    cpu = [p for p in pods if p["metadata"]["labels"].get("ray.io/group") == "cpu"]
    assert "ray.io/replica-host-index" not in cpu[0]["metadata"]["labels"]
    assert await em.sync(s.T0) is False


async def test_rayjob_creates_its_cluster(http: KubeHTTP, em: JobEmulator) -> None:
    rj = await _admitted(http, em, s.rayjob("rj", [("tpu", 1, 2)]))
    [rc] = await s.items(http, RAYCLUSTERS)
    status = (await s.get(http, "RayJob", "rj"))["status"]
    assert status["rayClusterName"] == rc["metadata"]["name"]
    assert re.fullmatch(f"rj-{SUFFIX}", rc["metadata"]["name"])
    assert status["jobDeploymentStatus"] == "Initializing"
    assert _owner(rc) == {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": rj["metadata"]["uid"],
                          "controller": True, "blockOwnerDeletion": True}
    assert rc["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
    assert rc["spec"]["workerGroupSpecs"][0]["numOfHosts"] == 2
    assert len(await s.pods(http)) == 3  # head + 2 hosts, no submitter pod


async def test_suspended_unmanaged_job_deletes_its_pods(http: KubeHTTP, em: JobEmulator) -> None:
    await s.create(http, s.job("plain", labels={}))
    await s.settle(em, s.T0)
    assert len(await s.pods(http)) == 2
    await http.request("PATCH", JOBS.path(s.NS, "plain"), body={"spec": {"suspend": True}},
                       content_type="application/merge-patch+json")
    await s.settle(em, s.T0)
    assert await s.pods(http) == []
    assert (await s.get(http, "Job", "plain"))["status"]["conditions"][-1]["reason"] == "JobSuspended"
