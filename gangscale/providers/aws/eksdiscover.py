"""``gangscale pools --from-eks CLUSTER``: a pool file written from an EKS cluster's managed node groups.

Each managed node group that gangscale may drive becomes one pool per availability zone of its subnets (a fleet of
type instant launches into one subnet, so a pool is one zone and one subnet: the first of the group's subnets in
that zone), with the group's first instance type, capacity type, Kubernetes labels and taints, ``maxUnits`` = the
group's ``maxSize`` (the ceiling its owner set), and an ``aws:`` block naming the group (``nodeGroup``: its nodes
are told by ``eks.amazonaws.com/nodegroup`` and the zone) and the launch template its Auto Scaling group launches.

Why the Auto Scaling group's launch template, never the one in ``DescribeNodegroup``: EKS launches a managed node
group's nodes from a template it makes in the account, "a copy of the launch template provided by the user" when
there is one (awsdocs/amazon-eks-user-guide#348), into which it merges what a node needs to join: the node IAM
role's instance profile (a group's own template may not carry ``IamInstanceProfile``), the AMI of the group's
``amiType`` and release, and the bootstrap user data ("your user data is merged with Amazon EKS user data required
for nodes to join the cluster", with the group's labels and taints and ``eks.amazonaws.com/nodegroup``) — EKS user
guide, "Customize managed nodes with launch templates". A group's own template launched as is makes instances that
cannot join, and a group made without one has only EKS's. The group's Auto Scaling group names EKS's template
(``LaunchTemplate`` or ``MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification``); its version is written
as the group uses it now, so after a node group update (EKS makes a new version) the file is written again.

Left out, with the reason at the top of the file and on stderr (two autoscalers on one group undo each other's
work, and a group's own nodes are not gangscale's to count or terminate):

- a group that keeps nodes of its own (``minSize`` or ``desiredSize`` above 0): its Auto Scaling group launches
  and replaces them, and gangscale, seeing nodes with the group's label in the pool's zone, would count them as its
  units. EKS requires ``maxSize`` ≥ 1 (the model's ``Capacity`` shape), so a group handed to gangscale is
  ``minSize = desiredSize = 0``: its template stays, its Auto Scaling group launches nothing;
- a group whose Auto Scaling group carries ``k8s.io/cluster-autoscaler/enabled``: the cluster-autoscaler's
  auto-discovery takes the tag as leave to scale the group, and would launch nodes for the same pending pods
  gangscale obtains nodes for. EKS puts the tag on every managed node group ("Amazon EKS tags managed node group
  resources so that they are configured to use the Kubernetes Cluster Autoscaler"), so handing a group to gangscale
  means removing it (the reason says how);
- a group being deleted or whose creation failed (``status``), whose Auto Scaling group or template cannot be read,
  or whose subnets are unknown; a Capacity Block group whose template names no capacity reservation.

Self-managed node groups are not listed by EKS (``ListNodegroups``: "Self-managed node groups aren't listed"): write
their pools by hand, with ``gangscale.io/node-pool=<pool>`` in the template's ``--node-labels``.

Capacity types (EKS ``CapacityTypes``): ``ON_DEMAND`` → on-demand, ``SPOT`` → spot, ``CAPACITY_BLOCK`` →
reservation with ``aws.capacityBlock`` and the reservation's id (``reservation.name``) from the template's
``CapacityReservationSpecification.CapacityReservationTarget`` (how EKS's Capacity Block node groups name it). An
instance type comes from the group's ``instanceTypes``, else from its template (``InstanceType``), else EKS's
default, ``t3.medium`` (the launch templates page again). An instance type outside gangscale's built-in catalog
gets an ``allocatable`` from EC2's ``DescribeInstanceTypes`` (vCPUs, memory, NVIDIA GPUs, Neuron devices) with the
EKS reservations of :func:`gangscale.model.catalog.eks_allocatable`, so that the file is valid as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from gangscale.model.catalog import CATALOG, MachineType, eks_allocatable
from gangscale.model.quantity import format_quantity

JSON = dict[str, Any]
CA_ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
#: EKS's instance type when neither the group nor its template names one.
EKS_DEFAULT_INSTANCE_TYPE = "t3.medium"
CAPACITY_TYPES = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "reservation"}
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}
#: Node group states with nothing to launch from: going, or never made.
GONE_STATES = ("DELETING", "CREATE_FAILED", "DELETE_FAILED")
#: DescribeAutoScalingGroups takes at most this many names a call (EC2 Auto Scaling API reference).
ASG_BATCH = 50
_VERSION = re.compile(r"^(\$Default|\$Latest|[1-9][0-9]*)$")


async def pool_file_from_eks(eks_client: Any, ec2_client: Any, cluster: str, region: str, *,
                             autoscaling_client: Any) -> tuple[str, list[str]]:
    """The pool file's text, and the node groups left out with why (aiobotocore clients of the region)."""
    groups = [await _call(eks_client, "DescribeNodegroup", clusterName=cluster, nodegroupName=name)
              for name in await _nodegroup_names(eks_client, cluster)]
    described = [g["nodegroup"] for g in groups]
    asgs = await _auto_scaling_groups(autoscaling_client, described)
    zones = await _subnet_zones(ec2_client, [s for g in described for s in g.get("subnets") or []])
    pools: list[JSON] = []
    kept: list[JSON] = []
    refused: list[str] = []
    notes: list[str] = []
    for group in sorted(described, key=lambda g: str(g.get("nodegroupName"))):
        name = str(group.get("nodegroupName"))
        asg = next((asgs[a["name"]] for a in (group.get("resources") or {}).get("autoScalingGroups") or []
                    if a.get("name") in asgs), None)
        why = _refusal(group, asg)
        template = _template_of(asg) if asg is not None and why is None else None
        if why is None and template is None:
            why = "its Auto Scaling group names no launch template to launch from"
        data = await _template_data(ec2_client, template, group) if why is None and template else {}
        why = why or _capacity_problem(group, data)
        pools_of = [] if why else _pools_of(group, template or {}, data, zones, cluster, region, notes)
        if why is None and not pools_of:
            why = "none of its subnets is known to EC2 (DescribeSubnets), so it has no zone"
        if why:
            refused.append(f"{name}: {why}")
        kept += pools_of
    shapes = await _instance_types(ec2_client, sorted({p["machineType"] for p in kept} - set(CATALOG)))
    for pool in kept:
        if pool["machineType"] in CATALOG or pool["machineType"] in shapes:
            if pool["machineType"] in shapes:
                pool["allocatable"] = shapes[pool["machineType"]]
            pools.append(pool)
        elif not any(line.startswith(f"{pool['aws']['nodeGroup']}: ") for line in refused):
            refused.append(f"{pool['aws']['nodeGroup']}: EC2 does not know its instance type {pool['machineType']} "
                           "in this region (DescribeInstanceTypes)")
    header = [f"# gangscale pool file written from EKS cluster {cluster} ({region}) by `gangscale pools --from-eks`.",
              "# maxUnits is each node group's maxSize: set it to what each pool may cost you.",
              "# Self-managed node groups are not listed by EKS: add their pools by hand."]
    header += [f"# note: {line}" for line in notes] + [f"# left out: {line}" for line in refused]
    body = yaml.safe_dump({"nodePools": pools}, sort_keys=False, default_flow_style=False) if pools else \
        "nodePools: []\n"
    return "\n".join(header) + "\n" + body, refused


