"""The Helm chart (``deploy/helm/gangscale``), held to the checks the kustomize renders pass.

Each render below (the kustomize base and overlays, and ``helm template`` with the default values, every feature
on, and the gke provider live with Ray off) goes through the same checks: only fields of the Kubernetes API
types, container args that parse with ``gangscale run``, replicas > 1 only with leader election on the Lease
the Role grants, the security settings, probes and mounts, the PodDisruptionBudget's arithmetic, a soft spread,
bindings to the Deployment's service account, and ClusterRoles that grant exactly what the controller calls
with those features (``helm.expected_cluster_rules``). These tests need helm: they fail, naming
``python hack/get_helm.py``, when there is none.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gangscale import __version__, cli
from gangscale.config import parse_pool_yaml
from gangscale.kube.transport import KubeHTTP
from tests.deploy import helm
from tests.deploy import manifests as m

JSON = dict[str, Any]
Features = dict[str, Any]
Rendered = tuple[list[JSON], Features]

#: name -> (render, features: ray, dry_run, simulated_live, secret namespaces)
RENDERS: dict[str, tuple[Callable[[], list[JSON]], Features]] = {
    "kustomize-base": (lambda: m.render(m.BASE), {"ray": True, "dry_run": True, "live_sim": False,
                                                  "secrets": set(), "kustomize": True}),
    "kustomize-simulated-cloud": (lambda: m.render(m.OVERLAY), {"ray": True, "dry_run": False, "live_sim": True,
                                                                "secrets": set(), "kustomize": True}),
    "kustomize-ray-gcs": (lambda: m.render(m.RAY_GCS_OVERLAY), {"ray": True, "dry_run": True, "live_sim": False,
                                                                "secrets": {"default"}, "kustomize": True}),
    "helm-default": (helm.template, {"ray": True, "dry_run": True, "live_sim": False, "secrets": set()}),
    "helm-all-features": (lambda: helm.template(*helm.values_file("all-features.yaml")),
                          {"ray": True, "dry_run": False, "live_sim": True, "secrets": {"ray-a", "ray-b"}}),
    "helm-gke-live": (lambda: helm.template(*helm.values_file("gke-live.yaml")),
                      {"ray": False, "dry_run": False, "live_sim": False, "secrets": set()}),
    "helm-aws-live": (lambda: helm.template(*helm.values_file("aws-live.yaml")),
                      {"ray": False, "dry_run": False, "live_sim": False, "secrets": set()}),
}


@pytest.fixture(scope="module", params=list(RENDERS))
def render(request: pytest.FixtureRequest) -> Rendered:
    make, features = RENDERS[request.param]
    return make(), features


def _deployment(objects: list[JSON]) -> JSON:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return deployment


def test_built_in_objects_have_only_fields_of_their_api_types(render: Rendered) -> None:
    objects, _ = render
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # tests/deploy/test_observability.py checks them against their own schema
        assert m.unknown_fields(obj, f"V1{obj['kind']}") == [], m.identity(obj)


def test_args_parse_and_replicas_run_only_under_leader_election_on_the_granted_lease(
        render: Rendered) -> None:
    objects, features = render
    deployment = _deployment(objects)
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    args = cli.run_flags(ctr["args"])  # as the process resolves them, with an empty environment
    given = m.flags(ctr["args"])
    # Stated explicitly, never left to a default or a GANGSCALE_* variable.
    assert ("dry-run" in given) is features["dry_run"] and ("no-ray" not in given) is features["ray"]
    assert ("ray-gcs" in given) is bool(features["secrets"]) and ("ray-gcs" in given) != ("no-ray-gcs" in given)
    assert m.flags(ctr["args"])["metrics-port"] == str(ctr["ports"][0]["containerPort"])
    if deployment["spec"]["replicas"] > 1:
        assert args.leader_elect is True and not args.leader_elect_namespace
        (role,) = [o for o in objects if o["kind"] == "Role" and "leader-election" in o["metadata"]["name"]]
        assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        assert {name for *_, name in m.role_rules(role) if name} == {args.leader_elect_lease_name}
    mounts = {mt["mountPath"]: mt for mt in ctr["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    configmap = m.one(objects, "ConfigMap", volumes[mounts["/etc/gangscale"]["name"]]["configMap"]["name"])
    assert args.config == "/etc/gangscale/pools.yaml" and mounts["/etc/gangscale"]["readOnly"] is True
    pools = parse_pool_yaml(configmap["data"]["pools.yaml"]).pools
    assert pools and (args.provider != "gke" or all("gke" in p.provider for p in pools))


def test_security_probes_spread_and_disruption_budget(render: Rendered) -> None:
    objects, _ = render
    deployment = _deployment(objects)
    pod = deployment["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    security = m.effective_security(pod, ctr)
    assert security["runAsNonRoot"] is True and security["runAsUser"] == security["runAsGroup"] == 65532
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert m.selects(deployment["spec"]["selector"], labels)
    for spread in pod["topologySpreadConstraints"]:
        assert spread["whenUnsatisfiable"] == "ScheduleAnyway" and m.selects(spread["labelSelector"], labels)
    assert not any("requiredDuringSchedulingIgnoredDuringExecution" in r for r in (pod.get("affinity") or {}).values())
    pdb = m.one(objects, "PodDisruptionBudget")
    replicas = deployment["spec"]["replicas"]
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    # A drain may take one replica while all are Ready, none while one is missing.
    assert m.disruptions_allowed(pdb["spec"], replicas, healthy=replicas) == 1
    assert m.disruptions_allowed(pdb["spec"], replicas, healthy=replicas - 1) == 0
    service = m.one(objects, "Service")
    assert m.selects(service["spec"]["selector"], labels) and service["spec"]["ports"][0]["targetPort"] == "http"


def test_rbac_grants_exactly_what_the_controller_calls_with_these_features(
        render: Rendered) -> None:
    objects, features = render
    expected = helm.expected_cluster_rules(ray=bool(features["ray"]), dry_run=bool(features["dry_run"]),
                                           simulated_live=bool(features["live_sim"]))
    if features.get("kustomize") and features["dry_run"]:
        # The kustomize base keeps the live rules in dry-run (its overlays only add); the chart trims them.
        expected = helm.expected_cluster_rules(ray=True, dry_run=False, simulated_live=False)
    granted = m.granted_rules(objects)
    assert not m.has_wildcards(granted) and granted == expected
    deployment = _deployment(objects)
    namespace = deployment["metadata"]["namespace"]
    roles = helm.roles_by_namespace(objects)
    # The simulated kubelets' node Leases: when the simulated provider actuates, in kube-node-lease only.
    node_leases = roles.pop(helm.NODE_LEASE_NAMESPACE, set())
    assert node_leases == (helm.simulated_node_lease_rules() if features["live_sim"] else set())
    secret_namespaces = {ns for ns, rules in roles.items() if ("", "secrets", "get", "") in rules}
    assert secret_namespaces == features["secrets"] and namespace not in secret_namespaces
    assert all(rules == {("", "secrets", "get", "")} for ns, rules in roles.items() if ns != namespace)
    account = pod_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
        kind = "Role" if binding["kind"] == "RoleBinding" else "ClusterRole"
        assert any(o["kind"] == kind and o["metadata"]["name"] == binding["roleRef"]["name"]
                   and o["metadata"].get("namespace") == binding["metadata"].get("namespace") for o in objects)
    assert m.one(objects, "ServiceAccount")["metadata"]["name"] == pod_account


# --- the chart's own behaviour -----------------------------------------------------------------------------

def test_the_default_chart_renders_the_kustomize_base() -> None:
    chart, base = helm.template(), m.render(m.BASE)
    ids = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in chart}
    assert ids == {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in base
                   if o["kind"] != "Namespace"}
    given = [m.flags(_deployment(o)["spec"]["template"]["spec"]["containers"][0]["args"]) for o in (chart, base)]
    # The chart states what the base leaves to the defaults (Ray on, the lease's name and durations).
    defaults = {"ray": None, "leader-elect-lease-name": "gangscale", "leader-elect-lease-duration": "15s",
                "leader-elect-renew-deadline": "10s", "leader-elect-retry-period": "2s"}
    assert given[0] == {**given[1], **defaults}
    assert cli.run_flags(_deployment(chart)["spec"]["template"]["spec"]["containers"][0]["args"]) == \
        cli.run_flags(_deployment(base)["spec"]["template"]["spec"]["containers"][0]["args"])
    assert m.one(chart, "ConfigMap")["data"] == m.one(base, "ConfigMap")["data"] or \
        parse_pool_yaml(m.one(chart, "ConfigMap")["data"]["pools.yaml"]) == \
        parse_pool_yaml(m.one(base, "ConfigMap")["data"]["pools.yaml"])
    (ctr,) = _deployment(chart)["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == f"gangscale:{__version__}" and _deployment(chart)["spec"]["replicas"] == 2
    assert "priorityClassName" not in _deployment(chart)["spec"]["template"]["spec"]
    assert not [o for o in chart if o["apiVersion"].startswith("monitoring.coreos.com/")]


def test_all_features_render_what_the_values_ask_for() -> None:
    objects = helm.template(*helm.values_file("all-features.yaml"))
    deployment = _deployment(objects)
    pod = deployment["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["image"] == "registry.example/gangscale:1.2.3" and ctr["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["priorityClassName"] == "system-cluster-critical"
    assert ctr["args"][-2:] == ["--pool-backoff=5m", "--ray-gcs-interval=10s"]
    assert {"name": "GANGSCALE_RETRY_MAX", "value": "20m"} in ctr["env"]
    assert m.one(objects, "ServiceAccount")["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "gangscale@my-project.iam.gserviceaccount.com"}
    assert deployment["spec"]["template"]["metadata"]["labels"]["example.com/tier"] == "control"
    assert m.one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    assert {o["kind"] for o in objects} >= {"ServiceMonitor", "PrometheusRule", "ConfigMap"}


@pytest.mark.parametrize(("sets", "message"), [
    (["replicaCount=2", "leaderElection.enabled=false"], "leaderElection.enabled is false"),
    (["ray.gcs.enabled=true"], "ray.gcs.secretsClusterWide: true"),
    (["ray.gcs.enabled=true", "ray.gcs.namespaces={a}", "ray.gcs.secretsClusterWide=true"], "choose one"),
    (["provider=azure"], "provider"),
    (["podDisruptionBudget.minAvailable=1"], "exactly one of maxUnavailable and minAvailable"),
])
def test_inconsistent_values_fail_rendering_with_a_clear_message(sets: list[str], message: str) -> None:
    proc = helm.run_template(*(arg for s in sets for arg in ("--set", s)))
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_one_replica_without_election_and_cluster_wide_secrets_are_explicit_choices() -> None:
    objects = helm.template("--set", "replicaCount=1", "--set", "leaderElection.enabled=false",
                            "--set", "ray.gcs.enabled=true", "--set", "ray.gcs.secretsClusterWide=true")
    args = cli.run_flags(_deployment(objects)["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.leader_elect is False and not [o for o in objects if o["kind"] == "Role"]
    assert ("", "secrets", "get") in m.granted_rules(objects)


def test_the_pool_file_may_come_as_text_and_a_change_rolls_the_pods(tmp_path: Path) -> None:
    text = "nodePools:\n  - name: cpu\n    machineType: n2-standard-16\n    allocatable: {cpu: '15', memory: 58Gi}\n"
    (tmp_path / "pools.yaml").write_text(text, encoding="utf-8")
    a = helm.template("--set-file", f"pools={tmp_path / 'pools.yaml'}")
    assert m.one(a, "ConfigMap")["data"]["pools.yaml"].strip() == text.strip()
    b = helm.template()
    checksum = [_deployment(o)["spec"]["template"]["metadata"]["annotations"]["checksum/pools"] for o in (a, b)]
    assert checksum[0] != checksum[1]


def test_find_helm_names_the_installer_when_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helm, "find_helm", lambda: None)
    with pytest.raises(AssertionError, match=r"python hack/get_helm\.py"):
        helm.require_helm()


async def test_ray_gcs_namespaces_that_do_not_exist_are_refused_before_anything_is_created(
        kubeconfig: Path, http: KubeHTTP) -> None:
    """Against a cluster (the embedded API server; ``--dry-run=server`` runs the chart's ``lookup`` calls there), a
    missing namespace in ``ray.gcs.namespaces`` fails the render with one line naming it, so no object is created
    and no failed release is left; once it exists, the render gets past the check. ``helm template`` (no cluster)
    cannot check and renders as before."""
    args = ("--set", "ray.gcs.enabled=true", "--set", "ray.gcs.namespaces={ml-team}")

    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run([helm.require_helm(), "install", helm.RELEASE, str(helm.CHART), "--namespace", "default",
                               "--dry-run=server", "--disable-openapi-validation", "--kubeconfig", str(kubeconfig),
                               *args], capture_output=True, text=True, timeout=120, check=False)

    missing = ('ray.gcs.namespaces: namespace "ml-team" does not exist; create it first '
               '(kubectl create namespace ml-team)')
    refused = await asyncio.to_thread(install)
    assert refused.returncode != 0 and missing in refused.stderr, refused.stderr
    await http.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": "ml-team"}})
    past = await asyncio.to_thread(install)
    # The embedded server serves no RBAC kinds, so the dry run stops later, at the Role itself: past the check.
    assert missing not in past.stderr and "ray-token-reader" in past.stderr, past.stderr
    assert any(o["kind"] == "Role" and o["metadata"]["namespace"] == "ml-team" for o in helm.template(*args))
