"""``gangscale sim aws``: the fake EC2 as a process, set up from a pool file's ``aws:`` blocks.

For each pool with an ``aws`` block: its subnet (in the pool's ``zone``, CIDRs ``10.0.<16·k>.0/20`` in order), its
launch template (by the block's ``launchTemplate``: an ``lt-…`` id, else a name with a made-up id) whose user data is
an AL2023 ``NodeConfig`` (MIME, as EKS's docs show it) with ``--node-labels`` = the pool's ``labels`` plus the label
gangscale recognises the pool's nodes by (``eks.amazonaws.com/nodegroup=<nodeGroup>`` and
``eks.amazonaws.com/capacityType`` when ``nodeGroup`` is set, as EKS's own template for a managed node group sets
them; else ``gangscale.io/node-pool=<pool>``) and ``--register-with-taints`` = the pool's taints; and, for a
``reservation`` pool, its capacity reservation (the ``reservation.name`` id, ``reservation.nodes`` instances, a
Capacity Block when ``capacityBlock``). One region per process. Time is the wall clock.

Knobs (:func:`apply_knobs`), from a pool's ``simulated:`` section, the section that holds the simulated cloud's knobs
for ``--provider simulated`` and means the same here, so that a test of three processes can set them:
``stock`` (units it can still hand out) is the stock of the pool's (instance type, zone, on-demand|spot) — absent or
null: unlimited; ``lostResponses: N`` makes the fake lose the answers of its next N ``CreateFleet`` calls after
applying them (the fake's knob is fake-wide: whichever pool's calls come first). The other ``simulated`` knobs are
the simulated provider's own and mean nothing here.

Call log: every ``CreateFleet`` and ``TerminateInstances`` the fake sees is printed as one line (:func:`call_line`):
what an operator trying the fake wants to watch, and how a test of separate processes counts calls per scale-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gangscale.clock import Clock, SystemClock
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.sim.aws.faults import Exchange
from gangscale.sim.aws.server import FakeEc2

NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
_EKS_CAPACITY = {"on-demand": "ON_DEMAND", "spot": "SPOT", "reservation": "ON_DEMAND"}
BOUNDARY = "//"


def region_of_pools(pools: Sequence[NodePool]) -> str:
    regions = {str(pool.provider["aws"]["region"]) for pool in pools if "aws" in pool.provider}
    if len(regions) != 1:
        raise ValueError("the fake EC2 serves one region; the pool file's aws blocks name "
                         f"{', '.join(sorted(regions)) or 'none'}")
    return regions.pop()


def nodeconfig_user_data(cluster: str, labels: dict[str, str], taints: Sequence[str]) -> str:
    """An AL2023 ``nodeadm`` NodeConfig in a MIME multi-part document (EKS user guide, AL2023 launch templates)."""
    flags = []
    if labels:
        flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    if taints:
        flags.append("--register-with-taints=" + ",".join(taints))
    flag_lines = "".join(f"      - {flag}\n" for flag in flags)
    return (f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n--{BOUNDARY}\n'
            f"Content-Type: application/node.eks.aws\n\n---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
            f"spec:\n  cluster:\n    name: {cluster}\n  kubelet:\n    flags:\n{flag_lines}\n--{BOUNDARY}--\n")


def _taint(taint: Any) -> str:
    value = f"={taint.value}" if getattr(taint, "value", "") else ""
    return f"{taint.key}{value}:{taint.effect}"


#: Label prefixes the kubelet and the cloud controller set on a node themselves.
SET_BY_THE_NODE = ("kubernetes.io/", "node.kubernetes.io/", "topology.kubernetes.io/", "topology.k8s.aws/")


def set_up(ec2: FakeEc2, pools: Sequence[NodePool]) -> None:
    """The subnets, launch templates and capacity reservations the pools' ``aws`` blocks name."""
    for pool in pools:
        aws = pool.provider.get("aws")
        if aws is None:
            continue
        subnet_id = str(aws["subnet"])
        if subnet_id not in ec2.state.subnets:
            ec2.add_subnet(subnet_id, pool.zone, cidr=f"10.{len(ec2.state.subnets) // 16}."
                                                      f"{16 * (len(ec2.state.subnets) % 16)}.0/20")
        # What the kubelet or the AWS cloud controller sets by itself stays out of --node-labels (the pool file's
        # resolved labels include the zone, region and instance type its nodes will carry).
        labels = {k: v for k, v in pool.labels.items() if not k.startswith(SET_BY_THE_NODE)}
        if aws.get("nodeGroup"):
            labels[NODEGROUP_LABEL] = str(aws["nodeGroup"])
            labels[CAPACITY_TYPE_LABEL] = "CAPACITY_BLOCK" if aws.get("capacityBlock") else \
                _EKS_CAPACITY.get(pool.capacity_type, "ON_DEMAND")
        else:
            labels.setdefault(POOL_LABEL, pool.name)
        template_ref = str(aws["launchTemplate"])
        if ec2.state.template(template_ref) is None:
            template_id = template_ref if template_ref.startswith("lt-") else ec2.ids.hex17("lt")
            name = pool.name if template_ref.startswith("lt-") else template_ref
            ec2.add_launch_template(template_id, name, instance_type=pool.machine_type,
                                    user_data=nodeconfig_user_data(str(aws["cluster"]), labels,
                                                                   [_taint(t) for t in pool.taints]))
        reservation = str(aws.get("capacityReservationId") or "")  # the pool file's reservation.name (config.py)
        if pool.capacity_type == "reservation" and reservation and reservation not in ec2.state.reservations:
            ec2.add_capacity_reservation(reservation, pool.machine_type, pool.zone,
                                         pool.reservation_nodes or pool.max_units,
                                         capacity_block=bool(aws.get("capacityBlock")))