async def _call(client: Any, operation: str, **params: Any) -> JSON:
    """One API call by its model name (``DescribeNodegroup`` → ``describe_nodegroup``): the names stay greppable
    for the IAM policy test (``tests/deploy/test_aws_iam.py``)."""
    method = "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")
    answer: JSON = await getattr(client, method)(**params)
    return answer


async def _nodegroup_names(eks_client: Any, cluster: str) -> list[str]:
    names: list[str] = []
    params: JSON = {"clusterName": cluster}
    while True:
        page = await _call(eks_client, "ListNodegroups", **params)
        names += [str(n) for n in page.get("nodegroups") or []]
        if not page.get("nextToken"):
            return names
        params["nextToken"] = page["nextToken"]


async def _auto_scaling_groups(autoscaling_client: Any, groups: Sequence[JSON]) -> dict[str, JSON]:
    names = sorted({str(a["name"]) for g in groups for a in (g.get("resources") or {}).get("autoScalingGroups") or []
                    if a.get("name")})
    found: dict[str, JSON] = {}
    for start in range(0, len(names), ASG_BATCH):
        params: JSON = {"AutoScalingGroupNames": names[start:start + ASG_BATCH]}
        while True:
            page = await _call(autoscaling_client, "DescribeAutoScalingGroups", **params)
            found.update({str(a["AutoScalingGroupName"]): a for a in page.get("AutoScalingGroups") or []})
            if not page.get("NextToken"):
                break
            params["NextToken"] = page["NextToken"]
    return found


