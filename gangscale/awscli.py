"""The aws parts of the command line: ``gangscale pools --from-eks CLUSTER`` and ``gangscale sim aws``.

Kept apart from :mod:`gangscale.cli` so that nothing of AWS's SDK is imported unless one of them runs (aiobotocore
and botocore's models cost time and memory: docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import Any


def add_sim_aws(sim_sub: Any) -> None:
    aws = sim_sub.add_parser(
        "aws", help="run the fake EC2 (and EKS, Auto Scaling) until interrupted",
        description="Run the fake EC2 that the aws provider's tests use, shaped by botocore's EC2 model: CreateFleet, "
                    "instances, launch templates, subnets and capacity reservations on one local port, set up "
                    "from a pool file's aws blocks (EKS's node groups and Auto Scaling groups on the same port). "
                    "Each instance registers a Node in the Kubernetes API server of --kubeconfig.")
    aws.add_argument("--config", required=True, help="the node-pool file whose aws blocks name what to fake")
    aws.add_argument("--kubeconfig", required=True, help="the API server where instances register their Nodes")
    aws.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1; 0 picks a free one (default 0)")
    aws.add_argument("--for", dest="duration", type=float, default=None,
                     help="stop after this many seconds instead of waiting for Ctrl-C")


def add_from_eks(pools: Any) -> None:
    pools.add_argument("--from-eks", metavar="CLUSTER", default=None,
                       help="read the EKS cluster's managed node groups and print a pool file for them "
                            "(AWS credentials from botocore's default chain)")
    pools.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
                       help="with --from-eks: the cluster's region (default $AWS_REGION)")
    pools.add_argument("--aws-endpoint", default=os.environ.get("GANGSCALE_AWS_ENDPOINT"),
                       help="with --from-eks: one base URL for the EKS, EC2 and Auto Scaling APIs (the fake); "
                            "botocore's AWS_ENDPOINT_URL_<SERVICE> variables work too")


async def pools_from_eks(cluster: str, region: str | None, endpoint: str | None) -> int:
    from aiobotocore.session import get_session  # noqa: PLC0415 (AWS's SDK only when asked for)

    from gangscale.providers.aws.eksdiscover import pool_file_from_eks  # noqa: PLC0415

    if not region:
        print("gangscale pools: --from-eks needs the cluster's region (--region or $AWS_REGION)", file=sys.stderr)
        return 2
    session = get_session()
    extra = {"endpoint_url": endpoint} if endpoint else {}
    try:
        async with session.create_client("eks", region_name=region, **extra) as eks, \
                session.create_client("ec2", region_name=region, **extra) as ec2, \
                session.create_client("autoscaling", region_name=region, **extra) as autoscaling:
            text, refused = await pool_file_from_eks(eks, ec2, cluster, region, autoscaling_client=autoscaling)
    except Exception as exc:  # botocore's ClientError of an AWS error code, its credential and connection errors
        print(f"gangscale pools: cannot read the node groups of EKS cluster {cluster} ({region}): "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for line in refused:
        print(f"gangscale pools: left out {line}", file=sys.stderr)
    print(text, end="")
    return 0


async def run_fake_ec2(args: argparse.Namespace) -> int:
    from gangscale.config import ConfigError, load_pool_file  # noqa: PLC0415
    from gangscale.controller.preflight import StartupError, connect  # noqa: PLC0415
    from gangscale.sim.aws.server import FakeEc2  # noqa: PLC0415
    from gangscale.sim.aws.standalone import region_of_pools, serve  # noqa: PLC0415

    try:
        pools = load_pool_file(args.config).pools
        region_of_pools(pools)
    except (ConfigError, ValueError) as exc:
        print(f"gangscale sim aws: {exc}", file=sys.stderr)
        return 2
    try:
        kube = await connect(args.kubeconfig, None, "gangscale-fake-ec2")
    except StartupError as exc:
        print(f"gangscale sim aws: {exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()

    def ready(ec2: FakeEc2) -> None:
        print(f"fake EC2 listening on {ec2.url}", flush=True)
        print(ec2.describe(), flush=True)
        print(f"try:  AWS_ACCESS_KEY_ID=fake AWS_SECRET_ACCESS_KEY=fake gangscale run --provider aws "
              f"--aws-endpoint {ec2.url} --config {args.config} --kubeconfig {args.kubeconfig}", flush=True)
        print("stop with Ctrl-C" if args.duration is None else f"stopping after {args.duration:g}s", flush=True)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if args.duration is not None:
        loop.call_later(args.duration, stop.set)
    try:
        code = await serve(pools, kube, port=args.port, ready=ready, stop=stop)
    finally:
        await kube.api_client.close()
    if code:
        print(f"gangscale sim aws: cannot listen on 127.0.0.1:{args.port}", file=sys.stderr)
        return code
    print("stopped", flush=True)
    return 0
