"""The aws runs' part of a chaos schedule: a pure function of the seed, like ``plan`` (which calls it).

The pools are the campaign's three (``plan.POOLS``), as EKS pools in one zone of one region, each with a launch
template and the one subnet (``gangscale.sim.aws.standalone.set_up`` makes both from the pool file, the template's
``--node-labels`` carrying ``gangscale.io/node-pool``): ``tpu`` is Trainium (``trn1.32xlarge``, 16 Neuron devices),
``gpu`` is ``p5.48xlarge`` (8 GPUs), ``cpu`` is ``m5.4xlarge``. One unit of the aws provider is one instance, so the
``tpu`` pool's 2-host units become single instances: its ``maxUnits`` is the simulated pool's node count (3 units of
2 nodes: 6), and the schedule's live demand, kept within the simulated units, is within it too. With reclaims (the
campaign's default) the ``tpu`` and ``gpu`` pools are ``capacityType: spot``, as in the simulated runs.

Cloud faults are ``cloud-fault`` actions turning the knobs of the run's fake EC2 (applied by ``chaoslib.aws``), drawn
from a generator of their own so that a seed's other actions are the simulated run's: stockouts (the pool's stock
at 0 for a while), a full vCPU quota (for a while), throttling (``RequestLimitExceeded``, 503, with or without
``x-amz-retry-after``), injected error codes of each of the provider's classes (``gangscale.providers.aws.errors``:
stockout, quota, transient server errors, permanent), lost answers of applied ``CreateFleet``/``TerminateInstances``
calls, slow answers (every answer held back a while after the call was applied) and held reads (a ``Describe*`` call
held a while before the fake reads it). Spot reclaims (``reclaim`` actions: the fake's ``reclaim(n)``, a notice and
then the instance interrupted) come from a third generator, so a seed's other faults are the same with and without.

Permanent codes are injected only into the changing calls: at start, the provider's checks (``Describe*``) treat a
permanent answer as a misconfigured pool, and the replica exits — which is right, and not what this campaign plays.
No call that changes EC2 is held before the fake applies it: a held change would reach EC2 after its maker's fence
was asked, the fencing gap every lease holder has, which the leadership judge would rightly count against it.
"""

from __future__ import annotations

import random

from chaoslib.plan import JSON, POOLS, RECLAIM_NOTICE, SPOT_POOLS, Action

AWS_REGION = "us-east-1"
AWS_ZONE = "us-east-1a"
AWS_CLUSTER = "chaos"
#: The one subnet (a /20 in the zone) every pool launches into.
AWS_SUBNET = "subnet-0c0a0500000000001"
#: Each pool's instance type and launch template id.
AWS_MACHINES: dict[str, str] = {"tpu": "trn1.32xlarge", "gpu": "p5.48xlarge", "cpu": "m5.4xlarge"}
AWS_LAUNCH_TEMPLATES: dict[str, str] = {"tpu": "lt-0c0a05000000000a1", "gpu": "lt-0c0a05000000000a2",
                                     "cpu": "lt-0c0a05000000000a3"}
