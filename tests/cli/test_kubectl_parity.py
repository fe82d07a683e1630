"""kubectl prints against ``gangscale sim apiserver`` what it prints against a real cluster: the columns of
``kubectl get`` (and ``-o wide``) per kind, ``--sort-by`` (which needs ``includeObject=Object``), and the
Events section of ``kubectl describe`` (events listed by ``involvedObject.*`` field selectors)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_kubectl import HANG_GUARD, KUBECTL, Lines, kubectl

pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    kubeconfig = tmp_path_factory.mktemp("parity") / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "gangscale.cli", "sim", "apiserver", "--port", "0",
                             "--kubeconfig", str(kubeconfig)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        Lines(proc).wait_for("stop with Ctrl-C")
        _create_objects(kubeconfig)
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=HANG_GUARD)


def ago(**kw: float) -> str:
    return (datetime.now(UTC) - timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


OBJECTS: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {
        "node-role.kubernetes.io/worker": ""}},
     "spec": {"unschedulable": True},
     "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
                "nodeInfo": {"kubeletVersion": "v1.36.1", "osImage": "Container-Optimized OS",
                             "kernelVersion": "6.6.0", "containerRuntimeVersion": "containerd://2.1.0"}}},
    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker", "namespace": "default"},
     "template": {"metadata": {"labels": {"app": "train", "tier": "gpu"}},
                  "spec": {"containers": [{"name": "w", "image": "trainer:v1"}, {"name": "log", "image": "fb:2"}]}}},
    {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
     "metadata": {"name": "train", "namespace": "default"},
     "spec": {"provisioningClassName": "atomic-scale-up.gangscale.io",
              "podSets": [{"podTemplateRef": {"name": "worker"}, "count": 4}]}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "wl", "namespace": "default"},
     "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
         "spec": {"containers": [{"name": "c", "image": "i"}]}}}]}},
    {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc", "namespace": "default"},
     "spec": {"headGroupSpec": {}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "default"},
     "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1.37"}]}},
    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "gangscale", "namespace": "default"},
     "spec": {"holderIdentity": "replica-0"}},
]
STATUSES = [
    ("node", "n1", OBJECTS[0]["status"]),
    ("workload", "wl", {"admission": {"clusterQueue": "cq"}, "conditions": [
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    ("raycluster", "rc", {"state": "ready", "desiredWorkerReplicas": 2, "availableWorkerReplicas": 1,
                          "desiredCPU": "8", "desiredMemory": "32Gi", "desiredGPU": "0", "desiredTPU": "4",
                          "head": {"podIP": "10.1.0.9", "serviceIP": "10.2.0.1"}}),
]
# (kind, object name, namespace of the involved object, event reason, minutes since last seen)
EVENTS = [("ProvisioningRequest", "train", "default", "Provisioned", 10),
          ("PodTemplate", "worker", "default", "Seen", 4),
          ("Node", "n1", "", "Cordoned", 5),
          ("Workload", "wl", "default", "QuotaReserved", 3),
          ("RayCluster", "rc", "default", "Scaled", 7)]


def _create_objects(kubeconfig: Path) -> None:
    for obj in OBJECTS:
        kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(obj))
    for resource, name, status in STATUSES:
        kubectl(kubeconfig, "patch", resource, name, "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": status}))
    for i, (kind, name, namespace, reason, minutes) in enumerate(EVENTS):
        uid, api_version = kubectl(kubeconfig, "get", kind.lower(), name, "-o",
                                   "jsonpath={.metadata.uid} {.apiVersion}").split()
        event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"ev{i}", "namespace": "default"},
                 "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace,
                                    "uid": uid},
                 "type": "Normal", "reason": reason, "message": f"{reason.lower()} {name}",
                 "source": {"component": "gangscale"}, "count": 4 if i == 0 else 1,
                 "firstTimestamp": ago(minutes=minutes + 20 if i == 0 else minutes),
                 "lastTimestamp": ago(minutes=minutes)}
        kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(event))


def table(text: str) -> list[dict[str, str]]:
    """kubectl's aligned output as rows keyed by header; every column starts where its header starts."""
    header, *lines = text.splitlines()
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 2:i] == "  ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    return [{n: line[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for line in lines]


def test_get_events_sorted_by_last_timestamp(sim: Path) -> None:
    rows = table(kubectl(sim, "get", "events", "--sort-by=.lastTimestamp"))
    assert list(rows[0]) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [r["REASON"] for r in rows] == ["Provisioned", "Scaled", "Cordoned", "Seen", "QuotaReserved"]
    assert rows[0] == {"LAST SEEN": "10m", "TYPE": "Normal", "REASON": "Provisioned",
                       "OBJECT": "provisioningrequest/train", "MESSAGE": "provisioned train"}


