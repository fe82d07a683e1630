"""Builders for RayClusters and their worker pods, shaped as KubeRay and the Ray autoscaler leave them."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def group(name: str, *, replicas: int | None = 0, min_replicas: int | None = 0, max_replicas: int | None = 32,
          hosts: int | None = None, limits: dict[str, str] | None = None, requests: dict[str, str] | None = None,
          node_selector: dict[str, str] | None = None, workers_to_delete: list[str] | None = None,
          suspend: bool = False, **extra: Any) -> JSON:
    resources: JSON = {}
    if limits:
        resources["limits"] = dict(limits)
    if requests:
        resources["requests"] = dict(requests)
    spec: JSON = {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.60.0", "resources": resources}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    out: JSON = {"groupName": name, "rayStartParams": {}, "template": {"spec": spec}, **extra}
    for key, value in (("replicas", replicas), ("minReplicas", min_replicas), ("maxReplicas", max_replicas),
                       ("numOfHosts", hosts)):
        if value is not None:
            out[key] = value
    if workers_to_delete is not None:
        out["scaleStrategy"] = {"workersToDelete": list(workers_to_delete)}
    if suspend:
        out["suspend"] = True
    return out


def raycluster(name: str, groups: list[JSON], *, namespace: str = "default", autoscaling: bool = True,
               labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
               uid: str | None = None, suspend: bool = False, **spec_extra: Any) -> JSON:
    meta: JSON = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if uid:
        meta["uid"] = uid
    spec: JSON = {"rayVersion": "2.60.0", "enableInTreeAutoscaling": autoscaling,
                  "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                      {"name": "ray-head", "image": "rayproject/ray:2.60.0",
                       "resources": {"requests": {"cpu": "1"}}}]}}},
                  "workerGroupSpecs": groups, **spec_extra}
    if suspend:
        spec["suspend"] = True
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": spec}


def worker(cluster: str, group_name: str, name: str, *, node: str | None = None, namespace: str = "default",
           replica: str | None = None, deleting: bool = False, phase: str | None = None,
           limits: dict[str, str] | None = None) -> JSON:
    labels = {"ray.io/cluster": cluster, "ray.io/group": group_name, "ray.io/node-type": "worker",
              "ray.io/is-ray-node": "yes"}
    if replica:
        labels["ray.io/worker-group-replica-name"] = replica
    meta: JSON = {"name": name, "namespace": namespace, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T00:00:00Z"
    container: JSON = {"name": "ray-worker", "image": "rayproject/ray:2.60.0"}
    if limits:
        container["resources"] = {"limits": dict(limits)}
    spec: JSON = {"containers": [container]}
    if node:
        spec["nodeName"] = node
    out: JSON = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase:
        out["status"] = {"phase": phase}
    return out
