"""Seeded generators of realistic planner inputs: GKE-like clusters and the gangs queued against them.

Pure: every choice comes from the ``random.Random`` passed in, so ``(sizes, seed)`` names an input exactly.
Times are relative to :data:`SYNTH_NOW` (plan with ``now=SYNTH_NOW``): backoffs end after it, gangs were
created before it.

Assumptions, so that figures built on these inputs are read right:

- allocatable equals the machine's published shape (GKE reserves a few percent; only ratios matter here);
- accelerator pools carry the taints GKE puts on them, and gangs rely on the planner's implicit toleration of
  taints keyed by a requested extended resource (TPU pods also tolerate explicitly, as JobSets do);
- a TPU slice gang is one pod set, one pod per host (hostname anti-affinity), 4 chips per pod.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gangscale.model.gang import Gang, PodSet
from gangscale.model.nodepool import INSTANCE_TYPE_LABEL, POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.model.pod import HOSTNAME_LABEL, pod_demand
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint
from gangscale.model.snapshot import NodeState, PoolState, Quota, Snapshot

SYNTH_NOW = 1_700_000_000.0
GPU_LABEL = "cloud.google.com/gke-accelerator"
TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
GKE_POOL_LABEL = "cloud.google.com/gke-nodepool"
GPU, TPU = "nvidia.com/gpu", "google.com/tpu"
GPU_TAINT = Taint(GPU, "present", "NoSchedule")
TPU_TAINT = Taint(TPU, "present", "NoSchedule")


@dataclass(frozen=True, slots=True)
class Machine:
    """One pool flavour: its nodes' shape and labels, and how many hosts make a unit."""

    short: str
    machine_type: str
    allocatable: Mapping[str, str | int]
    labels: Mapping[str, str]
    taint: Taint | None = None
    nodes_per_unit: int = 1
    price_per_node: float = 1.0

    @property
    def resources(self) -> ResourceList:
        return ResourceList.parse(self.allocatable)

    @property
    def kind(self) -> str:
        return "gpu" if GPU in self.allocatable else "tpu" if TPU in self.allocatable else "cpu"


_V5E: dict[str, str | int] = {"cpu": "112", "memory": "192Gi", TPU: "4", "pods": "110"}
_V5E_LABELS = {TPU_LABEL: "tpu-v5-lite-podslice"}
MACHINES: tuple[Machine, ...] = (
    Machine("n2", "n2-standard-32", {"cpu": "32", "memory": "128Gi", "pods": "110"}, {}, price_per_node=1.55),
    Machine("h100", "a3-highgpu-8g", {"cpu": "208", "memory": "1872Gi", GPU: "8", "pods": "110"},
            {GPU_LABEL: "nvidia-h100-80gb"}, GPU_TAINT, price_per_node=88.3),
    Machine("l4", "g2-standard-48", {"cpu": "48", "memory": "192Gi", GPU: "4", "pods": "110"},
            {GPU_LABEL: "nvidia-l4"}, GPU_TAINT, price_per_node=4.0),
    Machine("v5e-2x4", "ct5lp-hightpu-4t", _V5E, {**_V5E_LABELS, TOPOLOGY_LABEL: "2x4"}, TPU_TAINT, 2, 4.8),
    Machine("v5e-4x4", "ct5lp-hightpu-4t", _V5E, {**_V5E_LABELS, TOPOLOGY_LABEL: "4x4"}, TPU_TAINT, 4, 4.8),
    Machine("c3", "c3-standard-88", {"cpu": "88", "memory": "352Gi", "pods": "110"}, {}, price_per_node=4.6),
    Machine("v5e-2x2", "ct5lp-hightpu-4t", _V5E, {**_V5E_LABELS, TOPOLOGY_LABEL: "2x2"}, TPU_TAINT, 1, 4.8),
    Machine("e2", "e2-standard-16", {"cpu": "16", "memory": "64Gi", "pods": "110"}, {}, price_per_node=0.54),
)
_MACHINE_WEIGHTS = (3, 2, 3, 1, 1, 2, 1, 2)
ZONES = tuple(f"us-central1-{letter}" for letter in "abcfdeghij")


# --- clusters ---------------------------------------------------------------------------------------------

def make_pool(machine: Machine, name: str, zone: str, max_units: int) -> NodePool:
    labels = {POOL_LABEL: name, GKE_POOL_LABEL: name, ZONE_LABEL: zone,
              INSTANCE_TYPE_LABEL: machine.machine_type, **machine.labels}
    return NodePool(name=name, allocatable=machine.resources, max_units=max_units,
                    labels=labels, taints=(machine.taint,) if machine.taint else (),
                    nodes_per_unit=machine.nodes_per_unit, zone=zone, machine_type=machine.machine_type,
                    tpu_topology=machine.labels.get(TOPOLOGY_LABEL, ""),
                    price_per_unit_hour=machine.price_per_node * machine.nodes_per_unit)


