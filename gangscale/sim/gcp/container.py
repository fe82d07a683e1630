"""container.googleapis.com v1: node pools and operations of the clusters the fake knows.

Order of checks on a mutating call: the project (403), the cluster (404), the body (400 INVALID_ARGUMENT), the
pool (404, or 409 on create), then the cluster's state (400 FAILED_PRECONDITION busy, 429 too many operations),
then the regional quota (403); only then is anything changed.
"""

from __future__ import annotations

import json
from typing import Any

from gangscale.model.catalog import tpu_hosts
from gangscale.sim.gcp import errors as E
from gangscale.sim.gcp import render
from gangscale.sim.gcp.engine import Engine
from gangscale.sim.gcp.nodes import EFFECTS
from gangscale.sim.gcp.pools import ACTIVITIES, PoolSpec
from gangscale.sim.gcp.routing import Req, Route, int_field, route
from gangscale.sim.gcp.state import DONE, Cluster, NodePool
from gangscale.sim.gcp.templates import duration_seconds
from gangscale.sim.gcp.wire import POOL_NAME_REGEX, machine_shape, region_of, valid_pool_name

JSON = dict[str, Any]

_CREATE_FIELDS = frozenset({"nodePool", "projectId", "zone", "clusterId", "parent"})
_SET_SIZE_FIELDS = frozenset({"nodeCount", "projectId", "zone", "clusterId", "nodePoolId", "name"})
_SET_AUTOSCALING_FIELDS = frozenset({"autoscaling", "projectId", "zone", "clusterId", "nodePoolId", "name"})
#: NodePool fields echoed back as given.
_ECHOED = ("management", "upgradeSettings", "queuedProvisioning", "bestEffortProvisioning", "networkConfig",
           "maxPodsConstraint", "podIpv4CidrSize")
_PLACEMENT_TYPES = frozenset({"TYPE_UNSPECIFIED", "COMPACT"})
_LOCATION_POLICIES = frozenset({"LOCATION_POLICY_UNSPECIFIED", "BALANCED", "ANY"})
DEFAULT_MACHINE_TYPE = "e2-medium"
BASE = "/v1/projects/{project}/locations/{location}"


