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

log = logging.getLogger(__name__)

#: How long a single discovery request may take, and the longest pause between two.
_REQUEST_TIMEOUT = 10.0
_MAX_DELAY = 5.0

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
    path = f"/apis/{PROVREQ.group}/{PROVREQ.version}"
    host = http.api_client.configuration.host
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        try:
            found = await http.request("GET", path, timeout=_REQUEST_TIMEOUT)
        except ApiError as exc:
            if exc.status == 404:
                raise StartupError(NO_CRD.format(group=PROVREQ.group, version=PROVREQ.version,
                                                 plural=PROVREQ.plural)) from None
            if exc.status in (401, 403):
                raise StartupError(f"the API server at {host} refused gangscale's credentials: {exc}") from None
            error = exc
        else:
            if not any(r.get("name") == PROVREQ.plural for r in found.get("resources") or ()):
                raise StartupError(NO_CRD.format(group=PROVREQ.group, version=PROVREQ.version,
                                                 plural=PROVREQ.plural))
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise StartupError(f"cannot reach the Kubernetes API server at {host} (gave up after {timeout:g}s): "
                               f"{error.message or error}")
        log.warning("the API server at %s is not answering (%s); retrying", host, error.message or error)
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, _MAX_DELAY)