def _used(alloc: ResourceList, rng: random.Random) -> ResourceList:
    """Requests of the pods already on a node: DaemonSets everywhere, then an accelerator-aligned share."""
    share = rng.choice((0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0))
    used = {"cpu": 400, "memory": 1 << 30, "pods": 4}
    for name in alloc:
        if "/" in name:
            used[name] = int(alloc[name] * share)
    used["cpu"] += int(alloc.get("cpu") * 0.9 * share)
    used["memory"] += int(alloc.get("memory") * 0.8 * share)
    return ResourceList({name: min(value, alloc.get(name)) for name, value in used.items()})


def _node(pool: NodePool, index: int, rng: random.Random) -> NodeState:
    name = f"gke-{pool.name}-{index:04d}"
    # A few nodes are cordoned or not Ready: they must offer nothing.
    ready, cordoned = rng.random() > 0.02, rng.random() < 0.02
    return NodeState(name=name, allocatable=pool.allocatable, requested=_used(pool.allocatable, rng),
                     labels={**pool.labels, HOSTNAME_LABEL: name}, taints=pool.taints, ready=ready,
                     unschedulable=cordoned)


def _spread_units(machines: Sequence[Machine], nodes: int, rng: random.Random) -> list[int]:
    """Existing units per pool totalling exactly ``nodes`` nodes (index 0 is a one-node-unit CPU pool)."""
    units = [0] * len(machines)
    weights = [rng.uniform(0.2, 1.0) for _ in machines]
    singles = [i for i, machine in enumerate(machines) if machine.nodes_per_unit == 1]
    left = nodes
    while left:
        i = rng.choices(range(len(machines)), weights)[0]
        if machines[i].nodes_per_unit > left:
            i = rng.choice(singles)
        units[i] += 1
        left -= machines[i].nodes_per_unit
    return units


