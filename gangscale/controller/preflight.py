"""Checks ``gangscale run`` makes before it starts the controller, each failing with one line to print.

- The kubeconfig (or in-cluster configuration) loads.
- The API server answers and serves ``autoscaling.x-k8s.io/v1`` ProvisioningRequests. An unreachable or
  failing (5xx) server is retried for ``--api-unreachable-timeout`` before giving up, so that a controller
  started together with its cluster (or during a control-plane upgrade) waits instead of crash-looping at once;
  a missing CRD or refused credentials fail at once, as retrying cannot fix them.
- The observe server's port can be bound (app.py turns the ``OSError`` into a :class:`StartupError`).

The discovery document is readable by every authenticated user (the ``system:discovery`` ClusterRole), so the
check needs no RBAC rule of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from gangscale.kube.client import make_http
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import PROVREQS as PROVREQ
from gangscale.kube.transport import KubeHTTP
from gangscale.retry import PREFLIGHT, retrying

log = logging.getLogger(__name__)

#: How long a single discovery request may take (the pauses between two are ``PREFLIGHT`` of :mod:`gangscale.retry`).
_REQUEST_TIMEOUT = 10.0

NO_CRD = ("the API server does not serve {group}/{version} {plural}: install the ProvisioningRequest CRD first "
          "(kubectl apply --server-side -f deploy/crds/, see the README's Install section)")


class StartupError(RuntimeError):
    """gangscale run cannot start; the message is the one line to print."""


async def connect(kubeconfig: str | None, context: str | None, user_agent: str) -> KubeHTTP:
    """A client from the kubeconfig, or :class:`StartupError` saying why none could be made."""
    if kubeconfig is not None and (problem := _unreadable(kubeconfig)):
        # The client library would log "Config not found" and then fail on a missing key: say what is wrong.
        raise StartupError(f"cannot read the kubeconfig {kubeconfig}: {problem}")
    try:
        return await make_http(kubeconfig, context, user_agent=user_agent)
    except Exception as exc:  # kubernetes_asyncio raises ConfigException, OSError, KeyError, yaml errors ...
        where = kubeconfig or "the default configuration"
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StartupError(f"cannot load the Kubernetes configuration from {where}: {detail}") from exc


def _unreadable(path: str) -> str:
    """Why ``path`` cannot be read ("" if it can); a small local file, read once at start."""
    try:
        with Path(path).open("rb"):
            return ""
    except OSError as exc:
        return exc.strerror or str(exc)


async def wait_for_api(http: KubeHTTP, timeout: float) -> None:
    """Return once the API server serves ProvisioningRequests; :class:`StartupError` otherwise (see module)."""
    host = http.api_client.configuration.host
    deadline = time.monotonic() + timeout

    async def probe() -> None:
        try:
            found = await http.request("GET", f"/apis/{PROVREQ.group}/{PROVREQ.version}", timeout=_REQUEST_TIMEOUT)
        except ApiError as exc:
            if (fatal := _startup_error(exc, host, timeout, deadline)) is not None:
                raise fatal from None
            raise
        if not any(r.get("name") == PROVREQ.plural for r in found.get("resources") or ()):
            raise StartupError(NO_CRD.format(group=PROVREQ.group, version=PROVREQ.version, plural=PROVREQ.plural))

    def waiting(exc: Exception, delay: float) -> None:
        message = exc.message if isinstance(exc, ApiError) else ""
        log.warning("the API server at %s is not answering (%s); retrying", host, message or exc)

    async def sleep(delay: float) -> None:
        await asyncio.sleep(max(0.0, min(delay, deadline - time.monotonic())))

    await retrying(probe, PREFLIGHT, sleep, retryable=lambda exc: isinstance(exc, ApiError), on_retry=waiting)


def _startup_error(exc: ApiError, host: str | None, timeout: float, deadline: float) -> StartupError | None:
    """What ends the wait for this answer (None: try again): a refusal retrying cannot fix, or the time is up."""
    if exc.status == 404:
        return StartupError(NO_CRD.format(group=PROVREQ.group, version=PROVREQ.version, plural=PROVREQ.plural))
    if exc.status in (401, 403):
        return StartupError(f"the API server at {host} refused gangscale's credentials: {exc}")
    if time.monotonic() >= deadline:
        return StartupError(f"cannot reach the Kubernetes API server at {host} (gave up after {timeout:g}s): "
                            f"{exc.message or exc}")
    return None
