"""The writes gangscale makes to the API: ProvisioningRequest status by server-side apply, Events, deletes.

Status goes through the ``/status`` subresource as an apply patch under field manager ``gangscale`` with
``force=true`` (the cluster-autoscaler's best-effort-atomic class does the same with its own manager). The
patch carries only the fields gangscale owns, so Kueue's or anybody else's fields are untouched; a condition
type gangscale owned and now omits is removed, which is why every apply sends the complete set.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from typing import Any

from gangscale.kube.errors import ApiError
from gangscale.kube.eventcache import Create, EventCorrelator, Patch
from gangscale.kube.resources import EVENTS, PROVREQS
from gangscale.kube.transport import KubeHTTP
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
FIELD_MANAGER = "gangscale"
APPLY = "application/apply-patch+yaml"
STRATEGIC = "application/strategic-merge-patch+json"
log = logging.getLogger(__name__)


async def apply_provreq_status(http: KubeHTTP, namespace: str, name: str, status: JSON, *,
                               uid: str | None = None, resource_version: str | None = None) -> JSON:
    """Apply ``status`` to the PR. ``resource_version`` makes the write fail (409 Conflict) unless the PR is still
    the object of that version: the guard against writing an old request's status onto a new one created under its
    name (Kueue deletes a request on eviction and creates the next attempt's under the same name at once). The
    ``uid`` is sent too but guards nothing on ``/status``: kube-apiserver's status strategy for custom resources
    copies the stored metadata over the new object's, after checking only that the resourceVersions match
    (``customresource`` ``statusStrategy.PrepareForUpdate``)."""
    metadata: JSON = {"name": name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    if resource_version:
        metadata["resourceVersion"] = resource_version
    body = {"apiVersion": PROVREQS.api_version, "kind": "ProvisioningRequest", "metadata": metadata,
            "status": status}
    return await http.request("PATCH", PROVREQS.path(namespace, name, "status"),
                              query={"fieldManager": FIELD_MANAGER, "force": True}, body=body, content_type=APPLY)


async def delete_provreq(http: KubeHTTP, namespace: str, name: str, uid: str) -> None:
    """Delete the PR if it is still the same object (uid precondition); gone already is fine."""
    try:
        await http.request("DELETE", PROVREQS.path(namespace, name), body={
            "apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}})
    except ApiError as exc:
        if not exc.not_found and not exc.conflict:
            raise


class EventRecorder:
    """Kubernetes Events (core/v1) about ProvisioningRequests, from component ``gangscale``.

    Repeats are correlated as client-go's recorder does (:mod:`gangscale.kube.eventcache`): an identical event
    increments ``count`` on the earlier one, many similar ones are combined, and a flood about one object is
    rate-limited. Failures to record are logged and swallowed: an event is a courtesy and must never stop the loop.
    """

    def __init__(self, http: KubeHTTP, *, component: str = FIELD_MANAGER, host: str = "") -> None:
        self.http = http
        self.component = component
        self.host = host
        self._seq = itertools.count()
        # Several recorders (replicas, other controllers) may name events about one object in the same
        # millisecond; a per-recorder salt keeps their names apart.
        self._salt = secrets.token_hex(3)
        self.sent = 0
        self.correlator = EventCorrelator()

    async def record(self, obj: JSON, event_type: str, reason: str, message: str, now: float) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        stamp = rfc3339(now)
        body: JSON = {
            "apiVersion": "v1", "kind": "Event",
            # The object's name is cut so that the event's stays within 253 characters.
            "metadata": {"name": f"{str(meta.get('name') or 'object')[:200].rstrip('-.')}."
                                 f"{int(now * 1000):x}{self._salt}{next(self._seq):04x}",
                         "namespace": namespace},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta.get("name"), "namespace": meta.get("namespace"),
                               "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
            "type": event_type, "reason": reason, "message": message[:1024],
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component, "reportingInstance": self.host or self.component,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        action = self.correlator.correlate(body, now)
        try:
            if isinstance(action, Patch):
                await self._patch(action)
            elif isinstance(action, Create):
                await self.http.request("POST", EVENTS.path(namespace), body=action.body)
            else:
                log.debug("event %s on %s/%s dropped: too many about this object", reason, namespace, meta.get("name"))
                return
            self.sent += 1
        except ApiError as exc:
            log.warning("could not record event %s on %s/%s: %s", reason, namespace, meta.get("name"), exc)

    async def _patch(self, action: Patch) -> None:
        try:
            await self.http.request("PATCH", EVENTS.path(action.namespace, action.name), body=action.change,
                                    content_type=STRATEGIC)
        except ApiError as exc:
            if not exc.not_found:
                raise
            # Gone (deleted, or expired by the API server's event TTL): create it again, count kept.
            await self.http.request("POST", EVENTS.path(action.namespace), body=action.body)
            self.correlator.recreated(action.body)
