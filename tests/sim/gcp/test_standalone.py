"""``gangscale sim gcp``'s set-up from a pool file: each mode's existing node pool is made as GKE's documented
commands make it (flex-start: ``--flex-start [--max-run-duration]``; queued-provisioning:
``--enable-queued-provisioning --flex-start --enable-autoscaling --num-nodes=0 --reservation-affinity=none``)."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.config import parse_pool_yaml
from gangscale.sim.gcp import FakeGcp
from gangscale.sim.gcp.render import node_pool
from gangscale.sim.gcp.standalone import set_up

GKE = "project: demo-project, location: us-central1, cluster: c1"
POOLS = f"""
nodePools:
  - {{name: tpu, machineType: ct5lp-hightpu-4t, tpuTopology: 2x4, zone: us-central1-a, maxUnits: 2,
     gke: {{{GKE}, mode: slice}}}}
  - {{name: cpu, machineType: n2-standard-8, allocatable: {{cpu: "7", memory: 28Gi}}, zone: us-central1-a, maxUnits: 4,
     gke: {{{GKE}, mode: resize, nodePool: cpu}}}}
  - {{name: flex, machineType: g2-standard-8, zone: us-central1-a, maxUnits: 4,
     gke: {{{GKE}, mode: flex-start, nodePool: flex, maxRunDurationSeconds: 7200}}}}
  - {{name: flex-b, machineType: g2-standard-8, zone: us-central1-b, maxUnits: 4,
     gke: {{{GKE}, mode: flex-start, nodePool: flex-b}}}}
  - {{name: dws, machineType: g2-standard-8, zone: us-central1-b, maxUnits: 8,
     gke: {{{GKE}, mode: queued-provisioning, nodePool: dws}}}}
"""


@pytest.mark.parametrize(("pool", "config", "fields"), [
    ("cpu", {}, {}),
    ("flex", {"flexStart": True, "maxRunDuration": "7200s"}, {}),
    ("flex-b", {"flexStart": True}, {}),
    ("dws", {"flexStart": True, "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}},
     {"queuedProvisioning": {"enabled": True},
      "autoscaling": {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": 1000, "locationPolicy": "ANY"}}),
], ids=["resize", "flex-start", "flex-start-default-run", "queued-provisioning"])
def test_each_mode_gets_its_node_pool(pool: str, config: dict[str, Any], fields: dict[str, Any]) -> None:
    gcp = FakeGcp(ManualClock(), None)
    set_up(gcp, parse_pool_yaml(POOLS).pools)
    cluster = gcp.state.cluster("us-central1", "c1")
    assert cluster is not None and sorted(cluster.pools) == ["cpu", "dws", "flex", "flex-b"]
    found = cluster.pools[pool]
    rendered = node_pool(gcp.links, found)
    assert {key: rendered["config"].get(key) for key in ("flexStart", "maxRunDuration", "reservationAffinity")} == {
        key: config.get(key) for key in ("flexStart", "maxRunDuration", "reservationAffinity")}
    assert {key: rendered.get(key) for key in ("queuedProvisioning", "autoscaling")} == {
        key: fields.get(key) for key in ("queuedProvisioning", "autoscaling")}
    assert found.initial_node_count == 0 and not gcp.state.pool_vms(found)
