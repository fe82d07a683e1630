"""The ``CreateFleet`` request of an obtain, the tags that record its intent, and what its answer says.

One obtain of ``n`` units is one ``CreateFleet`` of type ``instant`` (cloud-providers.md §3.1; EC2 API reference
``CreateFleet``): ``TargetCapacitySpecification.TotalTargetCapacity = n`` and ``MinTargetCapacity = n`` with
``SingleInstanceType`` and ``SingleAvailabilityZone`` ("If this minimum capacity isn't reached, no instances are
launched"; at most 1000), one launch template config with one override (the pool's instance type, subnet and zone,
and its cluster placement group when it has one), the token as ``ClientToken`` (same token and same parameters:
EC2 answers with the original result, "Ensuring idempotency"), and the token, pool, cluster and unit count as tags
of every instance, so that ``DescribeInstances`` finds a token's instances after a restart.

Per capacity type (``DefaultTargetCapacityType``):

- ``on-demand``: ``on-demand`` with ``OnDemandOptions``.
- ``spot``: ``spot`` with ``SpotOptions``.
- ``reservation`` (an On-Demand Capacity Reservation): ``reserved-capacity`` with ``ReservedCapacityOptions``
  ``{ReservationTypes: [on-demand-capacity-reservation], CapacityReservationTarget: {CapacityReservationIds: [cr-…]}}``
  and no ``ReservedCapacityFallbackOptions`` ("If you don't specify fallback options, EC2 Fleet does not fall back to
  any other market type": the botocore model's ``ReservedCapacityFallbackOptionsRequest``), so a gang never spills
  out of its reservation onto on-demand. ``ReservedCapacityOptions`` is for fleets of type instant and needs
  ``reserved-capacity`` (EC2 API reference ``ReservedCapacityOptionsRequest``). The older way, a launch template
  targeting a resource group plus ``OnDemandOptions.CapacityReservationOptions.UsageStrategy =
  use-capacity-reservations-first`` (User Guide "Use Capacity Reservations to reserve On-Demand capacity in EC2
  Fleet"), falls back to plain on-demand when the reservation is short, which this pool's tier must not.
- ``reservation`` with ``aws.capacityBlock``: ``capacity-block`` (User Guide "Tutorial: Configure your EC2 Fleet to
  launch instances into Capacity Blocks": instant fleets only, the launch template sets
  ``InstanceMarketOptions.MarketType = capacity-block`` and targets the block's reservation; no
  ``OnDemandTargetCapacity``/``SpotTargetCapacity``, no ``OnDemandOptions.CapacityReservationOptions``).

The reservation and Capacity Block tutorials say such a fleet launches "as much capacity as it can" when the
reservation is short; whether ``OnDemandOptions.MinTargetCapacity`` (sent with both, as the model allows) makes it
all or nothing there is not documented, so the provider checks the count of every answer and terminates a short
one (:mod:`gangscale.providers.aws.provider`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.model.tiers import ON_DEMAND, RESERVATION, SPOT
from gangscale.providers.aws.pools import AwsPool

TOKEN_TAG = "gangscale.io/token"
POOL_TAG = "gangscale.io/pool"
CLUSTER_TAG = "gangscale.io/cluster"
UNITS_TAG = "gangscale.io/units"
#: "The instance is owned by the cluster" (EKS's cluster tag on nodes' instances: kubernetes.io/cluster/<name>).
EKS_CLUSTER_TAG = "kubernetes.io/cluster/{cluster}"
#: CreateFleet's MinTargetCapacity maximum (EC2 API reference ``OnDemandOptionsRequest``).
MAX_UNITS = 1000

JSON = dict[str, Any]


def target_capacity_type(ap: AwsPool) -> str:
    match ap.capacity_type:
        case "spot":
            return "spot"
        case "reservation":
            return "capacity-block" if ap.capacity_block else "reserved-capacity"
    return "on-demand"


def tags(ap: AwsPool, units: int, token: str) -> list[dict[str, str]]:
    return [{"Key": TOKEN_TAG, "Value": token}, {"Key": POOL_TAG, "Value": ap.name},
            {"Key": CLUSTER_TAG, "Value": ap.cluster}, {"Key": UNITS_TAG, "Value": str(units)},
            {"Key": EKS_CLUSTER_TAG.format(cluster=ap.cluster), "Value": "owned"}]


def create_fleet(ap: AwsPool, units: int, token: str) -> JSON:
    """The ``CreateFleet`` parameters (botocore's names) of an obtain of ``units`` instances under ``token``."""
    if ap.capacity_type not in (ON_DEMAND, SPOT, RESERVATION):  # the pool file refuses the others
        raise ValueError(f"pool {ap.name}: the aws provider launches no {ap.capacity_type} capacity")
    spec: JSON = {"LaunchTemplateId" if ap.template_is_id else "LaunchTemplateName": ap.launch_template,
                  "Version": ap.launch_template_version}
    override: JSON = {"InstanceType": ap.instance_type, "SubnetId": ap.subnet, "AvailabilityZone": ap.zone}
    if ap.placement_group:
        override["Placement"] = {"GroupName": ap.placement_group}
    capacity_type = target_capacity_type(ap)
    params: JSON = {
        "Type": "instant",
        "ClientToken": token,
        "TargetCapacitySpecification": {"TotalTargetCapacity": units, "DefaultTargetCapacityType": capacity_type},
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": spec, "Overrides": [override]}],
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags(ap, units, token)}],
    }
    whole = {"MinTargetCapacity": units, "SingleInstanceType": True, "SingleAvailabilityZone": True}
    if ap.capacity_type == SPOT:
        params["SpotOptions"] = whole
    else:
        params["OnDemandOptions"] = whole
    if ap.capacity_type == RESERVATION and not ap.capacity_block:
        params["ReservedCapacityOptions"] = {
            "ReservationTypes": ["on-demand-capacity-reservation"],
            "CapacityReservationTarget": {"CapacityReservationIds": [ap.reservation]}}
    return params


@dataclass(frozen=True)
class FleetAnswer:
    instance_ids: tuple[str, ...]
    errors: tuple[Mapping[str, Any], ...]


def fleet_answer(response: Mapping[str, Any]) -> FleetAnswer:
    """The instance ids (in the answer's order, each once) and the errors of a ``CreateFleet`` answer."""
    ids: list[str] = []
    for item in response.get("Instances") or []:
        ids.extend(str(i) for i in item.get("InstanceIds") or [] if str(i) not in ids)
    return FleetAnswer(tuple(ids), tuple(response.get("Errors") or []))


def tag_values(instance: Mapping[str, Any]) -> dict[str, str]:
    return {str(t.get("Key")): str(t.get("Value", "")) for t in instance.get("Tags") or []}


def instances_of(reservations: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """The instances of a ``DescribeInstances`` answer's ``Reservations``."""
    return [dict(instance) for r in reservations for instance in r.get("Instances") or []]
