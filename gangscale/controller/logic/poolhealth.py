"""Pool health: each pool's last scale-up outcomes, and the verdict that closes a pool failing too often (issue 28).

A backoff (:mod:`.backoffs`) answers one failure; health answers a pattern. Each pool keeps its last ``window``
scale-up outcomes in a ring buffer (a ``deque`` with ``maxlen``), one :class:`ScaleUpOutcome` per pool per
scale-up. A pool is **unhealthy** once ``failures / max(len(buffer), min_outcomes) >= ratio``; it then stays
unhealthy for ``cooldown`` seconds, during which the controller keeps it closed through its backoff (the planner
skips it, and says why with the verdict's :attr:`Unhealthy.reason`).

Where the numbers come from (read in kubernetes-sigs/karpenter, facts only):

- Karpenter's NodePool registration health (``pkg/state/nodepoolhealth/tracker.go``) keeps a ring buffer of the
  last ``BufferSize = 4`` launch results per NodePool and reports it unhealthy when the failures divided by the
  *buffer size* (not by the results held) reach ``ThresholdFalse = 0.5``: two failures among the last four, even
  with only two results in the buffer. Failures are NodeClaims that did not launch (5 min) or register (15 min)
  in time (``pkg/controllers/nodeclaim/lifecycle/liveness.go``); a registration is a success.
- Karpenter resets the verdict only when the NodePool or its NodeClass changes
  (``pkg/controllers/nodepool/registrationhealth/controller.go``), and an unhealthy NodePool is still used for
  provisioning (``designs/noderegistrationhealthy-status-condition.md``). It has no cooldown.

So the defaults are ``window = 4`` and ``ratio = 0.5``, and ``min_outcomes`` defaults to the window: a buffer not
yet full is judged as if its empty slots were successes, which is Karpenter's rule exactly (with
``min_outcomes = 1`` the ratio is taken over the outcomes held alone). Choices of gangscale's own, named:

- **Outcomes** are richer than Karpenter's launched/registered: SUCCESS (every unit obtained and every node
  Ready), TIMEOUT (nodes never Ready within ``--max-node-provision-time``), PARTIAL (the cloud granted part of
  the units, so the scale-up was released), STOCKOUT, QUOTA and ERROR (any other provider failure). Every kind
  but SUCCESS is a failure.
- **Skipped, not only flagged** (issue 28), for ``cooldown`` seconds; the default, 30 minutes, is the
  cluster-autoscaler's ``--max-node-group-backoff-duration`` and ``--pool-backoff``'s cap: a pool that failed
  repeatedly is kept off as long as the backoff ladder's longest step would keep it.
- **The buffer is cleared when the cooldown ends**, and the pool starts afresh (a circuit breaker's half-open
  trial): one more failure then does not close it again at once (with the defaults it takes two), while a pool
  still broken is found so again after two tries. Outcomes of scale-ups still in flight that arrive during the
  cooldown are recorded (they show in ``gangscale explain`` and the metrics) but neither extend the cooldown nor
  survive it. The clearing happens when the pool is next looked at (every method takes ``now``), which is the
  same since nothing reads the buffer in between.
- **The verdict's wording is fixed when it is given**: "3 of the last 4 scale-ups timed out" stays the reason
  for the whole cooldown, whatever arrives meanwhile.

Pure: no clock (``now`` is passed in), no I/O; ``on_outcome`` lets the caller count outcomes (metrics, logs).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gangscale.timefmt import rfc3339

#: Karpenter's ``BufferSize`` and ``ThresholdFalse`` (see the module docstring).
DEFAULT_WINDOW = 4
DEFAULT_RATIO = 0.5
#: The cluster-autoscaler's ``--max-node-group-backoff-duration`` default.
DEFAULT_COOLDOWN = 30 * 60.0


class ScaleUpOutcome(StrEnum):
    """How one scale-up went for one pool (the ``outcome`` label of ``gangscale_pool_scale_up_outcomes_total``)."""

    #: Every unit obtained and every node Ready.
    SUCCESS = "success"
    #: Nodes that never turned Ready within ``--max-node-provision-time``.
    TIMEOUT = "timeout"
    #: The cloud granted only part of the units asked for, so the scale-up was released.
    PARTIAL = "partial"
    STOCKOUT = "stockout"
    QUOTA = "quota"
    #: Any other provider failure (permanent, or transient past its retries).
    ERROR = "error"


#: How each failure reads: alone ("3 of the last 4 scale-ups timed out") and in a list ("2 timed out, 1 stockout").
_ALONE = {ScaleUpOutcome.TIMEOUT: "timed out", ScaleUpOutcome.PARTIAL: "got only part of their units",
          ScaleUpOutcome.STOCKOUT: "stocked out", ScaleUpOutcome.QUOTA: "hit a quota",
          ScaleUpOutcome.ERROR: "failed with a provider error"}
_LISTED = {ScaleUpOutcome.TIMEOUT: ("timed out", "timed out"),
           ScaleUpOutcome.PARTIAL: ("partial grant", "partial grants"),
           ScaleUpOutcome.STOCKOUT: ("stockout", "stockouts"), ScaleUpOutcome.QUOTA: ("quota error", "quota errors"),
           ScaleUpOutcome.ERROR: ("provider error", "provider errors")}


@dataclass(frozen=True, slots=True)
class Unhealthy:
    """A pool's verdict: unhealthy from ``since`` until ``until``, because of ``outcomes`` (oldest first)."""

    pool: str
    since: float
    until: float
    #: "spot pool a3-spot unhealthy: 3 of the last 4 scale-ups timed out": the backoff's reason while it lasts.
    reason: str
    outcomes: tuple[ScaleUpOutcome, ...]

    @property
    def message(self) -> str:
        """The reason and until when the pool is skipped, for conditions, Events and logs."""
        return f"{self.reason}; skipped until {rfc3339(self.until)}"

    @property
    def cause(self) -> str:
        """"unhealthy: 3 of the last 4 scale-ups timed out": the reason without the pool, as the pool's backoff
        reason (the planner's messages name the pool and its tier themselves, and add until when)."""
        return "unhealthy:" + self.reason.partition(" unhealthy:")[2]


