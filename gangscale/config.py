"""The node-pool file: YAML in, resolved :class:`~gangscale.model.nodepool.NodePool` objects out.

```yaml
planner:                       # optional
  policy: [waste, price, nodes]
  extendedResourceToleration: true
nodePools:
  - name: tpu-v5e-2x4
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4           # a catalog TPU type derives nodesPerUnit from it (here 2)
    maxUnits: 3                # required
    simulated: {stock: 2, provisionSeconds: 30}
```

Resolution applies the built-in machine catalog (:mod:`gangscale.model.catalog`) and lets the file override it
key by key: ``allocatable`` entries replace the catalog's estimate, ``labels`` replace derived labels, and
``nodesPerUnit`` replaces the slice size derived from the topology.

``maxUnits`` is required: with accelerators that cost tens of dollars an hour, a pool without a stated maximum
is an unbounded bill waiting for a runaway gang. Every problem in the file is collected and reported at once in
a single :class:`ConfigError`, each naming the pool and field (``nodePools[1] (a3-h100).maxUnits: ...``).

What the API server would refuse later is refused here (see :mod:`gangscale.configschema` for labels, taints,
machine types and zones): taints repeating a key and effect (``validateNodeTaints``: "taints must be unique by
key and effect pair"), and a key repeated within one YAML mapping. YAML itself keeps the last value silently;
Kubernetes' strict decoding refuses the file (``sigs.k8s.io/yaml`` ``YAMLToJSONStrict``, go-yaml's
``line N: key "maxUnits" already set in map``), and so does gangscale, naming both lines and both values.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gangscale.configschema import (
    RUN_DURATION_MODES,
    CapacityTiersSpec,
    PlannerSpec,
    PoolFileSpec,
    PoolSpec,
    TierPolicySpec,
)
from gangscale.model.catalog import (
    CATALOG,
    GPU_RESOURCE,
    TPU_RESOURCE,
    machine_labels,
    node_allocatable,
    topology_chips,
    tpu_hosts,
)
from gangscale.model.nodepool import INSTANCE_TYPE_LABEL, POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.model.policy import DEFAULT_CRITERIA, Policy
from gangscale.model.prices import node_hour
from gangscale.model.quantity import QuantityError, canonical
from gangscale.model.resources import CPU, DEFAULT_MAX_PODS, MEMORY, PODS, ResourceList
from gangscale.model.scheduling import Taint
from gangscale.model.tiers import (
    CAPACITY_TYPES,
    FLEX_START,
    ON_DEMAND,
    RESERVATION,
    SPOT,
    TierError,
    TierPolicies,
    TierPolicy,
    check_order,
)
from gangscale.yamlread import load_yaml, yaml_problem

#: GKE labels every node with its node pool's name; gangscale's pools on GCE machine types mirror it.
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
#: GKE labels the nodes of a flex-start node pool with it (GKE's documented nodeSelector for flex-start capacity).
GKE_FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
#: GKE taints the nodes of a queued-provisioning node pool with it (``cloud.google.com/gke-queued=true:NoSchedule``;
#: GKE's ProvisioningRequest documentation, and the taint GKE's published autoscaler tolerates for such pools).
GKE_QUEUED_TAINT = "cloud.google.com/gke-queued"
#: GKE labels the nodes of Spot VM node pools with it (GKE's "Use Spot VMs" page).
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
#: gke modes whose nodes are Dynamic Workload Scheduler (flex-start) capacity.
FLEX_START_MODES = ("flex-start", "queued-provisioning")
REGION_LABEL = "topology.kubernetes.io/region"
#: EKS labels the nodes of a managed node group with its name and capacity type (the launch template EKS makes for
#: the group passes them to the kubelet's ``--node-labels``; EKS's "Managed node groups" documentation).
EKS_NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
EKS_CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"


class ConfigError(ValueError):
    """A pool file gangscale cannot use. The message lists every problem, one per line, prefixed by the source."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(f"{source}: {problem}" for problem in self.problems))


@dataclass(frozen=True, slots=True)
class PoolFile:
    pools: tuple[NodePool, ...]
    policy: Policy = field(default_factory=Policy)


