"""Kubernetes API errors, classified by what the caller should do about them."""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """A non-2xx answer from the API server, with the ``kind: Status`` fields when there was one."""

    def __init__(self, status: int, reason: str = "", message: str = "", body: Any = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, status: int, raw: bytes, headers: Any) -> ApiError:
        body: Any = None
        reason = message = ""
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            message = raw.decode(errors="replace")[:500]
        if isinstance(body, dict):
            reason = str(body.get("reason", ""))
            message = str(body.get("message", ""))
        retry_after: float | None = None
        value = headers.get("Retry-After") if headers is not None else None
        if value is not None:
            try:
                retry_after = float(value)
            except ValueError:
                retry_after = None
        if retry_after is None and isinstance(body, dict):
            details = body.get("details") or {}
            if isinstance(details, dict) and "retryAfterSeconds" in details:
                retry_after = float(details["retryAfterSeconds"])
        return cls(status, reason, message, body, retry_after)

    @property
    def retryable(self) -> bool:
        """Worth retrying unchanged later: throttling, server-side trouble, timeouts."""
        return self.status in (429, 500, 502, 503, 504) or self.status == 0

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404


class WatchExpired(Exception):
    """The watch's resourceVersion is older than the server keeps: re-list."""
