"""anchors.md §E.4 scenarios 6 and 7: the Kubernetes API misbehaves — watches break, writes conflict or are
throttled.

The controller runs against the embedded API server on a ManualClock (``tests/controller/harness.py``); faults
are the server's own knobs (``Fault``: ``hold``, ``status``, ``retry_after``, ``gone``; ``compact()``; closing the
watch streams); outcomes are read back from the server (objects, ``managedFields``, the request log).
Narrower tests of the same machinery: ``tests/kube/test_reflector.py``, ``tests/apiserver/test_faults.py``,
``tests/apiserver/test_fieldmanager.py``.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gangscale.aio import cancel_and_wait
from gangscale.controller.logic.record import OBTAINED
from gangscale.kube.reflector import Reflector
from gangscale.kube.resources import NODES, PROVREQS
from gangscale.retry import API_WATCH, Backoff
from gangscale.sim.apiserver import Fault
from gangscale.sim.apiserver.faults import LoggedRequest
from gangscale.sim.apiserver.resources import StorageKey
from tests.conftest import wait_for
from tests.controller.harness import NS, Cluster, running_cluster
from tests.scenarios.support import (
    CONTROLLER_AGENT,
    GPU8,
    GPU_POOL,
    JSON,
    gpu_template,
    logged,
    record,
    releases,
)

NODE_STORAGE = StorageKey("", "nodes")
PROVISION_SECONDS = 30.0
#: A Ready node outside every managed pool that holds one ``gpu8`` pod (registered by hand).
SPARE = {"cpu": "200", "memory": "1800Gi", "pods": "110", **GPU8}


async def spare_nodes(cl: Cluster, count: int) -> list[str]:
    names = [f"spare-{i}" for i in range(count)]
    for name in names:
        await cl.ready_node(name, SPARE)
    return names


def watch_versions(cl: Cluster, resource: str) -> list[int]:
    """The resourceVersion of every watch of ``resource`` the controller made that has ended (the server logs a
    request when it is over), in order."""
    return [int(r.query.get("resourceVersion") or 0)
            for r in logged(cl, verb="watch", resource=resource, user_agent=CONTROLLER_AGENT)]


# -- 6. watch breakage ----------------------------------------------------------------------------------------


async def test_e4_06_watch_breakage(tmp_path: Path) -> None:
    """§E.4 scenario 6: the first LIST is slow, streams drop mid-flight, bookmarks stop, and the server answers
    410 ``Expired`` for the stale resourceVersion, with a booked node DELETEd during the gap.

    Proven here, on the real controller:

    - *never plans from a half-synced cache (Karpenter ``Synced``)*: the controller's first LIST of Nodes is
      held in the server while every other watch has listed and a gang waits; nothing is written and nothing
      obtained, ``/readyz`` says it waits for the Nodes list. Once the list is served, the gang is placed on
      the two free nodes it shows (``CapacityIsFound``, no scale-up) — planned on the half-synced cache it
      would have scaled up.
    - *streams drop mid-flight and resume*: every watch stream is closed by the server; the reflectors of
      ProvisioningRequests and Pods watch again from their resourceVersion without a re-LIST.
    - *bookmarks stop, a DELETE happens in the gap, 410*: the Nodes re-watch is held while bookmarks are off,
      one of the gang's booked nodes is deleted and a node comes and goes, and the server forgets its history
      (``compact``); the held watch is then answered 410. The reflector re-LISTs once, emits the missed
      deletion, and the controller reports ``CapacityRevoked=True/BookedNodeRemoved`` naming that node.
    - *410 loops are bounded (unlike kr8s's same-resourceVersion restart)*: after the 410 exactly one re-LIST
      follows and the next watch starts from its newer resourceVersion (the stale one is never asked for
      again); on a reflector of its own, three 410s in a row give three re-LISTs with growing pauses between
      them (the second and third re-LIST wait: no tight loop against a server that keeps answering 410).

    Found by this scenario and fixed in ``kube/reflector.py``: a 410 straight after a re-LIST was followed by
    another re-LIST at once, so a server answering 410 to every watch got a list and a watch in a tight loop.
    """
    async with running_cluster(tmp_path, start=False) as cl:
        spares = await spare_nodes(cl, 2)
        await gpu_template(cl)
        await cl.provreq("gang", ("gpu8", 2))
        await nothing_decided_before_the_nodes_are_listed(cl)
        await a_gap_with_a_deletion_ends_in_a_410(cl, lost=spares[0])
        await repeated_410s_are_spaced_out(cl, left={spares[1]})


async def nothing_decided_before_the_nodes_are_listed(cl: Cluster) -> None:
    """The controller's first LIST of Nodes is held; every other reflector lists; then the list is served."""
    cl.server.inject(Fault(verb="list", resource="nodes", user_agent=CONTROLLER_AGENT, hold=True))
    starting = asyncio.create_task(cl.start())
    await wait_for(lambda: cl.server.faults.held)
    await wait_for(lambda: cl.controller is not None and cl.ctl.is_ready() == (
        False, "waiting for the first list of nodes"))
    for _ in range(20):  # turns of the event loop (not time): a controller that would act on half a view acts
        await asyncio.sleep(0)
    assert not cl.ctl.ready
    assert logged(cl, verb="patch", resource="provisioningrequests") == []
    assert cl.obtains() == [] and await cl.conditions("gang") == {}
    cl.server.release_held(serve=True)
    await starting
    await cl.wait_condition("gang", "Provisioned", "True", "CapacityIsFound")
    await cl.idle()
    assert cl.obtains() == []


async def a_gap_with_a_deletion_ends_in_a_410(cl: Cluster, lost: str) -> None:
    """Every stream drops; the Nodes re-watch is held (a gap) while bookmarks are off; a booked node is deleted
    and the server forgets the Nodes history; the held watch then gets 410."""
    cl.server.bookmark_interval = 1e9
    held = cl.server.inject(Fault(verb="watch", resource="nodes", user_agent=CONTROLLER_AGENT, hold=True))
    cl.server.store.close_all_watchers()
    await wait_for(lambda: held.acted == 1 and cl.server.faults.held)
    [stale] = watch_versions(cl, "nodes")  # the dropped stream's, which the held re-watch asks for again
    assert cl.ctl.nodes.resource_version == str(stale)
    await cl.http.request("DELETE", NODES.path(name=lost))
    await cl.ready_node("passing", SPARE)
    await cl.http.request("DELETE", NODES.path(name="passing"))
    cl.server.store.compact(NODE_STORAGE)  # the Nodes history is gone; nothing moved the reflector's version
    assert await cl.condition("gang", "CapacityRevoked") is None

    cl.server.release_held(serve=True)
    await cl.wait_condition("gang", "CapacityRevoked", "True", "BookedNodeRemoved")
    assert lost in (await cl.conditions("gang"))["CapacityRevoked"][2]
    await cl.idle()
    assert len(logged(cl, verb="list", resource="nodes", user_agent=CONTROLLER_AGENT)) == 2  # one after the 410
    [_, expired] = logged(cl, verb="watch", resource="nodes", user_agent=CONTROLLER_AGENT)
    assert int(expired.query["resourceVersion"]) == stale  # answered 410 Expired, on the stream
    assert cl.ctl.nodes.lists == 2 and cl.ctl.nodes.watches == 3
    assert int(cl.ctl.nodes.resource_version) > stale  # the open watch is from the new list
    prs = cl.ctl.core.sources["provisioningrequest"].prs  # type: ignore[attr-defined]
    for reflector in (prs, cl.ctl.pods):  # resumed after the drop, without a list
        await wait_for(functools.partial(watched_twice, reflector))
        assert reflector.lists == 1


def watched_twice(reflector: Reflector) -> bool:
    return reflector.watches == 2


async def repeated_410s_are_spaced_out(cl: Cluster, left: set[str]) -> None:
    """A server that answers 410 to three watches in a row: each is a re-LIST, and they are spaced out."""
    delays: list[float] = []

    async def record_sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)

    reflector = Reflector(cl.http, NODES, sleep=record_sleep, rng=random.Random(0),
                          backoff=Backoff(API_WATCH, random.Random(0)))
    gone = cl.server.inject(Fault(verb="watch", resource="nodes", user_agent="gangscale-tests", gone=True, times=3))
    task = asyncio.create_task(reflector.run())
    try:
        await wait_for(lambda: gone.used_up and reflector.watches == 4)
    finally:
        await cancel_and_wait([task])
    assert reflector.lists == 4
    assert len(delays) == 2 and 0 < delays[0] < delays[1]
    assert {n["metadata"]["name"] for n in reflector.items()} == left


