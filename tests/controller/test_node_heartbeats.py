"""The simulated cloud's nodes under the node lifecycle controller (issue 24, point 3), with the real controller, as
``gangscale run --provider simulated`` runs it, on the embedded API server with the controller manager's node health
monitoring on: with heartbeats every simulated node stays Ready; without them (the simulated cloud before its
kubelets heartbeated) they go ``Unknown`` within a minute, as kube-controller-manager marked them.

The last two tests hold what gangscale's controller does when one node of a booked scale-up, or of a scale-up still
coming up, goes unreachable (point 4 of the issue; the policy is in the README's "Conditions gangscale writes"). Time
moves from one timer to the next and the whole cluster settles at each (``advance_stepwise``, plus the monitor's
passes)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gangscale.providers.simulated import SimulatedProvider
from gangscale.sim.apiserver.nodehealth import NodeHealthMonitor, NodeMonitorSettings
from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Event
from tests.conftest import step_through, wait_for
from tests.controller import harness
from tests.controller.harness import Cluster, running_cluster

TPU = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
GPU = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
UNREACHABLE = "node.kubernetes.io/unreachable"
NODES = StorageKey("", "nodes")
MINUTE = 60.0
GRACE = NodeMonitorSettings().grace_period
PERIOD = NodeMonitorSettings().period


@dataclass(frozen=True)
class Seen:
    """One committed version of a Node: when, its Ready status, its node-lifecycle taints."""

    at: float
    name: str
    ready: str | None
    taints: frozenset[str]


class NodeHistory:
    """Every version of every Node the store commits (a listener on the embedded server's store)."""

    def __init__(self, cl: Cluster) -> None:
        self.cl, self.seen = cl, list[Seen]()
        cl.server.store.listeners.append(self._observe)

    def _observe(self, key: StorageKey, ev: Event) -> None:
        if key != NODES or ev.type == "DELETED":
            return
        obj = ev.obj
        ready = next((c.get("status") for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Ready"), None)
        taints = frozenset(f"{t['key']}:{t['effect']}" for t in (obj.get("spec") or {}).get("taints") or []
                           if t["key"].startswith("node.kubernetes.io/"))
        self.seen.append(Seen(self.cl.clock.now(), obj["metadata"]["name"], ready, taints))

    def first(self, name: str, ready: str) -> float | None:
        return next((s.at for s in self.seen if s.name == name and s.ready == ready), None)

    def after_ready(self, name: str) -> list[Seen]:
        """Its versions from the first Ready one on."""
        since = self.first(name, "True")
        return [] if since is None else [s for s in self.seen if s.name == name and s.at >= since]


async def settled(cl: Cluster, monitor: NodeHealthMonitor) -> None:
    await wait_for(lambda: not monitor.pending)
    await cl.server.controllers.settle()
    await cl.idle()


async def run(cl: Cluster, monitor: NodeHealthMonitor, seconds: float,
              each: Callable[[], Awaitable[None]] | None = None) -> None:
    """``cl.advance_stepwise`` that also lets the node lifecycle controller's passes run at each stop."""
    await step_through(cl.clock, seconds, lambda: settled(cl, monitor), each)


async def started(cl: Cluster) -> NodeHealthMonitor:
    monitor = cl.server.controllers.monitor_node_health(cl.clock)
    await cl.template("slice", limits={"google.com/tpu": "4"}, selector=TPU)
    await cl.template("gpus", limits={"nvidia.com/gpu": "8"}, selector=GPU)
    return monitor


@pytest.mark.parametrize("heartbeats", [True, False], ids=["kubelets-heartbeat", "no-heartbeats"])
async def test_gangscale_run_keeps_every_simulated_node_ready_for_ten_minutes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, heartbeats: bool) -> None:
    monkeypatch.setattr(harness, "SimulatedProvider", functools.partial(SimulatedProvider, heartbeats=heartbeats))
    async with running_cluster(tmp_path) as cl:
        history = NodeHistory(cl)
        monitor = await started(cl)
        await cl.provreq("slices", ("slice", 4))
        await cl.provreq("gpus", ("gpus", 2))
        conditions: list[dict[str, Any]] = []

        async def watch() -> None:
            conditions.append({name: await cl.condition(name, "Provisioned") for name in ("slices", "gpus")})
        await run(cl, monitor, 10 * MINUTE, watch)
        names = {s.name for s in history.seen}

    assert len(names) == 4 + 2  # two 2-host slices and two GPU nodes
    assert conditions[-1] == {"slices": ("True", "CapacityIsProvisioned"), "gpus": ("True", "CapacityIsProvisioned")}
    if heartbeats:
        assert monitor.passes >= 10 * MINUTE / GRACE  # it kept looking
        for name in names:
            after = history.after_ready(name)
            assert after and {s.ready for s in after} == {"True"}, name
            assert not any(UNREACHABLE in taint for s in after for taint in s.taints), name
    else:
        # As kube-controller-manager did in issue 24: Unknown and unreachable about 50 s after the Ready post.
        for name in names:
            ready, unknown = history.first(name, "True"), history.first(name, "Unknown")
            assert ready is not None and unknown is not None
            assert {s.ready for s in history.seen if s.name == name and s.at >= ready + GRACE + PERIOD} == {"Unknown"}
            assert any(s.name == name and f"{UNREACHABLE}:NoExecute" in s.taints for s in history.seen)


async def test_a_booked_node_unreachable_for_the_grace_revokes_the_booking_without_backing_the_pool_off(
        tmp_path: Path) -> None:
    """A booked node whose kubelet stops goes ``Unknown`` within the node monitor's grace period; once it has been
    ``Unknown`` for ``--booked-node-unready-grace`` (5 minutes, the pods' default toleration of ``unreachable``), the
    request gets ``CapacityRevoked`` (``BookedNodeNotReady``), which Kueue answers by rejecting the check. The pool is
    not backed off (the cloud did deliver), and the unit, no longer booked, is scaled down once it has been empty
    for ``--scale-down-unneeded-time``."""
    async with running_cluster(tmp_path) as cl:
        history = NodeHistory(cl)
        monitor = await started(cl)
        await cl.provreq("pr", ("slice", 2))
        await run(cl, monitor, 40)
        await cl.wait_condition("pr", "Provisioned", "True", "CapacityIsProvisioned")
        victim = sorted(n["metadata"]["name"] for n in await cl.nodes())[0]
        cl.cloud.faults("tpu-a").heartbeat_stopped.add(victim)
        stopped = cl.clock.now()
        await run(cl, monitor, 2 * MINUTE)

        unknown = history.first(victim, "Unknown")
        assert unknown is not None and unknown <= stopped + GRACE + PERIOD
        assert set(await cl.conditions("pr")) == {"Accepted", "Provisioned"}  # within the grace: still booked

        revoked_at: list[float] = []

        async def watch() -> None:
            if not revoked_at and await cl.condition("pr", "CapacityRevoked") is not None:
                revoked_at.append(cl.clock.now())
        await run(cl, monitor, 5 * MINUTE, watch)
        assert await cl.condition("pr", "CapacityRevoked") == ("True", "BookedNodeNotReady")
        assert revoked_at and revoked_at[0] == pytest.approx(unknown + 5 * MINUTE, abs=PERIOD)
        assert await cl.condition("pr", "BookingExpired") is None
        assert cl.ctl.core.backoffs.active(cl.clock.now()) == {}

        await run(cl, monitor, 11 * MINUTE)
        assert [c.operation for c in cl.cloud.calls] == ["obtain", "release"]
        (release,) = [c for c in cl.cloud.calls if c.operation == "release"]
        assert release.at == pytest.approx(revoked_at[0] + 10 * MINUTE, abs=PERIOD)
        assert cl.ctl.core.backoffs.active(cl.clock.now()) == {}


async def test_a_node_that_goes_unreachable_while_coming_up_times_the_scale_up_out_and_backs_the_pool_off(
        tmp_path: Path) -> None:
    """A node whose kubelet stops before it ever posts Ready: the scale-up waits for it as for one that is slow to
    boot, until ``--max-node-provision-time`` (15 minutes); then the request is re-planned (ScaleUpTimedOut), every
    unit of it released, and the pool backed off: it never delivered that node ("nodes that did not become Ready in
    time", 3 minutes, doubling), the same as a stockout for the planner."""
    async with running_cluster(tmp_path) as cl:
        monitor = await started(cl)
        await cl.provreq("pr", ("slice", 2))
        await wait_for(cl.obtains)
        start = cl.cloud.calls[0].at
        victim = sorted(n["metadata"]["name"] for n in await cl.nodes())[0]
        cl.cloud.faults("tpu-a").heartbeat_stopped.add(victim)
        await run(cl, monitor, 14 * MINUTE)
        assert (await cl.condition("pr", "Provisioned")) == ("False", "ScaleUpInProgress")
        assert cl.ctl.core.backoffs.active(cl.clock.now()) == {}

        await run(cl, monitor, 2 * MINUTE)
        (release,) = [c for c in cl.cloud.calls if c.operation == "release"]
        assert release.pool == "tpu-a" and release.at == pytest.approx(start + 15 * MINUTE, abs=1)
        backoff = cl.ctl.core.backoffs.get("tpu-a", cl.clock.now())
        assert backoff is not None and backoff.reason == "nodes that did not become Ready in time"
        assert backoff.until == pytest.approx(release.at + 3 * MINUTE, abs=1)
        # Re-planned on the other pool (the backed-off one is avoided).
        assert [(c.operation, c.pool) for c in cl.cloud.calls] == [
            ("obtain", "tpu-a"), ("release", "tpu-a"), ("obtain", "tpu-b")]
