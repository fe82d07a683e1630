"""Status writes: what each request shows, written when it changed, retried when a write failed.

At the end of a pass the loop hands :meth:`StatusWriter.finish` the requests the pass touched: each is indexed
and queued again for its next due time, and its status (a ProvisioningRequest's conditions, a RayCluster's
annotation: whatever its source says) is written unless it is unchanged, a task of the request is running, or a
failed write is waiting out its retry delay. The write runs as a background task of the loop; its result is
applied here at the start of the next pass. It is apart from the loop because it keeps state of its own (failed
writes and when to try again) and is the one place a request's outcome becomes visible, logged and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from gangscale.clock import Clock
from gangscale.controller.actuator import NotLeader
from gangscale.controller.demand.protocol import DemandSource
from gangscale.controller.effects import Effects, Written
from gangscale.controller.logic.indices import RequestIndex
from gangscale.controller.logic.isolation import failed
from gangscale.controller.logic.reconcile import deadline
from gangscale.controller.logic.request import Phase, RequestState, phase
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.workqueue import WorkQueue
from gangscale.controller.tasks import Spawn
from gangscale.observe.metrics import Metrics
from gangscale.retry import STATUS_WRITE

log = logging.getLogger(__name__)

#: The first delay of a failed status write (``STATUS_WRITE`` of :mod:`gangscale.retry`); the loop reads it too.
WRITE_RETRY = STATUS_WRITE.initial


class StatusWriter:
    """Writes the status of the requests a pass touched (see the module docstring). ``states`` and ``sources`` are
    the loop's own maps, read here; ``forget`` drops a request whose object is gone or that is done."""

    def __init__(self, states: Mapping[str, RequestState], sources: Mapping[str, DemandSource], effects: Effects,
                 queue: WorkQueue, index: RequestIndex, *, settings: Settings, clock: Clock, metrics: Metrics,
                 spawn: Spawn, forget: Callable[[str, str], None]) -> None:
        self.states, self.sources, self.effects, self.queue, self.index = states, sources, effects, queue, index
        self.settings, self.clock, self.metrics = settings, clock, metrics
        self._spawn, self._forget = spawn, forget
        #: key -> failed writes in a row.
        self._failures: dict[str, int] = {}
        #: key -> when a failed write is tried again.
        self._retry_at: dict[str, float] = {}

    def drop(self, key: str) -> None:
        """The request is gone: its failed writes are forgotten."""
        self._failures.pop(key, None)
        self._retry_at.pop(key, None)

    def finish(self, touched: set[str], now: float) -> None:
        for key in touched:
            st = self.states.get(key)
            if st is None:
                continue
            self.index.index(st)
            at = deadline(st, self.settings, now)
            retry = self._retry_at.get(key)
            if retry is not None:
                at = retry if at is None or at <= now else min(at, retry)
            self.queue.requeue(key, at if at is not None and at > now else None)
            try:
                self._write(st, now)
            except Exception as exc:
                # One request's status that cannot be built is that request's failure (:mod:`.isolation`).
                failed(st, "write the status of", exc, now, self.settings)
                self.queue.requeue(key, st.failing_until)

    def _write(self, st: RequestState, now: float) -> None:
        if st.busy or st.deleted or self._retry_at.get(st.key, now) > now:
            return
        source = self.sources[st.request.source]
        body = source.status(st)
        text = repr(body)
        if text == st.written and not st.events:
            self._drop_if_finished(st)
            return
        events, st.events = st.events, []
        source.note_events(st, events)
        st.task = "write"
        self._spawn(self.effects.write(source, st, body, text, events), f"write {st.key}",
                    lambda result: self._written(st, result))

    def _written(self, st: RequestState, result: Written | BaseException) -> None:
        st.task = None
        if isinstance(result, NotLeader):
            log.warning("the status of %s was not written: %s", st.key, result)
            return
        if isinstance(result, BaseException):
            log.error("writing the status of %s failed unexpectedly", st.key, exc_info=result)
            self.queue.requeue(st.key, self.clock.now() + WRITE_RETRY)
            return
        if result.error is not None:
            if result.error.not_found:
                self._forget(st.key, f"its {st.request.kind} is gone")
                return
            # A 409 is retried like any failed write (see ``Controller._scaled_up``): forgetting the request here
            # would, on a conflict of the same object, leave it unserved and release a scale-up in progress. The
            # server's Retry-After, when it sends one, is a floor.
            failures = self._failures[st.key] = self._failures.get(st.key, 0) + 1
            delay = STATUS_WRITE.delay(failures, result.error.retry_after)
            log.warning("could not write the status of %s (retrying in %.0fs): %s", st.key, delay, result.error)
            self._retry_at[st.key] = self.clock.now() + delay
            self.queue.requeue(st.key, self._retry_at[st.key])
            return
        self.drop(st.key)
        st.version = result.version or st.version
        self.observe_written(st, result.body, self.clock.now())
        self.queue.mark(st.key)  # anything that came due or changed while the write ran is handled now

    def observe_written(self, st: RequestState, body: str, now: float) -> None:
        """``body`` is on the request's object (a status write, or a scale-up's intent): conditions that changed
        since the last one are counted and logged."""
        st.written = body
        before = st.reported
        st.reported = {ctype: (cond.status, cond.reason) for ctype, cond in st.conditions.items()}
        for ctype, cond in st.conditions.items():
            if before.get(ctype) != (cond.status, cond.reason):
                self.metrics.outcome(st.request.class_name, cond.reason)
                if ctype not in before:
                    self.metrics.condition_latency(st.request.class_name, ctype, now - st.request.created)
                log.info("%s: %s=%s (%s) %s", st.key, ctype, cond.status, cond.reason, cond.message,
                         extra={"pr": st.key, "condition": ctype, "reason": cond.reason,
                                "dry_run": self.settings.dry_run})

    def _drop_if_finished(self, st: RequestState) -> None:
        if st.request.forget_when_done and phase(st) is Phase.DONE and not st.busy:
            self._forget(st.key, "done")
