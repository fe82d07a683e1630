"""gangscale's one retry policy: how long to wait before attempt n + 1 after n failures, for every kind of retry.

The delay before retrying after failure ``n`` (n = 1, 2, ...) is ``initial * 2^(n-1)``, capped at ``maximum``, then
spread by ``±jitter`` (a fraction of it, never above the cap) so that many clients failing together do not retry in
lockstep. A server that says when to come back (``Retry-After``, ``retryAfterSeconds``) sets a floor: the delay is
never earlier than asked, the cap never cuts it, and with jitter it is spread a little *after* the asked time.

Each kind of retry takes its numbers from one preset here, and nowhere else:

=====================  =================================  =======  =====  ======  ====================================
preset                 what retries                       initial  cap    jitter  why these numbers
=====================  =================================  =======  =====  ======  ====================================
``API_WATCH``          a reflector's LIST or WATCH after  0.5 s    30 s   ±20 %   client-go's scale; every replica
                       429, 5xx, a dropped connection,                            watches the same resources, so an
                       an empty watch, 410s in a row                              outage ends in a herd unless spread
``PROVIDER_CALL``      the actuator's obtain, lookup and  1 s      30 s   ±20 %   cloud APIs throttle; a scale-up's
                       release on a transient error                               steps fail together and must not
                       (same token)                                               come back together
``GKE_BUSY``           a GKE mutating call refused as     2 s      30 s   0       one operation at a time per
                       the cluster is busy (429,                                  cluster, each tens of seconds;
                       "currently upgrading")                                     bounded by the call's deadline
``STATUS_WRITE``       a request's status write that      1 s      60 s   0       queued per request, so already
                       failed (in the work queue)                                 spread; a minute spares an object
                                                                                  in trouble
``INTENT_CONFLICT``    recording a scale-up intent        1 s      1 s    0       no growth: the request is decided
                       answered 409                                               afresh once the watch brings the
                                                                                  change
``PREFLIGHT``          ``gangscale run`` waiting for      0.5 s    5 s    0       one process at start: notice a
                       the API server                                             server back within seconds
``SIMULATED_KUBELET``  the simulated cloud's kubelet      0.5 s    10 s   0       a kubelet's status loop is 10 s;
                       posting Ready through API errors                           the simulation is exact on a
                                                                                  manual clock
``replanning()``       a request whose capacity was not   flag     flag   0       the time is written on the request
                       found (and its gang's next                                 ("Next attempt at"); decisions
                       request); an intent not recorded                           replay exactly on a manual clock
``isolation()``        a request whose reconcile raised   flag     flag   0       spaced like a miss: a bug repeating
                       (issue 25)                                                 on every pass must not flood the log
``provider_start()``   starting the provider (a new       flag     flag   0       the cloud or API server briefly
                       leader must not exit on one 500)                           down; one process, nothing to spread
=====================  =================================  =======  =====  ======  ====================================

"flag" is ``--retry-initial`` (1m) and ``--retry-max`` (10m). Every delay doubles (factor 2).

Not retries, so not here: the leader-election poll (a fixed period with up to 20 % jitter,
:mod:`gangscale.kube.lease`), pool backoffs (per-pool state with ceilings and a reset after quiet hours,
:mod:`gangscale.controller.logic.backoffs`), and the fake clouds' and Kueue's own behaviour under :mod:`gangscale.sim`.

Two shapes use a policy. Most of gangscale's retries are *scheduled across passes*: the failure count lives in the
request's state and the retry time in the work queue (``retry_at``, ``failing_until``), so they call
:meth:`Policy.delay` directly. The few *blocking* loops (actuator, GKE busy cluster, preflight, provider start) use
:func:`retrying`, or :class:`Backoff` where the loop has more to do than one call (the reflector).

Why not ``tenacity`` (which DESIGN.md's dependency list names for retries): it would fit the four blocking loops
(``AsyncRetrying(sleep=clock.sleep, wait=...)`` takes the injected clock, and a custom wait can read the error's
Retry-After), but most of gangscale's retries are not loops around a call: they are *scheduled across passes*, the
failure count and next time kept in the request's state and the work queue, which a retrying wrapper cannot
express. The delay function here is needed for those anyway; using tenacity for the other four would write the
same policy in a second shape and add a runtime dependency for a twenty-line loop.

The module imports only the standard library (``random``; no clock, no ``asyncio``): pure controller code
(:mod:`.controller.reconcile`) and :mod:`gangscale.kube` import it, and it must not bring a clock or an event loop
with them (import-linter contracts). Sleeping is the caller's: blocking loops pass their injected ``clock.sleep``.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

#: Shared by callers that do not pass a seeded generator (tests pass one).
_RNG = random.Random()


@dataclass(frozen=True, slots=True)
class Policy:
    """Delays that double from ``initial`` up to ``maximum``, spread by ``±jitter`` (a fraction)."""

    initial: float
    maximum: float
    jitter: float = 0.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        # An initial delay above the cap is allowed and means the cap: the flags may be given that way.
        if self.initial < 0 or self.maximum < 0 or self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError(f"a retry policy needs initial, maximum >= 0, factor >= 1 and 0 <= jitter < 1; got "
                             f"{self.initial:g}, {self.maximum:g}, {self.factor:g}, {self.jitter:g}")

    def base(self, attempt: int) -> float:
        """The un-jittered delay after failure ``attempt`` (1 for the first; smaller counts as 1)."""
        delay = self.initial
        # Multiplied step by step and stopped at the cap: a count that grows for days cannot overflow a float.
        for _ in range(max(1, attempt) - 1):
            if delay >= self.maximum or delay == 0 or self.factor == 1:
                break
            delay *= self.factor
        return min(delay, self.maximum)

    def delay(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """How long to wait after failure ``attempt`` before trying again; ``retry_after`` is what the server asked
        for (seconds, None when it did not say), a floor. ``rng`` draws the jitter (seeded in tests)."""
        draw = rng or _RNG
        own = self.base(attempt)
        if self.jitter:
            own = min(self.maximum, own * (1.0 + draw.uniform(-self.jitter, self.jitter)))
        if retry_after is None or retry_after < 0:
            return own
        asked = retry_after
        if self.jitter:
            # Many clients told the same time would all come back at it: spread them after it, up to the cap.
            asked = min(retry_after * (1.0 + draw.uniform(0.0, self.jitter / 2)), max(self.maximum, retry_after))
        return max(own, asked)


API_WATCH = Policy(initial=0.5, maximum=30.0, jitter=0.2)
PROVIDER_CALL = Policy(initial=1.0, maximum=30.0, jitter=0.2)
GKE_BUSY = Policy(initial=2.0, maximum=30.0)
STATUS_WRITE = Policy(initial=1.0, maximum=60.0)
INTENT_CONFLICT = Policy(initial=1.0, maximum=1.0)
PREFLIGHT = Policy(initial=0.5, maximum=5.0)
SIMULATED_KUBELET = Policy(initial=0.5, maximum=10.0)


class RetryFlags(Protocol):
    """The ``--retry-initial`` and ``--retry-max`` flags, as the controller's settings carry them."""

    @property
    def retry_initial(self) -> float: ...

    @property
    def retry_max(self) -> float: ...


