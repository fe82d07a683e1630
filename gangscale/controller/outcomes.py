"""A pass's actions started, and what they returned applied; no I/O (the work itself is in :mod:`.effects`).

:func:`act` turns the actions a pass decided (:class:`~.reconcile.Actions`: scale up, resume a recorded scale-up,
release, delete) into effects in the core's outbox. When a scale-up's effect ends, :func:`scaled_up` applies its
result in the next pass: the units obtained (``reconcile.obtained``), a failure (``reconcile.scale_up_failed``:
pool backoffs and health, the request's retry), an intent that could not be recorded, or a lost lease. Releases are the
core's own operation (:meth:`Core.start_release`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from gangscale.controller.actuator import NotLeader
from gangscale.controller.core import Core
from gangscale.controller.effects import ScaledUp
from gangscale.controller.logic.holdings import unit_count
from gangscale.controller.logic.isolation import failed
from gangscale.controller.logic.reconcile import Actions, Context, Release
from gangscale.controller.logic.record import Record
from gangscale.controller.logic.request import RequestState
from gangscale.controller.logic.scaleup import Failure, obtained, scale_up_failed
from gangscale.retry import INTENT_CONFLICT

log = logging.getLogger(__name__)


def act(core: Core, acts: Actions) -> None:
    for st in acts.scale_up:
        _isolated(core, st, "start the scale-up of", partial(start_scale_up, core, st, resume=False))
    for st in acts.resume:
        holder = st.record.holder if st.record else ""
        adopted = f"; adopted from leader {holder}" if holder and holder != core.settings.identity else ""
        log.info("resuming the recorded scale-up of %s (%s)%s", st.key, st.record.tokens if st.record else (),
                 adopted)
        _isolated(core, st, "resume the scale-up of", partial(start_scale_up, core, st, resume=True))
    for release in acts.release:
        _isolated(core, release.st, "start the release for", partial(core.start_release, release))
    for st in acts.delete:
        if not core.settings.dry_run:
            core.spawn(core.sources[st.request.source].delete(st), f"delete {st.key}")


def _isolated(core: Core, st: RequestState, stage: str, step: Callable[[], None]) -> None:
    try:
        step()
    except Exception as exc:
        failed(st, stage, exc, core.pass_now, core.settings)
        core.failed_now.add(st.key)


def start_scale_up(core: Core, st: RequestState, *, resume: bool) -> None:
    """Record the intent (unless resumed: it is recorded already), then obtain every unit, as one effect."""
    record = st.record
    assert record is not None
    source = core.sources[st.request.source]
    intent = None
    events: list[tuple[str, str, str]] = []
    if not resume:
        body = source.status(st)
        intent = (body, repr(body))
        events, st.events = st.events, []
        source.note_events(st, events)
    st.task = "scale-up"
    core.ledger.start_obtain(map(core.view.claim, record.tokens))
    core.batching.started(st.key)
    core.touch_tokens(record.tokens)
    core.spawn(core.effects.scale_up(source, st, record, intent, events), f"scale-up {st.key}",
               then=lambda result: scaled_up(core, st, result))


def scaled_up(core: Core, st: RequestState, result: ScaledUp | BaseException) -> None:
    """A scale-up's effect ended (applied at the start of the pass that follows, at that pass's time)."""
    st.task = None
    core.batching.finished(st.key)
    now = core.pass_now
    if isinstance(result, NotLeader):
        # The lease was lost: the record stays as written, for the next leader to adopt.
        log.warning("the scale-up of %s stopped: %s", st.key, result)
        return
    if isinstance(result, BaseException):
        log.error("the scale-up of %s failed unexpectedly", st.key, exc_info=result)
        tokens = st.record.tokens if st.record else ()
        core.ledger.obtain_returned(map(core.view.claim, tokens))
        core.touch_tokens(tokens)
        st.record, st.retry_at = None, now + core.settings.retry_initial
        core.queue.mark(st.key)
        return
    record = result.record
    core.ledger.obtain_returned(map(core.view.claim, record.tokens))
    core.touch_tokens(record.tokens)
    if result.intent_error is not None:
        if result.intent_error.not_found:
            core.forget(st.key, f"its {st.request.kind} is gone")
            return
        # A conflict included: the watch, not a write's answer, says whether the object was replaced (the source
        # then forgets this request); until then the request is planned again later. A conflict means the object
        # changed since the version the decision saw: it is decided again as soon as the watch has brought the
        # change, not after the retry backoff.
        log.warning("could not record the scale-up intent of %s: %s", st.key, result.intent_error)
        st.record = None  # the intent is not on the object: the provider was not called
        asked = result.intent_error.retry_after
        wait = INTENT_CONFLICT.delay(1, asked) if result.intent_error.status == 409 else \
            max(core.settings.retry_initial, asked or 0.0)
        st.retry_at = now + wait
    else:
        _settled(core, st, record, result, now)
    if st.deleted:
        # Its object went while the scale-up ran (forgotten by core.forget): indexing it again would leave the key in
        # the indices with no state (chaos seed 27070: a retry time set on a deleted request failed every later pass
        # with a KeyError).
        return
    core.index.index(st)
    core.queue.mark(st.key)


def _settled(core: Core, st: RequestState, record: Record, result: ScaledUp, now: float) -> None:
    """The intent was recorded and the provider answered: every unit obtained, or none kept."""
    if result.intent_body is not None:
        st.version = result.intent_version or st.version
        core.writer.observe_written(st, result.intent_body, now)
    ctx = Context(now, core.settings, core.pools, core.backoffs, core, core.health)
    if result.failures:
        failures = [Failure(error, _asked(record, error.pool), _held_units(core, error.pool, st.key))
                    for error in result.failures]
        st.record = record
        core.ledger.rolled_back(map(core.view.claim, record.tokens), now)
        for pool in scale_up_failed(st, failures, ctx):
            core.metrics.backoff(pool, next(f.error.error_class.value for f in failures if f.error.pool == pool))
    else:
        assert result.obtained is not None
        for step in record.steps:
            core.metrics.scaled(step.pool, "up", step.units)
        obtained(st, record, result.obtained, now, core.settings)
    if st.deleted and result.obtained is not None:
        # Deleted while its units were obtained: hand back whatever was obtained.
        core.start_release(Release(st, record.steps, tuple(core.nodes_of(st)),
                                   f"its {st.request.kind} was deleted while the units were obtained"))


def _asked(record: Record, pool: str) -> int:
    return sum(step.units for step in record.steps if step.pool == pool)


def _held_units(core: Core, pool: str, but: str) -> int:
    """The units of ``pool`` that stay, plus those other requests' scale-ups are still bringing up: what a failed
    scale-up's pool held when it failed (a stockout's ceiling)."""
    units = core.view.units(core.pools).get(pool, {})
    count = unit_count(core.view, core.pools[pool], units, core.ledger.going_units(),
                       core.ledger.leaving_nodes(core.claim_nodes))
    coming = sum(n for key, holding in core.index.holdings.items() if key != but for p, n in holding.inflight
                 if p == pool)
    return count + coming