# -- 7. API conflict and throttling ---------------------------------------------------------------------------

#: gangscale's condition types and ``provisioningClassDetails`` keys: all it may own on a PR.
OWNED_CONDITIONS = {'k:{"type":"Accepted"}', 'k:{"type":"Provisioned"}'}
OWNED_DETAILS = {"f:gangscale.io/scale-up", "f:gangscale.io/node-pool"}
OTHER_CONDITION = "example.com/Audited"


def status_fault(**knobs: Any) -> Fault:
    """A fault on gangscale's status writes to ProvisioningRequests."""
    return Fault(verb="patch", resource="provisioningrequests", subresource="status", user_agent=CONTROLLER_AGENT,
                 **knobs)


def status_writes(cl: Cluster) -> list[LoggedRequest]:
    return logged(cl, verb="patch", resource="provisioningrequests", subresource="status",
                  user_agent=CONTROLLER_AGENT)


def managed(pr: JSON, manager: str) -> JSON:
    [entry] = [m for m in pr["metadata"]["managedFields"] if m["manager"] == manager]
    assert (entry["operation"], entry.get("subresource")) == ("Apply", "status"), entry
    fields: JSON = entry["fieldsV1"]["f:status"]
    return fields


async def apply_as(cl: Cluster, manager: str, name: str, status: JSON) -> None:
    """Server-side apply of ``status`` under another field manager (as the cluster-autoscaler or Kueue would)."""
    body = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": NS}, "status": status}
    await cl.http.request("PATCH", PROVREQS.path(NS, name, "status"), body=body, query={"fieldManager": manager},
                          content_type="application/apply-patch+yaml")


