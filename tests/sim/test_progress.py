"""Progress on stderr while a demo run goes: when it writes (an injected wall clock, no sleeping), what it says,
and how it leaves the terminal."""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass, field

import pytest

from gangscale.sim.progress import LIVE_INTERVAL, LOG_INTERVAL, Progress, Status, Tally, status_line, watch
from gangscale.sim.world import FINISHED, SCALE_DOWN, SCALE_UP, Timeline


class FakeWall:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def status(simulated: float, finished: int = 0, nodes: int = 0, wall: float = 0.0) -> Status:
    return Status(mode="gangscale", simulated=simulated, finished=finished, workloads=3, nodes=nodes, wall=wall)


def test_the_status_line_says_simulated_time_workloads_finished_and_nodes() -> None:
    assert status_line(status(900, 1, 6, 2.04)) == \
        "gangscale: t=0:15:00 simulated · 1/3 workloads finished · 6 nodes · 2.0 s"
    assert status_line(status(61, nodes=1), wall=False) == \
        "gangscale: t=0:01:01 simulated · 0/3 workloads finished · 1 node"


def test_a_terminal_gets_one_line_rewritten_in_place_and_erased_at_the_end() -> None:
    wall, term = FakeWall(), Terminal()
    progress = Progress.for_stream(term, quiet=False)
    assert progress is not None and progress.live and progress.interval == LIVE_INTERVAL
    progress.wall = wall
    progress.start()
    assert not progress.show(status(10))  # too soon after the start
    wall.now += LIVE_INTERVAL
    assert progress.show(status(60, nodes=2))
    wall.now += LIVE_INTERVAL / 2
    assert not progress.show(status(120))
    wall.now += LIVE_INTERVAL
    assert progress.show(status(180))
    progress.done()
    out = term.getvalue()
    assert "\n" not in out
    assert out.count("\r") == 4  # two statuses, then the erasure (a carriage return either side)
    assert out.split("\r")[1].startswith("gangscale: t=0:01:00 simulated")
    assert out.endswith("\r") and set(out.split("\r")[-2]) == {" "}


def test_a_log_gets_a_line_every_interval_and_only_when_something_changed() -> None:
    wall, log = FakeWall(), io.StringIO()
    progress = Progress.for_stream(log, quiet=False)
    assert progress is not None and not progress.live and progress.interval == LOG_INTERVAL
    progress.wall = wall
    progress.start()
    for step in range(1, 4):
        wall.now += LOG_INTERVAL
        progress.show(status(60 * min(step, 2), wall=step * LOG_INTERVAL))
    progress.done()
    assert log.getvalue().splitlines() == [
        "gangscale demo: gangscale: t=0:01:00 simulated · 0/3 workloads finished · 0 nodes · 5.0 s",
        "gangscale demo: gangscale: t=0:02:00 simulated · 0/3 workloads finished · 0 nodes · 10.0 s",
    ]


def test_quiet_shows_no_progress() -> None:
    assert Progress.for_stream(Terminal(), quiet=True) is None


def test_the_tally_reads_each_new_entry_once() -> None:
    tl = Timeline(0.0)
    tally = Tally(["default/a", "default/b"])
    tl.add(1, SCALE_UP, "pool", "", nodes=["n1", "n2", "n3"])
    tl.add(2, FINISHED, "default/a", "")
    tally.read(tl.entries)
    tally.read(tl.entries)
    assert (tally.nodes, tally.finished) == (3, {"default/a"})
    tl.add(3, SCALE_DOWN, "pool", "", nodes=["n1"])
    tl.add(4, FINISHED, "other/c", "")
    tally.read(tl.entries)
    assert (tally.nodes, tally.finished) == (2, {"default/a"})


@dataclass
class FakeRun:
    now: float
    timeline: Timeline = field(default_factory=lambda: Timeline(0.0))


def test_watch_reports_the_running_cluster_on_the_injected_clock() -> None:
    wall, log = FakeWall(), io.StringIO()
    progress = Progress(log, live=False, interval=1.0, wall=wall)
    run = FakeRun(now=1000.0)
    ticks = 0

    async def sleep(_: float) -> None:
        nonlocal ticks
        ticks += 1
        wall.now += 0.5
        run.now += 30
        if ticks == 3:
            run.timeline.add(run.now, SCALE_UP, "pool", "", nodes=["n1", "n2"])
        if ticks == 6:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(watch(run, progress, "baseline", ["default/a"], sleep=sleep))
    assert log.getvalue().splitlines() == [
        "gangscale demo: baseline: t=0:01:00 simulated · 0/1 workloads finished · 0 nodes · 1.0 s",
        "gangscale demo: baseline: t=0:02:00 simulated · 0/1 workloads finished · 2 nodes · 2.0 s",
    ]
