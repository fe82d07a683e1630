"""The gke provider's pure parts, on plain objects: error classes (cloud-providers.md §1.4, §4.2, verbatim texts),
token-derived names, how nodes are recognised, the pool file's gke block, and pools written from a cluster."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gangscale.clock import ManualClock
from gangscale.config import ConfigError, parse_pool_yaml
from gangscale.providers.base import ErrorClass, NodeRef
from gangscale.providers.gke import names
from gangscale.providers.gke.client import GcpError, _error, _seconds
from gangscale.providers.gke.discover import _pools_of, _refusal
from gangscale.providers.gke.errors import from_compute_errors, from_http, from_pool, from_text
from gangscale.providers.gke.provider import GkeProvider

STOCKOUT_TEXT = ("Google Compute Engine: Not all instances running in IGM after 35m4.033429035s. Expected 5, "
                 "running 2, transitioning 3. Current errors: [GCE_STOCKOUT]: Instance "
                 "'gke-c-default-pool-97da88a9-8gmv' creation failed: The zone 'projects/p/zones/us-central1-c' "
                 "does not have enough resources available to fulfill the request. '(resource type:compute)'.")
QUOTA_TEXT = ("Insufficient regional quota to satisfy request: resource \"CPUS\": request requires '144.0' and is "
              "short '109.0'. project has a quota of '128.0' with '35.0' available. View and manage quotas at "
              "https://console.cloud.google.com/iam-admin/quotas?usage=USED&project=p")
BUSY_TEXT = ("Operation operation-1596064640049-1b03e177 is currently upgrading cluster c. Please wait and try again "
             "once it is done.")
THROTTLE_TEXT = 'Too many operations: cluster "c" hits the concurrent operations quota 5, please try again later.'


@dataclass(frozen=True)
class HttpCase:
    id: str
    status: int
    rpc: str
    message: str
    error_class: ErrorClass
    code: str


HTTP_CASES = [
    HttpCase("quota-403", 403, "PERMISSION_DENIED", QUOTA_TEXT, ErrorClass.QUOTA, "QUOTA_EXCEEDED"),
    HttpCase("permission-403", 403, "PERMISSION_DENIED", "Required 'container.nodePools.create' permission",
             ErrorClass.PERMANENT, "PERMISSION_DENIED"),
    HttpCase("cluster-busy-400", 400, "FAILED_PRECONDITION", BUSY_TEXT, ErrorClass.TRANSIENT, "FAILED_PRECONDITION"),
    HttpCase("too-many-operations-429", 429, "RESOURCE_EXHAUSTED", THROTTLE_TEXT, ErrorClass.TRANSIENT,
             "RESOURCE_EXHAUSTED"),
    HttpCase("bad-request-400", 400, "INVALID_ARGUMENT", "Invalid value for field 'nodePool.name'",
             ErrorClass.PERMANENT, "INVALID_ARGUMENT"),
    HttpCase("not-found-404", 404, "NOT_FOUND", "Not found: projects/p/locations/l/clusters/c.", ErrorClass.PERMANENT,
             "NOT_FOUND"),
    HttpCase("server-500", 500, "INTERNAL", "Internal error", ErrorClass.TRANSIENT, "INTERNAL"),
    HttpCase("unavailable-503", 503, "UNAVAILABLE", "The service is currently unavailable.", ErrorClass.TRANSIENT,
             "UNAVAILABLE"),
    HttpCase("connection-lost", 0, "UNAVAILABLE", "ServerDisconnectedError", ErrorClass.TRANSIENT, "UNAVAILABLE"),
    HttpCase("unauthenticated-after-refresh", 401, "UNAUTHENTICATED", "Request had invalid authentication credentials.",
             ErrorClass.PERMANENT, "UNAUTHENTICATED"),
]


@pytest.mark.parametrize("case", HTTP_CASES, ids=[c.id for c in HTTP_CASES])
def test_http_errors_are_classified(case: HttpCase) -> None:
    error = from_http(GcpError(case.status, case.rpc, case.message), "tpu")
    assert (error.error_class, error.code, error.pool) == (case.error_class, case.code, "tpu")
    assert error.message == case.message


@pytest.mark.parametrize(("text", "error_class", "code"), [
    (STOCKOUT_TEXT, ErrorClass.STOCKOUT, "GCE_STOCKOUT"),
    ("Deploy error: [GCE_QUOTA_EXCEEDED]: Instance 'gke-x' creation failed: Quota 'TPUS' exceeded.",
     ErrorClass.QUOTA, "GCE_QUOTA_EXCEEDED"),
    (BUSY_TEXT, ErrorClass.TRANSIENT, "FAILED_PRECONDITION"),
    ("The node pool could not be created: unsupported TPU configuration", ErrorClass.PERMANENT, "OPERATION_FAILED"),
], ids=["stockout", "async-quota", "busy", "other"])
def test_operation_failures_are_classified_by_their_text(text: str, error_class: ErrorClass, code: str) -> None:
    error = from_text(text, "tpu")
    assert (error.error_class, error.code, error.rolled_back) == (error_class, code, True)


@pytest.mark.parametrize(("codes", "error_class", "code"), [
    (["ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"], ErrorClass.STOCKOUT, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
    (["RESOURCE_POOL_EXHAUSTED"], ErrorClass.STOCKOUT, "RESOURCE_POOL_EXHAUSTED"),
    (["INSUFFICIENT_CAPACITY"], ErrorClass.STOCKOUT, "INSUFFICIENT_CAPACITY"),
    (["QUOTA_EXCEEDED"], ErrorClass.QUOTA, "QUOTA_EXCEEDED"),
    (["PERMISSIONS_ERROR"], ErrorClass.PERMANENT, "OPERATION_FAILED"),
    (["IP_SPACE_EXHAUSTED"], ErrorClass.PERMANENT, "OPERATION_FAILED"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_compute_error_codes_are_classified(codes: list[str], error_class: ErrorClass, code: str) -> None:
    error = from_compute_errors([{"code": c, "message": "m"} for c in codes], "gpu", rolled_back=False)
    assert (error.error_class, error.code, error.rolled_back) == (error_class, code, False)


@pytest.mark.parametrize(("pool", "error_class"), [
    ({"status": "ERROR", "conditions": [{"canonicalCode": "RESOURCE_EXHAUSTED", "message": "no capacity"}]},
     ErrorClass.STOCKOUT),
    ({"status": "ERROR", "conditions": [{"canonicalCode": "RESOURCE_EXHAUSTED", "message": QUOTA_TEXT}]},
     ErrorClass.QUOTA),
    ({"status": "ERROR", "conditions": [{"code": "GCE_STOCKOUT", "message": "x"}]}, ErrorClass.STOCKOUT),
    ({"status": "ERROR", "conditions": [{"code": "GCE_QUOTA_EXCEEDED", "message": "x"}]}, ErrorClass.QUOTA),
    ({"status": "ERROR", "statusMessage": STOCKOUT_TEXT}, ErrorClass.STOCKOUT),
    ({"status": "ERROR", "conditions": [{"canonicalCode": "PERMISSION_DENIED", "message": "no access"}]},
     ErrorClass.PERMANENT),
], ids=["canonical-stockout", "canonical-quota-text", "deprecated-code-stockout", "deprecated-code-quota",
        "deprecated-status-message", "other"])
def test_a_failed_pool_is_classified_by_current_fields_then_deprecated_ones(
        pool: dict[str, object], error_class: ErrorClass) -> None:
    error = from_pool(pool, "tpu")
    assert error.error_class is error_class
    conditions = pool.get("conditions")
    if isinstance(conditions, list) and "canonicalCode" in conditions[0]:
        assert error.message.startswith(f"[{conditions[0]['canonicalCode']}]: ")


def test_the_error_envelope_and_retry_after_are_read() -> None:
    raw = (b'{"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED", '
           b'"errors": [{"message": "slow down", "domain": "global", "reason": "rateLimitExceeded"}]}}')
    error = _error(429, raw, "7")
    assert (error.http_status, error.status, error.reason, error.message, error.retry_after) == (
        429, "RESOURCE_EXHAUSTED", "rateLimitExceeded", "slow down", 7.0)
    html = _error(502, b"<html><body>Bad Gateway</body></html>", None)
    assert (html.status, html.message, html.retry_after) == ("UNAVAILABLE", "<html><body>Bad Gateway</body></html>",
                                                             None)
    assert _seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0 and _seconds("soon") is None


def test_names_derive_from_the_token_and_fit_gke_and_compute() -> None:
    token = "f3c64af7-75a8-4294-82cd-789a380208a9-729fb4081b48-0"
    claim = names.claim(token)
    assert len(claim) == 12 and names.unit_name(token, 3) == f"gs-{claim}-3"
    assert names.claim_of(names.unit_name(token, 3)) == claim and names.claim_of("gke-c-pool-1a2b3c4d-x9z1") is None
    assert names.resize_request_name(token) == f"gs-{claim}" and len(names.unit_name(token, 999)) <= 40
    assert names.request_id(token, "a") == names.request_id(token, "a") != names.request_id(token, "b")
    assert names.parse_slot(names.slot(2, 3)) == (2, 3) and names.parse_slot("2/3") is None
    assert names.claim_of_request(f"gs-{claim}") == claim and names.claim_of_request(f"gs-{claim}-0") is None


@pytest.mark.parametrize(("namespace", "name", "expected"), [
    ("short-namespace", "short-name", "gke-short-namespace-short-name-3d1e61d88309874b"),
    ("long-namespace-that-will-not-fit-in-the-cap", "short-name",
     "gke-long-namespace-that--short-name-85245499fd480865"),
    ("default", "acc-provisioned", "gke-default-acc-provisioned-408ac6c1e929cc97"),
], ids=["short", "namespace-cut-to-20", "default"])
def test_gkes_resize_request_name_for_a_provisioning_request(namespace: str, name: str, expected: str) -> None:
    """GKE's own test vectors (GoogleCloudPlatform/cluster-autoscaler, ``TestResizeRequestNameV1``): the name its
    nodes carry in ``autoscaling.gke.io/provisioning-request``, by which gangscale finds the claim of its request."""
    assert names.gke_resize_request_name(namespace, name) == expected
    ours = names.gke_resize_request_name(namespace, "gs-0123456789ab")
    assert names.claim_of_gke_request(namespace, ours) == "0123456789ab"
    assert names.claim_of_gke_request("other", ours) is None and names.claim_of_gke_request(namespace, expected) is None


POOLS = """
nodePools:
  - name: tpu-v5e
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    zone: us-central1-a
    maxUnits: 3
    gke: {project: p, location: us-central1, cluster: c, mode: slice}
  - name: gpu-l4
    machineType: g2-standard-8
    zone: us-central1-b
    maxUnits: 8
    gke: {project: p, location: us-central1, cluster: c, mode: resize, nodePool: l4}
  - name: flex-l4
    machineType: g2-standard-8
    zone: us-central1-b
    maxUnits: 8
    gke: {project: p, location: us-central1, cluster: c, mode: flex-start, nodePool: flex,
          maxRunDurationSeconds: 86400}
  - name: dws-a3
    machineType: a3-highgpu-8g
    zone: us-central1-b
    maxUnits: 8
    gke: {project: p, location: us-central1, cluster: c, mode: queued-provisioning, nodePool: dws}
