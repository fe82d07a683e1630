"""``gangscale run`` as an operator starts it: against ``gangscale sim apiserver``, PRs applied with kubectl.

The issue's acceptance check: a PR for a 2-slice v5e 2x4 gang ends ``Provisioned=True`` with exactly 4 new
Ready nodes; an impossible one ends ``Provisioned=False`` with no node created. Both processes run on the
wall clock here (a 1 s provisioning delay), so the waits below are hang guards, not timing assertions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cli.test_kubectl import HANG_GUARD, KUBECTL, Lines, kubectl

POOLS = """\
nodePools:
  - name: tpu-v5e
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: us-central1-a
    maxUnits: 4
    simulated: {provisionSeconds: 1}
"""

TPU_GANG = """\
apiVersion: v1
kind: PodTemplate
metadata: {name: slice-worker, namespace: default}
template:
  spec:
    nodeSelector:
      cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice
      cloud.google.com/gke-tpu-topology: 2x4
    containers:
    - name: worker
      image: jax:latest
      resources:
        limits: {google.com/tpu: "4"}
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {name: multislice, namespace: default}
spec:
  provisioningClassName: atomic-scale-up.gangscale.io
  podSets:
  - podTemplateRef: {name: slice-worker}
    count: 4
"""

IMPOSSIBLE = """\
apiVersion: v1
kind: PodTemplate
metadata: {name: h100-worker, namespace: default}
template:
  spec:
    containers:
    - name: worker
      image: trainer:v1
      resources:
        limits: {nvidia.com/gpu: "8"}
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {name: impossible, namespace: default}
spec:
  provisioningClassName: atomic-scale-up.gangscale.io
  podSets:
  - podTemplateRef: {name: h100-worker}
    count: 2
"""

pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """The embedded API server and ``gangscale run`` as two processes; yields (kubeconfig, metrics port)."""
    kubeconfig = tmp_path / "kubeconfig"
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    api = subprocess.Popen([sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", "0",
                            "--kubeconfig", str(kubeconfig), "--bookmark-interval", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run: subprocess.Popen[str] | None = None
    try:
        Lines(api).wait_for("stop with Ctrl-C")
        run = subprocess.Popen([sys.executable, "-m", "gangscale.cli", "run", "--kubeconfig", str(kubeconfig),
                                "--config", str(pools), "--provider", "simulated", "--metrics-port", "0",
                                "--metrics-host", "127.0.0.1", "--batch-idle", "100ms", "--log-format", "json"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = Lines(run).wait_for("serving /healthz")
        port = int(json.loads(seen[-1])["msg"].rsplit(":", 1)[1])
        yield kubeconfig, port
    finally:
        for proc in (run, api):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=HANG_GUARD)
    assert run is not None and run.returncode == 0


def _condition(kubeconfig: Path, name: str, ctype: str) -> tuple[str, str] | None:
    pr = yaml.safe_load(kubectl(kubeconfig, "get", "provreq", name, "-o", "yaml"))
    for cond in (pr.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return cond["status"], cond["reason"]
    return None


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except urllib.error.HTTPError:
        return False  # 503 until every watch has listed and recorded scale-ups are reconciled


def _wait(predicate: object) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    pytest.fail("not reached before the hang guard")


def _nodes(kubeconfig: Path) -> list[dict[str, object]]:
    return list(yaml.safe_load(kubectl(kubeconfig, "get", "nodes", "-o", "yaml"))["items"])


def test_a_two_slice_gang_gets_exactly_four_ready_nodes_and_an_impossible_one_gets_none(
        cluster: tuple[Path, int]) -> None:
    kubeconfig, port = cluster
    _wait(lambda: _ready(port))

    kubectl(kubeconfig, "apply", "-f", "-", stdin=TPU_GANG)
    _wait(lambda: _condition(kubeconfig, "multislice", "Provisioned") == ("True", "CapacityIsProvisioned"))
    nodes = _nodes(kubeconfig)
    assert len(nodes) == 4
    assert all(any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])  # type: ignore[index]
               for n in nodes)
    assert _condition(kubeconfig, "multislice", "Accepted") == ("True", "Accepted")

    kubectl(kubeconfig, "apply", "-f", "-", stdin=IMPOSSIBLE)
    _wait(lambda: _condition(kubeconfig, "impossible", "Provisioned") == ("False", "CapacityIsNotFound"))
    assert len(_nodes(kubeconfig)) == 4  # nothing created for the impossible gang

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        metrics = resp.read().decode()
    assert 'gangscale_provisioning_request_outcomes_total{class="atomic-scale-up.gangscale.io",dry_run="false",' \
           'outcome="CapacityIsProvisioned"} 1.0' in metrics
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/plans", timeout=2) as resp:
        plans = json.loads(resp.read())
    assert {r["request"]: r["phase"] for r in plans["requests"]} == {
        "default/impossible": "Pending", "default/multislice": "Booked"}


def test_an_invalid_pool_file_is_refused_with_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "pools.yaml"
    bad.write_text("nodePools:\n  - name: a\n    maxUnits: -1\n    machineTyp: x\n")
    done = subprocess.run([sys.executable, "-m", "gangscale.cli", "run", "--config", str(bad), "--provider",
                           "simulated", "--kubeconfig", str(tmp_path / "none")], capture_output=True, text=True,
                          timeout=HANG_GUARD, check=False)
    assert done.returncode == 2
    assert "nodePools[0] (a).machineTyp: unknown field; did you mean machineType?" in done.stderr
    assert "maxUnits" in done.stderr
