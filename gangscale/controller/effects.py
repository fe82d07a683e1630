"""The controller's side effects, as coroutines that do I/O and return what happened.

Each effect runs as a background task started by the loop, with every input it needs passed in (the body to
write, the events to record, the steps to obtain). It changes no request state: the loop applies its result
when the task ends (:mod:`gangscale.controller.loop`). Status writes and events are skipped in a dry run;
provider calls never happen there (the loop starts none).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangscale.clock import Clock
from gangscale.controller.actuator import Actuator, NotLeader, ScaleUpFailed
from gangscale.controller.demand.protocol import DemandSource
from gangscale.controller.logic.record import Record, Step
from gangscale.controller.logic.request import RequestState
from gangscale.kube.errors import ApiError
from gangscale.kube.writes import EventRecorder
from gangscale.providers.base import Obtained, ProviderError

JSON = dict[str, Any]
Event = tuple[str, str, str]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Written:
    """A status write (and the events after it): ``error`` is None when it landed."""

    key: str
    body: str
    error: ApiError | None = None
    #: The object's resourceVersion after the write ("" if not known).
    version: str = ""


@dataclass(frozen=True)
class ScaledUp:
    """A scale-up: its intent could not be recorded (``intent_error``), or it obtained every unit
    (``obtained``), or it failed and everything it obtained was released (``failures``)."""

    key: str
    record: Record
    intent_body: str | None = None
    intent_error: ApiError | None = None
    #: The object's resourceVersion after the intent was written ("" if not known or not written).
    intent_version: str = ""
    obtained: Mapping[str, Obtained] | None = None
    failures: Sequence[ProviderError] = field(default_factory=tuple)


@dataclass(frozen=True)
class Released:
    key: str
    tokens: tuple[str, ...]
    nodes: tuple[str, ...]
    units: int = 0
    error: Exception | None = None


class Effects:
    def __init__(self, actuator: Actuator, recorder: EventRecorder, clock: Clock, *, dry_run: bool) -> None:
        self.actuator, self.recorder, self.clock, self.dry_run = actuator, recorder, clock, dry_run

    def _fenced(self) -> None:
        if not self.actuator.fence():
            raise NotLeader("this process does not hold the leader lease: no status write")

    async def write(self, source: DemandSource, st: RequestState, body: JSON, text: str,
                    events: Sequence[Event]) -> Written:
        """Write ``body`` (``text`` is its repr, what the request remembers as written once it landed)."""
        if self.dry_run:
            return Written(st.key, text)
        self._fenced()
        try:
            version = await source.write(st, body)
        except ApiError as exc:
            return Written(st.key, text, exc)
        await self.record(st.request.obj, events)
        return Written(st.key, text, version=version)

    async def record(self, obj: JSON, events: Sequence[Event]) -> None:
        if self.dry_run:
            return
        for event_type, reason, message in events:
            # Asked before each event, not once for all: each is a write of its own (chaos seed 27071: the second
            # of two events left after the lease had passed to another replica).
            if not self.actuator.fence():
                return
            await self.recorder.record(obj, event_type, reason, message, self.clock.now())

    async def scale_up(self, source: DemandSource, st: RequestState, record: Record, intent: tuple[JSON, str] | None,
                       events: Sequence[Event]) -> ScaledUp:
        """Record the intent (unless resuming one already recorded), then obtain every unit or none."""
        version = ""
        if intent is not None:
            body, key = intent
            self._fenced()
            try:
                version = await source.write(st, body)
            except ApiError as exc:
                return ScaledUp(st.key, record, key, exc)
            await self.record(st.request.obj, events)
        try:
            got = await self.actuator.obtain_all(record.steps, record.deadline)
        except ScaleUpFailed as exc:
            return ScaledUp(st.key, record, intent[1] if intent else None, failures=exc.failures,
                            intent_version=version)
        return ScaledUp(st.key, record, intent[1] if intent else None, obtained=got, intent_version=version)

    async def release(self, key: str, steps: Sequence[Step], nodes: Sequence[str], why: str) -> Released:
        log.info("releasing the scale-up of %s: %s", key, why)
        tokens = tuple(step.token for step in steps)
        try:
            units = await self.actuator.release_steps(steps)
        except Exception as exc:
            log.warning("could not release the scale-up of %s: %s", key, exc)
            return Released(key, tokens, tuple(nodes), error=exc)
        log.info("released %d unit(s) of %s", units, key)
        return Released(key, tokens, tuple(nodes), units)
