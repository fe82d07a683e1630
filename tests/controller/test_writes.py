"""The fewest writes the contract allows, counted: status applies and Events per ProvisioningRequest from its
creation to its outcome.

Each write has a reason to be there:

- a scale-up: (1) ``Accepted`` with ``Provisioned=False/ScaleUpInProgress`` and the recorded intent, in one
  apply, before the provider is called (crash safety, DESIGN decision 12); (2) the units obtained, with the time
  the nodes must be Ready by, while they come up (Kueue shows this message on the admission check); (3)
  ``Provisioned=True`` once every node is Ready. Events: ``ScaleUp`` and ``Provisioned``.
- capacity that is already there: ``Accepted`` and ``Provisioned=True/CapacityIsFound`` in one apply, one Event.
- capacity not found: ``Accepted`` and ``Provisioned=False/CapacityIsNotFound`` in one apply, one Event; a
  retry that finds nothing new writes only the new "Next attempt at" time, and no Event.

The old loop wrote ``Accepted`` on its own first: four applies for a scale-up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.controller.harness import Cluster, running_cluster

CHECK = "check-capacity.gangscale.io"
ATOMIC = "atomic-scale-up.gangscale.io"


def writes(cl: Cluster, name: str) -> Counter[str]:
    """The controller's writes to the ProvisioningRequest ``name``, by method and (sub)resource."""
    return Counter(f"{r.method} {r.resource}" + (f"/{r.subresource}" if r.subresource else "")
                   for r in cl.server.requests
                   if r.user_agent == "gangscale" and r.method != "GET" and r.resource == "provisioningrequests"
                   and r.name == name)


async def events_about(cl: Cluster, name: str) -> list[str]:
    found = await cl.http.request("GET", "/api/v1/namespaces/default/events")
    return [e["reason"] for e in found["items"] if e["involvedObject"].get("name") == name]


@dataclass(frozen=True)
class Case:
    id: str
    template: dict[str, str]
    cls: str
    outcome: tuple[str, str, str]
    applies: int
    events: list[str]
    #: Seconds of clock to let pass after the outcome (retries that find nothing new).
    then: float = 0.0


CASES = [
    Case("scale-up", {"cpu": "12"}, ATOMIC, ("Provisioned", "True", "CapacityIsProvisioned"), 3,
         ["ScaleUp", "Provisioned"]),
    Case("fits", {"cpu": "2"}, ATOMIC, ("Provisioned", "True", "CapacityIsFound"), 1, ["Provisioned"]),
    Case("not-found-then-retried", {"cpu": "64"}, CHECK, ("Provisioned", "False", "CapacityIsNotFound"), 3,
         ["CapacityNotFound"], then=60 + 120),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_writes_per_request(tmp_path: Path, case: Case) -> None:
    async with running_cluster(tmp_path) as cl:
        await cl.ready_node("n1", {"cpu": "8", "memory": "32Gi", "pods": "110"})
        await cl.template("pod", case.template)
        await cl.provreq("pr", ("pod", 1), cls=case.cls)
        if case.outcome[2] == "CapacityIsProvisioned":
            await cl.wait_condition("pr", "Provisioned", "False", "ScaleUpInProgress")
            await cl.advance_stepwise(30)
        await cl.wait_condition("pr", *case.outcome)
        await cl.advance_stepwise(case.then)
        await cl.idle()
        assert writes(cl, "pr") == Counter({"PATCH provisioningrequests/status": case.applies})
        assert await events_about(cl, "pr") == case.events
