"""RayClusters and worker pods -> replicas without a node (gangscale.sources.raycluster)."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.model.gang import Gang, PodSet
from gangscale.model.pod import pod_demand
from gangscale.sources.raycluster import (
    RayClusterError,
    bound_pods,
    describe,
    missing_replicas,
    parse_raycluster,
    placed_replicas,
    replica_gang,
    workers_by_cluster,
)
from tests.raybuilders import group, raycluster, worker

GPU = {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize(("spec", "desired"), [
    pytest.param({"replicas": 5, "min_replicas": 0, "max_replicas": 8}, 5, id="within-bounds"),
    pytest.param({"replicas": 12, "min_replicas": 0, "max_replicas": 8}, 8, id="clamped-to-max"),
    pytest.param({"replicas": 1, "min_replicas": 3, "max_replicas": 8}, 3, id="raised-to-min"),
    pytest.param({"replicas": None, "min_replicas": 2, "max_replicas": 8}, 2, id="unset-replicas-is-min"),
    pytest.param({"replicas": 4, "min_replicas": None, "max_replicas": None}, 4, id="defaults-0-to-int32-max"),
    pytest.param({"replicas": 4, "suspend": True}, 0, id="suspended-group"),
])
def test_desired_replicas_are_clamped_as_the_operator_clamps(spec: dict[str, Any], desired: int) -> None:
    cluster = parse_raycluster(raycluster("rc", [group("gpu", limits=GPU, **spec)]))
    assert cluster.groups[0].desired == desired


@pytest.mark.parametrize(("obj", "source"), [
    pytest.param(raycluster("rc", []), True, id="autoscaling"),
    pytest.param(raycluster("rc", [], autoscaling=False), False, id="no-autoscaling"),
    pytest.param(raycluster("rc", [], labels={"kueue.x-k8s.io/queue-name": "q"}), False, id="kueue-managed"),
    pytest.param(raycluster("rc", [], suspend=True), False, id="suspended"),
])
def test_only_unqueued_autoscaling_clusters_are_a_demand_source(obj: dict[str, Any], source: bool) -> None:
    assert parse_raycluster(obj).is_demand_source is source


@pytest.mark.parametrize(("groups", "message"), [
    pytest.param([group("gpu", hosts=0)], "numOfHosts must be at least 1", id="zero-hosts"),
    pytest.param([group("gpu", replicas=-1)], "replicas must be a whole number", id="negative-replicas"),
    pytest.param([group("gpu", max_replicas="4")], "maxReplicas must be a whole number", id="string-max"),
    pytest.param([group("a"), group("a")], "repeated: a", id="duplicate-groups"),
    pytest.param([{"replicas": 1}], "groupName is missing", id="no-group-name"),
    pytest.param([group("gpu", limits={"nvidia.com/gpu": "lots"})], "workerGroupSpecs[0].template", id="bad-quantity"),
])
def test_a_bad_worker_group_is_named(groups: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(RayClusterError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_raycluster(raycluster("rc", groups))


def test_multi_host_replica_counts_as_placed_only_when_every_host_is_on_a_node() -> None:
    cluster = parse_raycluster(raycluster("rc", [group("tpu", replicas=3, hosts=4)]))
    tpu = cluster.groups[0]
    pods = [worker("rc", "tpu", f"a-{i}", replica="a", node=f"n-a{i}") for i in range(4)]        # whole
    pods += [worker("rc", "tpu", f"b-{i}", replica="b", node=f"n-b{i}" if i < 3 else None) for i in range(4)]
    pods += [worker("rc", "tpu", f"c-{i}", replica="c", node=f"n-c{i}") for i in range(3)]       # a host missing
    workers = workers_by_cluster(pods)[("default", "rc")]
    assert placed_replicas(tpu, workers) == 1
    assert missing_replicas(cluster, workers, {"tpu": 3}, {}) == {"tpu": 2}


@pytest.mark.parametrize(("pod_kwargs", "to_delete", "placed"), [
    pytest.param({}, [], 1, id="bound"),
    pytest.param({"deleting": True}, [], 0, id="being-deleted"),
    pytest.param({"phase": "Failed"}, [], 0, id="terminated"),
    pytest.param({}, ["w-0"], 0, id="in-workersToDelete"),
])
def test_pods_the_cluster_is_letting_go_are_not_placed(pod_kwargs: dict[str, Any], to_delete: list[str],
                                                        placed: int) -> None:
    cluster = parse_raycluster(raycluster("rc", [group("gpu", replicas=1, workers_to_delete=to_delete)]))
    workers = workers_by_cluster([worker("rc", "gpu", "w-0", node="n0", **pod_kwargs)])[("default", "rc")]
    assert placed_replicas(cluster.groups[0], workers) == placed


def test_missing_counts_stepwise_demand_less_what_is_coming() -> None:
    cluster = parse_raycluster(raycluster("rc", [group("gpu", replicas=16, limits=GPU)]))
    pods = [worker("rc", "gpu", f"w-{i}", node="n" if i < 2 else None) for i in range(16)]
    workers = workers_by_cluster(pods)[("default", "rc")]
    assert missing_replicas(cluster, workers, {"gpu": 16}, {}) == {"gpu": 14}
    assert missing_replicas(cluster, workers, {"gpu": 16}, {"gpu": 10}) == {"gpu": 4}
    assert missing_replicas(cluster, workers, {"gpu": 16}, {"gpu": 14}) == {}
    # A target past maxReplicas is capped as the operator caps replicas.
    assert missing_replicas(cluster, workers, {"gpu": 99}, {}) == {"gpu": 30}


def test_workers_are_grouped_by_cluster_and_other_pods_ignored() -> None:
    head = worker("rc", "headgroup", "head")
    head["metadata"]["labels"]["ray.io/node-type"] = "head"
    plain = {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}
    got = workers_by_cluster([head, plain, worker("rc", "gpu", "w"), worker("other", "gpu", "x", namespace="ns2")])
    assert {key: [w.name for w in ws] for key, ws in got.items()} == {("default", "rc"): ["w"], ("ns2", "other"): ["x"]}


def test_the_gang_has_one_pod_set_per_group_of_replicas_times_hosts() -> None:
    cluster = parse_raycluster(raycluster("rc", [group("cpu", requests={"cpu": "2"}), group("gpu", limits=GPU),
                                                 group("tpu", hosts=4, limits={"google.com/tpu": "4"})]))
    gang = replica_gang(cluster, {"gpu": 16, "tpu": 2}, "default/rc/g1", 100.0)
    assert [(ps.name, ps.count) for ps in gang.pod_sets] == [("gpu", 16), ("tpu", 8)]
    assert gang.pod_sets[1].demand.requests["google.com/tpu"] == 4
    assert (gang.key, gang.created, gang.pods) == ("default/rc/g1", 100.0, 24)
    assert describe({"gpu": 16, "tpu": 2}, cluster) == "gpu: 16 replicas, tpu: 2 replicas of 4 hosts"


@pytest.mark.parametrize(("annotations", "status", "address"), [
    pytest.param({}, {}, "rc-head-svc.default.svc:6379", id="default-service"),
    pytest.param({}, {"head": {"serviceName": "custom"}, "endpoints": {"gcs-server": "7000"}},
                 "custom.default.svc:7000", id="from-status"),
    pytest.param({"gangscale.io/gcs-address": "127.0.0.1:41000"}, {"head": {"serviceName": "custom"}},
                 "127.0.0.1:41000", id="annotation-wins"),
])
def test_gcs_address(annotations: dict[str, str], status: dict[str, Any], address: str) -> None:
    obj = raycluster("rc", [], annotations=annotations)
    obj["status"] = status
    assert parse_raycluster(obj).gcs_address() == address


@pytest.mark.parametrize(("auth", "secret"), [
    pytest.param(None, None, id="no-auth"),
    pytest.param({"mode": "disabled"}, None, id="disabled"),
    pytest.param({"mode": "token", "secretName": "tok"}, "tok", id="named-secret"),
    pytest.param({"mode": "token"}, "rc", id="operator-secret"),
])
def test_auth_secret(auth: dict[str, str] | None, secret: str | None) -> None:
    extra = {"authOptions": auth} if auth else {}
    assert parse_raycluster(raycluster("rc", [], **extra)).auth_secret() == secret


def test_an_elastic_slice_pr_is_reduced_by_the_replicas_already_on_nodes() -> None:
    cluster = parse_raycluster(raycluster("rc", [group("gpu", replicas=6, limits=GPU),
                                                 group("tpu", replicas=2, hosts=4, limits={"google.com/tpu": "4"})]))
    pods = [worker("rc", "gpu", f"g{i}", node=f"n{i}") for i in range(4)]
    pods += [worker("rc", "tpu", f"t{i}", replica="r0", node=f"t{i}") for i in range(4)]
    demand = pod_demand({"spec": {"containers": [{"name": "c", "resources": {"limits": GPU}}]}})
    gang = Gang("default/wl-check-1", (PodSet("ppt-wl-check-1-gpu", 6, demand), PodSet("ppt-wl-check-1-tpu", 8, demand),
                                       PodSet("ppt-wl-check-1-head", 1, demand), PodSet("shortened-name", 3, demand)))
    less = bound_pods(gang, "wl-check-1", cluster, workers_by_cluster(pods)[("default", "rc")])
    assert [(ps.name, ps.count) for ps in less.pod_sets] == [
        ("ppt-wl-check-1-gpu", 2), ("ppt-wl-check-1-tpu", 4), ("ppt-wl-check-1-head", 1), ("shortened-name", 3)]
