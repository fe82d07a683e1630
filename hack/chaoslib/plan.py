"""A chaos run's schedule: a pure function of its seed.

What the seed fixes: which gangs are created and deleted when, which replica is killed (SIGKILL), stopped
(SIGTERM) or paused (SIGSTOP … SIGCONT) when, which API-server faults are injected when, and the cloud faults:
with the simulated provider, those each successive process start gets in its pool file; with the ``gke`` provider,
changes to the live fake Google Cloud's knobs at chosen moments (``cloud-fault`` actions, :func:`_gke_fault`),
drawn from a generator of their own so that a seed's other actions are the same for every provider; with the
``aws`` provider, the fake EC2's knobs and spot reclaims, likewise (``chaoslib.awsplan``). What it cannot
fix: how real processes on a real clock interleave with those moments. A failing seed is re-run with the same
schedule; the interleaving may differ.

Gangs never ask for more than the pools hold together (the schedule keeps the live demand per pool within each
pool's ``maxUnits``), so every live gang can and must end ``Provisioned=True`` once the faults stop — or, with spot
reclaims, ``CapacityRevoked=True`` for a node the cloud took back (``chaoslib.checks``).

Spot reclaims (on unless ``--no-reclaims``; simulated runs): the TPU and GPU pools are ``capacityType: spot`` in
every start's pool file, and during the fault phase a start's file may carry ``reclaim`` on them (a rate per
node-hour high enough to take a node or two in a 15-second phase, a notice of a second or two, and a seed), drawn from
a generator of their own so that a seed's other faults are the same with and without reclaims.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

#: The pools of every run: (name, nodes per unit, maxUnits). Each gang's pod needs one whole node.
POOLS: dict[str, tuple[int, int]] = {"tpu": (2, 3), "gpu": (1, 5), "cpu": (1, 5)}

POOL_FILE = """\
nodePools:
  - name: tpu
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: us-central1-a
    maxUnits: {tpu_max}
    capacityType: {tpu_capacity}
    simulated: {{provisionSeconds: 0.5{tpu}}}
  - name: gpu
    machineType: a3-highgpu-8g
    zone: us-central1-a
    maxUnits: {gpu_max}
    capacityType: {gpu_capacity}
    simulated: {{provisionSeconds: 0.3{gpu}}}
  - name: cpu
    zone: us-central1-a
    maxUnits: {cpu_max}
    allocatable: {{cpu: "16", memory: 64Gi, pods: "110"}}
    simulated: {{provisionSeconds: 0.3{cpu}}}
"""

#: The gke runs' pool file: the same pools on one GKE cluster (``{project}`` is the run's own, so that the fakes of
#: runs played at the same time in one harness process tell their traffic apart). The TPU pool makes one 2-host
#: node pool per slice; the GPU and CPU pools add single VMs to existing node pools (``gangscale.sim.gcp.standalone
#: .set_up`` creates those, with no VM). How each pool is grown is its ``gke:`` block alone (:data:`GKE_MODES`):
#: a pool can move to another mode by changing this text only, e.g. the GPU pool to ``mode: flex-start, nodePool:
#: gpu`` (``set_up`` then makes ``gpu`` a flex-start node pool, and its nodes are attributed by the resize request
#: label, ``observe.node_claim``).
GKE_ZONE = "us-central1-a"
GKE_REGION = "us-central1"
GKE_CLUSTER = "chaos"
#: Each pool's machine type on GKE (what a stockout fault names).
GKE_MACHINES: dict[str, str] = {"tpu": "ct5lp-hightpu-4t", "gpu": "a3-highgpu-8g", "cpu": "e2-standard-16"}
GKE_MODES: dict[str, str] = {"tpu": "mode: slice", "gpu": "mode: resize, nodePool: gpu",
                             "cpu": "mode: resize, nodePool: cpu"}
#: Every other pair of gke runs grows the GPU pool as a flex-start pool instead (MIG resize requests with a run
#: duration; its VMs named by Compute Engine and attributed by the resize request that made them).
GKE_FLEX_GPU = "mode: flex-start, nodePool: gpu"
GKE_POOL_FILE = """\
nodePools:
  - name: tpu
    machineType: {tpu_machine}
    tpuTopology: 2x4
    zone: {zone}
    maxUnits: {tpu_max}
    gke: {{{gke}, {tpu_mode}}}
  - name: gpu
    machineType: {gpu_machine}
    zone: {zone}
    maxUnits: {gpu_max}
    gke: {{{gke}, {gpu_mode}}}
  - name: cpu
    machineType: {cpu_machine}
    zone: {zone}
    maxUnits: {cpu_max}
    allocatable: {{cpu: "15", memory: 56Gi, pods: "110"}}
    gke: {{{gke}, {cpu_mode}}}
