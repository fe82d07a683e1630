"""Discovery, CRDs, selectors over HTTP, and the controller-manager jobs (GC, namespaces, node taints)."""

from __future__ import annotations

import pytest

from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests import builders as b
from tests.conftest import wait_for

WIDGETS = Resource("example.com", "v1", "widgets")


def widget_crd() -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {
                                       "size": {"type": "integer", "minimum": 1}}},
                                   "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
    }


async def test_discovery_documents(http: KubeHTTP) -> None:
    version = await http.request("GET", "/version")
    assert version["major"] == "1"
    groups = {g["name"]: g for g in (await http.request("GET", "/apis"))["groups"]}
    for g in ("autoscaling.x-k8s.io", "kueue.x-k8s.io", "ray.io", "coordination.k8s.io", "events.k8s.io",
              "apiextensions.k8s.io"):
        assert g in groups
    assert groups["kueue.x-k8s.io"]["preferredVersion"]["version"] == "v1beta2"
    assert groups["autoscaling.x-k8s.io"]["preferredVersion"]["version"] == "v1"
    pr = await http.request("GET", "/apis/autoscaling.x-k8s.io/v1")
    names = {r["name"]: r for r in pr["resources"]}
    assert names["provisioningrequests"]["namespaced"] is True
    assert "provisioningrequests/status" in names
    kueue = {r["name"]: r for r in (await http.request("GET", "/apis/kueue.x-k8s.io/v1beta2"))["resources"]}
    assert kueue["clusterqueues"]["namespaced"] is False and kueue["workloads"]["namespaced"] is True
    core = {r["name"]: r for r in (await http.request("GET", "/api/v1"))["resources"]}
    assert core["nodes"]["namespaced"] is False and core["pods"]["namespaced"] is True


async def test_openapi_v3_has_field_validation_for_patch(http: KubeHTTP) -> None:
    index = await http.request("GET", "/openapi/v3")
    url = index["paths"]["apis/autoscaling.x-k8s.io/v1"]["serverRelativeURL"]
    doc = await http.request("GET", url.split("?")[0])
    patch = doc["paths"]["/apis/autoscaling.x-k8s.io/v1/namespaces/{namespace}/provisioningrequests/{name}"]["patch"]
    assert {"name": "fieldValidation", "in": "query"}.items() <= patch["parameters"][2].items()


async def test_applying_a_crd_serves_a_new_resource(http: KubeHTTP) -> None:
    crd = await http.request("POST", b.CRDS.path(), body=widget_crd())
    assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
    out = await http.request("POST", WIDGETS.path("default"), body={
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 2}})
    assert out["metadata"]["generation"] == 1
    with pytest.raises(ApiError) as err:
        await http.request("POST", WIDGETS.path("default"), body={
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}, "spec": {"size": 0}})
    assert err.value.status == 422
    await http.request("DELETE", b.CRDS.path(name="widgets.example.com"))
    with pytest.raises(ApiError) as err:
        await http.request("GET", WIDGETS.path("default"))
    assert err.value.status == 404


async def test_crd_name_must_match_names_and_group(http: KubeHTTP) -> None:
    crd = widget_crd()
    crd["metadata"] = {"name": "wrong.example.com"}
    with pytest.raises(ApiError) as err:
        await http.request("POST", b.CRDS.path(), body=crd)
    assert err.value.status == 422


@pytest.mark.parametrize(("selector", "expected"), [
    ("team=a", ["p0", "p1"]),
    ("team==a", ["p0", "p1"]),
    ("team!=a", ["p2", "p3"]),
    ("team in (a,b)", ["p0", "p1", "p2"]),
    ("team notin (a,b)", ["p3"]),
    ("tier", ["p1"]),
    ("!tier", ["p0", "p2", "p3"]),
    ("team=a,tier=gpu", ["p1"]),
], ids=["eq", "eqeq", "neq", "in", "notin", "exists", "not-exists", "and"])
async def test_label_selectors(http: KubeHTTP, selector: str, expected: list[str]) -> None:
    labels = [{"team": "a"}, {"team": "a", "tier": "gpu"}, {"team": "b"}, {}]
    for i, lab in enumerate(labels):
        await http.request("POST", b.PODS.path("default"), body=b.pod(f"p{i}", labels=lab))
    out = await http.request("GET", b.PODS.path("default"), query={"labelSelector": selector})
    assert [p["metadata"]["name"] for p in out["items"]] == expected


@pytest.mark.parametrize(("selector", "expected"), [
    ("metadata.name=p1", ["p1"]),
    ("metadata.namespace=default", ["p0", "p1"]),
    ("spec.nodeName=n1", ["p1"]),
    ("spec.nodeName=", ["p0"]),
    ("status.phase=Pending,metadata.name!=p0", ["p1"]),
], ids=["name", "namespace", "nodeName", "unbound", "phase-and-not-name"])
async def test_field_selectors(http: KubeHTTP, selector: str, expected: list[str]) -> None:
    await http.request("POST", b.PODS.path("default"), body=b.pod("p0"))
    await http.request("POST", b.PODS.path("default"), body=b.pod("p1", node="n1"))
    out = await http.request("GET", b.PODS.path("default"), query={"fieldSelector": selector})
    assert [p["metadata"]["name"] for p in out["items"]] == expected


