"""What the ``gke`` modes share: a mutating call retried while the cluster is busy, and errors with rollback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gangscale.clock import Clock
from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.gke.client import GcpError
from gangscale.providers.gke.errors import BUSY_MARKER, from_http

T = TypeVar("T")
JSON = dict[str, Any]
#: Waits between tries of a call refused because the cluster is busy or too many operations run (seconds).
BUSY_WAIT, BUSY_WAIT_MAX = 2.0, 30.0


def busy(exc: GcpError) -> bool:
    """GKE runs one operation at a time on a cluster and caps concurrent ones: such a refusal is waited out."""
    return exc.http_status == 429 or (exc.http_status in (400, 412) and BUSY_MARKER in exc.message)


async def while_busy(call: Callable[[], Awaitable[T]], clock: Clock, deadline: float, pool: str) -> T:
    """``call()``, tried again while the cluster is busy (honouring ``Retry-After``), until ``deadline``.
    Other errors propagate as :class:`GcpError`; a cluster still busy at the deadline is TRANSIENT."""
    wait = BUSY_WAIT
    while True:
        try:
            return await call()
        except GcpError as exc:
            if not busy(exc):
                raise
            now = clock.now()
            if now >= deadline:
                raise from_http(exc, pool, rolled_back=False) from exc
            await clock.sleep_until(min(deadline, now + max(wait, exc.retry_after or 0.0)))
            wait = min(BUSY_WAIT_MAX, wait * 2)


def with_rollback(error: ProviderError, rolled_back: bool) -> ProviderError:
    return ProviderError(error.error_class, error.code, error.message, pool=error.pool, retry_after=error.retry_after,
                         rolled_back=rolled_back, available=error.available)


def timed_out(pool: str, what: str) -> ProviderError:
    """An operation not done by the deadline: the cloud did not deliver in time, which the planner treats like a
    stockout of the pool (the cluster-autoscaler's ``ScaleUpTimedOut`` backs the node group off the same way)."""
    return ProviderError(ErrorClass.STOCKOUT, "DEADLINE_EXCEEDED", f"{what} was not done by the deadline", pool=pool)
