"""Wait until a simulated cluster is quiet, without sleeping: by watching every part's own signal.

Quiet means, at once and for several consecutive turns of the event loop: the API server serves no request and
has written every watch event it was given to its stream; every other part says it is quiet (the controller has
no change, result or due time waiting and no task running; the simulated cloud marks no node Ready); and the
store's revision and the request log did not move. Each turn of the loop polls the sockets, so a request or a
watch event in flight on loopback shows up as a change within a turn or two; the turns required are a margin
for that, counted in loop turns, not in seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from gangscale.sim.apiserver import EmbeddedAPIServer

#: Consecutive quiet turns of the event loop that count as quiet.
QUIET_TURNS = 6
#: A hang guard (real seconds), not a timer: a cluster that never settles fails loudly. 60, not 20: a busy scenario's
#: settle on a loaded 2-core machine (the test suite's workers and a chaos campaign at once) took more than 20 s.
HANG_GUARD = 60.0


async def until_quiet(server: EmbeddedAPIServer, parts: Iterable[tuple[str, Callable[[], bool]]], *,
                      turns: int = QUIET_TURNS, guard: float = HANG_GUARD) -> None:
    """``parts``: (name, is it quiet) for each part besides the API server."""
    checks = tuple(parts)
    deadline = time.monotonic() + guard
    calm, last = 0, (-1, -1)
    while True:
        await asyncio.sleep(0)
        mark = (server.store.resource_version, len(server.requests))
        quiet = server.busy == 0 and server.store.undelivered() == 0 and all(check() for _, check in checks)
        calm = calm + 1 if quiet and mark == last else 0
        last = mark
        if calm >= turns:
            return
        if time.monotonic() > deadline:
            busy = [name for name, check in checks if not check()]
            raise TimeoutError(f"the simulated cluster did not settle within {guard:g}s: API server serving "
                               f"{server.busy}, watch events unsent {server.store.undelivered()}, revision moving: "
                               f"{mark != last}; not quiet: {', '.join(busy) or 'nothing else'}")
