"""ManualClock and wait_event: deadlines are absolute, so a sleeper that starts late still wakes on time."""

from __future__ import annotations

import asyncio

from gangscale.clock import ManualClock, Sleeps, counting_sleeps, detached_context, wait_event


async def test_sleepers_wake_in_deadline_order_as_the_clock_passes_them() -> None:
    clock = ManualClock(start=100.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, deadline: float) -> None:
        await clock.sleep_until(deadline)
        woke.append((name, clock.now()))

    tasks = [asyncio.create_task(sleeper("late", 160.0)), asyncio.create_task(sleeper("early", 130.0))]
    await asyncio.sleep(0)
    await clock.advance(29)
    assert woke == []
    await clock.advance(40)
    assert woke == [("early", 130.0), ("late", 160.0)]
    assert clock.now() == 169.0
    await asyncio.gather(*tasks)


async def test_a_deadline_already_passed_returns_at_once_instead_of_starting_a_new_wait() -> None:
    clock = ManualClock(start=100.0)
    await clock.advance(50)
    await asyncio.wait_for(clock.sleep_until(120.0), timeout=1)  # a hang guard: it must not wait at all
    assert clock.sleepers == 0


async def test_wait_event_ends_at_the_deadline_or_when_the_event_is_set() -> None:
    clock = ManualClock(start=0.0)
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_event(clock, event, deadline=10.0))
    await asyncio.sleep(0)
    await clock.advance(10)
    assert await waiting is False

    waiting = asyncio.create_task(wait_event(clock, event, deadline=100.0))
    await asyncio.sleep(0)
    event.set()
    assert await waiting is True
    assert clock.sleepers == 0  # the deadline's sleeper was cancelled


async def test_a_jobs_sleeps_count_its_gathered_children_but_not_the_timers_it_leaves_behind() -> None:
    """``counting_sleeps``: a job is waiting on the clock while any of its tasks sleeps on it; a task started
    with ``detached_context`` (a timer that outlives the job) is not counted."""
    clock = ManualClock(start=0.0)
    sleeps = Sleeps()
    timer_started = asyncio.Event()
    timers: list[asyncio.Task[None]] = []

    async def job() -> str:
        timers.append(asyncio.create_task(clock.sleep_until(100.0), context=detached_context()))
        timer_started.set()
        await asyncio.gather(clock.sleep_until(10.0), clock.sleep_until(20.0))
        return "done"

    task = asyncio.create_task(counting_sleeps(job(), sleeps))
    await timer_started.wait()
    await asyncio.sleep(0)
    assert sleeps.asleep == 2  # the two gathered sleeps, not the timer
    await clock.advance(10)
    assert sleeps.asleep == 1
    await clock.advance(10)
    assert await task == "done" and sleeps.asleep == 0
    assert not timers[0].done()
    await clock.advance(80)
    await timers[0]
    assert sleeps.asleep == 0
