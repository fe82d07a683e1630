"""``gangscale run --provider gke`` as an operator starts it, against ``gangscale sim gcp`` (the fake GKE and Compute
control plane) and ``gangscale sim apiserver``: three processes, PRs applied with kubectl.

The issue's acceptance checks: a 2-slice TPU v5e 2x4 gang ends ``Provisioned=True`` with exactly two new node
pools of 2 Ready nodes each, carrying GKE's labels; an impossible gang makes no create call; a GPU gang of 6
single-GPU nodes of a flex-start pool arrives through one resize request with its run duration, and its
Provisioned message says when the nodes end. Credentials come the production way: google-auth's
Application Default Credentials find the fake's metadata server through ``GCE_METADATA_HOST``/``GCE_METADATA_IP``.
Everything runs on the wall clock; the waits are hang guards.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangscale.clock import SystemClock
from gangscale.config import load_pool_file
from gangscale.sim.gcp import FakeGcp
from tests.cli.test_kubectl import HANG_GUARD, KUBECTL, Lines, kubectl
from tests.cli.test_run_command import TPU_GANG, _condition, _ready, _wait

PROJECT, REGION, ZONE, CLUSTER = "demo-project", "us-central1", "us-central1-a", "c1"
GKE = f"{{project: {PROJECT}, location: {REGION}, cluster: {CLUSTER}"
POOLS = f"""\
nodePools:
  - name: tpu-v5e
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: {ZONE}
    maxUnits: 4
    gke: {GKE}, mode: slice}}
  - name: l4
    machineType: g2-standard-8
    zone: {ZONE}
    maxUnits: 8
    gke: {GKE}, mode: flex-start, nodePool: l4, maxRunDurationSeconds: 86400}}
"""

IMPOSSIBLE = TPU_GANG.replace("name: multislice", "name: impossible").replace("count: 4", "count: 20")
GPU_GANG = """\
apiVersion: v1
kind: PodTemplate
metadata: {name: l4-worker, namespace: default}
template:
  spec:
    containers:
    - name: worker
      image: trainer:v1
      resources:
        limits: {nvidia.com/gpu: "1"}
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {name: gpu-gang, namespace: default}
spec:
  provisioningClassName: atomic-scale-up.gangscale.io
  podSets:
  - podTemplateRef: {name: l4-worker}
    count: 6
"""

pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")]


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gangscale.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


class Gcp:
    """The fake cloud's REST API, read the way any Google client would (a token from its metadata server)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(f"{self.url}/computeMetadata/v1/instance/service-accounts/default/token",
                                         headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=5) as resp:
            token = json.loads(resp.read())["access_token"]
        request = urllib.request.Request(self.url + path, method=method, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as resp:
            return json.loads(resp.read() or b"{}")

    def node_pools(self) -> list[str]:
        found = self.get(f"/v1/projects/{PROJECT}/locations/{REGION}/clusters/{CLUSTER}/nodePools")
        return sorted(p["name"] for p in found.get("nodePools") or [])

    def resize_requests(self) -> list[dict[str, Any]]:
        pool = self.get(f"/v1/projects/{PROJECT}/locations/{REGION}/clusters/{CLUSTER}/nodePools/l4")
        group = pool["instanceGroupUrls"][0]
        path = group[group.index("/projects/"):]
        return list(self.get(f"/compute/v1{path}/resizeRequests").get("items") or [])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, int, Gcp]]:
    """``gangscale sim apiserver``, ``gangscale sim gcp`` and ``gangscale run --provider gke``."""
    kubeconfig = tmp_path / "kubeconfig"
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    procs: list[subprocess.Popen[str]] = []
    try:
        api = start("sim", "apiserver", "--port", "0", "--kubeconfig", str(kubeconfig), "--bookmark-interval", "1")
        procs.append(api)
        Lines(api).wait_for("stop with Ctrl-C")
        fake = start("sim", "gcp", "--config", str(pools), "--kubeconfig", str(kubeconfig), "--ready-seconds", "1",
                      "--node-delete-seconds", "0.5")
        procs.append(fake)
        url = Lines(fake).wait_for("fake GCP listening on")[-1].split()[-1]
        host = url.removeprefix("http://")
        # Only the fake's metadata server may answer google-auth: no real credentials of this machine.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_"))}
        env |= {"GCE_METADATA_HOST": host, "GCE_METADATA_IP": host, "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}
        run = start("run", "--kubeconfig", str(kubeconfig), "--config", str(pools), "--provider", "gke",
                    "--gke-container-endpoint", url, "--gke-compute-endpoint", f"{url}/compute/v1",
                    "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--batch-idle", "100ms",
                    "--log-format", "json", env=env)
        procs.append(run)
        seen = Lines(run).wait_for("serving /healthz")
        port = int(json.loads(seen[-1])["msg"].rsplit(":", 1)[1])
        yield kubeconfig, port, Gcp(url)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=HANG_GUARD)
    assert procs[-1].returncode == 0


