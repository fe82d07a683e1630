"""The discovery-document validator (gangscale.sim.gcp.discovery) on plain exchanges: realistic traffic passes, and
each seeded mistake is reported with the offending field named."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gangscale.sim.gcp.discovery import Discovery, Exchange

PARENT = "/v1/projects/proj-1/locations/us-central1/clusters/c1"
POOL = f"{PARENT}/nodePools/tpu-a"
MIG = "/compute/v1/projects/proj-1/zones/us-central1-a/instanceGroupManagers/gke-c1-tpu-a-grp"
MIG_URL = "https://www.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-a/instanceGroupManagers/gke-c1-tpu-a-grp"
ZONE_URL = "https://www.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-a"
ZONE_OPS = "/compute/v1/projects/proj-1/zones/us-central1-a/operations"
REQUEST_ID = "5f0c7a4e-8e43-5b2a-9d61-0c3e2f1a7b90"

CONTAINER_OP: dict[str, Any] = {
    "name": "operation-1730000000000-abcdef",
    "zone": "us-central1",
    "location": "us-central1",
    "operationType": "CREATE_NODE_POOL",
    "status": "RUNNING",
    "selfLink": "https://container.googleapis.com/v1/projects/123/locations/us-central1/operations/operation-1",
    "targetLink": "https://container.googleapis.com/v1/projects/123/locations/us-central1/clusters/c1/nodePools/tpu-a",
    "startTime": "2026-11-10T12:00:00.123456789Z",
    "progress": {"metrics": [{"name": "nodes done", "intValue": "3"}, {"name": "percent", "doubleValue": 37.5}]},
}
COMPUTE_OP: dict[str, Any] = {
    "kind": "compute#operation",
    "id": "7312345678901234567",
    "name": "operation-1730000000000-6a1b2c3d",
    "zone": ZONE_URL,
    "operationType": "compute.instanceGroupManagers.createInstances",
    "targetLink": MIG_URL,
    "targetId": "1234567890123456789",
    "status": "DONE",
    "user": "gangscale@proj-1.iam.gserviceaccount.com",
    "progress": 100,
    "insertTime": "2026-11-10T04:00:00.000-08:00",
    "startTime": "2026-11-10T04:00:00.000-08:00",
    "endTime": "2026-11-10T04:00:02.000-08:00",
    "clientOperationId": REQUEST_ID,
    "selfLink": f"{ZONE_URL}/operations/operation-1730000000000-6a1b2c3d",
}
CREATE_POOL: dict[str, Any] = {
    "nodePool": {
        "name": "tpu-a",
        "initialNodeCount": 2,
        "locations": ["us-central1-a"],
        "config": {
            "machineType": "ct5lp-hightpu-4t",
            "labels": {"gangscale.io/gang": "g1", "team": "ml"},
            "taints": [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}],
            "diskSizeGb": 100,
            "spot": False,
            "maxRunDuration": "86400s",
        },
        "placementPolicy": {"type": "COMPACT", "tpuTopology": "2x4"},
        "management": {"autoRepair": True, "autoUpgrade": True},
        "maxPodsConstraint": {"maxPodsPerNode": 110},  # int64 as a JSON number: fine in a request
    },
}
NODE_POOL: dict[str, Any] = {
    "name": "tpu-a",
    "config": {
        "machineType": "ct5lp-hightpu-4t",
        "labels": {"team": "ml"},
        "accelerators": [{"acceleratorCount": "4", "acceleratorType": "tpu-v5-lite-podslice"}],
        "taints": [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}],
        "diskSizeGb": 100,
    },
    "initialNodeCount": 2,
    "locations": ["us-central1-a"],
    "selfLink": f"https://container.googleapis.com{POOL}",
    "version": "1.33.5-gke.1080000",
    "instanceGroupUrls": [MIG_URL],
    "status": "RUNNING",
    "management": {"autoRepair": True, "autoUpgrade": True},
    "maxPodsConstraint": {"maxPodsPerNode": "110"},
    "podIpv4CidrSize": 24,
    "upgradeSettings": {"maxSurge": 1, "strategy": "SURGE"},
    "placementPolicy": {"type": "COMPACT", "tpuTopology": "2x4"},
    "etag": "1a2b3c4d5e6f7a8b",
    "statusMessage": "deprecated and output-only: fine in a response",
}
MANAGED: dict[str, Any] = {
    "managedInstances": [
        {"instance": f"{ZONE_URL}/instances/gke-c1-tpu-a-grp-x1", "name": "gke-c1-tpu-a-grp-x1",
         "id": "4567890123456789012", "instanceStatus": "RUNNING", "currentAction": "NONE", "targetStatus": "RUNNING",
         "version": {"instanceTemplate": "global/instanceTemplates/gke-c1-tpu-a"},
         "scheduling": {"terminationTimestamp": "2026-11-11T04:00:00.5-08:00"}},
        {"instance": f"{ZONE_URL}/instances/gke-c1-tpu-a-grp-x2", "name": "gke-c1-tpu-a-grp-x2",
         "currentAction": "CREATING", "targetStatus": "RUNNING",
         "lastAttempt": {"errors": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}]}}},
    ],
}
RESIZE_REQUEST: dict[str, Any] = {
    "name": "gang-g1-1", "description": "gangscale", "resizeBy": 4, "requestedRunDuration": {"seconds": "86400"},
}
ERROR_404: dict[str, Any] = {
    "error": {"code": 404, "message": "Not found: tpu-a", "status": "NOT_FOUND",
              "errors": [{"message": "Not found", "domain": "global", "reason": "notFound"}]},
}


def x(method: str, path: str, query: dict[str, str] | None = None, request: Any = None, status: int = 200,
      response: Any = None) -> Exchange:
    return Exchange(method, path, query or {}, request, status, response)


VALID: list[tuple[str, Exchange, str | None]] = [
    ("nodepools-create", x("POST", f"{PARENT}/nodePools", request=CREATE_POOL, response=CONTAINER_OP),
     "container.projects.locations.clusters.nodePools.create"),
    ("nodepools-get", x("GET", POOL, response=NODE_POOL), "container.projects.locations.clusters.nodePools.get"),
    ("nodepools-list-empty", x("GET", f"{PARENT}/nodePools", response={}),
     "container.projects.locations.clusters.nodePools.list"),
    ("nodepools-setsize", x("POST", f"{POOL}:setSize", request={"nodeCount": 0}, response=CONTAINER_OP),
     "container.projects.locations.clusters.nodePools.setSize"),
    ("nodepools-delete", x("DELETE", POOL, response=CONTAINER_OP),
     "container.projects.locations.clusters.nodePools.delete"),
    ("operations-get", x("GET", "/v1/projects/proj-1/locations/us-central1/operations/operation-1",
                         response={**CONTAINER_OP, "status": "DONE", "endTime": "2026-11-10T12:05:00Z",
                                   "error": {"code": 8, "message": "out of TPUs", "details": []}}),
     "container.projects.locations.operations.get"),
    ("legacy-zones-get", x("GET", "/v1/projects/proj-1/zones/us-central1-a/clusters/c1/nodePools/tpu-a",
                           response=NODE_POOL), "container.projects.zones.clusters.nodePools.get"),
    ("create-instances", x("POST", f"{MIG}/createInstances", {"requestId": REQUEST_ID},
                           {"instances": [{"name": "gke-c1-tpu-a-grp-x1"}, {"name": "gke-c1-tpu-a-grp-x2"}]},
                           response=COMPUTE_OP), "compute.instanceGroupManagers.createInstances"),
    ("delete-instances", x("POST", f"{MIG}/deleteInstances", {"requestId": REQUEST_ID},
                           {"instances": ["zones/us-central1-a/instances/vm-1"],
                            "skipInstancesOnValidationError": True},
                           response=COMPUTE_OP), "compute.instanceGroupManagers.deleteInstances"),
    ("list-managed-instances", x("POST", f"{MIG}/listManagedInstances", {"maxResults": "500"}, response=MANAGED),
     "compute.instanceGroupManagers.listManagedInstances"),
    ("resize", x("POST", f"{MIG}/resize", {"size": "3", "requestId": REQUEST_ID}, response=COMPUTE_OP),
     "compute.instanceGroupManagers.resize"),
    ("resize-request-insert", x("POST", f"{MIG}/resizeRequests", {"requestId": REQUEST_ID}, RESIZE_REQUEST,
                                response=COMPUTE_OP), "compute.instanceGroupManagerResizeRequests.insert"),
    ("zone-operations-get", x("GET", f"{ZONE_OPS}/operation-17300", {"prettyPrint": "false"}, response=COMPUTE_OP),
     "compute.zoneOperations.get"),
    ("zone-operations-wait", x("POST", f"{ZONE_OPS}/operation-17300/wait", response=COMPUTE_OP),
     "compute.zoneOperations.wait"),
    ("error-404", x("GET", POOL, status=404, response=ERROR_404),
     "container.projects.locations.clusters.nodePools.get"),
    ("front-end-html-503", x("POST", f"{MIG}/resize", {"size": "3"}, status=503, response=None),
     "compute.instanceGroupManagers.resize"),
    ("dropped", x("POST", f"{MIG}/resize", {"size": "3"}, status=0), "compute.instanceGroupManagers.resize"),
    ("metadata-token", x("GET", "/computeMetadata/v1/instance/service-accounts/default/token",
                         response={"access_token": "t", "expires_in": 3599, "token_type": "Bearer"}), None),
    ("metadata-root", x("GET", "/", response=None), None),
]


@pytest.fixture(scope="module")
def disc() -> Discovery:
    return Discovery.load()


def test_revisions(disc: Discovery) -> None:
    assert disc.revisions == {"container": "20261027", "compute": "20261106"}


@pytest.mark.parametrize(("exchange", "method_id"), [(ex, mid) for _, ex, mid in VALID], ids=[n for n, _, _ in VALID])
def test_valid_exchange_passes(disc: Discovery, exchange: Exchange, method_id: str | None) -> None:
    assert disc.method_of(exchange.method, exchange.path) == method_id
    assert disc.check(exchange) == []


def edit(ex: Exchange, *, req: Callable[[Any], None] | None = None, resp: Callable[[Any], None] | None = None,
         **changes: Any) -> Exchange:
    """A copy of ``ex`` with ``changes``, its bodies deep-copied then edited in place by ``req``/``resp``."""
    fields = {"method": ex.method, "path": ex.path, "query": dict(ex.query), "request": copy.deepcopy(ex.request),
              "status": ex.status, "response": copy.deepcopy(ex.response), **changes}
    if req is not None:
        req(fields["request"])
    if resp is not None:
        resp(fields["response"])
    return Exchange(**fields)


def _valid(name: str) -> Exchange:
    return next(ex for n, ex, _ in VALID if n == name)


CREATE, GET, CREATE_INST, DELETE_INST = (_valid("nodepools-create"), _valid("nodepools-get"),
                                         _valid("create-instances"), _valid("delete-instances"))
LMI, RESIZE, RR, ZOP, OP = (_valid("list-managed-instances"), _valid("resize"), _valid("resize-request-insert"),
                            _valid("zone-operations-get"), _valid("operations-get"))

BROKEN: list[tuple[str, Exchange, str]] = [
    ("unknown-request-field", edit(CREATE_INST, req=lambda b: b["instances"][0].update(nmae="vm-3")),
     "compute.instanceGroupManagers.createInstances request.instances[0].nmae: unknown field"),
    ("unknown-response-field", edit(GET, resp=lambda b: b["config"].update(acceleratorz=[])),
     "response.config.acceleratorz: unknown field"),
    ("unknown-nested-response-field", edit(LMI, resp=lambda b: b["managedInstances"][0].update(zone="z")),
     "response.managedInstances[0].zone: unknown field"),
    ("boolean-as-string", edit(DELETE_INST, req=lambda b: b.update(skipInstancesOnValidationError="false")),
     "request.skipInstancesOnValidationError: expected a boolean"),
    ("boolean-as-string-nested", edit(CREATE, req=lambda b: b["nodePool"]["management"].update(autoRepair="true")),
     "request.nodePool.management.autoRepair: expected a boolean"),
    ("bad-enum", edit(CREATE, req=lambda b: b["nodePool"]["config"]["taints"][0].update(effect="NoSchedule")),
     "request.nodePool.config.taints[0].effect: 'NoSchedule' is not one of the enum values"),
    ("bad-response-enum", edit(ZOP, resp=lambda b: b.update(status="SUCCEEDED")),
     "compute.zoneOperations.get response.status: 'SUCCEEDED' is not one of the enum values"),
    ("int64-number-in-response", edit(GET, resp=lambda b: b["maxPodsConstraint"].update(maxPodsPerNode=110)),
     "response.maxPodsConstraint.maxPodsPerNode: int64 must be a JSON string in a response"),
    ("uint64-number-in-response", edit(ZOP, resp=lambda b: b.update(id=7312345678901234567)),
     "compute.zoneOperations.get response.id: uint64 must be a JSON string in a response"),
    ("int32-string-in-response", edit(GET, resp=lambda b: b.update(initialNodeCount="2")),
     "response.initialNodeCount: expected a int32 number"),
    ("int64-not-decimal", edit(RR, req=lambda b: b["requestedRunDuration"].update(seconds="1d")),
     "request.requestedRunDuration.seconds: '1d' is not a decimal int64"),
    ("bad-datetime", edit(LMI, resp=lambda b: b["managedInstances"][0]["scheduling"].update(
        terminationTimestamp="2026-11-11 04:00")),
     "response.managedInstances[0].scheduling.terminationTimestamp: '2026-11-11 04:00' is not a valid google-datetime"),
    ("bad-duration", edit(CREATE, req=lambda b: b["nodePool"]["config"].update(maxRunDuration="1d")),
     "request.nodePool.config.maxRunDuration: '1d' is not a valid google-duration"),
    ("missing-required-query", edit(RESIZE, query={"requestId": REQUEST_ID}),
     "compute.instanceGroupManagers.resize query.size: required query parameter missing"),
    ("query-not-integer", edit(RESIZE, query={"size": "three"}),
     "compute.instanceGroupManagers.resize query.size: 'three' is not a decimal int32"),
    ("unknown-query", edit(CREATE_INST, query={"requestId": REQUEST_ID, "requestID": "x"}),
     "compute.instanceGroupManagers.createInstances query.requestID: unknown query parameter"),
    ("deprecated-query", edit(GET, query={"projectId": "proj-1"}),
     "container.projects.locations.clusters.nodePools.get query.projectId: deprecated query parameter sent"),
    ("verb-without-method", edit(CREATE, method="PUT"),
     f"no discovery method for PUT {PARENT}/nodePools (the path takes GET, POST)"),
    ("path-without-method", edit(GET, path=f"{POOL}/nodes"), f"no discovery method for GET {POOL}/nodes"),
    ("path-param-pattern", edit(ZOP, path="/compute/v1/projects/proj-1/zones/US_CENTRAL1/operations/operation-17300"),
     "compute.zoneOperations.get path.zone: 'US_CENTRAL1' does not match pattern"),
    ("output-only-in-request", edit(CREATE, req=lambda b: b["nodePool"].update(status="RUNNING")),
     "request.nodePool.status: output-only field sent"),
    ("output-only-by-description", edit(RR, req=lambda b: b.update(kind="compute#instanceGroupManagerResizeRequest")),
     "compute.instanceGroupManagerResizeRequests.insert request.kind: output-only field sent"),
    ("deprecated-in-request", edit(CREATE, req=lambda b: b.update(projectId="proj-1", zone="us-central1")),
     "container.projects.locations.clusters.nodePools.create request.projectId: deprecated field sent"),
    ("required-by-annotation", edit(RR, req=lambda b: b.pop("name")),
     "compute.instanceGroupManagerResizeRequests.insert request.name: required field missing (annotations.required)"),
    ("required-by-description", edit(CREATE, request=None),
     "container.projects.locations.clusters.nodePools.create request.nodePool: required field missing"),
    ("body-on-bodiless-method", edit(RESIZE, request={"size": 3}),
     "compute.instanceGroupManagers.resize request: a body sent to a method that takes none"),
    ("2xx-without-object-body", edit(GET, response=None),
     "container.projects.locations.clusters.nodePools.get response: a 200 answer must be a JSON object"),
    ("2xx-with-list-body", edit(LMI, response=[MANAGED]),
     "compute.instanceGroupManagers.listManagedInstances response: a 200 answer must be a JSON object"),
    ("2xx-with-error-body", edit(GET, response=ERROR_404),
     "container.projects.locations.clusters.nodePools.get response.error: unknown field"),
    ("2xx-body-for-bodiless-answer", edit(ZOP, path=f"{ZONE_OPS}/operation-17300", method="DELETE"),
     "compute.zoneOperations.delete response: a body from a method that answers none"),
    ("4xx-without-json-body", edit(GET, status=404, response=None),
     'response: an error answer must be {"error": {...}}, got null'),
    ("error-envelope-flat", edit(GET, status=404, response={"code": 404, "message": "not found"}),
     'response: an error answer must be {"error": {...}}'),
    ("error-envelope-code-type", edit(GET, status=404, response={"error": {"code": "404", "message": "not found"}}),
     "response.error.code: expected an integer"),
    ("error-envelope-code-mismatch", edit(GET, status=409, response=ERROR_404),
     "response.error.code: 404 differs from the HTTP status 409"),
    ("error-envelope-no-message", edit(RESIZE, status=400, response={"error": {"code": 400, "errors": {}}}),
     "response.error.message: expected a string"),
]


@pytest.mark.parametrize(("exchange", "expected"), [(ex, e) for _, ex, e in BROKEN], ids=[n for n, _, _ in BROKEN])
def test_seeded_mistake_is_reported(disc: Discovery, exchange: Exchange, expected: str) -> None:
    problems = disc.check(exchange)
    assert any(expected in p for p in problems), problems


REFUSED = edit(CREATE_INST, status=400, req=lambda b: b["instances"][0].update(nmae="vm-3"),
               query={"requestId": REQUEST_ID, "bogus": "1"},
               response={"error": {"code": 400, "message": "Invalid JSON payload received. Unknown name \"nmae\""}})


@pytest.mark.parametrize(
    ("exchange", "strict", "expected"),
    [
        (REFUSED, True, ["request.instances[0].nmae: unknown field", "query.bogus: unknown query parameter"]),
        (REFUSED, False, []),
        (edit(REFUSED, status=200, response=COMPUTE_OP), False,
         ["request.instances[0].nmae: unknown field", "query.bogus: unknown query parameter"]),
        (edit(REFUSED, response={"error": {"code": 400}}), False, ["response.error.message: expected a string"]),
    ],
    ids=["strict-refused", "lenient-refused", "lenient-but-accepted", "lenient-still-checks-envelope"],
)
def test_strict_request(disc: Discovery, exchange: Exchange, strict: bool, expected: list[str]) -> None:
    problems = disc.check(exchange, strict_request=strict)
    assert len(problems) == len(expected), problems
    for want in expected:
        assert any(want in p for p in problems), problems
