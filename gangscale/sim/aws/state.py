"""What the fake EC2 holds: instances, launch templates, subnets, capacity reservations, stock, vCPU quotas and the
ClientToken records of CreateFleet, with the id and name forms EC2 uses.

Sources of the forms:
- Ids: ``i-``, ``lt-``, ``cr-``, ``r-`` plus 17 hex digits (EC2's longer resource ids); fleets ``fleet-`` plus a
  UUID (the ``FleetId`` of the EC2 Fleet examples in the EC2 user guide).
- Instance states and codes: botocore's model, ``InstanceState.Code`` ("0 : pending 16 : running 32 : shutting-down
  48 : terminated 64 : stopping 80 : stopped").
- Private IPs: "The first four IP addresses and the last IP address in each subnet CIDR block are not available"
  (Amazon VPC user guide, "Subnet CIDR blocks"); the fake hands out the others in order.
- Private DNS names: ``ip-<a>-<b>-<c>-<d>.ec2.internal`` in us-east-1 and ``ip-….<region>.compute.internal``
  elsewhere; a subnet whose ``HostnameType`` is ``resource-name`` names instances ``<instance id>.ec2.internal`` /
  ``<instance id>.<region>.compute.internal`` (EC2 user guide, "EC2 instance hostnames, DNS names, and domains";
  cloud-providers.md §3 / the shared contract).
- Zone ids: ``<region abbreviation>-az<n>`` (``use1-az1``) as EC2's ``AvailabilityZoneId`` reads; which id a
  zone name maps to differs per account on AWS, the fake maps ``a`` → 1, ``b`` → 2, ….
"""

from __future__ import annotations

import ipaddress
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
ACCOUNT = "123456789012"
PENDING, RUNNING, SHUTTING_DOWN, TERMINATED = "pending", "running", "shutting-down", "terminated"
STATE_CODES = {PENDING: 0, RUNNING: 16, SHUTTING_DOWN: 32, TERMINATED: 48, "stopping": 64, "stopped": 80}
ON_DEMAND, SPOT, CAPACITY_BLOCK = "on-demand", "spot", "capacity-block"
_DIRECTIONS = {"east": "e", "west": "w", "north": "n", "south": "s", "central": "c", "southeast": "se",
               "northeast": "ne", "southwest": "sw", "northwest": "nw"}


def region_of(zone: str) -> str:
    return zone[:-1] if zone and zone[-1].isalpha() else zone


def zone_id(zone: str) -> str:
    """``us-east-1a`` → ``use1-az1`` (the letter's place in the alphabet; see the module docstring)."""
    parts = region_of(zone).split("-")
    abbreviation = parts[0] + "".join(_DIRECTIONS.get(p, p[:1]) for p in parts[1:-1]) + parts[-1]
    return f"{abbreviation}-az{ord(zone[-1]) - ord('a') + 1}"


def dns_domain(region: str) -> str:
    return "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"


class Ids:
    """Ids from a seeded generator, so that a run is repeatable."""

    def __init__(self, seed: int | None) -> None:
        self._random = random.Random(seed)

    def hex17(self, prefix: str) -> str:
        return f"{prefix}-{self._random.getrandbits(68):017x}"

    def uuid(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))


@dataclass
class Subnet:
    id: str
    zone: str
    cidr: str
    vpc_id: str = "vpc-0fake0000000000001"
    hostname_type: str = "ip-name"
    tags: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    #: Where the next address is looked for (see :meth:`allocate`).
    cursor: int = 4

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.cidr)

    def free(self) -> int:
        return max(0, self.network.num_addresses - 5 - len(self.used))

    def allocate(self) -> str:
        """A free address of the subnet (AWS reserves the first four and the last: VPC user guide, "Subnet CIDR
        blocks"). Which free address EC2 picks is not documented; the fake goes round the range, so an address
        released is handed out again only after the others. Reuse is real (and the aws provider copes with it), but
        lowest-first made it immediate: a new instance took the address, hence the node name, of one terminated a
        moment before whose Node was still being deleted (chaos seed 23009)."""
        net = self.network
        first, last = 4, net.num_addresses - 2
        span = last - first + 1
        for step in range(span):
            offset = first + (self.cursor - first + step) % span
            address = str(net.network_address + offset)
            if address not in self.used:
                self.used.add(address)
                self.cursor = offset + 1
                return address
        raise ValueError(f"subnet {self.id} has no free address")