def test_get_events_wide(sim: Path) -> None:
    rows = {r["NAME"]: r for r in table(kubectl(sim, "get", "events", "-o", "wide"))}
    assert list(rows["ev0"]) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE",
                                 "FIRST SEEN", "COUNT", "NAME"]
    assert rows["ev0"]["FIRST SEEN"] == "30m" and rows["ev0"]["COUNT"] == "4"
    assert rows["ev0"]["SOURCE"] == "gangscale" and rows["ev2"]["OBJECT"] == "node/n1"


def test_kubectl_events_shows_repeats_as_an_interval(sim: Path) -> None:
    rows = {r["REASON"]: r for r in table(kubectl(sim, "events", "--for", "provisioningrequest/train"))}
    assert rows["Provisioned"]["LAST SEEN"] == "10m (x4 over 30m)"


@pytest.mark.parametrize(("args", "header", "first"), [
    (("nodes", "-o", "wide"), ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP",
                               "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"],
     {"STATUS": "Ready,SchedulingDisabled", "ROLES": "worker", "VERSION": "v1.36.1", "INTERNAL-IP": "10.0.0.4",
      "EXTERNAL-IP": "<none>", "OS-IMAGE": "Container-Optimized OS", "CONTAINER-RUNTIME": "containerd://2.1.0"}),
    (("podtemplates",), ["NAME", "CONTAINERS", "IMAGES", "POD LABELS"],
     {"CONTAINERS": "w,log", "IMAGES": "trainer:v1,fb:2", "POD LABELS": "app=train,tier=gpu"}),
    (("provisioningrequests",), ["NAME", "AGE"], {"NAME": "train"}),
    (("workloads",), ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"],
     {"QUEUE": "lq", "RESERVED IN": "cq", "ADMITTED": "True", "FINISHED": ""}),
    (("rayclusters",), ["NAME", "DESIRED WORKERS", "AVAILABLE WORKERS", "CPUS", "MEMORY", "GPUS", "STATUS", "AGE"],
     {"DESIRED WORKERS": "2", "AVAILABLE WORKERS": "1", "MEMORY": "32Gi", "STATUS": "ready"}),
    (("rayclusters", "-o", "wide"), ["NAME", "DESIRED WORKERS", "AVAILABLE WORKERS", "CPUS", "MEMORY", "GPUS",
                                     "TPUS", "STATUS", "AGE", "HEAD POD IP", "HEAD SERVICE IP"],
     {"TPUS": "4", "HEAD POD IP": "10.1.0.9", "HEAD SERVICE IP": "10.2.0.1"}),
    (("pods", "-o", "wide"), ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                              "READINESS GATES"],
     {"READY": "0/1", "STATUS": "Pending", "RESTARTS": "0", "IP": "<none>", "NODE": "n1"}),
    (("leases",), ["NAME", "HOLDER", "AGE"], {"HOLDER": "replica-0"}),
], ids=["nodes-wide", "podtemplates", "provreqs", "workloads", "rayclusters", "rayclusters-wide", "pods-wide",
        "leases"])
def test_get_columns(sim: Path, args: tuple[str, ...], header: list[str], first: dict[str, str]) -> None:
    rows = table(kubectl(sim, "get", *args))
    assert list(rows[0]) == header
    assert {k: rows[0][k] for k in first} == first


@pytest.mark.parametrize(("kind", "name", "namespace", "reason", "minutes"), EVENTS,
                         ids=[e[0] for e in EVENTS])
def test_describe_lists_the_events_about_the_object(sim: Path, kind: str, name: str, namespace: str, reason: str,
                                                    minutes: int) -> None:
    out = kubectl(sim, "describe", kind.lower(), name).splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("Events:"))
    events = table("\n".join(line.strip() for line in out[start + 1:] if line.strip() and "----" not in line))
    assert [(e["Type"], e["Reason"], e["From"], e["Message"]) for e in events] == [
        ("Normal", reason, "gangscale", f"{reason.lower()} {name}")]
    assert events[0]["Age"].startswith(f"{minutes}m")


def test_describe_event(sim: Path) -> None:
    out = kubectl(sim, "describe", "event", "ev0")
    assert re.search(r"^Reason:\s+Provisioned$", out, re.M) and re.search(r"^Count:\s+4$", out, re.M)
    assert re.search(r"^  Kind:\s+ProvisioningRequest$", out, re.M) and re.search(r"^  Name:\s+train$", out, re.M)
