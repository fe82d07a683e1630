"""``gangscale run``: wire the client, the provider, the controller and the observe server, run until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from gangscale import __version__
from gangscale.aio import cancel_and_wait
from gangscale.clock import SystemClock
from gangscale.config import PoolFile
from gangscale.controller.logic.settings import Settings
from gangscale.controller.loop import Controller
from gangscale.controller.preflight import StartupError, connect, wait_for_api
from gangscale.flags import RunFlags
from gangscale.kube.lease import LeaseConfig, LeaseElector
from gangscale.observe.metrics import Metrics
from gangscale.observe.server import ObserveServer
from gangscale.providers.aws import AwsProvider
from gangscale.providers.base import NodePoolProvider, ProviderError, unfenced
from gangscale.providers.gke.provider import GkeProvider, endpoints_from
from gangscale.providers.simulated import SimulatedProvider

__all__ = ["RunOptions", "StartupError", "serve", "user_agent"]

log = logging.getLogger(__name__)
PROVIDERS = ("simulated", "gke", "aws")


@dataclass(frozen=True)
class RunOptions:
    pool_file: PoolFile
    settings: Settings
    provider: str = "simulated"
    kubeconfig: str | None = None
    context: str | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    duration: float | None = None
    #: The gke provider's API base URLs (None: Google's).
    gke_container_endpoint: str | None = None
    gke_compute_endpoint: str | None = None
    aws_endpoint: str | None = None
    #: Leader election (None: off, this process acts alone).
    lease: LeaseConfig | None = None
    #: The namespace gangscale runs in: the gke provider's queued-provisioning requests are made there.
    namespace: str = "default"

    @classmethod
    def from_flags(cls, flags: RunFlags, pool_file: PoolFile, pod_namespace: Callable[[], str]) -> RunOptions:
        """The options ``gangscale run`` was given; ValueError for an inconsistent lease configuration."""
        settings = Settings(
            classes=flags.classes, processor_instance=flags.processor_instance, dry_run=flags.dry_run,
            batch_idle=flags.batch_idle, batch_max=flags.batch_max, booking_ttl=flags.booking_ttl,
            scale_down_unneeded_time=flags.scale_down_unneeded_time,
            max_node_provision_time=flags.max_node_provision_time,
            booked_node_unready_grace=flags.booked_node_unready_grace, retry_initial=flags.retry_initial,
            retry_max=flags.retry_max, pool_backoff_initial=flags.pool_backoff,
            pool_health_window=flags.pool_health_window, pool_unhealthy_ratio=flags.pool_unhealthy_ratio,
            pool_unhealthy_cooldown=flags.pool_unhealthy_cooldown, expiry=flags.expiry,
            terminal_ttl=flags.terminal_ttl, ray=flags.ray, ray_batch_idle=flags.ray_batch_idle,
            ray_batch_max=flags.ray_batch_max, ray_gcs=flags.ray_gcs, ray_gcs_interval=flags.ray_gcs_interval,
            api_unreachable_timeout=flags.api_unreachable_timeout)
        lease = None
        if flags.leader_elect:
            identity = flags.leader_elect_identity or os.environ.get("POD_NAME") or \
                f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
            lease = LeaseConfig(flags.leader_elect_namespace or pod_namespace(), flags.leader_elect_lease_name,
                                identity, lease_duration=flags.leader_elect_lease_duration,
                                renew_deadline=flags.leader_elect_renew_deadline,
                                retry_period=flags.leader_elect_retry_period)
            settings = dataclasses.replace(settings, identity=identity)
        return cls(pool_file=pool_file, settings=settings, provider=flags.provider, kubeconfig=flags.kubeconfig,
                   context=flags.context, metrics_host=flags.metrics_host, metrics_port=flags.metrics_port,
                   duration=flags.duration, gke_container_endpoint=flags.gke_container_endpoint,
                   gke_compute_endpoint=flags.gke_compute_endpoint, aws_endpoint=flags.aws_endpoint, lease=lease,
                   namespace=pod_namespace())


async def serve(options: RunOptions) -> int:
    clock = SystemClock()
    http = await connect(options.kubeconfig, options.context, user_agent("gangscale", options.lease))
    try:
        await wait_for_api(http, options.settings.api_unreachable_timeout)
    except BaseException:
        await http.api_client.close()
        raise
    elector = LeaseElector(http, clock, options.lease) if options.lease is not None else None
    fence = elector.valid if elector is not None else unfenced
    cloud_http = None
    provider: NodePoolProvider
    if options.provider == "aws":
        provider = AwsProvider(options.pool_file.pools, clock, fence=fence,
                               user_agent=user_agent("gangscale", options.lease), endpoint_url=options.aws_endpoint)
    elif options.provider == "gke":
        provider = GkeProvider(options.pool_file.pools, clock, fence=fence,
                               user_agent=user_agent("gangscale", options.lease), kube=http,
                               namespace=options.namespace,
                               endpoints=endpoints_from(options.gke_container_endpoint, options.gke_compute_endpoint))
    else:
        # The simulated cloud registers nodes under its own name, as a real cloud's kubelets would: audit logs
        # (and the RBAC test) can tell its writes from the controller's.
        cloud_http = await connect(options.kubeconfig, options.context,
                                   user_agent("gangscale-simulated-cloud", options.lease))
        # A dry run writes nothing to the cluster, the simulated kubelets' Leases and node status included, nor the
        # simulated cloud's spot reclaims.
        provider = SimulatedProvider(cloud_http, options.pool_file.pools, clock, fence=fence,
                                     heartbeats=not options.settings.dry_run, reclaims=not options.settings.dry_run)
    metrics = Metrics(dry_run=options.settings.dry_run)
    controller = Controller(http, provider, options.pool_file.pools, settings=options.settings,
                            policy=options.pool_file.policy, clock=clock, metrics=metrics, leader=elector, tune_gc=True)
    server = ObserveServer(host=options.metrics_host, port=options.metrics_port, metrics=metrics,
                           healthy=controller.healthy, ready=controller.is_ready, plans=controller.debug_plans)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await server.start()
        except OSError as exc:
            raise StartupError(f"cannot serve /metrics and the probes on {options.metrics_host}:"
                               f"{options.metrics_port}: {exc.strerror or exc}") from None
        log.info("serving /healthz, /readyz, /metrics and /debug/plans on %s:%d", options.metrics_host, server.port)
        return await _supervise(controller, elector, provider.name, stop, options.duration)
    finally:
        await server.stop()
        await provider.aclose()
        if cloud_http is not None:
            await cloud_http.api_client.close()
        await http.api_client.close()


async def _supervise(controller: Controller, elector: LeaseElector | None, provider: str, stop: asyncio.Event,
                     duration: float | None) -> int:
    """Run the controller (and the election) until stopped, the lease is lost or the controller fails."""
    runner = asyncio.create_task(controller.run(), name="controller")
    stopper = asyncio.create_task(_stop_after(stop, duration), name="stop")
    tasks = {runner, stopper}
    election = asyncio.create_task(elector.run(), name="leader election") if elector is not None else None
    if election is not None:
        tasks.add(election)
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    await cancel_and_wait(tasks)
    if election is not None and election in done and stopper not in done:
        # The lease could not be renewed in time: stop acting at once and let another replica take over.
        log.error("the leader lease was lost; exiting so that another replica takes over")
        return 1
    if elector is not None:
        await elector.release()
    if runner in done and (error := runner.exception()) is not None:
        if isinstance(error, ProviderError):  # a refusal with its reason, not a crash
            log.error("the controller stopped: the %s provider cannot run: %s", provider, error)
        else:
            log.error("the controller stopped", exc_info=error)
        return 1
    log.info("stopped")
    return 0


def user_agent(program: str, lease: LeaseConfig | None) -> str:
    """``program/version (identity)``: an audit log (or a test's request log) tells the replicas apart."""
    return f"{program}/{__version__}" + (f" ({lease.identity})" if lease is not None else "")


async def _stop_after(stop: asyncio.Event, duration: float | None) -> None:
    if duration is None:
        await stop.wait()
    else:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=duration)
