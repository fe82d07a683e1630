"""The demo on the ``gke`` provider: a scenario's pools as GKE pools on the fake control plane (``sim/gcp``).

Each pool of the scenario becomes a pool with a ``gke:`` block on the fake cluster ``demo-project/us-central1/
demo``: ``slice`` mode when a unit has several hosts (a multi-host TPU slice is a node pool of its own), else
``resize`` on an existing node pool of the pool's name, whose labels name the gangscale pool (so the
demo's observer finds its nodes by that label). A pool without a zone is put in ``us-central1-a`` (the simulated
provider's pools without a zone share one zone, so gangs may span them), and one with only an allocatable gets the
smallest ``n2-standard`` machine type with its CPUs.

Compute Engine's capacity is per zone and machine type, not per pool: the fake's stock of a (zone, machine type)
is what the scenario's pools of that zone and machine type could have out at once — each pool's
``simulated.stock`` units, or its ``maxUnits`` when it has no stock limit — in VMs, less the VMs that exist. So a
pool "out of stock" in the scenario lowers what the zone can give, and a gang that needs more than the zone has
stocks out there: with GKE's per-pool atomicity, the slices made before the one that failed are deleted again
(what gangscale does on real GKE). The fake's timing is one setting for every pool: a node turns Ready the
largest ``provisionSeconds`` of the scenario's pools after its VM registers. The simulated provider's other
knobs are not carried over: partial grants (the fake's ``partial_gpu_grant`` caps a node-pool create, not the
createInstances calls the demo's single-host pools use), and nodes never Ready (the fake's ``never_ready`` breaks every
new VM of the cloud, a scenario's only those of one pool); such a change is shown in the timeline and otherwise
ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gangscale.config import parse_pool_file
from gangscale.model.nodepool import NodePool
from gangscale.sim.gcp import FakeGcp

PROJECT, REGION, CLUSTER = "demo-project", "us-central1", "demo"
ZONE = f"{REGION}-a"


def gke_pool_specs(specs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scenario's pool specs with zones and gke blocks (their ``simulated`` blocks kept for the stock)."""
    out = []
    for raw in specs:
        spec = dict(raw)
        spec.setdefault("zone", ZONE)
        if not spec.get("machineType"):
            spec["machineType"] = cpu_machine(spec)
        hosts = parse_pool_file({"nodePools": [raw]}).pools[0].nodes_per_unit
        spec["gke"] = {"project": PROJECT, "location": REGION, "cluster": CLUSTER,
                       **({"mode": "slice"} if hosts > 1 else {"mode": "resize", "nodePool": spec["name"]})}
        out.append(spec)
    return out


#: vCPU counts of the n2-standard machine types.
N2_SIZES = (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)


def cpu_machine(spec: dict[str, Any]) -> str:
    """A machine type for a pool the scenario gives only an allocatable: the smallest n2-standard with at least
    its CPUs (its allocatable stays as the scenario wrote it)."""
    cpus = float(parse_quantity_cpu(str((spec.get("allocatable") or {}).get("cpu", "2"))))
    return f"n2-standard-{next((n for n in N2_SIZES if n >= cpus), N2_SIZES[-1])}"


def parse_quantity_cpu(value: str) -> float:
    return int(value[:-1]) / 1000 if value.endswith("m") else float(value)


class Capacity:
    """Each pool's stock as the scenario sets it, folded into the fake's stock per zone and machine type."""

    def __init__(self, gcp: FakeGcp, pools: Sequence[NodePool]) -> None:
        self.gcp, self.pools = gcp, tuple(pools)
        self.units: dict[str, int | None] = {
            p.name: (None if (s := p.provider.get("simulated", {}).get("stock")) is None else int(s)) for p in pools}

    def set(self, pool: str, units: int | None) -> None:
        self.units[pool] = units
        found = next(p for p in self.pools if p.name == pool)
        self._apply(found.zone, found.machine_type)

    def apply_all(self) -> None:
        for key in sorted({(p.zone, p.machine_type) for p in self.pools}):
            self._apply(*key)

    def _apply(self, zone: str, machine: str) -> None:
        same = [p for p in self.pools if (p.zone, p.machine_type) == (zone, machine)]
        if all(self.units[p.name] is None for p in same):
            self.gcp.faults.stock.pop((zone, machine), None)
        else:
            vms = sum((p.max_units if self.units[p.name] is None else self.units[p.name] or 0) * p.nodes_per_unit
                      for p in same)
            in_use = sum(1 for vm in self.gcp.state.vms.values() if (vm.zone, vm.machine_type) == (zone, machine))
            self.gcp.faults.stock[(zone, machine)] = max(0, vms - in_use)
        self.gcp.poke()


def configure(gcp: FakeGcp, pools: Sequence[NodePool]) -> Capacity:
    """Stock and timing from the pools' ``simulated`` blocks."""
    seconds: list[float] = [float(dict(p.provider.get("simulated", {})).get("provisionSeconds", 0.0)) for p in pools]
    gcp.faults.ready_seconds = max(seconds, default=0.0)
    capacity = Capacity(gcp, pools)
    capacity.apply_all()
    return capacity

