"""What the ``gke`` modes share: a mutating call retried while the cluster is busy, and errors with rollback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gangscale.clock import Clock
from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.gke.client import GcpError
from gangscale.providers.gke.errors import BUSY_MARKER, from_http
from gangscale.retry import GKE_BUSY, retrying

T = TypeVar("T")
JSON = dict[str, Any]


def busy(exc: GcpError) -> bool:
    """GKE runs one operation at a time on a cluster and caps concurrent ones: such a refusal is waited out."""
    return exc.http_status == 429 or (exc.http_status in (400, 412) and BUSY_MARKER in exc.message)


async def while_busy(call: Callable[[], Awaitable[T]], clock: Clock, deadline: float, pool: str) -> T:
    """``call()``, tried again while the cluster is busy (``GKE_BUSY`` of :mod:`gangscale.retry`, honouring
    ``Retry-After``), until ``deadline``. Other errors propagate as :class:`GcpError`; a cluster still busy at the
    deadline is TRANSIENT."""
    async def attempt() -> T:
        try:
            return await call()
        except GcpError as exc:
            if busy(exc) and clock.now() >= deadline:
                raise from_http(exc, pool, rolled_back=False) from exc
            raise

    async def sleep(delay: float) -> None:
        await clock.sleep_until(min(deadline, clock.now() + delay))

    return await retrying(attempt, GKE_BUSY, sleep, retryable=lambda exc: isinstance(exc, GcpError) and busy(exc))


def with_rollback(error: ProviderError, rolled_back: bool) -> ProviderError:
    return ProviderError(error.error_class, error.code, error.message, pool=error.pool, retry_after=error.retry_after,
                         rolled_back=rolled_back, available=error.available)


def timed_out(pool: str, what: str) -> ProviderError:
    """An operation not done by the deadline: the cloud did not deliver in time, which the planner treats like a
    stockout of the pool (the cluster-autoscaler's ``ScaleUpTimedOut`` backs the node group off the same way)."""
    return ProviderError(ErrorClass.STOCKOUT, "DEADLINE_EXCEEDED", f"{what} was not done by the deadline", pool=pool)
