"""The fake EC2's knobs (:class:`Ec2Faults`), its injected errors and holds, and the record of its exchanges.

Throttling: EC2 answers ``RequestLimitExceeded`` "Request limit exceeded." with HTTP 503 (botocore
``data/_retry.json`` retries it as throttling; EC2 API reference, "Request throttling"). botocore's standard retry
mode honours ``x-amz-retry-after`` (milliseconds) — ``botocore/retries/standard.py`` — so a throttle may carry it.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

#: The actions that change something: their answers can be lost after they were applied.
MUTATING = frozenset({"CreateFleet", "TerminateInstances"})


@dataclass
class InjectedError:
    """An error answered instead of the next ``times`` calls whose action matches ``action`` (a regular
    expression matched against the whole action name, or ``*``). The call is not applied."""

    code: str
    status: int = 400
    action: str = "*"
    message: str = ""
    retry_after_ms: int | None = None
    times: int = 1

    def matches(self, action: str) -> bool:
        return self.action == "*" or re.fullmatch(self.action, action) is not None


@dataclass
class Ec2Faults:
    """Run-time knobs of :class:`~gangscale.sim.aws.server.FakeEc2`; times are seconds of the injected clock."""

    #: An instance is ``pending`` this long, then ``running``.
    boot_seconds: float = 0.0
    #: A running instance's kubelet registers its Node this long after the instance runs.
    register_seconds: float = 0.0
    #: A registered Node turns Ready this long after registration.
    ready_seconds: float = 0.0
    #: An instance is ``shutting-down`` this long, then ``terminated`` (its Node deleted then).
    shutdown_seconds: float = 0.0
    #: A terminated instance is still listed by DescribeInstances this long ("approximately one hour").
    terminated_visible_seconds: float = 3600.0
    #: A spot instance's interruption notice comes this long before it is interrupted (EC2: two minutes).
    spot_notice_seconds: float = 120.0
    #: The next N calls (of ``throttle_action``) get 503 ``RequestLimitExceeded`` and are not applied.
    throttle: int = 0
    throttle_action: str = "*"
    #: ``x-amz-retry-after`` (milliseconds) sent with a throttle; None: no header.
    throttle_retry_after_ms: int | None = None
    #: Errors answered instead of matching calls (:class:`InjectedError`).
    errors: list[InjectedError] = field(default_factory=list)
    #: The next N mutating calls (CreateFleet, TerminateInstances) of ``lost_action`` are applied, then their
    #: connection is closed without an answer.
    lost_answers: int = 0
    lost_action: str = "*"
    #: Every answer is held this long (clock time) before it is sent: a slow EC2.
    answer_delay: float = 0.0

    def fail(self, code: str, status: int = 400, action: str = "*", **kw: Any) -> InjectedError:
        error = InjectedError(code, status, action, **kw)
        self.errors.append(error)
        return error

    def take_error(self, action: str) -> InjectedError | None:
        if self.throttle > 0 and (self.throttle_action == "*" or re.fullmatch(self.throttle_action, action)):
            self.throttle -= 1
            return InjectedError("RequestLimitExceeded", 503, message="Request limit exceeded.",
                                 retry_after_ms=self.throttle_retry_after_ms)
        for error in self.errors:
            if error.times > 0 and error.matches(action):
                error.times -= 1
                if error.times <= 0:
                    self.errors.remove(error)
                return error
        return None

    def take_lost(self, action: str) -> bool:
        if action in MUTATING and self.lost_answers > 0 and (
                self.lost_action == "*" or re.fullmatch(self.lost_action, action)):
            self.lost_answers -= 1
            return True
        return False


@dataclass(eq=False)
class Hold:
    """Hold the next call of ``action`` (a regular expression; after letting ``skip`` matching ones through)
    before the fake does anything with it: ``held`` is set when one is held; setting ``released`` lets it go on,
    served when ``serve`` is true, else dropped unapplied (the connection is closed)."""

    action: str
    skip: int = 0
    serve: bool = False
    held: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def matches(self, action: str) -> bool:
        return self.action == "*" or re.fullmatch(self.action, action) is not None


@dataclass(frozen=True)
class Exchange:
    """One call as the fake saw it: ``status`` 0 means the connection was closed without an answer (lost answer or
    dropped call). ``params`` is the parsed input (None when the form could not be read), ``answer`` the output
    structure (None for errors), ``body`` the XML sent (or that would have been sent)."""

    time: float
    action: str
    form: dict[str, str]
    params: dict[str, Any] | None
    status: int
    answer: dict[str, Any] | None
    body: str
    user_agent: str
