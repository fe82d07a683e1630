"""Pure planning functions: fit, pack, ``plan(snapshot, gangs, now) -> decisions``, explain.

No I/O, no clock, no client: the layering contract (``.importlinter``) enforces it.
"""

from gangscale.planner.explain import explain, summarize
from gangscale.planner.plan import plan

__all__ = ["explain", "plan", "summarize"]