@dataclass
class _Pool:
    recent: deque[ScaleUpOutcome]
    unhealthy: Unhealthy | None = None


#: Told of every outcome recorded: the pool, the outcome, and the verdict when the pool just became unhealthy.
OnOutcome = Callable[[str, ScaleUpOutcome, Unhealthy | None], None]


@dataclass
class PoolHealth:
    """Every pool's recent scale-up outcomes and verdicts (see the module docstring). ``window = 0`` turns the
    verdicts off (outcomes are still passed to ``on_outcome``)."""

    window: int = DEFAULT_WINDOW
    ratio: float = DEFAULT_RATIO
    cooldown: float = DEFAULT_COOLDOWN
    #: The fewest slots the failures are divided by (None: the window, Karpenter's rule).
    min_outcomes: int | None = None
    on_outcome: OnOutcome | None = None
    _pools: dict[str, _Pool] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 0 or not 0 < self.ratio <= 1 or self.cooldown < 0:
            raise ValueError(f"pool health needs window >= 0, 0 < ratio <= 1 and cooldown >= 0; got {self.window}, "
                             f"{self.ratio}, {self.cooldown}")

    def record(self, pool: str, outcome: ScaleUpOutcome, now: float, *, capacity_type: str = "") -> str | None:
        """Add one scale-up's outcome for ``pool``; the verdict's message when the pool just became unhealthy
        (``capacity_type``, when given, prefixes the pool in it: "spot pool a3-spot")."""
        became = None
        if self.window:
            state = self._state(pool, now)
            state.recent.append(outcome)
            if state.unhealthy is None and self._failing(state.recent):
                became = state.unhealthy = Unhealthy(pool, now, now + self.cooldown,
                                                     describe(pool, state.recent, capacity_type), tuple(state.recent))
        if self.on_outcome is not None:
            self.on_outcome(pool, outcome, became)
        return became.message if became is not None else None

    def unhealthy(self, pool: str, now: float) -> Unhealthy | None:
        """The pool's verdict while its cooldown lasts, else None."""
        return self._state(pool, now).unhealthy if pool in self._pools else None

    def recent(self, pool: str, now: float) -> tuple[ScaleUpOutcome, ...]:
        """The pool's outcomes still in its buffer, oldest first."""
        return tuple(self._state(pool, now).recent) if pool in self._pools else ()

    def active(self, now: float) -> dict[str, Unhealthy]:
        """Every pool unhealthy at ``now``."""
        return {pool: found for pool in list(self._pools) if (found := self._state(pool, now).unhealthy) is not None}

    def next_expiry(self, now: float) -> float | None:
        """When the first cooldown still running ends."""
        return min((v.until for v in self.active(now).values()), default=None)

    def _state(self, pool: str, now: float) -> _Pool:
        state = self._pools.get(pool)
        if state is None:
            state = self._pools[pool] = _Pool(deque(maxlen=self.window))
        elif state.unhealthy is not None and now >= state.unhealthy.until:
            state.unhealthy = None
            state.recent.clear()  # a fresh trial (see the module docstring)
        return state

    def _failing(self, recent: deque[ScaleUpOutcome]) -> bool:
        failures = sum(1 for outcome in recent if outcome is not ScaleUpOutcome.SUCCESS)
        slots = max(len(recent), self.min_outcomes if self.min_outcomes is not None else self.window, 1)
        return failures > 0 and failures / slots >= self.ratio


def describe(pool: str, outcomes: Sequence[ScaleUpOutcome], capacity_type: str = "") -> str:
    """"spot pool a3-spot unhealthy: 3 of the last 4 scale-ups timed out" (several kinds of failure are listed:
    "3 of the last 4 scale-ups failed: 2 timed out, 1 stockout")."""
    total = len(outcomes)
    failed = Counter(outcome for outcome in outcomes if outcome is not ScaleUpOutcome.SUCCESS)
    count = sum(failed.values())
    share = "the last scale-up" if total == 1 else f"{count} of the last {total} scale-ups"
    if len(failed) == 1:
        (kind,) = failed
        what = f"{share} {_ALONE[kind]}"
    else:
        order = list(ScaleUpOutcome)
        kinds = sorted(failed, key=lambda kind: (-failed[kind], order.index(kind)))
        listed = ", ".join(f"{failed[kind]} {_LISTED[kind][failed[kind] != 1]}" for kind in kinds)
        what = f"{share} failed: {listed}"
    prefix = f"{capacity_type} " if capacity_type else ""
    return f"{prefix}pool {pool} unhealthy: {what}"
