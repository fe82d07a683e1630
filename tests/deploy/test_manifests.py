"""The deployment manifests (``deploy/``), the Dockerfile and ``.dockerignore``.

Checked here: every YAML file parses and every object is well formed; kustomizations reference only files
that exist and leave no manifest out; ``kubectl kustomize`` renders each directory to what the tests read
(where kubectl exists); the Kueue examples are accepted by the embedded API server under the Kueue CRD
schemas with strict field validation (the upstream CRDs where this checkout has them), and the built-in
objects have only fields of their Kubernetes API types; the Deployment's two replicas (rolling update with
a standby always up, spread over nodes, the pod name as leader identity), security settings, probes,
mounts and flags; the PodDisruptionBudget lets one replica go at a time; the pool ConfigMap is a valid pool
file that agrees with the Kueue example; the RBAC grants exactly the controller's API calls, and the
leader-election Role exactly the calls on its one Lease; the image is multi-stage and non-root.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangscale import cli
from gangscale.config import parse_pool_yaml
from gangscale.flags import FlagError
from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.apiserver import EmbeddedAPIServer, LoggedRequest
from tests import builders as b
from tests.deploy import manifests as m

JSON = dict[str, Any]

KUBECTL = m.find_kubectl()

NAMESPACE = "gangscale-system"
POD_LABELS = {"app.kubernetes.io/name": "gangscale", "app.kubernetes.io/component": "controller"}
UID = 65532

#: The flags of `gangscale run` the base Deployment passes, with their values (None: a switch).
BASE_FLAGS: dict[str, str | None] = {
    "config": "/etc/gangscale/pools.yaml",
    "provider": "simulated",
    "dry-run": None,
    "classes": "atomic-scale-up.gangscale.io,check-capacity.gangscale.io",
    "metrics-port": "8080",
    "log-format": "json",
    "log-level": "info",
    "batch-idle": "1s",
    "batch-max": "10s",
    "booking-ttl": "10m",
    "scale-down-unneeded-time": "10m",
    "leader-elect": None,
    "no-ray-gcs": None,
}

#: Every API call the controller makes, in dry-run and in normal mode, except node writes and the Ray auth
#: Secret (overlays/ray-gcs grants that per namespace; the base runs --no-ray-gcs).
CONTROLLER_RULES: set[m.Rule] = {
    ("autoscaling.x-k8s.io", "provisioningrequests", "list"),
    ("autoscaling.x-k8s.io", "provisioningrequests", "watch"),
    ("autoscaling.x-k8s.io", "provisioningrequests", "delete"),
    ("autoscaling.x-k8s.io", "provisioningrequests/status", "patch"),
    ("", "podtemplates", "get"),
    ("", "podtemplates", "list"),
    ("", "podtemplates", "watch"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "events", "create"),
    ("", "events", "patch"),
    ("kueue.x-k8s.io", "workloads", "list"),
    ("kueue.x-k8s.io", "workloads", "watch"),
    ("ray.io", "rayclusters", "list"),
    ("ray.io", "rayclusters", "watch"),
    ("ray.io", "rayclusters", "patch"),
}

#: The gke provider's queued-provisioning Role (namespaced): its own ProvisioningRequests and PodTemplates.
GKE_QUEUED_RULES: set[m.NamedRule] = {
    ("autoscaling.x-k8s.io", "provisioningrequests", "create", ""),
    ("autoscaling.x-k8s.io", "provisioningrequests", "get", ""),
    ("", "podtemplates", "create", ""),
    ("", "podtemplates", "delete", ""),
}

#: The leader-election Role (namespaced): (group, resource, verb, name), "" for any name. create cannot be
#: restricted to a name (the object's name is not known when a create is authorized).
LEASE = "gangscale"
LEADER_ELECTION_RULES: set[m.NamedRule] = {
    ("coordination.k8s.io", "leases", "get", LEASE),
    ("coordination.k8s.io", "leases", "update", LEASE),
    ("coordination.k8s.io", "leases", "create", ""),
}

#: What the simulated provider adds when it actuates (overlays/simulated-cloud only).
SIMULATED_NODE_WRITES: set[m.Rule] = {
    ("", "nodes", "create"),
    ("", "nodes", "delete"),
    ("", "nodes/status", "patch"),
}

#: Its simulated kubelets' node Leases (a Role in kube-node-lease, overlays/simulated-cloud only): any Lease there
#: (each is named after its Node), read and created on the first renewal, updated after.
NODE_LEASE_NAMESPACE = "kube-node-lease"
SIMULATED_NODE_LEASES: set[m.NamedRule] = {
    ("coordination.k8s.io", "leases", "get", ""),
    ("coordination.k8s.io", "leases", "create", ""),
    ("coordination.k8s.io", "leases", "update", ""),
}

KUEUE_CRD_FILES = ("kueue.x-k8s.io_resourceflavors.yaml", "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
                   "kueue.x-k8s.io_admissionchecks.yaml", "kueue.x-k8s.io_clusterqueues.yaml",
                   "kueue.x-k8s.io_localqueues.yaml")


@pytest.fixture(scope="module")
def base() -> list[JSON]:
    return m.render(m.BASE)


@pytest.fixture(scope="module")
def overlay() -> list[JSON]:
    return m.render(m.OVERLAY)


@pytest.fixture(scope="module")
def kueue() -> list[JSON]:
    return m.render(m.KUEUE_EXAMPLES)


def pod_spec(objects: list[JSON]) -> JSON:
    spec: JSON = m.one(objects, "Deployment", "gangscale")["spec"]["template"]["spec"]
    return spec


def container(objects: list[JSON]) -> JSON:
    containers = pod_spec(objects)["containers"]
    assert len(containers) == 1
    out: JSON = containers[0]
    return out


# --- files and kustomizations ----------------------------------------------------------------------------

def test_every_yaml_file_parses_and_every_object_is_well_formed() -> None:
    patches = m.patch_files()
    files = m.yaml_files()
    assert len(files) >= 15
    for path in files:
        docs = m.load_documents(path)
        assert docs, f"{path} is empty"
        if path.name == m.KUSTOMIZATION:
            continue
        if path in patches:
            assert all(isinstance(doc, list) for doc in docs), f"{path}: a patch file"
            continue
        for doc in docs:
            where = path.relative_to(m.REPO_ROOT)
            assert isinstance(doc, dict), f"{where}: not a mapping"
            assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"], f"{where}: apiVersion"
            assert isinstance(doc.get("kind"), str) and doc["kind"], f"{where}: kind"
            assert isinstance(doc.get("metadata", {}).get("name"), str), f"{where}: metadata.name"


def test_kustomizations_reference_existing_files_and_leave_none_out() -> None:
    dirs = m.kustomization_dirs()
    assert set(m.KUSTOMIZE_DIRS) <= set(dirs)
    for directory in dirs:
        refs = m.references(directory)
        for ref in refs:
            assert ref.exists(), f"{directory / m.KUSTOMIZATION} names {ref}, which does not exist"
            if ref.is_dir():
                assert (ref / m.KUSTOMIZATION).exists(), f"{ref} is not a kustomization"
        local = {p for p in directory.glob("*.yaml") if p.name != m.KUSTOMIZATION}
        assert local <= set(refs), f"{directory}: files no kustomization applies: {sorted(local - set(refs))}"


def test_objects_are_unique_and_namespaced_where_they_should_be(base: list[JSON], overlay: list[JSON],
                                                                kueue: list[JSON]) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ResourceFlavor", "ClusterQueue",
                      "ProvisioningRequestConfig", "AdmissionCheck"}
    for objects in (base, overlay, kueue):
        ids = [m.identity(o) for o in objects]
        assert len(ids) == len(set(ids))
        for obj in objects:
            namespace = obj["metadata"].get("namespace")
            if obj["kind"] in cluster_scoped:
                assert namespace is None, m.identity(obj)
            else:
                assert namespace is not None, m.identity(obj)
    assert {o["metadata"]["namespace"] for o in base if "namespace" in o["metadata"]} == {NAMESPACE}
    assert {(o["kind"], o["metadata"]["name"]) for o in base} == {
        ("Namespace", NAMESPACE), ("ServiceAccount", "gangscale"), ("ClusterRole", "gangscale-controller"),
        ("ClusterRoleBinding", "gangscale-controller"), ("Role", "gangscale-leader-election"),
        ("RoleBinding", "gangscale-leader-election"), ("ConfigMap", "gangscale-pools"),
        ("Deployment", "gangscale"), ("Service", "gangscale-metrics"), ("PodDisruptionBudget", "gangscale")}


@pytest.mark.parametrize("directory", [m.BASE, m.OVERLAY, m.GKE_OVERLAY, m.RAY_GCS_OVERLAY],
                         ids=lambda p: str(p.relative_to(m.DEPLOY)))
def test_built_in_objects_have_only_fields_of_their_api_types(directory: Path) -> None:
    # What `kubectl apply` (strict field validation) would refuse: a misspelt or misplaced field, which
    # kustomize renders without a word. The Kubernetes API types are kubernetes_asyncio's models.
    objects = m.render(directory)
    assert {o["apiVersion"] for o in objects} == {"v1", "apps/v1", "policy/v1", "rbac.authorization.k8s.io/v1"}
    for obj in objects:
        assert m.unknown_fields(obj, f"V1{obj['kind']}") == [], m.identity(obj)


def test_unknown_fields_finds_misspelt_and_misplaced_fields() -> None:
    deployment = {"spec": {"replicas": 2, "template": {"spec": {
        "topologySpreadConstraint": [], "containers": [{"name": "c", "env": [{"name": "x", "valueFrom": {
            "fieldref": {"fieldPath": "metadata.name"}}}]}]}}}}
    assert m.unknown_fields(deployment, "V1Deployment") == [
        "spec.template.spec.topologySpreadConstraint", "spec.template.spec.containers[0].env[0].valueFrom.fieldref"]
    assert m.unknown_fields({"spec": {"selector": []}}, "V1PodDisruptionBudget") == [
        "spec.selector (not a V1LabelSelector)"]
    assert m.unknown_fields({"rules": [{"resourceName": ["a"]}]}, "V1Role") == ["rules[0].resourceName"]


def test_json_patch_test_op_guards_the_overlay() -> None:
    obj = {"a": ["x", "--dry-run"]}
    assert m.apply_json_patch(obj, [{"op": "test", "path": "/a/1", "value": "--dry-run"},
                                    {"op": "remove", "path": "/a/1"}]) == {"a": ["x"]}
    with pytest.raises(ValueError, match="test failed"):
        m.apply_json_patch(obj, [{"op": "test", "path": "/a/0", "value": "--dry-run"}])


@pytest.mark.parametrize("directory", m.KUSTOMIZE_DIRS, ids=lambda p: str(p.relative_to(m.DEPLOY)))
@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_kubectl_kustomize_renders_what_the_tests_check(directory: Path) -> None:
    assert KUBECTL is not None
    rendered = m.kubectl_kustomize(KUBECTL, directory)
    ours = m.render(directory)
    assert sorted(map(m.identity, rendered)) == sorted(map(m.identity, ours))
    by_id = {m.identity(o): o for o in ours}
    for obj in rendered:
        assert obj == by_id[m.identity(obj)], m.identity(obj)


# --- Kueue examples against the CRDs -------------------------------------------------------------------

async def discover(http: KubeHTTP, api_version: str) -> dict[str, tuple[str, bool]]:
    """kind -> (plural, namespaced) for the resources the server serves at ``api_version``."""
    path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    try:
        doc = await http.request("GET", path)
    except ApiError as err:
        if err.status == 404:
            return {}
        raise
    return {r["kind"]: (r["name"], r["namespaced"]) for r in doc["resources"] if "/" not in r["name"]}


async def create_strict(http: KubeHTTP, server: EmbeddedAPIServer, obj: JSON) -> int:
    """POST ``obj`` with ``fieldValidation=Strict`` (unknown fields are errors); the answer's status code."""
    served = await discover(http, obj["apiVersion"])
    plural, namespaced = served[obj["kind"]]
    group, _, version = obj["apiVersion"].rpartition("/")
    resource = Resource(group, version, plural, namespaced=namespaced)
    path = resource.path(obj["metadata"].get("namespace"))
    await http.request("POST", path, body=obj, query={"fieldValidation": "Strict"})
    posted = [r for r in server.requests if r.method == "POST" and r.path == path]
    return posted[-1].status


