"""Ray demand -> worker-group replicas: the Ray logical resources of a worker group, and pending gangs mapped
onto the groups that can hold them. Pure: no I/O, no grpc.

:func:`group_ray_resources` applies the rules the Ray autoscaler uses on KubeRay (ray-accel-spec §1.3, Ray
2.60 ``_get_ray_resources_from_group_spec``). :func:`gang_needs` plans every pending placement group
all-or-nothing, in the spirit of the autoscaler v2 scheduler (§2.4); :func:`constraint_needs` does the same for
``request_resources()`` constraints.

Planning rules (what ``gang_needs`` does):

- Gangs are planned in the v2 scheduler's order: most placement constraints first (strict strategies carry one
  per bundle), then most bundles, then by id. A gang's bundles are sorted largest first (most resource kinds,
  then largest amounts) and placed first-fit.
- Bundles first go to the ``available`` resources of existing ``RUNNING``/``IDLE`` Ray nodes whose node type is
  one of the given groups, as Ray would place them there. Other nodes (the head, type ``headgroup`` on
  KubeRay, and nodes of groups not passed in) are not used, which can only over-ask. What a gang takes on an
  existing node is not offered to later gangs; what it leaves is.
- The rest goes to new nodes. ``STRICT_SPREAD``: at most one bundle of the gang per node (existing or new);
  ``STRICT_PACK``: the bundles' sum must fit one node; ``PACK``, ``SPREAD`` and unknown strategies: first-fit
  decreasing bin packing (SPREAD is only a soft preference in Ray, and packing is what its autoscaler plans).
- Group choice, repeated until every bundle has a node: the group with the highest priority, then the one that
  needs the fewest new nodes (replicas x hosts) per bundle it places - for groups that can each take every
  remaining bundle, simply the fewest nodes - then, as Ray's scorer does, a group without GPUs when those
  bundles ask for none, then the one placing more bundles, then by name. A gang is split across groups only
  when that needs fewer nodes per bundle or no single group (within ``free_replicas``) can hold it.
- New nodes are opened a whole replica (``hosts`` nodes) at a time. Every host of a new replica offers the
  group's resources, except that ``TPU-<type>-head`` resources exist only on host 0 (as in Ray, where only the
  TPU worker with id 0 advertises them). The new nodes a gang opens, spare hosts included, are its own and are
  not offered to later gangs, so each gang's replicas can be provisioned as a unit.
- ``free_replicas`` is a budget shared by all gangs, spent in gang order; a gang that does not fit in what is
  left gets ``replicas={}`` and an ``unplaceable`` message, and spends nothing.

Simplifications: label selectors and ``bundle_label_selector`` are ignored (groups are matched by resources);
``node:<ip>``-style and implicit resources are not modelled; Ray's utilization scoring between node types is
reduced to the tie-breakers above. The GCS keeps listing a gang while KubeRay creates its pods (a Ray node
appears only once the pod's raylet starts), so "new" replicas include those the Ray autoscaler has already
asked KubeRay for: a caller combining this with the RayCluster source must take the larger of the two per
group, not the sum.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gangscale.model.catalog import TPU_ACCELERATOR_LABEL, TPU_RESOURCE, TPU_TOPOLOGY_LABEL, topology_chips
from gangscale.model.quantity import QuantityError, parse_quantity
from gangscale.model.scheduling import SpecError
from gangscale.sources.gcsreader import GangRequest, ResourceState

HEAD_GROUP = "headgroup"
STANDARD_KEYS = frozenset({"CPU", "GPU", "TPU", "memory"})
#: GKE accelerator label value -> the TPU generation name Ray uses in ``TPU-<generation>-<cores>-head``.
TPU_GENERATIONS = {
    "tpu-v4-podslice": "v4",
    "tpu-v5-lite-device": "v5litepod",
    "tpu-v5-lite-podslice": "v5litepod",
    "tpu-v5p-slice": "v5p",
    "tpu-v6e-slice": "v6e",
    "tpu7x": "v7x",
}
#: Generations with one TensorCore per chip; the others have two.
SINGLE_CORE_GENERATIONS = ("v5litepod", "v6e")
TPU_HEAD = re.compile(r"^TPU-.+-head$")
USABLE_STATUSES = frozenset({"RUNNING", "IDLE"})
_EPSILON = 1e-6  # Ray keeps resources in fixed point with 1e-4 granularity


# --- the resources one pod of a worker group offers --------------------------------------------------------


def group_ray_resources(group: Mapping[str, Any], *, head: bool = False) -> dict[str, float]:
    """The Ray logical resources one pod of ``group`` (a ``spec.workerGroupSpecs[i]``, or the head group with
    ``head=True``) offers, by the Ray autoscaler's rules:

    - ``CPU``: group ``resources.CPU``, else ``rayStartParams["num-cpus"]``, else the Ray container's cpu limit,
      else its request, rounded up (no CPU anywhere raises :class:`SpecError`, as Ray does).
    - ``GPU``: ``resources.GPU``, else ``num-gpus``, else the first container limit (then request) whose name
      ends in ``gpu`` and is positive.
    - ``TPU``: ``resources.TPU``, else ``TPU`` among the custom resources, else ``google.com/tpu``; a TPU group
      with both GKE TPU topology and accelerator node selectors also gets ``TPU-<generation>-<cores>-head: 1``.
    - ``memory``: ``resources.memory``, else ``rayStartParams["memory"]``, else the memory limit, else request.
    - custom: every non-standard key of the group ``resources`` (when it is set, it is the only source), else
      ``rayStartParams["resources"]``, the JSON object KubeRay passes to ``ray start`` wrapped in quotes.

    Differences from Ray: numeric ``rayStartParams`` go through the Kubernetes quantity parser and are rounded
    up (Ray calls ``int()``, which rejects ``"1.5"``); ``rayStartParams["resources"]`` is also accepted as bare
    JSON without the extra quotes, and with fractional amounts.
    """
    name = HEAD_GROUP if head else str(group.get("groupName", ""))
    where = f"{'headGroupSpec' if head else f'workerGroupSpecs[{name}]'}"
    overrides: Mapping[str, Any] = group.get("resources") or {}
    params: Mapping[str, Any] = group.get("rayStartParams") or {}
    container = _ray_container_resources(group)
    limits: Mapping[str, Any] = container.get("limits") or {}
    requests: Mapping[str, Any] = container.get("requests") or {}

    cpu = _first_of(where, ("resources.CPU", overrides.get("CPU")), ("rayStartParams.num-cpus", params.get("num-cpus")),
                    ("limits.cpu", limits.get("cpu")), ("requests.cpu", requests.get("cpu")))
    if cpu is None:
        raise SpecError(where, "no CPU for Ray: set resources.CPU, rayStartParams num-cpus or the Ray container's "
                               "cpu limit")
    resources: dict[str, float] = {"CPU": cpu}
    gpu = _first_of(where, ("resources.GPU", overrides.get("GPU")), ("rayStartParams.num-gpus", params.get("num-gpus")))
    if gpu is None:
        gpu = _container_gpus(where, limits, requests)
    if gpu is not None:
        resources["GPU"] = gpu
    custom = _custom_resources(where, overrides, params)
    tpu = _first_of(where, ("resources.TPU", overrides.get("TPU")), ("custom TPU", custom.get("TPU")))
    if tpu is None:
        tpu = _positive(_first_of(where, ("limits." + TPU_RESOURCE, limits.get(TPU_RESOURCE)),
                                  ("requests." + TPU_RESOURCE, requests.get(TPU_RESOURCE))))
    if tpu is not None:
        resources["TPU"] = tpu
        accelerator = tpu_head_type(_node_selector(group))
        if accelerator:
            resources[f"TPU-{accelerator}-head"] = 1.0
    memory = _first_of(where, ("resources.memory", overrides.get("memory")),
                       ("rayStartParams.memory", params.get("memory")), ("limits.memory", limits.get("memory")),
                       ("requests.memory", requests.get("memory")))
    if memory is not None:
        resources["memory"] = memory
    resources.update(custom)
    return resources


def tpu_head_type(node_selector: Mapping[str, Any]) -> str | None:
    """``v4-16`` for nodeSelector topology ``2x2x2`` + ``tpu-v4-podslice`` (chips x cores per chip), or None when
    either selector is missing or the accelerator is one Ray does not know."""
    topology = str(node_selector.get(TPU_TOPOLOGY_LABEL) or "")
    generation = TPU_GENERATIONS.get(str(node_selector.get(TPU_ACCELERATOR_LABEL) or ""))
    if not topology or generation is None:
        return None
    try:
        chips = topology_chips(topology)
    except ValueError:
        return None
    cores = 1 if generation.startswith(SINGLE_CORE_GENERATIONS) else 2
    return f"{generation}-{chips * cores}"


def _ray_container_resources(group: Mapping[str, Any]) -> Mapping[str, Any]:
    # KubeRay requires the Ray container to be the first one.
    containers = ((group.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    return containers[0].get("resources") or {}


def _node_selector(group: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((group.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}


def _first_of(where: str, *candidates: tuple[str, Any]) -> float | None:
    """The first candidate that is set, as a quantity rounded up to a whole number."""
    for field, value in candidates:
        if value is not None:
            try:
                return float(math.ceil(parse_quantity(value)))
            except QuantityError as exc:
                raise SpecError(f"{where}.{field}", str(exc)) from None
    return None


def _positive(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None


def _container_gpus(where: str, limits: Mapping[str, Any], requests: Mapping[str, Any]) -> float | None:
    for kind, resources in (("limits", limits), ("requests", requests)):
        for key, value in resources.items():
            if str(key).endswith("gpu"):
                amount = _first_of(where, (f"{kind}.{key}", value))
                if amount:
                    return amount
    return None


def _custom_resources(where: str, overrides: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, float]:
    if overrides:
        return {str(key): value for key in overrides if key not in STANDARD_KEYS
                if (value := _first_of(where, (f"resources.{key}", overrides[key]))) is not None}
    raw = params.get("resources")
    if raw is None:
        return {}
    text = str(raw).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    try:
        parsed = json.loads(text.replace("\\", ""))
    except ValueError as exc:
        raise SpecError(f"{where}.rayStartParams.resources", f"not a JSON object ({exc}): {raw!r}") from None
    if not isinstance(parsed, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in parsed.values()):
        raise SpecError(f"{where}.rayStartParams.resources", f"expected a JSON object of numbers, got {raw!r}")
    return {str(key): float(value) for key, value in parsed.items()}


# --- pending gangs -> replicas -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupShape:
    """A worker group as the planner sees it: one pod's Ray resources, pods per replica, headroom."""

    name: str
    resources: Mapping[str, float]
    hosts: int
    free_replicas: int
    priority: int = 0


