"""The embedded node lifecycle controller's health monitoring (``ControllerManager.monitor_node_health``): a Node
whose Lease and status stop being renewed goes ``Unknown`` after the grace period and is tainted, as
kube-controller-manager v1.36 does; the kubelet's next post brings it back. Time is a ManualClock; the tests post
the heartbeats themselves (tests/providers/test_simulated_heartbeats.py has the simulated cloud's kubelets do it)."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.apiserver.nodehealth import NodeHealthMonitor, NodeMonitorSettings
from gangscale.timefmt import rfc3339
from tests import builders as b
from tests.conftest import wait_for

JSON = dict[str, Any]
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
GRACE = NodeMonitorSettings().grace_period
PERIOD = NodeMonitorSettings().period
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def micro(t: float) -> str:
    return rfc3339(t).replace("Z", ".000000Z")


async def node(http: KubeHTTP, name: str) -> JSON:
    return await http.request("GET", b.NODES.path(name=name))


def conditions(obj: JSON) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
            for c in obj.get("status", {}).get("conditions", [])}


def taints(obj: JSON) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in obj["spec"].get("taints") or []}


async def post_ready(http: KubeHTTP, name: str, status: str, t: float) -> None:
    """A kubelet's status post: its Ready condition with a fresh heartbeat."""
    reason = {"True": "KubeletReady", "False": "KubeletNotReady"}[status]
    await http.request("PATCH", b.NODES.path(name=name, sub="status"), content_type=STRATEGIC, body={"status": {
        "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": "",
                        "lastHeartbeatTime": rfc3339(t), "lastTransitionTime": rfc3339(t)}]}})


async def renew(http: KubeHTTP, name: str, t: float) -> None:
    """A kubelet's Lease renewal (created on the first one)."""
    path = b.LEASES.path("kube-node-lease", name)
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": name, "namespace": "kube-node-lease"},
             "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro(t)}}
    try:
        await http.request("GET", path)
    except Exception:
        await http.request("POST", b.LEASES.path("kube-node-lease"), body=lease)
        return
    await http.request("PATCH", path, content_type=MERGE, body={"spec": {"renewTime": micro(t)}})


async def settle(apiserver: EmbeddedAPIServer, monitor: NodeHealthMonitor, passes: int) -> None:
    """Until the monitor has run ``passes`` passes in all and the taint work they caused is done."""
    await wait_for(lambda: monitor.passes >= passes)
    await apiserver.controllers.settle()


@pytest_asyncio.fixture
async def monitor(apiserver: EmbeddedAPIServer, clock: ManualClock) -> NodeHealthMonitor:
    return apiserver.controllers.monitor_node_health(clock)


@pytest.mark.parametrize("heartbeat", ["lease", "status"])
async def test_a_node_whose_heartbeats_stop_goes_unknown_after_the_grace_period_and_back_when_its_kubelet_posts(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, monitor: NodeHealthMonitor,
        heartbeat: str) -> None:
    start = clock.now()
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await post_ready(http, "n1", "True", start)
    # Heartbeats every 10 s for a minute, then none.
    for k in range(1, 7):
        await clock.set(start + 10 * k)
        await (renew(http, "n1", clock.now()) if heartbeat == "lease" else post_ready(http, "n1", "True", clock.now()))
        await apiserver.controllers.settle()
    assert taints(await node(http, "n1")) == set()
    last = clock.now()
    await clock.set(last + GRACE)  # at the deadline exactly: not past it
    await apiserver.controllers.settle()
    assert conditions(await node(http, "n1"))["Ready"][0] == "True"

    gone = monitor.passes + 1
    await clock.set(last + GRACE + PERIOD)  # the first monitor pass past it
    await settle(apiserver, monitor, gone)
    got = await node(http, "n1")
    unknown = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    never = ("Unknown", "NodeStatusNeverUpdated", "Kubelet never posted node status.")
    assert conditions(got) == {"Ready": unknown, "MemoryPressure": never, "DiskPressure": never, "PIDPressure": never}
    ready = next(c for c in got["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == rfc3339(clock.now())
    assert taints(got) == {(UNREACHABLE, "NoSchedule")}  # NoExecute: at the next pass
    await clock.set(clock.now() + PERIOD)
    await settle(apiserver, monitor, gone + 1)
    got = await node(http, "n1")
    assert taints(got) == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    assert next(t for t in got["spec"]["taints"] if t["effect"] == "NoExecute")["timeAdded"] == rfc3339(clock.now())

    # A heartbeat alone does not bring it back (only the kubelet sets Ready); its status post does.
    await clock.set(clock.now() + 1)
    await renew(http, "n1", clock.now())
    await clock.set(clock.now() + 60)
    await apiserver.controllers.settle()
    assert conditions(await node(http, "n1"))["Ready"][0] == "Unknown"
    await post_ready(http, "n1", "True", clock.now())
    await apiserver.controllers.settle()
    assert taints(await node(http, "n1")) == {(UNREACHABLE, "NoExecute")}  # NoSchedule at once
    await clock.set(clock.now() + PERIOD)
    await wait_for(lambda: monitor.passes >= gone + 2)
    await apiserver.controllers.settle()
    assert taints(await node(http, "n1")) == set()


async def test_heartbeats_every_ten_seconds_keep_a_node_ready_for_ten_minutes(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, monitor: NodeHealthMonitor) -> None:
    start = clock.now()
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await post_ready(http, "n1", "True", start)
    for k in range(1, 61):
        await clock.set(start + 10 * k)
        await renew(http, "n1", clock.now())
        await apiserver.controllers.settle()
    assert conditions(await node(http, "n1"))["Ready"][0] == "True"
    assert taints(await node(http, "n1")) == set()
    # The monitor wakes when a deadline could have passed (about once per grace period), not every 5 s.
    assert monitor.passes <= 600 / GRACE + 2


async def test_a_node_that_never_posted_a_ready_condition_has_the_startup_grace_period(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, monitor: NodeHealthMonitor) -> None:
    start = clock.now()
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    startup = NodeMonitorSettings().startup_grace_period
    await clock.set(start + startup)
    await apiserver.controllers.settle()
    assert conditions(await node(http, "n1")) == {}
    await clock.set(start + startup + PERIOD)
    await settle(apiserver, monitor, 1)
    never = ("Unknown", "NodeStatusNeverUpdated", "Kubelet never posted node status.")
    got = await node(http, "n1")
    assert conditions(got) == {kind: never for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")}
    assert (UNREACHABLE, "NoSchedule") in taints(got)


@pytest.mark.parametrize(("status", "expected"), [
    ("False", {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}),
    ("True", set()),
], ids=["not-ready", "ready"])
async def test_no_execute_taints_follow_the_ready_condition_at_the_next_pass(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, clock: ManualClock, monitor: NodeHealthMonitor,
        status: str, expected: set[tuple[str, str]]) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await post_ready(http, "n1", status, clock.now())
    await apiserver.controllers.settle()
    assert (NOT_READY, "NoExecute") not in taints(await node(http, "n1"))
    await clock.set(clock.now() + PERIOD)
    await settle(apiserver, monitor, 1)
    assert taints(await node(http, "n1")) == expected