async def install_upstream_kueue_crds(http: KubeHTTP, crds: Path) -> None:
    """Replace the embedded server's compact Kueue schemas with the upstream CRDs, as `kubectl apply` would."""
    for name in KUEUE_CRD_FILES:
        # The embedded server compiles patterns with Python's re, which refuses RE2's inline flags after the
        # start ('^(?i)[a-z]...', AdmissionCheck spec.parameters.kind); '(?i)^' means the same to both.
        text = (crds / name).read_text(encoding="utf-8").replace("pattern: ^(?i)", "pattern: (?i)^")
        (crd,) = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        current = await http.request("GET", b.CRDS.path(name=crd["metadata"]["name"]))
        crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await http.request("PUT", b.CRDS.path(name=crd["metadata"]["name"]), body=crd)


async def test_kueue_examples_are_created_by_the_embedded_server(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, kueue: list[JSON]) -> None:
    assert {o["kind"] for o in kueue} == {"ResourceFlavor", "ClusterQueue", "LocalQueue",
                                          "ProvisioningRequestConfig", "AdmissionCheck"}
    for obj in kueue:
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert await create_strict(http, apiserver, obj) == 201, m.identity(obj)


UPSTREAM = m.upstream_crds_dir()


@pytest.mark.parametrize("kind", [
    "ResourceFlavor", "ProvisioningRequestConfig", "AdmissionCheck", "ClusterQueue", "LocalQueue"])
