"""What the planner decided for one gang, as plain data (rendered for humans by ``gangscale.planner.explain``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gangscale.model.policy import NODES, PRICE, WASTE
from gangscale.model.scheduling import Taint


class Outcome(StrEnum):
    #: Every pod fits on free capacity of Ready nodes; nothing to scale.
    FITS = "Fits"
    #: Adding the steps' units places every pod that free capacity cannot.
    SCALE_UP = "ScaleUp"
    #: No plan places every pod; the reasons say why, per pool.
    INFEASIBLE = "Infeasible"


class ReasonCode(StrEnum):
    """Why a pool could not take (part of) a gang. Stable strings: metrics and events use them."""

    SELECTOR = "NodeSelector"
    AFFINITY = "NodeAffinity"
    TAINT = "Taint"
    TOO_LARGE = "PodTooLarge"
    BACKED_OFF = "BackedOff"
    MAX_UNITS = "MaxUnits"
    QUOTA = "Quota"
    ZONE = "Zone"
    #: A topology spread constraint (``DoNotSchedule``) that no plan within the limits satisfies.
    SPREAD = "TopologySpread"
    NO_POOL = "NoPool"
    CAPACITY = "Capacity"
    INVALID = "Invalid"
    #: The gang's tiers: none of them has a pool or node, or a later tier is not open yet (a wait bound).
    TIER = "Tier"


@dataclass(frozen=True, slots=True)
class Hint:
    """What would change a :class:`PoolReason`, as data for tools (``gangscale explain``); the message says the
    same in words. Every field is optional: each reason fills those that apply to it."""

    #: Until when the pool is closed or limited (seconds since the epoch): a backoff, a stockout's ceiling.
    until: float | None = None
    #: How much the gang needs and how much is allowed, counted in ``of``.
    needed: int | None = None
    allowed: int | None = None
    #: What ``needed`` and ``allowed`` count: ``units`` of the pool, or a resource (quota, one pod's request).
    of: str = ""
    #: The taint the pods do not tolerate (a toleration of it would admit them).
    taint: Taint | None = None
    #: The pod set the reason is about, and the largest count of it that would fit, all else unchanged.
    pod_set: str = ""
    fits: int | None = None


@dataclass(frozen=True, slots=True)
class PoolReason:
    #: The pool; several names ("a, b and 3 more") for a reason that holds for each alike; "" for the gang.
    pool: str
    code: ReasonCode
    message: str
    #: Structured detail of the message; not compared (two reasons that say the same are equal).
    hint: Hint | None = field(default=None, compare=False)
    #: The capacity tier the reason was found in ("" when the gang's tiers were searched as one).
    tier: str = ""


@dataclass(frozen=True, slots=True)
class Placement:
    """``count`` pods of ``pod_set`` on the existing node ``node``."""

    pod_set: str
    node: str
    count: int


@dataclass(frozen=True, slots=True)
class ScaleStep:
    """Add ``units`` units (``nodes`` nodes) to ``pool``."""

    pool: str
    units: int
    nodes: int


@dataclass(frozen=True, slots=True)
class NewNodes:
    """``nodes`` new nodes of ``pool`` that each receive ``pods`` (pod set name, count); empty for padding."""

    pool: str
    nodes: int
    pods: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Cost:
    accelerator_waste: int = 0
    cpu_waste: int = 0
    price: float = 0.0
    nodes: int = 0

    def key(self, criteria: tuple[str, ...]) -> tuple[float, ...]:
        parts: list[float] = []
        for criterion in criteria:
            if criterion == WASTE:
                parts += [self.accelerator_waste, self.cpu_waste]
            elif criterion == PRICE:
                parts.append(round(self.price, 6))
            elif criterion == NODES:
                parts.append(self.nodes)
        return tuple(parts)


@dataclass(frozen=True, slots=True)
class Decision:
    gang: str
    outcome: Outcome
    #: The zone every node of the gang is in; ``None`` when the gang may spread (or needs no node).
    zone: str | None = None
    placements: tuple[Placement, ...] = ()
    steps: tuple[ScaleStep, ...] = ()
    new_nodes: tuple[NewNodes, ...] = ()
    cost: Cost = Cost()
    reasons: tuple[PoolReason, ...] = ()
    #: The capacity tier the gang was placed in ("" when its policy lets tiers mix, when it was not placed, or when
    #: the cluster has one tier only).
    tier: str = ""
    #: An infeasible gang waiting for a tier (a wait bound): when the next tier opens, so it is planned again then.
    wait_until: float | None = None

    @property
    def feasible(self) -> bool:
        return self.outcome is not Outcome.INFEASIBLE

    @property
    def new_node_count(self) -> int:
        return sum(step.nodes for step in self.steps)
