"""CreateFleet of type ``instant``: a synchronous launch that answers with the instances launched and an error per
pool that could not give what was asked.

Rules and sources (botocore's model documents each member; cloud-providers.md §3.1):
- ``Type``: only ``instant`` is served; ``maintain``/``request`` get ``Unsupported`` (the fake's refusal, not EC2's).
- ``MinTargetCapacity`` (``OnDemandOptions``/``SpotOptions``): "If this minimum capacity isn't reached, no instances
  are launched … At least one of the following must be specified: SingleAvailabilityZone | SingleInstanceType". A
  minimum without either flag is refused with ``InvalidParameterCombination`` (UNVERIFIED: EC2's code and text for
  this are not documented; cloud-providers.md §5). An unmet minimum launches nothing and answers one ``errorSet``
  item per pool with the reason it fell short: ``InsufficientInstanceCapacity`` for capacity (UNVERIFIED which code
  EC2 puts there, §5), ``VcpuLimitExceeded`` / ``MaxSpotInstanceCountExceeded`` for quota (:mod:`.quotas`),
  ``InsufficientFreeAddressesInSubnet`` for addresses.
- ``SubnetId`` of the overrides: "A request of type instant can have only one subnet ID" (model); more than one is
  refused with ``InvalidParameterValue`` (the code is the fake's choice).
- With ``SingleInstanceType``/``SingleAvailabilityZone`` all instances come from one pool (one override); without,
  pools are filled in the order of the overrides (``Priority`` order with ``AllocationStrategy: prioritized``;
  ``lowest-price`` is taken as the given order: the fake has no prices).
- Capacity types (``DefaultTargetCapacityType``): ``spot`` and ``on-demand`` draw on ``stock[(type, zone,
  lifecycle)]``. On-demand instances first fill matching ``open`` On-Demand Capacity Reservations, and with
  ``OnDemandOptions.CapacityReservationOptions.UsageStrategy = use-capacity-reservations-first`` also the
  ``targeted`` ones the launch template targets (``CapacityReservationSpecification.CapacityReservationTarget``, by
  id or resource-group ARN), the rest on-demand (EC2 user guide, "Use Capacity Reservations to reserve On-Demand
  capacity in EC2 Fleet" and the targeted-reservations tutorial). ``capacity-block`` draws only on active Capacity
  Blocks of the type and zone (those the launch template targets, when it targets any), with no on-demand fallback
  ("For Capacity Blocks, EC2 Fleet will not fallback to launching On-Demand Instances", EC2 Fleet Capacity Blocks
  tutorial). ``reserved-capacity`` draws on ``ReservedCapacityOptions.ReservationTypes`` in order (default: On-Demand
  Capacity Reservations, then Capacity Blocks), restricted to ``CapacityReservationTarget`` when given, and falls back
  to on-demand only when ``ReservedCapacityFallbackOptions.MarketTypes`` has ``on-demand`` (model); without fallback a
  shortfall is ``ReservationCapacityExceeded`` (UNVERIFIED; the code Karpenter expects for empty reservations).
- Tags: the instance ``TagSpecifications`` of the launch template, then of the request ("specify a resource type of
  … instance to tag the instances at launch", model).
- ``ClientToken`` (EC2 API reference, "Ensuring idempotency"): the same token with the same parameters answers the
  original result again, with nothing launched (also after that answer was lost); the same token with other
  parameters is ``IdempotentParameterMismatch`` (its message here is UNVERIFIED). Only answered calls are recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gangscale.sim.aws import quotas
from gangscale.sim.aws.engine import Engine
from gangscale.sim.aws.model import Ec2Error
from gangscale.sim.aws.state import (
    CAPACITY_BLOCK,
    ON_DEMAND,
    SPOT,
    CapacityReservation,
    FleetRecord,
    LaunchTemplate,
    Subnet,
)

JSON = dict[str, Any]
ODCR, BLOCK = "on-demand-capacity-reservation", "capacity-block"


@dataclass
class Pool:
    template: LaunchTemplate
    version: int
    instance_type: str
    subnet: Subnet
    placement_group: str | None
    echo: JSON  # LaunchTemplateAndOverrides as answered


@dataclass
class Source:
    """Where instances of a pool come from: a capacity reservation, or the stock of a lifecycle."""

    lifecycle: str  # on-demand | spot | capacity-block (the instances' lifecycle)
    reservation: CapacityReservation | None = None


def canonical(params: JSON) -> str:
    return json.dumps({k: v for k, v in params.items() if k != "ClientToken"}, sort_keys=True, default=str)


def create_fleet(engine: Engine, params: JSON, now: float) -> JSON:
    if params.get("Type", "maintain") != "instant":
        raise Ec2Error("Unsupported", f"The fake EC2 serves only fleets of type instant, not {params.get('Type')}.")
    token = str(params.get("ClientToken") or "")
    if token:
        record = engine.state.fleet_tokens.get(token)
        if record is not None:
            if record.params != canonical(params):
                raise Ec2Error("IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent "
                                                              "with arguments used in previous request(s).")
            return record.answer
    answer = _launch(engine, params, token, now)
    if token:
        engine.state.fleet_tokens[token] = FleetRecord(canonical(params), answer)
    return answer


def _pools(engine: Engine, params: JSON) -> list[Pool]:
    pools: list[Pool] = []
    for config in params["LaunchTemplateConfigs"]:
        spec = config.get("LaunchTemplateSpecification") or {}
        ref = spec.get("LaunchTemplateId") or spec.get("LaunchTemplateName")
        template = engine.state.template(str(ref)) if ref else None
        if template is None:
            if spec.get("LaunchTemplateId"):
                raise Ec2Error("InvalidLaunchTemplateId.NotFound",
                               f"The specified launch template, with template ID {ref}, does not exist.")
            raise Ec2Error("InvalidLaunchTemplateName.NotFoundException",
                           f"The specified launch template, with template name {ref}, does not exist.")
        version = template.version(spec.get("Version"))
        if version is None:
            raise Ec2Error("InvalidLaunchTemplateId.VersionNotFound",
                           f"Could not find launch template version {spec.get('Version')} for template {template.id}.")
        data = template.versions[version]
        for override in config.get("Overrides") or [{}]:
            instance_type = override.get("InstanceType") or data.get("InstanceType")
            if not instance_type or instance_type not in engine.machines:
                raise Ec2Error("InvalidParameterValue", f"Invalid value '{instance_type}' for InstanceType.")
            subnet_id = override.get("SubnetId") or next(
                (n.get("SubnetId") for n in data.get("NetworkInterfaces") or [] if n.get("SubnetId")), None)
            subnet = engine.state.subnets.get(str(subnet_id))
            if subnet is None:
                raise Ec2Error("InvalidSubnetID.NotFound", f"The subnet ID '{subnet_id}' does not exist")
            if override.get("AvailabilityZone") not in (None, subnet.zone):
                raise Ec2Error("InvalidParameterValue", f"Subnet {subnet.id} is not in Availability Zone "
                                                        f"{override['AvailabilityZone']}.")
            placement = (override.get("Placement") or {}).get("GroupName") or \
                (data.get("Placement") or {}).get("GroupName")
            echo_override = {**override, "InstanceType": instance_type, "SubnetId": subnet.id,
                             "AvailabilityZone": subnet.zone}
            echo = {"LaunchTemplateSpecification": {"LaunchTemplateId": template.id, "Version": str(version)},
                    "Overrides": echo_override}
            pools.append(Pool(template, version, instance_type, subnet, placement, echo))
    if len({p.subnet.id for p in pools}) > 1:
        raise Ec2Error("InvalidParameterValue", "A request of type instant can have only one subnet ID.")
    return pools


def _groups(params: JSON) -> list[tuple[str, int, JSON]]:
    """(capacity type, units, its options) for each kind of capacity asked for."""
    spec = params["TargetCapacitySpecification"]
    if spec.get("TargetCapacityUnitType", "units") != "units":
        raise Ec2Error("Unsupported", "The fake EC2 counts target capacity in units only.")
    total = int(spec["TotalTargetCapacity"])
    default = spec.get("DefaultTargetCapacityType", ON_DEMAND)
    on_demand_options = params.get("OnDemandOptions") or {}
    if default in (CAPACITY_BLOCK, "reserved-capacity"):
        groups = [(str(default), total, on_demand_options)]
    elif default == SPOT:
        od = int(spec.get("OnDemandTargetCapacity") or 0)
        groups = [(ON_DEMAND, od, on_demand_options), (SPOT, total - od, params.get("SpotOptions") or {})]
    else:
        spot = int(spec.get("SpotTargetCapacity") or 0)
        groups = [(ON_DEMAND, total - spot, on_demand_options), (SPOT, spot, params.get("SpotOptions") or {})]
    for _, _, options in groups:
        if options.get("MinTargetCapacity") and not (options.get("SingleInstanceType")
                                                      or options.get("SingleAvailabilityZone")):
            raise Ec2Error("InvalidParameterCombination", "MinTargetCapacity requires SingleInstanceType or "
                                                          "SingleAvailabilityZone.")
    return [g for g in groups if g[1] > 0]


def _targets(pool: Pool, reservation: CapacityReservation, target: JSON | None) -> bool:
    if not target:
        spec = (pool.template.versions[pool.version].get("CapacityReservationSpecification") or {})
        target = spec.get("CapacityReservationTarget") or {}
        ids = [target.get("CapacityReservationId")]
        groups = [target.get("CapacityReservationResourceGroupArn")]
    else:
        ids = list(target.get("CapacityReservationIds") or [])
        groups = list(target.get("CapacityReservationResourceGroupArns") or [])
    return reservation.id in ids or bool(reservation.resource_groups & {g for g in groups if g})


def _reservations(engine: Engine, pool: Pool, kind: str) -> list[CapacityReservation]:
    return [r for r in engine.state.reservations.values()
            if r.kind == kind and r.instance_type == pool.instance_type and r.zone == pool.subnet.zone]


def _sources(engine: Engine, pool: Pool, capacity_type: str, options: JSON, params: JSON) -> list[Source]:
    if capacity_type == SPOT:
        return [Source(SPOT)]
    if capacity_type == CAPACITY_BLOCK:
        blocks = _reservations(engine, pool, BLOCK)
        targeted = [b for b in blocks if _targets(pool, b, None)]
        return [Source(CAPACITY_BLOCK, b) for b in (targeted or blocks)]
    if capacity_type == ON_DEMAND:
        first = (options.get("CapacityReservationOptions") or {}).get("UsageStrategy")
        odcrs = [r for r in _reservations(engine, pool, "default")
                 if r.match == "open" or (first and _targets(pool, r, None))]
        return [*(Source(ON_DEMAND, r) for r in odcrs), Source(ON_DEMAND)]
    reserved = params.get("ReservedCapacityOptions") or {}
    target = reserved.get("CapacityReservationTarget")
    sources: list[Source] = []
    for kind in reserved.get("ReservationTypes") or [ODCR, BLOCK]:
        found = _reservations(engine, pool, {ODCR: "default", BLOCK: BLOCK}.get(kind, kind))
        lifecycle = CAPACITY_BLOCK if kind == BLOCK else ON_DEMAND
        sources += [Source(lifecycle, r) for r in found if _targets(pool, r, target)]
    if ON_DEMAND in ((reserved.get("ReservedCapacityFallbackOptions") or {}).get("MarketTypes") or []):
        sources.append(Source(ON_DEMAND))
    return sources


def _plan(engine: Engine, pool: Pool, sources: list[Source], need: int, planned_ips: int,
          quota_used: dict[str, int]) -> tuple[list[tuple[Source, int]], tuple[str, str] | None]:
    """How many instances each source of ``pool`` can give towards ``need``, and why it stops short (if it does)."""
    vcpus = engine.machines[pool.instance_type].vcpus
    plan: list[tuple[Source, int]] = []
    left = need
    ips = pool.subnet.free() - planned_ips
    why: tuple[str, str] | None = None
    for source in sources:
        if left <= 0:
            break
        if source.reservation is not None:
            cap: int | None = engine.state.available(source.reservation)
        else:
            cap = engine.state.stock.get((pool.instance_type, pool.subnet.zone, source.lifecycle))
        room, name = quotas.headroom(engine.state, pool.instance_type, source.lifecycle, vcpus)
        if room is not None and name is not None:
            room -= quota_used.get(name, 0) // max(vcpus, 1)
        n = min(x for x in (left, cap, room, ips) if x is not None)
        n = max(n, 0)
        if n < left:
            if room is not None and n == room and name is not None:
                why = quotas.quota_error(engine.state, name, source.lifecycle)
            elif n == ips:
                why = ("InsufficientFreeAddressesInSubnet", f"There are not enough free addresses in subnet "
                                                            f"'{pool.subnet.id}' to satisfy the requested number of "
                                                            "instances.")
            elif why is None:
                why = _capacity_error(pool, source)
        if n > 0:
            plan.append((source, n))
            left -= n
            ips -= n
            if name is not None:
                quota_used[name] = quota_used.get(name, 0) + n * vcpus
    if left > 0 and why is None:
        why = _capacity_error(pool, sources[-1] if sources else Source(ON_DEMAND))
    return plan, why if left > 0 else None


def _capacity_error(pool: Pool, source: Source) -> tuple[str, str]:
    if source.reservation is not None and source.lifecycle == ON_DEMAND and source.reservation.match == "targeted":
        return "ReservationCapacityExceeded", f"The capacity reservation {source.reservation.id} has no capacity left."
    return ("InsufficientInstanceCapacity",
            f"We currently do not have sufficient {pool.instance_type} capacity in the Availability Zone you "
            f"requested ({pool.subnet.zone}). Our system will be working on provisioning additional capacity.")


def _launch(engine: Engine, params: JSON, token: str, now: float) -> JSON:
    pools = _pools(engine, params)
    instances: list[JSON] = []
    errors: list[JSON] = []
    fleet_id = f"fleet-{engine.ids.uuid()}"
    for capacity_type, need, options in _groups(params):
        tried = _allocate(engine, pools, capacity_type, need, options, params)
        got = sum(n for _, plan, _ in tried for _, n in plan)
        lifecycle = {SPOT: SPOT, CAPACITY_BLOCK: CAPACITY_BLOCK}.get(capacity_type, ON_DEMAND)
        if got < need:
            errors += [{"LaunchTemplateAndOverrides": pool.echo, "Lifecycle": lifecycle, "ErrorCode": why[0],
                        "ErrorMessage": why[1]} for pool, _, why in tried if why is not None]
        if got < int(options.get("MinTargetCapacity") or 0):
            continue  # all or nothing: nothing
        for pool, plan, _ in tried:
            instances += _make(engine, pool, plan, {**_template_tags(pool), **_tags(params)}, token, now)
    return {"FleetId": fleet_id, "Errors": errors, "Instances": instances}


def _allocate(engine: Engine, pools: list[Pool], capacity_type: str, need: int, options: JSON,
              params: JSON) -> list[tuple[Pool, list[tuple[Source, int]], tuple[str, str] | None]]:
    """Each pool tried, what it gives and why it falls short. With a Single* flag only the pool that gives the most
    (the first that gives all) launches anything; the others are listed without instances."""
    if options.get("AllocationStrategy") == "prioritized":
        pools = sorted(pools, key=lambda p: float(p.echo["Overrides"].get("Priority", 0)))
    single = bool(options.get("SingleInstanceType") or options.get("SingleAvailabilityZone"))
    tried: list[tuple[Pool, list[tuple[Source, int]], tuple[str, str] | None]] = []
    left, ips, quota_used = need, 0, dict[str, int]()
    for pool in pools:
        sources = _sources(engine, pool, capacity_type, options, params)
        plan, why = _plan(engine, pool, sources, need if single else left, 0 if single else ips,
                          {} if single else quota_used)
        got = sum(n for _, n in plan)
        tried.append((pool, plan, why))
        if single and got >= need:
            break
        if not single:
            left, ips = left - got, ips + got
            if left <= 0:
                break
    if single and tried:
        best = max(range(len(tried)), key=lambda i: (sum(n for _, n in tried[i][1]), -i))
        tried = [(pool, plan if i == best else [], why) for i, (pool, plan, why) in enumerate(tried)]
    return tried


def _make(engine: Engine, pool: Pool, plan: list[tuple[Source, int]], tags: dict[str, str], token: str,
          now: float) -> list[JSON]:
    launch_id = engine.ids.hex17("r")
    by_lifecycle: dict[str, list[str]] = {}
    for source, n in plan:
        for _ in range(n):
            instance = engine.launch(template=pool.template, version=pool.version, instance_type=pool.instance_type,
                                     subnet=pool.subnet, lifecycle=source.lifecycle,
                                     reservation_id=source.reservation.id if source.reservation else None,
                                     tags=tags, token=token, placement_group=pool.placement_group,
                                     launch_id=launch_id, now=now)
            by_lifecycle.setdefault(source.lifecycle, []).append(instance.id)
        if source.reservation is None:
            key = (pool.instance_type, pool.subnet.zone, source.lifecycle)
            stock = engine.state.stock.get(key)
            if stock is not None:
                engine.state.stock[key] = stock - n
    return [{"LaunchTemplateAndOverrides": pool.echo, "Lifecycle": lifecycle, "InstanceIds": ids,
             "InstanceType": pool.instance_type} for lifecycle, ids in by_lifecycle.items()]


def _tag_list(specs: list[JSON] | None) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for s in specs or [] if s.get("ResourceType") == "instance"
            for t in s.get("Tags") or []}


def _tags(params: JSON) -> dict[str, str]:
    return _tag_list(params.get("TagSpecifications"))


def _template_tags(pool: Pool) -> dict[str, str]:
    return _tag_list(pool.template.versions[pool.version].get("TagSpecifications"))
