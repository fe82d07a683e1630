"""Waiting for long-running operations: GKE's (``operations.get``) and Compute Engine's (``zoneOperations.get``).

An operation is polled until ``status`` is ``DONE``: once at once, then every ``interval`` of clock time, growing
to ``max_interval``, and never past the caller's deadline (:class:`OperationTimeout`). A ``DONE`` operation may
carry an error (container: ``error`` and ``statusMessage``; compute: ``error.errors[]``); the caller reads it.
Polls that fail transiently (throttling, a dropped connection) are retried on the next tick; a 404 of the
operation is the caller's to judge (an operation GKE has garbage-collected).
"""

from __future__ import annotations

from typing import Any

from gangscale.clock import Clock
from gangscale.providers.gke.client import GcpError, GcpHttp
from gangscale.providers.gke.errors import TRANSIENT_HTTP

JSON = dict[str, Any]


class OperationTimeout(Exception):
    def __init__(self, operation: JSON) -> None:
        super().__init__(f"operation {operation.get('name')} not DONE by the deadline")
        self.operation = operation


class Waiter:
    def __init__(self, http: GcpHttp, clock: Clock, *, interval: float = 2.0, max_interval: float = 10.0) -> None:
        self.http, self.clock, self.interval, self.max_interval = http, clock, interval, max_interval

    def schedule(self, longest: float | None = None) -> Polls:
        """Pauses for a caller's own polling loop (a node pool's status, a resize request, VMs)."""
        return Polls(self.clock, self.interval, longest or self.max_interval)

    async def container(self, operations_path: str, op: JSON, deadline: float) -> JSON:
        """Poll a GKE operation (``operations_path`` = ``/v1/projects/P/locations/L/operations``) until DONE."""
        name = str(op.get("name", "")).rsplit("/", 1)[-1]
        return await self._until_done(op, lambda: self.http.container("GET", f"{operations_path}/{name}"), deadline)

    async def compute(self, op: JSON, deadline: float) -> JSON:
        """Poll a Compute zone operation (its ``selfLink`` names the zone) until DONE."""
        path = compute_path(str(op.get("selfLink", "")))
        return await self._until_done(op, lambda: self.http.compute("GET", path), deadline)

    async def _until_done(self, op: JSON, get: Any, deadline: float) -> JSON:
        delay, first = self.interval, True
        while op.get("status") != "DONE":
            if not first:  # the first look is at once: a fast operation is seen done without a wait
                now = self.clock.now()
                if now >= deadline:
                    raise OperationTimeout(op)
                await self.clock.sleep_until(min(deadline, now + delay))
                delay = min(self.max_interval, delay * 1.5)
            first = False
            try:
                op = await get()
            except GcpError as exc:
                if exc.http_status not in TRANSIENT_HTTP:
                    raise
        return op


class Polls:
    """Pauses between polls: ``interval`` first, growing by half each time up to ``longest``, never past the
    deadline; :meth:`pause` raises :class:`OperationTimeout` once the deadline has come."""

    def __init__(self, clock: Clock, interval: float, longest: float) -> None:
        self.clock, self.delay, self.longest = clock, interval, longest

    async def pause(self, deadline: float, what: JSON) -> None:
        now = self.clock.now()
        if now >= deadline:
            raise OperationTimeout(what)
        await self.clock.sleep_until(min(deadline, now + self.delay))
        self.delay = min(self.longest, self.delay * 1.5)


def compute_path(url: str) -> str:
    """``/projects/...`` of a Compute URL (``selfLink``, ``instanceGroupUrls[]``), to call through the configured
    endpoint rather than the host the URL names."""
    at = url.find("/projects/")
    if at < 0:
        raise ValueError(f"not a Compute resource URL: {url!r}")
    return url[at:]


def operation_error(op: JSON) -> str | None:
    """The failure a DONE container operation reports, or None: ``error`` first, then ``statusMessage``."""
    error = op.get("error")
    if isinstance(error, dict) and (error.get("message") or error.get("code")):
        return str(error.get("message") or f"error code {error.get('code')}")
    message = op.get("statusMessage")
    return str(message) if message else None


def compute_errors(op: JSON) -> list[JSON]:
    """``error.errors[]`` of a DONE compute operation (empty when it succeeded)."""
    error = op.get("error")
    if isinstance(error, dict):
        return [e for e in error.get("errors") or [] if isinstance(e, dict)]
    return []