def load_pool_file(path: str | os.PathLike[str]) -> PoolFile:
    source = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [f"cannot read the pool file: {exc}"]) from None
    return parse_pool_yaml(text, source)


def parse_pool_yaml(text: str, source: str = "<config>") -> PoolFile:
    try:
        data, duplicates = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [yaml_problem(exc)]) from None
    problems = [duplicate.problem(_data_path(duplicate.loc, data)) for duplicate in duplicates]
    try:
        pool_file = parse_pool_file(data, source)
    except ConfigError as exc:
        # The rest of the file is still checked, so that one run reports everything.
        raise ConfigError(source, [*problems, *exc.problems]) from None
    if problems:
        raise ConfigError(source, problems)
    return pool_file


def _data_path(loc: tuple[int | str, ...], data: object) -> str:
    """``loc`` as the other problems name it: a pool by index and name (``nodePools[1] (a3-h100).zone``)."""
    pools = data.get("nodePools") if isinstance(data, Mapping) else None
    if len(loc) > 1 and loc[0] == "nodePools" and isinstance(loc[1], int) and isinstance(pools, list) \
            and loc[1] < len(pools):
        rest = _format_loc(loc[2:])
        return f"{_pool_where(loc[1], pools[loc[1]])}{'.' if rest and rest[0] != '[' else ''}{rest}"
    return _format_loc(loc) or "(top level)"


