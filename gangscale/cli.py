"""The ``gangscale`` command line.

Commands available now:

- ``gangscale run --config POOLS [flags]``: the controller (``gangscale run --help`` documents every flag).
- ``gangscale demo [--scenario NAME|FILE] [--baseline] [--speed N] [--json FILE] [--quiet] [--verbose]``: a
  whole simulated cluster (Kueue, jobs, scheduler, cloud, the real controller) on simulated time; see
  :mod:`gangscale.sim.demo`.
- ``gangscale version``
- ``gangscale pools FILE``: validate a node-pool file and show the pools it resolves to (exit 1 and every
  problem on stderr if it is invalid).
- ``gangscale sim apiserver [--port N] [--kubeconfig PATH] [--example] [--watch-window N]
  [--bookmark-interval S] [--for SECONDS] [--control] [--node-lifecycle ...]``: the embedded Kubernetes API server
  on 127.0.0.1, with a kubeconfig that kubectl and gangscale can use; runs until interrupted (or for ``--for``
  seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gangscale import __version__, awscli, explaincmd

if TYPE_CHECKING:
    from gangscale.flags import RunFlags


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangscale", description="Gang-aware, all-or-nothing node pool autoscaler.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version and exit")
    pools = sub.add_parser("pools", help="validate a node-pool file and show the pools it resolves to, or write "
                                         "one from a GKE cluster",
                           description="Validate a node-pool file and print each pool as gangscale resolves it "
                                       "(machine catalog applied). Exits 1, listing every problem, if it is invalid. "
                                       "With --from-gke, print a pool file made from a GKE cluster's node pools "
                                       "instead (Application Default Credentials).")
    pools.add_argument("file", nargs="?", help="the node-pool YAML file")
    pools.add_argument("--from-gke", metavar="PROJECT/LOCATION/CLUSTER", default=None,
                       help="read the cluster's node pools and print a pool file for them")
    pools.add_argument("--gke-container-endpoint", default=_env("gke-container-endpoint", None),
                       help="base URL of the GKE API (default https://container.googleapis.com)")
    awscli.add_from_eks(pools)
    _add_run(sub)
    _add_demo(sub)
    explaincmd.add_parser(sub)
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
    api.add_argument("--control", action="store_true",
                     help="serve the fault-injection knobs over HTTP under /_sim/ (for crash and chaos harnesses)")
    api.add_argument("--node-lifecycle", action="store_true",
                     help="run the node lifecycle controller's health monitoring, as kube-controller-manager does: a "
                          "Node whose kubelet renews no Lease and posts no status goes Unknown with the unreachable "
                          "taints (off by default: Nodes created without a kubelet, e.g. by --example, go Unknown)")
    api.add_argument("--node-monitor-grace-period", type=float, default=50.0,
                     help="with --node-lifecycle: seconds without a heartbeat before a Node is Unknown (default 50)")
    api.add_argument("--node-startup-grace-period", type=float, default=60.0,
                     help="with --node-lifecycle: the same for a Node that never posted Ready (default 60)")
    api.add_argument("--node-monitor-period", type=float, default=5.0,
                     help="with --node-lifecycle: how often the monitor looks, in seconds (default 5)")
    gcp = sim_sub.add_parser(
        "gcp", help="run the fake GKE + Compute Engine control plane (and metadata server) until interrupted",
        description="Run the fake Google Cloud that the gke provider's tests use: GKE node pools, Compute Engine "
                    "instance groups and the metadata server on one local port, set up from a pool file's gke "
                    "blocks. Each VM registers a Node in the Kubernetes API server of --kubeconfig.")
    gcp.add_argument("--config", required=True, help="the node-pool file whose gke blocks name the clusters to fake")
    gcp.add_argument("--kubeconfig", required=True, help="the API server where VMs register their Nodes")
    gcp.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1; 0 picks a free one (default 0)")
    gcp.add_argument("--operation-seconds", type=float, default=0.0,
                     help="how long each GKE operation runs (default 0)")
    gcp.add_argument("--ready-seconds", type=float, default=0.0,
                     help="how long a VM's Node takes to turn Ready after it registers (default 0)")
    gcp.add_argument("--node-delete-seconds", type=float, default=0.0,
                     help="how long a deleted VM's Node stays registered, as GKE's node lifecycle controller takes "
                          "a while to remove it (default 0)")
    gcp.add_argument("--for", dest="duration", type=float, default=None,
                     help="stop after this many seconds instead of waiting for Ctrl-C")
    awscli.add_sim_aws(sim_sub)
    return p


def _add_demo(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    # Declared here, not in gangscale.sim.demo, so that building the parser never imports the simulated cluster.
    demo = sub.add_parser(
        "demo", help="run a scenario end to end on the simulated cluster (Kueue, jobs, scheduler, gangscale)",
        description="Run the embedded API server, the Kueue and job emulators, a scheduler, the simulated "
                    "cloud and the real gangscale controller on simulated time, and print a timeline and a "
                    "table per workload. Built-in scenarios: tpu-multislice (default), ray-priority, "
                    "ray-autoscaling, stockout-fallback.")
    demo.add_argument("--scenario", default="tpu-multislice",
                      help="a built-in scenario name or a scenario YAML file (default tpu-multislice)")
    demo.add_argument("--baseline", action="store_true",
                      help="also run the scenario with a classic per-pod autoscaler and compare the two")
    demo.add_argument("--speed", type=float, default=None,
                      help="pace the run at N simulated seconds per real second (default: as fast as possible)")
    demo.add_argument("--json", dest="json_path", default=None, metavar="FILE",
                      help="also write the timelines, tables and totals as JSON to this file; '-' writes the JSON "
                           "to stdout and prints everything else (scenario, timelines, tables) on stderr")
    demo.add_argument("--plot", dest="plot_path", default=None, metavar="FILE",
                      help="also draw the runs as an SVG picture in FILE: each workload's queued/waiting/running "
                           "bars and each pool's nodes over simulated minutes, the baseline under gangscale on "
                           "the same time axis with --baseline (SVG only: a .png name is refused)")
    demo.add_argument("--provider", choices=("simulated", "gke", "aws"), default="simulated",
                      help="gangscale's node-pool provider: simulated, gke against the fake GKE and Compute "
                           "control plane (each pool becomes a GKE pool), or aws against the fake EC2 (each pool "
                           "becomes an EKS pool of EC2 instances; TPU hosts become 4-GPU instances); not with "
                           "--baseline")
    demo.add_argument("--quiet", action="store_true",
                      help="print only the tables: no timelines and no progress. Progress otherwise goes to "
                           "stderr while a run goes: one status line rewritten in place when stderr is a "
                           "terminal, else a line every 5 s of wall time")
    demo.add_argument("--verbose", action="store_true", help="show the controller's logs (INFO) on stderr")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(f"gangscale {__version__}")
        return 0
    if args.command == "pools":
        if args.from_gke:
            return asyncio.run(_pools_from_gke(args.from_gke, args.gke_container_endpoint))
        if args.from_eks:
            return asyncio.run(awscli.pools_from_eks(args.from_eks, args.region, args.aws_endpoint))
        if not args.file:
            print("gangscale pools: give a pool file, --from-gke PROJECT/LOCATION/CLUSTER or --from-eks CLUSTER",
                  file=sys.stderr)
            return 2
        return _show_pools(args.file)
    if args.command == "run":
        return _run(args)
    if args.command == "explain":
        return explaincmd.run(args)
    if args.command == "demo":
        from gangscale.sim.demo import run as run_demo

        return run_demo(args)
    if args.command == "sim" and args.sim_command == "apiserver":
        return asyncio.run(_run_apiserver(args))
    if args.command == "sim" and args.sim_command == "aws":
        return asyncio.run(awscli.run_fake_ec2(args))
    if args.command == "sim" and args.sim_command == "gcp":
        return asyncio.run(_run_fake_gcp(args))
    return 2


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get("GANGSCALE_" + name.upper().replace("-", "_"), default)


def _add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gangscale.flags import add_run_flags

    run = sub.add_parser(
        "run", help="run the controller against a cluster",
        description="Serve ProvisioningRequests of the configured classes: plan every pending gang, scale node pools "
                    "all-or-nothing, write the outcome on each request. Every flag can also be set through the "
                    "environment as GANGSCALE_<FLAG> (for example GANGSCALE_DRY_RUN=true); the command line wins. "
                    "Booleans are true/false/1/0 (as Go's strconv.ParseBool reads them). Durations take a number "
                    "of seconds or units: 500ms, 10s, 5m, 1h30m, 7d.")
    add_run_flags(run)


def run_flags(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> RunFlags:
    """The typed flags ``gangscale run ARGV`` would run with (with ``environ`` as its environment; none by
    default): what the deployment tests check a manifest's arguments with. Raises FlagError or SystemExit."""
    from gangscale.flags import resolve

    args = _parser().parse_args(["run", *argv] if not argv or argv[0] != "run" else argv)
    return resolve(args, environ or {})


