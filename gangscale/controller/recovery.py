"""After a restart, before anything is planned: every recorded scale-up intent settled with the provider
(DESIGN decision 12). The loop runs this once, after every reflector has listed and before its first pass.

- a scale-up whose units were all granted (``obtained``) must still have every unit, whole, at the provider;
  otherwise the request goes back to planning and whatever is left is released;
- a Provisioned request counts every node of its scale-up as a booked node seen, so one removed while
  gangscale was down revokes the booking;
- units still coming up for a token no request recorded (its request was deleted meanwhile) are released;
- a scale-up an earlier leader was handing back (``releasing``) is released again, and its request waits for it.

An ``obtaining`` intent needs nothing here: the first pass resumes it with its own tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from gangscale.controller.actuator import NotLeader
from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.reconcile import WARNING, Release, node_names
from gangscale.controller.logic.record import OBTAINED, RELEASING
from gangscale.controller.logic.request import Phase, RequestState, phase
from gangscale.controller.logic.verify import scale_up_problems
from gangscale.controller.logic.view import ClusterView
from gangscale.model.nodepool import NodePool
from gangscale.providers.base import Obtained, ProviderError
from gangscale.timefmt import rfc3339

log = logging.getLogger(__name__)

Lookup = Callable[[str], Awaitable[Obtained | None]]
ReleaseUnits = Callable[[str, Sequence[str], str], Awaitable[None]]


async def recover_intents(states: Iterable[RequestState], lookup: Lookup, pools: Mapping[str, NodePool],
                          now: float, present: Callable[[str], bool] = lambda name: True) -> list[Release]:
    """Settle the recorded intents of ``states``; returns the releases to start."""
    releases = []
    for st in sorted(states, key=lambda s: s.key):
        if st.record is None:
            continue
        if st.record.phase == RELEASING:
            release = await _resume_release(st, lookup)
            if release is not None:
                releases.append(release)
        elif phase(st) is Phase.BOOKED:
            await _recover_booked(st, lookup, pools, now, present)
        elif phase(st) is Phase.PROVISIONING and st.record.phase == OBTAINED:
            release = await _recover_obtained(st, lookup, pools, now)
            if release is not None:
                releases.append(release)
    return releases


async def _recover_obtained(st: RequestState, lookup: Lookup, pools: Mapping[str, NodePool],
                            now: float) -> Release | None:
    assert st.record is not None
    for step in st.record.steps:
        got = await lookup(step.token)
        if got is not None:
            st.obtained[step.token] = got
    problems = scale_up_problems(st.record.steps, st.obtained, pools)
    if not problems:
        return None
    why = (f"after a restart the provider no longer has every unit of this scale-up ({'; '.join(problems)}); "
           "released the rest and re-planning")
    st.set(C.PROVISIONED, False, C.R_NOT_FOUND, why, rfc3339(now))
    release = Release(st, st.record.steps, tuple(node_names(st)), why)
    st.record, st.obtained = st.record.with_phase(RELEASING), {}
    return release


async def _resume_release(st: RequestState, lookup: Lookup) -> Release | None:
    """A scale-up an earlier leader was handing back: its release again (idempotent: units gone or going count as
    released), and the request waits until no node of it is left (``reconcile.pending``)."""
    assert st.record is not None
    found = [got for step in st.record.steps if (got := await lookup(step.token)) is not None]
    if not found:
        return None  # nothing of it is left at the provider
    nodes = [name for got in found for name in got.node_names]
    return Release(st, st.record.steps, tuple(nodes), "resuming the release of a scale-up an earlier leader was "
                                                       "handing back")


async def _recover_booked(st: RequestState, lookup: Lookup, pools: Mapping[str, NodePool], now: float,
                          present: Callable[[str], bool]) -> None:
    """A Provisioned request's scale-up: every node it made counts as a booked node seen (one removed while gangscale
    was down revokes the booking). Not with ``provisionedWhen: Requested``, whose nodes may not have registered
    before Provisioned=True: for it, what the provider made is kept instead, so that the booking is rebuilt only
    once those nodes are in the view and a slice whose hosts are still arriving is not taken for a half-removed one
    (found by ``tests/crash/test_gke_kill_points.py``: left empty, the booking was rebuilt on no node at once, and
    the slice's first host was removed as a broken unit when it registered)."""
    assert st.record is not None
    found: dict[str, Obtained] = {}
    for step in st.record.steps:
        got = await lookup(step.token)
        if got is None:
            continue
        found[step.token] = got
        if st.request.provisioned_when_requested:
            st.obtained[step.token] = got
        else:
            st.booking_seen.update(got.node_names)
    problems = scale_up_problems(st.record.steps, found, pools)
    if problems and not st.request.provisioned_when_requested and all(map(present, st.booking_seen)):
        # A unit that lost a node while no process watched (a reclaimed slice host) and whose name the provider no
        # longer reports (when it does, reconcile.booked names it), so nothing could see it go: chaos seed 15007, the
        # booking was rebuilt without it and the slice's other host removed as a broken unit.
        message = (f"after a restart the provider no longer has every unit of this scale-up whole "
                   f"({'; '.join(problems)}): the booked capacity is gone")
        st.set(C.CAPACITY_REVOKED, True, C.R_NODE_REMOVED, message, rfc3339(now))
        st.event(WARNING, "CapacityRevoked", message)


async def release_orphans(view: ClusterView, known: set[str], release: ReleaseUnits) -> None:
    """Units coming up (not Ready, empty) under a token that no request recorded (compared by claim; the release
    names the claim for the provider's logs)."""
    claims = {view.claim(token) for token in known}
    orphans: dict[tuple[str, str], set[str]] = {}
    for name, info in view.nodes.items():
        if info.claim and info.claim not in claims and info.pool and not info.state.ready and view.empty(name):
            orphans.setdefault((info.pool, info.claim), set()).add(info.unit or name)
    for (pool, claim), units in sorted(orphans.items()):
        log.warning("releasing %d unit(s) of pool %s left coming up by a deleted request (%s)",
                    len(units), pool, claim)
        try:
            await release(pool, sorted(units), claim)
        except NotLeader as exc:  # the lease was lost meanwhile: the next leader finds the same orphans
            log.warning("could not release orphaned units of pool %s: %s", pool, exc)
            return
        except ProviderError as exc:  # a classified failure (transient, fenced, refused): no traceback
            log.warning("could not release orphaned units of pool %s: %s", pool, exc)
        except Exception:
            log.exception("could not release orphaned units of pool %s", pool)
