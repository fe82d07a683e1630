"""Leader election (``gangscale.kube.lease``) against the embedded API server, on a manual clock: one winner,
take-over only after the lease duration without renewals, a leader that cannot renew stops within the renew
deadline, a released lease is taken at once, and the fence (``valid``) says no as soon as the leader may not act."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from gangscale.clock import ManualClock, Sleeps, counting_sleeps
from gangscale.kube.lease import LeaseConfig, LeaseElector, lease_seconds
from gangscale.kube.resources import LEASES
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer, Fault
from tests.conftest import wait_for

NS, NAME = "default", "gangscale"


@dataclass
class Candidate:
    elector: LeaseElector
    sleeps: Sleeps
    task: asyncio.Task[None]

    @property
    def waiting(self) -> bool:
        """Waiting for the clock (or finished): nothing it does can change before the clock moves."""
        return self.task.done() or self.sleeps.asleep > 0


@contextlib.asynccontextmanager
async def candidates(http: KubeHTTP, clock: ManualClock, *names: str) -> AsyncIterator[dict[str, Candidate]]:
    out: dict[str, Candidate] = {}
    for name in names:
        elector = LeaseElector(http, clock, LeaseConfig(NS, NAME, name))
        sleeps = Sleeps()
        out[name] = Candidate(elector, sleeps, asyncio.create_task(counting_sleeps(elector.run(), sleeps)))
    try:
        yield out
    finally:
        for c in out.values():
            c.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await c.task


async def settle(cands: dict[str, Candidate]) -> None:
    await wait_for(lambda: all(c.waiting for c in cands.values()))


async def step(clock: ManualClock, cands: dict[str, Candidate], seconds: float, by: float = 0.5) -> None:
    """Move the clock ``seconds`` in steps, letting every candidate act at each."""
    target = clock.now() + seconds
    while clock.now() < target:
        await clock.advance(min(by, target - clock.now()))
        await settle(cands)


async def lease(http: KubeHTTP) -> dict[str, object]:
    return dict((await http.request("GET", LEASES.path(NS, NAME)))["spec"])


def leaders(cands: dict[str, Candidate]) -> list[str]:
    return [name for name, c in cands.items() if c.elector.leading.is_set()]


async def test_one_candidate_wins_and_the_other_waits_while_the_leader_renews(
        http: KubeHTTP, clock: ManualClock) -> None:
    async with candidates(http, clock, "a", "b") as cands:
        await settle(cands)
        await step(clock, cands, 60)
        assert len(leaders(cands)) == 1
        winner = leaders(cands)[0]
        spec = await lease(http)
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == (winner, 15, 0)
        loser = next(n for n in cands if n != winner)
        assert cands[loser].elector.holder == winner and not cands[loser].elector.valid()
        assert cands[winner].elector.valid()


async def test_a_dead_leader_is_replaced_only_after_the_lease_duration(http: KubeHTTP, clock: ManualClock) -> None:
    async with candidates(http, clock, "a") as first:
        await settle(first)
        assert leaders(first) == ["a"]
    # "a" is gone without releasing (killed): its last renewal is now.
    died = clock.now()
    async with candidates(http, clock, "b") as second:
        await settle(second)
        taken = None
        while taken is None:
            await step(clock, second, 0.5)
            if second["b"].elector.leading.is_set():
                taken = clock.now()
        assert died + 15 <= taken <= died + 15 + 2 * 1.2 + 0.5  # the duration, then within one retry (jittered)
        spec = await lease(http)
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)


async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, clock: ManualClock) -> None:
    async with candidates(http, clock, "a") as cands:
        await settle(cands)
        assert leaders(cands) == ["a"]
        renewed = clock.now()
        apiserver.inject(Fault(status=500, resource="coordination.k8s.io/leases", times=None))
        fence_gone = None
        while not cands["a"].elector.lost.is_set():
            await step(clock, cands, 0.5)
            if fence_gone is None and not cands["a"].elector.valid():
                fence_gone = clock.now()
        assert fence_gone is not None and fence_gone <= renewed + 10
        assert clock.now() <= renewed + 10 + 2  # it gave up at its first failed try past the deadline
        assert not cands["a"].elector.leading.is_set() and cands["a"].task.done()


async def test_a_candidate_the_server_refuses_the_lease_says_so_after_a_lease_duration(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, clock: ManualClock) -> None:
    """RBAC without the Lease (or a namespace that does not exist): the replica could never lead, so its trouble is
    reported (``/readyz`` fails on it) once a whole lease duration of attempts failed; one answer clears it."""
    refusal = apiserver.inject(Fault(status=403, resource="coordination.k8s.io/leases", times=None))
    async with candidates(http, clock, "a") as cands:
        await settle(cands)
        elector = cands["a"].elector
        await step(clock, cands, 14)
        assert elector.trouble() is None and not elector.leading.is_set()
        await step(clock, cands, 2)
        trouble = elector.trouble()
        assert trouble is not None and trouble.startswith(f"the leader lease {NS}/{NAME} could not be read or written")
        assert "403" in trouble

        apiserver.faults.faults.remove(refusal)
        await step(clock, cands, 3)
        assert elector.trouble() is None and elector.leading.is_set()


async def test_a_released_lease_is_taken_at_the_next_try(http: KubeHTTP, clock: ManualClock) -> None:
    async with candidates(http, clock, "a", "b") as cands:
        await settle(cands)
        winner = leaders(cands)[0]
        other = next(n for n in cands if n != winner)
        await step(clock, cands, 4)
        cands[winner].task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await cands[winner].task
        await cands[winner].elector.release()
        released = await lease(http)
        assert (released["holderIdentity"], released["leaseTransitions"]) == ("", 0)
        await step(clock, cands, 3)  # one retry period and its jitter: far less than the lease duration
        assert leaders(cands) == [other]
        # A hand-over after a release counts as one, as client-go counts it (any acquire by a non-leader).
        assert (await lease(http))["leaseTransitions"] == 1


@pytest.mark.parametrize("bad", [(0.0, 10.0, 15.0), (2.0, 15.0, 15.0), (11.0, 10.0, 15.0)])
def test_timings_must_nest(bad: tuple[float, float, float]) -> None:
    retry, renew, duration = bad
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig(NS, NAME, "a", lease_duration=duration, renew_deadline=renew, retry_period=retry)


@pytest.mark.parametrize(
    ("duration", "written"), [(15.0, 15), (1.5, 2), (2.0, 2)], ids=["default", "fraction", "whole"]
)
def test_the_recorded_duration_is_never_shorter_than_the_leaders(duration: float, written: int) -> None:
    assert lease_seconds(LeaseConfig(NS, NAME, "me", duration, duration / 2, duration / 4)) == written