@dataclass(frozen=True, slots=True)
class GangNeed:
    """What one pending placement group needs: new replicas per group, or why it cannot be placed."""

    pg_id: str
    strategy: str
    replicas: Mapping[str, int]
    unplaceable: str | None


Bundle = Mapping[str, float]


def gang_needs(state: ResourceState, groups: Sequence[GroupShape]) -> list[GangNeed]:
    """Every pending gang of ``state`` -> new replicas per group, all-or-nothing, in planning order."""
    existing = _existing_slots(state, groups, use_total=False)
    budget = {group.name: max(0, group.free_replicas) for group in groups}
    needs = []
    for gang in sorted(state.gangs, key=_gang_order):
        need, taken = _plan_gang(gang, existing, groups, budget)
        if need.unplaceable is None:
            existing = taken
            for name, count in need.replicas.items():
                budget[name] -= count
        needs.append(need)
    return needs


def constraint_needs(state: ResourceState, groups: Sequence[GroupShape]) -> Mapping[str, int]:
    """New replicas per group so that the cluster could hold every ``request_resources()`` bundle at once.

    As in Ray, the bundles are placed on the existing nodes' TOTAL resources ("as if the cluster was
    unutilized") and then on new nodes (PACK rules, within ``free_replicas``); the result is a floor on the
    cluster's size, independent of :func:`gang_needs`, not demand to add to it. All-or-nothing like Ray's
    scheduler: constraints that cannot be held in full need nothing (``{}``).
    """
    units = _sorted_units([bundle for bundle, count in state.constraints for _ in range(max(0, count))])
    if not units:
        return {}
    slots = _existing_slots(state, groups, use_total=True)
    rest = [unit for unit in units if _first_fit(unit, slots, set(), spread=False) is None]
    budget = {group.name: max(0, group.free_replicas) for group in groups}
    replicas, left = _new_nodes(rest, groups, budget, spread=False)
    return {} if left else replicas