def apply_knobs(ec2: FakeEc2, pools: Sequence[NodePool]) -> None:
    """The fake's stock and lost answers from the pools' ``simulated:`` sections (see the module docstring)."""
    for pool in pools:
        knobs = pool.provider.get("simulated")
        if knobs is None or "aws" not in pool.provider:
            continue
        if knobs.get("stock") is not None and pool.capacity_type in ("on-demand", "spot"):
            ec2.stock[(pool.machine_type, pool.zone, pool.capacity_type)] = int(knobs["stock"])
        if knobs.get("lostResponses"):
            ec2.faults.lost_answers += int(knobs["lostResponses"])
            ec2.faults.lost_action = "CreateFleet"


def call_line(exchange: Exchange) -> str | None:
    """One line for a ``CreateFleet`` or ``TerminateInstances`` exchange (None for the reads), e.g.
    ``CreateFleet ClientToken=t TotalTargetCapacity=8 -> 200: 8 instance(s) i-…,…`` or ``… -> answer lost after it
    was applied: …``; a call dropped unapplied (a test's hold) reads ``-> dropped unapplied``."""
    if exchange.action not in ("CreateFleet", "TerminateInstances"):
        return None
    form = exchange.form
    if exchange.action == "CreateFleet":
        head = (f"CreateFleet ClientToken={form.get('ClientToken', '')} "
                f"TotalTargetCapacity={form.get('TargetCapacitySpecification.TotalTargetCapacity', '')}")
    else:
        head = "TerminateInstances " + ",".join(v for k, v in sorted(form.items()) if k.startswith("InstanceId."))
    if exchange.params is None and exchange.status == 0:
        return f"{head} -> dropped unapplied"
    answer = exchange.answer
    if answer is None:  # an error: its code is in the XML body
        code = exchange.body.split("<Code>", 1)[-1].split("</Code>", 1)[0] if "<Code>" in exchange.body else "?"
        return f"{head} -> {exchange.status} {code}"
    status = "answer lost after it was applied" if exchange.status == 0 else str(exchange.status)
    if exchange.action == "TerminateInstances":
        return f"{head} -> {status}"
    ids = [i for item in answer.get("Instances") or [] for i in item.get("InstanceIds") or []]
    errors = sorted({str(e.get("ErrorCode")) for e in answer.get("Errors") or []})
    return (f"{head} -> {status}: {len(ids)} instance(s) {','.join(ids) or '-'}"
            + (f" errors {','.join(errors)}" if errors else ""))


def _print_call(exchange: Exchange) -> None:
    line = call_line(exchange)
    if line is not None:
        print(f"fake EC2: {line}", flush=True)


async def serve(pools: Sequence[NodePool], kube: KubeHTTP | None, *, port: int = 0, clock: Clock | None = None,
                ready: Callable[[FakeEc2], Awaitable[None] | None] | None = None,
                stop: asyncio.Event | None = None, heartbeats: bool = True) -> int:
    """Run a fake EC2 for ``pools`` on 127.0.0.1:``port`` until ``stop`` is set (forever without one). ``ready`` is
    called once it listens (to print its URL). Returns 0, or 1 if the port cannot be had."""
    ec2 = FakeEc2(clock or SystemClock(), kube, region=region_of_pools(pools), port=port, heartbeats=heartbeats)
    set_up(ec2, pools)
    apply_knobs(ec2, pools)
    ec2.observers.append(_print_call)
    try:
        await ec2.start()
    except OSError:
        await ec2.aclose()
        return 1
    try:
        if ready is not None:
            maybe = ready(ec2)
            if maybe is not None:
                await maybe
        await (stop or asyncio.Event()).wait()
    finally:
        await ec2.aclose()
    return 0
