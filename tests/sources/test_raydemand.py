"""Ray worker-group resources, and pending gangs -> new replicas per worker group."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from gangscale.model.scheduling import SpecError
from gangscale.sources.gcsreader import GangRequest, RayNode, ResourceState
from gangscale.sources.raydemand import GangNeed, GroupShape, constraint_needs, gang_needs, group_ray_resources

GiB = 2**30


# --- group_ray_resources -----------------------------------------------------------------------------------


def group(name: str = "workers", *, limits: Mapping[str, Any] | None = None,
          requests: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
          resources: Mapping[str, Any] | None = None, selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "ray-worker", "image": "rayproject/ray:2.60.0", "resources": {}}
    if limits is not None:
        container["resources"]["limits"] = dict(limits)
    if requests is not None:
        container["resources"]["requests"] = dict(requests)
    spec: dict[str, Any] = {"containers": [container, {"name": "sidecar", "resources": {"limits": {"cpu": "64"}}}]}
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    out: dict[str, Any] = {"groupName": name, "replicas": 1, "minReplicas": 0, "maxReplicas": 4,
                           "rayStartParams": dict(params or {}), "template": {"spec": spec}}
    if resources is not None:
        out["resources"] = dict(resources)
    return out


V4_16 = {"cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice", "cloud.google.com/gke-tpu-topology": "2x2x2"}
V6E_8 = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "2x4"}


@pytest.mark.parametrize(("spec", "expected"), [
    (group(limits={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}),
     {"CPU": 4, "GPU": 1, "memory": 16 * GiB}),
    (group(requests={"cpu": "500m", "memory": "1000M"}), {"CPU": 1, "memory": 10**9}),
    (group(limits={"cpu": "2"}, requests={"cpu": "1", "memory": "1Gi"}), {"CPU": 2, "memory": GiB}),
    (group(limits={"cpu": "16", "nvidia.com/gpu": "4"}, params={"num-cpus": "8", "num-gpus": "2"}),
     {"CPU": 8, "GPU": 2}),
    (group(limits={"cpu": "8", "amd.com/gpu": "2"}), {"CPU": 8, "GPU": 2}),
    (group(limits={"cpu": "8", "nvidia.com/gpu": "0"}, requests={"nvidia.com/gpu": "1"}), {"CPU": 8, "GPU": 1}),
    (group(limits={"cpu": "8"}, params={"memory": "1000000"}), {"CPU": 8, "memory": 1000000}),
    (group(limits={"cpu": "8"}, params={"resources": '"{\\"foo\\": 1, \\"bar\\": 2}"'}),
     {"CPU": 8, "foo": 1, "bar": 2}),
    (group(limits={"cpu": "8"}, params={"resources": '{"foo": 0.5}'}), {"CPU": 8, "foo": 0.5}),
    (group(limits={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
           params={"num-cpus": "8", "resources": '"{\\"foo\\": 1}"'},
           resources={"CPU": "3", "GPU": "1", "memory": "2Gi", "custom_a": "2"}),
     {"CPU": 3, "GPU": 1, "memory": 2 * GiB, "custom_a": 2}),
    (group(limits={"cpu": "24", "google.com/tpu": "4"}, selector=V4_16),
     {"CPU": 24, "TPU": 4, "TPU-v4-16-head": 1}),
    (group(limits={"cpu": "24", "google.com/tpu": "8"}, selector=V6E_8), {"CPU": 24, "TPU": 8, "TPU-v6e-8-head": 1}),
    (group(limits={"cpu": "24", "google.com/tpu": "4"}), {"CPU": 24, "TPU": 4}),
    (group(limits={"cpu": "24"}, params={"resources": '"{\\"TPU\\": 4}"'}, selector=V4_16),
     {"CPU": 24, "TPU": 4, "TPU-v4-16-head": 1}),
    (group(limits={"cpu": "24"}, resources={"TPU": "4"},
           selector={**V4_16, "cloud.google.com/gke-tpu-accelerator": "x"}),
     {"CPU": 24, "TPU": 4}),
    (group(limits={"cpu": "24", "google.com/tpu": "0"}, selector=V4_16), {"CPU": 24}),
], ids=["limits", "requests-rounded-up", "limits-before-requests", "ray-start-params-win", "any-gpu-key",
        "gpu-from-requests-when-limit-zero", "memory-param", "custom-quoted-json", "custom-bare-json",
        "group-resources-override-everything", "tpu-v4-head", "tpu-v6e-head", "tpu-without-selectors",
        "tpu-from-custom-resources", "unknown-tpu-accelerator-no-head", "zero-tpu"])
def test_group_ray_resources(spec: dict[str, Any], expected: dict[str, float]) -> None:
    assert group_ray_resources(spec) == expected


def test_head_group() -> None:
    head = group(limits={"cpu": "4", "memory": "8Gi"}, params={"num-cpus": "0"})
    del head["groupName"]
    assert group_ray_resources(head, head=True) == {"CPU": 0, "memory": 8 * GiB}


@pytest.mark.parametrize(("spec", "message"), [
    (group(), r"workerGroupSpecs\[workers\]: no CPU for Ray"),
    (group(limits={"cpu": "4"}, params={"resources": '"{foo: 1}"'}), r"rayStartParams.resources: not a JSON object"),
    (group(limits={"cpu": "4"}, params={"resources": '"{\\"foo\\": \\"x\\"}"'}), "expected a JSON object of numbers"),
    (group(limits={"cpu": "4"}, params={"resources": "[1]"}), "expected a JSON object of numbers"),
    (group(limits={"cpu": "4"}, params={"num-gpus": "two"}), r"rayStartParams.num-gpus: invalid quantity"),
    (group(limits={"cpu": "4"}, resources={"foo": "1x"}), r"resources.foo: invalid quantity"),
], ids=["no-cpu", "bad-json", "non-number", "not-an-object", "bad-number", "bad-override"])
def test_group_ray_resources_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        group_ray_resources(spec)


# --- gang_needs --------------------------------------------------------------------------------------------


def shape(name: str, free: int = 100, hosts: int = 1, priority: int = 0, **resources: float) -> GroupShape:
    return GroupShape(name=name, resources=resources, hosts=hosts, free_replicas=free, priority=priority)


def pg(pg_id: str, strategy: str, *bundles: Mapping[str, float], times: int = 1) -> GangRequest:
    return GangRequest(pg_id=pg_id, strategy=strategy, state="PENDING", bundles=tuple(bundles) * times)


def node(node_type: str, status: str = "IDLE", **available: float) -> RayNode:
    return RayNode(instance_id=f"{node_type}-pod", node_type=node_type, status=status, total=dict(available),
                   available=available)


def state(*gangs: GangRequest, nodes: tuple[RayNode, ...] = (),
          constraints: tuple[tuple[Mapping[str, float], int], ...] = ()) -> ResourceState:
    return ResourceState(version=1, nodes=nodes, gangs=gangs, pending=(), constraints=constraints)


GPU1 = shape("gpu1", CPU=4, GPU=1)
GPU8 = shape("gpu8", CPU=64, GPU=8)
CPU4 = shape("cpu4", CPU=4)
CPU16 = shape("cpu16", CPU=16)
TPU_V4_16 = shape("tpu", hosts=4, CPU=24, TPU=4, **{"TPU-v4-16-head": 1})


@pytest.mark.parametrize(("gang", "groups", "replicas"), [
    (pg("a", "STRICT_SPREAD", {"GPU": 1}, times=16), [GPU8], {"gpu8": 16}),
    (pg("a", "STRICT_PACK", {"CPU": 1}, times=8), [CPU4, CPU16], {"cpu16": 1}),
    (pg("a", "PACK", {"GPU": 1}, times=16), [GPU8], {"gpu8": 2}),
    (pg("a", "SPREAD", {"GPU": 1}, times=16), [GPU8], {"gpu8": 2}),
    (pg("a", "PACK", {"GPU": 1}, times=16), [GPU1, GPU8], {"gpu8": 2}),
    (pg("a", "STRICT_SPREAD", {"GPU": 1}, times=4), [GPU8, GPU1], {"gpu1": 4}),
    (pg("a", "STRICT_PACK", {"CPU": 1}, times=8), [GPU8, CPU16], {"cpu16": 1}),
    (pg("a", "SPREAD", {"CPU": 1, "GPU": 2}, {"CPU": 2}), [GPU1, GPU8, CPU16], {"gpu8": 1}),
    (pg("a", "PACK", {"CPU": 3}, times=5), [CPU4, CPU16], {"cpu16": 1}),
    (pg("a", "PACK", {"CPU": 3}, times=5), [CPU4, shape("cpu16", CPU=16, priority=1)], {"cpu16": 1}),
    (pg("a", "PACK", {"CPU": 3}, times=5), [shape("cpu4", CPU=4, priority=1), CPU16], {"cpu4": 5}),
    (pg("a", "STRICT_SPREAD", {"TPU": 4}, times=8), [TPU_V4_16], {"tpu": 2}),
    (pg("a", "STRICT_SPREAD", {"TPU": 4, "TPU-v4-16-head": 1}, {"TPU": 4}, {"TPU": 4}, {"TPU": 4}), [TPU_V4_16],
     {"tpu": 1}),
    (pg("a", "PACK", {"TPU-v4-16-head": 1}, times=2), [TPU_V4_16], {"tpu": 2}),
    (pg("a", "PACK", {"TPU": 4}, times=5), [TPU_V4_16], {"tpu": 2}),
    (pg("a", "PACK", {"GPU": 1}, times=12), [shape("gpu8", free=1, CPU=64, GPU=8), GPU1], {"gpu8": 1, "gpu1": 4}),
    (pg("a", "STRICT_SPREAD", {"GPU": 1}, times=3),
     [shape("gpu8", free=2, CPU=64, GPU=8), shape("gpu1", free=1, CPU=4, GPU=1)], {"gpu8": 2, "gpu1": 1}),
    (pg("a", "PACK", {"GPU": 0.5}, times=3), [GPU1], {"gpu1": 2}),
    (pg("a", "PACK", {"CPU": 0}, {"GPU": 0}), [GPU1], {}),
], ids=["strict-spread-one-bundle-per-node", "strict-pack-one-big-enough-node", "pack-fills-nodes",
        "spread-packs-like-pack", "fewest-nodes-wins", "tie-by-name", "cpu-gang-avoids-gpu-group",
        "mixed-bundles-one-node", "pack-first-fit", "priority-first", "priority-beats-fewer-nodes",
        "multi-host-tpu-2-replicas", "tpu-head-bundle-one-replica", "tpu-head-only-on-host-0",
        "multi-host-rounds-up", "split-when-budget-short", "strict-spread-split", "fractional-bundles",
        "zero-bundles-need-nothing"])
def test_one_gang(gang: GangRequest, groups: list[GroupShape], replicas: dict[str, int]) -> None:
    [need] = gang_needs(state(gang), groups)
    assert need == GangNeed(pg_id="a", strategy=gang.strategy, replicas=replicas, unplaceable=None)


@pytest.mark.parametrize(("gang", "nodes", "replicas"), [
    (pg("a", "PACK", {"GPU": 1}, times=16), (node("gpu8", GPU=8, CPU=64),), {"gpu8": 1}),
    (pg("a", "STRICT_SPREAD", {"GPU": 1}, times=4), (node("gpu8", GPU=8, CPU=64),), {"gpu8": 3}),
    (pg("a", "STRICT_PACK", {"CPU": 1}, times=8), (node("cpu16", "RUNNING", CPU=7),), {"cpu16": 1}),
    (pg("a", "STRICT_PACK", {"CPU": 1}, times=8), (node("cpu16", "RUNNING", CPU=8),), {}),
    (pg("a", "PACK", {"GPU": 1}, times=8), (node("gpu8", "DEAD", GPU=8), node("gpu8", "DRAINING", GPU=8)),
     {"gpu8": 1}),
    (pg("a", "PACK", {"GPU": 1}, times=8), (node("headgroup", "RUNNING", GPU=8), node("", "RUNNING", GPU=8)),
     {"gpu8": 1}),
], ids=["idle-node-absorbs-half", "strict-spread-uses-one-bundle-of-existing", "strict-pack-too-small-node",
        "strict-pack-fits-existing", "dead-and-draining-ignored", "nodes-of-other-types-ignored"])
def test_existing_nodes(gang: GangRequest, nodes: tuple[RayNode, ...], replicas: dict[str, int]) -> None:
    [need] = gang_needs(state(gang, nodes=nodes), [GPU8, CPU16])
    assert need.unplaceable is None
    assert need.replicas == replicas


@pytest.mark.parametrize(("gang", "groups", "message"), [
    (pg("a", "STRICT_SPREAD", {"GPU": 1}, times=4), [shape("gpu8", free=3, CPU=64, GPU=8)],
     r"placement group a \(STRICT_SPREAD, 4 bundles\): 1 bundle\(s\) would need more new replicas than the worker "
     r"groups may still add before maxReplicas \(free replicas: gpu8 3\)"),
    (pg("a", "PACK", {"GPU": 1, "TPU": 1}), [GPU8, CPU16],
     r"a bundle asks for \{GPU: 1, TPU: 1\}, but no worker group offers 'TPU' \(groups: gpu8, cpu16\)"),
    (pg("a", "PACK", {"GPU": 16}), [GPU8, GPU1],
     r"a bundle needs \{GPU: 16\}, more than one pod of any worker group offers \(gpu8 \{CPU: 64, GPU: 8\}; "
     r"gpu1 \{CPU: 4, GPU: 1\}\)"),
    (pg("a", "STRICT_PACK", {"CPU": 6}, times=3), [CPU4, CPU16],
     r"its 3 bundles must share one node and together need \{CPU: 18\}, more than one pod"),
    (pg("a", "PACK", {"CPU": 1}), [], "the cluster has no worker groups to scale"),
    (pg("a", "PACK", {"GPU": 1}, times=17), [shape("gpu8", free=2, CPU=64, GPU=8)], r"free replicas: gpu8 2"),
], ids=["free-replicas-exceeded", "resource-no-group-has", "bundle-larger-than-any-pod", "strict-pack-sum-too-big",
        "no-groups", "pack-budget"])
def test_unplaceable(gang: GangRequest, groups: list[GroupShape], message: str) -> None:
    [need] = gang_needs(state(gang), groups)
    assert need.replicas == {}
    assert need.unplaceable is not None
    assert need.unplaceable.startswith(f"placement group a ({gang.strategy}, {len(gang.bundles)} bundles): ")
    assert re.search(message, need.unplaceable), need.unplaceable


def test_two_gangs_compete_for_free_replicas_largest_first() -> None:
    small = pg("a-small", "STRICT_SPREAD", {"GPU": 8}, times=2)
    large = pg("b-large", "STRICT_SPREAD", {"GPU": 8}, times=3)
    needs = gang_needs(state(small, large), [shape("gpu8", free=4, CPU=64, GPU=8)])
    assert [(n.pg_id, dict(n.replicas)) for n in needs] == [("b-large", {"gpu8": 3}), ("a-small", {})]
    assert needs[1].unplaceable is not None
    assert "free replicas: gpu8 1" in needs[1].unplaceable


def test_strict_gangs_before_larger_soft_ones() -> None:
    soft = pg("a-soft", "PACK", {"GPU": 1}, times=16)
    strict = pg("b-strict", "STRICT_SPREAD", {"GPU": 1}, times=2)
    needs = gang_needs(state(soft, strict), [shape("gpu8", free=3, CPU=64, GPU=8)])
    assert [(n.pg_id, dict(n.replicas), n.unplaceable is None) for n in needs] == [
        ("b-strict", {"gpu8": 2}, True), ("a-soft", {}, False)]


def test_an_unplaceable_gang_spends_nothing() -> None:
    impossible = pg("a", "STRICT_SPREAD", {"GPU": 1, "foo": 1}, times=3)
    fits = pg("b", "PACK", {"GPU": 1}, times=8)
    needs = gang_needs(state(impossible, fits, nodes=(node("gpu8", GPU=8, CPU=64),)),
                       [shape("gpu8", free=1, CPU=64, GPU=8)])
    assert [(n.pg_id, dict(n.replicas), n.unplaceable is None) for n in needs] == [("a", {}, False), ("b", {}, True)]


def test_existing_capacity_one_gang_takes_is_not_offered_to_the_next() -> None:
    needs = gang_needs(state(pg("a", "PACK", {"GPU": 1}, times=8), pg("b", "PACK", {"GPU": 1}, times=8),
                             nodes=(node("gpu8", GPU=8, CPU=64),)), [GPU8])
    assert [dict(n.replicas) for n in needs] == [{}, {"gpu8": 1}]


def test_new_nodes_are_not_shared_between_gangs() -> None:
    needs = gang_needs(state(pg("a", "PACK", {"GPU": 1}, times=4), pg("b", "PACK", {"GPU": 1}, times=4)), [GPU8])
    assert [dict(n.replicas) for n in needs] == [{"gpu8": 1}, {"gpu8": 1}]


def test_spare_hosts_of_a_multi_host_replica_stay_with_their_gang() -> None:
    needs = gang_needs(state(pg("a", "STRICT_SPREAD", {"TPU": 4}, times=2), pg("b", "STRICT_SPREAD", {"TPU": 4},
                                                                             times=2)), [TPU_V4_16])
    assert [dict(n.replicas) for n in needs] == [{"tpu": 1}, {"tpu": 1}]


def test_no_gangs() -> None:
    assert gang_needs(state(), [GPU8]) == []


# --- constraint_needs --------------------------------------------------------------------------------------


def test_constraints_count_existing_totals_not_availability() -> None:
    busy = RayNode("cpu16-pod", "cpu16", "RUNNING", total={"CPU": 16}, available={"CPU": 0})
    s = state(nodes=(busy,), constraints=(({"CPU": 4}, 4), ({"GPU": 8}, 1)))
    assert constraint_needs(s, [GPU8, CPU16]) == {"gpu8": 1}


def test_constraints_beyond_existing_nodes() -> None:
    s = state(nodes=(node("cpu16", CPU=16),), constraints=(({"CPU": 4}, 8),))
    assert constraint_needs(s, [CPU16]) == {"cpu16": 1}


@pytest.mark.parametrize("constraints", [
    (({"CPU": 4}, 8), ({"foo": 1}, 1)),
    (({"CPU": 16}, 5),),
], ids=["resource-nobody-offers", "beyond-free-replicas"])
def test_infeasible_constraints_need_nothing(constraints: tuple[tuple[Mapping[str, float], int], ...]) -> None:
    assert constraint_needs(state(constraints=constraints), [shape("cpu16", free=4, CPU=16)]) == {}


def test_no_constraints() -> None:
    assert constraint_needs(state(constraints=(({"CPU": 4}, 0),)), [CPU16]) == {}
