"""``gangscale explain NAMESPACE/NAME``: why a ProvisioningRequest is, or is not, provisioned.

Also ``kubectl gangscale explain NAMESPACE/NAME``: installed as the ``kubectl-gangscale`` executable
(:func:`kubectl_main`), which kubectl's plugin mechanism runs with the arguments after ``gangscale``.

- Online (default): asks the running controller, ``GET URL/debug/plans?pr=NAMESPACE/NAME``. ``--url`` defaults to
  ``$GANGSCALE_EXPLAIN_URL``, else http://127.0.0.1:8080; reach an in-cluster controller with
  ``kubectl -n gangscale-system port-forward deploy/gangscale 8080``.
- Offline (``--offline --config POOLS``): reads the cluster itself and plans the request once
  (:mod:`gangscale.explainoffline`).

Exit codes: 0 explained; 1 no such request, or not one gangscale serves or can explain; 2 usage; 3 the controller
(or, offline, the API server) cannot be reached. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, TextIO

from gangscale.explainrender import render

EXPLAINED, NOT_FOUND, USAGE, UNREACHABLE = 0, 1, 2, 3
URL_ENV = "GANGSCALE_EXPLAIN_URL"
DEFAULT_URL = "http://127.0.0.1:8080"
PORT_FORWARD = "kubectl -n gangscale-system port-forward deploy/gangscale 8080"
JSON = dict[str, Any]


class Failed(Exception):
    """The one line to print, and the exit code."""

    def __init__(self, code: int, line: str) -> None:
        super().__init__(line)
        self.code = code


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "explain", help="why a ProvisioningRequest is, or is not, provisioned",
        description="Explain a ProvisioningRequest: its phase, and per node pool why the gang does not fit and what "
                    "would change it. Asks the running controller (--url; reach one in a cluster with `"
                    f"{PORT_FORWARD}`), or with --offline reads the cluster and plans the request itself. Exit "
                    "codes: 0 explained, 1 unknown request, 2 usage, 3 controller or API server unreachable.")
    p.add_argument("request", metavar="NAMESPACE/NAME", help="the ProvisioningRequest")
    p.add_argument("--url", default=None,
                   help=f"the controller's observe server (default ${URL_ENV}, else {DEFAULT_URL})")
    p.add_argument("--offline", action="store_true",
                   help="read the cluster and plan the request here instead of asking the controller")
    p.add_argument("--config", default=None, help="with --offline: the node-pool file the controller runs with")
    p.add_argument("--kubeconfig", default=None, help="with --offline: kubeconfig file (default as kubectl)")
    p.add_argument("--context", default=None, help="with --offline: kubeconfig context")
    p.add_argument("--json", dest="as_json", action="store_true", help="print the machine-readable document")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for an answer (default 10)")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None,
        now: float | None = None) -> int:
    """``gangscale explain``; ``now`` (seconds since the epoch) is the time an offline plan is made at."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        key = _key(args.request)
        doc = _offline(args, key, time.time() if now is None else now) if args.offline else \
            fetch(args.url or os.environ.get(URL_ENV) or DEFAULT_URL, key, args.timeout)
    except Failed as failed:
        print(f"gangscale explain: {failed}", file=err)
        return failed.code
    if args.as_json:
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.write(render(doc))
    return EXPLAINED


def _key(text: str) -> str:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise Failed(USAGE, f"want NAMESPACE/NAME, got {text!r}")
    return text


def fetch(url: str, key: str, timeout: float) -> JSON:
    """The controller's document of ``key``; :class:`Failed` (1) when it knows no such request, (3) when it cannot be
    reached or does not answer with one."""
    target = f"{url.rstrip('/')}/debug/plans?{urllib.parse.urlencode({'pr': key})}"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            known = _error_of(exc.read()) or f"the controller at {url} knows no request {key}"
            raise Failed(NOT_FOUND, known) from None
        raise Failed(UNREACHABLE, f"the controller at {url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise Failed(UNREACHABLE, f"cannot reach the controller at {url} ({why}); in a cluster, run "
                                  f"`{PORT_FORWARD}` first, or use --offline") from None
    try:
        doc = json.loads(body)
    except ValueError:
        raise Failed(UNREACHABLE, f"the controller at {url} did not answer with JSON") from None
    if not isinstance(doc, dict) or doc.get("request") != key:
        raise Failed(NOT_FOUND, f"the controller at {url} cannot explain one request (a gangscale without "
                                "/debug/plans?pr=); use --offline")
    return doc


def _error_of(raw: bytes) -> str | None:
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return str(found["error"]) if isinstance(found, dict) and found.get("error") else None


def _offline(args: argparse.Namespace, key: str, now: float) -> JSON:
    # Imported when used (as the cli does): building the parser must stay light.
    from gangscale.config import ConfigError, load_pool_file  # noqa: PLC0415

    if not args.config:
        raise Failed(USAGE, "--offline needs --config POOLS: the node-pool file the controller runs with")
    try:
        pool_file = load_pool_file(args.config)
    except ConfigError as exc:
        raise Failed(USAGE, str(exc).replace("\n", "; ")) from None
    return asyncio.run(_offline_async(args, pool_file, key, now))


async def _offline_async(args: argparse.Namespace, pool_file: Any, key: str, now: float) -> JSON:
    from gangscale.explainoffline import NotExplainable, offline_document  # noqa: PLC0415
    from gangscale.kube.client import make_http  # noqa: PLC0415
    from gangscale.kube.errors import ApiError  # noqa: PLC0415

    try:
        http = await make_http(args.kubeconfig, args.context, user_agent="gangscale-explain")
    except Exception as exc:  # no or unreadable kubeconfig: kubernetes_asyncio raises its own kinds
        raise Failed(UNREACHABLE, f"no Kubernetes API server to read: {exc}") from None
    try:
        return await asyncio.wait_for(offline_document(http, pool_file, key, now), args.timeout)
    except NotExplainable as exc:
        raise Failed(NOT_FOUND, str(exc)) from None
    except ApiError as exc:
        raise Failed(UNREACHABLE, f"cannot read the cluster: {exc}") from None
    except TimeoutError:
        raise Failed(UNREACHABLE, f"the API server did not answer within {args.timeout:g}s") from None
    finally:
        await http.api_client.close()


def kubectl_main(argv: list[str] | None = None) -> int:
    """``kubectl gangscale explain ...``: the ``kubectl-gangscale`` executable."""
    parser = argparse.ArgumentParser(prog="kubectl gangscale", description="gangscale as a kubectl plugin.")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(kubectl_main())