def parse_pool_file(data: object, source: str = "<config>") -> PoolFile:
    """Validate and resolve an already-loaded pool file (``data`` as ``yaml.safe_load`` returns it)."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, [f"expected a mapping with a nodePools list at the top level, got {_kind(data)}"])
    problems: list[str] = []
    try:
        PoolFileSpec.model_validate(data)
    except ValidationError as exc:
        problems.extend(_schema_problems(exc, PoolFileSpec, ""))
    policy = _policy(data.get("planner"), problems)
    policy = replace(policy, tiers=_tier_policies(data.get("capacityTiers"), problems))
    pools: list[NodePool] = []
    first_index: dict[str, int] = {}
    raw_pools = data.get("nodePools")
    # Pools are checked even when the top level has problems, so one run reports everything.
    for index, raw in enumerate(raw_pools if isinstance(raw_pools, list) else ()):
        where = _pool_where(index, raw)
        name = raw.get("name") if isinstance(raw, Mapping) else None
        if isinstance(name, str) and name in first_index:
            problems.append(f"{where}.name: duplicate pool name; nodePools[{first_index[name]}] already uses it")
        elif isinstance(name, str):
            first_index[name] = index
        pool = _resolve_pool(raw, where, problems)
        if pool is not None:
            pools.append(pool)
    if problems:
        raise ConfigError(source, problems)
    return PoolFile(tuple(pools), policy)


def _policy(raw: object, problems: list[str]) -> Policy:
    try:
        spec = PlannerSpec.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        problems.extend(_schema_problems(exc, PlannerSpec, "planner"))
        return Policy()
    criteria = DEFAULT_CRITERIA if spec.policy is None else tuple(spec.policy)
    try:
        return Policy(criteria, spec.extended_resource_toleration)
    except ValueError as exc:
        problems.append(f"planner.policy: {exc}")
        return Policy()


def _tier_policies(raw: object, problems: list[str]) -> TierPolicies:
    try:
        spec = CapacityTiersSpec.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        problems.extend(_schema_problems(exc, CapacityTiersSpec, "capacityTiers"))
        return TierPolicies()
    default = _tier_policy(spec, TierPolicy(), "capacityTiers", problems)
    classes = {name: _tier_policy(entry, default, f"capacityTiers.classes.{name}", problems)
               for name, entry in spec.classes.items()}
    return TierPolicies(default, classes)


def _tier_policy(spec: TierPolicySpec, base: TierPolicy, where: str, problems: list[str]) -> TierPolicy:
    order = base.order if spec.order is None else tuple(spec.order)
    try:
        check_order(order)
    except TierError as exc:
        problems.append(f"{where}.order: {exc}")
        return base
    try:
        return TierPolicy(order, base.mix if spec.mix_tiers is None else spec.mix_tiers,
                          dict(base.wait) if spec.wait_seconds is None else spec.wait_seconds)
    except TierError as exc:
        problems.append(f"{where}.waitSeconds: {exc}")
        return base


def _capacity_type(spec: PoolSpec, issues: list[tuple[str, str]]) -> str:
    """The file's ``capacityType``, else what the gke mode makes (flex-start and queued-provisioning node pools
    are Dynamic Workload Scheduler capacity), else on-demand."""
    from_mode = FLEX_START if spec.gke is not None and spec.gke.mode in FLEX_START_MODES else None
    capacity_type = spec.capacity_type or from_mode or ON_DEMAND
    if capacity_type not in CAPACITY_TYPES:
        issues.append(("capacityType", f"must be one of {', '.join(CAPACITY_TYPES)}; got {capacity_type!r}"))
    elif from_mode is not None and capacity_type != from_mode:
        issues.append(("capacityType", f"gke mode {spec.gke.mode if spec.gke else ''} makes flex-start capacity; "
                                       f"got {capacity_type!r}"))
    if spec.reservation is not None and capacity_type != RESERVATION:
        issues.append(("reservation", f"is for a pool of capacityType reservation; this one is {capacity_type}"))
    return capacity_type


def _price(spec: PoolSpec, capacity_type: str, nodes_per_unit: int) -> float | None:
    if spec.price_per_unit_hour is not None:
        return spec.price_per_unit_hour
    per_node = node_hour(spec.machine_type, capacity_type if capacity_type in CAPACITY_TYPES else ON_DEMAND)
    return None if per_node is None else round(per_node * nodes_per_unit, 4)


def _resolve_pool(raw: object, where: str, problems: list[str]) -> NodePool | None:
    try:
        spec = PoolSpec.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_schema_problems(exc, PoolSpec, where))
        return None
    issues: list[tuple[str, str]] = []
    allocatable = _allocatable(spec, issues)
    nodes_per_unit = _nodes_per_unit(spec, issues)
    if POOL_LABEL in spec.labels:
        # Nodes are matched back to their pool by this label; overriding it would orphan them.
        issues.append((f"labels.{POOL_LABEL}", "is set by gangscale to the pool's name and cannot be overridden"))
    if spec.min_units > spec.max_units:
        issues.append(("minUnits", f"must not exceed maxUnits ({spec.max_units}); got {spec.min_units}"))
    issues.extend(_duplicate_taints(spec))
    if spec.gke is not None:
        issues.extend(_gke_issues(spec, nodes_per_unit))
    capacity_type = _capacity_type(spec, issues)
    if spec.aws is not None:
        issues.extend(_aws_issues(spec, nodes_per_unit, capacity_type))
    if spec.simulated is not None and spec.simulated.reclaim is not None and capacity_type != SPOT:
        # Reclaim is what spot means: a cloud takes back only spot (preemptible) VMs.
        issues.append(("simulated.reclaim", f"is for a pool of capacityType spot; this one is {capacity_type}"))
    if issues:
        problems.extend(f"{where}.{name}: {message}" for name, message in issues)
        return None
    return NodePool(
        name=spec.name,
        allocatable=allocatable,
        max_units=spec.max_units,
        labels=_labels(spec, capacity_type),
        taints=_taints(spec),
        nodes_per_unit=nodes_per_unit,
        min_units=spec.min_units,
        zone=spec.zone,
        machine_type=spec.machine_type,
        tpu_topology=spec.tpu_topology,
        price_per_unit_hour=_price(spec, capacity_type, nodes_per_unit),
        capacity_type=capacity_type,
        reservation_nodes=spec.reservation.nodes if spec.reservation is not None else None,
        provider=_provider_sections(spec),
    )


def _duplicate_taints(spec: PoolSpec) -> list[tuple[str, str]]:
    """``validateNodeTaints`` (``pkg/apis/core/validation/validation.go``): taints must be unique by key and
    effect pair; the value does not count."""
    first: dict[tuple[str, str], int] = {}
    issues = []
    for index, taint in enumerate(spec.taints):
        pair = (taint.key, taint.effect)
        if pair in first:
            issues.append((f"taints[{index}]", f"taints must be unique by key and effect pair; taints[{first[pair]}] "
                                               f"already has key {taint.key} with effect {taint.effect}; got "
                                               f"'{taint.key}={taint.value}:{taint.effect}'"))
        else:
            first[pair] = index
    return issues


def _provider_sections(spec: PoolSpec) -> dict[str, dict[str, Any]]:
    sections = {}
    if spec.simulated is not None:
        # stock and provisionSeconds always; the fault knobs only when set, so a pool's section reads as written.
        faults = spec.simulated.model_dump(by_alias=True, exclude_defaults=True)
        sections["simulated"] = {**spec.simulated.model_dump(by_alias=True, include={"stock", "provision_seconds"}),
                                 **faults}
    if spec.gke is not None:
        sections["gke"] = spec.gke.model_dump(by_alias=True, exclude_none=True)
    if spec.aws is not None:
        sections["aws"] = spec.aws.model_dump(by_alias=True, exclude_none=True)
        if spec.reservation is not None and spec.reservation.name:
            # The capacity reservation the aws provider's fleets target (its id: checked to start with cr-).
            sections["aws"]["capacityReservationId"] = spec.reservation.name
    return sections


def _gke_issues(spec: PoolSpec, nodes_per_unit: int) -> list[tuple[str, str]]:
    """What the ``gke`` provider cannot do with this pool, found before it runs."""
    gke = spec.gke
    assert gke is not None
    issues = []
    if not spec.zone:
        issues.append(("zone", "is required with gke: a slice's node pool and a managed instance group live in one "
                               "zone"))
    if not spec.machine_type:
        issues.append(("machineType", "is required with gke: the node pools and VMs are made of it"))
    if gke.mode != "slice" and not gke.node_pool:
        issues.append(("gke.nodePool", f"is required with mode {gke.mode}: the existing node pool whose managed "
                                       "instance group is grown"))
    if gke.mode != "slice" and nodes_per_unit > 1:
        issues.append(("gke.mode", f"{gke.mode} adds single VMs to an existing node pool; a unit of {nodes_per_unit} "
                                   "hosts (a multi-host slice) is made whole only by mode slice, one node pool per "
                                   "unit"))
    if gke.max_run_duration_seconds is not None and gke.mode not in RUN_DURATION_MODES:
        issues.append(("gke.maxRunDurationSeconds", f"applies to modes {', '.join(RUN_DURATION_MODES)}, whose nodes "
                                                    f"live that long; mode {gke.mode} makes nodes without an end"))
    return issues


def _aws_issues(spec: PoolSpec, nodes_per_unit: int, capacity_type: str) -> list[tuple[str, str]]:
    """What the ``aws`` provider cannot do with this pool, found before it runs. One unit is one EC2 instance,
    launched by a CreateFleet of type instant that takes one subnet, one instance type and one zone."""
    aws = spec.aws
    assert aws is not None
    issues = []
    if spec.gke is not None:
        issues.append(("aws", "a pool lives on one cloud: it has a gke: block too"))
    if not spec.zone:
        issues.append(("zone", "is required with aws: the pool's instances are launched in one availability zone"))
    if not spec.machine_type:
        issues.append(("machineType", "is required with aws: it is the EC2 instance type launched"))
    if not aws.subnet:
        issues.append(("aws.subnet", "is required: a fleet of type instant launches into one subnet, which must lie in "
                                     "the pool's zone"))
    if nodes_per_unit > 1:
        issues.append(("nodesPerUnit", f"a unit of the aws provider is one EC2 instance; got {nodes_per_unit} nodes "
                                       "per unit"))
    if capacity_type == FLEX_START:
        issues.append(("capacityType", "flex-start is GKE's Dynamic Workload Scheduler; on AWS use reservation with "
                                       "aws.capacityBlock for a Capacity Block for ML"))
    reservation = spec.reservation.name if spec.reservation is not None else ""
    if capacity_type == RESERVATION and not reservation.startswith("cr-"):
        issues.append(("reservation.name", "is required with aws and capacityType reservation: the id of the EC2 "
                                           f"capacity reservation (cr-…) the fleets launch into; got {reservation!r}"))
    if aws.capacity_block and capacity_type != RESERVATION:
        issues.append(("aws.capacityBlock", f"is for a pool of capacityType reservation (the Capacity Block's "
                                            f"reservation); this one is {capacity_type}"))
    return issues


def _allocatable(spec: PoolSpec, issues: list[tuple[str, str]]) -> ResourceList:
    machine = CATALOG.get(spec.machine_type)
    amounts = dict(node_allocatable(machine)) if machine else {}
    unparsed: set[str] = set()
    for resource, value in spec.allocatable.items():
        try:
            amounts[resource] = canonical(resource, value)
        except QuantityError as exc:
            issues.append((f"allocatable.{resource}", str(exc)))
            unparsed.add(resource)
    amounts.setdefault(PODS, DEFAULT_MAX_PODS)
    missing = [name for name in (CPU, MEMORY) if name not in amounts and name not in unparsed]
    if missing:
        why = (f"machine type {spec.machine_type!r} is not in the built-in catalog" if spec.machine_type
               else "there is no machineType")
        issues.append(("allocatable", f"{why}, so allocatable must give cpu and memory; missing {', '.join(missing)}"))
    return ResourceList(amounts)


def _nodes_per_unit(spec: PoolSpec, issues: list[tuple[str, str]]) -> int:
    topology, explicit = spec.tpu_topology, spec.nodes_per_unit
    if not topology:
        return explicit or 1
    machine = CATALOG.get(spec.machine_type)
    if machine is not None and not machine.is_tpu:
        issues.append(("tpuTopology", f"machine type {machine.name} has no TPUs; tpuTopology applies only to TPU "
                                      "machine types"))
        return explicit or 1
    derived: int | None = None
    try:
        if machine is None:
            topology_chips(topology)  # without chips per VM, only the syntax can be checked
        else:
            derived = tpu_hosts(machine, topology)
    except ValueError as exc:
        issues.append(("tpuTopology", str(exc)))
        return explicit or 1
    if explicit is None and derived is None:
        issues.append(("nodesPerUnit", f"required with tpuTopology because machine type {spec.machine_type!r} is "
                                       f"not in the built-in catalog, so the VMs per {topology} slice are unknown"))
    return explicit or derived or 1


def _labels(spec: PoolSpec, capacity_type: str = ON_DEMAND) -> dict[str, str]:
    machine = CATALOG.get(spec.machine_type)
    labels = machine_labels(machine, spec.tpu_topology) if machine else {}
    labels[POOL_LABEL] = spec.name
    if spec.machine_type:
        labels[INSTANCE_TYPE_LABEL] = spec.machine_type
    if spec.zone:
        labels[ZONE_LABEL] = spec.zone
    if spec.gke is not None:
        # What GKE itself puts on the nodes: a slice is a node pool of its own, named per unit, so no selector on
        # the node pool name can reach a new slice; a VM added to an existing pool carries that pool's name.
        if spec.gke.mode != "slice":
            labels[GKE_NODEPOOL_LABEL] = spec.gke.node_pool
        if spec.gke.mode in RUN_DURATION_MODES:
            labels[GKE_FLEX_START_LABEL] = "true"  # the provider checks at start that the node pool is flex-start
        if spec.zone.count("-") >= 2:
            labels[REGION_LABEL] = spec.zone.rsplit("-", 1)[0]
    elif spec.aws is not None:
        labels.update(_aws_labels(spec, capacity_type))
    elif machine:
        labels[GKE_NODEPOOL_LABEL] = spec.name
    if capacity_type == SPOT and spec.aws is None and (spec.gke is not None or machine):
        labels[GKE_SPOT_LABEL] = "true"  # GKE labels every Spot VM node so ("Use Spot VMs in GKE")
    labels.update(spec.labels)
    return labels


def _aws_labels(spec: PoolSpec, capacity_type: str) -> dict[str, str]:
    """What an EKS node of an ``aws`` pool carries besides the pool file's labels. Its identifying label is
    ``gangscale.io/node-pool`` (added for every pool; the launch template's ``--node-labels`` must set it), or, for a
    managed node group's template (``aws.nodeGroup``), ``eks.amazonaws.com/nodegroup``, which EKS's template sets
    with ``eks.amazonaws.com/capacityType``: both are added here, so that the planner sees what the node will carry.
    The cloud controller adds ``topology.kubernetes.io/region``."""
    aws = spec.aws
    assert aws is not None
    labels = {REGION_LABEL: aws.region}
    if aws.node_group:
        labels[EKS_NODEGROUP_LABEL] = aws.node_group
        labels[EKS_CAPACITY_TYPE_LABEL] = ("CAPACITY_BLOCK" if aws.capacity_block else
                                           "SPOT" if capacity_type == SPOT else "ON_DEMAND")
    return labels


def _taints(spec: PoolSpec) -> tuple[Taint, ...]:
    """The file's taints, plus the ones GKE puts on every GPU and TPU node when the pool is on GKE."""
    taints = [Taint(taint.key, taint.value, taint.effect) for taint in spec.taints]
    machine = CATALOG.get(spec.machine_type)
    if spec.gke is not None and machine is not None:
        for resource, present in ((GPU_RESOURCE, machine.gpus > 0), (TPU_RESOURCE, machine.tpu_chips > 0)):
            if present and not any(t.key == resource for t in taints):
                taints.append(Taint(resource, "present", "NoSchedule"))
    if spec.gke is not None and spec.gke.mode == "queued-provisioning" and \
            not any(t.key == GKE_QUEUED_TAINT for t in taints):
        taints.append(Taint(GKE_QUEUED_TAINT, "true", "NoSchedule"))
    return tuple(taints)


def _schema_problems(exc: ValidationError, model: type[BaseModel], where: str) -> list[str]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if loc[-1:] == ("[key]",):
            loc = loc[:-1]  # pydantic's marker for a bad mapping key; the path ends with the key itself
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = _unknown_field(model, loc)
        elif error["type"] in ("model_type", "model_attributes_type", "dict_type"):
            message = f"expected a mapping, got {_kind(error['input'])}"
        elif error["type"] == "too_short" and loc == ("nodePools",):
            message = "must list at least one pool"
        elif error["type"] == "missing" and loc == ("maxUnits",):
            message += " (every pool needs a maximum, so a runaway gang cannot buy unbounded capacity)"
        path = ".".join(part for part in (where, _format_loc(loc)) if part)
        problems.append(f"{path or '(top level)'}: {message}")
    return problems


def _unknown_field(root: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    parent = _model_at(root, loc[:-1])
    if parent is None:
        return "unknown field"
    known = [info.alias or name for name, info in parent.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"unknown field; did you mean {close[0]}?"
    return f"unknown field; expected one of {', '.join(known)}"


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The schema model that validates the object at ``loc`` (list indexes are skipped)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {info.alias or name: info for name, info in current.model_fields.items()} if current else {}
        if part not in fields:
            return None
        current = _model_in(fields[part].annotation)
    return current


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias) \
            and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _format_loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _pool_where(index: int, raw: object) -> str:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    if not isinstance(name, str) or not name:
        return f"nodePools[{index}]"
    # A name with a newline in it (refused, but named in the problem) must not break the problem's one line.
    return f"nodePools[{index}] ({name if name.isprintable() else repr(name)})"


def _kind(data: object) -> str:
    if data is None:
        return "nothing (an empty value)"
    name = type(data).__name__
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``1.5s``, ``10m``, ``1h30m``, ``7d`` (Go-style units plus ``d``)."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if value < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return value
    pos, total = 0, 0.0
    for match in _DURATION.finditer(raw):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        pos = match.end()
    if not raw or pos != len(raw):
        raise ValueError(f"invalid duration {text!r}: use a number of seconds or units like 500ms, 10s, 5m, 1h30m, 7d")
    return total
