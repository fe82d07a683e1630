"""The objects Kueue's provisioning admission check writes, as pure functions: the PodTemplates and the
ProvisioningRequest it creates for a Workload, and the podSetUpdates a Ready check carries.

Reproduced (Kueue ``provisioning/controller.go`` ``createPodTemplate``, ``syncOwnedProvisionRequest``,
``podSetUpdates``; ``provisioning.go`` ``passProvReqParams``, ``provReqSyncedWithConfig``; ``pkg/podset``):

- PodTemplate ``ppt-<request>-<podSet>``: label ``kueue.x-k8s.io/managed: "true"``, a controller owner reference
  to the Workload (moved to the request once it exists), and the Workload podSet's template merged with its
  assignment: each assigned ResourceFlavor's ``nodeLabels`` join ``nodeSelector`` (a key the template already
  sets to another value is an error, ``invalid admission check PodSetUpdate: conflict for nodeSelector: ...``),
  its ``tolerations`` are appended unless already present; then every (init) container's limits fill in its
  missing requests. As on Kueue's main branch, the template is first cleaned of stale
  ``autoscaling.x-k8s.io/consume-provisioning-request`` / ``provisioning-class-name`` annotations and of
  scheduling gates (the cluster-autoscaler ignores gated pods).
- ProvisioningRequest: label as above, controller owner reference (``blockOwnerDeletion``) to the Workload,
  ``provisioningClassName`` from the config, ``parameters`` = the config's parameters overlaid with the
  Workload's ``provreq.kueue.x-k8s.io/<key>`` annotations (always a map), and one podSet per merged podSet.
- podSetUpdates on Ready: per request podSet, the Workload podSet it is named after gets both consume
  annotations and, when the config has ``podSetUpdates``, a ``nodeSelector`` read from
  ``status.provisioningClassDetails`` (missing details are skipped). podSets merged into another get none.

Simplified: flavors are applied in resource-name order (Kueue walks a Go map, so the order of tolerations from
several flavors is random there); Topology Aware Scheduling (its gate, label and annotation) is left out; the
Workload-slice annotations Kueue's main branch also strips are not carried.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gangscale.sim.kueue.prconfig import request_parameters
from gangscale.sim.kueue.prmerge import MergedPodSet, pod_sets
from gangscale.sim.kueue.prnames import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    MANAGED_LABEL,
    template_name,
)

JSON = dict[str, Any]
WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
REQUEST_API_VERSION = "autoscaling.x-k8s.io/v1"


class TemplateError(ValueError):
    """The PodTemplate cannot be built (a missing flavor, a nodeSelector conflict); the message is Kueue's."""


def controller_reference(owner: Mapping[str, Any], api_version: str, kind: str) -> JSON:
    meta = owner.get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "name": meta.get("name", ""), "uid": meta.get("uid", ""),
            "controller": True, "blockOwnerDeletion": True}


def _flavor_info(assignment: Mapping[str, Any], flavors: Mapping[str, JSON]) -> tuple[dict[str, str], list[JSON]]:
    """nodeSelector and tolerations from the assigned flavors (first flavor wins a shared label key)."""
    selector: dict[str, str] = {}
    tolerations: list[JSON] = []
    seen: set[str] = set()
    assigned = assignment.get("flavors") or {}
    for resource in sorted(assigned):
        name = str(assigned[resource])
        if name in seen:
            continue
        flavor = flavors.get(name)
        if flavor is None:
            raise TemplateError(f'resourceflavors.kueue.x-k8s.io "{name}" not found')
        spec = flavor.get("spec") or {}
        for key, value in (spec.get("nodeLabels") or {}).items():
            selector.setdefault(key, value)
        tolerations.extend(copy.deepcopy(spec.get("tolerations") or []))
        seen.add(name)
    return selector, tolerations