def synth_cluster(pools: int, nodes: int, zones: int, rng: random.Random) -> Snapshot:
    """``pools`` pools over ``zones`` zones with ``nodes`` registered nodes in all (``pools`` >= 1).

    The first pools cycle through :data:`MACHINES` so even small clusters have every flavour; the rest
    are drawn by weight. Headroom ranges from none to plenty, a fifth of the pools have units in flight,
    one or two pools are backed off (until after :data:`SYNTH_NOW`), and a GPU quota applies everywhere.
    """
    if pools < 1:
        raise ValueError("a cluster needs at least one pool")
    zone_names = ZONES[:max(1, min(zones, len(ZONES)))]
    machines = [MACHINES[i] if i < len(MACHINES) else rng.choices(MACHINES, _MACHINE_WEIGHTS)[0]
                for i in range(pools)]
    units = _spread_units(machines, nodes, rng)
    backed_off = set(rng.sample(range(pools), min(pools // 4, rng.choice((1, 2)))))
    states: list[PoolState] = []
    node_states: list[NodeState] = []
    for i, machine in enumerate(machines):
        zone = zone_names[i % len(zone_names)]
        inflight = rng.choice((1, 2)) if rng.random() < 0.2 else 0
        headroom = rng.choice((0, 2, 4, 8, 16, 32, 64, 128))
        pool = make_pool(machine, f"{machine.short}-{zone[-1]}-{i:03d}", zone, units[i] + inflight + headroom)
        backoff = SYNTH_NOW + 600.0 if i in backed_off else None
        states.append(PoolState(pool, units[i], inflight, backoff, "GCE_STOCKOUT" if backoff else ""))
        node_states.extend(_node(pool, j, rng) for j in range(units[i] * machine.nodes_per_unit))
    quota = Quota("NVIDIA_H100_GPUS", GPU, rng.choice((512, 1024, 4096)) * max(1, pools // 10))
    return Snapshot(tuple(states), tuple(node_states), (), (quota,))


def empty_pools(snapshot: Snapshot, max_units: int = 100_000) -> list[NodePool]:
    """The snapshot's pools with ample ``max_units`` and, by construction, no nodes, backoff or quota."""
    return [replace(state.pool, max_units=max_units) for state in snapshot.pools]


# --- gangs ------------------------------------------------------------------------------------------------

def template(requests: Mapping[str, Any], *, selector: Mapping[str, str] | None = None,
             labels: Mapping[str, str] | None = None, tolerate: str = "", one_per_node: bool = False) -> dict[str, Any]:
    """A pod template as a controller would submit it; ``one_per_node`` repels pods with the same labels."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:latest",
                                            "resources": {"requests": dict(requests)}}]}
    if selector:
        spec["nodeSelector"] = dict(selector)
    if tolerate:
        spec["tolerations"] = [{"key": tolerate, "operator": "Exists", "effect": "NoSchedule"}]
    if one_per_node:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME_LABEL, "labelSelector": {"matchLabels": dict(labels or {})}}]}}
    return {"metadata": {"labels": dict(labels or {})}, "spec": spec}


def _pod_set(key: str, name: str, count: int, requests: Mapping[str, Any], **kwargs: Any) -> PodSet:
    labels = {"gangscale.test/gang": key.replace("/", "."), "gangscale.test/role": name}
    return PodSet(name, count, pod_demand(template(requests, labels=labels, **kwargs), f"{key}/{name}"))


def _gpu_workers(key: str, machine: Machine, rng: random.Random, name: str = "worker",
                 pods: int | None = None) -> PodSet:
    """Data-parallel GPU workers; whole-node workers are one per node, as torchrun launchers ask."""
    node = machine.resources
    per_node = node[GPU]
    gpus = rng.choice([g for g in (1, 2, 4, 8, 8) if g <= per_node] + [per_node])
    # Leave room per GPU for the node's DaemonSets, as real job specs do.
    cpu_per_gpu = node["cpu"] // 1000 // per_node - 2
    memory_per_gpu = (node["memory"] >> 30) // per_node - 8
    # Queues hold mostly small jobs and a few large ones.
    count = pods if pods is not None else rng.choice((4, 4, 8, 8, 8, 16, 16, 32, rng.randint(4, 64)))
    requests = {GPU: gpus, "cpu": cpu_per_gpu * gpus, "memory": f"{memory_per_gpu * gpus}Gi"}
    return _pod_set(key, name, count, requests, selector=machine.labels, one_per_node=gpus == per_node)


def _tpu_slices(key: str, machine: Machine, rng: random.Random) -> PodSet:
    hosts = machine.nodes_per_unit
    requests = {TPU: 4, "cpu": rng.choice((24, 64, 100)), "memory": f"{rng.choice((64, 128, 160))}Gi"}
    return _pod_set(key, "slice", hosts * rng.randint(1, 4), requests, selector=machine.labels, tolerate=TPU,
                    one_per_node=True)


def _cpu_workers(key: str, machine: Machine | None, rng: random.Random, name: str = "worker") -> PodSet:
    """CPU batch workers; with ``machine`` they select its instance type, else they fit any CPU pool."""
    top = machine.resources["cpu"] // 1000 if machine else 16
    cpu = rng.choice([c for c in (1, 2, 4, 8, 15, 30, 60) if c < top] + [top - 1])
    selector = {INSTANCE_TYPE_LABEL: machine.machine_type} if machine else None
    count = rng.choice((4, 8, 16, rng.randint(4, 64)))
    return _pod_set(key, name, count, {"cpu": cpu, "memory": f"{cpu * 4 - 2}Gi"}, selector=selector)


def _mixed_gang(key: str, machines: Sequence[Machine], rng: random.Random) -> tuple[PodSet, ...]:
    accelerated = [m for m in machines if m.kind != "cpu"]
    kind = rng.choice(("dp", "dp", "ray", "tpu", "cpu") if accelerated else ("cpu",))
    gpus = [m for m in accelerated if m.kind == "gpu"]
    tpus = [m for m in accelerated if m.kind == "tpu"]
    if kind == "dp" and gpus:
        return (_gpu_workers(key, rng.choice(gpus), rng),)
    if kind == "ray" and gpus:
        head = _pod_set(key, "head", 1, {"cpu": rng.choice((4, 8, 14)), "memory": "32Gi"})
        workers = _gpu_workers(key, rng.choice(gpus), rng, "gpu-workers", rng.randint(1, 16))
        if rng.random() < 0.4:
            return head, workers, _cpu_workers(key, None, rng, "cpu-workers")
        return head, workers
    if kind in ("tpu", "dp", "ray") and tpus:
        slices = _tpu_slices(key, rng.choice(tpus), rng)
        if rng.random() < 0.3:
            return slices, _pod_set(key, "coordinator", 1, {"cpu": 2, "memory": "8Gi"})
        return (slices,)
    return (_cpu_workers(key, None, rng),)


def _homogeneous_gang(key: str, machines: Sequence[Machine], rng: random.Random) -> tuple[PodSet, ...]:
    machine = rng.choice(machines)
    if machine.kind == "gpu":
        return (_gpu_workers(key, machine, rng),)
    if machine.kind == "tpu":
        return (_tpu_slices(key, machine, rng),)
    return (_cpu_workers(key, machine, rng),)


def machines_of(snapshot: Snapshot) -> list[Machine]:
    """The catalogue machines the snapshot's pools were made from, in catalogue order."""
    present = {(state.pool.machine_type, state.pool.tpu_topology) for state in snapshot.pools}
    return [m for m in MACHINES if (m.machine_type, m.labels.get(TOPOLOGY_LABEL, "")) in present]


def synth_gangs(count: int, snapshot: Snapshot, rng: random.Random, homogeneous: bool = False) -> list[Gang]:
    """``count`` gangs aimed at the machines of ``snapshot`` (made by :func:`synth_cluster`).

    Mixed gangs have 1-3 pod sets: data-parallel GPU workers, a Ray CPU head with GPU (and CPU) workers,
    TPU slices with a coordinator, CPU batch jobs. ``homogeneous`` gangs have one pod set of identical
    pods that only one machine type admits (accelerator and topology, or instance type, selected).
    """
    machines = machines_of(snapshot) or list(MACHINES[:1])
    gangs: list[Gang] = []
    for i in range(count):
        key = f"team-{rng.randint(1, 12)}/job-{i:05d}"
        pod_sets = _homogeneous_gang(key, machines, rng) if homogeneous else _mixed_gang(key, machines, rng)
        priority = rng.choice((0, 0, 0, 100, 1000))
        created = SYNTH_NOW - rng.uniform(0.0, 6 * 3600.0)
        gangs.append(Gang(key, pod_sets, priority=priority, created=created))
    return gangs


# --- small mixed instances for exact comparison -----------------------------------------------------------

def _small_pools(rng: random.Random) -> list[NodePool]:
    pools: list[NodePool] = []
    for t in range(rng.randint(1, 3)):
        cores, memory = rng.choice((8, 16, 32)), rng.choice((32, 64, 128))
        gpus = rng.choice((0, 0, 4, 8))
        allocatable: dict[str, str | int] = {"cpu": cores, "memory": f"{memory}Gi", "pods": 110}
        if gpus:
            allocatable[GPU] = gpus
        machine = Machine(f"t{t}", f"type-{t}", allocatable, {"shape": f"t{t}"}, GPU_TAINT if gpus else None,
                          rng.choice((1, 1, 2)))
        pools.append(make_pool(machine, f"t{t}", ZONES[0], rng.choice((2, 3, 12, 12, 12, 12))))
    return pools


def _small_pod_set(key: str, name: str, count: int, pools: Sequence[NodePool], rng: random.Random) -> PodSet:
    host = rng.choice(pools)
    # Half the pod sets are at most half a node, so that several pods share a node and packing matters.
    scale = rng.choice((1, 2))
    cores, memory = host.allocatable["cpu"] // 1000 // scale, (host.allocatable["memory"] >> 30) // scale
    requests: dict[str, Any] = {"cpu": f"{rng.randint(1, 2 * cores) * 500}m",
                                "memory": f"{rng.randint(1, memory // 2) * 2}Gi"}
    if host.allocatable.get(GPU) and rng.random() < 0.7:
        requests[GPU] = rng.randint(1, host.allocatable[GPU])
    selector = {"shape": host.labels["shape"]} if rng.random() < 0.3 else None
    # A CPU pod shaped after a GPU node must tolerate its taint, or it would fit nowhere.
    tolerate = GPU if rng.random() < 0.3 or (host.taints and GPU not in requests) else ""
    return _pod_set(key, name, count, requests, selector=selector, tolerate=tolerate,
                    one_per_node=rng.random() < 0.15)


def synth_small(rng: random.Random, index: int = 0) -> tuple[Gang, list[NodePool]]:
    """A small mixed instance for exact comparison: 1-3 pool types in one zone, 2-3 pod sets, 4-12 pods.

    Pod sets are shaped after a randomly chosen pool (so each fits somewhere), some select a pool type,
    some tolerate GPU taints, some are one per node; a few pools have tight ``maxUnits``.
    """
    pools = _small_pools(rng)
    sets = rng.randint(2, 3)
    total = rng.randint(max(4, sets), 12)
    cuts = sorted(rng.sample(range(1, total), sets - 1))
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    key = f"small/case-{index:03d}"
    pod_sets = tuple(_small_pod_set(key, f"set{s}", count, pools, rng) for s, count in enumerate(counts))
    return Gang(key, pod_sets), pools
