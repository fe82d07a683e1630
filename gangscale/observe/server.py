"""The controller's HTTP endpoint for probes, Prometheus and debugging.

Routes (GET, and HEAD as aiohttp adds it):

``/healthz``
    Liveness: 200 or 503, with the reason from ``healthy()`` as the body (``ok`` when it gives none).
``/readyz``
    Readiness: the same from ``ready()`` (a standby replica answers 200 ``standby: <holder> holds the leader
    lease``).
``/metrics``
    The :class:`~gangscale.observe.metrics.Metrics` exposition.
``/debug/plans``
    ``plans()`` as indented JSON; 500 with a message if it raises or cannot be encoded (non-finite floats
    included, as they are not JSON). Dataclasses, pydantic models and sets are converted; other objects are
    written as their ``str``.
``/debug/plans?pr=NAMESPACE/NAME``
    ``plans(pr="NAMESPACE/NAME")``: one request's document (what ``gangscale explain`` reads); 404 with a JSON body
    ``{"error": ...}`` when the callback returns None (no such request is known).

Any other path is a 404. The callbacks are called on the event loop for each request, so they must be cheap and
non-blocking (read state the controller already keeps). A callback that raises counts as a failed probe rather than
a server error, so that a broken health check takes the pod out of rotation instead of being ignored.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from gangscale.observe.metrics import Metrics

__all__ = ["ObserveServer", "Probe"]

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[bool, str]]

# Scrapers and probes hold no long requests: shutting the controller down should not wait on them.
_SHUTDOWN_TIMEOUT = 5.0


def _jsonable(value: object) -> Any:
    """Fallback encoder for ``/debug/plans``: plain data from dataclasses, pydantic models and sets, else ``str``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return str(value)


class ObserveServer:
    """Serves ``/healthz``, ``/readyz``, ``/metrics`` and ``/debug/plans``; see the module docstring."""

    def __init__(
        self,
        *,
        host: str = "0.0.0.0",  # probes and scrapes come from outside the pod
        port: int = 8080,
        metrics: Metrics,
        healthy: Probe,
        ready: Probe,
        plans: Callable[..., object],
    ) -> None:
        self.host = host
        self.port = port
        self._metrics = metrics
        self._healthy = healthy
        self._ready = ready
        self._plans = plans
        self._runner: web.AppRunner | None = None

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._handle_healthz)
        app.router.add_get("/readyz", self._handle_readyz)
        app.router.add_get("/metrics", self._handle_metrics)
        app.router.add_get("/debug/plans", self._handle_plans)
        return app

    async def start(self) -> None:
        """Listen on ``host:port``; with port 0 the system picks a free port, then found in :attr:`port`."""
        if self._runner is not None:
            raise RuntimeError("ObserveServer is already started")
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        # Every address family bound (IPv4 and IPv6 for an empty host) shares the port when it was given; with
        # port 0 the first one's is the one to report.
        address = runner.addresses[0]
        self.port = int(address[1])
        log.info("observe server listening", extra={"host": self.host, "port": self.port})

    async def stop(self) -> None:
        """Stop listening and close open connections; a no-op when not started."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @staticmethod
    def _probe(name: str, probe: Probe) -> web.Response:
        try:
            ok, reason = probe()
        except Exception as e:
            log.exception("%s check raised", name)
            ok, reason = False, f"{name} check raised {type(e).__name__}: {e}"
        if ok:
            return web.Response(text=reason or "ok")
        return web.Response(status=503, text=reason or f"not {name}")

    async def _handle_healthz(self, request: web.Request) -> web.Response:
        return self._probe("healthy", self._healthy)

    async def _handle_readyz(self, request: web.Request) -> web.Response:
        return self._probe("ready", self._ready)

    async def _handle_metrics(self, request: web.Request) -> web.Response:
        body, content_type = self._metrics.render()
        # Set as a header: aiohttp's content_type argument refuses a value carrying parameters (version, charset).
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _handle_plans(self, request: web.Request) -> web.Response:
        pr = request.query.get("pr")
        try:
            found = self._plans() if pr is None else self._plans(pr=pr)
            if pr is not None and found is None:
                return web.json_response({"error": f"the controller knows no request {pr}"}, status=404)
            text = json.dumps(found, indent=2, default=_jsonable, allow_nan=False)
        except Exception as e:
            log.exception("debug plans unavailable")
            return web.Response(status=500, text=f"plans unavailable: {type(e).__name__}: {e}")
        return web.Response(text=text + "\n", content_type="application/json")
