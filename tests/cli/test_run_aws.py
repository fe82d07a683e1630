"""``gangscale run --provider aws`` as an operator starts it, against ``gangscale sim aws`` (the fake EC2, shaped by
botocore's EC2 model) and ``gangscale sim apiserver``: three processes, PRs applied with kubectl (issue 29).

The issue's acceptance checks: an 8-node GPU gang (8 pods of one whole p5.48xlarge each) ends ``Provisioned=True``
with exactly 8 Ready nodes, all launched by one ``CreateFleet`` call; a gang its availability zone cannot hold whole
(the fake's stock below the gang) gets no instance at all and a not-provisioned condition that says why; a
``CreateFleet`` whose answer is lost after EC2 applied it, repeated with the same ``ClientToken``, launches no second
instance set; and ``--provider aws`` is refused on a pool file without ``aws:`` blocks.

As in the gke test the fake runs as its own process (the issue asks for three processes, as an operator runs
them), so its knobs come from the pool file (``simulated: {stock, lostResponses}``, read by
``gangscale.sim.aws.standalone``) and calls are counted from the line it prints per ``CreateFleet``; instances are
read the way any EC2 client reads them (botocore, ``DescribeInstances``). Credentials come the production way:
botocore's default chain finds ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` in the environment, the region comes
from the pool file. Everything runs on the wall clock; the waits are hang guards.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.test_kubectl import HANG_GUARD, KUBECTL, Lines, kubectl
from tests.cli.test_run_command import _condition, _ready, _wait

REGION, ZONE, CLUSTER, SUBNET = "us-east-1", "us-east-1a", "my-eks", "subnet-0abc"
GPU_TEMPLATE, SHORT_TEMPLATE = "lt-0123456789abcdef0", "lt-0123456789abcdef1"
KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}


def pools_yaml(gpu_knobs: str = "") -> str:
    """A p5.48xlarge pool (unlimited stock unless ``gpu_knobs`` says otherwise) and a p4d.24xlarge pool whose zone
    holds only 4 instances. Each has its own launch template: the fake's template carries the pool's node labels."""
    aws = f"region: {REGION}, cluster: {CLUSTER}, subnet: {SUBNET}"
    return f"""\
nodePools:
  - name: gpu
    machineType: p5.48xlarge
    zone: {ZONE}
    maxUnits: 16
    aws: {{{aws}, launchTemplate: {GPU_TEMPLATE}}}
{gpu_knobs}  - name: short
    machineType: p4d.24xlarge
    zone: {ZONE}
    maxUnits: 16
    aws: {{{aws}, launchTemplate: {SHORT_TEMPLATE}}}
    simulated: {{stock: 4}}
"""


def gang(name: str, pool: str, count: int) -> str:
    """A PodTemplate of one whole 8-GPU instance of ``pool`` and a ProvisioningRequest of ``count`` such pods."""
    return f"""\
apiVersion: v1
kind: PodTemplate
metadata: {{name: {name}-worker, namespace: default}}
template:
  spec:
    nodeSelector: {{gangscale.io/node-pool: {pool}}}
    containers:
    - name: trainer
      image: trainer:v1
      resources:
        limits: {{nvidia.com/gpu: "8"}}
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {{name: {name}, namespace: default}}
spec:
  provisioningClassName: atomic-scale-up.gangscale.io
  podSets:
  - podTemplateRef: {{name: {name}-worker}}
    count: {count}
