"""The actuator's one retry policy, on a scripted provider (a plain object speaking the ``NodePoolProvider``
protocol): a transient failure of the lookup that undoes a failed scale-up is retried and the scale-up still ends
as ``ScaleUpFailed`` with everything released; a new leader's lookup of its predecessors' intents is retried until
it is answered. Found by ``hack/chaos.py --provider gke`` (seeds 7011, 7013, 7014): a 429 or 503 there escaped as
an unexpected error, dropping the record without a release, or stopped the controller."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from gangscale.clock import ManualClock
from gangscale.controller.actuator import Actuator, ScaleUpFailed
from gangscale.controller.logic.record import Step
from gangscale.observe.metrics import Metrics
from gangscale.providers.base import ErrorClass, NodeRef, Obtained, ProviderError, Unit
from tests.planner.builders import pool


def transient() -> ProviderError:
    return ProviderError(ErrorClass.TRANSIENT, "UNAVAILABLE", "try again", pool="a", rolled_back=False)


@dataclass
class Scripted:
    """Obtains succeed in pool "a" and stock out in pool "b"; lookups fail transiently ``lookup_failures`` times."""

    lookup_failures: int = 0
    name: str = "scripted"
    made: dict[str, Obtained] = field(default_factory=dict)
    released: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    lookups: int = 0

    async def start(self) -> None:
        return None

    async def obtain(self, pool_name: str, units: int, *, token: str, deadline: float) -> Obtained:
        if pool_name == "b":
            raise ProviderError(ErrorClass.STOCKOUT, "GCE_STOCKOUT", "none left", pool="b")
        got = Obtained(token, pool_name, tuple(Unit(f"{token}-{i}", (f"{token}-n{i}",)) for i in range(units)))
        self.made[token] = got
        return got

    async def lookup(self, token: str) -> Obtained | None:
        self.lookups += 1
        if self.lookup_failures > 0:
            self.lookup_failures -= 1
            raise transient()
        return self.made.get(token)

    async def release(self, pool_name: str, unit_ids: Sequence[str], *, token: str) -> None:
        self.released.append((pool_name, tuple(unit_ids)))
        self.made.pop(token, None)

    async def aclose(self) -> None:
        return None

    def node_ref(self, name: str, labels: Mapping[str, str]) -> NodeRef | None:
        return None

    def claim(self, token: str) -> str:
        return token


def actuator(provider: Scripted, clock: ManualClock) -> Actuator:
    return Actuator(provider, clock, Metrics(), {"a": pool("a"), "b": pool("b")}, attempts=3)


async def settle(task: asyncio.Task[object], clock: ManualClock) -> None:
    """Move the clock from one sleep to the next until the task ends (no test sleeps)."""
    for _ in range(100):
        await asyncio.sleep(0)
        if task.done():
            return
        if clock.next_deadline is not None:
            await clock.set(clock.next_deadline)
    raise AssertionError("the call did not end")


@pytest.mark.parametrize(("failures", "released", "also"), [(0, True, []), (2, True, []),
                                                             (3, False, ["UNAVAILABLE"])],
                         ids=["lookup-answers", "lookup-retried", "lookup-keeps-failing"])
async def test_a_failed_scale_up_is_undone_despite_transient_lookup_failures(
        failures: int, released: bool, also: list[str]) -> None:
    clock = ManualClock()
    provider = Scripted(lookup_failures=failures)
    steps = [Step("a", 2, "tok-a"), Step("b", 1, "tok-b")]
    task = asyncio.create_task(actuator(provider, clock).obtain_all(steps, clock.now() + 600))
    await settle(task, clock)  # type: ignore[arg-type]
    with pytest.raises(ScaleUpFailed) as failed:
        task.result()
    assert [f.code for f in failed.value.failures] == ["GCE_STOCKOUT", *also]
    assert (provider.released == [("a", ("tok-a-0", "tok-a-1"))]) is released


async def test_a_new_leaders_lookup_is_retried_until_it_is_answered() -> None:
    clock = ManualClock()
    provider = Scripted(lookup_failures=7)  # more than the actuator's attempts
    provider.made["tok"] = Obtained("tok", "a", (Unit("u", ("n",)),))
    task = asyncio.create_task(actuator(provider, clock).lookup("tok", until_answered=True))
    await settle(task, clock)  # type: ignore[arg-type]
    assert task.result() == provider.made["tok"] and provider.lookups == 8