"""
PROVIDERS = ("simulated", "gke", "aws", "both", "all")
#: ``--provider all`` cycles through these by seed.
CYCLE = ("simulated", "gke", "aws")

#: The pod of each shape: one per node of its pool.
TEMPLATES: dict[str, JSON] = {
    "tpu": {"nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                             "cloud.google.com/gke-tpu-topology": "2x4"},
            "containers": [{"name": "worker", "image": "jax", "resources": {"limits": {"google.com/tpu": "4"}}}]},
    "gpu": {"containers": [{"name": "trainer", "image": "trainer",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
    "cpu": {"nodeSelector": {"gangscale.io/node-pool": "cpu"},
            "containers": [{"name": "worker", "image": "worker",
                            "resources": {"requests": {"cpu": "12", "memory": "8Gi"}}}]},
}
#: (pool, pods): the gangs a run picks from. A TPU gang of 4 pods is two 2-host slices.
SHAPES: tuple[tuple[str, int], ...] = (("tpu", 2), ("tpu", 4), ("gpu", 1), ("gpu", 2), ("gpu", 3), ("cpu", 1),
                                       ("cpu", 2))


@dataclass(frozen=True)
class Gang:
    name: str
    pool: str
    pods: int

    @property
    def nodes(self) -> int:
        """Nodes the gang needs: one per pod."""
        return self.pods

    @property
    def units(self) -> int:
        return -(-self.pods // POOLS[self.pool][0])


@dataclass(frozen=True)
class Action:
    at: float
    kind: str  # create | delete | kill | term | pause | api-fault | cloud-fault
    gang: Gang | None = None
    #: kill / term / pause: "leader" or "standby" (resolved from the Lease when the action runs).
    target: str = ""
    #: pause: how long; cloud-fault: how long the fault lasts (0: until the fault phase ends, or used up).
    seconds: float = 0.0
    fault: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    seed: int
    fault_seconds: float
    actions: tuple[Action, ...]
    provider: str = "simulated"

    def gangs(self) -> list[Gang]:
        return [a.gang for a in self.actions if a.kind == "create" and a.gang is not None]

    def count(self, *kinds: str) -> int:
        return sum(1 for a in self.actions if a.kind in kinds)


#: API-server faults, aimed at gangscale's requests only (its user agents start with "gangscale"; the harness's
#: do not). Each is (weight, maker).
def _api_faults(rng: random.Random) -> JSON:
    kind = rng.choices(["status-500", "throttle", "watch-drop", "gone", "lease-500", "node-500", "latency",
                        "conflict"], weights=[3, 2, 3, 2, 2, 2, 1, 1])[0]
    agent = "gangscale*"
    if kind == "status-500":
        return {"verb": rng.choice(["patch", "list", "get", "create"]), "status": 500, "times": rng.randint(1, 4),
                "user_agent": agent}
    if kind == "throttle":
        return {"verb": "patch", "resource": "provisioningrequests", "status": 429, "retry_after": 1,
                "times": rng.randint(1, 3), "user_agent": agent}
    if kind == "watch-drop":
        return {"verb": "watch", "resource": rng.choice(["nodes", "provisioningrequests", "pods", "*"]),
                "drop_after_events": rng.randint(0, 3), "abort": rng.random() < 0.5, "times": rng.randint(1, 3),
                "user_agent": agent}
    if kind == "gone":
        return {"verb": "watch", "resource": rng.choice(["nodes", "provisioningrequests", "*"]), "gone": True,
                "times": rng.randint(1, 2), "user_agent": agent}
    if kind == "lease-500":  # renewals fail: the leader may lose the lease and must exit
        return {"resource": "leases", "verb": rng.choice(["update", "get"]), "status": 500,
                "times": rng.randint(1, 10), "user_agent": agent}
    if kind == "node-500":  # the cloud's node writes fail
        return {"resource": "nodes", "verb": rng.choice(["create", "delete"]), "status": 500,
                "times": rng.randint(1, 3), "user_agent": agent}
    if kind == "latency":
        return {"verb": rng.choice(["list", "patch", "create"]), "latency": round(rng.uniform(0.05, 0.3), 2),
                "times": rng.randint(1, 5), "user_agent": agent}
    return {"verb": "patch", "resource": "provisioningrequests", "subresource": "status", "status": 409,
            "times": rng.randint(1, 2), "user_agent": agent}


#: Where an injected HTTP error of the fake Google Cloud aims: (method, path regex). Only the API paths: the metadata
#: server (google-auth's tokens) is left alone.
GKE_ERROR_TARGETS: tuple[tuple[str, str], ...] = (
    ("POST", r"^/v1/.*/nodePools$"),  # slice creates
    ("GET", r"^/v1/.*/operations/"),  # GKE operation polls
    ("DELETE", r"^/v1/.*/nodePools/gs-"),  # slice deletes (rollback, scale-down)
    ("GET", r"^/v1/.*/nodePools/gs-"),  # a slice's status
    ("POST", r"/createInstances$"),
    ("POST", r"/deleteInstances$"),
    ("POST", r"/listManagedInstances$"),
    ("GET", r"^/compute/v1/.*/operations/"),  # compute operation polls
    ("*", r"^/(v1|compute/v1)/"),  # anything
)


def _gke_fault(rng: random.Random) -> tuple[JSON, float]:
    """One fault of the fake Google Cloud and how long it lasts (0: a counter used up by the calls it hits, or the
    end of the fault phase). Applied by ``chaoslib.gcp.GkeCloud``."""
    kind = rng.choices(["stockout", "lost-responses", "unavailable", "throttle", "html-500", "slow-operations",
                        "partial-slice", "never-ready"], weights=[3, 2, 2, 2, 1, 2, 2, 2])[0]
    if kind == "stockout":
        pool = rng.choice(list(GKE_MACHINES))
        return {"kind": kind, "zone": GKE_ZONE, "machine": GKE_MACHINES[pool]}, round(rng.uniform(1.5, 5.0), 2)
    if kind == "lost-responses":
        return {"kind": kind, "count": rng.randint(1, 2)}, 0.0
    if kind in ("unavailable", "throttle", "html-500"):
        method, path = rng.choice(GKE_ERROR_TARGETS)
        error: JSON = {"kind": "http-error", "status": {"unavailable": 503, "throttle": 429, "html-500": 500}[kind],
                       "method": method, "path": path, "times": rng.randint(1, 3)}
        if kind == "throttle":
            error["retry_after"] = 1
        if kind == "html-500":
            error["html"] = True
        return error, 0.0
    if kind == "slow-operations":
        return {"kind": kind, "operation_seconds": round(rng.uniform(1.5, 4.0), 2)}, round(rng.uniform(2.0, 6.0), 2)
    if kind == "partial-slice":
        return {"kind": kind, "hosts": 1}, 0.0
    return {"kind": kind}, round(rng.uniform(1.0, 4.0), 2)


def gke_faults(seed: int, fault_seconds: float = 15.0) -> list[Action]:
    """The gke runs' cloud faults: a pure function of the seed, from a generator of their own."""
    rng = random.Random(seed * 7919 + 2)
    out = []
    for _ in range(rng.randint(2, 5)):
        at = rng.uniform(0, fault_seconds * 0.9)
        fault, seconds = _gke_fault(rng)
        out.append(Action(at, "cloud-fault", seconds=seconds, fault=fault))
    return out


