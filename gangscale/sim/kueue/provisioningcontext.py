"""What one sync of the emulated provisioning admission check works on: the objects it listed
(:class:`Snapshot`, :func:`load_snapshot`), the component's parts a Workload reconcile uses (:class:`Env`), and
small readers of those objects."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangscale.clock import rfc3339
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import (
    ADMISSIONCHECKS,
    EVENTS,
    PODTEMPLATES,
    PROVREQCONFIGS,
    PROVREQS,
    RESOURCEFLAVORS,
    WORKLOADS,
)
from gangscale.kube.transport import KubeHTTP, Resource
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


class EventLog:
    """core/v1 Events about Workloads. The server names each one (``generateName``): several emulators record
    events on the same Workload at the same simulated instant, and counter-based names from separate recorders
    (:class:`gangscale.kube.writes.EventRecorder`) collide there. A failed event write is logged and dropped,
    never raised."""

    def __init__(self, http: KubeHTTP, component: str) -> None:
        self.http = http
        self.component = component

    async def record(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str, now: float) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        stamp = rfc3339(now)
        body: JSON = {
            "apiVersion": "v1", "kind": "Event",
            # ``<object>.prov-<random>``: a generateName must itself be a valid name once its final dash is masked.
            "metadata": {"generateName": f"{str(meta.get('name') or 'object')[:200].rstrip('-.')}.prov-",
                         "namespace": namespace},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta.get("name"), "namespace": meta.get("namespace"),
                               "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
            "type": event_type, "reason": reason, "message": message[:1024],
            "source": {"component": self.component}, "reportingComponent": self.component,
            "reportingInstance": self.component, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            await self.http.request("POST", EVENTS.path(namespace), body=body)
        except ApiError as exc:
            log.warning("could not record event %s on %s/%s: %s", reason, namespace, meta.get("name"), exc)


@dataclass
class Env:
    """The component's parts a Workload reconcile uses."""

    http: KubeHTTP
    timeline: Timeline
    events: EventLog
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
