"""Unneeded units kept current one marked unit at a time (``gangscale.controller.logic.unneeded.IdleUnits``), on plain
objects: since when each unit is idle, when the next one is due, and which ones scale-down removes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from gangscale.controller.logic.unneeded import Idle, IdleUnits, Removal
from tests.planner.builders import CPU_NODE, TPU_NODE, pool

T0 = 1_000.0
UNNEEDED = 600.0
POOLS = {"cpu": replace(pool("cpu", CPU_NODE), min_units=1), "tpu": pool("tpu", TPU_NODE, nodes_per_unit=2)}

Found = tuple[str, tuple[str, ...], bool]


@dataclass
class Cluster:
    """What the loop would say of each unit: (pool, nodes, missing hosts) while it is unneeded; the units looked at."""

    unneeded: dict[str, Found] = field(default_factory=dict)
    looked: list[str] = field(default_factory=list)

    def look(self, unit: str) -> Found | None:
        self.looked.append(unit)
        return self.unneeded.get(unit)


def cpu(unit: str) -> Found:
    return ("cpu", (f"{unit}-0",), False)


def test_since_is_the_first_update_a_unit_is_unneeded_and_is_kept() -> None:
    idle, cluster = IdleUnits(), Cluster({"u1": cpu("u1")})
    idle.mark(["u1"])
    idle.update(T0, cluster.look)
    idle.mark(["u1"])
    idle.update(T0 + 100, cluster.look)
    assert idle.since == {"u1": T0}
    assert idle.units["u1"] == Idle("cpu", ("u1-0",), T0, False)


def test_only_marked_units_are_looked_at_once() -> None:
    idle, cluster = IdleUnits(), Cluster({"u1": cpu("u1"), "u2": cpu("u2")})
    idle.mark(["u1", "u1"])
    idle.update(T0, cluster.look)
    idle.update(T0 + 1, cluster.look)  # nothing marked since
    assert (cluster.looked, idle.since) == (["u1"], {"u1": T0})


def test_a_unit_needed_again_is_forgotten_and_starts_over() -> None:
    idle, cluster = IdleUnits(), Cluster({"u1": cpu("u1")})
    idle.mark(["u1"])
    idle.update(T0, cluster.look)
    del cluster.unneeded["u1"]  # a pod landed on it
    idle.mark(["u1"])
    idle.update(T0 + 100, cluster.look)
    assert (idle.since, idle.due(UNNEEDED)) == ({}, None)
    cluster.unneeded["u1"] = cpu("u1")
    idle.mark(["u1"])
    idle.update(T0 + 200, cluster.look)
    assert idle.since == {"u1": T0 + 200}


def test_a_unit_that_loses_a_host_keeps_its_time_and_becomes_due_at_once() -> None:
    idle, cluster = IdleUnits(), Cluster({"s1": ("tpu", ("s1-0", "s1-1"), False)})
    idle.mark(["s1"])
    idle.update(T0, cluster.look)
    assert idle.due(UNNEEDED) == T0 + UNNEEDED
    cluster.unneeded["s1"] = ("tpu", ("s1-1",), True)
    idle.mark(["s1"])
    idle.update(T0 + 100, cluster.look)
    assert idle.units["s1"] == Idle("tpu", ("s1-1",), T0, True)
    assert idle.due(UNNEEDED) == T0


def test_due_is_the_earliest_time_a_unit_becomes_removable() -> None:
    idle = IdleUnits()
    assert idle.due(UNNEEDED) is None
    idle.mark(["u1"])
    idle.update(T0, Cluster({"u1": cpu("u1")}).look)
    idle.mark(["u2", "s1"])
    idle.update(T0 + 50, Cluster({"u2": cpu("u2"), "s1": ("tpu", ("s1-1",), True)}).look)
    assert idle.due(UNNEEDED) == T0 + 50  # the broken unit, at once
    idle.forget("s1")
    assert idle.due(UNNEEDED) == T0 + UNNEEDED
    idle.forget("u1")
    assert idle.due(UNNEEDED) == T0 + 50 + UNNEEDED
    idle.forget("never-seen")
    assert idle.due(UNNEEDED) == T0 + 50 + UNNEEDED


def test_restore_keeps_the_known_time_and_looks_again() -> None:
    idle, cluster = IdleUnits(), Cluster({"u1": cpu("u1")})
    idle.restore("u1", Idle("cpu", ("u1-0",), T0 - 500, False))
    assert idle.due(UNNEEDED) == T0 + 100
    idle.update(T0, cluster.look)
    assert (cluster.looked, idle.since) == (["u1"], {"u1": T0 - 500})


@dataclass(frozen=True)
class Case:
    id: str
    #: unit -> (pool, nodes, since)
    units: Mapping[str, tuple[str, tuple[str, ...], float]]
    counts: Mapping[str, int]
    removed: list[str]
    now: float = T0


CASES = [
    Case("not-idle-long-enough", {"u1": ("cpu", ("u1-0",), T0 - UNNEEDED + 1)}, {"cpu": 5}, []),
    Case("idle-long-enough", {"u1": ("cpu", ("u1-0",), T0 - UNNEEDED)}, {"cpu": 5}, ["u1"]),
    Case("never-below-min-units", {"u1": ("cpu", ("u1-0",), T0 - 900), "u2": ("cpu", ("u2-0",), T0 - 700)},
         {"cpu": 2}, ["u1"]),
    Case("at-min-units-nothing-goes", {"u1": ("cpu", ("u1-0",), T0 - 900)}, {"cpu": 1}, []),
    Case("longest-idle-first", {"u2": ("cpu", ("u2-0",), T0 - 700), "u1": ("cpu", ("u1-0",), T0 - 900),
                                "u3": ("cpu", ("u3-0",), T0 - 800)}, {"cpu": 3}, ["u1", "u3"]),
    Case("ties-by-unit-name", {"ub": ("cpu", ("ub-0",), T0 - 900), "ua": ("cpu", ("ua-0",), T0 - 900)},
         {"cpu": 2}, ["ua"]),
    Case("broken-at-once", {"s1": ("tpu", ("s1-1",), T0)}, {"tpu": 1}, ["s1"]),
    Case("broken-before-longer-idle", {"s1": ("tpu", ("s1-0", "s1-1"), T0 - 900), "s2": ("tpu", ("s2-1",), T0)},
         {"tpu": 2}, ["s2", "s1"]),
    Case("pools-counted-apart", {"u1": ("cpu", ("u1-0",), T0 - 900), "s1": ("tpu", ("s1-0", "s1-1"), T0 - 900)},
         {"cpu": 1, "tpu": 1}, ["s1"]),
    Case("a-count-below-min-removes-nothing", {"u1": ("cpu", ("u1-0",), T0 - 900)}, {}, []),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_ripe(case: Case) -> None:
    """Per pool: broken units first, then the longest idle, down to minUnits (counted by the callback)."""
    idle = IdleUnits()
    for unit, (pool_name, nodes, since) in case.units.items():
        idle.restore(unit, Idle(pool_name, nodes, since, len(nodes) < POOLS[pool_name].nodes_per_unit))
    removals = idle.ripe(POOLS, lambda name: case.counts.get(name, 0), case.now, UNNEEDED)
    assert [r.unit for r in removals] == case.removed


def test_ripe_reports_the_unit_nodes_and_idle_time() -> None:
    idle = IdleUnits()
    idle.restore("s1", Idle("tpu", ("s1-0", "s1-1"), T0 - 900, False))
    assert idle.ripe(POOLS, lambda name: 1, T0, UNNEEDED) == [Removal("tpu", "s1", ("s1-0", "s1-1"), T0 - 900)]
    idle.forget("s1")
    assert idle.ripe(POOLS, lambda name: 1, T0, UNNEEDED) == []