def provider_of(seed: int, choice: str) -> str:
    """The provider of the run of ``seed`` under ``--provider choice``: ``both`` takes gke for odd seeds, ``all``
    cycles simulated, gke, aws by the seed (``seed % 3``)."""
    if choice == "both":
        return "gke" if seed % 2 else "simulated"
    if choice == "all":
        return CYCLE[seed % len(CYCLE)]
    if choice not in PROVIDERS:
        raise ValueError(f"unknown provider {choice!r}; one of {', '.join(PROVIDERS)}")
    return choice


def make_plan(seed: int, fault_seconds: float = 15.0, provider: str = "simulated", reclaims: bool = True) -> Plan:
    """The run's schedule. ``reclaims`` matters to aws runs only (their spot reclaims are ``cloud-fault`` actions;
    the simulated runs' are in their pool files)."""
    rng = random.Random(seed)
    actions: list[Action] = []
    live: list[tuple[float, Gang]] = []
    made = 0
    # Gangs arrive over the first 80% of the fault phase; some are deleted later (mid-scale-up or provisioned).
    for at in sorted(rng.uniform(0, fault_seconds * 0.8) for _ in range(rng.randint(5, 10))):
        pool, pods = rng.choice(SHAPES)
        gang = Gang(f"gang-{made}", pool, pods)
        in_use = sum(g.units for _, g in live if g.pool == pool)
        if in_use + gang.units > POOLS[pool][1]:
            if not live:
                continue
            _, gone = live.pop(rng.randrange(len(live)))
            actions.append(Action(at, "delete", gone))
            in_use = sum(g.units for _, g in live if g.pool == pool)
            if in_use + gang.units > POOLS[pool][1]:
                continue
        made += 1
        live.append((at, gang))
        actions.append(Action(at, "create", gang))
    for _ in range(rng.randint(0, 2)):
        if live:
            created, gang = live.pop(rng.randrange(len(live)))
            actions.append(Action(rng.uniform(created, fault_seconds), "delete", gang))
    for _ in range(rng.randint(2, 4)):
        kind = rng.choices(["kill", "term", "pause"], weights=[3, 1, 2])[0]
        target = rng.choices(["leader", "standby"], weights=[3, 1])[0]
        actions.append(Action(rng.uniform(0.5, fault_seconds), kind, target=target,
                              seconds=round(rng.uniform(0.5, 4.0), 2) if kind == "pause" else 0.0))
    for _ in range(rng.randint(3, 7)):
        actions.append(Action(rng.uniform(0, fault_seconds), "api-fault", fault=_api_faults(rng)))
    if provider == "gke":
        actions += gke_faults(seed, fault_seconds)
    elif provider == "aws":
        from chaoslib.awsplan import aws_faults  # noqa: PLC0415 (it builds on this module)

        actions += aws_faults(seed, fault_seconds, reclaims)
    actions.sort(key=lambda a: a.at)
    return Plan(seed, fault_seconds, tuple(actions), provider)


