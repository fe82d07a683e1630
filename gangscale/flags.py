"""The flags of ``gangscale run`` as one typed model, read from the command line or the environment.

Each field of :class:`RunFlags` is one flag: ``batch_idle`` is ``--batch-idle`` and ``GANGSCALE_BATCH_IDLE``.
A value comes from the command line, else from the variable, else from the default, and all three go through
the same parser, so a value the command line refuses is refused from the environment too (and a default that
does not parse is a bug the tests catch). An invalid variable is refused with one line that names it::

    gangscale run: GANGSCALE_DRY_RUN='on': not a boolean (use true or false, 1 or 0)

Booleans parse as Go's ``strconv.ParseBool``, the way kubectl, client-go and the cluster-autoscaler read
theirs: ``1 t T TRUE true True`` and ``0 f F FALSE false False``. Anything else ("on", "yes") is an error
rather than a silent false: a dry run that quietly runs live is the worst way to fail.

Nothing here touches the cluster; parsing happens before the controller is built (``gangscale version`` and
``--help`` never read the variables at all).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangscale.config import parse_duration
from gangscale.sources.provreq import DEFAULT_CLASSES

PREFIX = "GANGSCALE_"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
LOG_LEVELS = ("debug", "info", "warning", "error")

#: Variables with the prefix that other commands and the test tools read; ``run`` does not warn about them.
OTHER_VARIABLES = frozenset({"GANGSCALE_EXPLAIN_URL", "GANGSCALE_KUBECTL", "GANGSCALE_HELM"})


class FlagError(ValueError):
    """A value that does not parse; the message is the whole line to print."""


def parse_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("not a boolean (use true or false, 1 or 0)")


def parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValueError("not a port number (0-65535)") from None
    if not 0 <= port <= 65535:
        raise ValueError("not a port number (0-65535)")
    return port


#: The longest duration a flag takes.
MAX_DURATION = 3650 * 86400.0


def parse_seconds(text: str) -> float:
    """A duration (``90``, ``500ms``, ``1h30m``) in seconds."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("not a duration (a number of seconds or units like 500ms, 10s, 5m, 1h30m, 7d)")
    if seconds > MAX_DURATION:
        # Times are written as RFC 3339 (years up to 9999): an unbounded duration would make every pass fail.
        raise ValueError("more than 3650d (10 years)")
    return seconds


#: The longest memory of scale-up outcomes a pool keeps (``--pool-health-window``): enough for any sensible ratio;
#: a bound, so that a typo (``400`` for ``4``) is refused instead of making a pool next to never unhealthy.
MAX_HEALTH_WINDOW = 100


def parse_health_window(text: str) -> int:
    try:
        window = int(text)
    except ValueError:
        window = -1
    if not 0 <= window <= MAX_HEALTH_WINDOW:
        raise ValueError(f"not a number of scale-ups from 0 (pool health off) to {MAX_HEALTH_WINDOW}")
    return window


def parse_ratio(text: str) -> float:
    """A failure ratio: more than 0 (a pool with no failure is never unhealthy), at most 1."""
    try:
        ratio = float(text)
    except ValueError:
        ratio = math.nan
    if not 0 < ratio <= 1:  # NaN fails both comparisons
        raise ValueError("not a ratio above 0 and at most 1 (0.5: half of the window failed)")
    return ratio


def parse_cooldown(text: str) -> float:
    """A duration above 0: a pool found unhealthy is skipped for it (``--pool-health-window 0`` turns health off)."""
    seconds = parse_seconds(text)
    if seconds <= 0:
        raise ValueError("must be more than 0 (to turn pool health off, use --pool-health-window 0)")
    return seconds


def parse_classes(text: str) -> tuple[str, ...]:
    classes = tuple(c.strip() for c in text.split(",") if c.strip())
    if not classes:
        raise ValueError("names no ProvisioningRequest class")
    return classes


def parse_log_level(text: str) -> str:
    if text.lower() not in LOG_LEVELS:
        raise ValueError(f"not a log level ({', '.join(LOG_LEVELS)})")
    return text.lower()


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"not one of {', '.join(choices)}")
        return text
    return parse


def _unset_or(parse: Callable[[str], str]) -> Callable[[str], str]:
    """``parse``, but an empty value stays empty (unset: the caller says it is required)."""
    return lambda text: text and parse(text)


def _optional(text: str) -> str | None:
    return text or None


def _stop_after(text: str) -> float | None:
    return parse_seconds(text) if text else None


def _flag(default: str, help: str, parse: Callable[[str], Any] = str, *, choices: tuple[str, ...] = (),
          negatable: bool = False, metavar: str | None = None) -> Any:
    """One flag: its default as text (parsed like any other value), its help and its parser."""
    return field(metadata={"default": default, "help": help, "parse": parse, "choices": choices,
                           "negatable": negatable, "metavar": metavar})


