"""A request's failure is that request's: an exception while one request is reconciled, planned, rebooked, acted on or
written is caught, told on that request, and retried with backoff, while the pass goes on for everyone else (as
controller-runtime isolates keys: one key's error requeues that key, rate-limited, and nothing else).

Before this, one bad object (a ``bookingSeconds`` of 10^12 made ``rfc3339`` overflow) aborted the whole pass at every
resync, so no other request was planned, released, scaled down or written (issue 25). Parameters are now bounded when
they are parsed (:mod:`gangscale.sources.provreqparams`); this is the net for what no validation foresaw.

What the request shows: a Warning Event ``ReconcileError`` naming the stage and the error, and, unless the request
is already ``Provisioned=True`` (a failure inside gangscale is no reason to take capacity back from Kueue),
``Provisioned=False`` with gangscale's own reason ``ReconcileError`` and the time of the next attempt. The next
attempt is due after ``--retry-initial``, doubling up to ``--retry-max`` (:func:`gangscale.retry.isolation`);
meanwhile changes to the request do not make it reconciled again (an error that repeats on every event would flood
the log). The state is not rolled back: what the failed step changed in memory stays, as a controller's half-done
reconcile does.
"""

from __future__ import annotations

import logging

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.request import RequestState
from gangscale.controller.logic.settings import Settings
from gangscale.retry import isolation
from gangscale.timefmt import rfc3339

log = logging.getLogger(__name__)


def failed(st: RequestState, stage: str, exc: BaseException, now: float, settings: Settings) -> None:
    """``stage`` of ``st`` raised ``exc`` at ``now``: tell it on the request and set when it is tried again."""
    st.failures += 1
    delay = isolation(settings).delay(st.failures)
    st.failing_until = now + delay
    what = f"{type(exc).__name__}: {exc}"[:300]
    message = (f"gangscale could not {stage} this request ({what}); this is a bug in gangscale or input it does not "
               f"handle; next attempt at {rfc3339(st.failing_until)}")
    # The traceback once per request and stage; repeats are one line.
    log.error("%s: could not %s (attempt %d): %s", st.key, stage, st.failures, what,
              exc_info=exc if st.failures == 1 else None, extra={"pr": st.key})
    st.event("Warning", C.R_RECONCILE_ERROR, message)
    provisioned = st.conditions.get(C.PROVISIONED)
    if provisioned is None or not provisioned.true:
        st.set(C.PROVISIONED, False, C.R_RECONCILE_ERROR, message, rfc3339(now))


def waiting(st: RequestState, now: float) -> bool:
    """Whether ``st`` failed and waits out its backoff (it is not reconciled before then)."""
    return st.failing_until is not None and now < st.failing_until


def succeeded(st: RequestState) -> None:
    st.failures, st.failing_until = 0, None
