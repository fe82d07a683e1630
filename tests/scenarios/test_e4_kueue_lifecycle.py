"""anchors.md §E.4 scenario 8: Kueue's retry lifecycle around gangscale, with Kueue emulated.

The cluster is ``tests/e2e/harness.py``: the embedded API server, Kueue's core and its provisioning admission
check (``gangscale.sim.kueue``), the simulated cloud and the real controller on one ManualClock. Kueue creates
the ProvisioningRequests (``<workload>-<check>-<attempt>``), retries and deletes them; gangscale only writes
their status. ``tests/e2e/test_kueue_retries.py`` checks Kueue's side of each step in detail (provreq-spec §7
scenarios 29-32).
"""

from __future__ import annotations

from pathlib import Path

from gangscale.controller.logic.settings import Settings
from gangscale.kube.resources import NODES, PROVREQS, WORKLOADS
from gangscale.timefmt import parse_rfc3339
from tests.e2e.harness import (
    CHECK_NAME,
    E2E,
    PARAM_PREFIX,
    admission_check,
    cluster,
    cluster_queue,
    conditions,
    is_true,
    name_of,
    pod_set,
    prc,
    workload,
)
from tests.scenarios.support import CONTROLLER_AGENT, JSON, History, logged, watching

MANUAL = "manual"
BOOKING_TTL = 600.0
ATTEMPTS = ("wl-prov-1", "wl-prov-2", "wl-prov-3")


def condition_of(pr: JSON, ctype: str) -> tuple[str, str, str] | None:
    got = conditions(pr).get(ctype)
    return None if got is None else (got["status"], got["reason"], got["lastTransitionTime"])


async def ever(history: History, name: str, ctype: str) -> bool:
    """Whether some version of ``name`` the watch saw had ``ctype=True`` (Kueue may delete it right after)."""
    return any((condition_of(pr, ctype) or ("",))[0] == "True" for pr in history.versions(name))


async def gone(e: E2E, name: str) -> bool:
    return await e.request(name) is None


def seconds(stamp: str) -> float:
    value = parse_rfc3339(stamp)
    assert value is not None
    return value


async def gangscale_event_uids(e: E2E) -> dict[str, set[str]]:
    """For each object gangscale wrote Events about: the uids those Events name."""
    listed = await e.sim.http.request("GET", "/api/v1/namespaces/default/events")
    out: dict[str, set[str]] = {}
    for event in listed.get("items") or []:
        if (event.get("source") or {}).get("component") == "gangscale":
            involved = event["involvedObject"]
            out.setdefault(involved["name"], set()).add(involved["uid"])
    return out


