"""How the simulated cloud fails: its test knobs (:class:`PoolFaults`), the errors it raises, its call log.

Kept apart from :mod:`gangscale.providers.simulated` so that the provider module reads as the cloud's
behaviour and this one as the ways a test can make that cloud misbehave and what the caller then sees.
Kubernetes API failures are classified by their ``status`` (as ``gangscale.kube.errors.ApiError`` has it):
throttling, server errors and lost connections are TRANSIENT, anything else PERMANENT.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gangscale.clock import Clock
from gangscale.providers.base import ErrorClass, ProviderError

OBTAIN = "obtain"
RELEASE = "release"

#: ``obtain`` created the nodes of new units.
CREATED = "created"
#: ``obtain`` found the token's units already there and created nothing.
REUSED = "reused"
#: ``release`` deleted (or found already gone) every node of the units.
RELEASED = "released"
#: GKE's Spot VM termination notice: "Spot VMs terminate 30 seconds after receiving a termination notice" (GKE's
#: "Spot VMs" concepts page); the default ``noticeSeconds`` of a reclaim.
SPOT_NOTICE_SECONDS = 30.0


def _unheard() -> None:
    """No reclaim loop listens yet (a PoolFaults made outside a provider)."""
#: The call raised a :class:`~gangscale.providers.base.ProviderError`; ``code`` says which.
FAILED = "failed"


@dataclass
class PoolFaults:
    """Misbehaviour of one pool's simulated cloud, set by tests at run time (all off by default).

    Counters (``timeouts``, ``transient_errors``) count down as calls consume them; ``partial_grant`` is
    one-shot. The other knobs stay until a test turns them off.

    Reclaims (spot pools only, :meth:`reclaim` and :meth:`set_reclaim_rate`) are not tied to a call: the
    provider's reclaim loop (``gangscale.providers.simreclaims.Reclaims``) acts on them as soon as they change, so
    they are changed through those methods, which wake it.
    """

    #: Every new obtain fails with STOCKOUT (``GCE_STOCKOUT``), creating nothing.
    stockout: bool = False
    #: Every new obtain fails with QUOTA (``QUOTA_EXCEEDED``), creating nothing.
    quota: bool = False
    #: The next new obtain creates this many units' nodes, runs out of stock, deletes exactly what it
    #: created and fails with STOCKOUT (``rolled_back=True``).
    partial_grant: int | None = None
    #: Nodes created while this is set never turn Ready (nor after a restart while it is still set).
    never_ready: bool = False
    #: The next N obtains do their work and then fail with TRANSIENT ``DEADLINE_EXCEEDED`` and
    #: ``rolled_back=False``: a response lost on the way back. Retrying with the same token finds the units.
    timeouts: int = 0
    #: The next N obtain or release calls fail with TRANSIENT ``UNAVAILABLE`` before doing anything.
    transient_errors: int = 0
    #: Clock seconds every obtain and release waits before it does anything.
    call_latency: float = 0.0
    #: The next new obtain makes every unit but answers with only this many of them: a cloud (or provider)
    #: whose answer lost units. The caller must not take the short answer for the whole (one-shot).
    short_answer: int | None = None
    #: Nodes (by name) whose kubelet has stopped: it renews no Lease and posts no status (a kubelet that died, a
    #: node cut off from the API server), so the node lifecycle controller marks the node ``Unknown`` once its
    #: grace period has passed. Taking a name out resumes the heartbeats (and the kubelet posts its status again).
    heartbeat_stopped: set[str] = field(default_factory=set)
    #: The pool is spot capacity, the only kind the cloud reclaims (set by the provider from ``capacity_type``).
    spot: bool = False
    #: Spot reclaims: every Ready node is reclaimed at this rate per node-hour, independently (a Poisson process on
    #: the provider's clock, drawn from ``reclaim_seed``); 0: none.
    reclaim_per_node_hour: float = 0.0
    #: Clock seconds from a reclaim's notice to the end of the VM (its Node deleted).
    reclaim_notice_seconds: float = SPOT_NOTICE_SECONDS
    #: Seeds the pool's reclaim draws (which node, when), so that a run is reproducible on a manual clock.
    reclaim_seed: int = 0
    #: One-shot reclaims still to hand out: that many Ready nodes get their notice at once (fewer Ready: the next
    #: ones to turn Ready). Set through :meth:`reclaim`.
    reclaim_nodes: int = 0
    #: Wakes the provider's reclaim loop (set by the provider).
    changed: Callable[[], None] = field(default=_unheard, repr=False, compare=False)

    def reclaim(self, nodes: int = 1) -> None:
        """Reclaim ``nodes`` Ready nodes of this spot pool now (chosen with the pool's seeded generator), each with a
        notice of ``reclaim_notice_seconds``: the deterministic form of :attr:`reclaim_per_node_hour`."""
        self._require_spot()
        if nodes < 0:
            raise ValueError(f"cannot reclaim {nodes} nodes")
        self.reclaim_nodes += nodes
        self.changed()

    def set_reclaim_rate(self, per_node_hour: float, notice_seconds: float | None = None) -> None:
        """Reclaim every Ready node at ``per_node_hour`` from now on (0: stop), with this notice (None: as it was)."""
        if per_node_hour > 0:
            self._require_spot()
        if per_node_hour < 0 or (notice_seconds is not None and notice_seconds < 0):
            raise ValueError(f"a reclaim rate and notice must not be negative, got {per_node_hour}, {notice_seconds}")
        self.reclaim_per_node_hour = per_node_hour
        if notice_seconds is not None:
            self.reclaim_notice_seconds = notice_seconds
        self.changed()

    def _require_spot(self) -> None:
        if not self.spot:
            raise ValueError("only spot capacity is reclaimed: this pool's capacityType is not spot")

    def clear(self) -> None:
        """Turn every knob off (reclaims already noticed still end their VMs)."""
        self.stockout = self.quota = self.never_ready = False
        self.partial_grant = self.short_answer = None
        self.timeouts = self.transient_errors = 0
        self.call_latency = 0.0
        self.heartbeat_stopped.clear()
        self.reclaim_per_node_hour, self.reclaim_nodes = 0.0, 0
        self.changed()


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """One obtain or release as the simulated cloud saw it, for assertions such as "never scaled twice"."""

    operation: str
    pool: str
    #: Units asked for (obtain) or named (release).
    units: int
    token: str
    #: Clock time the call started.
    at: float
    #: :data:`CREATED`, :data:`REUSED`, :data:`RELEASED` or :data:`FAILED`.
    outcome: str
    #: The ProviderError code when the call failed, else "".
    code: str = ""
    error_class: ErrorClass | None = None
    #: The units the call handed out or released (on a lost response: the units it did create).
    unit_ids: tuple[str, ...] = ()
    #: Node objects this call created (including any it then rolled back) and deleted.
    nodes_created: int = 0
    nodes_deleted: int = 0

    @property
    def ok(self) -> bool:
        return self.outcome != FAILED


@dataclass
class CallTrace:
    """The call-log entry being filled in while a call runs."""

    operation: str
    pool: str
    units: int
    token: str
    at: float
    outcome: str = ""
    unit_ids: tuple[str, ...] = ()
    nodes_created: int = 0
    nodes_deleted: int = 0

    def finish(self, error: ProviderError | None = None) -> ProviderCall:
        return ProviderCall(self.operation, self.pool, self.units, self.token, self.at,
                            FAILED if error else self.outcome, error.code if error else "",
                            error.error_class if error else None, self.unit_ids, self.nodes_created,
                            self.nodes_deleted)


#: What a caller is told to wait before retrying after an ``UNAVAILABLE``.
TRANSIENT_RETRY_AFTER = 1.0


async def gate(clock: Clock, faults: PoolFaults, pool: str, deadline: float | None) -> None:
    """What happens before a call does anything: its latency, then maybe a transient error."""
    latency = faults.call_latency
    if latency > 0:
        if deadline is not None and clock.now() + latency > deadline:
            await clock.sleep_until(deadline)
            raise ProviderError(ErrorClass.TRANSIENT, "DEADLINE_EXCEEDED",
                                f"the call takes {latency:g}s and its deadline passed first (simulated)", pool=pool)
        await clock.sleep(latency)
    if faults.transient_errors > 0:
        faults.transient_errors -= 1
        raise ProviderError(ErrorClass.TRANSIENT, "UNAVAILABLE", "the service is unavailable (simulated)",
                            pool=pool, retry_after=TRANSIENT_RETRY_AFTER)


def stockout(pool: str, wanted: int, available: int, why: str = "") -> ProviderError:
    return ProviderError(ErrorClass.STOCKOUT, "GCE_STOCKOUT",
                         f"pool {pool} is out of stock: wanted {wanted} unit(s), {available} available{why}",
                         pool=pool, available=available)


def quota_exceeded(pool: str) -> ProviderError:
    return ProviderError(ErrorClass.QUOTA, "QUOTA_EXCEEDED", f"quota exceeded for pool {pool} (simulated)", pool=pool)


def lost_response(pool: str) -> ProviderError:
    return ProviderError(ErrorClass.TRANSIENT, "DEADLINE_EXCEEDED",
                         "the response was lost; the operation may have completed (simulated)", pool=pool,
                         rolled_back=False)


def with_rollback(error: ProviderError, rolled_back: bool) -> ProviderError:
    return ProviderError(error.error_class, error.code, error.message, pool=error.pool,
                         retry_after=error.retry_after, rolled_back=rolled_back, available=error.available)


def http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def api_error(pool: str, doing: str, exc: BaseException) -> ProviderError:
    """A failure while talking to the Kubernetes API, in the provider taxonomy; already a ProviderError: as is."""
    if isinstance(exc, ProviderError):
        return exc
    status = http_status(exc)
    if status is None:
        return ProviderError(ErrorClass.PERMANENT, "INTERNAL", f"{doing}: {type(exc).__name__}: {exc}", pool=pool)
    retry_after = getattr(exc, "retry_after", None)
    retry_after = float(retry_after) if isinstance(retry_after, int | float) else None
    if status in (0, 429) or status >= 500:
        return ProviderError(ErrorClass.TRANSIENT, "KUBE_API_UNAVAILABLE", f"{doing}: {exc}", pool=pool,
                             retry_after=retry_after)
    return ProviderError(ErrorClass.PERMANENT, "KUBE_API_ERROR", f"{doing}: {exc}", pool=pool)
