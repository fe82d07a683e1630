"""The controller and the gke provider against the fake GKE + Compute control plane, in one process on a manual
clock: the demo's cluster (:class:`gangscale.sim.driver.SimCluster`: the embedded API server, the fake cloud, the
provider and the controller), whose ``run_until`` moves the clock from one timer to the next once everything is
quiet. Builders and readers shared by the tests that drive whole gangs through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from gangscale.controller.logic.settings import Settings
from gangscale.kube.resources import EVENTS, NODES, PODTEMPLATES, PROVREQS
from gangscale.sim.driver import SimCluster, sim_cluster
from gangscale.sim.gcp import FakeGcp
from gangscale.sim.gcp.state import Cluster
from tests.builders import pod_template, provreq
from tests.providers.gke.harness import CLUSTER, POOLS_YAML, REGION, pools

NS = "default"
PROVISION_TIME = 600.0
SETTINGS = Settings(batch_idle=0.0, batch_max=0.0, max_node_provision_time=PROVISION_TIME)
#: After the deadline: long enough to release everything, shorter than the pool's backoff (3 min), so the gang
#: is not tried again yet.
AFTER = 120.0
TPU_SELECTOR = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x4"}
NOTHING: dict[str, list[str]] = {"pools": [], "vms": [], "nodes": []}


@contextlib.asynccontextmanager
async def gke_cluster(tmp_path: Path, text: str = POOLS_YAML) -> AsyncIterator[SimCluster]:
    """The harness's pools (or ``text``'s) on the fake GKE, with the gke provider and the controller running."""
    async with sim_cluster(tmp_path, pools(text)) as sim:
        await sim.start_gke_provider()
        await sim.start_controller(SETTINGS)
        yield sim


def fake(sim: SimCluster) -> FakeGcp:
    assert sim.gcp is not None
    return sim.gcp


async def gang(sim: SimCluster, name: str, count: int, *, limits: dict[str, str],
               selector: dict[str, str] | None = None) -> None:
    template = pod_template(f"{name}-worker", limits=limits)
    if selector:
        template["template"]["spec"]["nodeSelector"] = selector
    await sim.http.request("POST", PODTEMPLATES.path(NS), body=template)
    await sim.http.request("POST", PROVREQS.path(NS), body=provreq(name, template=f"{name}-worker", count=count))


async def provisioned(sim: SimCluster, name: str) -> tuple[str, str, str]:
    pr = await sim.http.request("GET", PROVREQS.path(NS, name))
    found = next(c for c in pr["status"]["conditions"] if c["type"] == "Provisioned")
    return found["status"], found["reason"], found["message"]


async def event(sim: SimCluster, name: str, reason: str) -> str:
    items = (await sim.http.request("GET", EVENTS.path(NS))).get("items") or []
    [found] = [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]
    return str(found["message"])


def cluster(sim: SimCluster) -> Cluster:
    found = fake(sim).state.cluster(REGION, CLUSTER)
    assert found is not None
    return found


async def ours(sim: SimCluster) -> dict[str, list[str]]:
    """What gangscale made that exists now: node pools in the fake, and every VM and Node (the existing node pools
    the pool file names are made without VMs, so every VM and Node is gangscale's)."""
    nodes = (await sim.http.request("GET", NODES.path())).get("items") or []
    return {"pools": sorted(p for p in cluster(sim).pools if p.startswith("gs-")),
            "vms": sorted(vm.name for vm in fake(sim).state.vms.values()),
            "nodes": sorted(n["metadata"]["name"] for n in nodes)}


async def ready_count(sim: SimCluster) -> int:
    nodes = (await sim.http.request("GET", NODES.path())).get("items") or []
    return sum(1 for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                       for c in n["status"].get("conditions") or []))