def replanning(flags: RetryFlags) -> Policy:
    """Re-planning a request whose capacity was not found, or whose intent could not be recorded."""
    return Policy(initial=flags.retry_initial, maximum=flags.retry_max)


def isolation(flags: RetryFlags) -> Policy:
    """Reconciling again a request whose reconcile raised: spaced like a miss."""
    return replanning(flags)


def provider_start(flags: RetryFlags) -> Policy:
    """Starting the provider again after a transient failure."""
    return replanning(flags)


@dataclass
class Backoff:
    """The delays of one loop that retries: :meth:`next` after each failure, :meth:`reset` after a success."""

    policy: Policy = API_WATCH
    rng: random.Random = field(default_factory=random.Random)
    #: Failures since the last success.
    failures: int = 0

    def next(self, retry_after: float | None = None) -> float:
        self.failures += 1
        return self.policy.delay(self.failures, retry_after, self.rng)

    def reset(self) -> None:
        self.failures = 0

    def fresh(self) -> Backoff:
        """Another backoff under the same policy and generator, with no failures yet."""
        return Backoff(self.policy, self.rng)


def asked_delay(exc: BaseException) -> float | None:
    """The ``retry_after`` an error carries (``ApiError``, ``GcpError`` and ``ProviderError`` do), else None."""
    value = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, int | float) else None


async def retrying(call: Callable[[], Awaitable[T]], policy: Policy, sleep: Sleep, *,
                   retryable: Callable[[Exception], bool], attempts: int = 0,
                   on_retry: Callable[[Exception, float], None] | None = None,
                   rng: random.Random | None = None) -> T:
    """``call()`` until it returns, sleeping (``sleep``: the caller's clock) by ``policy`` after each failure that
    ``retryable`` accepts, honouring the error's ``retry_after``. ``attempts`` bounds the tries (0: no bound); the
    last failure, or one that is not retryable, is raised. ``on_retry`` hears each failure and the delay before the
    next try (to log it)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call()
        except Exception as exc:
            if not retryable(exc) or attempt == attempts:
                raise
            delay = policy.delay(attempt, asked_delay(exc), rng)
            if on_retry is not None:
                on_retry(exc, delay)
        await sleep(delay)
