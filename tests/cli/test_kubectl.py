"""kubectl against ``gangscale sim apiserver``, started as a user would start it.

Skipped only where no kubectl is found (``$GANGSCALE_KUBECTL``, then the virtualenv's, then ``$PATH``);
the dev extra installs one, so CI runs these.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

HANG_GUARD = 20.0


def _find_kubectl() -> str | None:
    explicit = os.environ.get("GANGSCALE_KUBECTL")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return str(beside)
    return shutil.which("kubectl")


KUBECTL = _find_kubectl()
pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")]

MANIFEST = """\
apiVersion: v1
kind: PodTemplate
metadata:
  name: train-worker
  namespace: default
template:
  spec:
    containers:
    - name: worker
      image: trainer:v1
      resources:
        limits:
          nvidia.com/gpu: "8"
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata:
  name: train
  namespace: default
spec:
  provisioningClassName: atomic-scale-up.gangscale.io
  podSets:
  - podTemplateRef:
      name: train-worker
    count: 4
"""


class Lines:
    """Reads a process's stdout on a thread so the test can wait for a line with a hang guard."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [self.q.put(line) for line in stdout], daemon=True).start()

    def wait_for(self, needle: str) -> list[str]:
        seen: list[str] = []
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            if needle in line:
                return seen
        pytest.fail(f"{needle!r} not seen; got {seen!r}")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    kubeconfig = tmp_path_factory.mktemp("sim") / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", "0", "--kubeconfig", str(kubeconfig),
         "--bookmark-interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        Lines(proc).wait_for("stop with Ctrl-C")
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=HANG_GUARD)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    assert KUBECTL is not None
    done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
                          text=True, timeout=HANG_GUARD, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    assert "error" not in done.stderr.lower(), done.stderr
    return done.stdout


def test_get_nodes(sim: Path) -> None:
    assert KUBECTL is not None
    empty = subprocess.run([KUBECTL, "--kubeconfig", str(sim), "get", "nodes"], capture_output=True, text=True,
                           timeout=HANG_GUARD, check=True)
    assert "No resources found" in empty.stderr
    kubectl(sim, "create", "-f", "-", stdin="apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n")
    table = kubectl(sim, "get", "nodes").splitlines()
    assert table[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert table[1].split()[:3] == ["n1", "Unknown", "<none>"]


def test_apply_get_patch_delete_provisioning_request(sim: Path) -> None:
    out = kubectl(sim, "apply", "-f", "-", stdin=MANIFEST)
    assert "podtemplate/train-worker created" in out
    assert "provisioningrequest.autoscaling.x-k8s.io/train created" in out
    # A second client-side apply computes a patch against last-applied-configuration.
    again = kubectl(sim, "apply", "-f", "-", stdin=MANIFEST)
    assert "unchanged" in again

    pr = yaml.safe_load(kubectl(sim, "get", "provisioningrequests", "train", "-o", "yaml"))
    assert pr["spec"]["podSets"][0]["count"] == 4
    assert pr["metadata"]["generation"] == 1
    assert "kubectl.kubernetes.io/last-applied-configuration" in pr["metadata"]["annotations"]

    kubectl(sim, "patch", "provisioningrequest", "train", "--type", "merge", "-p",
            '{"metadata":{"labels":{"team":"ml"}}}')
    listed = kubectl(sim, "get", "provreq", "-l", "team=ml", "-o", "name")
    assert listed.strip() == "provisioningrequest.autoscaling.x-k8s.io/train"

    kubectl(sim, "delete", "provisioningrequest", "train")
    gone = subprocess.run([KUBECTL or "", "--kubeconfig", str(sim), "get", "provreq", "train"],
                          capture_output=True, text=True, timeout=HANG_GUARD, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_server_side_apply(sim: Path) -> None:
    out = kubectl(sim, "apply", "--server-side", "-f", "-", stdin=MANIFEST.replace("name: train\n", "name: ssa\n"))
    assert "serverside-applied" in out
    pr = yaml.safe_load(kubectl(sim, "get", "provisioningrequest", "ssa", "-o", "yaml", "--show-managed-fields"))
    assert [m["manager"] for m in pr["metadata"]["managedFields"]] == ["kubectl"]
    assert pr["metadata"]["managedFields"][0]["operation"] == "Apply"


def test_get_watch_prints_later_changes(sim: Path) -> None:
    assert KUBECTL is not None
    # `kubectl create namespace` would send a protobuf body, which the embedded server does not decode.
    kubectl(sim, "apply", "-f", "-", stdin="apiVersion: v1\nkind: Namespace\nmetadata:\n  name: watched\n")
    kubectl(sim, "create", "-n", "watched", "-f", "-",
            stdin=MANIFEST.split("---", maxsplit=1)[0].replace("namespace: default", "namespace: watched"))
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(sim), "get", "podtemplates", "-n", "watched", "-w",
                             "-o", "custom-columns=NAME:.metadata.name,TEAM:.metadata.labels.team"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = Lines(proc)
        lines.wait_for("train-worker")  # the initial list
        kubectl(sim, "label", "-n", "watched", "podtemplate", "train-worker", "team=ml")
        later = lines.wait_for("ml")  # only the watch can print the new label
        assert any("train-worker" in line and "ml" in line for line in later)
    finally:
        proc.terminate()
        proc.wait(timeout=HANG_GUARD)
