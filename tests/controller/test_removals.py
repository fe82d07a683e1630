"""Which units scale-down removes (``gangscale.controller.logic.unneeded``), on plain objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from gangscale.controller.logic.unneeded import broken_units, plan_scale_down
from tests.planner.builders import CPU_NODE, TPU_NODE, pool

NOW = 1_000.0
UNNEEDED = 600.0
POOLS = {"tpu": pool("tpu", TPU_NODE, nodes_per_unit=2), "cpu": pool("cpu", CPU_NODE)}


@dataclass(frozen=True)
class Case:
    id: str
    #: pool -> unit -> its nodes
    units: Mapping[str, Mapping[str, list[str]]]
    removed: list[str]
    idle_since: Mapping[str, float] = field(default_factory=dict)
    busy: frozenset[str] = frozenset()
    protected: frozenset[str] = frozenset()
    unlabelled: frozenset[str] = frozenset()


CASES = [
    Case("a-whole-slice-waits-out-the-unneeded-time", {"tpu": {"s1": ["s1-0", "s1-1"]}}, []),
    Case("a-whole-slice-idle-long-enough-goes", {"tpu": {"s1": ["s1-0", "s1-1"]}}, ["s1"],
         idle_since={"s1": NOW - UNNEEDED}),
    Case("a-slice-missing-a-host-goes-at-once", {"tpu": {"s1": ["s1-1"]}}, ["s1"]),
    Case("a-slice-missing-a-host-but-running-a-pod-stays", {"tpu": {"s1": ["s1-1"]}}, [], busy=frozenset({"s1-1"})),
    Case("a-slice-missing-a-host-that-is-protected-stays", {"tpu": {"s1": ["s1-1"]}}, [],
         protected=frozenset({"s1-1"})),
    Case("a-node-gangscale-did-not-make-is-never-removed", {"tpu": {"n": ["n"]}}, [], unlabelled=frozenset({"n"})),
    Case("a-busy-host-keeps-its-whole-slice", {"tpu": {"s1": ["s1-0", "s1-1"]}}, [], busy=frozenset({"s1-0"}),
         idle_since={"s1": NOW - UNNEEDED}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_scale_down(case: Case) -> None:
    idle = dict(case.idle_since)
    counts = {name: len(units) for name, units in case.units.items()}
    removals = plan_scale_down(POOLS, case.units, counts, empty=lambda node: node not in case.busy,
                               protected=case.protected, labelled=lambda node: node not in case.unlabelled,
                               idle_since=idle, now=NOW, unneeded_time=UNNEEDED)
    assert [r.unit for r in removals] == case.removed


def test_broken_units_are_those_missing_hosts_that_no_scale_up_is_completing() -> None:
    units = {"tpu": {"whole": ["whole-0", "whole-1"], "cut": ["cut-1"], "coming": ["coming-0"]},
             "cpu": {"c": ["c-0"]}}
    broken = broken_units(POOLS, units, labelled=lambda node: True, in_flight=lambda node: node.startswith("coming"))
    assert broken == {"cut": ("cut-1",)}
