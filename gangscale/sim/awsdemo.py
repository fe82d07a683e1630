"""The demo on the ``aws`` provider: a scenario's pools as EKS pools on the fake EC2 (:mod:`gangscale.sim.aws`).

Each pool of the scenario becomes a pool with an ``aws:`` block on the fake EKS cluster ``demo`` in ``us-east-1``,
with a subnet (``/20``, in the pool's zone) and a launch template of its own (``set_up`` of the fake writes the pool's
labels and taints into the template's ``NodeConfig``). A zone keeps its letter (``us-central1-b`` → ``us-east-1b``;
none: ``us-east-1a``, where the simulated provider's zone-less pools also share one zone); capacity types are
carried over (``flex-start``, GKE's Dynamic Workload Scheduler, has no AWS counterpart and becomes ``on-demand``; a
``reservation`` pool gets a capacity reservation ``cr-…`` of the fake, of the pool's size).

The instance type (:func:`ec2_machine`) matches the scenario machine's accelerators first, then its CPUs: (1) the
smallest of the catalog's EC2 types with the same number of accelerators and at least the machine's vCPUs and
memory; else (2) the smallest with more GPUs that has them; else (3) the biggest with the same number. A pool
without a machine type is matched by its allocatable. For the built-in scenarios (``tests/sim/aws/test_demo.py``
checks this table):

==================  ==================================  ============  =============================================
scenario machine    accelerators, vCPUs, memory         EC2 type      why
==================  ==================================  ============  =============================================
a3-highgpu-8g       8 H100, 208, 1872 GiB               p5.48xlarge   (3) 8 H100 too; 192 vCPUs (pods ask ≤ 100)
a3-highgpu-1g       1 H100, 26, 234 GiB                 g6e.12xlarge  (2) no one-GPU type has 26 vCPUs: 4 GPUs
a2-highgpu-4g       4 A100, 48, 340 GiB                 g6e.12xlarge  (1)
g2-standard-8       1 L4, 8, 32 GiB                     g5.2xlarge    (1)
ct5lp-hightpu-4t    4 v5e TPU chips, 112, 192 GiB       g6e.12xlarge  (3) a TPU host is four GPUs, see below
allocatable only    cpu 8, memory 32Gi                  m5.2xlarge    (1)
==================  ==================================  ============  =============================================

Differences from the simulated provider, and why:

- **TPUs**: EC2 has none. A TPU host becomes an instance with as many GPUs as the host has chips, and the scenario's
  ``google.com/tpu`` becomes ``nvidia.com/gpu`` in its workloads and Kueue quotas (:func:`aws_scenario`); step (2)
  is not taken for TPU hosts, so that each host stays one node (a v5e host's 112 vCPUs serve its TPU, and the
  scenarios' TPU pods ask for none). A multi-host slice becomes that many single-instance units (a unit of the aws
  provider is one instance), so ``maxUnits``, ``minUnits`` and ``simulated.stock`` are multiplied by the hosts and
  the price divided by them. The nodes carry the labels the scenario's nodes carry (GKE's TPU and accelerator
  labels included) through ``--node-labels``, so the scenario's selectors and flavors match unchanged.
- **Packing**: where step (2) or (3) chose the type, a node holds more (or less) than the scenario's machine: the
  ``a3-highgpu-1g`` pools get four GPUs per node (so fewer nodes serve the same pods), the ``a3-highgpu-8g`` ones 16
  vCPUs fewer; a CPU pool's node has EKS's allocatable for its type (7910m of 8 CPUs), not the scenario's. Node
  counts differ there (ray-autoscaling: 5 nodes, not 16; ray-gangs: 12, not 24), and a pod may start on a node
  that is up already (ray-autoscaling's trial-4 runs at 150 s, not 270 s); which workloads finish, and the
  accelerator-hours lost, do not.
- **Stock**: EC2's capacity is per (instance type, zone, lifecycle), not per pool: the fake's stock of a key is
  what the scenario's pools of that key could have out at once (each pool's ``simulated.stock``, or ``maxUnits``
  without one, in instances) less its live instances, as :mod:`gangscale.sim.gkedemo` does per zone and machine
  type. A ``stockout`` sets a pool's share to 0 until it ends. A ``partialGrant`` cannot happen: a fleet with
  ``MinTargetCapacity`` equal to the total launches all or nothing, so the pool's share is the grant until its next
  ``CreateFleet`` (a larger gang gets nothing: a stockout, as on EC2), then as before.
- **Timing** is one setting for the whole fake: an instance runs and registers its Node at once, which turns Ready
  the largest ``provisionSeconds`` of the scenario's pools later (a ``provisionSeconds`` change sets it): the fake's
  timing knobs are not per pool. So the faster pools of a scenario come up later than on the simulated provider
  (ray-gangs' GPU workers run at 376 s instead of 256 s; the workload still ends when it did).
- **Reclaims**: a scenario's ``reclaim`` gives EC2's two-minute interruption notice (AWS Node Termination Handler
  taints the Node) to the oldest running spot instances of the region, not the pool's (the built-in scenarios have
  one spot pool), instead of the simulated provider's notice.
- Not carried over: ``neverReady`` and the simulated provider's other fault knobs (quota, lost answers, latency):
  the fake has its own (``Ec2Faults``), which no scenario sets; such a change is shown in the timeline only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangscale.config import REGION_LABEL, parse_pool_file
from gangscale.model.catalog import CATALOG, GPU_RESOURCE, TPU_RESOURCE
from gangscale.model.nodepool import INSTANCE_TYPE_LABEL, POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.model.quantity import canonical
from gangscale.model.resources import CPU, MEMORY
from gangscale.model.tiers import FLEX_START, ON_DEMAND, RESERVATION, SPOT
from gangscale.sim.aws import Exchange, FakeEc2
from gangscale.sim.aws.server import ec2_machines
from gangscale.sim.scenario import Scenario

REGION, CLUSTER = "us-east-1", "demo"
ZONE = f"{REGION}a"
JSON = dict[str, Any]
#: Labels the aws pool sets itself (for its own zone and type); the scenario's values would be wrong there.
_OWN_LABELS = frozenset({POOL_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL, REGION_LABEL})
#: Keys of a scenario pool that describe the GCE machine or the gke provider, not an EC2 instance.
_GCE_KEYS = frozenset({"machineType", "tpuTopology", "nodesPerUnit", "allocatable", "zone", "gke", "aws",
                       "reservation", "capacityType", "maxUnits", "minUnits", "pricePerUnitHour", "simulated"})
_EKS_LIFECYCLE = {SPOT: "spot"}


# --- instance types ---------------------------------------------------------------------------------------------


def _shape(pool: NodePool) -> tuple[int, int, int, bool]:
    """Accelerators, vCPUs, memory (bytes) of a scenario pool's node, and whether its accelerators are TPU chips."""
    machine = CATALOG.get(pool.machine_type)
    if machine is not None:
        return machine.gpus + machine.tpu_chips + machine.neuron, machine.vcpus, machine.memory, machine.is_tpu
    amounts = pool.allocatable
    accelerators = int(amounts.get(GPU_RESOURCE, 0) or 0) + int(amounts.get(TPU_RESOURCE, 0) or 0)
    cpus = -(-int(amounts.get(CPU, 0) or 0) // 1000)
    return accelerators, cpus, int(amounts.get(MEMORY, 0) or 0), TPU_RESOURCE in amounts


def ec2_machine(pool: NodePool) -> str:
    """The EC2 instance type for a scenario pool (the rule and the table are in the module docstring)."""
    accelerators, vcpus, memory, tpu = _shape(pool)
    machines = [m for m in ec2_machines().values() if not m.neuron]
    same = [m for m in machines if m.gpus == accelerators]
    holds = [m for m in same if m.vcpus >= vcpus and m.memory >= memory]
    if holds:
        return min(holds, key=lambda m: (m.vcpus, m.memory, m.name)).name
    bigger = [m for m in machines if m.gpus > accelerators and m.vcpus >= vcpus and m.memory >= memory]
    if bigger and not tpu:
        return min(bigger, key=lambda m: (m.gpus, m.vcpus, m.memory, m.name)).name
    if same:
        return min(same, key=lambda m: (-m.vcpus, -m.memory, m.name)).name
    more = [m for m in machines if m.gpus >= accelerators]
    if not more:
        raise ValueError(f"pool {pool.name}: no EC2 type of the catalog has {accelerators} accelerators")
    return min(more, key=lambda m: (m.gpus, -m.vcpus, m.name)).name


def aws_zone(zone: str) -> str:
    """The scenario's zone in ``us-east-1``, by its letter (``us-central1-b`` → ``us-east-1b``)."""
    return f"{REGION}{zone[-1]}" if zone and zone[-1].isalpha() else ZONE


# --- pools and scenario -----------------------------------------------------------------------------------------


def aws_pool_specs(specs: Sequence[JSON]) -> list[JSON]:
    """The scenario's pool specs as aws pools (their ``simulated`` blocks kept, in instances, for the stock)."""
    pools = parse_pool_file({"nodePools": [dict(s) for s in specs]}).pools
    return [_aws_spec(index, raw, pool) for index, (raw, pool) in enumerate(zip(specs, pools, strict=True))]


def _aws_spec(index: int, raw: Mapping[str, Any], pool: NodePool) -> JSON:
    hosts = pool.nodes_per_unit
    capacity = ON_DEMAND if pool.capacity_type == FLEX_START else pool.capacity_type
    spec: JSON = {key: value for key, value in raw.items() if key not in _GCE_KEYS}
    spec.update(machineType=ec2_machine(pool), zone=aws_zone(pool.zone), capacityType=capacity,
                maxUnits=pool.max_units * hosts,
                labels={k: v for k, v in pool.labels.items() if k not in _OWN_LABELS},
                aws={"region": REGION, "cluster": CLUSTER, "launchTemplate": f"lt-{index + 1:017x}",
                     "subnet": f"subnet-{index + 1:017x}"})
    if pool.min_units:
        spec["minUnits"] = pool.min_units * hosts
    if "pricePerUnitHour" in raw:
        spec["pricePerUnitHour"] = float(raw["pricePerUnitHour"]) / hosts
    if capacity == RESERVATION:
        spec["reservation"] = {"name": f"cr-{index + 1:017x}",
                               "nodes": (pool.reservation_nodes or pool.max_units) * hosts}
    simulated = dict(raw.get("simulated") or {})
    if simulated.get("stock") is not None:
        simulated["stock"] = int(simulated["stock"]) * hosts
    if simulated:
        spec["simulated"] = simulated
    return spec


def hosts_per_unit(specs: Sequence[JSON]) -> dict[str, int]:
    """Instances per scenario unit, by pool name (a multi-host TPU slice's hosts; else 1)."""
    return {p.name: p.nodes_per_unit for p in parse_pool_file({"nodePools": [dict(s) for s in specs]}).pools}


def aws_scenario(scenario: Scenario) -> Scenario:
    """The scenario with ``google.com/tpu`` asked for as ``nvidia.com/gpu`` (in its workloads and Kueue objects),
    when it has TPU pools; else the scenario itself."""
    if not any(CATALOG[p.machine_type].is_tpu for p in scenario.pools() if p.machine_type in CATALOG):
        return scenario
    raw = scenario.model_dump(by_alias=True, exclude_unset=True)
    for key in ("workloads", "kueue"):
        if key in raw:
            raw[key] = _gpus_for_tpus(raw[key])
    return Scenario.model_validate(raw)


def _gpus_for_tpus(value: Any) -> Any:
    if isinstance(value, list):
        return [_gpus_for_tpus(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _gpus_for_tpus(v) for k, v in value.items() if k != TPU_RESOURCE}
    if TPU_RESOURCE in value:
        chips = int(canonical(TPU_RESOURCE, value[TPU_RESOURCE]))
        out[GPU_RESOURCE] = chips + int(canonical(GPU_RESOURCE, out.get(GPU_RESOURCE, 0)))
    return out


# --- the fake's stock and timing ----------------------------------------------------------------------------------


def _key(pool: NodePool) -> tuple[str, str, str] | None:
    """The fake's stock key of a pool; None for a reservation pool (its capacity reservation bounds it)."""
    if pool.capacity_type == RESERVATION:
        return None
    return pool.machine_type, pool.zone, _EKS_LIFECYCLE.get(pool.capacity_type, "on-demand")


class Capacity:
    """Each pool's stock as the scenario sets it (in instances), folded into the fake's stock per (instance type,
    zone, lifecycle); scenario units are converted with ``hosts``."""

    def __init__(self, ec2: FakeEc2, pools: Sequence[NodePool], hosts: Mapping[str, int]) -> None:
        self.ec2, self.pools = ec2, tuple(pools)
        self.hosts = {p.name: hosts.get(p.name, 1) for p in pools}
        self.units: dict[str, int | None] = {
            p.name: (None if (s := p.provider.get("simulated", {}).get("stock")) is None else int(s)) for p in pools}
        self.stocked_out: set[str] = set()
        #: Pools whose next CreateFleet gets at most this many instances (a scenario's partial grant).
        self.grants: dict[str, int] = {}
        ec2.observers.append(self._seen)

    def set(self, pool: str, units: int | None) -> None:
        """The pool's stock in scenario units (None: unlimited)."""
        self.units[pool] = None if units is None else units * self.hosts[pool]
        self._apply_pool(pool)

    def stockout(self, pool: str, on: bool) -> None:
        (self.stocked_out.add if on else self.stocked_out.discard)(pool)
        self._apply_pool(pool)

    def partial_grant(self, pool: str, units: int) -> None:
        self.grants[pool] = units * self.hosts[pool]
        self._apply_pool(pool)

    def apply_all(self) -> None:
        for key in sorted({k for p in self.pools if (k := _key(p)) is not None}):
            self._apply(key)

    def _seen(self, exchange: Exchange) -> None:
        # A partial grant lasts for one fleet of the pool (answered, whatever it launched), as the simulated
        # provider's lasts for one obtain.
        if exchange.action != "CreateFleet" or not exchange.status or exchange.params is None:
            return
        for pool in _tag_values(exchange.params, "gangscale.io/pool"):
            if self.grants.pop(pool, None) is not None:
                self._apply_pool(pool)

    def _apply_pool(self, pool: str) -> None:
        key = _key(next(p for p in self.pools if p.name == pool))
        if key is not None:
            self._apply(key)

    def _share(self, pool: NodePool) -> int | None:
        if pool.name in self.stocked_out:
            return 0
        units = self.units[pool.name]
        if pool.name in self.grants:
            return min(self.grants[pool.name], pool.max_units if units is None else units)
        return units

    def _apply(self, key: tuple[str, str, str]) -> None:
        same = [p for p in self.pools if _key(p) == key]
        shares = [self._share(p) for p in same]
        if all(s is None for s in shares):
            self.ec2.stock.pop(key, None)
        else:
            total = sum(p.max_units if s is None else s for p, s in zip(same, shares, strict=True))
            in_use = sum(1 for i in self.ec2.instances.values()
                         if i.live and i.capacity_reservation_id is None
                         and (i.instance_type, i.zone, i.lifecycle) == key)
            self.ec2.stock[key] = max(0, total - in_use)
        self.ec2.poke()


def _tag_values(params: JSON, key: str) -> Iterable[str]:
    for spec in params.get("TagSpecifications") or []:
        for tag in spec.get("Tags") or []:
            if tag.get("Key") == key:
                yield str(tag.get("Value", ""))


def configure(ec2: FakeEc2, pools: Sequence[NodePool], hosts: Mapping[str, int] | None = None) -> Capacity:
    """Stock and timing from the pools' ``simulated`` blocks."""
    seconds = [float(dict(p.provider.get("simulated", {})).get("provisionSeconds", 0.0)) for p in pools]
    ec2.faults.ready_seconds = max(seconds, default=0.0)
    capacity = Capacity(ec2, pools, hosts or {})
    capacity.apply_all()
    return capacity