#: The providers ``--provider`` names; it has no default, so that a production install that forgets it does not
#: run the simulated cloud (which creates Node objects).
PROVIDERS = ("simulated", "gke", "aws")


@dataclass(frozen=True)
class RunFlags:
    """Every flag of ``gangscale run``, typed (durations in seconds)."""

    kubeconfig: str | None = _flag("", "kubeconfig file; without it: $KUBECONFIG, then in-cluster config, then "
                                       "~/.kube/config", _optional)
    context: str | None = _flag("", "kubeconfig context to use", _optional)
    config: str | None = _flag("", "the node-pool file (required); see `gangscale pools FILE`", _optional)
    provider: str = _flag("", "node-pool provider (required): gke (GKE node pools and Compute Engine instance "
                              "groups; every pool needs a gke: block), aws (EC2 instances for EKS from CreateFleet "
                              "instant calls; every pool needs an aws: block) or simulated (a pretend cloud that "
                              "registers Node objects: test clusters and the demo)", _unset_or(_choice(*PROVIDERS)),
                          choices=PROVIDERS)
    gke_container_endpoint: str | None = _flag("", "base URL of the GKE API (default "
                                                   "https://container.googleapis.com)", _optional)
    gke_compute_endpoint: str | None = _flag("", "base URL of the Compute Engine API (default "
                                                 "https://compute.googleapis.com/compute/v1)", _optional)
    aws_endpoint: str | None = _flag("", "base URL of the EC2 API (default: botocore's endpoint for each pool's "
                                         "region, or $AWS_ENDPOINT_URL_EC2)", _optional)
    classes: tuple[str, ...] = _flag(",".join(DEFAULT_CLASSES), "comma-separated ProvisioningRequest classes to "
                                     "serve; PRs of other classes are never touched", parse_classes)
    processor_instance: str = _flag("", "serve only PRs whose processorInstance parameter equals this (empty: PRs "
                                        "without the parameter)")
    dry_run: bool = _flag("false", "read and plan everything, change nothing: no provider calls, no status writes, "
                                   "no events (leader election still writes its Lease)", parse_bool, negatable=True)
    metrics_host: str = _flag("0.0.0.0", "address of the observe server")
    metrics_port: int = _flag("8080", "port of /healthz, /readyz, /metrics and /debug/plans (0 picks a free one)",
                              parse_port)
    batch_idle: float = _flag("1s", "an idle controller plans a new request at once; while earlier scale-ups are "
                                    "calling the provider, requests wait for them, but at most this long after the "
                                    "last arrival ...", parse_seconds)
    batch_max: float = _flag("10s", "... or this long after the first", parse_seconds)
    booking_ttl: float = _flag("10m", "how long capacity stays booked after Provisioned=True (per PR: parameter "
                                      "bookingSeconds)", parse_seconds)
    scale_down_unneeded_time: float = _flag("10m", "empty, unbooked units of managed pools are removed after this "
                                                   "long", parse_seconds)
    max_node_provision_time: float = _flag("15m", "new nodes must be Ready this long after a scale-up starts, or "
                                                  "every unit of it is released", parse_seconds)
    booked_node_unready_grace: float = _flag("5m", "a booked node whose Ready condition has been Unknown (or False "
                                                   "after it was Ready) this long revokes the booking (0: never)",
                                             parse_seconds)
    retry_initial: float = _flag("1m", "first re-planning delay of a request whose capacity was not found (doubles "
                                       "each time) ...", parse_seconds)
    retry_max: float = _flag("10m", "... up to this", parse_seconds)
    pool_backoff: float = _flag("3m", "how long a pool is skipped after a stockout, quota error or nodes that never "
                                      "got Ready (doubles on repeated failures, up to 30m)", parse_seconds)
    pool_health_window: int = _flag("4", "pool health: how many of a pool's last scale-ups are weighed (0: off)",
                                    parse_health_window)
    pool_unhealthy_ratio: float = _flag("0.5", "a pool whose failed scale-ups reach this share of the window is "
                                               "unhealthy ...", parse_ratio)
    pool_unhealthy_cooldown: float = _flag("30m", "... and skipped this long; its record then starts afresh",
                                           parse_cooldown)
    expiry: float = _flag("7d", "a request not provisioned this long after creation fails with reason Expired",
                          parse_seconds)
    terminal_ttl: float = _flag("7d", "requests whose outcome is older than this are deleted (0 keeps them)",
                                parse_seconds)
    ray: bool = _flag("true", "watch autoscaling RayClusters that Kueue does not manage and provision their worker "
                              "replicas as whole gangs (off by itself when the API does not serve ray.io/v1 "
                              "RayClusters)", parse_bool, negatable=True)
    ray_batch_idle: float = _flag("6s", "Ray autoscaler steps merge into one gang until the demand has not changed "
                                        "for this long ...", parse_seconds)
    ray_batch_max: float = _flag("30s", "... or has been growing for this long", parse_seconds)
    ray_gcs: bool = _flag("true", "read pending placement groups from each RayCluster head's GCS (needs the "
                                  "gangscale[ray] extra, and secrets: get where the clusters run)", parse_bool,
                          negatable=True)
    ray_gcs_interval: float = _flag("5s", "how often the GCS is read", parse_seconds)
    leader_elect: bool = _flag("true", "elect one acting replica through a coordination.k8s.io/v1 Lease; the others "
                                       "stay synced on standby", parse_bool, negatable=True)
    leader_elect_lease_duration: float = _flag("15s", "a replica takes the lease once it has seen it unrenewed this "
                                                      "long", parse_seconds)
    leader_elect_renew_deadline: float = _flag("10s", "the leader stops acting and exits if it could not renew the "
                                                      "lease for this long", parse_seconds)
    leader_elect_retry_period: float = _flag("2s", "how often the lease is renewed, or tried for", parse_seconds)
    leader_elect_lease_name: str = _flag("gangscale", "the Lease's name")
    leader_elect_namespace: str | None = _flag("", "the Lease's namespace (default: the pod's namespace, else "
                                                   "default)", _optional)
    leader_elect_identity: str | None = _flag("", "this replica's identity in the Lease (default: $POD_NAME, else "
                                                  "hostname_<random>)", _optional)
    api_unreachable_timeout: float = _flag("60s", "/readyz fails when no API request has succeeded for this long; "
                                                  "at start, how long to wait for the API server before giving up",
                                           parse_seconds)
    log_format: str = _flag("json", "log line format", _choice("json", "text"), choices=("json", "text"))
    log_level: str = _flag("info", "debug, info, warning or error", parse_log_level)
    duration: float | None = _flag("", "stop after this long (for demos and tests; default: run until stopped)",
                                   _stop_after, metavar="DURATION")

    @staticmethod
    def option(name: str) -> str:
        """``batch_idle`` -> ``--batch-idle`` (``duration`` is ``--for``)."""
        return "--for" if name == "duration" else "--" + name.replace("_", "-")

    @staticmethod
    def variable(name: str) -> str:
        """``batch_idle`` -> ``GANGSCALE_BATCH_IDLE`` (``duration`` is ``GANGSCALE_FOR``)."""
        return PREFIX + RunFlags.option(name).removeprefix("--").replace("-", "_").upper()


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Declare every :class:`RunFlags` field on ``parser``. Values stay unparsed text (None when not given)
    until :func:`resolve`, so that the command line and the environment are parsed by the same code."""
    for f in dataclasses.fields(RunFlags):
        meta = f.metadata
        shown = meta["default"] or "unset"
        kwargs: dict[str, Any] = {"dest": f.name, "default": None, "help": f"{meta['help']} (default {shown})"}
        if meta["negatable"]:
            # --dry-run / --no-dry-run; argparse gives True/False, stored as text like any other value.
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["metavar"] = meta["metavar"] or (f.name.upper() if not meta["choices"] else None)
            if meta["choices"]:
                kwargs["choices"] = meta["choices"]
        parser.add_argument(RunFlags.option(f.name), **kwargs)


def resolve(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RunFlags:
    """The typed flags: the command line's value, else ``GANGSCALE_<FLAG>``, else the default. Raises
    :class:`FlagError` naming the flag or variable whose value does not parse."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in dataclasses.fields(RunFlags):
        given = getattr(args, f.name, None)
        parse: Callable[[str], Any] = f.metadata["parse"]
        if isinstance(given, bool):  # a negatable flag given on the command line
            values[f.name] = given
            continue
        if given is not None:
            source, text = RunFlags.option(f.name), str(given)
        elif (variable := RunFlags.variable(f.name)) in env:
            source, text = variable, env[variable]
        else:
            source, text = f"the default of {RunFlags.option(f.name)}", f.metadata["default"]
        try:
            values[f.name] = parse(text)
        except ValueError as exc:
            raise FlagError(f"{source}={text!r}: {exc}") from None
    return RunFlags(**values)


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """``GANGSCALE_*`` variables that name no flag (a typo such as ``GANGSCALE_DRYRUN`` would otherwise be
    silently ignored)."""
    env = os.environ if environ is None else environ
    known = {RunFlags.variable(f.name) for f in dataclasses.fields(RunFlags)} | OTHER_VARIABLES
    return sorted(name for name in env if name.startswith(PREFIX) and name not in known)
