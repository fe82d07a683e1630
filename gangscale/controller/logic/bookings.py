"""Capacity held for a Provisioned ProvisioningRequest until its pods arrive (DESIGN decision 8).

A booking is, per node, the requests of the PR's pods the plan put there. As consumer pods (annotated
``autoscaling.x-k8s.io/consume-provisioning-request``) bind, their requests appear in the node's
``requested`` and the booking shrinks by the same amount, never below zero, so nothing is counted twice.
Consumer pods that land on other nodes than planned leave the planned booking in place until the booking
ends: conservative, and bounded by the booking TTL.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from gangscale.model.decision import Decision
from gangscale.model.gang import Gang
from gangscale.model.resources import EMPTY, ResourceList
from gangscale.model.snapshot import Booking

Booked = dict[str, ResourceList]


def planned_booking(gang: Gang, decision: Decision, new_nodes: Mapping[str, Sequence[str]]) -> Booked:
    """Per node, the requests of the pods ``decision`` places there; ``new_nodes`` names each pool's new nodes."""
    demand = {pod_set.name: pod_set.demand.requests for pod_set in gang.pod_sets}
    booked: dict[str, ResourceList] = defaultdict(lambda: EMPTY)
    for placement in decision.placements:
        booked[placement.node] = booked[placement.node] + demand[placement.pod_set].scaled(placement.count)
    cursor: dict[str, int] = defaultdict(int)
    for group in decision.new_nodes:
        names = sorted(new_nodes.get(group.pool, ()))
        per_node = EMPTY
        for pod_set, count in group.pods:
            per_node = per_node + demand[pod_set].scaled(count)
        for _ in range(group.nodes):
            if cursor[group.pool] < len(names):
                node = names[cursor[group.pool]]
                booked[node] = booked[node] + per_node
            cursor[group.pool] += 1
    return {node: amount for node, amount in booked.items() if amount}


def live_bookings(owner: str, booked: Booked, consumed: Mapping[str, ResourceList],
                  present: Iterable[str]) -> list[Booking]:
    """What is still held on each present node once the consumers already bound there are taken out."""
    here = set(present)
    out = []
    for node, amount in sorted(booked.items()):
        if node not in here:
            continue
        left = amount - consumed.get(node, EMPTY)  # floored at zero per resource
        if left:
            out.append(Booking(owner, node, left))
    return out


def consumed_on(requests_by_node: Iterable[tuple[str, ResourceList]]) -> dict[str, ResourceList]:
    out: dict[str, ResourceList] = defaultdict(lambda: EMPTY)
    for node, requests in requests_by_node:
        out[node] = out[node] + requests
    return dict(out)
