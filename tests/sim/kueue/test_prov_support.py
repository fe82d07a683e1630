"""Builders and API helpers for the provisioning admission check tests (no tests here).

The tests play the parts around the component: Kueue's core (quota reservation, ``status.admission``, the check
entries, evictions) and the provisioner (ProvisioningRequest conditions, applied on ``/status`` like a
cluster-autoscaler would).
"""

from __future__ import annotations

from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import (
    ADMISSIONCHECKS,
    EVENTS,
    PROVREQCONFIGS,
    PROVREQS,
    RESOURCEFLAVORS,
    WORKLOADS,
)
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.kueue.provisioning import ProvisioningCheck
from gangscale.sim.world import Timeline
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
NS = "default"
NOW = 1_760_000_000.0
KUEUE = "kueue.x-k8s.io/v1beta2"
APPLY = "application/apply-patch+yaml"
CORE_MANAGER = "kueue-admission"  # stands for the other Kueue controllers
PROVISIONER = "provisioner"


def flavor(name: str, labels: dict[str, str] | None = None, tolerations: list[JSON] | None = None) -> JSON:
    spec: JSON = {}
    if labels:
        spec["nodeLabels"] = labels
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def config(name: str = "prc", cls: str = "class1", params: dict[str, str] | None = None, **spec: Any) -> JSON:
    body: JSON = {"provisioningClassName": cls, **spec}
    if params is not None:
        body["parameters"] = params
    return {"apiVersion": KUEUE, "kind": "ProvisioningRequestConfig", "metadata": {"name": name}, "spec": body}


def admission_check(name: str = "check1", prc: str | None = "prc", *,
                    parameters: JSON | None = None, controller: str = "kueue.x-k8s.io/provisioning-request") -> JSON:
    spec: JSON = {"controllerName": controller}
    if parameters is not None:
        spec["parameters"] = parameters
    elif prc is not None:
        spec["parameters"] = {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": prc}
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": spec}


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
              name: str = "main") -> JSON:
    resources: JSON = {}
    if requests:
        resources["requests"] = requests
    # An extended resource cannot be overcommitted: a real API server wants it in limits too.
    extended = {k: v for k, v in (requests or {}).items() if "/" in k}
    if limits or extended:
        resources["limits"] = {**extended, **(limits or {})}
    return {"name": name, "image": "busybox:1.36", "resources": resources}


def pod_set(name: str, count: int, *containers: JSON, labels: dict[str, str] | None = None,
            **spec: Any) -> JSON:
    template: JSON = {"spec": {"containers": list(containers) or [container({"cpu": "1"})], **spec}}
    if labels:
        template["metadata"] = {"labels": labels}
    return {"name": name, "count": count, "template": template}


def workload(name: str = "wl", pod_sets: list[JSON] | None = None, annotations: dict[str, str] | None = None,
             **spec: Any) -> JSON:
    meta: JSON = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    sets = pod_sets if pod_sets is not None else [pod_set("ps1", 4), pod_set("ps2", 3)]
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta,
            "spec": {"queueName": "lq", "podSets": sets, **spec}}


def condition(ctype: str, status: str = "True", reason: str = "Reason", message: str = "",
              at: float = NOW) -> JSON:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(at)}


def check_entry(name: str = "check1", state: str = "Pending", message: str = "", at: float = NOW,
                **extra: Any) -> JSON:
    return {"name": name, "state": state, "message": message, "lastTransitionTime": rfc3339(at), **extra}


