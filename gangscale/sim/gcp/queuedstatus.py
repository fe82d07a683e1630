"""Pure rules of GKE's handling of ProvisioningRequests of class ``queued-provisioning.gke.io``, as its published
autoscaler (GoogleCloudPlatform/cluster-autoscaler, "GKE's code" below) has them: the resize request's name, the
conditions and how they are updated, the reasons and messages, the provisioning class details, and how many nodes
a request's pods need. No I/O and no clock: :mod:`.queued` applies them.

Sources (paths in GKE's code; research notes ``gke-queued-code.md`` §§ in brackets):

- :func:`resize_request_name`: ``pkg/cloudprovider/gke/gceclient/resizerequest/resize_request.go:
  ResizeRequestName``: ``gke-`` + the namespace and the name, each cut to 20 bytes, + 16 hex characters of the
  sha256 of ``namespace/name`` [§6].
- :func:`set_condition`: ``provreqstate/state.go: UpdateOrSetProvisioningRequestCondition``: a condition's
  ``lastTransitionTime`` changes whenever its status, reason or message does; ``observedGeneration`` is the
  request's ``metadata.generation`` [§4]. The shape is the upstream Kubernetes ``metav1.Condition``.
- Reasons and messages: ``provreqstate/state.go`` (``NotAccepted``, ``SuccessfullyQueued``, ``Provisioned``,
  ``BookingExpired``, ``CapacityRevoked``), ``reconciler/provisioning_request_initializer.go``
  (``MissingPodTemplates``), ``scaleup/reasons/reasons.go`` (``NoQueuedNodepoolAvailable``,
  ``ProvisioningRequestNotSchedulableInNodepool``, ``NodepoolSizeReached``), ``reconciler/reasons/reasons.go``
  (reasons from Compute Engine error codes), ``reconciler/resize_request_reconciler.go`` (``MissingResizeRequest``,
  ``InternalErrorResizeRequestGotCancelled``), ``reconciler/valid_until_reconciler.go`` (``WaitTimeExceeded``),
  ``manager/manager.go`` (``InvalidArgumentMaxRunDurationParseError``) [§§2-4, 11]. The Compute Engine code →
  reason mapping is upstream's ``cloudprovider/gce: GetErrorInfo`` (resource-pool codes, any code containing
  ``QUOTA``), with GKE's ``LIMIT_EXCEEDED`` special case; other codes → ``InternalError``.
- :func:`details`: ``queuedwrapper/wrapper.go`` keys filled as ``manager.go: detailsFromSpec`` does; empty values
  are left out [§5].
- :func:`nodes_needed`: the node count GKE estimates by bin-packing the request's pods onto the MIG's template
  (``scaleup/orchestrator.go: computeExpansionOption``) [§7]; here on the machine's allocatable from
  :func:`gangscale.model.catalog.node_allocatable`, pods filled first-fit, one podSet after another.

The fake's own (not GKE's): the predicate text inside ``ProvisioningRequestNotSchedulableInNodepool`` messages
("Insufficient <resource>", kube-scheduler's wording; "node(s) didn't match Pod's node affinity/selector" for a
zone outside the pool); only resources, and the node-pool and zone selectors, are checked (no taints, affinities
or other predicates); a FAILED resize request with several errors gets the message of the last recognized one
only (GKE appends "The remaining received errors: …").
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from gangscale.model.resources import ResourceList
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]

CLASS = "queued-provisioning.gke.io"
ACCEPTED, PROVISIONED, FAILED = "Accepted", "Provisioned", "Failed"
BOOKING_EXPIRED, CAPACITY_REVOKED = "BookingExpired", "CapacityRevoked"
#: ``provreqstate.BookingDuration``.
BOOKING_SECONDS = 600.0
#: ``manager.go``'s ``DefaultMaxRunDuration`` (7 days).
DEFAULT_RUN_SECONDS = 7 * 24 * 3600
#: How long a Pending request that cannot be served yet is retried before it fails
#: (``pendingProvisioningRequestRetryPeriod``, ``failMissingPodTemplatesDuration``), and how long an Accepted one
#: may miss its resize request or see it cancelled (``maxUnreconciledPeriod``).
RETRY_PERIOD = 120.0
#: Resize requests of terminal requests are kept this long after Provisioned/Failed (``terminalResizeRequestTTL``).
TERMINAL_RR_TTL = 3600.0
MRD_PARAMETER, VALID_UNTIL_PARAMETER = "maxRunDurationSeconds", "ValidUntilSeconds"
NODEPOOL_SELECTOR, ZONE_SELECTOR = "cloud.google.com/gke-nodepool", "topology.kubernetes.io/zone"

NOT_ACCEPTED = ("NotAccepted", "Provisioning Request wasn't accepted.")
QUEUED = ("SuccessfullyQueued", "Provisioning Request was successfully queued.")
PROVISIONED_OK = ("Provisioned", "Provisioning Request was successfully provisioned.")
BOOKING_OVER = ("BookingExpired", "Capacity booking for the Provisioning Request has expired and the nodes are now "
                                  "candidates for scale down when underutilized.")
REVOKED = ("CapacityRevoked", "Capacity provisioned for the Provisioning Request was reclaimed and is no longer "
                              "available in the cluster.")
NO_QUEUED_POOL = ("NoQueuedNodepoolAvailable", "No nodepool with QueuedProvisioning enabled is available for scale up")
MISSING_RR = ("MissingResizeRequest", "The corresponding Resize Request was missing.")
RR_CANCELLED = ("InternalErrorResizeRequestGotCancelled", "Provisioning Request failed because Resize Request got "
                                                          "cancelled.")
WAIT_TIME_EXCEEDED = ("WaitTimeExceeded", "Provisioning Request could not provision queued instances in the "
                                          "allocated time.")
MRD_PARSE_ERROR = ("InvalidArgumentMaxRunDurationParseError", "Additional parameter maxRunDurationSeconds could not "
                                                              "be parsed.")
NO_ERRORS = ("InternalErrorResizeRequestFailed", "Provisioning Request failed, but no errors with details can be "
                                                 "provided.")
_RESOURCE_POOL_CODES = frozenset({"RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED",
                                  "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"})
_VALID_UNTIL_GCE_MESSAGE = "Resize request could not provision queued instances in the allocated time."


def resize_request_name(namespace: str, name: str) -> str:
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:16]
    return f"gke-{_cap(namespace, 20)}-{_cap(name, 20)}-{digest}"


def _cap(text: str, limit: int) -> str:
    """Byte truncation, as Go slices a string."""
    return text.encode()[:limit].decode(errors="ignore")


# --- conditions -------------------------------------------------------------------------------------------------


def condition(pr: JSON, kind: str) -> JSON | None:
    for found in (pr.get("status") or {}).get("conditions") or []:
        if isinstance(found, dict) and found.get("type") == kind:
            return found
    return None


def is_true(pr: JSON, kind: str) -> bool:
    found = condition(pr, kind)
    return found is not None and found.get("status") == "True"


def set_condition(pr: JSON, kind: str, status: bool, reason_message: tuple[str, str], t: float) -> bool:
    """Set a condition on ``pr`` (in place); True if anything changed."""
    reason, message = reason_message
    value = "True" if status else "False"
    conditions: list[JSON] = pr.setdefault("status", {}).setdefault("conditions", [])
    generation = int((pr.get("metadata") or {}).get("generation") or 1)
    found = condition(pr, kind)
    if found is not None and (found.get("status"), found.get("reason"), found.get("message")) == (
            value, reason, message) and found.get("observedGeneration") == generation:
        return False
    fresh: JSON = {"type": kind, "status": value, "reason": reason, "message": message,
                   "lastTransitionTime": rfc3339(t), "observedGeneration": generation}
    if found is not None and (found.get("status"), found.get("reason"), found.get("message")) == (
            value, reason, message):
        fresh["lastTransitionTime"] = found.get("lastTransitionTime", fresh["lastTransitionTime"])
    if found is None:
        conditions.append(fresh)
    else:
        conditions[conditions.index(found)] = fresh
    return True


def missing_templates(referenced: int, missing: Sequence[str]) -> str:
    """Upstream ``provreqwrapper``'s error for PodTemplates that are not there."""
    return (f"missing pod templates, {referenced} pod templates were referenced, {len(missing)} templates were "
            f"missing: {','.join(missing)}")