async def admit_manually(e: E2E) -> None:
    """The second admission check turns Ready, as its own controller would write it."""
    await e.apply_status(WORKLOADS, "wl", "Workload", {"admissionChecks": [
        {"name": MANUAL, "state": "Ready", "message": "ready by the test",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "example.com/manual-check")


async def test_e4_08_kueue_retry_lifecycle(tmp_path: Path) -> None:
    """§E.4 scenario 8: attempt ``-1`` gets ``Failed``, Kueue deletes it and creates ``-2``; ``-2``'s booking
    expires; ``-3`` is provisioned and its capacity is revoked while the workload runs.

    The Workload needs 2 GPU nodes and carries ``noRetry``; a second admission check (served by the test)
    keeps it from being admitted until the test says so. Proven here:

    - *attempts are independent objects keyed by UID*: each attempt name was created once with one uid, the
      Events gangscale wrote about it name that uid, its conditions are its own (``-3`` starts from
      ``Accepted`` and ``CapacityIsFound``, nothing of ``-2``'s booking), and no write of gangscale reached an
      attempt after Kueue deleted it.
    - *never resurrects a deleted PR*: ``-1`` and ``-2`` (and, after the rejection, ``-3``) are gone at the end
      and were each added once.
    - *releases holds on ``BookingExpired`` after 10 min*: ``-2`` is ``Provisioned`` on 2 new nodes and, the
      Workload not admitted, gets ``BookingExpired=True/CapacityReservationTimeExpired`` exactly 10 min later;
      those nodes are then free: ``-3`` is ``Provisioned=True/CapacityIsFound`` on them, with no new scale-up.
    - *``CapacityRevoked`` mid-run*: the Workload admitted and running on ``-3``'s capacity, one of its nodes is
      deleted; gangscale sets ``CapacityRevoked=True/BookedNodeRemoved`` naming it, and Kueue rejects the check
      and deactivates the Workload.
    - *never writes Workload admission checks*: the API server's request log has no write of gangscale's to any
      Workload; the check states (Retry, Ready, Retry, Ready, Rejected) are Kueue's.

    ``-1`` fails for real: the pool is out of stock and ``noRetry`` asks for ``Failed`` instead of
    ``Provisioned=False`` (README, "PR parameters gangscale reads").
    """
    # The pool's stockout backoff (30 s here) ends before Kueue's first retry (60 s): with noRetry, a request
    # planned while the pool is backed off would fail too.
    settings = Settings(batch_idle=0.0, batch_max=0.0, pool_backoff_initial=30.0)
    async with cluster(tmp_path, settings=settings, stock={"gpu": 0}) as e, \
            watching(e.sim.http, PROVREQS) as prs:
        await e.setup(config=prc(limit=3, base=60),
                      checks=[admission_check(MANUAL, controller="example.com/manual")],
                      cq=cluster_queue(checks=(CHECK_NAME, MANUAL)))
        await e.activate_check(MANUAL)
        await e.create(WORKLOADS, workload("wl", [pod_set("workers", 2)],
                                           annotations={f"{PARAM_PREFIX}noRetry": "true"}))

        await e.until(lambda: ever(prs, ATTEMPTS[0], "Failed"), within=60, what="attempt 1 Failed")
        failed = next(pr for pr in prs.versions(ATTEMPTS[0]) if condition_of(pr, "Failed"))
        assert (condition_of(failed, "Failed") or ("",))[:2] == ("True", "CapacityIsNotFound")
        e.provider.set_stock("gpu", None)
        await e.until(lambda: gone(e, ATTEMPTS[0]), within=60, what="attempt 1 deleted by Kueue")

        await e.until(lambda: ever(prs, ATTEMPTS[1], "BookingExpired"), within=1200,
                      what="attempt 2 booked, then expired")
        second = next(pr for pr in prs.versions(ATTEMPTS[1]) if condition_of(pr, "BookingExpired"))
        provisioned, expired = condition_of(second, "Provisioned"), condition_of(second, "BookingExpired")
        assert provisioned is not None and provisioned[:2] == ("True", "CapacityIsProvisioned")
        assert expired is not None and expired[:2] == ("True", "CapacityReservationTimeExpired")
        assert seconds(expired[2]) - seconds(provisioned[2]) == BOOKING_TTL
        booked_nodes = sorted(name_of(n) for n in await e.nodes())
        assert len(booked_nodes) == 2

        await e.until(e.ready, within=600, what="attempt 3 Ready")
        third = await e.request(ATTEMPTS[2])
        assert third is not None
        found = condition_of(third, "Provisioned")
        assert found is not None and found[:2] == ("True", "CapacityIsFound")
        assert "BookingExpired" not in conditions(third)
        assert sorted(name_of(n) for n in await e.nodes()) == booked_nodes
        assert [(c.pool, c.units, c.ok) for c in e.provider.calls] == [("gpu", 2, False), ("gpu", 2, True)]

        await admit_manually(e)
        await e.until(e.admitted, within=60, what="admitted")
        await e.delete(NODES, booked_nodes[0])
        await e.until(e.deactivated, within=60, what="deactivated after the revocation")
        revoked = next(pr for pr in prs.versions(ATTEMPTS[2]) if condition_of(pr, "CapacityRevoked"))
        assert (condition_of(revoked, "CapacityRevoked") or ("",))[:2] == ("True", "BookedNodeRemoved")
        assert booked_nodes[0] in conditions(revoked)["CapacityRevoked"]["message"]
        assert e.check_history() == ["Retry", "Ready", "Retry", "Ready", "Rejected"]

        # Judged from the API server and the watch: identity, no resurrection, no Workload writes.
        await e.settle()
        assert await e.requests() == []
        uids = {name: prs.uids(name) for name in ATTEMPTS}
        assert all(len(u) == 1 for u in uids.values()) and len(set().union(*uids.values())) == 3
        assert all(prs.added(name) == 1 for name in ATTEMPTS)
        events = await gangscale_event_uids(e)
        assert all(events.get(name, set()) <= uids[name] for name in ATTEMPTS)
        assert events[ATTEMPTS[0]] == uids[ATTEMPTS[0]]  # the Failed event of attempt 1
        for name in ATTEMPTS:
            deleted_at = next(r.time for r in logged(e.sim.server, verb="delete", resource="provisioningrequests")
                              if r.name == name)
            late = [r for r in logged(e.sim.server, verb="*", resource="provisioningrequests",
                                      user_agent=CONTROLLER_AGENT) if r.name == name and r.time > deleted_at]
            assert all(r.status == 404 for r in late), late
        assert logged(e.sim.server, verb="*", resource="workloads", user_agent=CONTROLLER_AGENT) == []
        assert not is_true(await e.workload(), "Admitted")

