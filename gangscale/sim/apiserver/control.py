"""The fault knobs over HTTP, for harnesses that run the server as its own process (``gangscale sim apiserver
--control``): a crash or chaos harness kills *real* ``gangscale run`` processes and has to steer the server
from outside.

Served under ``/_sim/`` (a path no real kube-apiserver serves, so nothing a Kubernetes client sends can reach
it by accident), JSON in and out:

- ``GET /_sim/faults``: every fault with its counters (``hits``, ``acted``) and the requests held now.
- ``POST /_sim/faults``: add a fault (a JSON object with :class:`~gangscale.sim.apiserver.faults.Fault`'s
  fields); 400 naming the field if one is unknown or mistyped. Answers the fault and its index.
- ``DELETE /_sim/faults``: remove every fault and turn "down" off; held requests stay held.
- ``POST /_sim/release``: let every held request go; body ``{"serve": false}`` (the default) answers them
  503 without touching storage, ``{"serve": true}`` serves them.
- ``PUT /_sim/down``: body ``{"down": true|false}``: the whole server answers 503 while down.
- ``GET /_sim/requests?since=N``: the request log from entry N on (``/_sim/`` requests left out): time (RFC 3339
  with microseconds, when the answer was sent), method, RBAC verb, group, resource, namespace, name,
  subresource, user agent, status; ``next`` is the N to ask from next time. A chaos harness reads who wrote what
  when.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from gangscale.sim.apiserver.faults import Fault, Faults, LoggedRequest

PREFIX = "/_sim/"


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


async def _object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:
        raise ValueError(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return body


def _state(faults: Faults) -> dict[str, Any]:
    return {"faults": [f.to_json() for f in faults.faults], "down": faults.down,
            "held": [{"fault": faults.faults.index(h.fault) if h.fault in faults.faults else None,
                      "request": h.description} for h in faults.held]}


def _requests(log: Sequence[LoggedRequest], since: str) -> dict[str, Any]:
    try:
        start = max(0, int(since or 0))
    except ValueError as exc:
        raise ValueError(f"since must be an integer, got {since!r}") from exc
    entries = [{"index": index, "time": r.time.isoformat(timespec="microseconds"), "method": r.method,
                "verb": r.verb, "group": r.group, "resource": r.resource, "namespace": r.namespace, "name": r.name,
                "subresource": r.subresource, "userAgent": r.user_agent, "status": r.status}
               for index, r in enumerate(log[start:], start) if not r.path.startswith(PREFIX)]
    return {"next": max(start, len(log)), "requests": entries}


async def handle(request: web.Request, faults: Faults, log: Sequence[LoggedRequest] = ()) -> web.Response:
    path, method = request.path, request.method
    try:
        if path == PREFIX + "requests" and method == "GET":
            return _json(_requests(log, request.query.get("since", "0")))
        if path == PREFIX + "faults":
            if method == "GET":
                return _json(_state(faults))
            if method == "POST":
                try:
                    fault = Fault.from_json(await _object(request))
                except TypeError as exc:
                    raise ValueError(str(exc)) from exc
                faults.inject(fault)
                return _json({"index": len(faults.faults) - 1, "fault": fault.to_json()}, 201)
            if method == "DELETE":
                faults.clear()
                return _json(_state(faults))
        elif path == PREFIX + "release" and method == "POST":
            serve = (await _object(request)).get("serve", False)
            if not isinstance(serve, bool):
                raise ValueError("serve must be true or false")
            return _json({"released": faults.release(serve=serve)})
        elif path == PREFIX + "down" and method == "PUT":
            down = (await _object(request)).get("down")
            if not isinstance(down, bool):
                raise ValueError("down must be true or false")
            faults.down = down
            return _json(_state(faults))
        else:
            return _error(404, f"no control endpoint {method} {path}")
        return _error(405, f"{method} is not allowed on {path}")
    except ValueError as exc:
        return _error(400, str(exc))