def _gang_order(gang: GangRequest) -> tuple[int, int, str]:
    constraints = len(gang.bundles) if gang.strategy in ("STRICT_SPREAD", "STRICT_PACK") else 0
    return -constraints, -len(gang.bundles), gang.pg_id


def _existing_slots(state: ResourceState, groups: Sequence[GroupShape], *, use_total: bool) -> list[dict[str, float]]:
    names = {group.name for group in groups}
    return [dict(node.total if use_total else node.available) for node in state.nodes
            if node.status in USABLE_STATUSES and node.node_type in names]


def _plan_gang(gang: GangRequest, existing: list[dict[str, float]], groups: Sequence[GroupShape],
               budget: Mapping[str, int]) -> tuple[GangNeed, list[dict[str, float]]]:
    """Plan one gang on a copy of the existing nodes; returns its need and the nodes as it would leave them."""
    bundles = [_clean(bundle) for bundle in gang.bundles]
    bundles = [bundle for bundle in bundles if bundle]
    units = [_sum(bundles)] if gang.strategy == "STRICT_PACK" and bundles else bundles
    spread = gang.strategy == "STRICT_SPREAD"
    slots = [dict(free) for free in existing]
    used: set[int] = set()
    rest = [unit for unit in _sorted_units(units) if _first_fit(unit, slots, used, spread=spread) is None]
    replicas, left = _new_nodes(rest, groups, budget, spread=spread)
    if left:
        why = _why_unplaceable(gang, left, groups, budget)
        return GangNeed(pg_id=gang.pg_id, strategy=gang.strategy, replicas={}, unplaceable=why), existing
    return GangNeed(pg_id=gang.pg_id, strategy=gang.strategy, replicas=replicas, unplaceable=None), slots


