"""``gangscale sim aws``: the fake EC2 as a process, set up from a pool file's ``aws:`` blocks.

For each pool with an ``aws`` block: its subnet (in the pool's ``zone``, CIDRs ``10.0.<16·k>.0/20`` in order), its
launch template (by the block's ``launchTemplate``: an ``lt-…`` id, else a name with a made-up id) whose user data is
an AL2023 ``NodeConfig`` (MIME, as EKS's docs show it) with ``--node-labels`` = the pool's ``labels`` plus the label
gangscale recognises the pool's nodes by (``eks.amazonaws.com/nodegroup=<nodeGroup>`` and
``eks.amazonaws.com/capacityType`` when ``nodeGroup`` is set, as EKS's own template for a managed node group sets
them; else ``gangscale.io/node-pool=<pool>``) and ``--register-with-taints`` = the pool's taints; and, for a
``reservation`` pool, its capacity reservation (the ``reservation.name`` id, ``reservation.nodes`` instances, a
Capacity Block when ``capacityBlock``). One region per process. Time is the wall clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gangscale.clock import Clock, SystemClock
from gangscale.kube.transport import KubeHTTP
from gangscale.model.nodepool import POOL_LABEL, NodePool
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
        labels = dict(pool.labels)
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
        reservation = str(aws.get("capacityReservation") or getattr(pool, "reservation_name", "") or "")
        if pool.capacity_type == "reservation" and reservation and reservation not in ec2.state.reservations:
            ec2.add_capacity_reservation(reservation, pool.machine_type, pool.zone,
                                         pool.reservation_nodes or pool.max_units,
                                         capacity_block=bool(aws.get("capacityBlock")))


async def serve(pools: Sequence[NodePool], kube: KubeHTTP | None, *, port: int = 0, clock: Clock | None = None,
                ready: Callable[[FakeEc2], Awaitable[None] | None] | None = None,
                stop: asyncio.Event | None = None, heartbeats: bool = True) -> int:
    """Run a fake EC2 for ``pools`` on 127.0.0.1:``port`` until ``stop`` is set (forever without one). ``ready`` is
    called once it listens (to print its URL). Returns 0, or 1 if the port cannot be had."""
    ec2 = FakeEc2(clock or SystemClock(), kube, region=region_of_pools(pools), port=port, heartbeats=heartbeats)
    set_up(ec2, pools)
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
