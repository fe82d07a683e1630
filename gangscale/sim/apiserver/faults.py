"""Test knobs: injected failures and latency, held requests, watch stream drops, forced 410s, a request log.

A :class:`Fault` matches requests by verb (the RBAC verb: get, list, watch, create, update, patch,
delete, deletecollection; ``*`` for any), resource (plural, or ``group/plural``; ``*``), name (a glob),
subresource, the client's ``User-Agent`` (a glob) and, with ``body_contains``, a substring of the raw request
body. The first matching fault that is not used up acts; the first ``after`` requests it matches are let
through untouched (and then no other fault is consulted):

- ``status``: answer with that code (and ``Retry-After`` when ``retry_after`` is set) instead of
  serving; the body is the ``kind: Status`` the real server sends for that code.
- ``latency``: wait that many seconds before serving (combined with ``status`` or alone).
- ``hold``: keep the request waiting inside the server until :meth:`Faults.release`; then it is either
  served or answered 503 without touching storage. A crash harness holds the request a process makes right
  after the moment it wants to kill the process at, kills it, and releases the hold unserved: the process
  died exactly between two API calls.
- ``drop_after_events`` (watch): end the stream after N events were sent; ``abort=True`` cuts the TCP
  connection instead of closing the chunked response cleanly.
- ``gone`` (watch): answer the watch with an ``ERROR`` event, code 410, reason ``Expired``.

``times`` limits how often a fault acts (``None``: every time). Faults can be set in-process
(``EmbeddedAPIServer.inject``) or, when the server runs with ``control=True`` (``gangscale sim apiserver
--control``), over HTTP under ``/_sim/`` (see :mod:`gangscale.sim.apiserver.control`).
"""

from __future__ import annotations

import asyncio
import fnmatch
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
    503: "ServiceUnavailable", 504: "Timeout",
}


@dataclass
class Fault:
    verb: str = "*"
    resource: str = "*"
    name: str = "*"
    subresource: str | None = "*"
    namespace: str = "*"
    user_agent: str = "*"
    body_contains: str | None = None
    status: int | None = None
    message: str | None = None
    retry_after: int | None = None
    latency: float = 0.0
    hold: bool = False
    drop_after_events: int | None = None
    abort: bool = False
    gone: bool = False
    times: int | None = 1
    after: int = 0
    #: Requests matched (including the ``after`` ones let through) and requests acted on.
    hits: int = 0
    acted: int = 0

    @property
    def used_up(self) -> bool:
        return self.times is not None and self.acted >= self.times

    def matches(self, verb: str, group: str, resource: str, namespace: str, name: str,
                subresource: str | None, user_agent: str = "", body: bytes = b"") -> bool:
        if self.verb not in ("*", verb):
            return False
        if self.resource != "*" and self.resource not in (resource, f"{group}/{resource}"):
            return False
        if self.namespace not in ("*", namespace):
            return False
        if self.subresource not in ("*", subresource):
            return False
        if self.user_agent != "*" and not fnmatch.fnmatchcase(user_agent, self.user_agent):
            return False
        if self.body_contains is not None and self.body_contains.encode() not in body:
            return False
        return fnmatch.fnmatchcase(name or "", self.name)

    @property
    def reason(self) -> str:
        return REASONS.get(self.status or 500, "InternalError")

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        """A fault from its JSON form; unknown keys and the counters are refused (ValueError)."""
        known = {f.name for f in fields(cls)} - {"hits", "acted"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**data)


@dataclass(frozen=True)
class LoggedRequest:
    time: datetime
    method: str
    path: str
    query: dict[str, str]
    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    subresource: str | None
    content_type: str
    user_agent: str
    status: int = 0


@dataclass
class Held:
    """A request kept waiting by a ``hold`` fault: what it is, and how it will be let go."""

    fault: Fault
    description: str
    released: asyncio.Event = field(default_factory=asyncio.Event)
    serve: bool = False


@dataclass
class Faults:
    faults: list[Fault] = field(default_factory=list)
    # The whole server answers 503 while this is set, as an API server that is down behind its LB.
    down: bool = False
    held: list[Held] = field(default_factory=list)

    def inject(self, fault: Fault | None = None, /, **kw: object) -> Fault:
        f = fault or Fault(**kw)  # type: ignore[arg-type]
        self.faults.append(f)
        return f

    def clear(self) -> None:
        self.faults.clear()
        self.down = False

    def take(self, verb: str, group: str, resource: str, namespace: str, name: str,
             subresource: str | None, user_agent: str = "", body: bytes = b"") -> Fault | None:
        for f in self.faults:
            if f.used_up or not f.matches(verb, group, resource, namespace, name, subresource, user_agent, body):
                continue
            f.hits += 1
            if f.hits <= f.after:
                return None
            f.acted += 1
            return f
        return None

    async def hold(self, fault: Fault, description: str) -> bool:
        """Wait until released; True if the request is then to be served."""
        held = Held(fault, description)
        self.held.append(held)
        try:
            await held.released.wait()
        finally:
            if held in self.held:
                self.held.remove(held)
        return held.serve

    def release(self, *, serve: bool) -> int:
        """Let every held request go (served, or answered 503 unserved); returns how many."""
        held, self.held = self.held, []
        for h in held:
            h.serve = serve
            h.released.set()
        return len(held)
