"""Raw JSON requests and watch streams over kubernetes_asyncio's configured HTTP client.

kubernetes_asyncio gives us kubeconfig / in-cluster configuration, auth (tokens, exec plugins, client
certificates) and the aiohttp session. Its typed API classes and its ``Watch`` helper are not used for
list/watch: we need the raw ``resourceVersion`` bookkeeping, 410 handling and content types under our
control (see docs in ``reflector``). Paths are built for any resource: core (``/api/v1``) or grouped
(``/apis/{group}/{version}``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

from gangscale.kube.decoding import decode
from gangscale.kube.errors import ApiError

JSON = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """Which resource a request is about: group ("" for core), version, plural, and scope."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if sub:
                base += f"/{sub}"
        return base


class KubeHTTP:
    """JSON in, JSON out; non-2xx answers raise :class:`ApiError` with the Status fields."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        #: When an API request last succeeded, or a watch last delivered something (``time.monotonic``): readiness
        #: fails when the API server has been silent too long.
        self.last_ok = time.monotonic()

    async def _call(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                    body: Any = None, content_type: str = "application/json",
                    timeout: float | aiohttp.ClientTimeout | None = None) -> aiohttp.ClientResponse:
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()
                  if v is not None]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            resp: aiohttp.ClientResponse = await self.api_client.call_api(
                path, method, query_params=params, header_params=headers, body=body,
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(0, "ConnectionError", str(exc) or type(exc).__name__) from exc
        return resp

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float | None = 30.0, decoder: Callable[[bytes], Any] = decode) -> JSON:
        """``decoder`` turns the answer's body into JSON (a reflector's :class:`~gangscale.kube.projection.Projection`
        keeps only some fields)."""
        resp = await self._call(method, path, query=query, body=body, content_type=content_type,
                                timeout=timeout)
        async with resp:
            try:
                raw = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ApiError(0, "ConnectionError", str(exc) or type(exc).__name__) from exc
            if not 200 <= resp.status <= 299:
                raise ApiError.from_response(resp.status, raw, resp.headers)
        self.last_ok = time.monotonic()
        try:
            out = decoder(raw or b"{}")
        except ValueError as exc:
            raise ApiError(resp.status, "BadResponse", f"response is not JSON: {exc}") from exc
        if not isinstance(out, dict):
            raise ApiError(resp.status, "BadResponse", "response is not a JSON object")
        return out

    async def stream(self, path: str, query: Mapping[str, Any], *, timeout: float | None = None,
                     opened: Callable[[], None] | None = None,
                     decoder: Callable[[bytes], Any] = decode) -> AsyncIterator[JSON]:
        """The events of one watch request, until the server ends the stream; ``opened`` is called once the server
        has accepted it (a watch may then stay silent for minutes, and is healthy)."""
        client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=30.0,
                                               sock_read=timeout) if timeout else None
        resp = await self._call("GET", path, query={**query, "watch": "true"}, timeout=client_timeout)
        async with resp:
            if not 200 <= resp.status <= 299:
                raise ApiError.from_response(resp.status, await resp.read(), resp.headers)
            if opened is not None:
                opened()
            try:
                while True:
                    line = await resp.content.readline()
                    if not line:
                        return
                    if not line.strip():
                        continue
                    try:
                        event = decoder(line)
                    except ValueError as exc:
                        raise ApiError(resp.status, "BadResponse", f"watch line is not JSON: {exc}") from exc
                    self.last_ok = time.monotonic()
                    yield event
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ApiError(0, "ConnectionError", str(exc) or type(exc).__name__) from exc