async def test_kueue_examples_pass_the_upstream_kueue_crd_schemas(
        apiserver: EmbeddedAPIServer, http: KubeHTTP, kueue: list[JSON], kind: str) -> None:
    await install_upstream_kueue_crds(http, UPSTREAM)
    obj = m.one(kueue, kind)
    assert await create_strict(http, apiserver, obj) == 201, m.identity(obj)


async def test_upstream_kueue_crd_schemas_reject_what_v1beta2_does_not_have(
        apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    # So that the 201s above mean something. v1beta1's spec.admissionChecks became
    # spec.admissionChecksStrategy.admissionChecks[].name in v1beta2.
    await install_upstream_kueue_crds(http, UPSTREAM)
    wrong = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "old-style"},
             "spec": {"admissionChecks": ["gangscale"]}}
    with pytest.raises(ApiError) as err:
        await create_strict(http, apiserver, wrong)
    assert 'unknown field "spec.admissionChecks"' in err.value.message
    bad_retry = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig",
                 "metadata": {"name": "bad"},
                 "spec": {"provisioningClassName": "x.gangscale.io", "retryStrategy": {"backoffLimitCount": "3"}}}
    with pytest.raises(ApiError) as err:
        await create_strict(http, apiserver, bad_retry)
    assert err.value.status == 422
    bad_mode = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "bad-mode"},
                "spec": {"queueingStrategy": "FIFO"}}
    with pytest.raises(ApiError) as err:
        await create_strict(http, apiserver, bad_mode)
    assert err.value.status == 422 and "Unsupported value" in err.value.message


