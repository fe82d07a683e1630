"""The Google REST APIs the ``gke`` provider calls, over aiohttp: JSON in, JSON out, errors as :class:`GcpError`.

Two services, each a base URL (overridable, for the fake control plane and for private endpoints):
``https://container.googleapis.com`` (GKE node pools and their operations) and
``https://compute.googleapis.com/compute/v1`` (managed instance groups, resize requests, zone operations).
Every call carries ``Authorization: Bearer`` from the :class:`~.auth.TokenSource`; a 401 invalidates the token
and the call is tried once more with a fresh one. Errors follow AIP-193
(``{"error": {"code", "message", "status", "errors": [{"reason", "domain", "message"}]}}``); a body that is not
JSON (a proxy's HTML 502) still yields a :class:`GcpError` with the HTTP status. ``Retry-After`` (seconds or an
HTTP date) is kept for the caller's backoff. Connection failures are ``GcpError(0, "UNAVAILABLE")``: whether the
server applied the call is unknown, which the caller treats as such (``gangscale.providers.gke.errors``).
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from gangscale.providers.base import Fence, not_leader, unfenced
from gangscale.providers.gke.auth import TokenSource

JSON = dict[str, Any]
CONTAINER = "https://container.googleapis.com"
COMPUTE = "https://compute.googleapis.com/compute/v1"
#: Per call; an operation that takes longer is polled, not waited on.
CALL_TIMEOUT = 60.0


class GcpError(Exception):
    def __init__(self, http_status: int, status: str, message: str, *, reason: str = "",
                 retry_after: float | None = None, body: Any = None) -> None:
        super().__init__(f"HTTP {http_status} {status}: {message}")
        self.http_status, self.status, self.message = http_status, status, message
        self.reason, self.retry_after, self.body = reason, retry_after, body

    @property
    def not_found(self) -> bool:
        return self.http_status == 404

    @property
    def conflict(self) -> bool:
        return self.http_status == 409


@dataclass(frozen=True)
class Endpoints:
    container: str = CONTAINER
    compute: str = COMPUTE


#: Compute Engine methods that read but are called with POST.
_READING_POSTS = ("/listManagedInstances", "/listPerInstanceConfigs")


def changes(method: str, url: str) -> bool:
    """Whether a call may change the cloud (what the fence gates)."""
    return method != "GET" and not url.split("?", 1)[0].endswith(_READING_POSTS)


class GcpHttp:
    def __init__(self, tokens: TokenSource, endpoints: Endpoints | None = None,
                 session: aiohttp.ClientSession | None = None, fence: Fence = unfenced,
                 user_agent: str = "gangscale") -> None:
        self.tokens = tokens
        #: Sent as ``User-Agent``: the cloud's audit logs (and the fakes' request logs) tell the replicas apart.
        self.user_agent = user_agent
        #: Asked before every call that may change something (:func:`changes`): see ``gangscale.providers.base.Fence``.
        self.fence = fence
        self.endpoints = endpoints or Endpoints()
        self._session = session
        #: Calls made, by "METHOD path-without-ids" kind, for benchmarks and tests.
        self.calls: list[tuple[str, str]] = []

    async def container(self, method: str, path: str, *, body: JSON | None = None,
                        params: Mapping[str, str] | None = None) -> JSON:
        return await self.request(method, self.endpoints.container.rstrip("/") + path, body=body, params=params)

    async def compute(self, method: str, path: str, *, body: JSON | None = None,
                      params: Mapping[str, str] | None = None) -> JSON:
        return await self.request(method, self.endpoints.compute.rstrip("/") + path, body=body, params=params)

    async def request(self, method: str, url: str, *, body: JSON | None = None,
                      params: Mapping[str, str] | None = None) -> JSON:
        if changes(method, url) and not self.fence():
            raise not_leader("")
        for attempt in (1, 2):
            token = await self.tokens.token()
            try:
                return await self._once(method, url, token, body, params)
            except GcpError as exc:
                if exc.http_status == 401 and attempt == 1:
                    self.tokens.invalidate()
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, method: str, url: str, token: str, body: JSON | None,
                    params: Mapping[str, str] | None) -> JSON:
        self.calls.append((method, url))
        session = await self._get_session()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json", "User-Agent": self.user_agent}
        try:
            async with session.request(method, url, json=body, params=dict(params or {}), headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT)) as resp:
                raw = await resp.read()
                if 200 <= resp.status <= 299:
                    return _json_object(raw)
                raise _error(resp.status, raw, resp.headers.get("Retry-After"))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise GcpError(0, "UNAVAILABLE", f"{method} {url}: {type(exc).__name__}: {exc}") from exc

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _json_object(raw: bytes) -> JSON:
    if not raw.strip():
        return {}
    try:
        out = json.loads(raw)
    except ValueError as exc:
        raise GcpError(200, "INTERNAL", f"the response is not JSON: {exc}") from exc
    if not isinstance(out, dict):
        raise GcpError(200, "INTERNAL", "the response is not a JSON object")
    return out


def _error(http_status: int, raw: bytes, retry_after: str | None) -> GcpError:
    body: Any = None
    with contextlib.suppress(ValueError):
        body = json.loads(raw)
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        text = raw.decode("utf-8", "replace").strip()
        return GcpError(http_status, _STATUS_OF.get(http_status, "UNKNOWN"), text[:300] or f"HTTP {http_status}",
                        retry_after=_seconds(retry_after), body=raw)
    errors = detail.get("errors") or []
    reason = str(errors[0].get("reason", "")) if errors and isinstance(errors[0], dict) else ""
    return GcpError(http_status, str(detail.get("status") or _STATUS_OF.get(http_status, "UNKNOWN")),
                    str(detail.get("message", "")), reason=reason, retry_after=_seconds(retry_after), body=body)


#: google.rpc.Code names by HTTP status, for errors whose body does not say.
_STATUS_OF = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
              409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
              502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def _seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date (RFC 9110)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    # The date is the server's wall clock: only the wait it implies is meaningful here.
    return max(0.0, when.timestamp() - time.time())
