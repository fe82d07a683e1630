"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection`` does it, on the
project's own transport and a monotonic clock.

The Lease records who holds it (``spec.holderIdentity``), for how long (``leaseDurationSeconds``) and when it
was acquired and last renewed (``acquireTime``, ``renewTime``, MicroTime, for people reading it). Expiry is never
judged from those stored times, which come from another machine's wall clock: a candidate notes, on its own
monotonic clock, when it last *saw the record change*, and takes the lease only once it has seen no change for
``lease_duration``. Every write carries the Lease's ``resourceVersion``, so two candidates cannot both win: the
second write gets 409.

- A candidate tries every ``retry_period`` (with up to 20% jitter) until it holds the lease.
- The leader renews every ``retry_period``; if it has not renewed within ``renew_deadline`` of its last renewal,
  it has lost the lease: :attr:`LeaseElector.lost` is set and :meth:`LeaseElector.run` returns. The process then
  stops acting and exits non-zero (the cluster-autoscaler's and Karpenter's rule): another replica takes over
  once ``lease_duration`` has passed without a renewal, so the two never act at once.
- :meth:`LeaseElector.valid` is the fence for every side effect: true only while the leader is within
  ``renew_deadline`` of its last successful renewal (``renew_deadline`` < ``lease_duration``, so the leader stops
  before anybody else may start).
- :meth:`LeaseElector.release` (on SIGTERM) gives the lease up at once: ``holderIdentity`` empty, so the next
  candidate need not wait out the duration.

Defaults are the anchors' 15 s / 10 s / 2 s.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangscale.clock import Clock
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import LEASES
from gangscale.kube.transport import KubeHTTP

JSON = dict[str, Any]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration; got "
                             f"{self.retry_period:g}s, {self.renew_deadline:g}s, {self.lease_duration:g}s")
        if not self.identity:
            raise ValueError("leader election needs an identity")


def lease_seconds(config: LeaseConfig) -> int:
    """The whole seconds written as ``leaseDurationSeconds``: rounded up, because candidates wait out the duration
    the record states, and must never wait less than the leader believes it holds the lease."""
    return math.ceil(config.lease_duration)


def micro_time(timestamp: float) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(self, http: KubeHTTP, clock: Clock, config: LeaseConfig, *,
                 rng: random.Random | None = None) -> None:
        self.http, self.clock, self.config = http, clock, config
        self.rng = rng or random.Random()
        #: Set while this process holds the lease.
        self.leading = asyncio.Event()
        #: Set once this process held the lease and lost it.
        self.lost = asyncio.Event()
        #: Who holds the lease, as last observed ("" when nobody does).
        self.holder = ""
        self._observed: Mapping[str, Any] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0
        #: Since when every attempt has failed with an API error (None: the last one got an answer), and the last.
        self._failing_since: float | None = None
        self._failure = ""
        self._path = LEASES.path(config.namespace, config.name)

    # -- the fence --------------------------------------------------------------------------------------------------

    def valid(self) -> bool:
        """Whether this process may act now: it holds the lease and renewed it within the renew deadline."""
        return self.leading.is_set() and self.clock.monotonic() < self._renewed_at + self.config.renew_deadline

    def trouble(self) -> str | None:
        """Why this replica cannot take part in the election, once every attempt for a lease duration has failed
        (RBAC that does not allow the Lease, a namespace that does not exist): a standby that could never take
        over must not look ready."""
        since = self._failing_since
        if since is None or self.clock.monotonic() - since < self.config.lease_duration:
            return None
        return (f"the leader lease {self.config.namespace}/{self.config.name} could not be read or written for "
                f"{self.clock.monotonic() - since:.0f}s: {self._failure}")

    # -- the loop ---------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire the lease (waiting as long as it takes), then renew it until a renewal deadline is missed."""
        config = self.config
        while not await self._try():
            await self.clock.sleep(config.retry_period * (1.0 + 0.2 * self.rng.random()))
        log.info("leader election: %s holds lease %s/%s", config.identity, config.namespace, config.name)
        self.leading.set()
        while True:
            await self.clock.sleep(config.retry_period)
            while not await self._try():
                if self.clock.monotonic() >= self._renewed_at + config.renew_deadline:
                    self.leading.clear()
                    self.lost.set()
                    log.error("leader election: %s could not renew lease %s/%s within %gs; stopping",
                              config.identity, config.namespace, config.name, config.renew_deadline)
                    return
                await self.clock.sleep(config.retry_period)

    async def release(self) -> None:
        """Give the lease up (a clean stop), so that another candidate takes it at once."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        try:
            lease = await self.http.request("GET", self._path)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.config.identity:
                return
            now = micro_time(self.clock.now())
            spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now})
            await self.http.request("PUT", self._path, body={**lease, "spec": spec})
            log.info("leader election: %s released lease %s/%s", self.config.identity, self.config.namespace,
                     self.config.name)
        except ApiError as exc:
            log.warning("leader election: could not release lease %s/%s: %s", self.config.namespace,
                        self.config.name, exc)

    # -- one attempt ------------------------------------------------------------------------------------------------

    async def _try(self) -> bool:
        """One attempt to acquire or renew (client-go ``tryAcquireOrRenew``); False on any failure."""
        try:
            done = await self._acquire_or_renew()
        except ApiError as exc:
            log.warning("leader election: %s: %s", "renewing" if self.leading.is_set() else "acquiring", exc)
            if self._failing_since is None:
                self._failing_since = self.clock.monotonic()
            self._failure = str(exc)
            return False
        self._failing_since = None
        return done

    async def _acquire_or_renew(self) -> bool:
        config, now = self.config, self.clock.monotonic()
        stamp = micro_time(self.clock.now())
        try:
            lease = await self.http.request("GET", self._path)
        except ApiError as exc:
            if not exc.not_found:
                raise
            created: JSON = {"holderIdentity": config.identity, "leaseDurationSeconds": lease_seconds(config),
                             "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}
            try:
                await self.http.request("POST", LEASES.path(config.namespace), body={
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": config.name, "namespace": config.namespace}, "spec": created})
            except ApiError as conflict:
                if conflict.conflict:
                    return False  # somebody else created it first
                raise
            self._observe(created, now)
            self._renewed_at = now
            return True
        spec: JSON = dict(lease.get("spec") or {})
        if spec != self._observed:
            self._observe(spec, now)
        holder = str(spec.get("holderIdentity") or "")
        duration = float(spec.get("leaseDurationSeconds") or config.lease_duration)
        if holder and holder != config.identity and now < self._observed_at + duration:
            return False  # held by another, and seen alive within its duration
        if holder != config.identity:
            spec["acquireTime"] = stamp
            # As client-go's tryAcquireOrRenew: every acquire by a candidate that was not the holder is a transition,
            # a lease released empty (SIGTERM) included; the holder's own renewals (and its restarts) are not.
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update({"holderIdentity": config.identity, "leaseDurationSeconds": lease_seconds(config),
                     "renewTime": stamp})
        try:
            await self.http.request("PUT", self._path, body={**lease, "spec": spec})
        except ApiError as exc:
            if exc.conflict:
                return False  # the record moved under us: look again next time
            raise
        self._observe(spec, now)
        self._renewed_at = now
        return True

    def _observe(self, spec: Mapping[str, Any], now: float) -> None:
        self._observed, self._observed_at = dict(spec), now
        self.holder = str(spec.get("holderIdentity") or "")
