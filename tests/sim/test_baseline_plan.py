"""The per-pod baseline's decisions as tables: which units it asks for, which it gives back."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.model.nodepool import NodePool
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint
from gangscale.sim.baselineplan import (
    Bin,
    UnitState,
    plan_scale_down,
    plan_scale_up,
    template_node,
    track_empty,
)
from gangscale.sim.filters import PodInfo, pod_info

JSON = dict[str, Any]
TPU_TAINT = Taint("google.com/tpu", "present", "NoSchedule")


def make_pool(name: str, allocatable: dict[str, str], *, max_units: int = 10, min_units: int = 0,
              nodes_per_unit: int = 1, labels: dict[str, str] | None = None,
              taints: tuple[Taint, ...] = ()) -> NodePool:
    return NodePool(name=name, allocatable=ResourceList.parse(allocatable), max_units=max_units,
                    min_units=min_units, nodes_per_unit=nodes_per_unit, labels=labels or {}, taints=taints)


CPU = make_pool("cpu", {"cpu": "16", "memory": "64Gi"})
TPU = make_pool("tpu", {"cpu": "100", "google.com/tpu": "4"}, max_units=3, labels={"accel": "tpu"},
                taints=(TPU_TAINT,))
SLICE = make_pool("slice", {"cpu": "100", "google.com/tpu": "4"}, max_units=2, nodes_per_unit=2,
                  labels={"accel": "tpu"}, taints=(TPU_TAINT,))
POOLS = (CPU, TPU, SLICE)
SPREAD = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"job": "j"}}}]}}


def pods(count: int, requests: dict[str, str], *, ert: bool = True, **spec: Any) -> list[PodInfo]:
    return [pod_info({"metadata": {"name": f"p{i}", "namespace": "ns", "labels": {"job": "j"}},
                      "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}], **spec}},
                     extended_resource_toleration=ert) for i in range(count)]


def coming(pool: NodePool, name: str) -> Bin:
    return Bin(template_node(pool, name), unit=name)


SCALE_UP: list[tuple[str, list[PodInfo], list[Bin], dict[str, int], tuple[str, ...], int]] = [
    ("first-pool-that-takes-the-pod", pods(1, {"google.com/tpu": "4"}), [], {}, ("tpu",), 0),
    ("first-fit-packing", pods(6, {"cpu": "5"}), [], {}, ("cpu", "cpu"), 0),
    ("one-unit-per-pod-when-each-fills-a-node", pods(3, {"google.com/tpu": "4"}), [], {}, ("tpu",) * 3, 0),
    ("coming-capacity-absorbs", pods(2, {"google.com/tpu": "4"}), [coming(TPU, "t-1")], {"tpu": 1}, ("tpu",), 0),
    ("past-max-units-next-pool", pods(2, {"google.com/tpu": "4"}), [], {"tpu": 3}, ("slice",), 0),
    ("multi-host-unit-holds-two-spread-pods", pods(4, {"google.com/tpu": "1"}, affinity=SPREAD), [],
     {"tpu": 3}, ("slice", "slice"), 0),
    ("every-pool-full", pods(1, {"google.com/tpu": "4"}), [], {"tpu": 3, "slice": 2}, (), 1),
    ("no-pool-has-the-resource", pods(2, {"nvidia.com/gpu": "1"}), [], {}, (), 2),
    ("taint-not-tolerated", pods(1, {"google.com/tpu": "4"}, ert=False), [], {}, (), 1),
    ("selector-chooses-the-pool", pods(1, {"cpu": "1"}, nodeSelector={"accel": "tpu"},
                                       tolerations=[{"operator": "Exists"}]), [], {}, ("tpu",), 0),
]


@pytest.mark.parametrize(("pending", "bins", "units", "expected", "stranded"), [s[1:] for s in SCALE_UP],
                         ids=[s[0] for s in SCALE_UP])
def test_plan_scale_up(pending: list[PodInfo], bins: list[Bin], units: dict[str, int], expected: tuple[str, ...],
                       stranded: int) -> None:
    plan = plan_scale_up(pending, POOLS, bins, units)
    assert plan.units == expected
    assert len(plan.stranded) == stranded


def test_plan_does_not_modify_the_bins_it_is_given() -> None:
    room = coming(TPU, "t-1")
    plan_scale_up(pods(1, {"google.com/tpu": "4"}), POOLS, [room], {"tpu": 1})
    assert room.pods == [] and room.requested == {}


def test_template_node_is_what_the_cloud_registers() -> None:
    node = template_node(TPU, "tpu-abc-0")
    assert node.labels["gangscale.io/node-pool"] == "tpu"
    assert node.labels["kubernetes.io/hostname"] == "tpu-abc-0"
    assert node.labels["accel"] == "tpu"
    assert node.allocatable["pods"] == 110
    assert node.taints == ({"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},)


# --- scale-down ---------------------------------------------------------------------------------------------

T0 = 1_000_000.0
UNNEEDED, MAX_PROVISION = 600.0, 900.0


def unit(uid: str, *, pool: str = "cpu", ready: bool = True, busy: bool = False, created: float = T0) -> UnitState:
    return UnitState(pool, uid, (f"{uid}-0",), ready, created, busy)


SCALE_DOWN: list[tuple[str, list[UnitState], dict[str, float], float, tuple[str, ...]]] = [
    ("empty-not-long-enough", [unit("a")], {"a": T0}, T0 + UNNEEDED - 1, ()),
    ("empty-long-enough", [unit("a")], {"a": T0}, T0 + UNNEEDED, ("a",)),
    ("busy-never", [unit("a", busy=True)], {}, T0 + 10 * UNNEEDED, ()),
    ("stuck-before-deadline", [unit("a", ready=False)], {}, T0 + MAX_PROVISION - 1, ()),
    ("stuck-past-deadline", [unit("a", ready=False)], {}, T0 + MAX_PROVISION, ("a",)),
    ("stuck-first-then-longest-empty", [unit("b"), unit("a"), unit("s", ready=False)],
     {"a": T0 + 5, "b": T0}, T0 + 2 * MAX_PROVISION, ("s", "b", "a")),
]


@pytest.mark.parametrize(("units", "since", "now", "expected"), [s[1:] for s in SCALE_DOWN],
                         ids=[s[0] for s in SCALE_DOWN])
def test_plan_scale_down(units: list[UnitState], since: dict[str, float], now: float,
                         expected: tuple[str, ...]) -> None:
    released = plan_scale_down(now, units, {p.name: p for p in POOLS}, since, unneeded_time=UNNEEDED,
                               max_provision_time=MAX_PROVISION)
    assert tuple(u.unit_id for u in released) == expected


def test_scale_down_keeps_min_units() -> None:
    pools = {"cpu": make_pool("cpu", {"cpu": "16"}, min_units=2)}
    units = [unit("a"), unit("b"), unit("c")]
    since = {"a": T0 + 2, "b": T0, "c": T0 + 1}
    released = plan_scale_down(T0 + UNNEEDED + 5, units, pools, since, unneeded_time=UNNEEDED,
                               max_provision_time=MAX_PROVISION)
    assert [u.unit_id for u in released] == ["b"]


def test_scale_down_ignores_pools_it_does_not_manage() -> None:
    released = plan_scale_down(T0 + UNNEEDED, [unit("x", pool="elsewhere")], {"cpu": CPU}, {"x": T0},
                               unneeded_time=UNNEEDED, max_provision_time=MAX_PROVISION)
    assert released == ()


def test_track_empty_keeps_the_first_sighting() -> None:
    units = [unit("a"), unit("b", busy=True), unit("c", ready=False), unit("d")]
    assert track_empty(T0 + 50, units, {"a": T0, "b": T0}) == {"a": T0, "d": T0 + 50}
