"""What one sync of the emulated provisioning admission check works on: the objects it listed
(:class:`Snapshot`, :func:`load_snapshot`), the component's parts a Workload reconcile uses (:class:`Env`), and
small readers of those objects."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangscale.kube.resources import (
    ADMISSIONCHECKS,
    PODTEMPLATES,
    PROVREQCONFIGS,
    PROVREQS,
    RESOURCEFLAVORS,
    WORKLOADS,
)
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.kube.writes import EventRecorder
from gangscale.sim.kueue.checkstate import Condition
from gangscale.sim.kueue.prnames import MANAGED_LABEL
from gangscale.sim.world import Timeline

JSON = dict[str, Any]
log = logging.getLogger(__name__)


@dataclass
class Snapshot:
    """What one sync read: AdmissionChecks, configs and flavors by name, Workloads, ProvisioningRequests by
    namespace, Kueue-managed PodTemplates by (namespace, name)."""

    checks: dict[str, JSON] = field(default_factory=dict)
    configs: dict[str, JSON] = field(default_factory=dict)
    flavors: dict[str, JSON] = field(default_factory=dict)
    workloads: list[JSON] = field(default_factory=list)
    requests: dict[str, list[JSON]] = field(default_factory=dict)
    templates: dict[tuple[str, str], JSON] = field(default_factory=dict)


@dataclass
class Env:
    """The component's parts a Workload reconcile uses."""

    http: KubeHTTP
    timeline: Timeline
    events: EventRecorder
    cleanup_on_eviction: bool = True
    #: FailedCreate events already sent, (Workload uid, message): a cache that only stops repeats.
    reported: set[tuple[str, str]] = field(default_factory=set)


async def _items(http: KubeHTTP, resource: Resource, kind: str, query: dict[str, str] | None = None) -> list[JSON]:
    listed = await http.request("GET", resource.path(), query=query)
    items = []
    for item in listed.get("items") or []:
        # List items need not carry their type; events about them do.
        items.append({"apiVersion": resource.api_version, "kind": kind, **item})
    return items


async def load_snapshot(http: KubeHTTP) -> Snapshot:
    snap = Snapshot()
    snap.checks = {i["metadata"]["name"]: i for i in await _items(http, ADMISSIONCHECKS, "AdmissionCheck")}
    snap.configs = {i["metadata"]["name"]: i for i in await _items(http, PROVREQCONFIGS, "ProvisioningRequestConfig")}
    snap.flavors = {i["metadata"]["name"]: i for i in await _items(http, RESOURCEFLAVORS, "ResourceFlavor")}
    snap.workloads = await _items(http, WORKLOADS, "Workload")
    for pr in await _items(http, PROVREQS, "ProvisioningRequest"):
        snap.requests.setdefault(pr["metadata"].get("namespace", ""), []).append(pr)
    for pt in await _items(http, PODTEMPLATES, "PodTemplate", {"labelSelector": f"{MANAGED_LABEL}=true"}):
        snap.templates[(pt["metadata"].get("namespace", ""), pt["metadata"]["name"])] = pt
    return snap


def condition_true(obj: Mapping[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def request_conditions(request: Mapping[str, Any]) -> dict[str, Condition]:
    return {str(c.get("type")): Condition(str(c.get("status", "")), str(c.get("message") or ""))
            for c in (request.get("status") or {}).get("conditions") or []}
