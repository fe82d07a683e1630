"""Wire-level helpers of the fake Google Cloud: timestamps, resource links, name rules, generated names, machine
shapes and Go-style durations. Pure functions (plus one seeded name generator); no I/O, no clock.
"""

from __future__ import annotations

import random
import re
import string
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from gangscale.model.catalog import CATALOG, GiB, MachineType

CONTAINER_ROOT = "https://container.googleapis.com/v1"
COMPUTE_ROOT = "https://www.googleapis.com/compute/v1"

#: GKE's node-pool name rule, as its 400 message states it (at most 40 characters).
POOL_NAME_REGEX = "(?:[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)"
#: RFC1035 names of Compute Engine resources (1-63 characters).
COMPUTE_NAME_REGEX = "(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)"
_POOL_NAME = re.compile(POOL_NAME_REGEX)
_COMPUTE_NAME = re.compile(COMPUTE_NAME_REGEX)
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def valid_pool_name(name: str) -> bool:
    return _POOL_NAME.fullmatch(name) is not None


def valid_compute_name(name: str) -> bool:
    return _COMPUTE_NAME.fullmatch(name) is not None


def valid_request_id(value: str) -> bool:
    """A compute ``requestId``: a UUID other than the zero UUID."""
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return False
    return str(parsed) != _ZERO_UUID and len(value) == 36


def container_time(t: float) -> str:
    """GKE's operation timestamps: RFC3339 UTC with nanoseconds, ``2017-09-18T09:54:26.148507311Z``."""
    nanos = round(t * 1_000_000_000)
    seconds, frac = divmod(nanos, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def compute_time(t: float) -> str:
    """Compute Engine's timestamps: RFC3339 with milliseconds and a numeric offset (always UTC here)."""
    millis = round(t * 1000)
    seconds, frac = divmod(millis, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:03d}+00:00"


def go_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` prints it: ``35m4.033429035s``, ``14s``, ``1h0m0s``."""
    nanos = round(seconds * 1_000_000_000)
    if nanos == 0:
        return "0s"
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    whole, frac = divmod(rest, 1_000_000_000)
    secs = str(whole) + (f".{frac:09d}".rstrip("0") if frac else "")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def region_of(zone: str) -> str:
    """``us-central1-a`` → ``us-central1`` (a region is returned unchanged)."""
    head, _, tail = zone.rpartition("-")
    return head if head and len(tail) == 1 else zone


@dataclass(frozen=True)
class Links:
    """The resource URLs the real services put in their answers (never the fake's own address)."""

    project: str
    project_number: str

    def zone(self, zone: str) -> str:
        return f"{COMPUTE_ROOT}/projects/{self.project}/zones/{zone}"

    def mig(self, zone: str, name: str) -> str:
        return f"{self.zone(zone)}/instanceGroupManagers/{name}"

    def instance_group(self, zone: str, name: str) -> str:
        return f"{self.zone(zone)}/instanceGroups/{name}"

    def instance(self, zone: str, name: str) -> str:
        return f"{self.zone(zone)}/instances/{name}"

    def machine_type(self, zone: str, name: str) -> str:
        return f"{self.zone(zone)}/machineTypes/{name}"

    def template(self, name: str) -> str:
        return f"{COMPUTE_ROOT}/projects/{self.project}/global/instanceTemplates/{name}"

    def compute_operation(self, zone: str, name: str) -> str:
        return f"{self.zone(zone)}/operations/{name}"

    def resize_request(self, zone: str, mig: str, name: str) -> str:
        return f"{self.mig(zone, mig)}/resizeRequests/{name}"

    def cluster(self, location: str, cluster: str) -> str:
        return f"{CONTAINER_ROOT}/projects/{self.project}/locations/{location}/clusters/{cluster}"

    def pool(self, location: str, cluster: str, pool: str) -> str:
        return f"{self.cluster(location, cluster)}/nodePools/{pool}"

    def container_operation(self, location: str, name: str) -> str:
        # Operation links carry the project number, as GKE's do.
        return f"{CONTAINER_ROOT}/projects/{self.project_number}/locations/{location}/operations/{name}"

    def container_target(self, location: str, cluster: str, pool: str | None) -> str:
        base = f"{CONTAINER_ROOT}/projects/{self.project_number}/locations/{location}/clusters/{cluster}"
        return base if pool is None else f"{base}/nodePools/{pool}"


#: An instance reference as Compute Engine takes one in a request (``InstanceGroupManagersDeleteInstancesRequest``:
#: "a full URL or a partial URL, such as zones/[ZONE]/instances/[INSTANCE_NAME]"): a full URL on either of the API's
#: hosts, or a partial one starting at ``projects/`` or ``zones/`` — never at ``/``.
_INSTANCE_URL = re.compile(r"^(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta|alpha)/)?"
                           r"(?:projects/(?P<project>[^/]+)/)?zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)$")


def parse_instance_url(url: str) -> tuple[str | None, str, str] | None:
    """``(project or None, zone, name)`` of a full or partial instance URL, or None if it is not one."""
    match = _INSTANCE_URL.match(url)
    if match is None or (match["project"] is None and not url.startswith("zones/")):
        return None
    return match["project"], match["zone"], match["name"]


class Names:
    """Generated names and ids, from one seeded generator so that a run is repeatable."""

    _SUFFIX = string.ascii_lowercase + string.digits

    def __init__(self, seed: int | None) -> None:
        self._rng = random.Random(seed)

    def hex(self, digits: int) -> str:
        return f"{self._rng.getrandbits(4 * digits):0{digits}x}"

    def suffix(self) -> str:
        """The 4 characters a MIG appends to its base instance name."""
        return "".join(self._rng.choice(self._SUFFIX) for _ in range(4))

    def uint64(self) -> str:
        return str(self._rng.getrandbits(63) | (1 << 60))

    def container_operation(self, t: float) -> str:
        return f"operation-{round(t * 1000)}-{self.hex(8)}"

    def compute_operation(self, t: float) -> str:
        return f"operation-{round(t * 1000)}-{self.hex(13)}-{self.hex(8)}-{self.hex(8)}"

    def request_info(self) -> str:
        return f"0x{self.hex(16)}"


def gke_base_name(cluster: str, pool: str, hash8: str) -> str:
    """``gke-<cluster>-<pool>-<8 hex>``; the fake's own truncation keeps names within RFC1035 with a suffix."""
    return f"gke-{cluster[:20].rstrip('-')}-{pool[:20].rstrip('-')}-{hash8}"


_SHAPED = re.compile(r"^(?P<family>[a-z][a-z0-9]*)-(?P<kind>standard|highmem|highcpu)-(?P<n>[0-9]+)$")
_MEMORY_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}
_SHARED_CORE = {"e2-micro": 1, "e2-small": 2, "e2-medium": 4}


def machine_shape(name: str) -> MachineType | None:
    """The catalog entry of ``name``; else an approximation for ``<family>-standard|highmem|highcpu-<n>``
    (4/8/1 GiB per vCPU) and the E2 shared-core types; None for anything else."""
    known = CATALOG.get(name)
    if known is not None:
        return known
    if name in _SHARED_CORE:
        return MachineType(name, 2, _SHARED_CORE[name] * GiB)
    match = _SHAPED.match(name)
    if match is None or int(match["n"]) < 1:
        return None
    vcpus = int(match["n"])
    return MachineType(name, vcpus, vcpus * _MEMORY_PER_VCPU[match["kind"]] * GiB)


def machine_family(name: str) -> str:
    return name.partition("-")[0]