def not_schedulable(pool: str, why: str) -> tuple[str, str]:
    return ("ProvisioningRequestNotSchedulableInNodepool",
            f"Provisioning Request's pods cannot be scheduled in the nodepool. Predicate checking errors: {pool} "
            f"({why})")


def size_reached(pool: str) -> tuple[str, str]:
    return "NodepoolSizeReached", f"Max nodepool size reached, affected nodepools: {pool}"


# --- Compute Engine errors --------------------------------------------------------------------------------------


def _gce_reason(code: str, message: str) -> str:
    if code in _RESOURCE_POOL_CODES:
        return "ResourcePoolExhausted"
    if "QUOTA" in code:
        return "QuotaExceeded"
    if code == "LIMIT_EXCEEDED":
        return "WaitTimeExceeded" if message == _VALID_UNTIL_GCE_MESSAGE else "LimitExceeded"
    if "IP_SPACE_EXHAUSTED" in code:
        return "IPSpaceExhausted"
    if "PERMISSIONS_ERROR" in code:
        return "PermissionsError"
    return "InternalError"


def _message(error: Mapping[str, Any]) -> str:
    """GCE's message; for a resource-pool code with error details, GKE appends the details
    (``client_v1.go: lastAttemptErrorsFromGCEV1``)."""
    message = str(error.get("message", ""))
    details = error.get("errorDetails") or []
    info = details[0].get("errorInfo") if details and isinstance(details[0], dict) else None
    if str(error.get("code")) in _RESOURCE_POOL_CODES and isinstance(info, dict) and info.get("reason"):
        meta = info.get("metadatas") or {}
        message += (f' Reason: "{info["reason"]}", VMType: "{meta.get("vmType", "")}", '
                    f'Attachment: "{meta.get("attachment", "")}".')
    return message