def condition(ctype: str, status: str, reason: str, message: str) -> JSON:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


async def another_manager_writes_concurrently(cl: Cluster) -> None:
    """While gangscale's first status write is on its way, the cluster-autoscaler applies a condition of a type
    gangscale owns, one of its own, and a ``provisioningClassDetails`` key."""
    cl.server.inject(status_fault(hold=True))
    await cl.provreq("shared", ("gpu8", 1))
    await wait_for(lambda: cl.server.faults.held)
    await apply_as(cl, "cluster-autoscaler", "shared", {
        "conditions": [condition("Provisioned", "False", "CapacityIsNotFound", "written by another autoscaler"),
                       condition(OTHER_CONDITION, "True", "Audited", "kept")],
        "provisioningClassDetails": {"cluster-autoscaler.kubernetes.io/note": "kept"}})
    cl.server.release_held(serve=True)
    await cl.advance_stepwise(PROVISION_SECONDS + 2)  # decided again a moment later (below), then provisioned
    await cl.wait_condition("shared", "Provisioned", "True", "CapacityIsProvisioned")
    # The held write was made for the version before the other manager's: it is answered 409 (gangscale applies to
    # the version it knows, so that a write never lands on another object of the same name) and made again on the
    # new version, where force takes over the condition types gangscale owns.
    statuses = [r.status for r in status_writes(cl)]
    assert statuses[0] == 409 and set(statuses[1:]) == {200}
    pr = await cl.get_pr("shared")
    assert pr is not None
    ours, theirs = managed(pr, "gangscale"), managed(pr, "cluster-autoscaler")
    assert set(ours["f:conditions"]) == OWNED_CONDITIONS
    assert set(ours["f:provisioningClassDetails"]) == OWNED_DETAILS
    assert set(theirs["f:conditions"]) == {'k:{"type":"Provisioned"}', f'k:{{"type":"{OTHER_CONDITION}"}}'}
    assert set(theirs["f:conditions"]['k:{"type":"Provisioned"}']) == {".", "f:type"}  # the rest taken over
    conditions = {c["type"]: c for c in pr["status"]["conditions"]}
    assert (conditions[OTHER_CONDITION]["status"], conditions[OTHER_CONDITION]["message"]) == ("True", "kept")
    assert pr["status"]["provisioningClassDetails"]["cluster-autoscaler.kubernetes.io/note"] == "kept"


async def conflict_on_the_same_object(cl: Cluster) -> None:
    """A 409 that no replacement explains, on the write that records the obtained units: the write is tried
    again and lands; the scale-up in progress is neither dropped nor released."""
    conflict = cl.server.inject(status_fault(body_contains=OBTAINED, status=409))
    await cl.provreq("steady", ("gpu8", 2))
    await cl.advance_stepwise(5)
    assert conflict.acted == 1
    intent = await record(cl, "steady")
    assert intent is not None and intent.phase == OBTAINED
    await cl.advance_stepwise(PROVISION_SECONDS)
    await cl.wait_condition("steady", "Provisioned", "True", "CapacityIsProvisioned")
    assert releases(cl) == [] and len(cl.obtains()) == 1 and len(await cl.ready_nodes()) == 2


