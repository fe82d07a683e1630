"""Is what the provider handed back the whole of what a scale-up step asked for? (DESIGN decision 4)

Checked before any condition is written about it: after an obtain, after a lookup that recovers a scale-up
following a restart, and again when ``Provisioned=True`` is about to be written. A short, foreign or
incomplete answer is a failed step, never a smaller success: the scale-up is released whole and re-planned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangscale.controller.logic.record import Step
from gangscale.model.nodepool import NodePool
from gangscale.providers.base import Obtained


def step_problem(step: Step, got: Obtained | None, pool: NodePool | None) -> str | None:
    """Why ``got`` is not every unit of ``step``, whole; ``None`` when it is."""
    if got is None:
        return f"the provider has no units under token {step.token}"
    if got.token != step.token or got.pool != step.pool:
        return f"the provider answered for token {got.token} of pool {got.pool}, not {step.token} of {step.pool}"
    ids = [unit.unit_id for unit in got.units]
    if len(ids) != step.units or len(set(ids)) != len(ids):
        return f"{step.pool}: the provider has {len(set(ids))} of the {step.units} units asked for"
    if got.incomplete:
        return (f"{step.pool}: {len(got.incomplete)} of {step.units} units are not whole "
                f"({', '.join(sorted(got.incomplete)[:5])})")
    if pool is not None:
        short = [f"{unit.unit_id} has {len(set(unit.nodes))}" for unit in got.units
                 if len(set(unit.nodes)) != pool.nodes_per_unit]
        if short:
            return f"{step.pool}: units of {pool.nodes_per_unit} nodes: " + ", ".join(short[:5])
    return None


def scale_up_problems(steps: Sequence[Step], obtained: Mapping[str, Obtained],
                      pools: Mapping[str, NodePool]) -> list[str]:
    """Every reason the obtained units (by token) fall short of the steps; empty when the scale-up is whole."""
    problems = [step_problem(step, obtained.get(step.token), pools.get(step.pool)) for step in steps]
    return [problem for problem in problems if problem is not None]

