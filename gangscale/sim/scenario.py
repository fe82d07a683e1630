"""The scenario file: a cluster, its cloud, its queues and the workloads that arrive, in one YAML document.

A scenario is what ``gangscale demo --scenario FILE`` runs (the built-in ones live in
``gangscale/sim/scenarios/``). Times are durations from the start (``90s``, ``20m``, ``1h30m``); every key
is camelCase and unknown keys are errors. The README's "Scenario files" section documents each field; in
short::

    name: my-scenario
    description: what it shows
    until: 3h                       # stop here at the latest (default 6h)
    nodePools: [...]                # the entries of a gangscale node-pool file
    cloud:                          # the cloud changing over time
      - {at: 0s, pool: gpu-a, stockout: true}
      - {at: 20m, pool: gpu-a, stockout: false, stock: 4, provisionSeconds: 120, partialGrant: 1}
    controller: {batchIdle: 1s, bookingTtl: 10m, scaleDownUnneededTime: 10m}
    kueue:
      provisioning: {className: atomic-scale-up.gangscale.io, parameters: {}, retry: {backoffLimitCount: 3}}
      flavors: [{name: vlp-24, nodeLabels: {...}, tolerations: [...]}]
      priorityClasses: [{name: prod, value: 1000}]
      clusterQueues:
        - {name: cq, queueingStrategy: BestEffortFIFO, preemption: LowerPriority,
           quota: {vlp-24: {google.com/tpu: 24}}, localQueues: [team-queue]}
      objects: []                   # any other manifests, applied as written
    workloads:
      - name: train
        kind: JobSet                # Job | JobSet | RayJob | RayCluster
        at: 0s
        duration: 60s               # run time once every pod runs; none = runs until the end
        queue: team-queue
        priorityClass: prod
        podSets:                    # JobSet: replicated jobs; Job: one; Ray: the head (head: true) and worker groups
          - {name: slice, replicas: 2, parallelism: 2, limits: {google.com/tpu: 4},
             nodeSelector: {cloud.google.com/gke-tpu-topology: 2x4}}
        manifest: {...}             # instead of kind/podSets: the job exactly as written
      - name: ray                   # an autoscaling RayCluster (no queue: Kueue does not manage it)
        kind: RayCluster
        autoscaling: true           # enableInTreeAutoscaling; idleTimeoutSeconds: N sets autoscalerOptions
        duration: 10m               # how long each placed demand holds its replicas (unless it says)
        podSets:
          - {name: head, head: true, requests: {cpu: "2"}}
          - {name: gpu, minReplicas: 0, maxReplicas: 16, idleTimeoutSeconds: 60, limits: {nvidia.com/gpu: 1}}
        rayDemand:                  # placement groups the Ray app asks for; `at` counts from the start
          - {at: 1m, name: pg-16gpu, group: gpu, replicas: 16}
          - {at: 9m, withdraw: pg-16gpu}

The shorthand expands to the same manifests a user would write (labels ``kueue.x-k8s.io/queue-name`` and
``kueue.x-k8s.io/priority-class``, annotation ``sim.gangscale.io/duration``); ``gangscale demo --show FILE``
is not provided, but :func:`workload_manifest` is what the tests use to check the expansion.

An autoscaling RayCluster's work is its ``rayDemand`` (see :mod:`gangscale.sim.rayautoscaler`): a demand is
placed once its group runs enough replicas, holds them for its ``duration`` (else the workload's; with
neither, until it is withdrawn), and is then released; the workload has finished once every demand was
released or withdrawn. A worker group's ``replicas`` defaults to its ``minReplicas`` there.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gangscale.config import ConfigError, parse_duration, parse_pool_file
from gangscale.model.nodepool import NodePool

JSON = dict[str, Any]

DURATION_ANNOTATION = "sim.gangscale.io/duration"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
CHECK_NAME = "gangscale"
PRC_NAME = "gangscale"
BUILTIN_DIR = "scenarios"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


def _seconds(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"expected a duration such as 90s or 20m, got {value!r}")


class CloudChange(_Model):
    at: float
    pool: str
    stock: int | None = Field(default=None, ge=0)
    unlimited: bool = False
    stockout: bool | None = None
    partial_grant: int | None = Field(default=None, ge=0)
    never_ready: bool | None = None
    provision_seconds: float | None = Field(default=None, ge=0)
    #: Reclaim this many Ready nodes of a spot pool now, each with the pool's notice (the simulated cloud's one-shot
    #: reclaim, ``PoolFaults.reclaim``; the simulated provider only).
    reclaim: int | None = Field(default=None, ge=1)

    _at = field_validator("at", mode="before")(_seconds)


class ControllerSettings(_Model):
    batch_idle: float | None = None
    batch_max: float | None = None
    booking_ttl: float | None = None
    scale_down_unneeded_time: float | None = None
    max_node_provision_time: float | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> Any:
        return None if value is None else _seconds(value)


class RetryStrategy(_Model):
    backoff_limit_count: int = Field(default=3, ge=0)
    backoff_base_seconds: int = Field(default=60, ge=1)
    backoff_max_seconds: int = Field(default=1800, ge=1)


class Provisioning(_Model):
    class_name: str = "atomic-scale-up.gangscale.io"
    parameters: dict[str, str] = Field(default_factory=dict)
    retry: RetryStrategy = Field(default_factory=RetryStrategy)
    managed_resources: list[str] = Field(default_factory=list)


class Flavor(_Model):
    name: str
    node_labels: dict[str, str] = Field(default_factory=dict)
    tolerations: list[JSON] = Field(default_factory=list)


class PriorityClass(_Model):
    name: str
    value: int
    description: str = ""


class ClusterQueue(_Model):
    name: str
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    preemption: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    quota: dict[str, dict[str, int | str]]
    local_queues: list[str] = Field(default_factory=list)


class Kueue(_Model):
    provisioning: Provisioning | None = None
    flavors: list[Flavor] = Field(default_factory=list)
    priority_classes: list[PriorityClass] = Field(default_factory=list)
    cluster_queues: list[ClusterQueue] = Field(default_factory=list)
    objects: list[JSON] = Field(default_factory=list)


class PodSet(_Model):
    name: str
    replicas: int = Field(default=1, ge=0)
    parallelism: int = Field(default=1, ge=1)
    num_of_hosts: int = Field(default=1, ge=1)
    # Ray worker groups only: the autoscaler's bounds and this group's idle timeout.
    min_replicas: int | None = Field(default=None, ge=0)
    max_replicas: int | None = Field(default=None, ge=0)
    idle_timeout_seconds: int | None = Field(default=None, ge=0)
    head: bool = False
    requests: dict[str, int | str] = Field(default_factory=dict)
    limits: dict[str, int | str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[JSON] = Field(default_factory=list)


class RayDemand(_Model):
    """A placement group a Ray app asks for (``name``, ``group``, ``replicas``, optional ``duration``), or the
    withdrawal of one asked for earlier (``withdraw: name``); ``at`` counts from the scenario's start."""

    at: float
    name: str | None = None
    group: str | None = None
    replicas: int | None = Field(default=None, ge=1)
    duration: float | None = None
    withdraw: str | None = None

    _times = field_validator("at", "duration", mode="before")(lambda v: None if v is None else _seconds(v))

    @model_validator(mode="after")
    def _one_form(self) -> RayDemand:
        asks = (self.name, self.group, self.replicas)
        if self.withdraw is not None:
            if any(v is not None for v in (*asks, self.duration)):
                raise ValueError("a withdrawal has only `at` and `withdraw`")
        elif any(v is None for v in asks):
            raise ValueError("a demand needs `name`, `group` and `replicas` (or `withdraw: <name>`)")
        return self