def _new_nodes(units: list[Bundle], groups: Sequence[GroupShape], budget: Mapping[str, int], *,
               spread: bool) -> tuple[dict[str, int], list[Bundle]]:
    """Place ``units`` on new replicas, one group at a time (see the module docstring for the choice)."""
    remaining = list(units)
    left = dict(budget)
    replicas: dict[str, int] = {}
    while remaining:
        best: tuple[tuple[int, Fraction, int, int, str], GroupShape, int, set[int]] | None = None
        for group in groups:
            count, placed = _fill_group(remaining, group, left.get(group.name, 0), spread=spread)
            if not placed:
                continue
            gpu_waste = int(group.resources.get("GPU", 0) > 0 and not any(
                remaining[i].get("GPU", 0) > 0 for i in placed))
            key = (-group.priority, Fraction(count * max(1, group.hosts), len(placed)), gpu_waste, -len(placed),
                   group.name)
            if best is None or key < best[0]:
                best = (key, group, count, placed)
        if best is None:
            break
        _, group, count, placed = best
        replicas[group.name] = replicas.get(group.name, 0) + count
        left[group.name] -= count
        remaining = [unit for index, unit in enumerate(remaining) if index not in placed]
    return replicas, remaining


def _fill_group(units: Sequence[Bundle], group: GroupShape, budget: int, *, spread: bool) -> tuple[int, set[int]]:
    """How many new replicas of ``group`` (at most ``budget``) take which of ``units``, first fit."""
    first_host = dict(group.resources)
    other_host = {key: value for key, value in first_host.items() if not TPU_HEAD.match(key)}
    hosts = max(1, group.hosts)
    slots: list[dict[str, float]] = []
    used: set[int] = set()
    placed: set[int] = set()
    count = 0
    for index, unit in enumerate(units):
        if not _fits(unit, first_host):
            continue
        if _first_fit(unit, slots, used, spread=spread) is None:
            if count >= budget:
                continue
            count += 1
            slots.extend([dict(first_host)] + [dict(other_host) for _ in range(hosts - 1)])
            if _first_fit(unit, slots, used, spread=spread) is None:  # cannot happen: host 0 holds it
                continue
        placed.add(index)
    return count, placed