async def test_unsupported_field_selector_is_400(http: KubeHTTP) -> None:
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.PODS.path("default"), query={"fieldSelector": "spec.bogus=x"})
    assert err.value.status == 400


async def test_garbage_collection_of_dependents(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    owner = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr1"))
    ref = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "name": "pr1",
           "uid": owner["metadata"]["uid"], "controller": True}
    tmpl = b.pod_template("dep")
    tmpl["metadata"]["ownerReferences"] = [ref]
    await http.request("POST", b.PODTEMPLATES.path("default"), body=tmpl)
    await http.request("DELETE", b.PROVREQS.path("default", "pr1"))
    await apiserver.controllers.settle()
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.PODTEMPLATES.path("default", "dep"))
    assert err.value.status == 404


@pytest.mark.parametrize("change, kept", [
    ("none", set()),
    ("reference-removed", {"dep"}),
    ("reference-added", {"dep"}),
], ids=["owned-from-creation", "reference-removed-by-a-patch", "reference-added-by-a-patch"])
async def test_the_garbage_collector_follows_owner_references_as_they_change(
        http: KubeHTTP, apiserver: EmbeddedAPIServer, change: str, kept: set[str]) -> None:
    """The collector finds dependents from its graph, kept as objects change: a reference removed by an update no
    longer makes the object a dependent; one added does (here, of a live second owner, so it loses only the
    dangling reference)."""
    owners = [await http.request("POST", b.PROVREQS.path("default"), body=b.provreq(name)) for name in ("pr1", "pr2")]
    refs = [{"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "name": o["metadata"]["name"],
             "uid": o["metadata"]["uid"]} for o in owners]
    tmpl = b.pod_template("dep")
    tmpl["metadata"]["ownerReferences"] = [refs[0]] if change != "reference-added" else [refs[1]]
    await http.request("POST", b.PODTEMPLATES.path("default"), body=tmpl)
    if change != "none":
        patched = [] if change == "reference-removed" else [refs[1], refs[0]]
        await http.request("PATCH", b.PODTEMPLATES.path("default", "dep"), body={
            "metadata": {"ownerReferences": patched}}, content_type="application/merge-patch+json")
    await http.request("DELETE", b.PROVREQS.path("default", "pr1"))
    await apiserver.controllers.settle()
    left = await http.request("GET", b.PODTEMPLATES.path("default"))
    assert {t["metadata"]["name"] for t in left["items"]} == kept
    if change == "reference-added":
        assert [r["name"] for r in left["items"][0]["metadata"]["ownerReferences"]] == ["pr2"]


async def test_orphan_propagation_keeps_dependents(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    owner = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr1"))
    tmpl = b.pod_template("dep")
    tmpl["metadata"]["ownerReferences"] = [{"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                                            "name": "pr1", "uid": owner["metadata"]["uid"]}]
    await http.request("POST", b.PODTEMPLATES.path("default"), body=tmpl)
    await http.request("DELETE", b.PROVREQS.path("default", "pr1"), query={"propagationPolicy": "Orphan"})
    await apiserver.controllers.settle()
    dep = await http.request("GET", b.PODTEMPLATES.path("default", "dep"))
    assert "ownerReferences" not in dep["metadata"]
    with pytest.raises(ApiError):
        await http.request("GET", b.PROVREQS.path("default", "pr1"))


async def test_namespace_deletion_empties_it(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    await http.request("POST", b.NAMESPACES.path(), body={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "tmp"}})
    await http.request("POST", b.PODS.path("tmp"), body=b.pod("p"))
    ns = await http.request("DELETE", b.NAMESPACES.path(name="tmp"))
    assert ns["status"]["phase"] == "Terminating"
    with pytest.raises(ApiError) as err:
        await http.request("POST", b.PODS.path("tmp"), body=b.pod("q"))
    assert err.value.status in (403, 404)
    await apiserver.controllers.settle()
    with pytest.raises(ApiError) as err:
        await http.request("GET", b.NAMESPACES.path(name="tmp"))
    assert err.value.status == 404


async def test_ready_node_loses_not_ready_taint(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    await http.request("POST", b.NODES.path(), body=b.node("n1"))
    await http.request("PATCH", b.NODES.path(name="n1", sub="status"), content_type="application/merge-patch+json",
                       body={"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                        "message": "ok"}]}})
    await apiserver.controllers.settle()

    async def untainted() -> bool:
        n = await http.request("GET", b.NODES.path(name="n1"))
        return not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints") or [])

    await wait_for(untainted)


async def test_foreground_deletion_removes_dependents_first(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    owner = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("pr1"))
    tmpl = b.pod_template("dep")
    tmpl["metadata"]["ownerReferences"] = [{"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                                            "name": "pr1", "uid": owner["metadata"]["uid"],
                                            "blockOwnerDeletion": True}]
    await http.request("POST", b.PODTEMPLATES.path("default"), body=tmpl)
    held = await http.request("DELETE", b.PROVREQS.path("default", "pr1"),
                              query={"propagationPolicy": "Foreground"})
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert held["metadata"]["deletionTimestamp"]
    await apiserver.controllers.settle()
    for path in (b.PODTEMPLATES.path("default", "dep"), b.PROVREQS.path("default", "pr1")):
        with pytest.raises(ApiError) as err:
            await http.request("GET", path)
        assert err.value.status == 404
