"""What an EKS user installs: the IAM policies (``deploy/aws``), the kustomize overlay (``deploy/overlays/aws``) and
the chart's ``provider: aws`` (``deploy/helm/gangscale``).

The policies are held to the code: every EC2 operation the aws provider's modules name (a string literal that is an
operation of botocore's EC2 model) must be granted, and nothing else but what a fleet of type instant needs of its
caller besides ``ec2:CreateFleet`` (EC2 user guide, "EC2 Fleet prerequisites": an instant fleet uses no
service-linked role, so it launches and tags with the caller's own permissions: ``ec2:RunInstances``,
``ec2:CreateTags`` at launch, ``iam:PassRole`` of the launch templates' instance profile role). The discovery
policy likewise holds exactly the EKS, Auto Scaling and EC2 operations ``gangscale pools --from-eks`` names.
"""

from __future__ import annotations

import ast
import gzip
import importlib.resources
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gangscale import cli
from gangscale.config import parse_pool_yaml
from tests.deploy import helm
from tests.deploy import manifests as m

JSON = dict[str, Any]
PROVIDER = m.REPO_ROOT / "gangscale" / "providers" / "aws"
DISCOVERY = PROVIDER / "eksdiscover.py"
POLICY, DISCOVER_POLICY = m.DEPLOY / "aws" / "iam-policy.json", m.DEPLOY / "aws" / "iam-policy-discover.json"
AWS_OVERLAY = m.DEPLOY / "overlays" / "aws"
#: What CreateFleet of type instant needs of its caller besides ec2:CreateFleet itself.
LAUNCH_NEEDS = {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"}
MODELS = {"ec2": "2016-11-15", "eks": "2017-11-01", "autoscaling": "2011-01-01"}


@cache
def operations(service: str) -> frozenset[str]:
    path = importlib.resources.files("botocore").joinpath("data", service, MODELS[service], "service-2.json.gz")
    with path.open("rb") as raw:
        return frozenset(json.loads(gzip.decompress(raw.read()))["operations"])


def named_operations(paths: list[Path], services: tuple[str, ...]) -> set[str]:
    """``service:Operation`` for every string literal of these modules that is an operation of these services."""
    out = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out |= {f"{service}:{node.value}" for service in services if node.value in operations(service)}
    return out


def granted(policy: JSON) -> dict[str, JSON]:
    """action -> its statement (each action granted by one statement)."""
    out: dict[str, JSON] = {}
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow" and statement.get("Resource"), statement
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            assert action not in out and "*" not in action, action
            out[action] = statement
    return out


def load(path: Path) -> JSON:
    policy: JSON = json.loads(path.read_text(encoding="utf-8"))
    assert policy["Version"] == "2012-10-17"
    return policy


def test_the_runtime_policy_grants_exactly_what_the_provider_calls_and_a_fleet_launch_needs() -> None:
    provider_files = [p for p in sorted(PROVIDER.glob("*.py")) if p != DISCOVERY]
    called = named_operations(provider_files, ("ec2",))
    assert {"ec2:CreateFleet", "ec2:TerminateInstances", "ec2:DescribeInstances"} <= called
    actions = granted(load(POLICY))
    assert not called - set(actions), f"the provider calls what the policy lacks: {sorted(called - set(actions))}"
    assert set(actions) == called | LAUNCH_NEEDS, sorted(set(actions) - called - LAUNCH_NEEDS)


def test_the_runtime_policy_scopes_tagging_passing_and_terminating() -> None:
    actions = granted(load(POLICY))
    create_action = actions["ec2:CreateTags"]["Condition"]["StringEquals"]["ec2:CreateAction"]
    assert set(create_action) == {"CreateFleet", "RunInstances"}
    assert actions["iam:PassRole"]["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    assert actions["iam:PassRole"]["Resource"].startswith("arn:aws:iam::")
    terminate = actions["ec2:TerminateInstances"]
    assert terminate["Condition"] == {"StringEquals": {"aws:ResourceTag/gangscale.io/cluster": "my-eks"}}
    assert terminate["Resource"] == "arn:aws:ec2:*:*:instance/*"


def test_the_discovery_policy_grants_exactly_what_pools_from_eks_calls() -> None:
    called = named_operations([DISCOVERY], ("eks", "autoscaling", "ec2"))
    assert {"eks:ListNodegroups", "eks:DescribeNodegroup", "autoscaling:DescribeAutoScalingGroups"} <= called
    assert set(granted(load(DISCOVER_POLICY))) == called
    assert all(a.split(":", 1)[1].startswith(("Describe", "List")) for a in called)


def test_a_call_the_policy_lacks_fails_the_check(tmp_path: Path) -> None:
    module = tmp_path / "more.py"
    module.write_text('CALLS = ("CreateFleet", "DescribeCapacityReservations", "not an operation")\n')
    called = named_operations([module], ("ec2",))
    assert called == {"ec2:CreateFleet", "ec2:DescribeCapacityReservations"}
    assert called - set(granted(load(POLICY))) == {"ec2:DescribeCapacityReservations"}


@pytest.fixture(scope="module")
def overlay() -> list[JSON]:
    return m.render(AWS_OVERLAY)


def container(objects: list[JSON]) -> JSON:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    out: JSON = ctr
    return out


def test_the_aws_overlay_runs_the_aws_provider_live_with_irsa_and_aws_pools(overlay: list[JSON]) -> None:
    base = m.render(m.BASE)
    base_ids = {m.identity(o): o for o in base}
    assert {m.identity(o) for o in overlay} == set(base_ids)
    changed = sorted(m.identity(o) for o in overlay if o != base_ids[m.identity(o)])
    assert [kind for _, kind, _, _ in changed] == ["Deployment", "ConfigMap", "ServiceAccount"]
    args = container(overlay)["args"]
    base_flags = m.flags(container(base)["args"])
    assert m.flags(args) == {**{k: v for k, v in base_flags.items() if k != "dry-run"}, "provider": "aws"}
    assert cli.run_flags(args).provider == "aws"
    assert {"name": "AWS_REGION", "value": "us-east-1"} in container(overlay)["env"]
    account = m.one(overlay, "ServiceAccount", "gangscale")["metadata"]["annotations"]
    assert account == {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/gangscale"}
    pools = parse_pool_yaml(m.one(overlay, "ConfigMap", "gangscale-pools")["data"]["pools.yaml"]).pools
    assert pools and all("aws" in pool.provider for pool in pools)
    # The aws provider calls EC2 to make nodes: no Kubernetes writes beyond the base's.
    assert m.granted_rules(overlay) == m.granted_rules(base)
    for obj in overlay:
        assert m.unknown_fields(obj, f"V1{obj['kind']}") == [], m.identity(obj)


def test_the_chart_renders_provider_aws_with_its_region_endpoint_and_irsa() -> None:
    objects = helm.template(*helm.values_file("aws-live.yaml"))
    ctr = container(objects)
    flags = cli.run_flags(ctr["args"])
    assert (flags.provider, flags.aws_endpoint, flags.dry_run) == ("aws", "https://ec2.us-east-1.amazonaws.com", False)
    assert {"name": "AWS_REGION", "value": "us-east-1"} in ctr["env"]
    assert m.one(objects, "ServiceAccount")["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/gangscale"}
    plain = container(helm.template("--set", "provider=aws", "--set", "dryRun=false"))
    assert not [a for a in plain["args"] if a.startswith("--aws-endpoint")]
    assert not [e for e in plain["env"] if e["name"] == "AWS_REGION"]
    # The aws values do nothing for another provider.
    gke = container(helm.template(*helm.values_file("gke-live.yaml"), "--set", "aws.region=us-east-1"))
    assert not [e for e in gke["env"] if e["name"] == "AWS_REGION"]


@pytest.mark.parametrize("sets", [["aws.region=US East"], ["aws.endpoint=ec2.local"], ["aws.zone=us-east-1a"]])
def test_the_chart_refuses_malformed_aws_values(sets: list[str]) -> None:
    proc = helm.run_template(*(arg for s in sets for arg in ("--set", s)))
    assert proc.returncode != 0 and "aws" in proc.stderr, proc.stderr


def test_helm_install_notes_tell_aws_users_what_to_grant() -> None:
    # helm template does not render NOTES.txt; `helm install --dry-run` (client side) does.
    install = subprocess.run(
        [helm.require_helm(), "install", "gs", str(helm.CHART), "--dry-run", "--namespace", "gangscale-system",
         *helm.values_file("aws-live.yaml")], capture_output=True, text=True, timeout=120, check=False)
    notes = install.stdout.split("NOTES:", 1)[-1]
    assert install.returncode == 0, install.stderr
    for needed in ("deploy/aws/iam-policy.json", "ec2:CreateFleet", "iam:PassRole", "gangscale.io/cluster",
                   "arn:aws:iam::111122223333:role/gangscale", "Pod Identity", "iam-policy-discover.json"):
        assert needed in notes, needed