"""


pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")]

_FLEET_LINE = re.compile(r"fake EC2: CreateFleet ClientToken=(\S*) TotalTargetCapacity=(\d+) -> (.*)$")


@dataclass(frozen=True)
class FleetCall:
    token: str
    units: int
    outcome: str  # "200: 8 instance(s) i-…", "answer lost after it was applied: …", "dropped unapplied", …

    @property
    def instances(self) -> list[str]:
        found = re.search(r"(\d+) instance\(s\) (\S+)", self.outcome)
        return [] if found is None or found.group(2) == "-" else found.group(2).split(",")


class Ec2:
    """The fake EC2 as an operator sees it: its printed call log and botocore's ``DescribeInstances``."""

    def __init__(self, url: str, lines: Lines) -> None:
        self.url = url
        self.lines = lines
        self.seen: list[str] = []
        import botocore.session  # noqa: PLC0415 (AWS's SDK only in the tests that talk to the fake)

        self.client = botocore.session.get_session().create_client(
            "ec2", region_name=REGION, endpoint_url=url, aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])

    def fleet_calls(self) -> list[FleetCall]:
        while True:
            try:
                self.seen.append(self.lines.q.get_nowait().rstrip("\n"))
            except queue.Empty:
                break
        return [FleetCall(m.group(1), int(m.group(2)), m.group(3))
                for m in map(_FLEET_LINE.search, self.seen) if m is not None]

    def instances(self, **filters: str) -> list[dict[str, Any]]:
        """Every instance (terminated ones too) matching ``filters`` (EC2 filter name -> one value)."""
        pages = self.client.get_paginator("describe_instances").paginate(
            Filters=[{"Name": k, "Values": [v]} for k, v in filters.items()])
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gangscale.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def aws_env(tmp_path: Path) -> dict[str, str]:
    """Only the keys the test gives: no profile, shared file, instance profile or endpoint of this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return env | KEYS | {"AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
                         "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
                         "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, int, Ec2]]:
    """``gangscale sim apiserver``, ``gangscale sim aws`` and ``gangscale run --provider aws`` on the pool file
    ``request.param`` (default :func:`pools_yaml`)."""
    kubeconfig = tmp_path / "kubeconfig"
    pools = tmp_path / "pools.yaml"
    pools.write_text(getattr(request, "param", None) or pools_yaml())
    procs: list[subprocess.Popen[str]] = []
    try:
        api = start("sim", "apiserver", "--port", "0", "--kubeconfig", str(kubeconfig), "--bookmark-interval", "1")
        procs.append(api)
        Lines(api).wait_for("stop with Ctrl-C")
        fake = start("sim", "aws", "--config", str(pools), "--kubeconfig", str(kubeconfig), env=aws_env(tmp_path))
        procs.append(fake)
        fake_lines = Lines(fake)
        url = fake_lines.wait_for("fake EC2 listening on")[-1].split()[-1]
        fake_lines.wait_for("stop with Ctrl-C")
        run = start("run", "--kubeconfig", str(kubeconfig), "--config", str(pools), "--provider", "aws",
                    "--aws-endpoint", url, "--metrics-port", "0", "--metrics-host", "127.0.0.1",
                    "--batch-idle", "100ms", "--log-format", "json", env=aws_env(tmp_path))
        procs.append(run)
        seen = Lines(run).wait_for("serving /healthz")
        port = int(json.loads(seen[-1])["msg"].rsplit(":", 1)[1])
        yield kubeconfig, port, Ec2(url, fake_lines)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=HANG_GUARD)
    assert procs[-1].returncode == 0


def ready_nodes(kubeconfig: Path) -> dict[str, dict[str, Any]]:
    """Ready nodes: name -> the Node."""
    items = yaml.safe_load(kubectl(kubeconfig, "get", "nodes", "-o", "yaml"))["items"]
    return {n["metadata"]["name"]: n for n in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])}


def recorded_tokens(kubeconfig: Path, name: str) -> set[str]:
    """The tokens of the PR's recorded scale-up (the intent gangscale writes before it calls EC2)."""
    pr = yaml.safe_load(kubectl(kubeconfig, "get", "provreq", name, "-o", "yaml"))
    raw = ((pr.get("status") or {}).get("provisioningClassDetails") or {}).get("gangscale.io/scale-up")
    return {str(step["token"]) for step in yaml.safe_load(raw)["steps"]} if raw else set()


def message(kubeconfig: Path, name: str, ctype: str) -> str:
    pr = yaml.safe_load(kubectl(kubeconfig, "get", "provreq", name, "-o", "yaml"))
    return next(str(c["message"]) for c in pr["status"]["conditions"] if c["type"] == ctype)


def tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags") or []}


