"""Example objects for ``gangscale sim apiserver --example``, written through the production client.

Three hosts of a TPU v5e ``2x4`` slice pool (two per slice), a PodTemplate and a ProvisioningRequest of
gangscale's atomic class, so that ``kubectl get`` has something real to show.
"""

from __future__ import annotations

from typing import Any

from gangscale.kube.client import make_http
from gangscale.kube.resources import NODES, PODTEMPLATES, PROVREQS

JSON = dict[str, Any]

NODE_STATUS = "status"


def _node(name: str) -> JSON:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "cloud.google.com/gke-nodepool": "tpu-v5e-2x4",
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
            "kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "23", "memory": "180Gi", "google.com/tpu": "4", "pods": "110"},
                   "capacity": {"cpu": "24", "memory": "192Gi", "google.com/tpu": "4", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "kubelet is posting ready status",
                                   "lastHeartbeatTime": None, "lastTransitionTime": None}]},
    }


async def create_example_objects(kubeconfig: str | Any) -> None:
    http = await make_http(str(kubeconfig), user_agent="gangscale-example")
    try:
        for i in range(2):
            await http.request("POST", NODES.path(), body=_node(f"gke-tpu-v5e-2x4-slice0-{i}"),
                               query={"fieldManager": "gangscale-example"})
        await http.request("POST", PODTEMPLATES.path("default"), query={"fieldManager": "gangscale-example"},
                           body={"apiVersion": "v1", "kind": "PodTemplate",
                                 "metadata": {"name": "train-worker"},
                                 "template": {"spec": {
                                     "nodeSelector": {"cloud.google.com/gke-tpu-topology": "2x4"},
                                     "tolerations": [{"key": "google.com/tpu", "operator": "Exists",
                                                      "effect": "NoSchedule"}],
                                     "containers": [{"name": "worker", "image": "python:3.11",
                                                     "resources": {"limits": {"google.com/tpu": "4"}}}]}}})
        await http.request("POST", PROVREQS.path("default"), query={"fieldManager": "gangscale-example"},
                           body={"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                                 "metadata": {"name": "train"},
                                 "spec": {"provisioningClassName": "atomic-scale-up.gangscale.io",
                                          "podSets": [{"podTemplateRef": {"name": "train-worker"},
                                                       "count": 4}]}})
    finally:
        await http.api_client.close()


async def describe_server(kubeconfig: str | Any) -> str:
    """What the server serves, read back through discovery with the production client."""
    http = await make_http(str(kubeconfig), user_agent="gangscale-describe")
    try:
        version = await http.request("GET", "/version")
        groups = await http.request("GET", "/apis")
        core = await http.request("GET", "/api/v1")
        count = len([r for r in core["resources"] if "/" not in r["name"]])
        names = []
        for g in groups["groups"]:
            gv = g["preferredVersion"]["groupVersion"]
            doc = await http.request("GET", f"/apis/{gv}")
            res = [r["name"] for r in doc["resources"] if "/" not in r["name"]]
            count += len(res)
            names.append(f"  {gv}: {', '.join(res)}")
        nodes = await http.request("GET", NODES.path())
        prs = await http.request("GET", PROVREQS.path())
        lines = [f"Kubernetes API {version['gitVersion']}: {count} resources in {len(groups['groups']) + 1} API groups",
                 f"  v1: {', '.join(r['name'] for r in core['resources'] if '/' not in r['name'])}", *names,
                 f"objects: {len(nodes['items'])} nodes, {len(prs['items'])} provisioningrequests"]
        return "\n".join(lines)
    finally:
        await http.api_client.close()
