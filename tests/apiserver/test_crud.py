"""Create / get / list / update / delete through kubernetes_asyncio over HTTP, as a real server answers."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests import builders as b


async def test_typed_client_create_gets_201_body_with_server_metadata(api_client: ApiClient) -> None:
    core = CoreV1Api(api_client)
    created = await core.create_namespaced_pod("default", b.pod("p1"))
    # kubernetes_asyncio maps only 201 to a body: a None here would mean a wrong status code.
    assert created is not None
    assert created.metadata.uid and created.metadata.resource_version
    assert created.metadata.creation_timestamp is not None
    assert created.status.phase == "Pending"
    got = await core.read_namespaced_pod("p1", "default")
    assert got.metadata.uid == created.metadata.uid


async def test_custom_object_create_starts_at_generation_1(api_client: ApiClient) -> None:
    custom = CustomObjectsApi(api_client)
    pr = await custom.create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", "default", "provisioningrequests", b.provreq("pr1"))
    assert pr["metadata"]["generation"] == 1
    assert pr["metadata"]["uid"]
    assert int(pr["metadata"]["resourceVersion"]) > 0


async def test_resource_versions_are_global_and_increasing(http: KubeHTTP) -> None:
    a = await http.request("POST", b.NODES.path(), body=b.node("n1"))
    c = await http.request("POST", b.PODS.path("default"), body=b.pod("p1"))
    d = await http.request("POST", b.NODES.path(), body=b.node("n2"))
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, c, d)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    listing = await http.request("GET", b.NODES.path())
    assert int(listing["metadata"]["resourceVersion"]) >= rvs[-1]
    assert [n["metadata"]["name"] for n in listing["items"]] == ["n1", "n2"]


async def test_generate_name(http: KubeHTTP) -> None:
    body = b.pod("")
    body["metadata"] = {"generateName": "worker-"}
    out = await http.request("POST", b.PODS.path("default"), body=body)
    name = out["metadata"]["name"]
    assert name.startswith("worker-") and len(name) == len("worker-") + 5


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), [
    ("GET", b.PODS.path("default", "missing"), None, 404, "NotFound"),
    ("POST", b.PODS.path("nope"), b.pod("p"), 404, "NotFound"),
    ("GET", "/apis/example.com/v1/widgets", None, 404, "NotFound"),
    ("POST", b.PODS.path("default"), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}},
     400, "BadRequest"),
    ("POST", b.PODS.path("default"), {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Bad_Name"}},
     422, "Invalid"),
], ids=["get-missing", "create-in-missing-namespace", "unknown-resource", "wrong-kind", "invalid-name"])
async def test_errors_are_status_objects(http: KubeHTTP, method: str, path: str, body: object,
                                         status: int, reason: str) -> None:
    with pytest.raises(ApiError) as err:
        await http.request(method, path, body=body)
    assert err.value.status == status
    assert err.value.reason == reason
    assert err.value.body["kind"] == "Status" and err.value.body["code"] == status


async def test_not_found_message_matches_real_server(http: KubeHTTP) -> None:
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.PROVREQS.path("default", "nope"))
    assert err.value.message == 'provisioningrequests.autoscaling.x-k8s.io "nope" not found'
    assert err.value.body["details"] == {"name": "nope", "group": "autoscaling.x-k8s.io",
                                         "kind": "provisioningrequests"}


async def test_create_twice_is_already_exists(api_client: ApiClient) -> None:
    core = CoreV1Api(api_client)
    await core.create_node(b.node("n1"))
    with pytest.raises(ApiException) as err:
        await core.create_node(b.node("n1"))
    assert err.value.status == 409
    assert '"reason":"AlreadyExists"' in err.value.body.replace(" ", "")


async def test_update_with_stale_resource_version_conflicts(http: KubeHTTP) -> None:
    created = await http.request("POST", b.NODES.path(), body=b.node("n1"))
    first = dict(created, metadata={**created["metadata"], "labels": {"a": "1"}})
    await http.request("PUT", b.NODES.path(name="n1"), body=first)
    stale = dict(created, metadata={**created["metadata"], "labels": {"a": "2"}})
    with pytest.raises(ApiError) as err:
        await http.request("PUT", b.NODES.path(name="n1"), body=stale)
    assert err.value.status == 409 and err.value.reason == "Conflict"
    assert "the object has been modified" in err.value.message


async def test_noop_update_keeps_resource_version(http: KubeHTTP) -> None:
    created = await http.request("POST", b.NODES.path(), body=b.node("n1"))
    again = await http.request("PUT", b.NODES.path(name="n1"), body=created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_generation_moves_only_with_spec(http: KubeHTTP) -> None:
    pr = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr1"))
    labelled = await http.request("PATCH", b.PROVREQS.path("default", "pr1"),
                                  body={"metadata": {"labels": {"x": "y"}}},
                                  content_type="application/merge-patch+json")
    assert labelled["metadata"]["generation"] == 1
    assert labelled["metadata"]["resourceVersion"] != pr["metadata"]["resourceVersion"]
    status = await http.request("PATCH", b.PROVREQS.path("default", "pr1", "status"),
                                body={"status": {"conditions": [b.condition("Accepted")]}},
                                content_type="application/merge-patch+json")
    assert status["metadata"]["generation"] == 1
    # A Kueue workload's spec may change: generation follows.
    await http.request("POST", b.WORKLOADS.path("default"), body={
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"},
        "spec": {"queueName": "q", "podSets": []}})
    wl = await http.request("PATCH", b.WORKLOADS.path("default", "w"), body={"spec": {"active": False}},
                            content_type="application/merge-patch+json")
    assert wl["metadata"]["generation"] == 2


async def test_versions_share_storage(http: KubeHTTP) -> None:
    await http.request("POST", b.PROVREQS_BETA.path("default"),
                       body=b.provreq("old", api_version="autoscaling.x-k8s.io/v1beta1"))
    as_v1 = await http.request("GET", b.PROVREQS.path("default", "old"))
    assert as_v1["apiVersion"] == "autoscaling.x-k8s.io/v1"
    as_beta = await http.request("GET", b.PROVREQS_BETA.path("default", "old"))
    assert as_beta["apiVersion"] == "autoscaling.x-k8s.io/v1beta1"


async def test_events_api_shares_storage_with_core_events(http: KubeHTTP) -> None:
    await http.request("POST", b.EVENTS_V1.path("default"), body={
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
        "eventTime": "2026-11-21T00:00:00.000000Z", "reportingController": "gangscale.io/controller",
        "reportingInstance": "gangscale-0", "action": "ScaleUp", "reason": "Provisioned", "type": "Normal",
        "note": "2 nodes", "regarding": {"kind": "ProvisioningRequest", "name": "pr1", "namespace": "default"}})
    core = await http.request("GET", b.EVENTS.path("default", "e1"))
    assert core["message"] == "2 nodes"
    assert core["involvedObject"]["name"] == "pr1"
    assert core["reportingComponent"] == "gangscale.io/controller"


async def test_delete_returns_status_or_object(http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    gone = await http.request("DELETE", b.NODES.path(name="n1"))
    assert gone["kind"] == "Status" and gone["status"] == "Success"
    await http.request("POST", b.PODS.path("default"), body=b.pod("p1"))
    deleted_pod = await http.request("DELETE", b.PODS.path("default", "p1"))
    assert deleted_pod["kind"] == "Pod"
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.PODS.path("default", "p1"))
    assert err.value.status == 404


async def test_finalizers_hold_deletion_until_removed(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    body = b.provreq("pr1")
    body["metadata"]["finalizers"] = ["gangscale.io/release"]
    await http.request("POST", b.PROVREQS.path("default"), body=body)
    held = await http.request("DELETE", b.PROVREQS.path("default", "pr1"))
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["generation"] == 2  # the first graceful deletion bumps generation
    still = await http.request("GET", b.PROVREQS.path("default", "pr1"))
    assert still["metadata"]["finalizers"] == ["gangscale.io/release"]
    await http.request("PATCH", b.PROVREQS.path("default", "pr1"), body={"metadata": {"finalizers": None}},
                       content_type="application/merge-patch+json")
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.PROVREQS.path("default", "pr1"))
    assert err.value.status == 404


async def test_delete_preconditions(http: KubeHTTP) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    with pytest.raises(ApiError) as err:
        await http.request("DELETE", b.NODES.path(name="n1"),
                           body={"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "other"}})
    assert err.value.status == 409 and "Precondition failed" in err.value.message


async def test_dry_run_changes_nothing(http: KubeHTTP) -> None:
    out = await http.request("POST", b.NODES.path(), body=b.node("n1"), query={"dryRun": "All"})
    assert out["metadata"]["name"] == "n1"
    listing = await http.request("GET", b.NODES.path())
    assert listing["items"] == []


async def test_list_pages_with_limit_and_continue(http: KubeHTTP) -> None:
    for i in range(5):
        await http.request("POST", b.NODES.path(), body=b.node(f"n{i}"))
    first = await http.request("GET", b.NODES.path(), query={"limit": 2})
    assert [n["metadata"]["name"] for n in first["items"]] == ["n0", "n1"]
    assert first["metadata"]["remainingItemCount"] == 3
    rest = await http.request("GET", b.NODES.path(), query={"limit": 10, "continue": first["metadata"]["continue"]})
    assert [n["metadata"]["name"] for n in rest["items"]] == ["n2", "n3", "n4"]
    assert "continue" not in rest["metadata"]


async def test_deletecollection_with_selector(http: KubeHTTP) -> None:
    for i, team in enumerate(["a", "a", "b"]):
        await http.request("POST", b.PODS.path("default"), body=b.pod(f"p{i}", labels={"team": team}))
    await http.request("DELETE", b.PODS.path("default"), query={"labelSelector": "team=a"})
    left = await http.request("GET", b.PODS.path("default"))
    assert [p["metadata"]["name"] for p in left["items"]] == ["p2"]


async def test_cluster_scoped_and_all_namespaces_lists(http: KubeHTTP) -> None:
    await http.request("POST", b.NAMESPACES.path(), body={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "team-a"}})
    await http.request("POST", b.PODS.path("default"), body=b.pod("p1"))
    await http.request("POST", b.PODS.path("team-a"), body=b.pod("p1"))
    everywhere = await http.request("GET", "/api/v1/pods")
    assert sorted(p["metadata"]["namespace"] for p in everywhere["items"]) == ["default", "team-a"]
    only_a = await http.request("GET", b.PODS.path("team-a"))
    assert [p["metadata"]["namespace"] for p in only_a["items"]] == ["team-a"]


async def test_pod_defaults_requests_from_limits(http: KubeHTTP) -> None:
    out = await http.request("POST", b.PODS.path("default"), body=b.pod("p1", containers=[
        {"name": "c", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "2"}}}]))
    c = out["spec"]["containers"][0]
    assert c["resources"]["requests"] == {"nvidia.com/gpu": "8", "cpu": "2"}
    assert out["spec"]["schedulerName"] == "default-scheduler"
    assert out["status"]["qosClass"] == "Burstable"


async def test_new_nodes_get_not_ready_taint(http: KubeHTTP) -> None:
    out = await http.request("POST", b.NODES.path(), body=b.node("n1"))
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in out["spec"]["taints"]


async def test_pod_binding_sets_node_once(http: KubeHTTP) -> None:
    await http.request("POST", b.PODS.path("default"), body=b.pod("p1"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    await http.request("POST", b.PODS.path("default", "p1", "binding"), body=binding)
    got = await http.request("GET", b.PODS.path("default", "p1"))
    assert got["spec"]["nodeName"] == "n1"
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in got["status"]["conditions"])
    with pytest.raises(ApiError) as err:
        await http.request("POST", b.PODS.path("default", "p1", "binding"), body=binding)
    assert err.value.status == 409


async def test_pod_spec_is_immutable_but_for_images(http: KubeHTTP) -> None:
    await http.request("POST", b.PODS.path("default"), body=b.pod("p1"))
    await http.request("PATCH", b.PODS.path("default", "p1"), content_type="application/strategic-merge-patch+json",
                       body={"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}})
    with pytest.raises(ApiError) as err:
        await http.request("PATCH", b.PODS.path("default", "p1"), content_type="application/merge-patch+json",
                           body={"spec": {"nodeName": "n1"}})
    assert err.value.status == 422 and "pod updates may not change fields" in err.value.message


async def test_protobuf_only_clients_get_406(http: KubeHTTP) -> None:
    resp = await http.api_client.rest_client.pool_manager.get(
        http.api_client.configuration.host + b.NODES.path(),
        headers={"Accept": "application/vnd.kubernetes.protobuf"})
    async with resp:
        body = await resp.json()
    assert resp.status == 406 and body["reason"] == "NotAcceptable"