def _first_fit(unit: Bundle, slots: list[dict[str, float]], used: set[int], *, spread: bool) -> int | None:
    """Put ``unit`` on the first slot that holds it (a slot this gang used is skipped under STRICT_SPREAD)."""
    for index, free in enumerate(slots):
        if (not spread or index not in used) and _fits(unit, free):
            for key, amount in unit.items():
                free[key] = free.get(key, 0.0) - amount
            used.add(index)
            return index
    return None


def _fits(unit: Bundle, free: Mapping[str, float]) -> bool:
    return all(free.get(key, 0.0) + _EPSILON >= amount for key, amount in unit.items())


def _clean(bundle: Bundle) -> dict[str, float]:
    return {key: amount for key, amount in bundle.items() if amount > 0}


def _sum(bundles: Iterable[Bundle]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for key, amount in bundle.items():
            total[key] = total.get(key, 0.0) + amount
    return total


def _sorted_units(units: Iterable[Bundle]) -> list[Bundle]:
    cleaned = [_clean(unit) for unit in units]
    return sorted((unit for unit in cleaned if unit),
                  key=lambda unit: (-len(unit), sorted(-v for v in unit.values()), sorted(unit.items())))


def _why_unplaceable(gang: GangRequest, left: Sequence[Bundle], groups: Sequence[GroupShape],
                     budget: Mapping[str, int]) -> str:
    subject = f"placement group {gang.pg_id or '?'} ({gang.strategy or 'unknown strategy'}, " \
              f"{len(gang.bundles)} bundles)"
    if not groups:
        return f"{subject}: the cluster has no worker groups to scale"
    names = ", ".join(group.name for group in groups)
    for unit in left:
        for key in sorted(unit):
            if not any(group.resources.get(key, 0) > 0 for group in groups):
                return f"{subject}: a bundle asks for {_fmt(unit)}, but no worker group offers {key!r} " \
                       f"(groups: {names})"
    for unit in left:
        if not any(_fits(unit, group.resources) for group in groups):
            what = f"its {len(gang.bundles)} bundles must share one node and together need {_fmt(unit)}" \
                if gang.strategy == "STRICT_PACK" else f"a bundle needs {_fmt(unit)}"
            shapes = "; ".join(f"{group.name} {_fmt(group.resources)}" for group in groups)
            return f"{subject}: {what}, more than one pod of any worker group offers ({shapes})"
    free = ", ".join(f"{group.name} {budget.get(group.name, 0)}" for group in groups)
    return f"{subject}: {len(left)} bundle(s) would need more new replicas than the worker groups may still add " \
           f"before maxReplicas (free replicas: {free})"


def _fmt(resources: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{key}: {resources[key]:g}" for key in sorted(resources)) + "}"
