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
from gangscale.sim.informers import Reader, Where
from gangscale.sim.kueue.checkstate import Condition
from gangscale.sim.kueue.events import KueueEventRecorder
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
    events: KueueEventRecorder
    cleanup_on_eviction: bool = True
    #: FailedCreate events already sent, (Workload uid, message): a cache that only stops repeats.
    reported: set[tuple[str, str]] = field(default_factory=set)


async def _items(reader: Reader, resource: Resource, kind: str, where: Where | None = None) -> list[JSON]:
    # List items need not carry their type; events about them do.
    return [{"apiVersion": resource.api_version, "kind": kind, **item} for item in await reader.items(resource, where)]


def _managed(template: JSON) -> bool:
    return ((template.get("metadata") or {}).get("labels") or {}).get(MANAGED_LABEL) == "true"


async def load_snapshot(reader: Reader) -> Snapshot:
    snap = Snapshot()
    snap.checks = {i["metadata"]["name"]: i for i in await _items(reader, ADMISSIONCHECKS, "AdmissionCheck")}
    snap.configs = {i["metadata"]["name"]: i
                    for i in await _items(reader, PROVREQCONFIGS, "ProvisioningRequestConfig")}
    snap.flavors = {i["metadata"]["name"]: i for i in await _items(reader, RESOURCEFLAVORS, "ResourceFlavor")}
    snap.workloads = await _items(reader, WORKLOADS, "Workload")
    for pr in await _items(reader, PROVREQS, "ProvisioningRequest"):
        snap.requests.setdefault(pr["metadata"].get("namespace", ""), []).append(pr)
    for pt in await _items(reader, PODTEMPLATES, "PodTemplate", _managed):
        snap.templates[(pt["metadata"].get("namespace", ""), pt["metadata"]["name"])] = pt
    return snap


def condition_true(obj: Mapping[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def request_conditions(request: Mapping[str, Any]) -> dict[str, Condition]:
    return {str(c.get("type")): Condition(str(c.get("status", "")), str(c.get("message") or ""))
            for c in (request.get("status") or {}).get("conditions") or []}