class Workload(_Model):
    name: str
    kind: Literal["Job", "JobSet", "RayJob", "RayCluster"] = "JobSet"
    namespace: str = "default"
    at: float = 0.0
    duration: float | None = None
    queue: str | None = None
    priority_class: str | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    pod_sets: list[PodSet] = Field(default_factory=list)
    manifest: JSON | None = None
    # Autoscaling RayClusters (not managed by Kueue): the Ray autoscaler and the demand it sees.
    autoscaling: bool = False
    idle_timeout_seconds: int | None = Field(default=None, ge=0)
    ray_demand: list[RayDemand] = Field(default_factory=list)

    _times = field_validator("at", "duration", mode="before")(
        lambda v: None if v is None else _seconds(v))

    def worker_groups(self) -> list[str]:
        """Ray worker group names, from the pod sets or the manifest."""
        if self.manifest is not None:
            groups = ((self.manifest.get("spec") or {}).get("workerGroupSpecs")) or []
            return [str(g.get("groupName", "")) for g in groups if isinstance(g, dict)]
        return [ps.name for ps in self.pod_sets if not ps.head]

    @property
    def autoscales(self) -> bool:
        """The Ray autoscaler runs for this workload (the shorthand's flag, or a manifest that enables it)."""
        if self.manifest is not None:
            return (self.manifest.get("spec") or {}).get("enableInTreeAutoscaling") is True
        return self.autoscaling


