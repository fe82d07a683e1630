"""A scale-up that failed (``gangscale.controller.logic.reconcile.scale_up_failed``), on plain objects: which pools are
backed off and for how many units, the condition written, and when the request is planned again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.reconcile import Consumed, Context
from gangscale.controller.logic.record import OBTAINED, RELEASING, Record, Step
from gangscale.controller.logic.request import Phase, Request, RequestState, phase
from gangscale.controller.logic.scaleup import Failure, scale_up_failed
from gangscale.controller.logic.settings import Settings
from gangscale.providers.base import ErrorClass, Obtained, ProviderError, Unit
from gangscale.timefmt import rfc3339
from tests.planner.builders import pool

NOW = 1_700_000_000.0
SETTINGS = Settings()  # retry_initial 60 s, pool backoff 180 s
POOLS = {"a": pool("a"), "b": pool("b")}


class NoWorld:
    def node_present(self, name: str) -> bool:
        return False

    def node_ready(self, name: str) -> bool:
        return False

    def consumed(self, st: RequestState) -> Consumed | None:
        return None


def ctx() -> Context:
    backoffs = PoolBackoffs(SETTINGS.pool_backoff_initial, SETTINGS.pool_backoff_max, SETTINGS.pool_backoff_reset)
    return Context(NOW, SETTINGS, POOLS, backoffs, NoWorld())


def scaled_up() -> RequestState:
    """A request whose scale-up of one unit of pool a was obtained (then failed to finish)."""
    st = RequestState(Request("ns/pr", "uid-1", "provreq", "c", {"kind": "ProvisioningRequest"}, created=NOW - 100))
    st.record = Record(1, OBTAINED, NOW + 60, (Step("a", 1, "tok-a"),))
    st.obtained = {"tok-a": Obtained("tok-a", "a", (Unit("a-u0", ("a-n0",)),))}
    return st


def failure(cls: ErrorClass, pool_name: str = "a", asked: int = 4, held: int = 0, **kw: Any) -> Failure:
    return Failure(ProviderError(cls, "CODE", "oops", pool=pool_name, **kw), asked, held)


@dataclass(frozen=True)
class FailCase:
    id: str
    failures: tuple[Failure, ...]
    #: pool -> (until, ceiling given held=0)
    backed_off: dict[str, tuple[float, int]]
    fragment: str
    retry_at: float | None = None


FAILS = [
    FailCase("stockout-leaves-asked-minus-one", (failure(ErrorClass.STOCKOUT),), {"a": (NOW + 180, 3)},
             f"pool a: stockout (CODE: oops); at most 3 more units of it until {rfc3339(NOW + 180)}; re-planning"),
    FailCase("stockout-with-available", (failure(ErrorClass.STOCKOUT, available=1),), {"a": (NOW + 180, 1)},
             f"at most 1 more unit of it until {rfc3339(NOW + 180)}"),
    FailCase("quota-of-one-unit-closes", (failure(ErrorClass.QUOTA, asked=1),), {"a": (NOW + 180, 0)},
             f"pool a: quota (CODE: oops); not used until {rfc3339(NOW + 180)}"),
    FailCase("transient-closes-whole", (failure(ErrorClass.TRANSIENT),), {"a": (NOW + 180, 0)}, "not used until"),
    FailCase("retry-after-lengthens", (failure(ErrorClass.STOCKOUT, retry_after=1000.0),), {"a": (NOW + 1000, 3)},
             f"until {rfc3339(NOW + 1000)}"),
    FailCase("all-permanent-retries-later", (failure(ErrorClass.PERMANENT), failure(ErrorClass.PERMANENT, "b")),
             {"a": (NOW + 180, 0), "b": (NOW + 180, 0)}, "pool b: permanent (CODE: oops); not used until",
             retry_at=NOW + 60),
    FailCase("mixed-re-plans-now", (failure(ErrorClass.PERMANENT), failure(ErrorClass.STOCKOUT, "b")),
             {"a": (NOW + 180, 0), "b": (NOW + 180, 3)}, "; re-planning with the other pools"),
    FailCase("unknown-pool-is-not-backed-off", (failure(ErrorClass.STOCKOUT, "gone"),), {},
             "released: gone: CODE: oops; re-planning"),
]


@pytest.mark.parametrize("case", FAILS, ids=[c.id for c in FAILS])
def test_scale_up_failed(case: FailCase) -> None:
    """Failed pools are backed off (sized failures with a ceiling) and the request goes back to planning."""
    st, context = scaled_up(), ctx()
    backed = scale_up_failed(st, case.failures, context)
    assert backed == list(case.backed_off)
    assert {name: (b.until, b.ceiling) for name, b in context.backoffs.active(NOW).items()} == case.backed_off
    # Its units are released; the record stays, releasing, until none of their nodes is left (reconcile.pending).
    assert st.record is not None and st.record.phase == RELEASING
    assert (st.obtained, st.retry_at) == ({}, case.retry_at)
    cond = st.conditions[C.PROVISIONED]
    assert (cond.status, cond.reason) == ("False", C.R_NOT_FOUND)
    assert cond.message.startswith("scale-up failed and every unit it obtained was released: ")
    assert case.fragment in cond.message
    assert cond.message.endswith("re-planning with the other pools") is (case.retry_at is None)
    assert st.events == [("Warning", "ScaleUpFailed", cond.message)]


def test_a_second_sized_failure_of_one_episode_counts_the_units_held_since() -> None:
    """The second stockout, with 2 units held beyond the first, leaves min(4 - 1, 3 - 2) = 1 more unit."""
    st, context = scaled_up(), ctx()
    assert scale_up_failed(st, (failure(ErrorClass.STOCKOUT), failure(ErrorClass.STOCKOUT, held=2)), context) == [
        "a", "a"]
    assert (context.backoffs.ceiling("a", NOW, 2), context.backoffs.ceiling("a", NOW, 3)) == (1, 0)
    until = rfc3339(NOW + 180)
    assert (f"at most 3 more units of it until {until}; pool a: stockout (CODE: oops); at most 1 more unit of it "
            f"until {until}; re-planning") in st.conditions[C.PROVISIONED].message
    assert phase(st) is Phase.PENDING
