"""Obtain every unit of a plan or none (DESIGN decision 4), through the provider, under recorded tokens.

Steps in different pools run concurrently. A transient failure whose outcome is unknown is retried with the
*same* token (the provider then returns the units it may already have created); any other failure, or
transient failures beyond ``attempts``, fails the scale-up, and every unit obtained by any step of it is
released before :class:`ScaleUpFailed` is raised. What a successful call returns is checked too
(:mod:`verify`): fewer units than asked for, or units that are not whole, fail the step
(``INCOMPLETE_RESULT``) exactly like an error. Calls are timed and their errors counted by class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from gangscale.clock import Clock
from gangscale.controller.logic.record import Step
from gangscale.controller.logic.verify import step_problem
from gangscale.model.nodepool import NodePool
from gangscale.observe.metrics import Metrics
from gangscale.providers.base import ErrorClass, NodePoolProvider, Obtained, ProviderError, transient
from gangscale.retry import PROVIDER_CALL, retrying

log = logging.getLogger(__name__)
T = TypeVar("T")


class NotLeader(Exception):
    """The lease is not (or no longer) held: no provider call or status write may be made (fencing)."""


def always() -> bool:
    return True


class ScaleUpFailed(Exception):
    def __init__(self, failures: Sequence[ProviderError]) -> None:
        super().__init__("; ".join(str(f) for f in failures))
        self.failures = tuple(failures)


class Actuator:
    def __init__(self, provider: NodePoolProvider, clock: Clock, metrics: Metrics, pools: Mapping[str, NodePool], *,
                 attempts: int = 5, fence: Callable[[], bool] = always) -> None:
        self.provider, self.clock, self.metrics, self.attempts = provider, clock, metrics, attempts
        #: Whether this process may act now (it holds the leader lease): checked before every mutating call.
        self.fence = fence
        self.pools = pools
        #: Units released since the pass last took them (:meth:`take_released`): the pass enters them in its
        #: ledger, where they stay until the view has caught up with their deletion.
        self._released: list[str] = []

    def _fenced(self) -> None:
        if not self.fence():
            raise NotLeader("this process does not hold the leader lease: no provider call")

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        started = time.perf_counter()  # call latency is a real-time measurement, not a planning input
        error: str | None = None
        try:
            return await call
        except ProviderError as exc:
            error = exc.error_class.value
            raise
        except Exception:
            error = "unexpected"
            raise
        finally:
            self.metrics.provider_call(self.provider.name, operation, time.perf_counter() - started, error)

    async def _retried(self, operation: str, call: Callable[[], Awaitable[T]], what: str, *, fenced: bool = True,
                       attempts: int | None = None) -> T:
        """``call()``, tried again with the same arguments while it fails transiently (the ``PROVIDER_CALL`` policy of
        :mod:`gangscale.retry`: a growing, jittered wait that honours the cloud's Retry-After), up to ``attempts``
        tries (``self.attempts``; 0: until it answers). A mutating call is fenced before every try."""
        def attempt() -> Awaitable[T]:
            if fenced:
                self._fenced()
            return self._timed(operation, call())

        def waiting(exc: Exception, delay: float) -> None:
            log.info("%s failed transiently (%s); retrying in %.1fs", what, exc, delay)

        return await retrying(attempt, PROVIDER_CALL, self.clock.sleep, retryable=transient,
                              attempts=self.attempts if attempts is None else attempts, on_retry=waiting)

    async def obtain_step(self, step: Step, deadline: float) -> Obtained:
        async def call() -> Obtained:
            got = await self.provider.obtain(step.pool, step.units, token=step.token, deadline=deadline)
            problem = step_problem(step, got, self.pools.get(step.pool))
            if problem is not None:
                log.error("obtain %s x%d (token %s) returned an incomplete result: %s", step.pool, step.units,
                          step.token, problem)
                raise ProviderError(ErrorClass.PERMANENT, "INCOMPLETE_RESULT", problem, pool=step.pool,
                                    rolled_back=False)
            return got

        return await self._retried("obtain", call, f"obtain {step.pool} x{step.units} (token {step.token}, the same "
                                                   "token on every try)")

    async def lookup(self, token: str, *, until_answered: bool = False) -> Obtained | None:
        """What ``token`` designates at the provider; transient failures are retried (without end with
        ``until_answered``: a new leader settling its predecessors' intents must not give up on one 503)."""
        return await self._retried("lookup", lambda: self.provider.lookup(token), f"lookup of token {token}",
                                   fenced=False, attempts=0 if until_answered else None)

    async def obtain_all(self, steps: Sequence[Step], deadline: float) -> dict[str, Obtained]:
        """Every step's units, or :class:`ScaleUpFailed` after releasing everything the steps obtained."""
        results = await asyncio.gather(*(self.obtain_step(step, deadline) for step in steps), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if not failures:
            return {step.token: r for step, r in zip(steps, results, strict=True) if isinstance(r, Obtained)}
        if any(isinstance(f, NotLeader) for f in failures):
            # Lost the lease mid-way: undoing is the next leader's job (it adopts the recorded intent).
            raise NotLeader("the leader lease was lost during a scale-up")
        errors = [f if isinstance(f, ProviderError) else ProviderError(
            ErrorClass.TRANSIENT, type(f).__name__, str(f), pool="?") for f in failures]
        try:
            await self.release_steps(steps)
        except ProviderError as exc:
            # What is left of the scale-up is unbooked and empty: scale-down removes it once unneeded.
            log.warning("could not release every unit of a failed scale-up: %s", exc)
            errors.append(exc)
        for f in failures:
            if not isinstance(f, ProviderError):
                log.error("provider raised an unexpected error", exc_info=f)
        raise ScaleUpFailed(errors)

    async def release_steps(self, steps: Sequence[Step]) -> int:
        """Release whatever each step's token obtained (looked up at the provider); returns units released."""
        released = 0
        for step in steps:
            got = await self.lookup(step.token)
            if got is not None and got.units:
                await self.release(step.pool, [unit.unit_id for unit in got.units], step.token)
                released += len(got.units)
        return released

    async def release(self, pool: str, unit_ids: Sequence[str], token: str) -> None:
        await self._retried("release", lambda: self.provider.release(pool, unit_ids, token=token),
                            f"release of {len(unit_ids)} unit(s) of {pool}")
        self._released.extend(unit_ids)

    def take_released(self) -> list[str]:
        """The units released since the last call (by any task: scale-down, a rollback, an orphan)."""
        released, self._released = self._released, []
        return released