def _apply_assignment(template: JSON, assignment: Mapping[str, Any], flavors: Mapping[str, JSON]) -> None:
    selector, tolerations = _flavor_info(assignment, flavors)
    spec = template.setdefault("spec", {})
    current = dict(spec.get("nodeSelector") or {})
    for key in sorted(current):
        if key in selector and selector[key] != current[key]:
            raise TemplateError("invalid admission check PodSetUpdate: conflict for nodeSelector: conflict for "
                                f"key={key}, value1={current[key]}, value2={selector[key]}")
    if current or selector:
        spec["nodeSelector"] = {**selector, **current}
    existing = list(spec.get("tolerations") or [])
    for toleration in tolerations:
        if toleration not in existing:
            existing.append(toleration)
    if existing:
        spec["tolerations"] = existing


def _sanitize(template: JSON) -> None:
    meta = template.get("metadata") or {}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in (CONSUME_ANNOTATION, CLASS_ANNOTATION):
            annotations.pop(key, None)
    (template.get("spec") or {}).pop("schedulingGates", None)


def _limits_as_requests(template: JSON) -> None:
    spec = template.get("spec") or {}
    for container in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        resources = container.get("resources")
        if not isinstance(resources, dict) or not resources.get("limits"):
            continue
        resources["requests"] = {**resources["limits"], **(resources.get("requests") or {})}


def pod_template_body(workload: Mapping[str, Any], name: str, merged: MergedPodSet,
                      flavors: Mapping[str, JSON]) -> JSON:
    """The PodTemplate Kueue creates for ``merged`` (owned by the Workload until the request exists)."""
    template = copy.deepcopy(merged.pod_set.get("template") or {})
    _sanitize(template)
    _apply_assignment(template, merged.assignment, flavors)
    _limits_as_requests(template)
    meta = workload.get("metadata") or {}
    return {
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": meta.get("namespace", ""), "labels": {MANAGED_LABEL: "true"},
                     "ownerReferences": [controller_reference(workload, WORKLOAD_API_VERSION, "Workload")]},
        "template": template,
    }


def request_body(workload: Mapping[str, Any], name: str, prc_spec: Mapping[str, Any],
                 merged: list[MergedPodSet]) -> JSON:
    """The ProvisioningRequest Kueue creates (its PodTemplates must exist first)."""
    meta = workload.get("metadata") or {}
    return {
        "apiVersion": REQUEST_API_VERSION, "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": meta.get("namespace", ""), "labels": {MANAGED_LABEL: "true"},
                     "ownerReferences": [controller_reference(workload, WORKLOAD_API_VERSION, "Workload")]},
        "spec": {
            "provisioningClassName": prc_spec.get("provisioningClassName", ""),
            "parameters": request_parameters(prc_spec, workload),
            "podSets": [{"podTemplateRef": {"name": template_name(name, m.name)}, "count": m.count}
                        for m in merged],
        },
    }


def ready_pod_set_updates(workload: Mapping[str, Any], request: Mapping[str, Any],
                          prc_spec: Mapping[str, Any]) -> list[JSON]:
    """The podSetUpdates of a check that turns Ready on ``request``."""
    pr_name = (request.get("metadata") or {}).get("name", "")
    spec = request.get("spec") or {}
    details = (request.get("status") or {}).get("provisioningClassDetails") or {}
    by_template = {template_name(pr_name, ps.get("name", "main")): ps.get("name", "main")
                   for ps in pod_sets(workload)}
    wanted = prc_spec.get("podSetUpdates")
    updates: list[JSON] = []
    for ps in spec.get("podSets") or []:
        update: JSON = {
            "name": by_template.get((ps.get("podTemplateRef") or {}).get("name", ""), ""),
            "annotations": {CONSUME_ANNOTATION: pr_name, CLASS_ANNOTATION: spec.get("provisioningClassName", "")},
        }
        if wanted is not None:
            selector = {sel["key"]: str(details[sel["valueFromProvisioningClassDetail"]])
                        for sel in wanted.get("nodeSelector") or []
                        if sel.get("valueFromProvisioningClassDetail") in details}
            if selector:
                update["nodeSelector"] = selector
        updates.append(update)
    return updates
