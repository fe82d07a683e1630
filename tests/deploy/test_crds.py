"""The vendored upstream CRDs: unchanged (sha256 pinned), one CRD per file, and served by the embedded API server
as ``kubectl apply`` of them would leave a real one: the ProvisioningRequest CRD in ``deploy/crds`` (what a user
installs first) replaces the embedded compact schema and still takes the PRs gangscale serves and refuses what
upstream refuses."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangscale.kube.errors import ApiError
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import EmbeddedAPIServer
from tests import builders as b
from tests.deploy import manifests as m

SHA256 = {
    "autoscaling.x-k8s.io_provisioningrequests.yaml":
        "e76c84cba9188a45117445abe4ff24fb28f8d52cacf7a90ccf11e47915a95162",
    "kueue.x-k8s.io_admissionchecks.yaml": "2bf4003c0a3ea3d6ceab940c7a271ad211372dab59d2739acfa8b2bdb0724acb",
    "kueue.x-k8s.io_clusterqueues.yaml": "e0a5fc9b370c70f3d993d4f599865817338ecf94187b30b15b12ff33c579bd55",
    "kueue.x-k8s.io_localqueues.yaml": "dd10ef8d3578e7212fa52763549e7b6be0949793a5b924495fcd293330109fed",
    "kueue.x-k8s.io_provisioningrequestconfigs.yaml":
        "0399b2689d7468c64a1ef4e3c8bf9603c261a152f822b6698903b23f69e790dc",
    "kueue.x-k8s.io_resourceflavors.yaml": "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173",
    "kueue.x-k8s.io_workloadpriorityclasses.yaml":
        "0b755726aab05b8def9a53ee15b201eed3846bcffd1ff5528fed123f4ae03519",
    "kueue.x-k8s.io_workloads.yaml": "1970ff6fcc5dc1a29e3f290ed736032c5d4509c94efe2c642d64a244ad1b8aa5",
    "ray.io_rayclusters.yaml": "c44704442eef0c6721ad40c1d66782c8bd3fdab9d3344306a5820910a679baa1",
    "ray.io_rayjobs.yaml": "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5",
}
FILES = sorted([m.PROVREQ_CRD, *m.TEST_CRDS.glob("*.yaml")])


def _crd(path: Path) -> dict[str, Any]:
    (crd,) = m.load_documents(path)
    return dict(crd)


def test_every_vendored_crd_is_pinned_and_unchanged() -> None:
    assert {p.name for p in FILES} == set(SHA256)
    for path in FILES:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[path.name], f"{path} differs from upstream"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_file_is_one_crd_named_after_its_file(path: Path) -> None:
    crd = _crd(path)
    assert (crd["apiVersion"], crd["kind"]) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    assert path.name == f"{group}_{plural}.yaml" and crd["metadata"]["name"] == f"{plural}.{group}"


async def _apply(http: KubeHTTP, crd: dict[str, Any]) -> None:
    """Create the CRD, or replace the embedded one of the same name (what ``kubectl apply`` ends with)."""
    try:
        current = await http.request("GET", b.CRDS.path(name=crd["metadata"]["name"]))
    except ApiError as exc:
        assert exc.status == 404
        await http.request("POST", b.CRDS.path(), body=crd)
        return
    crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await http.request("PUT", b.CRDS.path(name=crd["metadata"]["name"]), body=crd)


async def test_the_provisioning_request_crd_takes_what_gangscale_serves_and_refuses_what_upstream_refuses(
        apiserver: EmbeddedAPIServer, http: KubeHTTP) -> None:
    crd = _crd(m.PROVREQ_CRD)
    stored = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
    assert stored == ["v1"] and {v["name"] for v in crd["spec"]["versions"] if v["served"]} == {"v1", "v1beta1"}
    await _apply(http, crd)
    served = await http.request("GET", "/apis/autoscaling.x-k8s.io/v1")
    assert "provisioningrequests" in {r["name"] for r in served["resources"]}
    created = await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("ok", count=4))
    assert created["spec"]["podSets"][0]["count"] == 4
    with pytest.raises(ApiError) as refused:
        await http.request("POST", b.PROVREQS.path("default"), body=b.provreq("zero", count=0))
    assert refused.value.status == 422 and "spec.podSets[0].count" in refused.value.message


@pytest.mark.parametrize("path", sorted(m.TEST_CRDS.glob("ray.io_*.yaml")), ids=lambda p: p.name)
async def test_the_kuberay_crds_are_served_by_the_embedded_server(apiserver: EmbeddedAPIServer, http: KubeHTTP,
                                                                  path: Path) -> None:
    crd = _crd(path)
    await _apply(http, crd)
    group, version = crd["spec"]["group"], next(v["name"] for v in crd["spec"]["versions"] if v["storage"])
    served = await http.request("GET", f"/apis/{group}/{version}")
    assert crd["spec"]["names"]["plural"] in {r["name"] for r in served["resources"]}


def test_the_readme_install_section_starts_from_the_vendored_crd() -> None:
    readme = (m.REPO_ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("## Install"):]
    assert f"kubectl apply --server-side -f deploy/crds/{m.PROVREQ_CRD.name}" in install.split("\n## ")[0]
    assert yaml.safe_load(m.PROVREQ_CRD.read_text())["spec"]["names"]["kind"] == "ProvisioningRequest"