async def _subnet_zones(ec2_client: Any, subnets: Sequence[str]) -> dict[str, str]:
    """subnet id -> availability zone. A filter, not ``SubnetIds``: an id EC2 does not know is left out rather than
    failing the call (``InvalidSubnetID.NotFound``), and its group is then refused by name."""
    if not subnets:
        return {}
    zones: dict[str, str] = {}
    params: JSON = {"Filters": [{"Name": "subnet-id", "Values": sorted(set(subnets))}]}
    while True:
        page = await _call(ec2_client, "DescribeSubnets", **params)
        zones.update({str(s["SubnetId"]): str(s["AvailabilityZone"]) for s in page.get("Subnets") or []})
        if not page.get("NextToken"):
            return zones
        params["NextToken"] = page["NextToken"]


async def _instance_types(ec2_client: Any, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """instance type -> the ``allocatable`` of an EKS node of it, for types outside the built-in catalog (a filter,
    not ``InstanceTypes``: an unknown type is left out rather than failing the call)."""
    if not names:
        return {}
    found: dict[str, dict[str, str]] = {}
    params: JSON = {"Filters": [{"Name": "instance-type", "Values": list(names)}]}
    while True:
        page = await _call(ec2_client, "DescribeInstanceTypes", **params)
        for info in page.get("InstanceTypes") or []:
            gpus = sum(int(g.get("Count") or 0) for g in (info.get("GpuInfo") or {}).get("Gpus") or []
                       if str(g.get("Manufacturer") or "").upper() == "NVIDIA")
            neuron = sum(int(d.get("Count") or 0) for d in (info.get("NeuronInfo") or {}).get("NeuronDevices") or [])
            machine = MachineType(str(info["InstanceType"]), int((info.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
                                  int((info.get("MemoryInfo") or {}).get("SizeInMiB") or 0) * 2**20, gpus=gpus,
                                  cloud="ec2", neuron=neuron)
            found[machine.name] = {k: format_quantity(k, v) for k, v in eks_allocatable(machine).items()}
        if not page.get("NextToken"):
            return found
        params["NextToken"] = page["NextToken"]


def _refusal(group: JSON, asg: JSON | None) -> str | None:
    name, scaling = group.get("nodegroupName"), group.get("scalingConfig") or {}
    cluster = group.get("clusterName")
    if group.get("status") in GONE_STATES:
        return f"its status is {group.get('status')}"
    low, high, desired = (int(scaling.get(k) or 0) for k in ("minSize", "maxSize", "desiredSize"))
    if low > 0 or desired > 0:
        return (f"it keeps nodes of its own (minSize {low}, desiredSize {desired}), which its Auto Scaling group "
                "launches and replaces and gangscale would count as its units; hand it to gangscale with "
                f"aws eks update-nodegroup-config --cluster-name {cluster} --nodegroup-name {name} "
                f"--scaling-config minSize=0,maxSize={max(high, 1)},desiredSize=0")
    if asg is None:
        return "its Auto Scaling group could not be read (DescribeAutoScalingGroups)"
    tags = {str(t.get("Key")): str(t.get("Value")) for t in asg.get("Tags") or []}
    if CA_ENABLED_TAG in tags:
        asg_name = asg.get("AutoScalingGroupName")
        return (f"its Auto Scaling group {asg_name} carries {CA_ENABLED_TAG} (EKS tags every managed node group so), "
                "which lets a cluster-autoscaler with auto-discovery scale it for the same pods gangscale obtains "
                "nodes for; two autoscalers on one group undo each other's work: hand it to gangscale with "
                f"aws autoscaling delete-tags --tags ResourceId={asg_name},ResourceType=auto-scaling-group,"
                f"Key={CA_ENABLED_TAG}")
    return None


def _template_of(asg: JSON) -> JSON | None:
    """The launch template the Auto Scaling group launches from: ``{id, version}``."""
    spec = asg.get("LaunchTemplate") or \
        ((asg.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get("LaunchTemplateSpecification")
    if not spec or not (spec.get("LaunchTemplateId") or spec.get("LaunchTemplateName")):
        return None
    version = str(spec.get("Version") or "$Default")
    return {"id": str(spec.get("LaunchTemplateId") or spec.get("LaunchTemplateName")),
            "version": version if _VERSION.match(version) else "$Default"}


async def _template_data(ec2_client: Any, template: JSON, group: JSON) -> JSON:
    """The template version's ``LaunchTemplateData`` when the group needs it: no ``instanceTypes`` (the type is in
    the template), or a Capacity Block (the reservation is)."""
    if group.get("instanceTypes") and group.get("capacityType") != "CAPACITY_BLOCK":
        return {}
    key = "LaunchTemplateId" if template["id"].startswith("lt-") else "LaunchTemplateName"
    page = await _call(ec2_client, "DescribeLaunchTemplateVersions", **{key: template["id"]},
                       Versions=[template["version"]])
    versions = page.get("LaunchTemplateVersions") or []
    return dict(versions[0].get("LaunchTemplateData") or {}) if versions else {}


def _reservation_id(data: Mapping[str, Any]) -> str:
    target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    return str(target.get("CapacityReservationId") or "")


def _capacity_problem(group: JSON, data: Mapping[str, Any]) -> str | None:
    if group.get("capacityType") == "CAPACITY_BLOCK" and not _reservation_id(data).startswith("cr-"):
        return ("it is a Capacity Block group whose launch template names no capacity reservation "
                "(CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId)")
    return None


def _pools_of(group: JSON, template: JSON, data: Mapping[str, Any], zones: Mapping[str, str], cluster: str,
              region: str, notes: list[str]) -> list[JSON]:
    name = str(group.get("nodegroupName"))
    types = [str(t) for t in group.get("instanceTypes") or []] or \
        [str(data.get("InstanceType") or EKS_DEFAULT_INSTANCE_TYPE)]
    if len(types) > 1:
        # A pool's nodes are told by the group's label and the zone, so one group makes one pool per zone.
        notes.append(f"{name} lists instance types {', '.join(types)}; its pools launch the first, {types[0]}")
    by_zone: dict[str, str] = {}
    for subnet in sorted(group.get("subnets") or []):
        if subnet in zones:
            by_zone.setdefault(zones[subnet], subnet)
    capacity = CAPACITY_TYPES.get(str(group.get("capacityType") or "ON_DEMAND"), "on-demand")
    common: JSON = {"machineType": types[0], "capacityType": capacity}
    if capacity == "reservation":
        common["reservation"] = {"name": _reservation_id(data)}
    labels = {str(k): str(v) for k, v in (group.get("labels") or {}).items()}
    taints = [{"key": t.get("key"), "value": t.get("value", ""), "effect": EFFECTS.get(t.get("effect"), "NoSchedule")}
              for t in group.get("taints") or []]
    if labels:
        common["labels"] = labels
    if taints:
        common["taints"] = taints
    high = int((group.get("scalingConfig") or {}).get("maxSize") or 1)
    out = []
    for zone, subnet in sorted(by_zone.items()):
        aws: JSON = {"region": region, "cluster": cluster, "launchTemplate": template["id"],
                     "launchTemplateVersion": template["version"], "subnet": subnet, "nodeGroup": name}
        if capacity == "reservation":
            aws["capacityBlock"] = True
        out.append({"name": _pool_name(name, zone if len(by_zone) > 1 else ""), **common, "zone": zone,
                    "maxUnits": high, "aws": aws})
    return out


def _pool_name(group: str, zone: str) -> str:
    """A pool name (a DNS label): the group's, lower-cased with ``_`` as ``-`` (EKS allows both), with the zone's
    suffix (``us-east-1a`` → ``-1a``) when the group spans zones."""
    base = re.sub(r"[^a-z0-9-]", "-", group.lower()).strip("-") or "nodegroup"
    suffix = f"-{zone.rsplit('-', 1)[-1]}" if zone else ""
    return f"{base[:63 - len(suffix)].rstrip('-')}{suffix}"