#: The pools that are spot capacity when a campaign plays reclaims.
SPOT_POOLS = ("tpu", "gpu")
#: The share of a fault-phase start's spot pools that get reclaims; their rate (per node-hour) and notice (seconds).
RECLAIM_SHARE = 0.6
RECLAIM_RATE = (40.0, 240.0)
RECLAIM_NOTICE = (0.3, 2.5)


def reclaim_knob(rng: random.Random) -> str:
    """One pool's ``reclaim`` section, drawn from ``rng``."""
    return (f"{{perNodeHour: {round(rng.uniform(*RECLAIM_RATE))}, "
            f"noticeSeconds: {round(rng.uniform(*RECLAIM_NOTICE), 2)}, seed: {rng.randrange(1 << 31)}}}")


def pool_file(rng: random.Random | None, reclaims: random.Random | None = None, spot: bool = False) -> str:
    """The pool file of one process start: clean with ``rng`` None, else cloud faults drawn from it (half the
    starts get none). ``spot``: the :data:`SPOT_POOLS` are spot capacity; ``reclaims`` (spot only): spot reclaims
    drawn from it."""
    knobs: dict[str, dict[str, str]] = {name: {} for name in POOLS}
    if rng is not None and rng.random() < 0.5:
        for _ in range(rng.randint(1, 2)):
            pool = rng.choice(list(POOLS))
            key, value = rng.choice([
                ("stockout", "true"),
                ("partialGrant", "1" if POOLS[pool][0] == 1 else "0"),
                ("lostResponses", str(rng.randint(1, 2))),
                ("transientErrors", str(rng.randint(1, 3))),
                ("neverReady", "true"),
                ("latencySeconds", str(round(rng.uniform(0.1, 0.6), 2))),
            ])
            knobs[pool][key] = value
    if spot and reclaims is not None:
        for pool in SPOT_POOLS:
            if reclaims.random() < RECLAIM_SHARE:
                knobs[pool]["reclaim"] = reclaim_knob(reclaims)
    extra = {pool: "".join(f", {key}: {value}" for key, value in sorted(kv.items())) for pool, kv in knobs.items()}
    capacity = {f"{pool}_capacity": "spot" if spot and pool in SPOT_POOLS else "on-demand" for pool in POOLS}
    return POOL_FILE.format(tpu=extra["tpu"], gpu=extra["gpu"], cpu=extra["cpu"], **capacity,
                            tpu_max=POOLS["tpu"][1], gpu_max=POOLS["gpu"][1], cpu_max=POOLS["cpu"][1])


