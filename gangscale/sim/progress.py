"""Progress of a demo run while it goes, on stderr (stdout keeps only the tables, or the JSON).

What a user sees:

- **stderr is a terminal**: one status line, rewritten in place (``\\r``) at most every
  :data:`LIVE_INTERVAL` seconds of wall time and erased when the run ends, so that nothing of it is left
  between the tables: ``gangscale: t=0:15:00 simulated · 0/3 workloads finished · 4 nodes · 1.2 s``.
- **stderr is a file or a pipe** (CI logs): the same status as a line of its own, at most every
  :data:`LOG_INTERVAL` seconds of wall time and only when it changed (a run shorter than that prints none).
- ``--quiet``: nothing.

The status is read from the running cluster (simulated time, the timeline's ``finished`` entries and the nodes
created minus those deleted); :class:`Progress` decides when to write, on an injectable wall clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

from gangscale.sim.report import clock
from gangscale.sim.runner import RunResult, run_scenario
from gangscale.sim.scenario import Scenario
from gangscale.sim.world import FINISHED, SCALE_DOWN, SCALE_UP, Entry, Timeline

#: Wall seconds between rewrites of the live line on a terminal, and between lines otherwise.
LIVE_INTERVAL = 0.2
LOG_INTERVAL = 5.0
#: Wall seconds between looks at the running cluster.
TICK = 0.1


class LiveRun(Protocol):
    """What progress reads of a running cluster (a :class:`~gangscale.sim.driver.SimCluster`)."""

    @property
    def now(self) -> float: ...

    @property
    def timeline(self) -> Timeline: ...


@dataclass(frozen=True)
class Status:
    mode: str
    simulated: float  # seconds since the run started
    finished: int
    workloads: int
    nodes: int
    wall: float  # wall seconds since the run started


def status_line(s: Status, *, wall: bool = True) -> str:
    line = (f"{s.mode}: t={clock(s.simulated)} simulated · {s.finished}/{s.workloads} workloads finished · "
            f"{s.nodes} node{'' if s.nodes == 1 else 's'}")
    return f"{line} · {s.wall:.1f} s" if wall else line


class Tally:
    """Finished workloads and nodes up, kept up to date from a growing timeline (each entry is read once)."""

    def __init__(self, workloads: Sequence[str]) -> None:
        self.workloads = set(workloads)
        self.finished: set[str] = set()
        self.nodes = 0
        self._read = 0

    def read(self, entries: Sequence[Entry]) -> None:
        for e in entries[self._read:]:
            if e.kind == FINISHED and e.subject in self.workloads:
                self.finished.add(e.subject)
            elif e.kind in (SCALE_UP, SCALE_DOWN):
                self.nodes += len(e.data.get("nodes", ())) * (1 if e.kind == SCALE_UP else -1)
        self._read = len(entries)


class Progress:
    """Writes statuses to ``stream``: live (one line rewritten in place) or as log lines, never more often than
    ``interval`` seconds of ``wall`` time."""

    def __init__(self, stream: TextIO, *, live: bool, interval: float | None = None,
                 wall: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.live = live
        self.interval = interval if interval is not None else (LIVE_INTERVAL if live else LOG_INTERVAL)
        self.wall = wall
        self._last: float | None = None
        self._shown = 0  # length of the live line on screen
        self._logged = ""  # the last status logged (wall time aside)

    @classmethod
    def for_stream(cls, stream: TextIO, *, quiet: bool) -> Progress | None:
        """None with ``--quiet``; live when ``stream`` is a terminal."""
        if quiet:
            return None
        isatty = getattr(stream, "isatty", None)
        return cls(stream, live=bool(isatty and isatty()))

    def start(self) -> None:
        """A run begins: the first status waits a whole interval (a short run shows none)."""
        self._last = self.wall()

    def show(self, status: Status) -> bool:
        """Write ``status`` if an interval has passed since the last write (or the start), and, as a log line,
        only if it says something new; True if written."""
        now = self.wall()
        if self._last is not None and now - self._last < self.interval:
            return False
        if self.live:
            line = status_line(status)
            self.stream.write("\r" + line.ljust(self._shown))
            self._shown = len(line)
        elif status_line(status, wall=False) == self._logged:
            return False
        else:
            self._logged = status_line(status, wall=False)
            self.stream.write(f"gangscale demo: {status_line(status)}\n")
        self._last = now
        self.stream.flush()
        return True

    def done(self) -> None:
        """The run ended: erase the live line so that what follows starts on a clean line."""
        if self.live and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
        self._shown = 0
        self._logged = ""


def status_of(sim: LiveRun, tally: Tally, mode: str, start: float, wall_start: float, wall: float) -> Status:
    tally.read(sim.timeline.entries)
    return Status(mode=mode, simulated=sim.now - start, finished=len(tally.finished),
                  workloads=len(tally.workloads), nodes=tally.nodes, wall=wall - wall_start)


async def watch(sim: LiveRun, progress: Progress, mode: str, workloads: Sequence[str], *,
                sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Show the cluster's status every :data:`TICK` (``progress`` drops what comes too soon) until cancelled."""
    tally, start, wall_start = Tally(workloads), sim.now, progress.wall()
    progress.start()
    while True:
        await sleep(TICK)
        progress.show(status_of(sim, tally, mode, start, wall_start, progress.wall()))


async def run_with_progress(scenario: Scenario, *, mode: str, speed: float | None, provider: str,
                            progress: Progress | None) -> RunResult:
    """:func:`~gangscale.sim.runner.run_scenario`, with ``progress`` shown while the run goes."""
    if progress is None:
        return await run_scenario(scenario, mode=mode, speed=speed, provider=provider)
    workloads = [f"{w.namespace}/{w.name}" for w in scenario.workloads]
    try:
        return await run_scenario(scenario, mode=mode, speed=speed, provider=provider,
                                  watcher=lambda sim: watch(sim, progress, mode, workloads))
    finally:
        progress.done()