def ready_nodes(kubeconfig: Path) -> dict[str, dict[str, str]]:
    """Ready nodes: name -> labels."""
    items = yaml.safe_load(kubectl(kubeconfig, "get", "nodes", "-o", "yaml"))["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])}


def test_a_tpu_gang_gets_two_slice_pools_an_impossible_one_no_call_and_a_flex_start_gang_one_resize_request(
        cluster: tuple[Path, int, Gcp]) -> None:
    kubeconfig, port, gcp = cluster
    _wait(lambda: _ready(port))
    assert gcp.node_pools() == ["l4"]

    kubectl(kubeconfig, "apply", "-f", "-", stdin=TPU_GANG)
    _wait(lambda: _condition(kubeconfig, "multislice", "Provisioned") == ("True", "CapacityIsProvisioned"))
    slices = [name for name in gcp.node_pools() if name != "l4"]
    assert len(slices) == 2 and all(name.startswith("gs-") for name in slices)
    nodes = ready_nodes(kubeconfig)
    by_pool = {name: sorted(n for n, labels in nodes.items() if labels["cloud.google.com/gke-nodepool"] == name)
               for name in slices}
    assert [len(members) for members in by_pool.values()] == [2, 2], by_pool
    for members in by_pool.values():
        for node in members:
            labels = nodes[node]
            assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
            assert labels["cloud.google.com/gke-tpu-topology"] == "2x4"
            assert labels["topology.kubernetes.io/zone"] == ZONE

    kubectl(kubeconfig, "apply", "-f", "-", stdin=IMPOSSIBLE)
    _wait(lambda: _condition(kubeconfig, "impossible", "Provisioned") == ("False", "CapacityIsNotFound"))
    assert [name for name in gcp.node_pools() if name != "l4"] == slices  # no create call made for it

    kubectl(kubeconfig, "apply", "-f", "-", stdin=GPU_GANG)
    _wait(lambda: _condition(kubeconfig, "gpu-gang", "Provisioned") == ("True", "CapacityIsProvisioned"))
    [request] = gcp.resize_requests()
    assert (request["state"], request["resizeBy"], request["requestedRunDuration"]) == (
        "SUCCEEDED", 6, {"seconds": "86400"})
    l4 = [n for n, labels in ready_nodes(kubeconfig).items()
          if labels.get("autoscaling.gke.io/provisioning-request") == request["name"]]
    assert len(l4) == 6
    message = yaml.safe_load(kubectl(kubeconfig, "get", "provreq", "gpu-gang", "-o", "yaml"))["status"]["conditions"]
    provisioned = next(c["message"] for c in message if c["type"] == "Provisioned")
    assert "the nodes have a run duration: the cloud deletes them at " in provisioned, provisioned


def gcp_env(url: str, tmp_path: Path) -> dict[str, str]:
    host = url.removeprefix("http://")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_"))}
    return env | {"GCE_METADATA_HOST": host, "GCE_METADATA_IP": host, "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}


async def test_pools_from_gke_writes_a_pool_file_and_leaves_out_an_autoscaled_pool(tmp_path: Path) -> None:
    gcp = FakeGcp(SystemClock(), None, project=PROJECT)
    gcp.add_cluster(REGION, CLUSTER, [ZONE, "us-central1-b"])
    gcp.add_node_pool((REGION, CLUSTER), "v5e", machine_type="ct5lp-hightpu-4t", zones=[ZONE], tpu_topology="2x4",
                      labels={"team": "ml"})
    gcp.add_node_pool((REGION, CLUSTER), "l4", machine_type="g2-standard-8", zones=[ZONE, "us-central1-b"])
    gcp.add_node_pool((REGION, CLUSTER), "auto", machine_type="g2-standard-8", zones=[ZONE],
                      autoscaling_enabled=True)
    gcp.add_node_pool((REGION, CLUSTER), "h100-spot", machine_type="a3-highgpu-8g", zones=[ZONE], spot=True)
    gcp.add_node_pool((REGION, CLUSTER), "h100-resv", machine_type="a3-highgpu-8g", zones=[ZONE], extra={"config": {
        "reservationAffinity": {"consumeReservationType": "SPECIFIC_RESERVATION",
                                "key": "compute.googleapis.com/reservation-name", "values": ["h100-block"]}}})
    await gcp.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gangscale.cli", "pools", "--from-gke", f"{PROJECT}/{REGION}/{CLUSTER}",
            "--gke-container-endpoint", gcp.url, env=gcp_env(gcp.url, tmp_path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), HANG_GUARD)
    finally:
        await gcp.stop()
    assert proc.returncode == 0, err.decode()
    assert "left out auto: GKE's cluster autoscaler manages it" in err.decode()
    written = tmp_path / "pools.yaml"
    written.write_text(out.decode())
    pools = {p.name: p for p in parse_pool_file(written)}
    assert sorted(pools) == ["h100-resv", "h100-spot", "l4-a", "l4-b", "v5e"]
    assert [pools[name].capacity_type for name in ("h100-resv", "h100-spot", "l4-a")] == [
        "reservation", "spot", "on-demand"]
    assert pools["h100-spot"].labels["cloud.google.com/gke-spot"] == "true"
    assert pools["v5e"].provider["gke"] == {"project": PROJECT, "location": REGION, "cluster": CLUSTER,
                                            "mode": "slice", "nodePool": "v5e"}
    assert pools["v5e"].nodes_per_unit == 2 and pools["v5e"].labels["team"] == "ml"
    assert (pools["l4-b"].zone, pools["l4-b"].provider["gke"]["mode"]) == ("us-central1-b", "resize")
    checked = await asyncio.create_subprocess_exec(sys.executable, "-m", "gangscale.cli", "pools", str(written),
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, problems = await asyncio.wait_for(checked.communicate(), HANG_GUARD)
    assert checked.returncode == 0, problems.decode()


def parse_pool_file(path: Path) -> tuple[Any, ...]:
    return load_pool_file(str(path)).pools


def test_run_refuses_the_gke_provider_on_pools_without_a_gke_block(tmp_path: Path) -> None:
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS + "  - {name: plain, machineType: g2-standard-8, zone: z-a-1, maxUnits: 1}\n")
    done = subprocess.run([sys.executable, "-m", "gangscale.cli", "run", "--config", str(pools), "--provider", "gke",
                           "--kubeconfig", str(tmp_path / "none")], capture_output=True, text=True,
                          timeout=HANG_GUARD, check=False)
    assert done.returncode == 2
    assert "--provider gke needs a gke: block (project, location, cluster, mode) on every pool" in done.stderr
    assert "has none on plain" in done.stderr
