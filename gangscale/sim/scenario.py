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

The shorthand expands to the same manifests a user would write (labels ``kueue.x-k8s.io/queue-name`` and
``kueue.x-k8s.io/priority-class``, annotation ``sim.gangscale.io/duration``); ``gangscale demo --show FILE``
is not provided, but :func:`workload_manifest` is what the tests use to check the expansion.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
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
    head: bool = False
    requests: dict[str, int | str] = Field(default_factory=dict)
    limits: dict[str, int | str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[JSON] = Field(default_factory=list)


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

    _times = field_validator("at", "duration", mode="before")(
        lambda v: None if v is None else _seconds(v))


class Scenario(_Model):
    name: str
    description: str = ""
    until: float = 6 * 3600.0
    node_pools: list[JSON] = Field(min_length=1)
    cloud: list[CloudChange] = Field(default_factory=list)
    controller: ControllerSettings = Field(default_factory=ControllerSettings)
    kueue: Kueue = Field(default_factory=Kueue)
    workloads: list[Workload] = Field(default_factory=list)

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
    if problems:
        raise ScenarioError(f"{source}: invalid scenario:\n" + "\n".join(f"  {p}" for p in problems))


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
