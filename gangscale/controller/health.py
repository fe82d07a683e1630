"""What ``/healthz`` and ``/readyz`` say about the loop, and what the loop needs of leader election.

Liveness fails only when restarting the process would help: the loop stopped, or no pass ran for longer than
``--max-inactivity`` (and twice the resync period). Readiness fails while the controller should not be trusted
to act: the API server silent past ``--api-unreachable-timeout``, a watch stale (:meth:`Reflector.trouble`),
the first lists not done, recorded scale-ups not reconciled yet, or, on a standby replica, a lease it cannot
take part in. A standby that is synced and could take over is ready (it serves traffic as a hot spare).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Protocol

from gangscale.kube.reflector import Reflector
from gangscale.timefmt import rfc3339


class Leadership(Protocol):
    """What the loop needs of leader election (``gangscale.kube.lease.LeaseElector``)."""

    leading: asyncio.Event
    #: Who holds the lease, as last seen.
    holder: str

    def valid(self) -> bool:
        """Whether this process may act now."""
        ...

    def trouble(self) -> str | None:
        """Why this process cannot take part in the election (None: it can)."""
        ...


def stale_watches(reflectors: Iterable[Reflector[Any]], bound: float) -> list[str]:
    """Why a cache the decisions read is stale: a reflector that stopped, or has failed for longer than ``bound``
    (``--api-unreachable-timeout``) without progress, while the other watches keep the API server's last answer
    fresh, so nothing else would notice."""
    return [why for reflector in reflectors if (why := reflector.trouble(bound)) is not None]


def liveness(*, failed: BaseException | None, ready: bool, last_pass: float | None, now: float,
             max_silence: float) -> tuple[bool, str]:
    if failed is not None:
        return False, f"the loop stopped: {failed}"
    if ready and last_pass is not None and now - last_pass > max_silence:
        return False, f"no pass since {rfc3339(last_pass)}"
    return True, "ok"


def readiness(*, api_silent: float, api_timeout: float, stale: list[str], ready: bool, synced: bool,
              leader: Leadership | None, not_listed: list[str]) -> tuple[bool, str]:
    if api_silent > api_timeout:
        return False, f"the API server has not answered for {api_silent:.0f}s"
    if stale:
        return False, "; ".join(stale) + " (nothing is decided on a stale cache)"
    if ready:
        return True, "ok (leader)" if leader is not None else "ok"
    if synced and leader is not None and not leader.leading.is_set():
        trouble = leader.trouble()
        if trouble is not None:
            return False, trouble
        return True, f"standby: {leader.holder or 'nobody'} holds the leader lease"
    return False, ("waiting for the first list of " + ", ".join(not_listed)) if not_listed else \
        "reconciling recorded scale-ups"
