"""What gangscale knows about each ProvisioningRequest it serves, and the one place that maps it to a phase.

The conditions gangscale owns are kept in memory (initialised from the object the first time it is seen):
gangscale is their only writer, so its memory is authoritative while it runs, and a pass never acts on a
watch event that lags behind its own last write.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gangscale.controller import conditions as C
from gangscale.controller.bookings import Booked
from gangscale.controller.record import DETAIL_KEY, POOL_DETAIL_KEY, Record, from_status
from gangscale.model.decision import Decision
from gangscale.model.gang import Gang
from gangscale.providers.base import Obtained
from gangscale.sources.provreq import ProvReq

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


@dataclass
class RequestState:
    pr: ProvReq
    conditions: dict[str, C.Condition]
    record: Record | None
    #: What was last applied (or found on the object), to skip writes that change nothing.
    applied: str = ""
    #: (status, reason) per condition type as last written, to count each outcome once.
    reported: dict[str, tuple[str, str]] = field(default_factory=dict)
    retry_at: float | None = None
    retries: int = 0
    attempts: int = 0
    deleted: bool = False
    gang: Gang | None = None
    decision: Decision | None = None
    obtained: dict[str, Obtained] = field(default_factory=dict)
    booking: Booked | None = None
    #: Booked nodes seen present at least once (a booked node that vanishes after that revokes the booking).
    booking_seen: set[str] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    events: list[tuple[str, str, str]] = field(default_factory=list)

    @classmethod
    def from_object(cls, pr: ProvReq) -> RequestState:
        conditions = {}
        for raw in pr.status.get("conditions") or []:
            cond = C.Condition.from_json(raw)
            if cond.type in C.OWNED_TYPES:
                conditions[cond.type] = cond
        state = cls(pr, conditions, from_status(pr.status))
        # Attempts go on from the recorded one after a restart (the record's number, not the token, is what a
        # reader sees; tokens stay unique without it, see ``step_token``).
        state.attempts = state.record.attempt if state.record is not None else 0
        state.applied = state.body_key()
        state.reported = {ctype: (cond.status, cond.reason) for ctype, cond in conditions.items()}
        return state

    @property
    def key(self) -> str:
        return self.pr.key

    @property
    def busy(self) -> bool:
        return self.task is not None and not self.task.done()

    def true(self, ctype: str) -> bool:
        cond = self.conditions.get(ctype)
        return cond is not None and cond.true

    def status_body(self) -> JSON:
        status: JSON = {"conditions": [self.conditions[t].to_json() for t in C.OWNED_TYPES if t in self.conditions]}
        if self.record is not None:
            details = {DETAIL_KEY: self.record.to_detail()}
            if (pool := self.record.single_pool) is not None:
                details[POOL_DETAIL_KEY] = pool
            status["provisioningClassDetails"] = details
        return status

    def body_key(self) -> str:
        return repr(self.status_body())

    def set(self, ctype: str, status: bool, reason: str, message: str, now: str) -> bool:
        return C.with_condition(self.conditions, C.Condition(
            ctype, "True" if status else "False", reason, message, observed_generation=self.pr.generation), now)

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))


def phase(state: RequestState) -> Phase:
    """The request's phase from the conditions gangscale owns and its recorded intent (Kueue's
    ``syncCheckStates`` habit: one ordered match; a terminal condition wins over everything else)."""
    match state:
        case _ if any(state.true(ctype) for ctype in C.TERMINAL_TYPES):
            return Phase.DONE
        case _ if state.true(C.PROVISIONED):
            return Phase.BOOKED
        case RequestState(record=Record()):
            return Phase.PROVISIONING
        case _:
            return Phase.PENDING


def served(pr: ProvReq, classes: tuple[str, ...], processor_instance: str) -> bool:
    """Is this PR gangscale's? Its class is served and its ``processorInstance`` (if any) is ours."""
    return pr.class_name in classes and pr.parameters.get("processorInstance", "") == processor_instance
