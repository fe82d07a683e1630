"""Builders for test objects (Kueue's ``MakeWorkload(...).Obj()`` habit, as plain functions)."""

from __future__ import annotations

from typing import Any

from gangscale.kube.resources import (  # noqa: F401  (re-exported for the tests)
    CLUSTERQUEUES,
    CRDS,
    EVENTS,
    EVENTS_V1,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    PODTEMPLATES,
    PROVREQS,
    PROVREQS_BETA,
    RAYCLUSTERS,
    WORKLOADS,
)

JSON = dict[str, Any]


def meta(name: str, *, namespace: str | None = None, labels: dict[str, str] | None = None,
         **extra: Any) -> JSON:
    out: JSON = {"name": name, **extra}
    if namespace is not None:
        out["namespace"] = namespace
    if labels:
        out["labels"] = labels
    return out


def pod(name: str, *, labels: dict[str, str] | None = None, node: str | None = None,
        containers: list[JSON] | None = None, **meta_extra: Any) -> JSON:
    spec: JSON = {"containers": containers or [{"name": "main", "image": "busybox:1.36"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, labels=labels, **meta_extra), "spec": spec}


def node(name: str, *, labels: dict[str, str] | None = None, ready: str | None = None,
         allocatable: dict[str, str] | None = None) -> JSON:
    obj: JSON = {"apiVersion": "v1", "kind": "Node", "metadata": meta(name, labels=labels), "spec": {}}
    status: JSON = {}
    if allocatable:
        status["allocatable"] = allocatable
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": ""}]
    if status:
        obj["status"] = status
    return obj


def requirements(requests: dict[str, str] | None) -> JSON:
    """Container resources a real cluster accepts for ``requests``: an extended resource (a name with a ``/``)
    cannot be overcommitted, so the API server wants it in ``limits`` too (422 "Limit must be set for non
    overcommitable resources" otherwise)."""
    req = dict(requests or {})
    extended = {k: v for k, v in req.items() if "/" in k}
    return {"requests": req, "limits": extended} if extended else {"requests": req}


def pod_template(name: str, *, requests: dict[str, str] | None = None,
                 limits: dict[str, str] | None = None) -> JSON:
    resources: JSON = {}
    if requests:
        resources = requirements(requests)
    if limits:
        resources["limits"] = {**resources.get("limits", {}), **limits}
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta(name),
            "template": {"spec": {"containers": [{"name": "w", "image": "trainer:v1", "resources": resources}]}}}


def provreq(name: str, *, template: str = "tmpl", count: int = 1,
            cls: str = "atomic-scale-up.gangscale.io", parameters: dict[str, str] | None = None,
            api_version: str = "autoscaling.x-k8s.io/v1") -> JSON:
    spec: JSON = {"provisioningClassName": cls, "podSets": [{"podTemplateRef": {"name": template}, "count": count}]}
    if parameters is not None:
        spec["parameters"] = parameters
    return {"apiVersion": api_version, "kind": "ProvisioningRequest", "metadata": meta(name), "spec": spec}


def condition(ctype: str, status: str = "True", reason: str = "Reason", message: str = "",
              ltt: str = "2026-11-21T00:00:00Z", **extra: Any) -> JSON:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": ltt, **extra}


def kubeconfig_yaml(server: str) -> str:
    """A kubeconfig with one cluster at ``server`` and a bearer token, for tests that point gangscale elsewhere
    than the embedded API server (a stand-in discovery server, a closed port)."""
    return f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
users: [{{name: u, user: {{token: t}}}}]
current-context: c
"""
