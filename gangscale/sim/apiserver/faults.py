"""Test knobs: injected failures and latency, watch stream drops, forced 410s, and a request log.

A :class:`Fault` matches requests by verb (the RBAC verb: get, list, watch, create, update, patch,
delete, deletecollection; ``*`` for any), resource (plural, or ``group/plural``; ``*``), name (a glob)
and subresource. The first matching fault with uses left acts:
- ``status``: answer with that code (and ``Retry-After`` when ``retry_after`` is set) instead of
  serving; the body is the ``kind: Status`` the real server sends for that code.
- ``latency``: wait that many seconds before serving (combined with ``status`` or alone).
- ``drop_after_events`` (watch): end the stream after N events were sent; ``abort=True`` cuts the TCP
  connection instead of closing the chunked response cleanly.
- ``gone`` (watch): answer the watch with an ``ERROR`` event, code 410, reason ``Expired``.
``times`` limits how often a fault acts (``None``: every time).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import datetime

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
    status: int | None = None
    message: str | None = None
    retry_after: int | None = None
    latency: float = 0.0
    drop_after_events: int | None = None
    abort: bool = False
    gone: bool = False
    times: int | None = 1
    hits: int = 0

    def matches(self, verb: str, group: str, resource: str, namespace: str, name: str,
                subresource: str | None) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.verb not in ("*", verb):
            return False
        if self.resource != "*" and self.resource not in (resource, f"{group}/{resource}"):
            return False
        if self.namespace not in ("*", namespace):
            return False
        if self.subresource not in ("*", subresource):
            return False
        return fnmatch.fnmatchcase(name or "", self.name)

    @property
    def reason(self) -> str:
        return REASONS.get(self.status or 500, "InternalError")


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
class Faults:
    faults: list[Fault] = field(default_factory=list)
    # The whole server answers 503 while this is set, as an API server that is down behind its LB.
    down: bool = False

    def inject(self, fault: Fault | None = None, /, **kw: object) -> Fault:
        f = fault or Fault(**kw)  # type: ignore[arg-type]
        self.faults.append(f)
        return f

    def clear(self) -> None:
        self.faults.clear()
        self.down = False

    def take(self, verb: str, group: str, resource: str, namespace: str, name: str,
             subresource: str | None) -> Fault | None:
        for f in self.faults:
            if f.matches(verb, group, resource, namespace, name, subresource):
                f.hits += 1
                return f
        return None
