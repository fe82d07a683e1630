"""Prometheus metrics for the controller, in a registry of its own.

Each :class:`Metrics` owns a private :class:`~prometheus_client.CollectorRegistry` instead of the process-wide
default one, so that several controllers (tests, the demo) can live in one process without clashing series.

Series recording a decision or an action carry ``dry_run="true"|"false"`` from the constructor's flag, so that a
shadow deployment beside a live autoscaler can be told apart on the same dashboards.

Series (the names and labels are the public API):

``gangscale_provisioning_request_outcomes_total{class, outcome, dry_run}`` (counter)
    One per condition outcome written to a ProvisioningRequest; ``outcome`` is the condition reason, e.g.
    ``CapacityIsProvisioned``, ``CapacityIsNotFound``, ``FailedToCreatePods``. :meth:`Metrics.outcome`.
``gangscale_decision_latency_seconds{class, condition, dry_run}`` (histogram)
    Time from a ProvisioningRequest's creation to each of its conditions (``Accepted``, ``Provisioned``,
    ``Failed``, ``BookingExpired``, ``CapacityRevoked``); buckets 5 ms .. 1 h. :meth:`Metrics.condition_latency`.
``gangscale_provisioning_requests{class, state}`` (gauge)
    ProvisioningRequests per class and state (``pending``, ``provisioning``, ``booked``, ``failed``, ``done``).
    :meth:`Metrics.set_requests`, replace semantics.
``gangscale_pool_units{pool, state}`` (gauge)
    Units per node pool and state (``ready``, ``provisioning``, ``booked``, ``idle``). :meth:`Metrics.set_pool_units`,
    replace semantics.
``gangscale_provider_call_duration_seconds{provider, operation}`` (histogram)
    Duration of each cloud provider call, failed ones included. :meth:`Metrics.provider_call`.
``gangscale_provider_errors_total{provider, operation, error_class}`` (counter)
    Failed provider calls by error class. :meth:`Metrics.provider_call`.
``gangscale_bookings`` (gauge)
    ProvisioningRequests holding booked capacity. :meth:`Metrics.set_bookings`.
``gangscale_leader`` (gauge)
    1 while this replica holds the leader lease (or runs without leader election). :meth:`Metrics.set_leader`.
``gangscale_pool_backoffs_total{pool, reason}`` (counter)
    Times a pool was put in backoff. :meth:`Metrics.backoff`.
``gangscale_pool_backed_off{pool}`` (gauge)
    1 for each pool currently in backoff. :meth:`Metrics.set_backed_off`, replace semantics.
``gangscale_pool_unhealthy{pool}`` (gauge)
    1 for each pool currently unhealthy (too many of its last scale-ups failed: it is skipped until its cooldown
    ends; it is backed off meanwhile too). :meth:`Metrics.set_unhealthy`, replace semantics.
``gangscale_pool_scale_up_outcomes_total{pool, outcome}`` (counter)
    Scale-up outcomes per pool, one per pool per scale-up: ``success`` (every node Ready), ``timeout`` (nodes
    never Ready), ``partial`` (the cloud granted part of the units), ``stockout``, ``quota``, ``error``.
    :meth:`Metrics.pool_scale_up_outcome`.
``gangscale_scaled_units_total{pool, direction, dry_run}`` (counter)
    Units scaled up or down (``direction`` is ``up`` or ``down``). :meth:`Metrics.scaled`.
``gangscale_pass_duration_seconds`` (histogram)
    Duration of each whole controller pass. :meth:`Metrics.pass_finished`.
``gangscale_plan_pass_duration_seconds`` (histogram)
    Duration of each planning pass. :meth:`Metrics.plan_pass`.
``gangscale_gangs_planned`` (gauge)
    Gangs considered in the last planning pass. :meth:`Metrics.plan_pass`.
``gangscale_last_pass_timestamp_seconds`` (gauge)
    Unix time at which the controller's last pass ended (every pass, planning or not: an idle controller still
    passes at least once a minute, so a value that stops moving means a stuck loop). 0 until the first pass,
    and on a standby replica, which runs no passes. :meth:`Metrics.pass_finished`.
``gangscale_build_info{version, python_version}`` (gauge)
    Always 1: the running gangscale version (``gangscale.__version__``) and Python version.
``process_*``, ``python_info``, ``python_gc_*``
    prometheus_client's process (CPU seconds, resident memory, open file descriptors, start time; Linux only),
    platform and garbage-collector collectors, registered on this registry as they would be on the default one.
``gangscale_ray_gang_events_total{namespace, raycluster, reason, dry_run}`` (counter)
    Events about Ray gangs per RayCluster, by Event reason (``ScaleUp``, ``Provisioned``, ``CapacityNotFound``,
    ``ScaleUpFailed``, ``ScaleUpTimedOut``, ``GangWithdrawn``, ``GangPlaced``, ``GangUnplaceable``,
    ``InvalidRayCluster``). :meth:`Metrics.ray_event`.
``gangscale_ray_missing_replicas{namespace, raycluster, group}`` (gauge)
    Worker replicas a RayCluster wants that have no node and none coming. :meth:`Metrics.set_ray_missing`,
    replace semantics.
``gangscale_ray_gcs_reachable{namespace, raycluster}`` (gauge)
    1 when the last read of the RayCluster head's GCS succeeded, else 0 (only with the ``gangscale[ray]`` extra).
    :meth:`Metrics.set_ray_gcs`, replace semantics.
``gangscale_watch_healthy{resource}`` (gauge)
    1 while the list-and-watch cache of the resource is current, 0 once its reflector stopped or has failed past
    ``--api-unreachable-timeout`` without progress (``/readyz`` fails and nothing is decided then).
    :meth:`Metrics.set_watches`, replace semantics.

"Replace semantics": the call gives the complete current picture; label sets missing from it are removed rather
than left at their last value, so a deleted pool or an emptied state does not linger on dashboards.

Counters also expose prometheus_client's ``*_created`` samples. The methods are meant to be called from the
event loop's thread.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from gangscale import __version__

__all__ = ["DECISION_LATENCY_BUCKETS", "PLAN_PASS_BUCKETS", "PROVIDER_CALL_BUCKETS", "Metrics"]

# From a fast in-cache acceptance to a capacity request that waits out a long cloud stock-out.
DECISION_LATENCY_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip
# Cloud APIs answer in tens of milliseconds to minutes (long-running operations polled to completion).
PROVIDER_CALL_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# A pass is pure computation: sub-millisecond on an idle cluster, seconds at worst.
PLAN_PASS_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

_DIRECTIONS = frozenset({"up", "down"})


class _ReplacingGauge:
    """A labelled gauge whose complete set of series is replaced on each update."""

    def __init__(self, gauge: Gauge, arity: int) -> None:
        self._gauge = gauge
        self._arity = arity
        self._present: set[tuple[str, ...]] = set()

    def replace(self, items: Iterable[tuple[tuple[str, ...], float]]) -> None:
        current = {tuple(str(v) for v in key): float(value) for key, value in items}
        # Checked up front so that a bad key cannot leave the gauge half replaced.
        bad = [key for key in current if len(key) != self._arity]
        if bad:
            raise ValueError(f"expected label tuples of {self._arity} values, got {bad[0]!r}")
        # Remove only the stale series (instead of clear() then set) so that no exposition taken in between
        # could ever show a series missing.
        for key in self._present - current.keys():
            self._gauge.remove(*key)
        for key, value in current.items():
            self._gauge.labels(*key).set(value)
        self._present = set(current)


def _declare_process_metrics(r: CollectorRegistry) -> None:
    """Build info, and the collectors the default registry has, on this private one: without them a private
    registry would hide the process's memory and CPU, which dashboards and alerts expect next to the controller's
    series."""
    build = Gauge("gangscale_build_info", "Always 1: the gangscale and Python versions running.",
                  ["version", "python_version"], registry=r)
    build.labels(__version__, platform.python_version()).set(1)
    ProcessCollector(registry=r)
    PlatformCollector(registry=r)
    GCCollector(registry=r)


class Metrics:
    """The controller's metrics; see the module docstring for the series."""

    def __init__(self, *, dry_run: bool = False) -> None:
        self.dry_run = dry_run
        #: Called before each exposition: gauges that would cost a walk over the cluster on every change are set
        #: here instead, when somebody reads them.
        self.on_render: Callable[[], None] | None = None
        self._dry = "true" if dry_run else "false"
        self.registry = CollectorRegistry(auto_describe=True)
        # Label values are passed positionally throughout: "class" is a Python keyword, so ``labels(class=...)``
        # cannot be written.
        r = self.registry
        self._outcomes = Counter(
            "gangscale_provisioning_request_outcomes_total",
            "Condition outcomes written to ProvisioningRequests, by condition reason.",
            ["class", "outcome", "dry_run"],
            registry=r,
        )
        self._latency = Histogram(
            "gangscale_decision_latency_seconds",
            "Time from ProvisioningRequest creation to each of its conditions.",
            ["class", "condition", "dry_run"],
            buckets=DECISION_LATENCY_BUCKETS,
            registry=r,
        )
        self._requests = _ReplacingGauge(
            Gauge(
                "gangscale_provisioning_requests",
                "ProvisioningRequests by class and state.",
                ["class", "state"],
                registry=r,
            ),
            arity=2,
        )
        self._pool_units = _ReplacingGauge(
            Gauge("gangscale_pool_units", "Node pool units by state.", ["pool", "state"], registry=r), arity=2
        )
        self._provider_duration = Histogram(
            "gangscale_provider_call_duration_seconds",
            "Duration of cloud provider calls, failed ones included.",
            ["provider", "operation"],
            buckets=PROVIDER_CALL_BUCKETS,
            registry=r,
        )
        self._provider_errors = Counter(
            "gangscale_provider_errors_total",
            "Failed cloud provider calls by error class.",
            ["provider", "operation", "error_class"],
            registry=r,
        )
        self._bookings = Gauge("gangscale_bookings", "ProvisioningRequests holding booked capacity.", registry=r)
        self._leader = Gauge("gangscale_leader", "1 while this replica holds the leader lease (or runs without "
                             "leader election), else 0.", registry=r)
        self._backoffs = Counter(
            "gangscale_pool_backoffs_total", "Times a node pool was put in backoff.", ["pool", "reason"], registry=r
        )
        self._watches = _ReplacingGauge(
            Gauge("gangscale_watch_healthy", "1 while the list-and-watch cache of the resource is current.",
                  ["resource"], registry=r),
            arity=1,
        )
        self._backed_off = _ReplacingGauge(
            Gauge("gangscale_pool_backed_off", "1 for each node pool currently in backoff.", ["pool"], registry=r),
            arity=1,
        )
        self._unhealthy = _ReplacingGauge(
            Gauge("gangscale_pool_unhealthy", "1 for each node pool currently unhealthy (skipped until its cooldown "
                  "ends).", ["pool"], registry=r),
            arity=1,
        )
        self._pool_outcomes = Counter(
            "gangscale_pool_scale_up_outcomes_total", "Scale-up outcomes per node pool (success, timeout, partial, "
            "stockout, quota, error).", ["pool", "outcome"], registry=r
        )
        self._scaled = Counter(
            "gangscale_scaled_units_total",
            "Node pool units scaled up or down.",
            ["pool", "direction", "dry_run"],
            registry=r,
        )
        self._plan_pass = Histogram(
            "gangscale_plan_pass_duration_seconds",
            "Duration of planning passes.",
            buckets=PLAN_PASS_BUCKETS,
            registry=r,
        )
        self._pass = Histogram(
            "gangscale_pass_duration_seconds",
            "Duration of whole controller passes (changes applied, requests reconciled, planning, scale-down).",
            buckets=PLAN_PASS_BUCKETS,
            registry=r,
        )
        self._gangs_planned = Gauge(
            "gangscale_gangs_planned", "Gangs considered in the last planning pass.", registry=r
        )

        self._last_pass = Gauge(
            "gangscale_last_pass_timestamp_seconds", "Unix time at which the last controller pass ended.", registry=r
        )
        _declare_process_metrics(r)
        self._declare_ray_metrics(r)

    def _declare_ray_metrics(self, r: CollectorRegistry) -> None:
        self._ray_events = Counter(
            "gangscale_ray_gang_events_total",
            "Events about Ray gangs, per RayCluster and reason.",
            ["namespace", "raycluster", "reason", "dry_run"],
            registry=r,
        )
        self._ray_missing = _ReplacingGauge(
            Gauge(
                "gangscale_ray_missing_replicas",
                "Worker replicas a RayCluster wants that have no node and none coming.",
                ["namespace", "raycluster", "group"],
                registry=r,
            ),
            arity=3,
        )
        self._ray_gcs = _ReplacingGauge(
            Gauge(
                "gangscale_ray_gcs_reachable",
                "1 when the last read of the RayCluster head's GCS succeeded.",
                ["namespace", "raycluster"],
                registry=r,
            ),
            arity=2,
        )

    def outcome(self, cls: str, outcome: str) -> None:
        """Count one condition outcome (its reason) written to a ProvisioningRequest of class ``cls``."""
        self._outcomes.labels(cls, outcome, self._dry).inc()

    def condition_latency(self, cls: str, condition: str, seconds: float) -> None:
        """Record the time from a ProvisioningRequest's creation to its ``condition``."""
        # The creation timestamp comes from the API server's clock, in whole seconds: a condition set within the
        # same second, or by a controller whose clock lags, can come out slightly negative.
        self._latency.labels(cls, condition, self._dry).observe(max(0.0, seconds))

    def set_requests(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the ProvisioningRequest counts, keyed by ``(class, state)``."""
        self._requests.replace(counts.items())

    def set_pool_units(self, units: Mapping[tuple[str, str], int]) -> None:
        """Replace the node pool unit counts, keyed by ``(pool, state)``."""
        self._pool_units.replace(units.items())

    def provider_call(self, provider: str, operation: str, seconds: float, error_class: str | None) -> None:
        """Record one provider call; ``error_class`` names the failure (e.g. the exception's class), None if none."""
        self._provider_duration.labels(provider, operation).observe(max(0.0, seconds))
        if error_class is not None:
            self._provider_errors.labels(provider, operation, error_class).inc()

    def set_leader(self, leading: bool) -> None:
        self._leader.set(1 if leading else 0)

    def set_bookings(self, count: int) -> None:
        """Set the number of ProvisioningRequests holding booked capacity."""
        self._bookings.set(count)

    def backoff(self, pool: str, reason: str) -> None:
        """Count one backoff of ``pool``."""
        self._backoffs.labels(pool, reason).inc()

    def set_backed_off(self, pools: Iterable[str]) -> None:
        """Replace the set of pools currently in backoff."""
        self._backed_off.replace(((pool,), 1) for pool in pools)

    def set_unhealthy(self, pools: Iterable[str]) -> None:
        """Replace the set of pools currently unhealthy."""
        self._unhealthy.replace(((pool,), 1) for pool in pools)

    def pool_scale_up_outcome(self, pool: str, outcome: str) -> None:
        """Count one scale-up's ``outcome`` for ``pool``."""
        self._pool_outcomes.labels(pool, outcome).inc()

    def scaled(self, pool: str, direction: str, units: int) -> None:
        """Count ``units`` scaled ``direction`` (``up`` or ``down``) on ``pool``."""
        if direction not in _DIRECTIONS:
            raise ValueError(f"scale direction must be 'up' or 'down', not {direction!r}")
        if units < 0:
            raise ValueError(f"scaled units must not be negative, got {units}")
        self._scaled.labels(pool, direction, self._dry).inc(units)

    def plan_pass(self, seconds: float, gangs: int) -> None:
        """Record one planning pass: its duration and the number of gangs it considered."""
        self._plan_pass.observe(max(0.0, seconds))
        self._gangs_planned.set(gangs)

    def pass_finished(self, at: float, seconds: float | None = None) -> None:
        """Record that a controller pass ended at unix time ``at``, after ``seconds`` of work."""
        self._last_pass.set(at)
        if seconds is not None:
            self._pass.observe(max(0.0, seconds))

    def ray_event(self, namespace: str, raycluster: str, reason: str) -> None:
        """Count one Event about a Ray gang of ``namespace/raycluster``."""
        self._ray_events.labels(namespace, raycluster, reason, self._dry).inc()

    def set_ray_missing(self, missing: Mapping[tuple[str, str, str], int]) -> None:
        """Replace the missing replicas, keyed by ``(namespace, raycluster, group)``."""
        self._ray_missing.replace(missing.items())

    def set_watches(self, healthy: Mapping[str, bool]) -> None:
        """Replace the health of the caches, keyed by resource (plural)."""
        self._watches.replace(((resource,), 1.0 if up else 0.0) for resource, up in healthy.items())

    def set_ray_gcs(self, reachable: Mapping[tuple[str, str], bool]) -> None:
        """Replace the GCS reachability, keyed by ``(namespace, raycluster)``."""
        self._ray_gcs.replace((key, 1.0 if up else 0.0) for key, up in reachable.items())

    def render(self) -> tuple[bytes, str]:
        """The exposition of every series: ``(body, content type)``."""
        if self.on_render is not None:
            self.on_render()
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