"""


def test_the_gke_block_puts_gkes_labels_and_taints_in_the_model() -> None:
    tpu, gpu, flex, dws = parse_pool_yaml(POOLS).pools
    assert tpu.provider["gke"] == {"project": "p", "location": "us-central1", "cluster": "c", "mode": "slice",
                                   "nodePool": ""}
    assert "cloud.google.com/gke-nodepool" not in tpu.labels  # each slice is a node pool of its own name
    assert tpu.labels["cloud.google.com/gke-tpu-topology"] == "2x4"
    assert tpu.labels["topology.kubernetes.io/region"] == "us-central1"
    assert [str(t) for t in tpu.taints] == ["google.com/tpu=present:NoSchedule"]
    assert gpu.labels["cloud.google.com/gke-nodepool"] == "l4"
    assert [str(t) for t in gpu.taints] == ["nvidia.com/gpu=present:NoSchedule"]
    assert "cloud.google.com/gke-flex-start" not in gpu.labels
    assert flex.provider["gke"]["maxRunDurationSeconds"] == 86400
    assert flex.labels["cloud.google.com/gke-flex-start"] == dws.labels["cloud.google.com/gke-flex-start"] == "true"
    assert [str(t) for t in dws.taints] == ["nvidia.com/gpu=present:NoSchedule",
                                            "cloud.google.com/gke-queued=true:NoSchedule"]


@pytest.mark.parametrize(("pool", "problem"), [
    ("{name: a, machineType: ct5lp-hightpu-4t, tpuTopology: 2x4, zone: z-a-1, maxUnits: 1, "
     "gke: {project: p, location: l, cluster: c, mode: resize, nodePool: x}}",
     "nodePools[0] (a).gke.mode: resize adds single VMs to an existing node pool; a unit of 2 hosts"),
    ("{name: a, machineType: g2-standard-8, zone: z-a-1, maxUnits: 1, "
     "gke: {project: p, location: l, cluster: c, mode: resize}}",
     "nodePools[0] (a).gke.nodePool: is required with mode resize"),
    ("{name: a, machineType: g2-standard-8, maxUnits: 1, gke: {project: p, location: l, cluster: c}}",
     "nodePools[0] (a).zone: is required with gke"),
    ("{name: a, machineType: g2-standard-8, zone: z-a-1, maxUnits: 1, "
     "gke: {project: p, location: l, cluster: c, mode: fast}}",
     "nodePools[0] (a).gke.mode: must be one of slice, resize, flex-start, queued-provisioning; got 'fast'"),
    ("{name: a, machineType: g2-standard-8, zone: z-a-1, maxUnits: 1, "
     "gke: {project: p, location: l, cluster: c, mode: resize-request, nodePool: x}}",
     "nodePools[0] (a).gke.mode: 'resize-request' was removed: it sent Compute Engine resize requests to an ordinary "
     "node pool's instance group"),
    ("{name: a, machineType: g2-standard-8, zone: z-a-1, maxUnits: 1, "
     "gke: {project: p, location: l, cluster: c, mode: resize, nodePool: x, maxRunDurationSeconds: 3600}}",
     "nodePools[0] (a).gke.maxRunDurationSeconds: applies to modes flex-start, queued-provisioning"),
    ("{name: a, machineType: g2-standard-8, zone: z-a-1, maxUnits: 1, "
     "gke: {project: p, location: l, cluster: c, mode: flex-start, nodePool: x, maxRunDurationSeconds: 60}}",
     "nodePools[0] (a).gke.maxRunDurationSeconds: Input should be greater than or equal to 600"),
], ids=["slice-in-resize-mode", "resize-without-node-pool", "no-zone", "unknown-mode", "removed-mode",
        "run-duration-of-resize", "run-duration-too-short"])
def test_gke_block_problems_are_reported(pool: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_pool_yaml(f"nodePools:\n  - {pool}\n")
    assert any(line.startswith(problem) for line in caught.value.problems), caught.value.problems


def test_nodes_are_recognised_by_slice_labels_or_by_node_pool_and_name() -> None:
    provider = GkeProvider(parse_pool_yaml(POOLS).pools, ManualClock())
    token = "tok-1"
    slice_node = {"gangscale.io/node-pool": "tpu-v5e", "gangscale.io/unit": "gs-aaaaaaaaaaaa-0",
                  "gangscale.io/token": token}
    assert provider.node_ref("gke-c-gs-aaa-1234-abcd", slice_node) == NodeRef("tpu-v5e", "gs-aaaaaaaaaaaa-0",
                                                                               names.claim(token))
    vm = names.unit_name(token, 0)
    l4 = {"cloud.google.com/gke-nodepool": "l4", "topology.kubernetes.io/zone": "us-central1-b"}
    assert provider.node_ref(vm, l4) == NodeRef("gpu-l4", vm, provider.claim(token))
    assert provider.node_ref("gke-c-l4-1a2b3c4d-x9z1", l4) == NodeRef("gpu-l4", None, None)  # not made by gangscale
    assert provider.node_ref(vm, {**l4, "topology.kubernetes.io/zone": "us-central1-c"}) is None  # another zone
    assert provider.node_ref("n", {"cloud.google.com/gke-nodepool": "default-pool"}) is None
    flex = {"cloud.google.com/gke-nodepool": "flex", "topology.kubernetes.io/zone": "us-central1-b"}
    made = {**flex, "autoscaling.gke.io/provisioning-request": names.resize_request_name(token)}
    assert provider.node_ref("gke-c-flex-1a2b3c4d-x9z1", made) == NodeRef("flex-l4", "gke-c-flex-1a2b3c4d-x9z1",
                                                                          names.claim(token))
    assert provider.node_ref("gke-c-flex-1a2b3c4d-x9z2", flex) == NodeRef("flex-l4", None, None)
    dws = {"cloud.google.com/gke-nodepool": "dws", "topology.kubernetes.io/zone": "us-central1-b",
           "autoscaling.gke.io/provisioning-request": names.gke_resize_request_name(
               "default", names.resize_request_name(token))}
    assert provider.node_ref("gke-c-dws-1a2b3c4d-x9z1", dws) == NodeRef("dws-a3", "gke-c-dws-1a2b3c4d-x9z1",
                                                                        names.claim(token))
    kueue = {**dws, "autoscaling.gke.io/provisioning-request": names.gke_resize_request_name("team-a", "job-1")}
    assert provider.node_ref("gke-c-dws-1a2b3c4d-x9z3", kueue) == NodeRef("dws-a3", None, None)  # someone else's


def test_a_cluster_is_written_as_a_pool_file_and_autoscaled_pools_are_refused() -> None:
    tpu = {"name": "v5e", "locations": ["us-west4-a"], "placementPolicy": {"type": "COMPACT", "tpuTopology": "2x4"},
           "config": {"machineType": "ct5lp-hightpu-4t", "labels": {"team": "ml", "cloud.google.com/x": "y"},
                      "taints": [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}]}}
    assert _pools_of(tpu, "p", "us-west4", "c") == [{
        "name": "v5e", "machineType": "ct5lp-hightpu-4t", "labels": {"team": "ml"}, "tpuTopology": "2x4",
        "zone": "us-west4-a", "maxUnits": 4,
        "gke": {"project": "p", "location": "us-west4", "cluster": "c", "mode": "slice", "nodePool": "v5e"}}]
    gpu = {"name": "l4", "locations": ["us-west4-a", "us-west4-b"],
           "config": {"machineType": "g2-standard-8", "taints": [{"key": "team", "value": "x",
                                                                  "effect": "NO_EXECUTE"}]}}
    assert [(p["name"], p["zone"], p["gke"]["mode"], p["taints"]) for p in _pools_of(gpu, "p", "us-west4", "c")] == [
        ("l4-a", "us-west4-a", "resize", [{"key": "team", "value": "x", "effect": "NoExecute"}]),
        ("l4-b", "us-west4-b", "resize", [{"key": "team", "value": "x", "effect": "NoExecute"}])]
    flex = {"name": "flex", "locations": ["us-west4-a"],
            "config": {"machineType": "g2-standard-8", "flexStart": True, "maxRunDuration": "86400s"}}
    assert [p["gke"] for p in _pools_of(flex, "p", "us-west4", "c")] == [
        {"project": "p", "location": "us-west4", "cluster": "c", "mode": "flex-start", "nodePool": "flex",
         "maxRunDurationSeconds": 86400}]
    dws = {"name": "dws", "locations": ["us-west4-a"], "queuedProvisioning": {"enabled": True},
           "autoscaling": {"enabled": True, "totalMaxNodeCount": 8},
           "config": {"machineType": "a3-highgpu-8g", "flexStart": True}}
    assert _refusal(dws) is None
    assert [p["gke"]["mode"] for p in _pools_of(dws, "p", "us-west4", "c")] == ["queued-provisioning"]
    refusal = _refusal({"name": "l4", "autoscaling": {"enabled": True, "maxNodeCount": 6}})
    assert refusal is not None and "GKE's cluster autoscaler manages it (maxNodeCount 6)" in refusal
    assert _refusal(gpu) is None