def _unknown(body: JSON, known: frozenset[str]) -> None:
    for name in body:
        if name not in known:
            raise E.invalid(f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.')


class ContainerAPI:
    def __init__(self, engine: Engine, busy_op: str) -> None:
        self.engine = engine
        self.state = engine.state
        self.faults = engine.faults
        self.links = engine.links
        #: The name the "cluster busy" knob says is upgrading every cluster.
        self.busy_op = busy_op

    def routes(self) -> list[Route]:
        pools = f"{BASE}/clusters/{{cluster}}/nodePools"
        return [
            route("GET", f"{BASE}/clusters/{{cluster}}", self.get_cluster, mutating=False, api="container"),
            route("GET", pools, self.list_pools, mutating=False, api="container"),
            route("POST", pools, self.create_pool, mutating=True, api="container"),
            route("GET", f"{pools}/{{pool}}", self.get_pool, mutating=False, api="container"),
            route("DELETE", f"{pools}/{{pool}}", self.delete_pool, mutating=True, api="container"),
            route("POST", f"{pools}/{{pool}}:setSize", self.set_size, mutating=True, api="container"),
            route("POST", f"{pools}/{{pool}}:setAutoscaling", self.set_autoscaling, mutating=True, api="container"),
            route("GET", f"{BASE}/operations", self.list_operations, mutating=False, api="container"),
            route("GET", f"{BASE}/operations/{{op}}", self.get_operation, mutating=False, api="container"),
            route("POST", f"{BASE}/operations/{{op}}:cancel", self.cancel_operation, mutating=True,
                  api="container"),
        ]

    # --- lookups ----------------------------------------------------------------------------------------

    def _path(self, req: Req, *parts: str) -> str:
        return "/".join((f"projects/{req['project']}/locations/{req['location']}", *parts))

    def _cluster(self, req: Req) -> Cluster:
        self._project(req)
        found = self.state.cluster(req["location"], req["cluster"])
        if found is None:
            raise E.container_not_found(self._path(req, f"clusters/{req['cluster']}"))
        return found

    def _project(self, req: Req) -> None:
        if req["project"] not in (self.state.project, self.state.project_number):
            raise E.GcpError(403, f"Permission denied on resource project {req['project']}.", "PERMISSION_DENIED")

    def _pool(self, req: Req) -> NodePool:
        cluster = self._cluster(req)
        pool = cluster.pools.get(req["pool"])
        if pool is None:
            raise E.container_not_found(self._path(req, f"clusters/{req['cluster']}/nodePools/{req['pool']}"))
        return pool

    def _guard(self, cluster: Cluster, pool: str | None) -> None:
        """Refuse a mutation while the cluster is busy or throttled."""
        if self.faults.busy:
            raise E.busy(self.busy_op, f"upgrading cluster {cluster.name}")
        running = self.state.running_ops(cluster.location, cluster.name)
        for op in running:
            if (pool is not None and op.pool == pool) or self.faults.serialize_cluster_ops:
                raise E.busy(op.name, ACTIVITIES[op.op_type].format(cluster=cluster.name))
        limit = self.faults.max_concurrent_ops
        if limit is not None and len(running) >= limit:
            raise E.too_many_operations(cluster.name, limit)

    def _quota(self, zones_vms: dict[str, int], vcpus: int) -> None:
        by_region: dict[str, int] = {}
        for zone, count in zones_vms.items():
            by_region[region_of(zone)] = by_region.get(region_of(zone), 0) + count
        for region, count in by_region.items():
            limit = self.faults.cpu_quota.get(region)
            if limit is None or count <= 0:
                continue
            requires = float(count * vcpus)
            available = max(0.0, limit - self.engine.vcpus_in_region(region))
            if requires > available:
                raise E.regional_quota(self.state.project, requires, available, limit)

    def _op(self, op_name: str) -> tuple[int, JSON]:
        return 200, render.container_operation(self.links, self.state.container_ops[op_name])

    # --- handlers ---------------------------------------------------------------------------------------

    def get_cluster(self, req: Req) -> tuple[int, JSON]:
        return 200, render.cluster(self.links, self._cluster(req))

    def list_pools(self, req: Req) -> tuple[int, JSON]:
        cluster = self._cluster(req)
        pools = [render.node_pool(self.links, pool) for pool in cluster.pools.values()]
        return 200, ({"nodePools": pools} if pools else {})

    def get_pool(self, req: Req) -> tuple[int, JSON]:
        return 200, render.node_pool(self.links, self._pool(req))

    def create_pool(self, req: Req) -> tuple[int, JSON]:
        cluster = self._cluster(req)
        spec = parse_pool(req.obj(), cluster)
        if spec.name in cluster.pools:
            raise E.container_exists(self._path(req, f"clusters/{cluster.name}/nodePools/{spec.name}"))
        self._guard(cluster, spec.name)
        self._quota(dict.fromkeys(spec.locations, spec.initial_node_count), spec.machine.vcpus)
        op = self.engine.pools.create(cluster, spec, req.now)
        assert op is not None
        return self._op(op.name)

    def delete_pool(self, req: Req) -> tuple[int, JSON]:
        pool = self._pool(req)
        cluster = self._cluster(req)
        self._guard(cluster, pool.name)
        return self._op(self.engine.pools.delete(pool, req.now).name)

    def set_size(self, req: Req) -> tuple[int, JSON]:
        body = req.obj()
        _unknown(body, _SET_SIZE_FIELDS)
        count = int_field(body.get("nodeCount", 0), "node_count")
        if count < 0:
            raise E.invalid("Node_pool.node_count must be non-negative.")
        pool = self._pool(req)
        if self.faults.setsize_queued_rejected and (pool.extra.get("queuedProvisioning") or {}).get("enabled"):
            raise E.failed_precondition(f'Node pool "{pool.name}" uses queued provisioning: its nodes can only be '
                                        "obtained through ProvisioningRequests, not by setting its size.")
        if pool.atomic and pool.slice_hosts > 1:
            if self.faults.setsize_multihost_rejected:
                raise E.invalid(f'Node pool "{pool.name}" is a multi-host TPU slice node pool: its size cannot be '
                                "set; create or delete the node pool instead.")
            if count not in (0, pool.slice_hosts):
                raise E.invalid(f"Node pool \"{pool.name}\" is a multi-host TPU slice of {pool.slice_hosts} nodes: "
                                f"its size can only be 0 or {pool.slice_hosts}.")
        cluster = self._cluster(req)
        self._guard(cluster, pool.name)
        self._quota({zone: max(0, count - mig.target_size) for zone, mig in pool.migs.items()}, pool.machine.vcpus)
        return self._op(self.engine.pools.set_size(pool, count, req.now).name)

    def set_autoscaling(self, req: Req) -> tuple[int, JSON]:
        body = req.obj()
        _unknown(body, _SET_AUTOSCALING_FIELDS)
        autoscaling = parse_autoscaling(body.get("autoscaling"))
        pool = self._pool(req)
        cluster = self._cluster(req)
        self._guard(cluster, pool.name)
        return self._op(self.engine.pools.set_autoscaling(pool, autoscaling, req.now).name)

    def list_operations(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        ops = [render.container_operation(self.links, op) for op in render.operations_in(self.state, req["location"])]
        return 200, ({"operations": ops} if ops else {})

    def get_operation(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        op = self.state.container_ops.get(req["op"])
        if op is None or op.location != req["location"]:
            raise E.container_not_found(self._path(req, f"operations/{req['op']}"))
        return self._op(op.name)

    def cancel_operation(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        op = self.state.container_ops.get(req["op"])
        if op is None or op.location != req["location"]:
            raise E.container_not_found(self._path(req, f"operations/{req['op']}"))
        if op.status == DONE:
            raise E.failed_precondition(f"Operation {op.name} is already done.")
        if op.op_type not in ("CREATE_NODE_POOL", "SET_NODE_POOL_SIZE"):
            raise E.failed_precondition(f"Operation {op.name} of type {op.op_type} cannot be cancelled.")
        self.engine.pools.cancel(op, req.now)
        return 200, {}


# --- request bodies ---------------------------------------------------------------------------------------


def parse_pool(body: JSON, cluster: Cluster) -> PoolSpec:
    """A CreateNodePoolRequest body, checked as GKE checks it (the texts of the checks GKE is not known to make
    are the fake's own)."""
    _unknown(body, _CREATE_FIELDS)
    raw = body.get("nodePool")
    if raw is None or (isinstance(raw, dict) and not raw.get("name")):
        raise E.invalid("Node_pool.name must be specified.")
    if not isinstance(raw, dict):
        raise E.invalid('Invalid JSON payload received. Invalid value for "node_pool": expected an object.')
    name = raw["name"]
    if not isinstance(name, str) or not valid_pool_name(name):
        raise E.invalid(f'Invalid value for field "node_pool.name": "{name}". Must be a match of regex '
                        f"'{POOL_NAME_REGEX}' (only lowercase alphanumerics and '-' allowed, must start with a "
                        "letter and end with an alphanumeric, and must be no longer than 40 characters).")
    count = int_field(raw.get("initialNodeCount", 0), "node_pool.initial_node_count")
    if count < 0:
        raise E.invalid("Node_pool.initial_node_count must be non-negative.")
    config = _config(raw.get("config"))
    machine = machine_shape(config["machineType"])
    if machine is None:
        raise E.invalid(f'Machine type "{config["machineType"]}" is not known in the cluster\'s locations.')
    locations = raw.get("locations") or list(cluster.zones)
    if not isinstance(locations, list) or not all(isinstance(z, str) for z in locations):
        raise E.invalid('Invalid value at \'node_pool.locations\': expected a list of zones.')
    for zone in locations:
        if zone not in cluster.zones:
            raise E.invalid(f'Node pool location "{zone}" is not one of the cluster\'s locations '
                            f"({', '.join(cluster.zones)}).")
    if len(set(locations)) != len(locations):
        raise E.invalid("Node_pool.locations must not repeat a zone.")
    placement = raw.get("placementPolicy")
    topology, hosts = "", 0
    if placement is not None:
        if not isinstance(placement, dict):
            raise E.invalid("Invalid value at 'node_pool.placement_policy': expected an object.")
        kind = placement.get("type", "TYPE_UNSPECIFIED")
        if kind not in _PLACEMENT_TYPES:
            raise E.invalid(f"Invalid value at 'node_pool.placement_policy.type' "
                            f'(type.googleapis.com/google.container.v1.NodePool.PlacementPolicy.Type), "{kind}"')
        topology = str(placement.get("tpuTopology") or "")
    if topology:
        if not machine.is_tpu:
            raise E.invalid(f'TPU topology "{topology}" requires a TPU machine type, not "{machine.name}".')
        try:
            hosts = tpu_hosts(machine, topology)
        except ValueError as exc:
            raise E.invalid(f"Invalid TPU topology: {exc}") from None
        if len(locations) != 1:
            raise E.invalid("A TPU slice node pool must have exactly one node location.")
        if count not in (0, hosts):
            raise E.invalid(f'TPU topology "{topology}" of machine type "{machine.name}" needs {hosts} nodes; '
                            f"initial_node_count is {count}.")
    autoscaling = parse_autoscaling(raw["autoscaling"]) if "autoscaling" in raw else {}
    extra = {key: raw[key] for key in _ECHOED if key in raw}
    return PoolSpec(name, config, count, list(locations), machine, placement, topology, hosts, autoscaling,
                    _management(raw.get("management"), cluster), extra)


def _management(raw: Any, cluster: Cluster) -> JSON:
    """``NodeManagement``, GKE's defaults (auto-repair and auto-upgrade on) filled in. A cluster enrolled in a
    release channel refuses auto-upgrade off: "Node auto-upgrade defaults to true and cannot be disabled" (the
    container v1 discovery document's ``ReleaseChannel``; GKE's release-channel documentation: use a maintenance
    exclusion instead); the 400 text is VERBATIM from reports of it (``research/cloud-providers.md`` §1.9). Auto-repair
    may be off there: GKE's current documentation allows it on Standard node pools in a channel, and its
    queued-provisioning how-to creates pools with ``--no-enable-autorepair`` (older reports, from 2020, show it
    refused too)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise E.invalid("Invalid value at 'node_pool.management': expected an object.")
    for key in ("autoRepair", "autoUpgrade"):
        if key in raw and not isinstance(raw[key], bool):
            raise E.invalid(f"Invalid value at 'node_pool.management.{_snake(key)}' (TYPE_BOOL), "
                            f"{json.dumps(raw[key])}")
    out = {"autoRepair": raw.get("autoRepair", True), "autoUpgrade": raw.get("autoUpgrade", True),
           **{k: v for k, v in raw.items() if k not in ("autoRepair", "autoUpgrade")}}
    channel = cluster.release_channel
    if channel and channel != "UNSPECIFIED" and out["autoUpgrade"] is False:
        raise E.invalid(f"Auto_upgrade cannot be false when release_channel {channel} is set.")
    return out


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _config(raw: Any) -> JSON:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise E.invalid("Invalid value at 'node_pool.config': expected an object.")
    config: JSON = {
        "machineType": DEFAULT_MACHINE_TYPE, "diskSizeGb": 100, "diskType": "pd-balanced",
        "imageType": "COS_CONTAINERD", "serviceAccount": "default",
        "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
        "metadata": {"disable-legacy-endpoints": "true"},
        **raw,
    }
    labels = config.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise E.invalid("Invalid value at 'node_pool.config.labels': expected a map of strings.")
    taints = config.get("taints") or []
    if not isinstance(taints, list):
        raise E.invalid("Invalid value at 'node_pool.config.taints': expected a list.")
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict) or not taint.get("key"):
            raise E.invalid(f"Node_pool.config.taints[{i}].key must be specified.")
        if taint.get("effect") not in EFFECTS:
            raise E.invalid(f"Invalid value at 'node_pool.config.taints[{i}].effect' "
                            f'(type.googleapis.com/google.container.v1.NodeTaint.Effect), "{taint.get("effect")}"')
    accelerators = config.get("accelerators") or []
    if not isinstance(accelerators, list):
        raise E.invalid("Invalid value at 'node_pool.config.accelerators': expected a list.")
    normalized = []
    for i, acc in enumerate(accelerators):
        if not isinstance(acc, dict):
            raise E.invalid(f"Invalid value at 'node_pool.config.accelerators[{i}]': expected an object.")
        count = int_field(acc.get("acceleratorCount", 0), f"node_pool.config.accelerators[{i}].accelerator_count",
                          kind="TYPE_INT64")
        normalized.append({**acc, "acceleratorCount": str(count)})
    if accelerators:
        config["accelerators"] = normalized
    if not isinstance(config["machineType"], str):
        raise E.invalid("Invalid value at 'node_pool.config.machine_type' (TYPE_STRING).")
    for key in ("flexStart", "spot"):
        if key in config and not isinstance(config[key], bool):
            raise E.invalid(f"Invalid value at 'node_pool.config.{_snake(key)}' (TYPE_BOOL), {json.dumps(config[key])}")
    if "maxRunDuration" in config and duration_seconds(config["maxRunDuration"]) is None:
        raise E.invalid("Invalid value at 'node_pool.config.max_run_duration' (type.googleapis.com/"
                        f"google.protobuf.Duration), {json.dumps(config['maxRunDuration'])}")
    return config


def parse_autoscaling(raw: Any) -> JSON:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise E.invalid("Invalid value at 'autoscaling': expected an object.")
    counts = {key: int_field(raw[key], key) for key in ("minNodeCount", "maxNodeCount", "totalMinNodeCount",
                                                        "totalMaxNodeCount") if key in raw}
    if any(value < 0 for value in counts.values()):
        raise E.invalid("Node pool autoscaling limits must be non-negative.")
    per_zone = "minNodeCount" in counts or "maxNodeCount" in counts
    total = "totalMinNodeCount" in counts or "totalMaxNodeCount" in counts
    if per_zone and total:
        raise E.invalid("Autoscaling per-zone limits (min/max_node_count) and total limits "
                        "(total_min/max_node_count) are mutually exclusive.")
    for low, high in (("minNodeCount", "maxNodeCount"), ("totalMinNodeCount", "totalMaxNodeCount")):
        if counts.get(low, 0) > counts.get(high, counts.get(low, 0)):
            raise E.invalid("Node pool autoscaling: the minimum node count must not exceed the maximum.")
    policy = raw.get("locationPolicy")
    if policy is not None and policy not in _LOCATION_POLICIES:
        raise E.invalid("Invalid value at 'autoscaling.location_policy' "
                        f'(type.googleapis.com/google.container.v1.NodePoolAutoscaling.LocationPolicy), "{policy}"')
    return {**raw, **counts}