def test_kueue_example_wiring(kueue: list[JSON]) -> None:
    flavor = m.one(kueue, "ResourceFlavor", "tpu-v5e")
    queue = m.one(kueue, "ClusterQueue", "tpu-queue")
    local = m.one(kueue, "LocalQueue", "tpu")
    prc = m.one(kueue, "ProvisioningRequestConfig", "gangscale-atomic")
    check = m.one(kueue, "AdmissionCheck", "gangscale")
    assert local["metadata"]["namespace"] == "default" and local["spec"]["clusterQueue"] == "tpu-queue"
    assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": "gangscale"}]
    assert queue["spec"]["namespaceSelector"] == {}
    (group,) = queue["spec"]["resourceGroups"]
    (flavor_quota,) = group["flavors"]
    assert flavor_quota["name"] == "tpu-v5e"
    quotas = {r["name"]: r["nominalQuota"] for r in flavor_quota["resources"]}
    assert list(quotas) == group["coveredResources"]
    assert quotas["google.com/tpu"] == 24 and {"cpu", "memory"} <= set(quotas)
    assert check["spec"] == {"controllerName": "kueue.x-k8s.io/provisioning-request",
                             "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                            "name": "gangscale-atomic"}}
    assert prc["spec"]["provisioningClassName"] == "atomic-scale-up.gangscale.io"
    assert prc["spec"]["provisioningClassName"] in str(BASE_FLAGS["classes"]).split(",")
    assert prc["spec"]["managedResources"] == ["google.com/tpu", "nvidia.com/gpu"]
    assert prc["spec"]["retryStrategy"] == {"backoffLimitCount": 3, "backoffBaseSeconds": 60,
                                            "backoffMaxSeconds": 1800}
    assert flavor["spec"]["nodeLabels"]


# --- the pool file -------------------------------------------------------------------------------------

def test_pool_configmap_is_a_valid_pool_file_that_serves_the_kueue_example(base: list[JSON],
                                                                          kueue: list[JSON]) -> None:
    configmap = m.one(base, "ConfigMap", "gangscale-pools")
    assert set(configmap["data"]) == {"pools.yaml"}
    pool_file = parse_pool_yaml(configmap["data"]["pools.yaml"], "deploy/base/configmap-pools.yaml")
    pools = {p.name: p for p in pool_file.pools}
    assert set(pools) == {"tpu-v5e-2x4", "a3-h100", "cpu"}
    tpu = pools["tpu-v5e-2x4"]
    assert (tpu.machine_type, tpu.tpu_topology, tpu.nodes_per_unit, tpu.max_units) == \
        ("ct5lp-hightpu-4t", "2x4", 2, 4)
    assert pools["a3-h100"].allocatable.get("nvidia.com/gpu") == 8
    # The example's flavor selects exactly these nodes, tolerates their taints, and the queue's TPU quota
    # fits in what the pool can hold.
    flavor = m.one(kueue, "ResourceFlavor", "tpu-v5e")
    assert flavor["spec"]["nodeLabels"].items() <= tpu.labels.items()
    tolerated = {(t["key"], t["effect"]) for t in flavor["spec"]["tolerations"] if t["operator"] == "Exists"}
    assert {(t.key, t.effect) for t in tpu.taints} <= tolerated
    quota = next(r["nominalQuota"] for r in m.one(kueue, "ClusterQueue", "tpu-queue")["spec"]["resourceGroups"][0]
                 ["flavors"][0]["resources"] if r["name"] == "google.com/tpu")
    assert quota <= tpu.max_units * tpu.nodes_per_unit * tpu.allocatable.get("google.com/tpu")


# --- the Deployment ------------------------------------------------------------------------------------

def test_deployment_runs_two_replicas_rolled_with_a_standby_always_up(base: list[JSON]) -> None:
    deployment = m.one(base, "Deployment", "gangscale")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # A new pod is Ready (synced, on standby) before an old one stops: the leader's lease passes at once.
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert deployment["metadata"]["labels"] == POD_LABELS
    assert spec["selector"] == {"matchLabels": POD_LABELS}
    assert spec["template"]["metadata"]["labels"] == POD_LABELS
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == m.one(base, "ServiceAccount")["metadata"]["name"] == "gangscale"
    assert pod["automountServiceAccountToken"] is True
    # Time to release the lease after SIGTERM (a GET and a PUT), well past the retry period the standby takes
    # to pick it up.
    assert pod["terminationGracePeriodSeconds"] == 30
    assert "priorityClassName" not in pod
    assert "hostNetwork" not in pod and "hostPID" not in pod


def test_two_replicas_run_only_with_leader_election_on_the_lease_the_role_grants(base: list[JSON]) -> None:
    # The flags as `gangscale run` reads them: election on (explicitly, whatever the default or the
    # environment says), and the Lease named as the Role names it, in the Deployment's namespace (the
    # controller takes the namespace of its service account, that is of its pod).
    args = cli.run_flags(container(base)["args"])
    assert args.leader_elect is True and m.flags(container(base)["args"])["leader-elect"] is None
    assert args.leader_elect_namespace is None
    assert args.leader_elect_identity is None  # $POD_NAME
    role = m.one(base, "Role", "gangscale-leader-election")
    assert {name for *_, name in m.role_rules(role) if name} == {args.leader_elect_lease_name} == {LEASE}
    assert role["metadata"]["namespace"] == m.one(base, "Deployment", "gangscale")["metadata"]["namespace"]
    assert (args.leader_elect_retry_period, args.leader_elect_renew_deadline, args.leader_elect_lease_duration) \
        == (2.0, 10.0, 15.0)


def test_deployment_names_each_pod_as_its_lease_identity(base: list[JSON]) -> None:
    # The leader-election identity is $POD_NAME (the holderIdentity `kubectl get lease` shows), and
    # $POD_NAMESPACE the Lease's namespace where the service account's namespace file is missing.
    assert container(base)["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]


def test_replicas_are_spread_over_nodes_by_a_soft_rule(base: list[JSON]) -> None:
    pod = pod_spec(base)
    labels = m.one(base, "Deployment", "gangscale")["spec"]["template"]["metadata"]["labels"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    # Soft: a hard rule would leave a rollout's surge pod Pending on a small cluster (maxUnavailable 0).
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"] == {"matchLabels": POD_LABELS} and m.selects(spread["labelSelector"], labels)
    # Nothing hard instead: no required (anti-)affinity.
    affinity = pod.get("affinity") or {}
    assert not any("requiredDuringSchedulingIgnoredDuringExecution" in rules for rules in affinity.values())


def test_the_disruption_budget_lets_a_drain_evict_one_replica_and_keeps_the_other(base: list[JSON]) -> None:
    pdb = m.one(base, "PodDisruptionBudget", "gangscale")
    deployment = m.one(base, "Deployment", "gangscale")
    assert pdb["apiVersion"] == "policy/v1" and pdb["metadata"]["namespace"] == NAMESPACE
    # Exactly the Deployment's pods: its selector, which selects its template's labels.
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert m.selects(pdb["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert not m.selects(pdb["spec"]["selector"], {"app.kubernetes.io/name": "gangscale"})
    replicas = deployment["spec"]["replicas"]
    # Both running: one may be evicted; then none until its replacement is Ready.
    assert m.disruptions_allowed(pdb["spec"], replicas, healthy=replicas) == 1
    assert m.disruptions_allowed(pdb["spec"], replicas, healthy=replicas - 1) == 0
    # Scaled to one, a drain is not blocked for ever; scaled up, still one at a time.
    assert m.disruptions_allowed(pdb["spec"], 1, healthy=1) == 1
    assert m.disruptions_allowed(pdb["spec"], 3, healthy=3) == 1
    # A pod that is not Ready does not hold a drain.
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize(("spec", "expected", "healthy", "allowed"), [
    ({"minAvailable": 1}, 2, 2, 1), ({"minAvailable": 1}, 1, 1, 0), ({"minAvailable": 1}, 3, 3, 2),
    ({"maxUnavailable": 1}, 2, 1, 0), ({"maxUnavailable": 0}, 2, 2, 0), ({"minAvailable": "50%"}, 3, 3, 1),
    ({"maxUnavailable": "50%"}, 3, 3, 2), ({"maxUnavailable": "10%"}, 2, 2, 1),
])
def test_disruptions_allowed_is_the_disruption_controllers_arithmetic(spec: JSON, expected: int, healthy: int,
                                                                     allowed: int) -> None:
    assert m.disruptions_allowed(spec, expected, healthy) == allowed


def test_label_selectors() -> None:
    labels = {"a": "1", "b": "2"}
    assert m.selects({}, labels) and m.selects({"matchLabels": {"a": "1"}}, labels)
    assert not m.selects({"matchLabels": {"a": "2"}}, labels)
    assert m.selects({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]},
                                           {"key": "c", "operator": "DoesNotExist"}]}, labels)
    assert not m.selects({"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]}, labels)
    assert not m.selects({"matchExpressions": [{"key": "c", "operator": "Exists"}]}, labels)


def test_deployment_security_settings(base: list[JSON]) -> None:
    pod = pod_spec(base)
    ctr = container(base)
    assert pod["securityContext"]["fsGroup"] == UID
    security = m.effective_security(pod, ctr)
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == UID and security["runAsGroup"] == UID
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in security or security["privileged"] is False


def test_deployment_ports_probes_and_resources(base: list[JSON]) -> None:
    ctr = container(base)
    assert ctr["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert ctr["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"},
                                "limits": {"cpu": "1", "memory": "512Mi"}}
    service = m.one(base, "Service", "gangscale-metrics")
    assert service["spec"]["selector"] == POD_LABELS
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    assert "annotations" not in service["metadata"]


def test_deployment_mounts_the_pools_and_a_writable_tmp(base: list[JSON]) -> None:
    pod = pod_spec(base)
    ctr = container(base)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {mt["mountPath"]: mt for mt in ctr["volumeMounts"]}
    assert set(mounts) == {"/etc/gangscale", "/tmp"}
    pools = volumes[mounts["/etc/gangscale"]["name"]]
    assert pools["configMap"]["name"] == m.one(base, "ConfigMap")["metadata"]["name"] == "gangscale-pools"
    assert mounts["/etc/gangscale"]["readOnly"] is True
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    # --config names the ConfigMap's key under the mount.
    key = next(iter(m.one(base, "ConfigMap")["data"]))
    assert m.flags(ctr["args"])["config"] == f"/etc/gangscale/{key}"


def test_deployment_args_use_only_the_run_flags(base: list[JSON], overlay: list[JSON]) -> None:
    args = container(base)["args"]
    assert args[0] == "run" and "command" not in container(base)
    assert m.flags(args) == BASE_FLAGS
    assert m.flags(args)["metrics-port"] == str(container(base)["ports"][0]["containerPort"])
    assert args.count("--dry-run") == 1
    overlay_args = container(overlay)["args"]
    assert m.flags(overlay_args) == {k: v for k, v in BASE_FLAGS.items() if k != "dry-run"}
    assert [a for a in args if a != "--dry-run"] == overlay_args


def test_deployment_args_parse_with_the_cli_once_it_has_run() -> None:
    parser_factory: Callable[[], argparse.ArgumentParser] | None = getattr(cli, "_parser", None)
    if parser_factory is None:
        pytest.skip("gangscale.cli has no _parser()")
    parser = parser_factory()
    subcommands = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
    if "run" not in subcommands:
        pytest.skip("`gangscale run` does not exist yet")
    for objects in (m.render(m.BASE), m.render(m.OVERLAY)):
        args = container(objects)["args"]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                cli.run_flags(args)
        except (SystemExit, FlagError) as exc:
            err.write(str(exc))
            pytest.fail(f"`gangscale {' '.join(args)}` does not parse: {err.getvalue()}")


def test_overlay_changes_only_dry_run_and_node_rbac(base: list[JSON], overlay: list[JSON]) -> None:
    base_ids = {m.identity(o): o for o in base}
    added = [o for o in overlay if m.identity(o) not in base_ids]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in added) == [
        ("ClusterRole", "gangscale-simulated-nodes"), ("ClusterRoleBinding", "gangscale-simulated-nodes"),
        ("Role", "gangscale-simulated-node-leases"), ("RoleBinding", "gangscale-simulated-node-leases")]
    changed = [m.identity(o) for o in overlay if m.identity(o) in base_ids and o != base_ids[m.identity(o)]]
    assert changed == [("apps/v1", "Deployment", NAMESPACE, "gangscale")]


def test_the_gke_overlay_runs_the_gke_provider_live_with_workload_identity_and_gke_pools(base: list[JSON]) -> None:
    gke = m.render(m.GKE_OVERLAY)
    base_ids = {m.identity(o): o for o in base}
    assert sorted((o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in gke
                  if m.identity(o) not in base_ids) == [
        ("Role", NAMESPACE, "gangscale-gke-queued-provisioning"),
        ("RoleBinding", NAMESPACE, "gangscale-gke-queued-provisioning")]
    changed = sorted(m.identity(o) for o in gke if m.identity(o) in base_ids and o != base_ids[m.identity(o)])
    assert changed == [("apps/v1", "Deployment", NAMESPACE, "gangscale"), ("v1", "ConfigMap", NAMESPACE,
                                                                           "gangscale-pools"),
                       ("v1", "ServiceAccount", NAMESPACE, "gangscale")]
    args = container(gke)["args"]
    assert m.flags(args) == {**{k: v for k, v in BASE_FLAGS.items() if k != "dry-run"}, "provider": "gke"}
    account = m.one(gke, "ServiceAccount", "gangscale")["metadata"]["annotations"]
    assert account == {"iam.gke.io/gcp-service-account": "gangscale@my-project.iam.gserviceaccount.com"}
    pools = parse_pool_yaml(m.one(gke, "ConfigMap", "gangscale-pools")["data"]["pools.yaml"]).pools
    assert pools and all("gke" in pool.provider for pool in pools)
    # The gke provider calls Google's APIs to make nodes; only queued-provisioning pools need Kubernetes writes of
    # its own (tests/providers/gke/test_dws_gangs.py holds the Role to the provider's requests).
    assert m.granted_rules(gke) == CONTROLLER_RULES
    assert m.role_rules(m.one(gke, "Role", "gangscale-gke-queued-provisioning")) == GKE_QUEUED_RULES
    binding = m.one(gke, "RoleBinding", "gangscale-gke-queued-provisioning")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gangscale", "namespace": NAMESPACE}]
    cli.run_flags(args)


# --- RBAC ----------------------------------------------------------------------------------------------

def test_base_clusterrole_grants_exactly_the_controller_calls(base: list[JSON]) -> None:
    granted = m.granted_rules(base)
    assert not m.has_wildcards(granted)
    assert granted == CONTROLLER_RULES
    assert not any(group == "" and res.startswith("nodes") and verb not in ("get", "list", "watch")
                   for group, res, verb in granted)


def test_overlay_adds_exactly_the_simulated_node_writes(base: list[JSON], overlay: list[JSON]) -> None:
    granted = m.granted_rules(overlay)
    assert not m.has_wildcards(granted)
    assert granted - m.granted_rules(base) == SIMULATED_NODE_WRITES
    assert granted == CONTROLLER_RULES | SIMULATED_NODE_WRITES


def test_overlay_grants_the_node_leases_in_kube_node_lease_only(overlay: list[JSON]) -> None:
    role = m.one(overlay, "Role", "gangscale-simulated-node-leases")
    assert role["metadata"]["namespace"] == NODE_LEASE_NAMESPACE
    assert m.role_rules(role) == SIMULATED_NODE_LEASES
    binding = m.one(overlay, "RoleBinding", "gangscale-simulated-node-leases")
    assert binding["metadata"]["namespace"] == NODE_LEASE_NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "gangscale-simulated-node-leases"}


@pytest.mark.parametrize("directory", [m.BASE, m.OVERLAY, m.GKE_OVERLAY, m.RAY_GCS_OVERLAY],
                         ids=lambda p: str(p.relative_to(m.DEPLOY)))
def test_every_binding_binds_a_role_of_the_render_to_the_deployment_service_account(directory: Path) -> None:
    objects = m.render(directory)
    account = m.one(objects, "ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": account["metadata"]["name"],
               "namespace": account["metadata"]["namespace"]}
    for role_kind, binding_kind in (("ClusterRole", "ClusterRoleBinding"), ("Role", "RoleBinding")):
        roles = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects if o["kind"] == role_kind}
        bindings = [o for o in objects if o["kind"] == binding_kind]
        # Every role is bound, by a binding in its own namespace (a RoleBinding grants a Role only there).
        assert {(b["metadata"].get("namespace"), b["roleRef"]["name"]) for b in bindings} == roles
        for binding in bindings:
            assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                                          "name": binding["roleRef"]["name"]}
            assert binding["subjects"] == [subject]
    assert pod_spec(objects)["serviceAccountName"] == account["metadata"]["name"]


@pytest.mark.parametrize("directory", [m.BASE, m.OVERLAY, m.GKE_OVERLAY], ids=lambda p: str(p.relative_to(m.DEPLOY)))
def test_the_leader_election_role_grants_exactly_the_lease_calls_in_the_controller_namespace(
        directory: Path) -> None:
    objects = m.render(directory)
    role = m.one(objects, "Role", "gangscale-leader-election")
    deployment = m.one(objects, "Deployment", "gangscale")
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"] == NAMESPACE
    assert m.role_rules(role) == LEADER_ELECTION_RULES
    others = [o for o in objects if o["kind"] == "Role" and o is not role]
    assert [o["metadata"]["name"] for o in others] == {
        m.GKE_OVERLAY: ["gangscale-gke-queued-provisioning"],
        m.OVERLAY: ["gangscale-simulated-node-leases"]}.get(directory, [])
    # No other Role grants Leases but in kube-node-lease (the simulated kubelets' node Leases, whose own test
    # holds them to the code).
    assert not any(rule[1].startswith("leases") for o in others for rule in m.role_rules(o)
                   if o["metadata"]["namespace"] != NODE_LEASE_NAMESPACE)
    # The ClusterRoles grant nothing on Leases: no Lease outside those namespaces.
    assert not any(resource.startswith("leases") for _, resource, _ in m.granted_rules(objects))


@pytest.mark.parametrize(("verb", "name", "allowed"), [
    ("get", LEASE, True),
    ("update", LEASE, True),
    ("create", "", True),  # a create names no object when it is authorized
    ("get", "another-lease", False),
    ("update", "another-lease", False),
    ("patch", LEASE, False),  # the elector updates with the resourceVersion, it never patches
    ("delete", LEASE, False),
    ("list", "", False),
    ("watch", "", False),
    ("get", "", False),  # a rule restricted to names never matches a request that names none
])
def test_the_leader_election_role_table(base: list[JSON], verb: str, name: str, allowed: bool) -> None:
    rules = m.role_rules(m.one(base, "Role", "gangscale-leader-election"))
    assert m.allows(rules, ("coordination.k8s.io", "leases", verb, name)) is allowed
    assert not m.allows(rules, ("", "events", "create", ""))  # the elector writes no events
    assert not m.allows(rules, ("coordination.k8s.io", "leases/status", verb, name))


def test_rbac_helpers() -> None:
    role = {"kind": "Role", "metadata": {"name": "r"}, "rules": [
        {"apiGroups": ["", "x"], "resources": ["a"], "verbs": ["get", "update"], "resourceNames": ["n1", "n2"]},
        {"apiGroups": ["x"], "resources": ["*"], "verbs": ["list"]}]}
    granted = m.role_rules(role)
    assert granted == {("", "a", "get", "n1"), ("", "a", "get", "n2"), ("", "a", "update", "n1"),
                       ("", "a", "update", "n2"), ("x", "a", "get", "n1"), ("x", "a", "get", "n2"),
                       ("x", "a", "update", "n1"), ("x", "a", "update", "n2"), ("x", "*", "list", "")}
    assert m.allows(granted, ("", "a", "get", "n1")) and not m.allows(granted, ("", "a", "get", "n3"))
    assert not m.allows(granted, ("", "a", "get", "")) and m.allows(granted, ("x", "b", "list", ""))
    assert m.allows(granted, ("x", "b", "list", "named")) and not m.allows(granted, ("", "b", "list", ""))
    role = {"kind": "ClusterRole", "metadata": {"name": "r"},
            "rules": [{"apiGroups": ["", "apps"], "resources": ["pods", "pods/status"], "verbs": ["get"]},
                      {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}
    assert m.granted_rules([role, {"kind": "Role", "rules": [{"apiGroups": ["x"]}]}]) == {
        ("", "pods", "get"), ("", "pods/status", "get"), ("apps", "pods", "get"), ("apps", "pods/status", "get")}
    with pytest.raises(ValueError, match="resourceNames"):
        m.granted_rules([{"kind": "ClusterRole", "metadata": {"name": "n"}, "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": ["a"]}]}])
    assert m.missing_rules({("", "pods", "list"), ("x", "y", "get")}, {("*", "*", "get"), ("", "pods", "*")}) \
        == set()
    assert m.missing_rules({("", "nodes", "create")}, CONTROLLER_RULES) == {("", "nodes", "create")}
    assert m.has_wildcards({("", "*", "get")}) and not m.has_wildcards(CONTROLLER_RULES)


async def test_rules_from_requests_reads_the_embedded_server_log(apiserver: EmbeddedAPIServer,
                                                                 http: KubeHTTP) -> None:
    # Requests of the kinds the controller makes, through the production client.
    await http.request("GET", "/apis")  # discovery: needs no rule
    await http.request("GET", b.PROVREQS.path())
    await http.request("POST", b.PODTEMPLATES.path("default"), body=b.pod_template("tmpl"))
    await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr"))
    await http.request("PATCH", b.PROVREQS.path("default", "pr", "status"),
                       query={"fieldManager": "gangscale", "force": "true"},
                       content_type="application/apply-patch+yaml",
                       body={"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                             "metadata": {"name": "pr", "namespace": "default"},
                             "status": {"conditions": [b.condition("Accepted", reason="Accepted")]}})
    with pytest.raises(ApiError):
        await http.request("GET", b.PODTEMPLATES.path("default", "missing"))  # a 404 needed authorization too
    needed = m.rules_from_requests(apiserver.requests)
    assert needed == {
        ("autoscaling.x-k8s.io", "provisioningrequests", "list"),
        ("", "podtemplates", "create"),
        ("autoscaling.x-k8s.io", "provisioningrequests", "create"),
        ("autoscaling.x-k8s.io", "provisioningrequests/status", "patch"),
        ("", "podtemplates", "get"),
    }
    # The test's own setup writes (create) are not the controller's and are not granted to it.
    assert m.missing_rules(needed, CONTROLLER_RULES) == {
        ("", "podtemplates", "create"), ("autoscaling.x-k8s.io", "provisioningrequests", "create")}
    assert all(isinstance(r, LoggedRequest) for r in apiserver.requests)


async def test_base_objects_the_embedded_server_serves_are_created(apiserver: EmbeddedAPIServer,
                                                                   http: KubeHTTP, base: list[JSON]) -> None:
    created = []
    for obj in base:
        if obj["kind"] in await discover(http, obj["apiVersion"]):
            assert await create_strict(http, apiserver, obj) == 201, m.identity(obj)
            created.append(obj["kind"])
    assert "Namespace" in created


# --- the image -----------------------------------------------------------------------------------------

DOCKERFILE = m.REPO_ROOT / "Dockerfile"
DOCKERIGNORE = m.REPO_ROOT / ".dockerignore"


def test_dockerfile_is_multi_stage_non_root_and_runs_gangscale() -> None:
    build, runtime = m.stages(m.dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")))
    assert build[0].value == "python:3.11-slim AS builder"
    assert runtime[0].value.split()[0] == "python:3.11-slim"
    assert any(i.keyword == "RUN" and "pip wheel" in i.value for i in build)
    assert all("--no-cache-dir" in i.value for i in build if i.keyword == "RUN" and "pip " in i.value)
    # The runtime stage only copies the virtualenv from the builder: no RUN, no build tools.
    assert not [i for i in runtime if i.keyword == "RUN"]
    copies = [i.value for i in runtime if i.keyword == "COPY"]
    assert copies and all(c.startswith("--from=builder ") for c in copies)
    (user,) = [i.value for i in runtime if i.keyword == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) == UID and gid.isdigit() and int(gid) == UID
    entrypoint = [i.value for i in runtime if i.keyword == "ENTRYPOINT"]
    assert entrypoint == ['["gangscale"]']
    assert [i.value for i in runtime if i.keyword == "CMD"] == ['["run", "--help"]']
    env = m.env_of(runtime)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    labels = " ".join(i.value for i in runtime if i.keyword == "LABEL")
    assert "org.opencontainers.image.title=" in labels and "org.opencontainers.image.licenses=" in labels


def test_dockerfile_sources_are_in_the_build_context_and_nothing_else_is() -> None:
    ignore = DOCKERIGNORE.read_text(encoding="utf-8")
    build = m.stages(m.dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")))[0]
    sources = [s for i in build if i.keyword == "COPY" and "--from" not in i.value for s in i.value.split()[:-1]]
    assert sources
    for source in sources:
        assert (m.REPO_ROOT / source).exists(), source
        assert not m.dockerignore_excludes(ignore, source), source
    assert not m.dockerignore_excludes(ignore, "gangscale/cli.py")
    for path in (".venv/bin/python", ".git/HEAD", ".gangscale/kubeconfig", "tests/conftest.py",
                 ".pytest_cache/v/cache", ".mypy_cache/3.11/x.json", ".ruff_cache/x", "gangscale.egg-info/PKG-INFO",
                 "gangscale/__pycache__/cli.cpython-311.pyc", "gangscale/model/__pycache__/x.pyc", "deploy/README.md",
                 "dist/gangscale.whl", ".tools/helm"):
        assert m.dockerignore_excludes(ignore, path), path


def test_dockerignore_matcher() -> None:
    rules = "# c\n*.log\n!keep.log\nbuild/\n**/tmp\n"
    assert m.dockerignore_excludes(rules, "a.log") and not m.dockerignore_excludes(rules, "keep.log")
    assert m.dockerignore_excludes(rules, "build/x/y") and not m.dockerignore_excludes(rules, "src/a.log")
    assert m.dockerignore_excludes(rules, "tmp") and m.dockerignore_excludes(rules, "a/b/tmp/c")
    assert not m.dockerignore_excludes(rules, "a/tmpx")