@dataclass
class LaunchTemplate:
    """A launch template; ``versions[n]`` is the ``LaunchTemplateData`` of version n in botocore member names
    (``UserData`` base64, ``InstanceType``, ``InstanceMarketOptions``, ``CapacityReservationSpecification``,
    ``TagSpecifications``, …)."""

    id: str
    name: str
    created: float
    versions: dict[int, JSON] = field(default_factory=dict)
    default_version: int = 1
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def latest_version(self) -> int:
        return max(self.versions)

    def version(self, spec: str | None) -> int | None:
        """``$Latest``, ``$Default``, a number or None (the default version); None if there is no such version."""
        if spec in (None, "", "$Default"):
            return self.default_version
        if spec == "$Latest":
            return self.latest_version
        assert spec is not None
        return int(spec) if spec.isdigit() and int(spec) in self.versions else None


@dataclass
class CapacityReservation:
    """An On-Demand Capacity Reservation (``kind`` default) or a Capacity Block for ML (``capacity-block``).
    ``match`` is ``open`` or ``targeted`` (``InstanceMatchCriteria``)."""

    id: str
    instance_type: str
    zone: str
    total: int
    kind: str = "default"
    match: str = "targeted"
    state: str = "active"
    start: float = 0.0
    end: float | None = None
    resource_groups: set[str] = field(default_factory=set)


@dataclass
class Instance:
    id: str
    instance_type: str
    zone: str
    subnet_id: str
    private_ip: str
    private_dns: str
    lifecycle: str  # on-demand | spot | capacity-block
    launched: float
    running_at: float
    reservation_id: str
    template_id: str
    template_version: int
    client_token: str
    tags: dict[str, str] = field(default_factory=dict)
    capacity_reservation_id: str | None = None
    placement_group: str | None = None
    vcpus: int = 0
    state: str = PENDING
    state_reason: tuple[str, str] | None = None
    #: When it goes shutting-down by itself (a spot interruption's end of notice).
    interrupt_at: float | None = None
    shutting_down_at: float | None = None
    terminated_at: float | None = None
    #: Node registration and readiness (clock times; None: done or never).
    register_at: float | None = None
    ready_at: float | None = None
    registered: bool = False
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: list[JSON] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.state != TERMINATED


@dataclass
class FleetRecord:
    """What a CreateFleet ClientToken stands for: the request it came with (canonical JSON, without the token)
    and the answer."""

    params: str
    answer: JSON


@dataclass
class Ec2State:
    region: str
    instances: dict[str, Instance] = field(default_factory=dict)
    templates: dict[str, LaunchTemplate] = field(default_factory=dict)
    subnets: dict[str, Subnet] = field(default_factory=dict)
    reservations: dict[str, CapacityReservation] = field(default_factory=dict)
    #: ``(instance type, zone, lifecycle)`` → instances that can still be launched (absent or None: unlimited).
    #: Lifecycle ``on-demand`` or ``spot``; capacity reservations hold their own capacity.
    stock: dict[tuple[str, str, str], int | None] = field(default_factory=dict)
    #: vCPU quota name (:mod:`.quotas`) → vCPUs (absent: unlimited).
    quotas: dict[str, int] = field(default_factory=dict)
    #: ``(instance type, zone)`` pairs DescribeInstanceTypeOfferings lists (None: every known type in every zone
    #: of a subnet).
    offerings: set[tuple[str, str]] | None = None
    fleet_tokens: dict[str, FleetRecord] = field(default_factory=dict)

    def template(self, id_or_name: str) -> LaunchTemplate | None:
        found = self.templates.get(id_or_name)
        return found or next((t for t in self.templates.values() if t.name == id_or_name), None)

    def in_use(self, reservation_id: str) -> int:
        return sum(1 for i in self.instances.values() if i.live and i.capacity_reservation_id == reservation_id)

    def available(self, reservation: CapacityReservation) -> int:
        return max(0, reservation.total - self.in_use(reservation.id)) if reservation.state == "active" else 0

    def zones(self) -> list[str]:
        return sorted({s.zone for s in self.subnets.values()})