async def replaced_while_the_write_is_on_its_way(cl: Cluster) -> None:
    """The write that records the scale-up intent is held while the PR is deleted and created again under its name
    (what Kueue does on an eviction: the next attempt's request gets the same name at once): the old request's
    intent is answered 409 and never lands on the new object, which gets a scale-up of its own."""
    cl.server.inject(status_fault(hold=True))
    await cl.provreq("reused", ("gpu8", 1))
    await wait_for(lambda: cl.server.faults.held)
    old = await cl.get_pr("reused")
    assert old is not None
    await cl.http.request("DELETE", PROVREQS.path(NS, "reused"))
    await cl.provreq("reused", ("gpu8", 1))
    new = await cl.get_pr("reused")
    assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]
    cl.server.release_held(serve=True)
    await cl.advance_stepwise(PROVISION_SECONDS + 2)
    await cl.wait_condition("reused", "Provisioned", "True", "CapacityIsProvisioned")
    assert status_writes(cl)[0].status == 409  # the old request's intent, on the new object's version
    intent = await record(cl, "reused")
    assert intent is not None and all(token.startswith(new["metadata"]["uid"]) for token in intent.tokens)
    assert [call.token[:36] for call in cl.obtains()] == [new["metadata"]["uid"]]  # the old one never obtained


async def throttled_with_retry_after(cl: Cluster) -> None:
    """The status write is answered 429 with ``Retry-After: 3``: the next attempt comes 3 s later, not sooner
    (gangscale's own first retry would be after 1 s)."""
    await spare_nodes(cl, 1)
    cl.server.inject(status_fault(status=429, retry_after=3))
    await cl.provreq("busy", ("gpu8", 1))
    for _ in range(10):
        await cl.advance_stepwise(0.5)
    await cl.wait_condition("busy", "Provisioned", "True", "CapacityIsFound")
    [throttled, landed] = status_writes(cl)
    assert (throttled.status, landed.status) == (429, 200)
    assert (landed.time - throttled.time).total_seconds() == 3.0


@pytest.mark.parametrize("case", [
    pytest.param(another_manager_writes_concurrently, id="another-manager-writes-concurrently"),
    pytest.param(conflict_on_the_same_object, id="409-same-object"),
    pytest.param(throttled_with_retry_after, id="429-retry-after-3"),
    pytest.param(replaced_while_the_write_is_on_its_way, id="replaced-under-its-name"),
])
async def test_e4_07_api_conflict_and_throttling(tmp_path: Path,
                                                 case: Callable[[Cluster], Awaitable[None]]) -> None:
    """§E.4 scenario 7: the PR status patch meets another field manager's concurrent writes, 409s, and 429 with
    ``Retry-After: 3``.

    Proven here:

    - *SSA with ``field_manager="gangscale"`` touches only gangscale's condition types*
      (``another-manager-writes-concurrently``): another manager applies a condition of a type gangscale owns,
      one of its own and a ``provisioningClassDetails`` key while gangscale's write is in flight. Afterwards
      gangscale's ``managedFields`` entry (Apply, ``/status``) holds exactly ``Accepted`` and ``Provisioned``
      and its two detail keys; the other manager's condition and key are untouched and still its own.
    - *conflicts are retried with fresh state* (``409-same-object``): the write that records the obtained
      units is answered 409; it is tried again from the controller's current state and lands, and the scale-up
      in progress goes on to ``Provisioned`` with nothing released. gangscale applies with ``force`` (README,
      "Conditions gangscale writes") and to the resourceVersion it knows: another manager's concurrent write makes
      gangscale's write that was on its way fail once (409), and it is made again on the new version.
    - *a write never lands on another object of the same name* (``replaced-under-its-name``): the PR is deleted
      and created again while gangscale's intent write is on its way; the resourceVersion precondition answers
      409, the new PR gets its own scale-up, and the old one never reaches the provider.
    - *``Retry-After`` is honoured* (``429-retry-after-3``): the retry of a throttled status write waits the 3 s
      the server asked for. Watches and lists honour it too (``tests/kube/test_reflector.py``), and so do the
      provider calls' retries (``controller/actuator.py``).

    Found by this scenario and fixed in ``controller/loop.py``: a 409 on a status or intent write made the
    controller forget the request (left unserved until its next watch event; a scale-up in progress was
    released), and a failed status write was retried after gangscale's own backoff (1 s) whatever
    ``Retry-After`` said.

    Found here and fixed (issue 24): gangscale sent the PR's uid with each status apply expecting a 409 when the
    PR was deleted and re-created under its name, but kube-apiserver does not treat a uid as a precondition on a
    custom resource's ``/status`` (its status strategy copies the stored metadata over the new object's, having
    checked only the resourceVersion), nor does the embedded server: a write for the old PR in flight when the PR
    was replaced landed on the new one. Writes now carry the resourceVersion gangscale knows
    (``kube/writes.py``).
    """
    async with running_cluster(tmp_path, pool_yaml=GPU_POOL) as cl:
        await gpu_template(cl)
        await case(cl)
