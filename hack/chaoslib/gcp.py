"""The fake Google Cloud of a gke run: ``gangscale.sim.gcp.FakeGcp`` in the harness process, on the wall clock,
set up from the run's pool file, its Nodes registered through a Kubernetes client of its own, and its knobs turned
by the seed's ``cloud-fault`` actions during the fault phase.

The fake's kubelets write Nodes under the user agent ``gke-kubelets``: the API-server faults (aimed at
``gangscale*``) do not hit them, and the leadership judge does not count their writes (on GKE it is the kubelets
and GKE, not gangscale, that register and remove Nodes). Each run has its own project (``plan.gke_project``), which
is how the run's observer of ``gangscale.sim.gcp.server.OBSERVERS`` (a list of the whole process) picks its own
calls out when several runs play at once.

Timings are those of a small, fast cloud, so that a gke run takes about as long as a simulated one: operations
0.3 s, VMs boot in 0.2 s, register 0.1 s later and turn Ready 0.3 s after that, instance groups retry every 0.5 s,
compute operations end at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoslib.checks import CloudTraffic
from chaoslib.plan import Action, gke_pool_file, gke_project
from gangscale.clock import SystemClock
from gangscale.config import parse_pool_yaml
from gangscale.kube.client import make_http
from gangscale.sim.gcp import FakeGcp, InjectedError
from gangscale.sim.gcp.server import OBSERVERS
from gangscale.sim.gcp.standalone import set_up

JSON = dict[str, Any]
#: The fake's user agent towards the API server (its kubelets): not ``gangscale…``.
KUBELET_AGENT = "gke-kubelets"
#: The fake's timings (``GcpFaults`` fields) for the whole run; a ``slow-operations`` fault raises
#: ``operation_seconds`` for a while.
TIMINGS: dict[str, float] = {"operation_seconds": 0.3, "boot_seconds": 0.2, "register_seconds": 0.1,
                             "ready_seconds": 0.3, "retry_seconds": 0.5, "compute_operation_seconds": 0.0,
                             "vm_delete_seconds": 0.2, "node_delete_seconds": 0.3}
#: A scale-up's nodes must be Ready this long after it starts. The provider polls operations every 2 s (growing),
#: and a 2-slice gang makes its node pools one after the other: 4 s (the simulated runs') is too short for it.
MAX_NODE_PROVISION_TIME = "12s"


@dataclass
class GkeCloud:
    """One run's fake Google Cloud: start it (:func:`gke_cloud`), point replicas at it (:meth:`flags`,
    :meth:`env`), apply faults (:meth:`apply`), stop them all (:meth:`stop_faults`)."""

    gcp: FakeGcp
    project: str
    pools: str
    traffic: CloudTraffic
    workdir: Path
    #: Cloud faults applied.
    applied: int = 0
    #: Calls the counted faults acted on (answered with an injected error, or applied with their answer dropped) and
    #: partial slices made, as of the end of the fault phase.
    hits: int = 0
    _injected: list[tuple[InjectedError, int]] = field(default_factory=list)
    _lost: int = 0
    _partial: int = 0
    #: Windows open per knob (overlapping faults on one knob restore it when the last one ends).
    _open: dict[str, int] = field(default_factory=dict)
    _timers: list[asyncio.Task[None]] = field(default_factory=list)

    def flags(self) -> tuple[str, ...]:
        return ("--provider", "gke", "--gke-container-endpoint", self.gcp.url,
                "--gke-compute-endpoint", f"{self.gcp.url}/compute/v1",
                "--max-node-provision-time", MAX_NODE_PROVISION_TIME)

    def env(self) -> dict[str, str]:
        """The replicas' environment: google-auth's Application Default Credentials find the fake's metadata server
        and nothing of this machine's (no credentials file, no gcloud configuration, an empty home)."""
        host = self.gcp.url.removeprefix("http://")
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_"))}
        return env | {"GCE_METADATA_HOST": host, "GCE_METADATA_IP": host, "HOME": str(home),
                      "CLOUDSDK_CONFIG": str(home / "gcloud")}

    # --- faults -------------------------------------------------------------------------------------------------

    def apply(self, action: Action) -> None:
        """Turn the knob a ``cloud-fault`` action names; one that lasts is turned back after ``action.seconds``."""
        fault, faults = action.fault, self.gcp.faults
        kind = fault["kind"]
        if kind == "stockout":
            key = (str(fault["zone"]), str(fault["machine"]))
            faults.stock[key] = 0
            self._window(f"stock:{key[0]}:{key[1]}", action.seconds, lambda: faults.stock.pop(key, None))
        elif kind == "lost-responses":
            faults.lost_responses += int(fault["count"])
            self._lost += int(fault["count"])
        elif kind == "http-error":
            error = faults.inject(int(fault["status"]), str(fault["method"]), str(fault["path"]),
                                  times=int(fault["times"]), retry_after=fault.get("retry_after"),
                                  html=bool(fault.get("html", False)))
            self._injected.append((error, error.times))
        elif kind == "slow-operations":
            faults.operation_seconds = float(fault["operation_seconds"])
            self._window("operation_seconds", action.seconds,
                         lambda: setattr(faults, "operation_seconds", TIMINGS["operation_seconds"]))
        elif kind == "partial-slice":
            self._partial += faults.partial_slice_hosts is None  # one still waiting for its slice is not another
            faults.partial_slice_hosts = int(fault["hosts"])
        elif kind == "never-ready":
            faults.never_ready = True
            self._window("never_ready", action.seconds, lambda: setattr(faults, "never_ready", False))
        else:
            raise ValueError(f"unknown cloud fault {kind!r}")
        self.applied += 1
        self.gcp.poke()

    def _window(self, knob: str, seconds: float, restore: Any) -> None:
        self._open[knob] = self._open.get(knob, 0) + 1

        async def close() -> None:
            await asyncio.sleep(seconds)
            self._open[knob] -= 1
            if not self._open[knob]:
                restore()
                self.gcp.poke()

        self._timers.append(asyncio.create_task(close(), name=f"chaos cloud fault {knob}"))

    async def stop_faults(self) -> None:
        """Every knob back as it was, every injected error and one-shot fault not yet used up gone."""
        for timer in self._timers:
            timer.cancel()
        for timer in self._timers:
            with contextlib.suppress(asyncio.CancelledError):
                await timer
        self._timers.clear()
        self._open.clear()
        faults = self.gcp.faults
        self.hits += sum(times - error.times for error, times in self._injected) + self._lost - faults.lost_responses
        self.hits += self._partial - (faults.partial_slice_hosts is not None)
        self._injected, self._lost, self._partial = [], 0, 0
        faults.stock.clear()
        faults.errors.clear()
        faults.lost_responses = 0
        faults.partial_slice_hosts = None
        faults.never_ready = False
        set_timings(self.gcp)
        self.gcp.poke()

    # --- what the judges read -----------------------------------------------------------------------------------

    def groups(self) -> tuple[dict[str, list[str]], dict[str, int]]:
        """(node pool -> its instance groups' members, node pool gangscale made -> how many members it has)."""
        groups: dict[str, list[str]] = {}
        for cluster in self.gcp.state.clusters.values():
            for name, pool in cluster.pools.items():
                groups[name] = [member for mig in pool.migs.values() for member in mig.members]
        return groups, {name: len(members) for name, members in groups.items() if name.startswith("gs-")}

    def kubelet_failures(self) -> list[str]:
        return [f"the fake cloud's kubelet failed: {failure}" for failure in self.gcp.nodes.failures]


def set_timings(gcp: FakeGcp) -> None:
    for knob, value in TIMINGS.items():
        setattr(gcp.faults, knob, value)


@contextlib.asynccontextmanager
async def gke_cloud(seed: int, workdir: Path, kubeconfig: Path) -> AsyncIterator[GkeCloud]:
    """The run's fake Google Cloud, serving and observed, until the block ends."""
    project = gke_project(seed)
    text = gke_pool_file(project, seed)
    http = await make_http(str(kubeconfig), user_agent=KUBELET_AGENT)
    gcp = FakeGcp(SystemClock(), http, project=project, heartbeats=True)
    set_timings(gcp)
    set_up(gcp, parse_pool_yaml(text).pools, label_pools=True)
    cloud = GkeCloud(gcp, project, text, CloudTraffic(project), workdir)
    OBSERVERS.append(cloud.traffic)
    try:
        await gcp.start()
        yield cloud
    finally:
        OBSERVERS.remove(cloud.traffic)
        await cloud.stop_faults()
        await gcp.stop()
        await http.api_client.close()