def _run(args: argparse.Namespace) -> int:
    from gangscale.config import ConfigError, load_pool_file
    from gangscale.controller.app import RunOptions, StartupError, serve
    from gangscale.flags import FlagError, resolve, unknown_variables
    from gangscale.observe.logs import configure_logging

    try:
        flags = resolve(args)
    except FlagError as exc:
        print(f"gangscale run: {exc}", file=sys.stderr)
        return 2
    for name in unknown_variables():
        print(f"gangscale run: warning: {name} is set but names no flag of gangscale run; ignored", file=sys.stderr)
    configure_logging(flags.log_level, flags.log_format)
    if not flags.config:
        print("gangscale run: --config (or GANGSCALE_CONFIG) is required: the node-pool file", file=sys.stderr)
        return 2
    if not flags.provider:
        print("gangscale run: --provider (or GANGSCALE_PROVIDER) is required: gke, aws, or simulated (a pretend cloud "
              "for test clusters and the demo: it creates Node objects)", file=sys.stderr)
        return 2
    try:
        pool_file = load_pool_file(flags.config)
    except ConfigError as exc:
        print(f"gangscale run: {exc}", file=sys.stderr)
        return 2
    blocks = {"gke": "project, location, cluster, mode", "aws": "region, cluster, launchTemplate, subnet"}
    if flags.provider in blocks and \
            (bare := [pool.name for pool in pool_file.pools if flags.provider not in pool.provider]):
        print(f"gangscale run: --provider {flags.provider} needs {'an' if flags.provider == 'aws' else 'a'} "
              f"{flags.provider}: block ({blocks[flags.provider]}) "
              f"on every pool; {flags.config} has none on {', '.join(bare)}", file=sys.stderr)
        return 2
    try:
        options = RunOptions.from_flags(flags, pool_file, _pod_namespace)
    except ValueError as exc:
        print(f"gangscale run: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(options))
    except StartupError as exc:  # one line, no traceback: what could not be reached, read or bound
        print(f"gangscale run: {exc}", file=sys.stderr)
        return 1


async def _pools_from_gke(where: str, endpoint: str | None) -> int:
    from gangscale.providers.gke.auth import GoogleAuthTokens
    from gangscale.providers.gke.client import GcpError, GcpHttp
    from gangscale.providers.gke.discover import pool_file_from_gke
    from gangscale.providers.gke.provider import endpoints_from

    parts = where.split("/")
    if len(parts) != 3 or not all(parts):
        print(f"gangscale pools: --from-gke wants PROJECT/LOCATION/CLUSTER, got {where!r}", file=sys.stderr)
        return 2
    http = GcpHttp(GoogleAuthTokens(), endpoints_from(endpoint, None))
    try:
        text, refused = await pool_file_from_gke(http, *parts)
    except GcpError as exc:
        print(f"gangscale pools: cannot read the node pools of {where}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # credentials: google-auth raises its own errors (DefaultCredentialsError, ...)
        print(f"gangscale pools: cannot read the node pools of {where}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    finally:
        await http.aclose()
    for line in refused:
        print(f"gangscale pools: left out {line}", file=sys.stderr)
    print(text, end="")
    return 0


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _pod_namespace() -> str:
    """The namespace the pod runs in (its service account's), else ``$POD_NAMESPACE``, else ``default``."""
    try:
        return Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or "default"
    except OSError:
        return os.environ.get("POD_NAMESPACE") or "default"


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
    from gangscale.clock import SystemClock
    from gangscale.sim.apiserver import EmbeddedAPIServer
    from gangscale.sim.apiserver.nodehealth import NodeMonitorSettings
    from gangscale.sim.examples import create_example_objects, describe_server

    server = EmbeddedAPIServer(port=args.port, watch_window=args.watch_window,
                               bookmark_interval=args.bookmark_interval, control=args.control)
    try:
        await server.start()
    except OSError as exc:
        print(f"gangscale: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    path = server.write_kubeconfig(Path(args.kubeconfig))
    if args.node_lifecycle:
        server.controllers.monitor_node_health(SystemClock(), NodeMonitorSettings(
            grace_period=args.node_monitor_grace_period, startup_grace_period=args.node_startup_grace_period,
            period=args.node_monitor_period))
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


async def _run_fake_gcp(args: argparse.Namespace) -> int:
    from gangscale.clock import SystemClock
    from gangscale.config import ConfigError, load_pool_file
    from gangscale.controller.preflight import StartupError, connect
    from gangscale.sim.gcp import FakeGcp
    from gangscale.sim.gcp.standalone import project_of, set_up

    try:
        pools = load_pool_file(args.config).pools
        project = project_of(pools)
    except (ConfigError, ValueError) as exc:
        print(f"gangscale sim gcp: {exc}", file=sys.stderr)
        return 2
    try:
        kube = await connect(args.kubeconfig, None, "gangscale-fake-gcp")
    except StartupError as exc:
        print(f"gangscale sim gcp: {exc}", file=sys.stderr)
        return 1
    gcp = FakeGcp(SystemClock(), kube, project=project, port=args.port, heartbeats=True)
    gcp.faults.operation_seconds = args.operation_seconds
    gcp.faults.ready_seconds = args.ready_seconds
    gcp.faults.node_delete_seconds = args.node_delete_seconds
    set_up(gcp, pools)
    try:
        try:
            await gcp.start()
        except OSError as exc:
            print(f"gangscale sim gcp: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 1
        host = gcp.url.removeprefix("http://")
        print(f"fake GCP listening on {gcp.url}", flush=True)
        print(gcp.describe(), flush=True)
        print(f"try:  GCE_METADATA_HOST={host} GCE_METADATA_IP={host} gangscale run --provider gke "
              f"--gke-container-endpoint {gcp.url} --gke-compute-endpoint {gcp.url}/compute/v1 "
              f"--config {args.config} --kubeconfig {args.kubeconfig}", flush=True)
        print("stop with Ctrl-C" if args.duration is None else f"stopping after {args.duration:g}s", flush=True)
        await _wait_for_stop(args.duration)
    finally:
        await gcp.stop()
        await kube.api_client.close()
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
