"""A plan's decision applied to a request, and what its scale-up returned: pure, like :mod:`.reconcile`.

:func:`decided` turns a decision (fits, scale up, infeasible) into the request's conditions, booking or recorded
intent; :func:`obtained` and :func:`scale_up_failed` apply the outcome of the scale-up's provider calls (every
unit obtained; or none kept, with the pools to back off and the request's retry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.bookings import planned_booking
from gangscale.controller.logic.poolhealth import ScaleUpOutcome
from gangscale.controller.logic.reconcile import (
    NORMAL,
    WARNING,
    Actions,
    Context,
    new_nodes_by_pool,
    provisioned,
    retry_delay,
    steps_text,
)
from gangscale.controller.logic.record import OBTAINED, OBTAINING, RELEASING, Record, Step, step_token
from gangscale.controller.logic.request import RequestState
from gangscale.controller.logic.settings import Settings
from gangscale.model.decision import Decision, Outcome
from gangscale.planner import summarize
from gangscale.providers.base import ErrorClass, Obtained, ProviderError
from gangscale.timefmt import rfc3339


def decided(st: RequestState, decision: Decision, ctx: Context, acts: Actions) -> None:
    now, stamp, settings = ctx.now, rfc3339(ctx.now), ctx.settings
    st.decision = decision
    match decision.outcome:
        case Outcome.FITS:
            assert st.gang is not None
            st.booking, st.booking_seen = planned_booking(st.gang, decision, {}), set()
            st.ready_seen = set(st.booking)  # the planner places pods on Ready nodes only
            provisioned(st, C.R_FOUND, summarize(decision), now, settings)
        case Outcome.SCALE_UP if settings.dry_run:
            st.retry_at = now + retry_delay(1, settings)
        case Outcome.SCALE_UP:
            st.attempts += 1
            steps = tuple(Step(s.pool, s.units, step_token(st.request.uid, st.attempts, i, now, st.request.version))
                          for i, s in enumerate(decision.steps))
            st.record = Record(st.attempts, OBTAINING, now + settings.max_node_provision_time, steps,
                               settings.identity, nodes=tuple(sorted({p.node for p in decision.placements})))
            st.set(C.PROVISIONED, False, C.R_IN_PROGRESS, f"{summarize(decision)}: obtaining the units", stamp)
            st.event(NORMAL, "ScaleUp", summarize(decision))
            acts.scale_up.append(st)
        case Outcome.INFEASIBLE:
            message = summarize(decision)
            # A gang waiting out a tier's wait bound is not refused yet: it is planned again when the next tier
            # opens, noRetry or not.
            if st.request.no_retry and decision.wait_until is None:
                st.set(C.FAILED, True, C.R_NOT_FOUND, message, stamp)
                st.event(WARNING, "CapacityNotFound", message)
                return
            st.retries += 1
            st.retry_at = now + retry_delay(st.retries, settings)
            if decision.wait_until is not None:
                st.retry_at = min(st.retry_at, decision.wait_until)
            st.set(C.PROVISIONED, False, C.R_NOT_FOUND, f"{message}. Next attempt at {rfc3339(st.retry_at)}", stamp)
            if st.retries == 1:
                st.event(WARNING, "CapacityNotFound", message)


def obtained(st: RequestState, record: Record, got: Mapping[str, Obtained], now: float, settings: Settings) -> None:
    """Every unit was granted: wait for Ready, or report success at once if the request asks for that."""
    st.obtained = dict(got)
    st.record = record.with_phase(OBTAINED, min((o.expires_at for o in got.values() if o.expires_at is not None),
                                                default=None))
    text = steps_text(st.record)
    if st.request.provisioned_when_requested:
        st.booking = (planned_booking(st.gang, st.decision, new_nodes_by_pool(st))
                      if st.gang is not None and st.decision is not None else None)
        provisioned(st, C.R_PROVISIONED, f"obtained {text}; the nodes are coming up", now, settings)
        return
    st.set(C.PROVISIONED, False, C.R_IN_PROGRESS,
           f"obtained {text}; waiting for the new nodes to be Ready (giving up at {rfc3339(st.record.deadline)})",
           rfc3339(now))


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed provider step: its error, and the units gangscale held in the pool once the step was undone."""

    error: ProviderError
    asked: int
    held: int = 0

    @property
    def outcome(self) -> ScaleUpOutcome:
        """What the failure says of its pool's health (:mod:`.poolhealth`). A partial grant: the cloud made part of
        the units and ran out (a stockout or quota error that says how many it had, fewer than asked but some),
        or the provider answered with fewer units than asked (the actuator's ``INCOMPLETE_RESULT``); the
        scale-up was released either way. Assumed: a stockout that does not say how many it had (GCE's) is a
        stockout, though the cloud may have made some units before it ran out."""
        error = self.error
        if error.code == INCOMPLETE_RESULT or (error.error_class in SIZED and error.available is not None
                                               and 0 < error.available < self.asked):
            return ScaleUpOutcome.PARTIAL
        return _OUTCOMES.get(error.error_class, ScaleUpOutcome.ERROR)


