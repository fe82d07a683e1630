"""Helpers for the Helm chart tests: finding helm, ``helm template``, and the RBAC each feature set needs.

helm is found as ``$GANGSCALE_HELM``, else ``.tools/helm`` (what ``python hack/get_helm.py`` installs), else
``helm`` on ``$PATH``. Without one the chart tests fail (they do not skip): the chart would go unchecked.

``expected_cluster_rules`` derives what the chart's ClusterRoles must grant for a feature set from the
kustomize renders, whose rules ``tests/controller/test_rbac.py`` holds to the controller's real requests
(live with Ray on, dry-run, and Ray off).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import manifests as m

JSON = dict[str, Any]

CHART = m.DEPLOY / "helm" / "gangscale"
VALUES = Path(__file__).resolve().parent / "values"
RELEASE = "gangscale"
NAMESPACE = "gangscale-system"
READ_VERBS = frozenset({"get", "list", "watch"})
GET_HELM = "python hack/get_helm.py"


def find_helm() -> str | None:
    explicit = os.environ.get("GANGSCALE_HELM")
    if explicit:
        return explicit
    local = m.REPO_ROOT / ".tools" / "helm"
    if local.exists():
        return str(local)
    return shutil.which("helm")


def require_helm() -> str:
    helm = find_helm()
    if helm is None:
        raise AssertionError(f"no helm binary: run `{GET_HELM}` (installs .tools/helm), or set $GANGSCALE_HELM")
    return helm


def run_template(*args: str, release: str = RELEASE, namespace: str = NAMESPACE) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with extra arguments (``-f FILE``, ``--set k=v``); not checked."""
    return subprocess.run([require_helm(), "template", release, str(CHART), "--namespace", namespace, *args],
                          capture_output=True, text=True, timeout=120, check=False)


def template(*args: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[JSON]:
    proc = run_template(*args, release=release, namespace=namespace)
    if proc.returncode != 0:
        raise AssertionError(f"helm template {' '.join(args)} failed: {proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc is not None]


def values_file(name: str) -> tuple[str, str]:
    return ("-f", str(VALUES / name))


def expected_cluster_rules(*, ray: bool, dry_run: bool, simulated_live: bool, secrets_cluster_wide: bool = False
                           ) -> set[m.Rule]:
    """What the ClusterRoles must grant: the kustomize base's rules (the controller live, Ray on) without the
    Ray rules when Ray is off and without any write when dry-running, plus the simulated provider's node writes
    (overlays/simulated-cloud) when it actuates, plus ``secrets: get`` only when chosen cluster-wide."""
    base = m.granted_rules(m.render(m.BASE))
    out = {r for r in base if (ray or r[0] != "ray.io") and (not dry_run or r[2] in READ_VERBS)}
    if simulated_live:
        out |= m.granted_rules(m.render(m.OVERLAY)) - base
    if secrets_cluster_wide:
        out.add(("", "secrets", "get"))
    return out


#: Where the simulated cloud's kubelets keep their node Leases (overlays/simulated-cloud grants them there).
NODE_LEASE_NAMESPACE = "kube-node-lease"


def simulated_node_lease_rules() -> set[m.NamedRule]:
    """What overlays/simulated-cloud grants on the simulated kubelets' node Leases (in kube-node-lease)."""
    return roles_by_namespace(m.render(m.OVERLAY))[NODE_LEASE_NAMESPACE]


def roles_by_namespace(objects: list[JSON]) -> dict[str, set[m.NamedRule]]:
    """The namespaced Roles' grants, per namespace (several Roles in one namespace are merged)."""
    out: dict[str, set[m.NamedRule]] = {}
    for obj in objects:
        if obj.get("kind") == "Role":
            out.setdefault(obj["metadata"]["namespace"], set()).update(m.role_rules(obj))
    return out
