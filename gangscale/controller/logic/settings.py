"""The controller's knobs, with the defaults ``gangscale run`` documents (see ``gangscale run --help``)."""

from __future__ import annotations

from dataclasses import dataclass

from gangscale.sources.provreq import DEFAULT_CLASSES

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Settings:
    #: ProvisioningRequest classes served; a PR of any other class is never touched.
    classes: tuple[str, ...] = DEFAULT_CLASSES
    #: Serve only PRs whose ``processorInstance`` parameter equals this ("" serves PRs without the parameter).
    processor_instance: str = ""
    dry_run: bool = False
    #: Karpenter-style batching: a pass starts once no event arrived for ``batch_idle`` seconds, or
    #: ``batch_max`` seconds after the first event, whichever comes first.
    batch_idle: float = 1.0
    batch_max: float = 10.0
    #: How long capacity stays booked after Provisioned=True (per PR: parameter ``bookingSeconds``).
    booking_ttl: float = 10 * MINUTE
    #: Empty, unbooked units of managed pools are removed after this long.
    scale_down_unneeded_time: float = 10 * MINUTE
    #: A PR that is not provisioned this long after its creation fails with ``Expired``.
    expiry: float = 7 * DAY
    #: PRs whose outcome is older than this are deleted, as the cluster-autoscaler does (0: never).
    terminal_ttl: float = 7 * DAY
    #: Re-planning backoff for a PR that could not be placed: doubles from ``retry_initial`` to ``retry_max``.
    retry_initial: float = 1 * MINUTE
    retry_max: float = 10 * MINUTE
    #: New nodes must be Ready this long after the scale-up started, or every unit is released.
    max_node_provision_time: float = 15 * MINUTE
    #: A booked node that lost readiness (``Ready`` Unknown, or False after it was Ready) this long ago revokes the
    #: booking (0: never). The default is the time pods tolerate ``not-ready``/``unreachable`` before eviction
    #: (the DefaultTolerationSeconds admission plugin's 300 s): the gang's pods could not run there either.
    booked_node_unready_grace: float = 5 * MINUTE
    #: A pool that failed (stockout, quota, nodes never Ready) is skipped for this long, doubling up to
    #: ``pool_backoff_max``; the doubling resets after ``pool_backoff_reset`` without failures.
    pool_backoff_initial: float = 3 * MINUTE
    pool_backoff_max: float = 30 * MINUTE
    pool_backoff_reset: float = 3 * HOUR
    #: Pool health (:mod:`.poolhealth`): a pool whose failures among its last ``pool_health_window`` scale-ups
    #: reach ``pool_unhealthy_ratio`` of the window is skipped for ``pool_unhealthy_cooldown``. Karpenter's NodePool
    #: registration health uses 4 and 0.5; the cooldown is the cluster-autoscaler's longest node-group backoff.
    #: A window of 0 turns it off.
    pool_health_window: int = 4
    pool_unhealthy_ratio: float = 0.5
    pool_unhealthy_cooldown: float = 30 * MINUTE
    #: Attempts of one provider call under the same token when it fails transiently.
    provider_attempts: int = 5
    #: Status writes and provider calls running at once.
    concurrency: int = 32
    #: Watch autoscaling RayClusters (not managed by Kueue) as a demand source, when the API serves them.
    ray: bool = True
    #: Ray autoscaler steps arriving within this window merge into one gang: a gang forms once the demand has
    #: not changed for ``ray_batch_idle`` (longer than the autoscaler's 5-s iteration) or after ``ray_batch_max``.
    ray_batch_idle: float = 6.0
    ray_batch_max: float = 30.0
    #: Read pending placement groups from the head's GCS (needs the ``gangscale[ray]`` extra).
    ray_gcs: bool = True
    ray_gcs_interval: float = 5.0
    ray_gcs_timeout: float = 2.0
    #: ``/healthz`` fails when no pass completed for this long while work was waiting.
    max_inactivity: float = 10 * MINUTE
    #: This process's leader-election identity (recorded in every scale-up intent); "" without leader election.
    identity: str = ""
    #: ``/readyz`` fails when no API request has succeeded for this long.
    api_unreachable_timeout: float = 60.0