#: Failures whose cause depends on how much was asked for: the pool stays open for less.
SIZED = frozenset({ErrorClass.STOCKOUT, ErrorClass.QUOTA})
#: The code the actuator gives an answer short of the units asked for (``gangscale.controller.actuator``).
INCOMPLETE_RESULT = "INCOMPLETE_RESULT"
_OUTCOMES = {ErrorClass.STOCKOUT: ScaleUpOutcome.STOCKOUT, ErrorClass.QUOTA: ScaleUpOutcome.QUOTA}


def scale_up_failed(st: RequestState, failures: Sequence[Failure], ctx: Context) -> list[str]:
    """Every unit was released: back the failed pools off, record each failed pool's outcome once (a pool's
    failed release after its failed obtain is the same scale-up; pools whose step succeeded record nothing: they
    delivered, but nothing was made of it), and send the request back to planning. Returns the pools backed
    off."""
    now = ctx.now
    parts, backed_off, judged = [], [], set()
    for failure in failures:
        error = failure.error
        if error.pool not in ctx.pools:
            parts.append(str(error))
            continue
        limit = ""
        closed = ctx.unhealthy(error.pool)  # unhealthy already: closed until its cooldown ends, the backoff left alone
        if closed is None:
            sized = error.error_class in SIZED
            until = ctx.backoffs.fail(error.pool, f"{error.error_class.value} ({error.code})", now,
                                      at_least=error.retry_after, asked=failure.asked if sized else None,
                                      available=error.available, held=failure.held)
            backed_off.append(error.pool)
            left = ctx.backoffs.ceiling(error.pool, now, failure.held) or 0
            limit = (f"at most {left} more unit{'s' if left != 1 else ''} of it until {rfc3339(until)}" if left
                     else f"not used until {rfc3339(until)}")
        again = error.pool in judged
        verdict = closed if again else ctx.scale_up_outcome(error.pool, failure.outcome)
        judged.add(error.pool)
        limit = ("" if again else verdict.message) if verdict is not None else limit  # a verdict is said once
        parts.append(f"pool {error.pool}: {error.error_class.value} ({error.code}: {error.message})"
                     + (f"; {limit}" if limit else ""))
    permanent = all(f.error.error_class is ErrorClass.PERMANENT for f in failures)
    message = ("scale-up failed and every unit it obtained was released: " + "; ".join(parts)
               + ("" if permanent else "; re-planning with the other pools"))
    # What the actuator obtained before the failure it released already; its nodes may linger (a VM's deletion
    # takes a while after the call returns): the request is planned again once they are gone (record.RELEASING).
    st.record = st.record.with_phase(RELEASING) if st.record is not None else None
    st.obtained = {}
    st.set(C.PROVISIONED, False, C.R_NOT_FOUND, message, rfc3339(now))
    st.event(WARNING, "ScaleUpFailed", message)
    st.retry_at = now + retry_delay(1, ctx.settings) if permanent else None
    return backed_off


# -- helpers ------------------------------------------------------------------------------------------------------
