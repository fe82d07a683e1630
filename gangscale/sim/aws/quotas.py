"""EC2's vCPU quotas: which quota an instance counts against, and what the fake answers when one is full.

Source: EC2 user guide, "Amazon EC2 On-Demand Instance quotas" (vCPU-based, per region, one quota per group of
instance families: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "Running On-Demand F
instances", "Running On-Demand G and VT instances", "Running On-Demand High Memory instances", "Running On-Demand
Inf instances", "Running On-Demand P instances", "Running On-Demand Trn instances", "Running On-Demand X
instances", "Running On-Demand DL instances") and "Spot Instance quotas" (the same groups, "All P Spot Instance
Requests" …). The quota names are the Service Quotas names as remembered from those pages (the search tool did not
return the pages themselves: UNVERIFIED wording); the grouping by family letter is theirs.

Errors: an On-Demand quota exceeded is ``VcpuLimitExceeded`` with EC2's message "You have requested more vCPU
capacity than your current vCPU limit of N allows for the instance bucket that the specified instance type belongs
to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit." (verbatim
as EC2 answers it, quoted in e.g. aws/amazon-cloudwatch-agent-test#256 and scrapoxy/scrapoxy#202); a Spot quota
exceeded is ``MaxSpotInstanceCountExceeded`` (EC2 error codes page; its message here, "Max spot instance count
exceeded", is UNVERIFIED). Assumptions: instances count while pending, running or shutting-down; instances in a
Capacity Block count against no quota (the fake's choice); instances in On-Demand Capacity Reservations count
against the On-Demand quota.
"""

from __future__ import annotations

import re

from gangscale.sim.aws.state import CAPACITY_BLOCK, SPOT, Ec2State

_GROUPS = (("u-", "High Memory"), ("dl", "DL"), ("trn", "Trn"), ("inf", "Inf"), ("vt", "G and VT"),
           ("p", "P"), ("g", "G and VT"), ("f", "F"), ("x", "X"))
STANDARD = "Standard (A, C, D, H, I, M, R, T, Z)"


def group(instance_type: str) -> str:
    family = instance_type.split(".", maxsplit=1)[0].lower()
    for prefix, name in _GROUPS:
        if family.startswith(prefix) and (prefix == "u-" or re.match(rf"^{re.escape(prefix)}\d", family)):
            return name
    return STANDARD


def quota_name(instance_type: str, lifecycle: str) -> str | None:
    """The quota an instance of this type and lifecycle counts against (None: none)."""
    if lifecycle == CAPACITY_BLOCK:
        return None
    if lifecycle == SPOT:
        return f"All {group(instance_type)} Spot Instance Requests"
    return f"Running On-Demand {group(instance_type)} instances"


def used(state: Ec2State, name: str) -> int:
    return sum(i.vcpus for i in state.instances.values()
               if i.live and quota_name(i.instance_type, i.lifecycle) == name)


def headroom(state: Ec2State, instance_type: str, lifecycle: str, vcpus: int) -> tuple[int | None, str | None]:
    """How many more such instances fit (None: no limit) and the quota's name."""
    name = quota_name(instance_type, lifecycle)
    limit = None if name is None else state.quotas.get(name)
    if name is None or limit is None or vcpus <= 0:
        return None, name
    return max(0, (limit - used(state, name)) // vcpus), name


def quota_error(state: Ec2State, name: str, lifecycle: str) -> tuple[str, str]:
    if lifecycle == SPOT:
        return "MaxSpotInstanceCountExceeded", "Max spot instance count exceeded"
    return ("VcpuLimitExceeded",
            f"You have requested more vCPU capacity than your current vCPU limit of {state.quotas.get(name, 0)} "
            "allows for the instance bucket that the specified instance type belongs to. Please visit "
            "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.")