class Kube:
    """The test's own client: plain verbs over the same HTTP the component uses."""

    def __init__(self, http: KubeHTTP) -> None:
        self.http = http
        #: What Kueue's core last applied per Workload: an apply states a manager's whole intent, so each
        #: write re-sends the fields it does not change.
        self.core: dict[str, JSON] = {}

    async def create(self, resource: Resource, body: JSON) -> JSON:
        ns = body["metadata"].get("namespace")
        return await self.http.request("POST", resource.path(ns), body=body)

    async def get(self, resource: Resource, name: str, ns: str | None = NS) -> JSON | None:
        try:
            return await self.http.request("GET", resource.path(ns if resource.namespaced else None, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def names(self, resource: Resource, ns: str = NS) -> list[str]:
        listed = await self.http.request("GET", resource.path(ns))
        return sorted(i["metadata"]["name"] for i in listed.get("items") or [])

    async def delete(self, resource: Resource, name: str, ns: str | None = NS) -> None:
        await self.http.request("DELETE", resource.path(ns if resource.namespaced else None, name))

    async def merge(self, resource: Resource, name: str, patch: JSON, ns: str | None = NS) -> JSON:
        return await self.http.request("PATCH", resource.path(ns if resource.namespaced else None, name),
                                       body=patch, content_type="application/merge-patch+json")

    async def apply_status(self, resource: Resource, name: str, kind: str, status: JSON, manager: str,
                           ns: str = NS) -> JSON:
        body = {"apiVersion": resource.api_version, "kind": kind, "metadata": {"name": name, "namespace": ns},
                "status": status}
        return await self.http.request("PATCH", resource.path(ns, name, "status"), body=body,
                                       query={"fieldManager": manager, "force": "true"}, content_type=APPLY)

    async def workload_status(self, name: str = "wl", **status: Any) -> JSON:
        """Kueue core's part of the Workload status. ``conditions`` and ``admission`` replace what the core
        applied before and are re-sent otherwise; ``admissionChecks`` are sent only when given (re-sending old
        entries would take the check state back from the component)."""
        intent = self.core.setdefault(name, {})
        intent.update({k: v for k, v in status.items() if k != "admissionChecks"})
        body = {**intent, **({"admissionChecks": status["admissionChecks"]} if "admissionChecks" in status else {})}
        return await self.apply_status(WORKLOADS, name, "Workload", body, CORE_MANAGER)

    async def provisioner(self, pr: str, *conditions: JSON, details: dict[str, str] | None = None) -> JSON:
        """The provisioner's part: conditions (and class details) on a ProvisioningRequest."""
        status: JSON = {"conditions": list(conditions)}
        if details is not None:
            status["provisioningClassDetails"] = details
        return await self.apply_status(PROVREQS, pr, "ProvisioningRequest", status, PROVISIONER)

    async def check(self, name: str = "check1", wl: str = "wl") -> JSON:
        obj = await self.get(WORKLOADS, wl)
        assert obj is not None
        return next(e for e in obj["status"]["admissionChecks"] if e["name"] == name)

    async def events(self, reason: str) -> list[str]:
        listed = await self.http.request("GET", EVENTS.path(NS))
        return [e["message"] for e in listed.get("items") or [] if e.get("reason") == reason]


def assignment(name: str, count: int | None = None, flavor_name: str = "flv1") -> JSON:
    out: JSON = {"name": name, "flavors": {"cpu": flavor_name}}
    if count is not None:
        out["count"] = count
    return out


async def reserve(kube: Kube, wl: str = "wl", assignments: list[JSON] | None = None,
                  checks: list[JSON] | None = None, conditions: list[JSON] | None = None) -> JSON:
    """Quota reserved, with the given podSet assignments (default: ps1 and ps2 on flv1) and check entries."""
    return await kube.workload_status(
        wl,
        conditions=[condition("QuotaReserved", reason="QuotaReserved"), *(conditions or [])],
        admission={"clusterQueue": "cq",
                   "podSetAssignments": assignments or [assignment("ps1", 4), assignment("ps2", 3)]},
        admissionChecks=checks if checks is not None else [check_entry()],
    )


async def setup(kube: Kube, *, wl: JSON | None = None, prc: JSON | None = None,
                flavors: list[JSON] | None = None) -> None:
    """The usual objects: flavor flv1 (label f1l1=v1, one toleration), config prc, check check1, Workload wl."""
    for f in flavors if flavors is not None else [flavor("flv1", {"f1l1": "v1"}, [TOLERATION])]:
        await kube.create(RESOURCEFLAVORS, f)
    await kube.create(PROVREQCONFIGS, prc or config(params={"p1": "v1"}))
    await kube.create(ADMISSIONCHECKS, admission_check())
    await kube.create(WORKLOADS, wl or workload())


def component(http: KubeHTTP, **kw: Any) -> tuple[ProvisioningCheck, Timeline]:
    timeline = Timeline(start=NOW)
    return ProvisioningCheck(http, timeline, **kw), timeline


TOLERATION: JSON = {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
