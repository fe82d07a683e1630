"""The read actions and TerminateInstances, as output structures in botocore's member names.

Rules and sources (EC2 API reference for each action, botocore's model for the members):
- DescribeInstances: ``InstanceIds`` (an unknown id is ``InvalidInstanceID.NotFound`` "The instance ID 'i-…' does
  not exist" / "The instance IDs '…' do not exist"; a malformed one ``InvalidInstanceID.Malformed`` 'Invalid id:
  "…"', the form botocore's ``EC2QueryParser`` quotes); filters ``tag:<key>``, ``tag-key``, ``instance-state-name``,
  ``instance-id``, ``private-dns-name``, ``availability-zone``, ``instance-type``, ``subnet-id``,
  ``instance-lifecycle``, ``capacity-reservation-id`` with ``*``/``?`` wildcards (an unknown filter is
  ``InvalidParameterValue`` "The filter 'x' is invalid"); ``MaxResults`` 5 to 1000 with ``NextToken``, and not together
  with ``InstanceIds`` ("You cannot specify this parameter and the instance IDs parameter in the same request",
  model; refused with ``InvalidParameterCombination``). Instances are grouped by the launch that made them
  (``reservationSet``); paging counts instances (the fake's choice), and a page may split a reservation.
- TerminateInstances: idempotent ("if you terminate an instance more than once, each call succeeds"); "If you
  specify multiple instances and the request fails (for example, because of a single incorrect instance ID), none
  of the instances are terminated." Answers ``currentState``/``previousState`` per instance.
- DescribeLaunchTemplates / DescribeLaunchTemplateVersions (user data base64, ``$Latest``/``$Default``/numbers),
  DescribeSubnets, DescribeInstanceTypeOfferings (``LocationType`` region | availability-zone |
  availability-zone-id; filters ``instance-type``, ``location``), DescribeInstanceTypes (the catalog's EC2 types),
  DescribeCapacityReservations (``availableInstanceCount`` = total minus the live instances in it).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from gangscale.model.catalog import GPU_RESOURCE, MachineType
from gangscale.sim.aws.engine import USER_SHUTDOWN, Engine
from gangscale.sim.aws.model import Ec2Error
from gangscale.sim.aws.state import ACCOUNT, ON_DEMAND, STATE_CODES, Instance, region_of, zone_id

JSON = dict[str, Any]
T = TypeVar("T")
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8}([0-9a-f]{9})?$")


def stamp(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def page(items: Sequence[T], params: JSON, *, low: int = 5, high: int = 1000) -> tuple[Sequence[T], str | None]:
    """A page of ``items`` by ``MaxResults``/``NextToken``; the token is the next offset, base64."""
    start = 0
    if params.get("NextToken"):
        try:
            start = int(base64.b64decode(str(params["NextToken"]), validate=True).decode())
        except (binascii.Error, ValueError):
            raise Ec2Error("InvalidParameterValue", "The token is not valid: NextToken") from None
    size = params.get("MaxResults")
    if size is None:
        return items[start:], None
    if not low <= int(size) <= high:
        raise Ec2Error("InvalidParameterValue", f"Value ( {size} ) for parameter maxResults is invalid. "
                                                f"Expecting a value between {low} and {high}.")
    end = start + int(size)
    token = base64.b64encode(str(end).encode()).decode() if end < len(items) else None
    return items[start:end], token


def _match(value: str | None, patterns: Iterable[str]) -> bool:
    return value is not None and any(fnmatch.fnmatchcase(value, p) for p in patterns)


def filtered(items: Iterable[T], filters: list[JSON] | None, fields: dict[str, Callable[[T], str | None]],
             tags: Callable[[T], dict[str, str]]) -> list[T]:
    kept = list(items)
    for f in filters or []:
        name, values = str(f.get("Name", "")), [str(v) for v in f.get("Values") or []]
        if name.startswith("tag:"):
            key = name[4:]
            kept = [i for i in kept if _match(tags(i).get(key), values)]
        elif name == "tag-key":
            kept = [i for i in kept if any(_match(k, values) for k in tags(i))]
        elif name in fields:
            kept = [i for i in kept if _match(fields[name](i), values)]
        else:
            raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
    return kept


def tag_list(tags: dict[str, str]) -> list[JSON]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


# --- instances --------------------------------------------------------------------------------------------------


def _state(name: str) -> JSON:
    return {"Code": STATE_CODES[name], "Name": name}


def instance_json(instance: Instance) -> JSON:
    out: JSON = {
        "InstanceId": instance.id, "ImageId": "ami-0fake00000000000a", "InstanceType": instance.instance_type,
        "LaunchTime": stamp(instance.launched), "ClientToken": instance.client_token,
        "Placement": {"AvailabilityZone": instance.zone, "AvailabilityZoneId": zone_id(instance.zone),
                      "Tenancy": "default", **({"GroupName": instance.placement_group}
                                                if instance.placement_group else {})},
        "PrivateDnsName": instance.private_dns, "PrivateIpAddress": instance.private_ip,
        "State": _state(instance.state), "SubnetId": instance.subnet_id, "VpcId": "vpc-0fake0000000000001",
        "Architecture": "arm64" if instance.node_labels.get("kubernetes.io/arch") == "arm64" else "x86_64",
        "Tags": tag_list(instance.tags), "StateTransitionReason": "",
    }
    if instance.lifecycle != ON_DEMAND:
        out["InstanceLifecycle"] = instance.lifecycle
    if instance.capacity_reservation_id:
        out["CapacityReservationId"] = instance.capacity_reservation_id
    if instance.state_reason is not None:
        out["StateReason"] = {"Code": instance.state_reason[0], "Message": instance.state_reason[1]}
    return out


def _instance_fields() -> dict[str, Callable[[Instance], str | None]]:
    return {"instance-state-name": lambda i: i.state, "instance-id": lambda i: i.id,
            "private-dns-name": lambda i: i.private_dns, "availability-zone": lambda i: i.zone,
            "instance-type": lambda i: i.instance_type, "subnet-id": lambda i: i.subnet_id,
            "instance-lifecycle": lambda i: None if i.lifecycle == ON_DEMAND else i.lifecycle,
            "capacity-reservation-id": lambda i: i.capacity_reservation_id,
            "client-token": lambda i: i.client_token, "private-ip-address": lambda i: i.private_ip}


def find_instances(engine: Engine, ids: list[str]) -> list[Instance]:
    bad = [i for i in ids if not _INSTANCE_ID.match(i)]
    if bad:
        raise Ec2Error("InvalidInstanceID.Malformed", f'Invalid id: "{bad[0]}"')
    missing = [i for i in ids if i not in engine.state.instances]
    if len(missing) == 1:
        raise Ec2Error("InvalidInstanceID.NotFound", f"The instance ID '{missing[0]}' does not exist")
    if missing:
        raise Ec2Error("InvalidInstanceID.NotFound", f"The instance IDs '{', '.join(missing)}' do not exist")
    return [engine.state.instances[i] for i in dict.fromkeys(ids)]


def describe_instances(engine: Engine, params: JSON) -> JSON:
    ids = list(params.get("InstanceIds") or [])
    if ids and params.get("MaxResults") is not None:
        raise Ec2Error("InvalidParameterCombination",
                       "The parameter instancesSet cannot be used with the parameter maxResults")
    found = find_instances(engine, ids) if ids else sorted(engine.state.instances.values(),
                                                           key=lambda i: (i.launched, i.id))
    kept = filtered(found, params.get("Filters"), _instance_fields(), lambda i: i.tags)
    shown, token = page(kept, params)
    reservations: dict[str, JSON] = {}
    for instance in shown:
        reservations.setdefault(instance.reservation_id, {
            "ReservationId": instance.reservation_id, "OwnerId": ACCOUNT, "RequesterId": "AIDAFAKEFLEET00000000",
            "Groups": [], "Instances": []})["Instances"].append(instance_json(instance))
    out: JSON = {"Reservations": list(reservations.values())}
    if token:
        out["NextToken"] = token
    return out


def terminate_instances(engine: Engine, params: JSON, now: float) -> JSON:
    changes = []
    for instance in find_instances(engine, list(params["InstanceIds"])):
        previous = instance.state
        engine.terminate(instance, now, USER_SHUTDOWN)
        changes.append({"InstanceId": instance.id, "CurrentState": _state(instance.state),
                        "PreviousState": _state(previous)})
    return {"TerminatingInstances": changes}


# --- launch templates, subnets, types, reservations -------------------------------------------------------------


def describe_launch_templates(engine: Engine, params: JSON) -> JSON:
    templates = list(engine.state.templates.values())
    for key, code, what in (("LaunchTemplateIds", "InvalidLaunchTemplateId.NotFound", "ID"),
                            ("LaunchTemplateNames", "InvalidLaunchTemplateName.NotFoundException", "name")):
        wanted = list(params.get(key) or [])
        if wanted:
            attr = "id" if what == "ID" else "name"
            missing = [w for w in wanted if all(getattr(t, attr) != w for t in templates)]
            if missing:
                raise Ec2Error(code, f"The specified launch template, with template {what} {missing[0]}, "
                                     "does not exist.")
            templates = [t for t in templates if getattr(t, attr) in wanted]
    kept = filtered(templates, params.get("Filters"),
                    {"launch-template-name": lambda t: t.name}, lambda t: t.tags)
    shown, token = page(kept, params, low=1, high=200)
    out: JSON = {"LaunchTemplates": [
        {"LaunchTemplateId": t.id, "LaunchTemplateName": t.name, "CreateTime": stamp(t.created),
         "CreatedBy": f"arn:aws:iam::{ACCOUNT}:root", "DefaultVersionNumber": t.default_version,
         "LatestVersionNumber": t.latest_version, "Tags": tag_list(t.tags)} for t in shown]}
    if token:
        out["NextToken"] = token
    return out


def describe_launch_template_versions(engine: Engine, params: JSON) -> JSON:
    ref = params.get("LaunchTemplateId") or params.get("LaunchTemplateName")
    template = engine.state.template(str(ref)) if ref else None
    if template is None:
        code = "InvalidLaunchTemplateId.NotFound" if params.get("LaunchTemplateId") else \
            "InvalidLaunchTemplateName.NotFoundException"
        raise Ec2Error(code, f"The specified launch template, with template ID {ref}, does not exist.")
    numbers: list[int] = []
    for spec in params.get("Versions") or [str(n) for n in sorted(template.versions)]:
        number = template.version(str(spec))
        if number is None:
            raise Ec2Error("InvalidLaunchTemplateId.VersionNotFound",
                           f"Could not find launch template version {spec} for template {template.id}.")
        numbers.append(number)
    shown, token = page(numbers, params, low=1, high=200)
    out: JSON = {"LaunchTemplateVersions": [
        {"LaunchTemplateId": template.id, "LaunchTemplateName": template.name, "VersionNumber": n,
         "CreateTime": stamp(template.created), "CreatedBy": f"arn:aws:iam::{ACCOUNT}:root",
         "DefaultVersion": n == template.default_version, "LaunchTemplateData": template.versions[n]}
        for n in shown]}
    if token:
        out["NextToken"] = token
    return out


def describe_subnets(engine: Engine, params: JSON) -> JSON:
    subnets = list(engine.state.subnets.values())
    wanted = list(params.get("SubnetIds") or [])
    missing = [w for w in wanted if w not in engine.state.subnets]
    if missing:
        raise Ec2Error("InvalidSubnetID.NotFound", f"The subnet ID '{missing[0]}' does not exist")
    if wanted:
        subnets = [s for s in subnets if s.id in wanted]
    kept = filtered(subnets, params.get("Filters"),
                    {"subnet-id": lambda s: s.id, "availability-zone": lambda s: s.zone, "vpc-id": lambda s: s.vpc_id,
                     "cidr-block": lambda s: s.cidr}, lambda s: s.tags)
    shown, token = page(kept, params)
    out: JSON = {"Subnets": [
        {"SubnetId": s.id, "AvailabilityZone": s.zone, "AvailabilityZoneId": zone_id(s.zone), "CidrBlock": s.cidr,
         "AvailableIpAddressCount": s.free(), "VpcId": s.vpc_id, "State": "available", "OwnerId": ACCOUNT,
         "DefaultForAz": False, "MapPublicIpOnLaunch": False, "Tags": tag_list(s.tags),
         "SubnetArn": f"arn:aws:ec2:{region_of(s.zone)}:{ACCOUNT}:subnet/{s.id}",
         "PrivateDnsNameOptionsOnLaunch": {"HostnameType": s.hostname_type}} for s in shown]}
    if token:
        out["NextToken"] = token
    return out


def describe_instance_type_offerings(engine: Engine, params: JSON) -> JSON:
    location_type = params.get("LocationType") or "region"
    pairs = engine.state.offerings
    if pairs is None:
        pairs = {(t, z) for t in engine.machines for z in engine.state.zones()}
    rows: set[tuple[str, str]] = set()
    for instance_type, zone in pairs:
        location = {"region": engine.state.region, "availability-zone": zone,
                    "availability-zone-id": zone_id(zone)}.get(location_type, zone)
        rows.add((instance_type, location))
    kept = filtered(sorted(rows), params.get("Filters"),
                    {"instance-type": lambda r: r[0], "location": lambda r: r[1]}, lambda r: {})
    shown, token = page(kept, params, high=1000)
    out: JSON = {"InstanceTypeOfferings": [{"InstanceType": t, "LocationType": location_type, "Location": loc}
                                           for t, loc in shown]}
    if token:
        out["NextToken"] = token
    return out


def type_info(machine: MachineType) -> JSON:
    info: JSON = {"InstanceType": machine.name, "CurrentGeneration": True,
                  "SupportedUsageClasses": ["on-demand", "spot"],
                  "VCpuInfo": {"DefaultVCpus": machine.vcpus},
                  "MemoryInfo": {"SizeInMiB": machine.memory // 2**20},
                  "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]}}
    if machine.gpus:
        info["GpuInfo"] = {"Gpus": [{"Name": machine.gpu_label or GPU_RESOURCE, "Manufacturer": "NVIDIA",
                                     "Count": machine.gpus}]}
    return info


def describe_instance_types(engine: Engine, params: JSON) -> JSON:
    wanted = list(params.get("InstanceTypes") or [])
    missing = [w for w in wanted if w not in engine.machines]
    if missing:
        raise Ec2Error("InvalidInstanceType", f"The following supplied instance types do not exist: "
                                              f"[{', '.join(missing)}]")
    machines = [engine.machines[n] for n in (wanted or sorted(engine.machines))]
    kept = filtered(machines, params.get("Filters"), {"instance-type": lambda m: m.name}, lambda m: {})
    shown, token = page(kept, params, high=100)
    out: JSON = {"InstanceTypes": [type_info(m) for m in shown]}
    if token:
        out["NextToken"] = token
    return out


def describe_capacity_reservations(engine: Engine, params: JSON) -> JSON:
    reservations = list(engine.state.reservations.values())
    wanted = list(params.get("CapacityReservationIds") or [])
    missing = [w for w in wanted if w not in engine.state.reservations]
    if missing:
        raise Ec2Error("InvalidCapacityReservationId.NotFound",
                       f"The capacity reservation ID '{missing[0]}' does not exist")
    if wanted:
        reservations = [r for r in reservations if r.id in wanted]
    kept = filtered(reservations, params.get("Filters"),
                    {"instance-type": lambda r: r.instance_type, "availability-zone": lambda r: r.zone,
                     "state": lambda r: r.state, "reservation-type": lambda r: r.kind}, lambda r: {})
    shown, token = page(kept, params, low=1, high=1000)
    out: JSON = {"CapacityReservations": [
        {"CapacityReservationId": r.id, "OwnerId": ACCOUNT, "InstanceType": r.instance_type,
         "CapacityReservationArn": f"arn:aws:ec2:{region_of(r.zone)}:{ACCOUNT}:capacity-reservation/{r.id}",
         "AvailabilityZone": r.zone, "AvailabilityZoneId": zone_id(r.zone), "InstancePlatform": "Linux/UNIX",
         "Tenancy": "default", "TotalInstanceCount": r.total, "AvailableInstanceCount": engine.state.available(r),
         "State": r.state, "StartDate": stamp(r.start), "InstanceMatchCriteria": r.match, "ReservationType": r.kind,
         "EndDateType": "limited" if r.end is not None else "unlimited",
         **({"EndDate": stamp(r.end)} if r.end is not None else {})} for r in shown]}
    if token:
        out["NextToken"] = token
    return out
