"""Errors of the fake Google APIs: the AIP-193 envelope and the texts the real services use.

Texts marked VERBATIM are quoted in ``research/cloud-providers.md`` §1.4 or seen in public issue reports; the
others are the fake's own wording (listed as gaps in the package docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

#: google.rpc.Code numbers and names by HTTP status, for the common cases.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
    502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}
#: ``errors[].reason`` by AIP-193 status.
REASONS = {
    "INVALID_ARGUMENT": "badRequest", "FAILED_PRECONDITION": "failedPrecondition", "UNAUTHENTICATED": "authError",
    "PERMISSION_DENIED": "forbidden", "NOT_FOUND": "notFound", "ALREADY_EXISTS": "alreadyExists",
    "RESOURCE_EXHAUSTED": "rateLimitExceeded", "INTERNAL": "backendError", "UNAVAILABLE": "backendError",
    "DEADLINE_EXCEEDED": "deadlineExceeded",
}
RPC_CODES = {
    "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
    "ABORTED": 10, "INTERNAL": 13, "UNAVAILABLE": 14, "UNAUTHENTICATED": 16,
}

# VERBATIM (Google front end).
MISSING_CREDENTIALS = ("Request is missing required authentication credential. Expected OAuth 2 access token, login "
                       "cookie or other valid authentication credential. See "
                       "https://developers.google.com/identity/sign-in/web/devconsole-project.")
INVALID_CREDENTIALS = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                       "or other valid authentication credential. See "
                       "https://developers.google.com/identity/sign-in/web/devconsole-project.")


@dataclass(eq=False)
class GcpError(Exception):
    """An HTTP error answer in Google's JSON envelope."""

    code: int
    message: str
    status: str = ""
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    extra_error: JSON = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(f"{self.code} {self.message}")
        if not self.status:
            self.status = STATUS_NAMES.get(self.code, "UNKNOWN")
        if not self.reason:
            self.reason = REASONS.get(self.status, "backendError")

    def body(self, request_id: str | None = None) -> JSON:
        """``{"error": {"code", "message", "status", "errors": [{"message", "domain", "reason"}], "details"}}``."""
        entry: JSON = {"message": self.message, "domain": "global", "reason": self.reason, **self.extra_error}
        error: JSON = {"code": self.code, "message": self.message, "status": self.status, "errors": [entry]}
        if request_id is not None:
            error["details"] = [{"@type": "type.googleapis.com/google.rpc.RequestInfo", "requestId": request_id}]
        return {"error": error}


def invalid(message: str) -> GcpError:
    return GcpError(400, message, "INVALID_ARGUMENT")


def failed_precondition(message: str) -> GcpError:
    return GcpError(400, message, "FAILED_PRECONDITION")


def unauthenticated(message: str, reason: str) -> GcpError:
    return GcpError(401, message, "UNAUTHENTICATED", reason,
                    headers={"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'},
                    extra_error={"location": "Authorization", "locationType": "header"})


def container_not_found(path: str) -> GcpError:
    """VERBATIM form: ``Not found: projects/…``."""
    return GcpError(404, f"Not found: {path}.", "NOT_FOUND")


def container_exists(path: str) -> GcpError:
    """VERBATIM form: ``Already exists: projects/xxx/locations/asia-east1/clusters/yyy/nodePools/zzz.``"""
    return GcpError(409, f"Already exists: {path}.", "ALREADY_EXISTS")


def compute_not_found(path: str) -> GcpError:
    return GcpError(404, f"The resource '{path}' was not found", "NOT_FOUND")


def compute_exists(path: str) -> GcpError:
    return GcpError(409, f"The resource '{path}' already exists", "ALREADY_EXISTS")


def compute_precondition(message: str) -> GcpError:
    return GcpError(400, message, "FAILED_PRECONDITION", "conditionNotMet")


def busy(op_name: str, activity: str) -> GcpError:
    """VERBATIM form: ``Operation operation-… is currently upgrading cluster X. Please wait and try again once it
    is done.`` (``activity`` is ``upgrading cluster X``, ``creating a node pool for cluster X``, …)."""
    return failed_precondition(f"Operation {op_name} is currently {activity}. Please wait and try again once it is "
                               "done.")


def too_many_operations(cluster: str, limit: int) -> GcpError:
    """VERBATIM: the concurrent-operations throttle."""
    return GcpError(429, f'Too many operations: cluster "{cluster}" hits the concurrent operations quota {limit}, '
                         "please try again later.", "RESOURCE_EXHAUSTED", "rateLimitExceeded")


def regional_quota(project: str, requires: float, available: float, limit: float) -> GcpError:
    """VERBATIM form of GKE's synchronous quota refusal (HTTP 403, reason ``forbidden``)."""
    short = requires - available
    return GcpError(403, f"Insufficient regional quota to satisfy request: resource \"CPUS\": request requires "
                         f"'{requires:.1f}' and is short '{short:.1f}'. project has a quota of '{limit:.1f}' with "
                         f"'{available:.1f}' available. View and manage quotas at "
                         f"https://console.cloud.google.com/iam-admin/quotas?usage=USED&project={project}",
                    "PERMISSION_DENIED", "forbidden")


def zone_exhausted_message(project: str, zone: str) -> str:
    """The per-instance stockout text of Compute Engine."""
    return (f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the "
            "request.")


def quota_exceeded_message(limit: float, region: str) -> str:
    """VERBATIM form (two spaces after the first sentence)."""
    return f"Quota 'CPUS' exceeded.  Limit: {limit:.1f} in region {region}."


def gke_instances_message(waited: str, expected: int, running: int, tag: str, instance: str, detail: str) -> str:
    """VERBATIM form of the asynchronous create/resize failure (``tag`` is ``GCE_STOCKOUT`` or
    ``GCE_QUOTA_EXCEEDED``)."""
    return (f"Google Compute Engine: Not all instances running in IGM after {waited}. Expected {expected}, running "
            f"{running}, transitioning {expected - running}. Current errors: [{tag}]: Instance '{instance}' creation "
            f"failed: {detail}")


HTML_500 = ("<!DOCTYPE html>\n<html lang=en><meta charset=utf-8><title>Error 500 (Server Error)</title>"
            "<p><b>500.</b> That's an error.<p>The server encountered an error and could not complete your "
            "request. Please try again later.</html>\n")
HTML_404 = ("<!DOCTYPE html>\n<html lang=en><meta charset=utf-8><title>Error 404 (Not Found)</title>"
            "<p><b>404.</b> That's an error.<p>The requested URL {path} was not found on this server.</html>\n")