def test_an_8_node_gpu_gang_gets_one_fleet_and_a_gang_the_zone_cannot_hold_gets_no_instance(
        cluster: tuple[Path, int, Ec2]) -> None:
    kubeconfig, port, ec2 = cluster
    _wait(lambda: _ready(port))

    kubectl(kubeconfig, "apply", "-f", "-", stdin=gang("gpu-gang", "gpu", 8))
    _wait(lambda: _condition(kubeconfig, "gpu-gang", "Provisioned") == ("True", "CapacityIsProvisioned"))
    [call] = ec2.fleet_calls()
    assert (call.units, len(call.instances)) == (8, 8), call
    assert recorded_tokens(kubeconfig, "gpu-gang") == {call.token}
    launched = {i["InstanceId"]: i for i in ec2.instances()}
    assert sorted(launched) == sorted(call.instances)
    assert all(tags(i)["gangscale.io/token"] == call.token and tags(i)["gangscale.io/pool"] == "gpu"
               and tags(i)[f"kubernetes.io/cluster/{CLUSTER}"] == "owned" for i in launched.values())
    _wait(lambda: len(ready_nodes(kubeconfig)) == 8)
    nodes = ready_nodes(kubeconfig)
    # EKS's naming: the Node is the instance's private DNS name, its providerID aws:///<zone>/<instance id>.
    assert sorted(nodes) == sorted(i["PrivateDnsName"] for i in launched.values())
    assert sorted(n["spec"]["providerID"] for n in nodes.values()) == sorted(f"aws:///{ZONE}/{i}" for i in launched)
    for node in nodes.values():
        labels = node["metadata"]["labels"]
        assert (labels["node.kubernetes.io/instance-type"], labels["topology.kubernetes.io/zone"],
                labels["gangscale.io/node-pool"]) == ("p5.48xlarge", ZONE, "gpu")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"

    kubectl(kubeconfig, "apply", "-f", "-", stdin=gang("too-big", "short", 8))
    _wait(lambda: (_condition(kubeconfig, "too-big", "Provisioned") or ("",))[0] == "False"
          and len(ec2.fleet_calls()) > 1)
    tried = ec2.fleet_calls()[1:]
    assert all(c.units == 8 and c.instances == [] and "InsufficientInstanceCapacity" in c.outcome for c in tried)
    assert ec2.instances(**{"instance-type": "p4d.24xlarge"}) == []  # not 4 of 8: none
    assert len(ec2.instances()) == 8 and len(ready_nodes(kubeconfig)) == 8
    said = message(kubeconfig, "too-big", "Provisioned")
    assert "stockout (InsufficientInstanceCapacity)" in said, said


@pytest.mark.parametrize("cluster", [pools_yaml("    simulated: {lostResponses: 1}\n")], indirect=True)
def test_a_lost_create_fleet_answer_repeated_with_its_client_token_launches_no_second_instance_set(
        cluster: tuple[Path, int, Ec2]) -> None:
    kubeconfig, port, ec2 = cluster
    _wait(lambda: _ready(port))

    kubectl(kubeconfig, "apply", "-f", "-", stdin=gang("gpu-gang", "gpu", 8))
    _wait(lambda: _condition(kubeconfig, "gpu-gang", "Provisioned") == ("True", "CapacityIsProvisioned"))
    lost, *repeats = ec2.fleet_calls()
    assert lost.outcome.startswith("answer lost after it was applied") and len(lost.instances) == 8, lost
    # The repeat (botocore's retry of a closed connection, or gangscale's own) carries the same token, and EC2's
    # idempotency answers the first launch again.
    assert repeats and all((c.token, c.instances) == (lost.token, lost.instances) for c in repeats), repeats
    assert recorded_tokens(kubeconfig, "gpu-gang") == {lost.token}
    assert sorted(i["InstanceId"] for i in ec2.instances()) == sorted(lost.instances)
    _wait(lambda: len(ready_nodes(kubeconfig)) == 8)


def test_run_refuses_the_aws_provider_on_pools_without_an_aws_block(tmp_path: Path) -> None:
    pools = tmp_path / "pools.yaml"
    pools.write_text(pools_yaml() + "  - {name: plain, machineType: m5.large, zone: us-east-1a, maxUnits: 1}\n")
    done = subprocess.run([sys.executable, "-m", "gangscale.cli", "run", "--config", str(pools), "--provider", "aws",
                           "--kubeconfig", str(tmp_path / "none")], capture_output=True, text=True,
                          timeout=HANG_GUARD, check=False, env=aws_env(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "--provider aws needs an aws: block (region, cluster, launchTemplate, subnet) on every pool" in done.stderr
    assert "has none on plain" in done.stderr
