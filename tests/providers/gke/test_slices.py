"""``slice`` mode's node pools carry what GKE requires of the cluster they join: auto-upgrade on in a release channel
(GKE refuses it off there), and the template node pool's management and upgrade settings."""

from __future__ import annotations

from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.providers.gke import names
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests.providers.gke.harness import CLUSTER, PROJECT, REGION, ZONE, cloud

TOKEN = "7a1c0e2b-5d4f-4e3a-9b8c-0d1e2f3a4b5c-0123456789ab-0"
POOL_FILE = f"""
nodePools:
  - name: tpu
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: {ZONE}
    maxUnits: 2
    gke: {{project: {PROJECT}, location: {REGION}, cluster: {CLUSTER}, mode: slice, nodePool: tpu-template}}
"""
SURGE_FREE = {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}


@pytest.mark.parametrize(("channel", "template", "expected"), [
    ("REGULAR", {}, {"autoRepair": True, "autoUpgrade": True}),
    ("REGULAR", {"management": {"autoRepair": True, "autoUpgrade": True}}, {"autoRepair": True, "autoUpgrade": True}),
    ("REGULAR", {"management": {"autoRepair": False, "autoUpgrade": True}},
     {"autoRepair": False, "autoUpgrade": True}),
    ("", {"management": {"autoRepair": False, "autoUpgrade": False}}, {"autoRepair": False, "autoUpgrade": False}),
    ("", {}, {"autoRepair": True, "autoUpgrade": True}),
], ids=["channel-defaults", "channel-template", "channel-template-no-repair", "no-channel-template-off",
        "no-channel-defaults"])
async def test_a_slice_takes_the_management_gke_requires_and_the_templates_settings(
        clock: ManualClock, apiserver: EmbeddedAPIServer, http: KubeHTTP, channel: str, template: dict[str, Any],
        expected: dict[str, bool]) -> None:
    async with cloud(clock, apiserver, http, text=POOL_FILE, start=False) as c:
        cluster = c.gcp.state.cluster(REGION, CLUSTER)
        assert cluster is not None
        cluster.release_channel = channel
        c.gcp.add_node_pool((REGION, CLUSTER), "tpu-template", machine_type="ct5lp-hightpu-4t", zones=[ZONE],
                            tpu_topology="2x4", extra={"upgradeSettings": SURGE_FREE,
                                                       "config": {"serviceAccount": "tpu@p.iam.gserviceaccount.com"},
                                                       **template})
        await c.drive(c.provider.start())

        got = await c.drive(c.provider.obtain("tpu", 1, token=TOKEN, deadline=c.deadline()))

        assert [unit.unit_id for unit in got.units] == [names.unit_name(TOKEN, 0)]
        made = cluster.pools[names.unit_name(TOKEN, 0)]
        assert made.management == expected
        assert made.extra["upgradeSettings"] == SURGE_FREE
        assert made.config["serviceAccount"] == "tpu@p.iam.gserviceaccount.com"
