"""Every event gangscale records is a write of its own, asked of the fence before it leaves (chaos seed 27071: the
second of two events left after the lease had passed to another replica)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gangscale.clock import ManualClock
from gangscale.controller.effects import Effects


class Recorder:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def record(self, obj: Any, event_type: str, reason: str, message: str, now: float) -> None:
        self.reasons.append(reason)


async def test_the_fence_is_asked_before_each_event() -> None:
    held = iter([True, False, True])
    actuator = SimpleNamespace(fence=lambda: next(held))
    recorder = Recorder()
    effects = Effects(actuator, recorder, ManualClock(0.0), dry_run=False)  # type: ignore[arg-type]
    await effects.record({}, [("Normal", "ScaleUp", "a"), ("Normal", "Provisioned", "b"), ("Normal", "Late", "c")])
    assert recorder.reasons == ["ScaleUp"]