class Scenario(_Model):
    name: str
    description: str = ""
    until: float = 6 * 3600.0
    node_pools: list[JSON] = Field(min_length=1)
    cloud: list[CloudChange] = Field(default_factory=list)
    controller: ControllerSettings = Field(default_factory=ControllerSettings)
    kueue: Kueue = Field(default_factory=Kueue)
    workloads: list[Workload] = Field(default_factory=list)
    #: Workloads the scenario shows not finishing under gangscale (a Workload Kueue deactivates stays so until its
    #: owner reactivates it): the demo still exits 0 when only these are left (names of ``workloads``).
    expect_unfinished: list[str] = Field(default_factory=list)

    _until = field_validator("until", mode="before")(_seconds)

    def pools(self) -> tuple[NodePool, ...]:
        """The node pools, resolved and checked exactly as ``gangscale run`` checks a pool file."""
        return parse_pool_file({"nodePools": [dict(p) for p in self.node_pools]}).pools


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message names every problem, one per line."""


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping (name, nodePools, workloads, ...)")
    try:
        scenario = Scenario.model_validate(raw)
        scenario.pools()
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ScenarioError(f"{source}: invalid scenario:\n" + "\n".join(lines)) from exc
    except ConfigError as exc:
        raise ScenarioError(f"{source}: nodePools: {exc}") from exc
    _check_references(scenario, source)
    return scenario


def _check_references(scenario: Scenario, source: str) -> None:
    problems = []
    pools = {p.get("name") for p in scenario.node_pools}
    problems += [f"cloud[{i}].pool: no node pool named {c.pool!r}" for i, c in enumerate(scenario.cloud)
                 if c.pool not in pools]
    spot = {p.get("name") for p in scenario.node_pools if p.get("capacityType") == "spot"}
    problems += [f"cloud[{i}].reclaim: pool {c.pool!r} is not a spot pool (capacityType: spot); only spot capacity "
                 "is reclaimed" for i, c in enumerate(scenario.cloud) if c.reclaim and c.pool in pools - spot]
    flavors = {f.name for f in scenario.kueue.flavors}
    for cq in scenario.kueue.cluster_queues:
        problems += [f"kueue.clusterQueues[{cq.name}].quota: no flavor named {f!r}" for f in cq.quota
                     if f not in flavors]
    classes = {p.name for p in scenario.kueue.priority_classes}
    names: set[tuple[str, str]] = set()
    for w in scenario.workloads:
        if (w.namespace, w.name) in names:
            problems.append(f"workloads[{w.name}]: defined twice")
        names.add((w.namespace, w.name))
        if w.priority_class and w.priority_class not in classes:
            problems.append(f"workloads[{w.name}].priorityClass: no priority class named {w.priority_class!r}")
        if w.manifest is None and not w.pod_sets:
            problems.append(f"workloads[{w.name}]: needs podSets (or a manifest)")
        problems += _ray_problems(w)
    problems += [f"expectUnfinished: no workload named {name!r}" for name in scenario.expect_unfinished
                 if name not in {w.name for w in scenario.workloads}]
    if problems:
        raise ScenarioError(f"{source}: invalid scenario:\n" + "\n".join(f"  {p}" for p in problems))


def _ray_problems(w: Workload) -> list[str]:
    where = f"workloads[{w.name}]"
    problems = []
    ray = w.kind in ("RayJob", "RayCluster")
    for ps in w.pod_sets:
        ray_only = [f for f in ("min_replicas", "max_replicas", "idle_timeout_seconds") if getattr(ps, f) is not None]
        if ray_only and (not ray or ps.head):
            problems.append(f"{where}.podSets[{ps.name}]: {', '.join(to_camel(f) for f in ray_only)} "
                            "only apply to Ray worker groups")
        if ps.min_replicas is not None and ps.max_replicas is not None and ps.min_replicas > ps.max_replicas:
            problems.append(f"{where}.podSets[{ps.name}]: minReplicas {ps.min_replicas} exceeds maxReplicas "
                            f"{ps.max_replicas}")
    if (w.autoscaling or w.idle_timeout_seconds is not None) and w.kind != "RayCluster":
        problems.append(f"{where}: autoscaling and idleTimeoutSeconds apply to a RayCluster only")
    if w.autoscaling and w.manifest is not None:
        problems.append(f"{where}: with a manifest, set spec.enableInTreeAutoscaling in it instead of autoscaling")
    if w.autoscales and w.queue:
        problems.append(f"{where}: an autoscaling RayCluster managed by Kueue (queue) is not simulated; "
                        "drop the queue")
    if not w.ray_demand:
        return problems
    if w.kind != "RayCluster" or not w.autoscales:
        return [*problems, f"{where}.rayDemand: needs an autoscaling RayCluster (kind: RayCluster, "
                "autoscaling: true)"]
    return problems + _demand_problems(w, where)


def _demand_problems(w: Workload, where: str) -> list[str]:
    problems = []
    groups = w.worker_groups()
    asked: dict[str, float] = {}
    withdrawn: set[str] = set()
    for i, d in enumerate(w.ray_demand):
        if d.withdraw is not None:
            if d.withdraw not in asked:
                problems.append(f"{where}.rayDemand[{i}].withdraw: no demand named {d.withdraw!r} asked for earlier")
            elif d.at < asked[d.withdraw]:
                problems.append(f"{where}.rayDemand[{i}]: withdraws {d.withdraw!r} before it is asked for")
            elif d.withdraw in withdrawn:
                problems.append(f"{where}.rayDemand[{i}]: {d.withdraw!r} is withdrawn twice")
            withdrawn.add(d.withdraw)
            continue
        assert d.name is not None
        if d.name in asked:
            problems.append(f"{where}.rayDemand[{i}].name: {d.name!r} is used twice")
        asked[d.name] = d.at
        if d.group not in groups:
            problems.append(f"{where}.rayDemand[{i}].group: no worker group named {d.group!r} "
                            f"(worker groups: {', '.join(groups) or 'none'})")
    return problems


def builtin_names() -> list[str]:
    folder = resources.files("gangscale.sim").joinpath(BUILTIN_DIR)
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            return parse_scenario(path.read_text(), str(path))
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if name_or_path not in builtin_names():
        raise ScenarioError(f"no built-in scenario named {name_or_path!r} (built in: {', '.join(builtin_names())})")
    text = resources.files("gangscale.sim").joinpath(BUILTIN_DIR, f"{name_or_path}.yaml").read_text()
    return parse_scenario(text, f"built-in scenario {name_or_path}")
