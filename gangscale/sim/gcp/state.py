"""The fake cloud's state: clusters → node pools → one MIG per zone → members (VMs or VMs to be), plus container
and compute operations and MIG resize requests. Plain data; the behaviour is in :mod:`.engine`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gangscale.model.catalog import MachineType

JSON = dict[str, Any]

# Node pool statuses.
PROVISIONING = "PROVISIONING"
RUNNING = "RUNNING"
RUNNING_WITH_ERROR = "RUNNING_WITH_ERROR"
RECONCILING = "RECONCILING"
STOPPING = "STOPPING"
ERROR = "ERROR"

# Operation statuses (both APIs).
PENDING = "PENDING"
DONE = "DONE"

# Resize request states.
CREATING = "CREATING"
ACCEPTED = "ACCEPTED"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
CANCELLED = "CANCELLED"
ACTIVE_RR_STATES = frozenset({CREATING, ACCEPTED})


@dataclass
class Vm:
    """A Compute Engine instance that exists (it was created; it may be booting or being deleted)."""

    name: str
    zone: str
    machine_type: str
    vcpus: int
    mig: str
    id: str
    created_at: float
    running_at: float
    #: When its kubelet registers the Node (None once done, or for a VM that never registers).
    register_at: float | None
    ready_at: float | None = None
    registered: bool = False
    #: When it started being deleted, and when it is gone.
    deleting_at: float | None = None
    gone_at: float | None = None
    #: Part of a pool set up by the test (Ready as soon as registered).
    preexisting: bool = False
    #: Its Node never turns Ready (``never_ready``, or a broken host of a ``partial_slice_hosts`` slice).
    never_ready: bool = False
    #: The MIG resize request that made it (its metadata item ``google-compute-mig-resize-request``), or None.
    resize_request: str | None = None
    #: Its end of life: Compute Engine deletes it then (a resize request's run duration, or its template's
    #: ``scheduling.maxRunDuration``); None: it lives until deleted.
    terminate_at: float | None = None

    def status(self, now: float) -> str:
        if self.deleting_at is not None:
            return STOPPING
        if now >= self.running_at:
            return RUNNING
        if now >= (self.created_at + self.running_at) / 2:
            return "STAGING"
        return PROVISIONING


@dataclass
class Member:
    """A managed instance of a MIG: its name is fixed before the VM exists (``vm`` None while CREATING)."""

    name: str
    vm: Vm | None = None
    #: ``lastAttempt.errors.errors[]`` of the last failed creation attempt.
    errors: list[JSON] = field(default_factory=list)
    #: Created only together with others, by its owner: ``"slice"`` (a TPU slice pool) or a resize request's name.
    owner: str | None = None
    deleting: bool = False


@dataclass
class ResizeRequest:
    name: str
    id: str
    zone: str
    mig: str
    created_at: float
    members: list[str]
    resize_by: int | None
    instances: list[str] | None
    run_duration: JSON | None
    run_seconds: float | None
    description: str
    state: str = CREATING
    errors: list[JSON] = field(default_factory=list)
    last_errors: list[JSON] = field(default_factory=list)
    retry_at: float | None = None
    fail_at: float | None = None
    #: When it left ACCEPTED for good (SUCCEEDED, FAILED or CANCELLED).
    ended_at: float | None = None


@dataclass
class Mig:
    name: str
    zone: str
    id: str
    base_instance_name: str
    template: str
    created_at: float
    location: str
    cluster: str
    pool: str
    members: dict[str, Member] = field(default_factory=dict)
    resize_requests: dict[str, ResizeRequest] = field(default_factory=dict)
    #: When the MIG next retries its members that have no VM (None: nothing to retry).
    retry_at: float | None = None

    @property
    def target_size(self) -> int:
        return sum(1 for member in self.members.values() if not member.deleting)


@dataclass
class NodePool:
    location: str
    cluster: str
    name: str
    config: JSON
    initial_node_count: int
    locations: list[str]
    machine: MachineType
    created_at: float
    placement: JSON | None = None
    autoscaling: JSON = field(default_factory=dict)
    management: JSON = field(default_factory=dict)
    #: Other fields of the create request, echoed back (queuedProvisioning, upgradeSettings, …).
    extra: JSON = field(default_factory=dict)
    status: str = PROVISIONING
    conditions: list[JSON] = field(default_factory=list)
    migs: dict[str, Mig] = field(default_factory=dict)
    tpu_topology: str = ""
    #: VMs per slice for a TPU slice pool (created and removed all at once), else 0.
    slice_hosts: int = 0
    #: The most VMs this pool can ever have (a partial grant or an asynchronous quota failure), and the error its
    #: other VMs fail with.
    cap: int | None = None
    cap_code: str = ""
    #: How many of the pool's VMs get a Node that turns Ready (a ``partial_slice_hosts`` slice); None: all.
    ready_hosts: int | None = None
    #: When a VM of the pool was last removed (a shrinking operation is done no earlier).
    last_removal: float = 0.0
    generation: int = 1

    @property
    def atomic(self) -> bool:
        return self.slice_hosts > 0


@dataclass
class Cluster:
    location: str
    name: str
    zones: list[str]
    created_at: float
    #: ``releaseChannel.channel``; "" for a cluster in no channel (a static version).
    release_channel: str = "REGULAR"
    pools: dict[str, NodePool] = field(default_factory=dict)


@dataclass
class ContainerOp:
    name: str
    op_type: str
    location: str
    cluster: str
    pool: str | None
    start: float
    status: str = RUNNING
    end: float | None = None
    error: JSON | None = None
    status_message: str = ""
    #: Never DONE before this; failed if not done by ``deadline``.
    min_done: float = 0.0
    deadline: float = 0.0
    #: When to look at it again (None: only when something changes).
    due: float | None = None
    #: What a SET_NODE_POOL_SIZE asked for (per zone).
    node_count: int | None = None


@dataclass
class ComputeOp:
    name: str
    id: str
    op_type: str
    zone: str
    target_link: str
    target_id: str
    insert: float
    due: float
    request_id: str | None
    user: str
    status: str = RUNNING
    end: float | None = None
    error: list[JSON] | None = None
    http_status: int | None = None


@dataclass
class CloudState:
    project: str
    project_number: str
    clusters: dict[tuple[str, str], Cluster] = field(default_factory=dict)
    migs: dict[tuple[str, str], Mig] = field(default_factory=dict)
    vms: dict[tuple[str, str], Vm] = field(default_factory=dict)
    #: Node name -> when the Node of a VM that is gone is deleted (``GcpFaults.node_delete_seconds``).
    node_deletions: dict[str, float] = field(default_factory=dict)
    container_ops: dict[str, ContainerOp] = field(default_factory=dict)
    compute_ops: dict[str, ComputeOp] = field(default_factory=dict)
    #: compute ``requestId`` → the operation it made.
    request_ids: dict[str, str] = field(default_factory=dict)

    def cluster(self, location: str, name: str) -> Cluster | None:
        return self.clusters.get((location, name))

    def pool(self, location: str, cluster: str, name: str) -> NodePool | None:
        found = self.clusters.get((location, cluster))
        return None if found is None else found.pools.get(name)

    def mig(self, zone: str, name: str) -> Mig | None:
        return self.migs.get((zone, name))

    def pool_of(self, mig: Mig) -> NodePool | None:
        return self.pool(mig.location, mig.cluster, mig.pool)

    def pool_vms(self, pool: NodePool) -> list[Vm]:
        return [member.vm for mig in pool.migs.values() for member in mig.members.values() if member.vm is not None]

    def running_ops(self, location: str, cluster: str) -> list[ContainerOp]:
        return [op for op in self.container_ops.values()
                if op.status != DONE and op.location == location and op.cluster == cluster]