AWS_POOL_FILE = """\
nodePools:
  - name: tpu
    machineType: {tpu_machine}
    zone: {zone}
    maxUnits: {tpu_max}
    capacityType: {tpu_capacity}
    aws: {{{aws}, launchTemplate: {tpu_template}}}
  - name: gpu
    machineType: {gpu_machine}
    zone: {zone}
    maxUnits: {gpu_max}
    capacityType: {gpu_capacity}
    aws: {{{aws}, launchTemplate: {gpu_template}}}
  - name: cpu
    machineType: {cpu_machine}
    zone: {zone}
    maxUnits: {cpu_max}
    capacityType: on-demand
    aws: {{{aws}, launchTemplate: {cpu_template}}}
"""
#: The pod of each shape on EKS: one per node of its pool (the planner fits them on the pools' allocatable).
AWS_POD_TEMPLATES: dict[str, JSON] = {
    "tpu": {"containers": [{"name": "worker", "image": "neuron",
                            "resources": {"limits": {"aws.amazon.com/neuron": "16"}}}]},
    "gpu": {"containers": [{"name": "trainer", "image": "trainer",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
    "cpu": {"nodeSelector": {"gangscale.io/node-pool": "cpu"},
            "containers": [{"name": "worker", "image": "worker",
                            "resources": {"requests": {"cpu": "12", "memory": "8Gi"}}}]},
}
#: The calls the provider makes, as the fake names them (what an injected error or a hold aims at).
READS = ("DescribeInstances", "DescribeLaunchTemplates", "DescribeSubnets", "DescribeInstanceTypeOfferings")
CHANGES = ("CreateFleet", "TerminateInstances")
#: Injected codes by the provider's error class: (code, HTTP status, the actions they may hit).
AWS_ERRORS: dict[str, tuple[tuple[str, int], tuple[str, ...]]] = {
    "stockout": (("InsufficientInstanceCapacity", 400), ("CreateFleet",)),
    "quota": (("VcpuLimitExceeded", 400), ("CreateFleet",)),
    "internal": (("InternalError", 500), (*CHANGES, *READS, "*")),
    "unavailable": (("Unavailable", 503), (*CHANGES, *READS, "*")),
    "permanent": (("UnauthorizedOperation", 403), CHANGES),
}
FAULT_KINDS = ("stockout", "quota", "throttle", "error", "lost-answers", "slow-answers", "held-read")


def units_of(pool: str) -> int:
    """The pool's ``maxUnits`` on AWS: the simulated pool's nodes (one instance is one node)."""
    per_unit, units = POOLS[pool]
    return per_unit * units


def aws_pool_file(spot: bool) -> str:
    aws = f"region: {AWS_REGION}, cluster: {AWS_CLUSTER}, subnet: {AWS_SUBNET}"
    return AWS_POOL_FILE.format(
        zone=AWS_ZONE, aws=aws, **{f"{p}_machine": m for p, m in AWS_MACHINES.items()},
        **{f"{p}_template": t for p, t in AWS_LAUNCH_TEMPLATES.items()}, **{f"{p}_max": units_of(p) for p in POOLS},
        **{f"{p}_capacity": "spot" if spot else "on-demand" for p in SPOT_POOLS})


def _aws_fault(rng: random.Random) -> tuple[JSON, float]:
    """One fault of the fake EC2 and how long it lasts (0: a counter used up by the calls it hits, or the end of the
    fault phase)."""
    kind = rng.choices(FAULT_KINDS, weights=[3, 2, 2, 4, 2, 2, 1])[0]
    if kind in ("stockout", "quota"):
        return {"kind": kind, "pool": rng.choice(list(POOLS))}, round(rng.uniform(1.5, 5.0), 2)
    if kind == "throttle":
        fault: JSON = {"kind": "error", "code": "RequestLimitExceeded", "status": 503,
                       "action": rng.choice((*CHANGES, *READS, "*")), "times": rng.randint(1, 4),
                       "message": "Request limit exceeded."}
        if rng.random() < 0.5:
            fault["retry_after_ms"] = rng.choice((200, 500, 1000))
        return fault, 0.0
    if kind == "error":
        (code, status), actions = AWS_ERRORS[rng.choice(list(AWS_ERRORS))]
        return {"kind": "error", "code": code, "status": status, "action": rng.choice(actions),
                "times": rng.randint(1, 3)}, 0.0
    if kind == "lost-answers":
        return {"kind": kind, "count": rng.randint(1, 2), "action": rng.choice((*CHANGES, "*"))}, 0.0
    if kind == "slow-answers":
        return {"kind": kind, "answer_seconds": round(rng.uniform(0.2, 1.5), 2)}, round(rng.uniform(1.0, 4.0), 2)
    return {"kind": kind, "action": rng.choice(READS), "skip": rng.randint(0, 3)}, round(rng.uniform(0.5, 2.5), 2)


def aws_faults(seed: int, fault_seconds: float = 15.0, reclaims: bool = True) -> list[Action]:
    """The aws runs' cloud faults: a pure function of the seed, from a generator of their own; spot reclaims (with
    ``reclaims``) from another."""
    rng = random.Random(seed * 7919 + 5)
    out = []
    for _ in range(rng.randint(2, 6)):
        at = rng.uniform(0, fault_seconds * 0.9)
        fault, seconds = _aws_fault(rng)
        out.append(Action(at, "cloud-fault", seconds=seconds, fault=fault))
    if reclaims:
        spot = random.Random(seed * 7919 + 3)
        for _ in range(spot.randint(0, 3)):
            out.append(Action(spot.uniform(fault_seconds * 0.2, fault_seconds * 0.9), "cloud-fault", fault={
                "kind": "reclaim", "count": spot.randint(1, 2),
                "notice_seconds": round(spot.uniform(*RECLAIM_NOTICE), 2)}))
    return out
