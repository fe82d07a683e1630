"""The ``gangscale`` command line.

Commands available now:

- ``gangscale version``
- ``gangscale pools FILE``: validate a node-pool file and show the pools it resolves to (exit 1 and every
  problem on stderr if it is invalid).
- ``gangscale sim apiserver [--port N] [--kubeconfig PATH] [--example] [--watch-window N]
  [--bookmark-interval S] [--for SECONDS]``: the embedded Kubernetes API server on 127.0.0.1, with a
  kubeconfig that kubectl and gangscale can use; runs until interrupted (or for ``--for`` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from gangscale import __version__


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangscale", description="Gang-aware, all-or-nothing node pool autoscaler.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version and exit")
    pools = sub.add_parser("pools", help="validate a node-pool file and show the pools it resolves to",
                           description="Validate a node-pool file and print each pool as gangscale resolves it "
                                       "(machine catalog applied). Exits 1, listing every problem, if it is invalid.")
    pools.add_argument("file", help="the node-pool YAML file")
    sim = sub.add_parser("sim", help="the embedded simulated cluster")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    api = sim_sub.add_parser(
        "apiserver", help="run the embedded Kubernetes API server on 127.0.0.1 until interrupted",
        description="Run the in-memory Kubernetes API server (the one the tests and the demo use) on "
                    "127.0.0.1 and write a kubeconfig for kubectl and `gangscale run`.")
    api.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1; 0 picks a free one (default 0)")
    api.add_argument("--kubeconfig", default=".gangscale/kubeconfig",
                     help="where to write the kubeconfig (default .gangscale/kubeconfig)")
    api.add_argument("--example", action="store_true",
                     help="create example objects: a TPU node pool's nodes, a PodTemplate and a ProvisioningRequest")
    api.add_argument("--watch-window", type=int, default=1000,
                     help="watch events retained per resource; older resourceVersions get 410 Gone (default 1000)")
    api.add_argument("--bookmark-interval", type=float, default=60.0,
                     help="seconds between watch BOOKMARK events (default 60)")
    api.add_argument("--for", dest="duration", type=float, default=None,
                     help="stop after this many seconds instead of waiting for Ctrl-C")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(f"gangscale {__version__}")
        return 0
    if args.command == "pools":
        return _show_pools(args.file)
    if args.command == "sim" and args.sim_command == "apiserver":
        return asyncio.run(_run_apiserver(args))
    return 2


def _show_pools(path: str) -> int:
    from gangscale.config import ConfigError, load_pool_file
    from gangscale.model.quantity import humanize

    try:
        pool_file = load_pool_file(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    rows = [("POOL", "ZONE", "MACHINE", "NODES/UNIT", "UNITS", "EACH NODE OFFERS", "TAINTS")]
    for pool in pool_file.pools:
        rows.append((pool.name, pool.zone or "-", pool.machine_type or "-", str(pool.nodes_per_unit),
                     f"{pool.min_units}..{pool.max_units}",
                     ", ".join(f"{name}: {humanize(name, value)}" for name, value in pool.allocatable.items()),
                     ", ".join(str(t) for t in pool.taints) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])
    print(f"policy: {', '.join(pool_file.policy.criteria)}; extendedResourceToleration: "
          f"{str(pool_file.policy.extended_resource_toleration).lower()}")
    return 0


async def _run_apiserver(args: argparse.Namespace) -> int:
    from gangscale.sim.apiserver import EmbeddedAPIServer
    from gangscale.sim.examples import create_example_objects, describe_server

    server = EmbeddedAPIServer(port=args.port, watch_window=args.watch_window,
                               bookmark_interval=args.bookmark_interval)
    try:
        await server.start()
    except OSError as exc:
        print(f"gangscale: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    path = server.write_kubeconfig(Path(args.kubeconfig))
    try:
        print(f"gangscale embedded API server listening on {server.url}", flush=True)
        print(f"kubeconfig written to {path.resolve()}", flush=True)
        if args.example:
            await create_example_objects(path)
        print(await describe_server(path), flush=True)
        print(f"try:  kubectl --kubeconfig {path} get nodes,provisioningrequests -A", flush=True)
        print("stop with Ctrl-C" if args.duration is None else f"stopping after {args.duration:g}s", flush=True)
        await _wait_for_stop(args.duration)
    finally:
        await server.stop()
    print("stopped", flush=True)
    return 0


async def _wait_for_stop(duration: float | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        if duration is None:
            await stop.wait()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=duration)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)


if __name__ == "__main__":
    sys.exit(main())
