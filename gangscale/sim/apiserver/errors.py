"""API errors as the real kube-apiserver sends them: ``kind: Status`` bodies with code, reason and details.

Every failure inside the embedded API server is raised as :class:`StatusError`; the HTTP layer turns it
into the JSON body and status code. The reasons and codes are the ones of
``k8s.io/apimachinery/pkg/api/errors`` (``StatusReason`` values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Cause:
    """One ``details.causes`` entry: which field failed and why."""

    type: str
    message: str
    field: str = ""

    def to_json(self) -> JSON:
        out: JSON = {"reason": self.type, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


@dataclass
class StatusError(Exception):
    """An error that becomes a ``kind: Status`` response."""

    code: int
    reason: str
    message: str
    group: str = ""
    kind: str = ""
    name: str = ""
    causes: list[Cause] = field(default_factory=list)
    retry_after_seconds: int | None = None
    #: The Status's ``metadata`` (a ListMeta): a 410 on an expired continue token carries a new ``continue``.
    list_meta: JSON = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def to_json(self) -> JSON:
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.list_meta),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details: JSON = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_json() for c in self.causes]
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        if details:
            body["details"] = details
        return body


def qualified(resource: str, group: str) -> str:
    """``provisioningrequests.autoscaling.x-k8s.io`` or ``pods`` (core group) as in real messages."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{qualified(resource, group)} "{name}" not found',
                       group=group, kind=resource, name=name)


def already_exists(resource: str, group: str, name: str) -> StatusError:
    return StatusError(409, "AlreadyExists", f'{qualified(resource, group)} "{name}" already exists',
                       group=group, kind=resource, name=name)


def conflict(resource: str, group: str, name: str, why: str) -> StatusError:
    return StatusError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        group=group, kind=resource, name=name,
    )


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> StatusError:
    """422 Invalid, with the message format of ``errors.NewInvalid``."""
    qual = f"{kind}.{group}" if group else kind
    if len(causes) == 1:
        detail = f"{causes[0].field}: {causes[0].message}" if causes[0].field else causes[0].message
    else:
        detail = "[" + ", ".join(f"{c.field}: {c.message}" if c.field else c.message for c in causes) + "]"
    return StatusError(422, "Invalid", f'{qual} "{name}" is invalid: {detail}',
                       group=group, kind=kind, name=name, causes=causes)


def generic_invalid() -> StatusError:
    """``NewGenericServerResponse``'s 422: a fixed message, the underlying error is dropped."""
    return StatusError(422, "Invalid", "the server rejected our request due to an error in our request")


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def method_not_allowed(message: str) -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)


def unsupported_media_type(message: str) -> StatusError:
    return StatusError(415, "UnsupportedMediaType", message)


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def _go_kind(value: Any) -> str:
    """How Go's decoder names a JSON value in an unmarshal type error."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "string"


def cannot_unmarshal(value: Any, into: str) -> StatusError:
    """400 with Go's ``json: cannot unmarshal <kind> into Go value of type <into>``."""
    return bad_request(f"json: cannot unmarshal {_go_kind(value)} into Go value of type {into}")
