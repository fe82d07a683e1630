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
  [--bookmark-interval S] [--for SECONDS] [--control]``: the embedded Kubernetes API server on 127.0.0.1, with a
  kubeconfig that kubectl and gangscale can use; runs until interrupted (or for ``--for`` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from gangscale import __version__
from gangscale.sources.provreq import DEFAULT_CLASSES


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
    _add_run(sub)
    _add_demo(sub)
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
    gcp.add_argument("--for", dest="duration", type=float, default=None,
                     help="stop after this many seconds instead of waiting for Ctrl-C")
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
    demo.add_argument("--json", dest="json_path", default=None,
                      help="also write the timelines, tables and totals as JSON to this file")
    demo.add_argument("--provider", choices=("simulated", "gke"), default="simulated",
                      help="gangscale's node-pool provider: simulated, or gke against the fake GKE and Compute "
                           "control plane (each pool becomes a GKE pool; not with --baseline)")
    demo.add_argument("--quiet", action="store_true", help="print only the tables, not the timelines")
    demo.add_argument("--verbose", action="store_true", help="show the controller's logs (INFO) on stderr")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(f"gangscale {__version__}")
        return 0
    if args.command == "pools":
        if args.from_gke:
            return asyncio.run(_pools_from_gke(args.from_gke, args.gke_container_endpoint))
        if not args.file:
            print("gangscale pools: give a pool file, or --from-gke PROJECT/LOCATION/CLUSTER", file=sys.stderr)
            return 2
        return _show_pools(args.file)
    if args.command == "run":
        return _run(args)
    if args.command == "demo":
        from gangscale.sim.demo import run as run_demo

        return run_demo(args)
    if args.command == "sim" and args.sim_command == "apiserver":
        return asyncio.run(_run_apiserver(args))
    if args.command == "sim" and args.sim_command == "gcp":
        return asyncio.run(_run_fake_gcp(args))
    return 2


def _env(name: str, default: str | None) -> str | None:
    """Every ``run`` flag can come from ``GANGSCALE_<FLAG>`` (``--batch-idle`` -> ``GANGSCALE_BATCH_IDLE``)."""
    return os.environ.get("GANGSCALE_" + name.upper().replace("-", "_"), default)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


def _add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = sub.add_parser(
        "run", help="run the controller against a cluster",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Serve ProvisioningRequests of the configured classes: plan every pending gang, scale node pools "
                    "all-or-nothing, write the outcome on each request. Every flag can also be set through the "
                    "environment as GANGSCALE_<FLAG> (for example GANGSCALE_DRY_RUN=true). Durations take a number "
                    "of seconds or units: 500ms, 10s, 5m, 1h30m, 7d.")
    flag = run.add_argument
    flag("--kubeconfig", default=_env("kubeconfig", None),
         help="kubeconfig file; without it: $KUBECONFIG, then in-cluster config, then ~/.kube/config")
    flag("--context", default=_env("context", None), help="kubeconfig context to use")
    flag("--config", default=_env("config", None), help="the node-pool file (required); see `gangscale pools FILE`")
    flag("--provider", default=_env("provider", "simulated"), choices=("simulated", "gke"),
         help="node-pool provider: simulated (a pretend cloud that registers Node objects) or gke (GKE node pools "
              "and Compute Engine instance groups; every pool needs a gke: block)")
    flag("--gke-container-endpoint", default=_env("gke-container-endpoint", None),
         help="base URL of the GKE API (default https://container.googleapis.com)")
    flag("--gke-compute-endpoint", default=_env("gke-compute-endpoint", None),
         help="base URL of the Compute Engine API (default https://compute.googleapis.com/compute/v1)")
    flag("--classes", default=_env("classes", ",".join(DEFAULT_CLASSES)),
         help="comma-separated ProvisioningRequest classes to serve; PRs of other classes are never touched")
    flag("--processor-instance", default=_env("processor-instance", ""),
         help="serve only PRs whose processorInstance parameter equals this (empty: PRs without the parameter)")
    flag("--dry-run", action="store_true", default=_truthy(_env("dry-run", "false")),
         help="read and plan everything, change nothing: no provider calls, no status writes, no events "
              "(leader election still writes its Lease)")
    flag("--metrics-host", default=_env("metrics-host", "0.0.0.0"), help="address of the observe server")
    flag("--metrics-port", type=int, default=int(_env("metrics-port", "8080") or 8080),
         help="port of /healthz, /readyz, /metrics and /debug/plans (0 picks a free one)")
    flag("--batch-idle", default=_env("batch-idle", "1s"),
         help="an idle controller plans a new request at once; while earlier scale-ups are calling the provider, "
              "requests wait for them, but at most this long after the last arrival ...")
    flag("--batch-max", default=_env("batch-max", "10s"), help="... or this long after the first")
    flag("--booking-ttl", default=_env("booking-ttl", "10m"),
         help="how long capacity stays booked after Provisioned=True (per PR: parameter bookingSeconds)")
    flag("--scale-down-unneeded-time", default=_env("scale-down-unneeded-time", "10m"),
         help="empty, unbooked units of managed pools are removed after this long")
    flag("--max-node-provision-time", default=_env("max-node-provision-time", "15m"),
         help="new nodes must be Ready this long after a scale-up starts, or every unit of it is released")
    flag("--retry-initial", default=_env("retry-initial", "1m"),
         help="first re-planning delay of a request whose capacity was not found (doubles each time) ...")
    flag("--retry-max", default=_env("retry-max", "10m"), help="... up to this")
    flag("--pool-backoff", default=_env("pool-backoff", "3m"),
         help="how long a pool is skipped after a stockout, quota error or nodes that never got Ready (doubles "
              "on repeated failures, up to 30m)")
    flag("--expiry", default=_env("expiry", "7d"), help="a request not provisioned this long after creation fails "
                                                         "with reason Expired")
    flag("--terminal-ttl", default=_env("terminal-ttl", "7d"),
         help="requests whose outcome is older than this are deleted (0 keeps them)")
    flag("--ray", action=argparse.BooleanOptionalAction, default=_truthy(_env("ray", "true")),
         help="watch autoscaling RayClusters that Kueue does not manage and provision their worker replicas as "
              "whole gangs (off by itself when the API does not serve ray.io/v1 RayClusters)")
    flag("--ray-batch-idle", default=_env("ray-batch-idle", "6s"),
         help="Ray autoscaler steps merge into one gang until the demand has not changed for this long ...")
    flag("--ray-batch-max", default=_env("ray-batch-max", "30s"), help="... or has been growing for this long")
    flag("--ray-gcs", action=argparse.BooleanOptionalAction, default=_truthy(_env("ray-gcs", "true")),
         help="read pending placement groups from each RayCluster head's GCS (needs the gangscale[ray] extra)")
    flag("--ray-gcs-interval", default=_env("ray-gcs-interval", "5s"), help="how often the GCS is read")
    flag("--leader-elect", action=argparse.BooleanOptionalAction, default=_truthy(_env("leader-elect", "true")),
         help="elect one acting replica through a coordination.k8s.io/v1 Lease; the others stay synced on standby")
    flag("--leader-elect-lease-duration", default=_env("leader-elect-lease-duration", "15s"),
         help="a replica takes the lease once it has seen it unrenewed this long")
    flag("--leader-elect-renew-deadline", default=_env("leader-elect-renew-deadline", "10s"),
         help="the leader stops acting and exits if it could not renew the lease for this long")
    flag("--leader-elect-retry-period", default=_env("leader-elect-retry-period", "2s"),
         help="how often the lease is renewed, or tried for")
    flag("--leader-elect-lease-name", default=_env("leader-elect-lease-name", "gangscale"), help="the Lease's name")
    flag("--leader-elect-namespace", default=_env("leader-elect-namespace", None),
         help="the Lease's namespace (default: the pod's namespace, else default)")
    flag("--leader-elect-identity", default=_env("leader-elect-identity", None),
         help="this replica's identity in the Lease (default: $POD_NAME, else hostname_<random>)")
    flag("--api-unreachable-timeout", default=_env("api-unreachable-timeout", "60s"),
         help="/readyz fails when no API request has succeeded for this long")
    flag("--log-format", default=_env("log-format", "json"), choices=("json", "text"), help="log line format")
    flag("--log-level", default=_env("log-level", "info"), help="debug, info, warning or error")
    flag("--for", dest="duration", type=float, default=None, help="stop after this many seconds (for demos and tests)")


def _run(args: argparse.Namespace) -> int:
    from gangscale.config import ConfigError, load_pool_file, parse_duration
    from gangscale.controller.app import RunOptions, serve
    from gangscale.controller.settings import Settings
    from gangscale.kube.lease import LeaseConfig
    from gangscale.observe.logs import configure_logging

    try:
        configure_logging(args.log_level, args.log_format)
    except ValueError as exc:
        print(f"gangscale run: {exc}", file=sys.stderr)
        return 2
    if not args.config:
        print("gangscale run: --config (or GANGSCALE_CONFIG) is required: the node-pool file", file=sys.stderr)
        return 2
    try:
        pool_file = load_pool_file(args.config)
    except ConfigError as exc:
        print(f"gangscale run: {exc}", file=sys.stderr)
        return 2
    try:
        durations = {name: parse_duration(getattr(args, name)) for name in (
            "batch_idle", "batch_max", "booking_ttl", "scale_down_unneeded_time", "max_node_provision_time",
            "retry_initial", "retry_max", "pool_backoff", "expiry", "terminal_ttl", "ray_batch_idle",
            "ray_batch_max", "ray_gcs_interval", "leader_elect_lease_duration", "leader_elect_renew_deadline",
            "leader_elect_retry_period", "api_unreachable_timeout")}
    except ValueError as exc:
        print(f"gangscale run: {exc}", file=sys.stderr)
        return 2
    if args.provider == "gke" and (bare := [pool.name for pool in pool_file.pools if "gke" not in pool.provider]):
        print(f"gangscale run: --provider gke needs a gke: block (project, location, cluster, mode) on every pool; "
              f"{args.config} has none on {', '.join(bare)}", file=sys.stderr)
        return 2
    classes = tuple(c.strip() for c in args.classes.split(",") if c.strip())
    if not classes:
        print("gangscale run: --classes names no class", file=sys.stderr)
        return 2
    settings = Settings(
        classes=classes, processor_instance=args.processor_instance, dry_run=args.dry_run,
        batch_idle=durations["batch_idle"], batch_max=durations["batch_max"], booking_ttl=durations["booking_ttl"],
        scale_down_unneeded_time=durations["scale_down_unneeded_time"],
        max_node_provision_time=durations["max_node_provision_time"], retry_initial=durations["retry_initial"],
        retry_max=durations["retry_max"], pool_backoff_initial=durations["pool_backoff"],
        expiry=durations["expiry"], terminal_ttl=durations["terminal_ttl"], ray=args.ray,
        ray_batch_idle=durations["ray_batch_idle"], ray_batch_max=durations["ray_batch_max"], ray_gcs=args.ray_gcs,
        ray_gcs_interval=durations["ray_gcs_interval"], api_unreachable_timeout=durations["api_unreachable_timeout"])
    lease = None
    if args.leader_elect:
        identity = args.leader_elect_identity or os.environ.get("POD_NAME") or \
            f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        try:
            lease = LeaseConfig(args.leader_elect_namespace or _pod_namespace(), args.leader_elect_lease_name,
                                identity, lease_duration=durations["leader_elect_lease_duration"],
                                renew_deadline=durations["leader_elect_renew_deadline"],
                                retry_period=durations["leader_elect_retry_period"])
        except ValueError as exc:
            print(f"gangscale run: {exc}", file=sys.stderr)
            return 2
        settings = dataclasses.replace(settings, identity=identity)
    options = RunOptions(pool_file=pool_file, settings=settings, provider=args.provider, kubeconfig=args.kubeconfig,
                         context=args.context, metrics_host=args.metrics_host, metrics_port=args.metrics_port,
                         duration=args.duration, gke_container_endpoint=args.gke_container_endpoint,
                         gke_compute_endpoint=args.gke_compute_endpoint, lease=lease)
    try:
        return asyncio.run(serve(options))
    except RuntimeError as exc:
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
    from gangscale.sim.apiserver import EmbeddedAPIServer
    from gangscale.sim.examples import create_example_objects, describe_server

    server = EmbeddedAPIServer(port=args.port, watch_window=args.watch_window,
                               bookmark_interval=args.bookmark_interval, control=args.control)
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


async def _run_fake_gcp(args: argparse.Namespace) -> int:
    from gangscale.clock import SystemClock
    from gangscale.config import ConfigError, load_pool_file
    from gangscale.kube.client import make_http
    from gangscale.sim.gcp import FakeGcp
    from gangscale.sim.gcp.standalone import project_of, set_up

    try:
        pools = load_pool_file(args.config).pools
        project = project_of(pools)
    except (ConfigError, ValueError) as exc:
        print(f"gangscale sim gcp: {exc}", file=sys.stderr)
        return 2
    kube = await make_http(args.kubeconfig, user_agent="gangscale-fake-gcp")
    gcp = FakeGcp(SystemClock(), kube, project=project, port=args.port)
    gcp.faults.operation_seconds = args.operation_seconds
    gcp.faults.ready_seconds = args.ready_seconds
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
