"""A request for capacity, whatever source it comes from, and the state the loop owns for it.

A :class:`Request` is what a demand source says about one gang: its identity and the knobs its life depends on
(a ProvisioningRequest's class and parameters, a Ray gang's cluster). A source builds it from its objects and
replaces it when they change; it is immutable.

A :class:`RequestState` is what gangscale itself knows and decides about the request: the conditions it owns,
the recorded scale-up intent, what the provider obtained, the booking. It is owned by the loop
(:mod:`gangscale.controller.loop`): only the loop changes it, in its passes and when it applies the result of a
background task. :func:`phase` maps it to a phase with one ordered ``match`` (Kueue's ``syncCheckStates`` habit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic import record as rec
from gangscale.controller.logic.bookings import Booked
from gangscale.controller.logic.record import Record
from gangscale.model.decision import Decision
from gangscale.model.gang import Gang
from gangscale.providers.base import Obtained

JSON = dict[str, Any]


class Phase(StrEnum):
    #: Waiting to be planned (new, or retrying after CapacityIsNotFound).
    PENDING = "Pending"
    #: A scale-up is recorded: units are being obtained or their nodes are coming up.
    PROVISIONING = "Provisioning"
    #: Provisioned=True: the capacity is booked until consumed or the TTL passes.
    BOOKED = "Booked"
    #: Failed, BookingExpired or CapacityRevoked: nothing more is written or booked.
    DONE = "Done"


@dataclass(frozen=True, slots=True)
class Request:
    """One request as its source describes it."""

    #: Unique among every source's requests: ``namespace/name`` (ProvisioningRequest),
    #: ``namespace/cluster/gang`` (Ray gang).
    key: str
    #: Stable and unique per request: the stem of its provider tokens.
    uid: str
    #: Which source owns it (``DemandSource.name``).
    source: str
    #: The class the metrics and plans name it by.
    class_name: str
    #: The object its Events are about (a ProvisioningRequest, a RayCluster).
    obj: JSON
    #: Seconds since the epoch.
    created: float
    generation: int = 1
    #: The object's resourceVersion now (tokens hash it, see ``record.step_token``).
    version: str = ""
    #: Pods of the gang: once that many consumer pods are bound, the booking is consumed.
    pods: int = 0
    #: False for the check-capacity classes: existing capacity only, no pool is ever grown.
    may_scale: bool = True
    #: Seconds capacity stays booked (None: the controller's ``--booking-ttl``).
    booking_ttl: float | None = None
    #: Report ``Provisioned=True`` when the provider call returns, as upstream does (not when nodes are Ready).
    provisioned_when_requested: bool = False
    #: Fail instead of retrying when the capacity is not found.
    no_retry: bool = False
    #: Fail with ``Expired`` when not provisioned within ``--expiry`` of creation.
    expires: bool = True
    #: Delete the object ``--terminal-ttl`` after its outcome (the cluster-autoscaler's garbage collection).
    deletable: bool = False
    #: Drop the request from memory once it is done and its last write landed (a Ray gang: its life is over,
    #: its annotation removed). Otherwise it is kept until its object goes.
    forget_when_done: bool = False
    #: Put in front of every Event message about it (a Ray gang says which gang of its cluster).
    event_prefix: str = ""
    #: The gang the request is one attempt of, across requests ("" if unknown): a ProvisioningRequest of a Kueue
    #: Workload is one attempt of that Workload's gang, and Kueue makes the next attempt's request after a failure.
    gang: str = ""
    #: Parameters not used as given (name, value, what is used instead): told once in an Event.
    problems: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace", ""))

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name", ""))


@dataclass(eq=False)
class RequestState:
    request: Request
    conditions: dict[str, C.Condition] = field(default_factory=dict)
    record: Record | None = None
    #: What was last written (or found on the object), to skip writes that change nothing.
    written: str = ""
    #: (status, reason) per condition type as last written, to count each outcome once.
    reported: dict[str, tuple[str, str]] = field(default_factory=dict)
    retry_at: float | None = None
    retries: int = 0
    attempts: int = 0
    gang: Gang | None = None
    decision: Decision | None = None
    obtained: dict[str, Obtained] = field(default_factory=dict)
    booking: Booked | None = None
    #: Booked nodes seen present at least once (a booked node that vanishes after that revokes the booking).
    booking_seen: set[str] = field(default_factory=set)
    #: Nodes of the scale-up or the booking seen Ready by this process: a node that then reports ``Ready=False``
    #: lost its readiness (one that never was Ready is still coming up).
    ready_seen: set[str] = field(default_factory=set)
    #: When the first booked node that is still unready lost its readiness (None: every booked node is Ready).
    unready_since: float | None = None
    #: Nodes of the request's running gang already reported as being reclaimed (one Event each; kept in memory, so
    #: a restart may tell one again).
    reclaims_told: set[str] = field(default_factory=set)
    #: Passes in a row in which a step of gangscale raised on this request, and when it is tried again
    #: (:mod:`~gangscale.controller.logic.isolation`).
    failures: int = 0
    failing_until: float | None = None
    #: Events to record with the next write: (type, reason, message).
    events: list[tuple[str, str, str]] = field(default_factory=list)
    #: The background task working on the request ("scale-up", "release", "write"), if any: the loop does not
    #: move a request on while its task runs, and applies the task's result when it ends.
    task: str | None = None
    #: The source's object is gone: nothing is written any more; units still coming up are released.
    deleted: bool = False
    #: The object's resourceVersion as last known (its watch, or the answer to gangscale's own write): a status write
    #: is applied only to that version of the object, so it never lands on another object of the same name.
    version: str = ""

    def __post_init__(self) -> None:
        self.version = self.version or self.request.version

    @property
    def key(self) -> str:
        return self.request.key

    @property
    def busy(self) -> bool:
        return self.task is not None

    @property
    def obtaining(self) -> bool:
        """A scale-up task (intent, provider calls) is in flight: its result, applied by the loop, owns the units
        it obtains. A status write in flight owns nothing."""
        return self.task == "scale-up"

    def true(self, ctype: str) -> bool:
        cond = self.conditions.get(ctype)
        return cond is not None and cond.true

    def set(self, ctype: str, status: bool, reason: str, message: str, now: str) -> bool:
        return C.with_condition(self.conditions, C.Condition(
            ctype, "True" if status else "False", reason, message, observed_generation=self.request.generation), now)

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, self.request.event_prefix + message))

    def owned_conditions(self) -> list[JSON]:
        return [self.conditions[t].to_json() for t in C.OWNED_TYPES if t in self.conditions]


def phase(state: RequestState) -> Phase:
    """The request's phase from the conditions gangscale owns and its recorded intent: one ordered match, and a
    terminal condition wins over everything else."""
    match state:
        case _ if any(state.true(ctype) for ctype in C.TERMINAL_TYPES):
            return Phase.DONE
        case _ if state.true(C.PROVISIONED):
            return Phase.BOOKED
        case RequestState(record=Record(phase=rec.RELEASING)):
            return Phase.PENDING  # its units are being handed back: planned again once they are gone
        case RequestState(record=Record()):
            return Phase.PROVISIONING
        case _:
            return Phase.PENDING


def owned_from(raw_conditions: list[JSON] | None) -> dict[str, C.Condition]:
    """The conditions gangscale owns, from an object's ``status.conditions``."""
    out = {}
    for raw in raw_conditions or []:
        cond = C.Condition.from_json(raw)
        if cond.type in C.OWNED_TYPES:
            out[cond.type] = cond
    return out
