"""The fake Google Cloud's knobs (:class:`GcpFaults`), its injected HTTP errors and its request log."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class InjectedError:
    """An HTTP error answered instead of the next ``times`` requests whose method and path match.

    ``method`` is an HTTP method or ``*``; ``path`` a regular expression searched in the request path. The body is
    an AIP-193 JSON envelope (``message``, ``status`` name — derived from the HTTP status when empty — and
    ``reason``) or, with ``html=True``, an HTML page as Google's front end sends for some 5xx. ``retry_after``
    becomes a ``Retry-After`` header: seconds (a number) or an HTTP-date (a string, sent as is).
    """

    status: int
    method: str = "*"
    path: str = ".*"
    message: str = ""
    status_name: str = ""
    reason: str = ""
    retry_after: float | str | None = None
    html: bool = False
    times: int = 1

    def matches(self, method: str, path: str) -> bool:
        return (self.method == "*" or self.method.upper() == method.upper()) and re.search(self.path, path) is not None


@dataclass
class GcpFaults:
    """Run-time knobs of :class:`~gangscale.sim.gcp.server.FakeGcp`; all off by default, mutable at any time.

    Times are seconds of the injected clock. Counters (``async_quota_next``, ``lost_responses``, ``errors[].times``)
    count down as requests consume them; ``partial_gpu_grant`` is consumed by the next GPU/CPU pool create and
    ``partial_slice_hosts`` by the next multi-host TPU slice pool create.
    """

    #: ``(zone, machineType)`` → VMs that can still be created (None or a missing key: unlimited). Creating a VM
    #: takes one; deleting it gives it back.
    stock: dict[tuple[str, str], int | None] = field(default_factory=dict)
    #: region → regional ``CPUS`` quota. GKE create/setSize that would exceed it: synchronous 403; VMs created
    #: through the compute API fail individually with ``QUOTA_EXCEEDED``.
    cpu_quota: dict[str, float] = field(default_factory=dict)
    #: The next N node-pool creates create no VM and end DONE with ``[GCE_QUOTA_EXCEEDED]``.
    async_quota_next: int = 0
    #: Every mutating container call gets 400 FAILED_PRECONDITION "… is currently upgrading cluster C …".
    busy: bool = False
    #: A mutating container call on a cluster with any RUNNING operation gets 400 FAILED_PRECONDITION (without it,
    #: only a RUNNING operation on the same node pool blocks, which is always on).
    serialize_cluster_ops: bool = False
    #: RUNNING container operations per cluster above which a mutating call gets 429.
    max_concurrent_ops: int | None = None
    #: How long a container operation stays RUNNING at least.
    operation_seconds: float = 0.0
    #: How long a create/setSize that lacks VMs keeps RUNNING (retrying) before it ends DONE with an error
    #: (counted from its start; never before ``operation_seconds``).
    stockout_after: float = 0.0
    #: ``error.code`` of an operation that failed on a stockout (google.rpc code; GKE's real value is unverified).
    stockout_error_code: int = 8
    #: ``lastAttempt.errors.errors[].code`` of a VM that could not be created for lack of capacity
    #: (``ZONE_RESOURCE_POOL_EXHAUSTED`` or ``ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS``).
    stockout_gce_code: str = "ZONE_RESOURCE_POOL_EXHAUSTED"
    #: A VM is PROVISIONING, then STAGING (half way), then RUNNING this long after it was created.
    boot_seconds: float = 0.0
    #: A RUNNING VM registers its Node this long after it started RUNNING.
    register_seconds: float = 0.0
    #: Each further VM made by one create registers this much later than the one before it: the kubelets of a
    #: slice's hosts start on their own, so a multi-host slice's Nodes appear one at a time, not together.
    register_spread_seconds: float = 0.0
    #: A registered Node turns Ready this long after registration.
    ready_seconds: float = 0.0
    #: A VM being deleted (deleteInstances, resize down, setSize down) is STOPPING this long before it is gone.
    vm_delete_seconds: float = 0.0
    #: A VM's Node is deleted this long after the VM is gone. On GKE it is the cloud node lifecycle controller that
    #: deletes the Node once it sees the VM missing, so a Node outlives its VM (and the node pool delete operation)
    #: by seconds or more.
    node_delete_seconds: float = 0.0
    #: How often a MIG retries the instances it could not create yet (and resize requests try again).
    retry_seconds: float = 10.0
    #: The next stocked-out or not GPU/CPU node-pool create gets at most this many VMs, ever (its other VMs fail
    #: with a stockout and the operation ends DONE with ``[GCE_STOCKOUT]`` after ``stockout_after``). One-shot.
    partial_gpu_grant: int | None = None
    #: The next multi-host TPU slice node-pool create (one whose create is not failed by ``async_quota_next``)
    #: gets every VM as usual and its operation ends DONE with the pool RUNNING, but only this many of its VMs
    #: register a Node that turns Ready; the others' Nodes stay ``Ready=False`` (``KubeletNotReady``) for their
    #: whole life: a slice with a broken host, which GKE reports as running but which cannot serve. One-shot
    #: (used up by that create even if it then stocks out).
    partial_slice_hosts: int | None = None
    #: While true, every VM created registers a Node that stays ``Ready=False`` (``KubeletNotReady``) for its whole
    #: life (a kubelet that never becomes Ready). Decided when the VM is created: turning it off does not repair
    #: the VMs made meanwhile, and turning it on does not break VMs that already exist.
    never_ready: bool = False
    #: The next N mutating container/compute calls are applied, then the connection is closed without an answer.
    lost_responses: int = 0
    #: Errors answered instead of matching requests (see :class:`InjectedError`).
    errors: list[InjectedError] = field(default_factory=list)
    #: ``expires_in`` the metadata server reports for a token.
    token_lifetime: float = 3599.0
    #: When set, a token fetched from the metadata server is refused (401) this long after it was fetched, until
    #: it is fetched again.
    token_expires_after: float | None = None
    #: ``setSize`` on a multi-host TPU slice pool gets 400 INVALID_ARGUMENT (GKE's real behaviour is unverified).
    setsize_multihost_rejected: bool = True
    #: ``setSize`` on a ``queuedProvisioning.enabled`` pool gets 400 FAILED_PRECONDITION (such pools get nodes only
    #: through ProvisioningRequests; the real text is unverified).
    setsize_queued_rejected: bool = True
    #: A MIG resize request that could not create its VMs within this long of its creation FAILS (None: it waits
    #: in ACCEPTED for as long as it takes).
    resize_request_fail_after: float | None = None
    #: How long a compute operation stays RUNNING (its change is applied at once; GCE ends MIG operations "when
    #: the actions are scheduled").
    compute_operation_seconds: float = 0.0
    #: How long ``zoneOperations.wait`` holds a request for an operation that is not DONE (the real one, up to
    #: about 2 minutes).
    wait_seconds: float = 120.0

    def inject(self, status: int, method: str = "*", path: str = ".*", **kw: Any) -> InjectedError:
        error = InjectedError(status, method, path, **kw)
        self.errors.append(error)
        return error

    def take_error(self, method: str, path: str) -> InjectedError | None:
        for error in self.errors:
            if error.times > 0 and error.matches(method, path):
                error.times -= 1
                if error.times <= 0:
                    self.errors.remove(error)
                return error
        return None


@dataclass(eq=False)
class Hold:
    """Hold the next request whose method and path match (after letting ``skip`` matching ones through) before the
    fake does anything with it: ``held`` is set when one is held; setting ``released`` lets it go on, served when
    ``serve`` is true, else dropped unapplied (the connection is closed). Crash tests kill a process while the
    request it sent is held, so the process dies at a known point and its request never happened."""

    method: str
    path: str
    skip: int = 0
    serve: bool = False
    held: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    #: The held request, as ``METHOD path``.
    request: str = ""

    def matches(self, method: str, path: str) -> bool:
        return (self.method == "*" or self.method.upper() == method.upper()) and re.search(self.path, path) is not None


@dataclass(frozen=True)
class Call:
    """One request the fake answered: ``status`` 0 means the connection was dropped without an answer."""

    time: float
    method: str
    path: str
    query: dict[str, str]
    status: int