def gke_project(seed: int) -> str:
    """The run's own Google Cloud project id (6 to 30 characters, a letter first)."""
    return f"chaos-{abs(seed)}"


def gke_modes(seed: int) -> dict[str, str]:
    """Each pool's mode in the gke run of ``seed``: the GPU pool is a flex-start pool when ``seed // 2`` is odd (so
    that ``--provider both``, whose gke seeds are the odd ones, alternates too)."""
    return {**GKE_MODES, "gpu": GKE_FLEX_GPU} if (seed // 2) % 2 else dict(GKE_MODES)


def gke_pool_file(project: str, seed: int = 0) -> str:
    gke = f"project: {project}, location: {GKE_REGION}, cluster: {GKE_CLUSTER}"
    return GKE_POOL_FILE.format(zone=GKE_ZONE, gke=gke, **{f"{p}_machine": m for p, m in GKE_MACHINES.items()},
                                **{f"{p}_mode": m for p, m in gke_modes(seed).items()},
                                **{f"{p}_max": spec[1] for p, spec in POOLS.items()})


def faults_of(text: str) -> list[str]:
    """The cloud faults a pool file sets, as "pool.knob" (for the run's summary)."""
    out, pool = [], ""
    for line in text.splitlines():
        if line.strip().startswith("- name:"):
            pool = line.split(":", 1)[1].strip()
        elif "simulated:" in line:
            inner = line.split("{", 1)[1].rsplit("}", 1)[0]
            out += [f"{pool}.{part.split(':')[0].strip()}" for part in _top_level(inner)[1:]]
    return out


def _top_level(flow: str) -> list[str]:
    """The entries of a YAML flow mapping's inside, split at its own commas (not those of a nested ``{...}``)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(flow):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(flow[start:i])
            start = i + 1
    return [*parts, flow[start:]]
