"""What the runtime does once, between its first lists and its first pass: start the provider, then settle every
recorded scale-up with it (:mod:`.recovery`). The only part of the controller's life that waits on the cloud
outside a task: nothing may be planned before it is done (DESIGN decision 12)."""

from __future__ import annotations

import functools
import logging

from gangscale.clock import Clock
from gangscale.controller.actuator import Actuator
from gangscale.controller.core import Core
from gangscale.controller.logic.settings import Settings
from gangscale.controller.recovery import recover_intents, release_orphans
from gangscale.providers.base import NodePoolProvider, transient
from gangscale.retry import provider_start, retrying

log = logging.getLogger(__name__)


async def start_provider(provider: NodePoolProvider, settings: Settings, clock: Clock) -> None:
    """A new leader must not exit on one 500 of the cloud or the API server; a refusal (credentials,
    configuration) stops the controller with it."""
    def told(exc: Exception, delay: float) -> None:
        log.warning("the %s provider could not start (retrying in %.1fs): %s", provider.name, delay, exc)

    await retrying(provider.start, provider_start(settings), clock.sleep, retryable=transient, on_retry=told)


async def recover(core: Core, actuator: Actuator, now: float) -> None:
    """The requests recorded on the sources' objects, then every recorded intent settled with the provider, and
    units no source knows released. The view must hold the first lists already."""
    for source in core.sources.values():
        source.recover()
    known = {token for source in core.sources.values() for token in source.recorded_tokens()}
    known.update(token for st in core.states.values() if st.record is not None for token in st.record.tokens)
    lookup = functools.partial(actuator.lookup, until_answered=True)
    for release in await recover_intents(core.states.values(), lookup, core.pools, now, core.view.nodes.__contains__):
        core.start_release(release)
    await release_orphans(core.view, known, actuator.release)
