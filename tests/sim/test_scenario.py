"""The scenario file: parsing, the problems it reports, and what the shorthand expands to."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangscale.sim.manifests import kueue_objects, workload_manifest
from gangscale.sim.scenario import ScenarioError, builtin_names, load_scenario, parse_scenario

MINIMAL = """
name: tiny
nodePools:
  - {name: tpu, machineType: ct5lp-hightpu-4t, tpuTopology: 2x4, maxUnits: 2}
kueue:
  provisioning: {className: atomic-scale-up.gangscale.io, parameters: {noRetry: "false"}}
  flavors: [{name: v5e, nodeLabels: {cloud.google.com/gke-tpu-topology: 2x4}}]
  priorityClasses: [{name: high, value: 1000}]
  clusterQueues:
    - {name: cq, preemption: LowerPriority, quota: {v5e: {google.com/tpu: 16}}, localQueues: [q, team-b/q2]}
workloads:
  - name: js
    at: 90s
    duration: 2m
    queue: q
    priorityClass: high
    annotations: {provreq.kueue.x-k8s.io/ValidUntilSeconds: "0"}
    podSets: [{name: slice, replicas: 2, parallelism: 2, limits: {google.com/tpu: 4}}]
"""


def test_every_builtin_scenario_loads() -> None:
    names = builtin_names()
    assert {"tpu-multislice", "ray-priority", "ray-autoscaling", "stockout-fallback"} <= set(names)
    for name in names:
        scenario = load_scenario(name)
        assert scenario.name == name
        assert scenario.pools() and scenario.workloads


def test_times_are_durations_and_defaults_hold() -> None:
    s = parse_scenario(MINIMAL)
    w = s.workloads[0]
    assert (w.at, w.duration, w.kind, w.namespace) == (90.0, 120.0, "JobSet", "default")
    assert s.until == 6 * 3600


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda t: t.replace("maxUnits: 2", "maxUnit: 2"), "maxUnit"),
    (lambda t: t.replace("priorityClass: high", "priorityClass: urgent"), "no priority class named 'urgent'"),
    (lambda t: t.replace("quota: {v5e:", "quota: {v6e:"), "no flavor named 'v6e'"),
    (lambda t: t.replace("duration: 2m", "duration: soon"), "duration"),
    (lambda t: t.replace("name: js", "name: js\n    colour: red"), "colour"),
    (lambda t: t + "cloud: [{at: 0s, pool: gpu, stockout: true}]\n", "no node pool named 'gpu'"),
    (lambda t: "name: [", "not valid YAML"),
    (lambda t: "- a list", "a YAML mapping"),
    (lambda t: t + "expectUnfinished: [nobody]\n", "expectUnfinished: no workload named 'nobody'"),
    (lambda t: t + "cloud: [{at: 0s, pool: tpu, reclaim: 1}]\n", "cloud[0].reclaim: pool 'tpu' is not a spot pool"),
], ids=["pool-typo", "unknown-priority-class", "unknown-flavor", "bad-duration", "unknown-key",
        "cloud-unknown-pool", "bad-yaml", "not-a-mapping", "expect-unknown-workload", "reclaim-not-spot"])
def test_a_bad_scenario_is_refused_with_the_problem_named(edit, expected) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(edit(MINIMAL), "my.yaml")
    assert expected in str(info.value)
    assert str(info.value).startswith("my.yaml")


def test_unknown_builtin_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"no built-in scenario named 'nope'.*tpu-multislice"):
        load_scenario("nope")
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(str(tmp_path / "missing.yaml"))


def test_kueue_objects_point_the_cluster_queue_at_gangscale() -> None:
    objs = {(o["kind"], o["metadata"]["name"]): o for o in kueue_objects(parse_scenario(MINIMAL))}
    prc = objs[("ProvisioningRequestConfig", "gangscale")]["spec"]
    assert prc["provisioningClassName"] == "atomic-scale-up.gangscale.io"
    assert prc["parameters"] == {"noRetry": "false"}
    assert prc["retryStrategy"] == {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}
    ac = objs[("AdmissionCheck", "gangscale")]["spec"]
    assert ac["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert ac["parameters"]["name"] == "gangscale"
    cq = objs[("ClusterQueue", "cq")]["spec"]
    assert cq["admissionChecksStrategy"] == {"admissionChecks": [{"name": "gangscale"}]}
    assert cq["resourceGroups"] == [{"coveredResources": ["google.com/tpu"], "flavors": [
        {"name": "v5e", "resources": [{"name": "google.com/tpu", "nominalQuota": 16}]}]}]
    assert cq["preemption"] == {"withinClusterQueue": "LowerPriority"}
    assert objs[("LocalQueue", "q2")]["metadata"]["namespace"] == "team-b"
    assert objs[("WorkloadPriorityClass", "high")]["value"] == 1000


def test_baseline_cluster_queues_have_no_admission_check() -> None:
    kinds = {o["kind"]: o for o in kueue_objects(parse_scenario(MINIMAL), baseline=True)}
    assert "AdmissionCheck" not in kinds and "ProvisioningRequestConfig" not in kinds
    assert "admissionChecksStrategy" not in kinds["ClusterQueue"]["spec"]


def test_a_jobset_shorthand_expands_to_the_manifest_a_user_writes() -> None:
    js = workload_manifest(parse_scenario(MINIMAL).workloads[0])
    assert (js["apiVersion"], js["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    meta = js["metadata"]
    assert meta["labels"] == {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": "high"}
    assert meta["annotations"] == {"provreq.kueue.x-k8s.io/ValidUntilSeconds": "0",
                                   "sim.gangscale.io/duration": "120s"}
    (rjob,) = js["spec"]["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"], rjob["template"]["spec"]["parallelism"]) == ("slice", 2, 2)
    container = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"google.com/tpu": "4"}}


def test_ray_shorthand_has_a_head_and_worker_groups() -> None:
    scenario = load_scenario("ray-priority")
    rj = workload_manifest(scenario.workloads[2])
    assert rj["kind"] == "RayJob"
    spec = rj["spec"]["rayClusterSpec"]
    assert spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "2"
    (group,) = spec["workerGroupSpecs"]
    assert (group["groupName"], group["replicas"], group["numOfHosts"]) == ("gpu-workers", 4, 1)
    assert group["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "production"