def last_attempt(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """``Provisioned=False`` while the resize request waits: a quota error first, else the first recognized one."""
    recognized = [e for e in errors if _gce_reason(str(e.get("code")), str(e.get("message"))) != "InternalError"]
    chosen = next((e for e in recognized if "QUOTA" in str(e.get("code"))), recognized[0] if recognized else None)
    if chosen is None:
        return "NotProvisioned", "Provisioning Request wasn't provisioned."
    return _gce_reason(str(chosen.get("code")), str(chosen.get("message"))), _message(chosen)


def failed(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """``Failed=True`` for a FAILED resize request: the last recognized error."""
    if not errors:
        return NO_ERRORS
    recognized = [e for e in errors if _gce_reason(str(e.get("code")), str(e.get("message"))) != "InternalError"]
    if not recognized:
        last = errors[-1]
        return "InternalError", f'Received unrecognized error: [{last.get("code")}] "{last.get("message")}"'
    chosen = recognized[-1]
    reason = _gce_reason(str(chosen.get("code")), str(chosen.get("message")))
    return reason, WAIT_TIME_EXCEEDED[1] if reason == WAIT_TIME_EXCEEDED[0] else _message(chosen)


# --- parameters, details and packing ----------------------------------------------------------------------------


def int_parameter(pr: JSON, key: str) -> int | None:
    """A parameter parsed as Go's ``strconv.ParseInt(s, 10, 0)``; None when absent or not an integer."""
    raw = ((pr.get("spec") or {}).get("parameters") or {}).get(key)
    if not isinstance(raw, str):
        return None
    text = raw[1:] if raw[:1] in "+-" else raw
    return int(raw) if text.isdigit() and text.isascii() else None


def run_seconds(pr: JSON) -> int:
    """The run duration: ``maxRunDurationSeconds``, or 7 days when absent or unparsable (GKE's CapacityRevoked
    timer silently takes the default on a parse error)."""
    value = int_parameter(pr, MRD_PARAMETER)
    return DEFAULT_RUN_SECONDS if value is None else value


def details(*, mig: str, rr_name: str, pool: str, zone: str, accelerator: str,
            templates: Sequence[str]) -> dict[str, str]:
    out = {"NodeGroupName": mig, "ResizeRequestName": rr_name, "NodePoolName": pool, "SelectedZone": zone,
           "AcceleratorType": accelerator, "NodePoolAutoProvisioned": "false",
           "PodTemplateName": ", ".join(templates), "ProvisioningMode": "resize_request"}
    return {key: value for key, value in out.items() if value}


def nodes_needed(pod_sets: Sequence[tuple[int, ResourceList]], allocatable: ResourceList) -> int | str:
    """Nodes of ``allocatable`` that hold every pod (first fit, podSet after podSet), or why a pod fits no node."""
    free: list[ResourceList] = []
    for count, requests in pod_sets:
        if not requests.fits_in(allocatable):
            short = sorted(requests.shortfall(allocatable))
            return ", ".join(f"Insufficient {name}" for name in short)
        left = count
        for i, room in enumerate(free):
            take = min(left, _fits(requests, room))
            free[i] = room - requests.scaled(take)
            left -= take
        per_node = _fits(requests, allocatable)
        for _ in range(math.ceil(left / per_node)):
            take = min(left, per_node)
            free.append(allocatable - requests.scaled(take))
            left -= take
    return len(free)


def _fits(requests: ResourceList, room: ResourceList) -> int:
    """How many pods of ``requests`` fit in ``room``."""
    counts = [room.get(name) // amount for name, amount in requests.items() if amount > 0]
    return min(counts) if counts else 0
