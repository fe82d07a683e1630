"""GKE node pools over the engine: create (a TPU slice pool all at once or not at all; other pools VM by VM),
setSize, delete, setAutoscaling, and how their operations end (DONE, with a GKE error message on failure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gangscale.model.catalog import MachineType
from gangscale.sim.gcp import errors as E
from gangscale.sim.gcp.nodes import gpu_count
from gangscale.sim.gcp.state import (
    DONE,
    ERROR,
    RECONCILING,
    RUNNING,
    RUNNING_WITH_ERROR,
    STOPPING,
    Cluster,
    ContainerOp,
    Member,
    Mig,
    NodePool,
)
from gangscale.sim.gcp.wire import gke_base_name, go_duration

if TYPE_CHECKING:
    from gangscale.sim.gcp.engine import Engine

JSON = dict[str, Any]

CREATE_NODE_POOL = "CREATE_NODE_POOL"
DELETE_NODE_POOL = "DELETE_NODE_POOL"
SET_NODE_POOL_SIZE = "SET_NODE_POOL_SIZE"
UPDATE_CLUSTER = "UPDATE_CLUSTER"
#: What the "cluster busy" message says an operation of each type is doing (only the first two are verbatim).
ACTIVITIES = {
    CREATE_NODE_POOL: "creating a node pool for cluster {cluster}",
    DELETE_NODE_POOL: "deleting a node pool for cluster {cluster}",
    SET_NODE_POOL_SIZE: "resizing a node pool for cluster {cluster}",
    UPDATE_CLUSTER: "updating cluster {cluster}",
}
SLICE = "slice"
GCE_STOCKOUT = "GCE_STOCKOUT"
GCE_QUOTA_EXCEEDED = "GCE_QUOTA_EXCEEDED"


@dataclass
class PoolSpec:
    """A validated node-pool create request."""

    name: str
    config: JSON
    initial_node_count: int
    locations: list[str]
    machine: MachineType
    placement: JSON | None = None
    tpu_topology: str = ""
    slice_hosts: int = 0
    autoscaling: JSON = field(default_factory=dict)
    management: JSON = field(default_factory=dict)
    extra: JSON = field(default_factory=dict)


class PoolLogic:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.state = engine.state
        self.faults = engine.faults

    # --- requests ---------------------------------------------------------------------------------------

    def new_op(self, op_type: str, location: str, cluster: str, pool: str | None, t: float) -> ContainerOp:
        seconds = self.faults.operation_seconds
        op = ContainerOp(self.engine.names.container_operation(t), op_type, location, cluster, pool, t,
                         min_done=t + seconds, deadline=t + max(seconds, self.faults.stockout_after))
        self.state.container_ops[op.name] = op
        return op

    def create(self, cluster: Cluster, spec: PoolSpec, t: float, *, preexisting: bool = False) -> ContainerOp | None:
        pool = NodePool(cluster.location, cluster.name, spec.name, spec.config, spec.initial_node_count,
                        list(spec.locations), spec.machine, t, spec.placement, spec.autoscaling, spec.management,
                        spec.extra, tpu_topology=spec.tpu_topology, slice_hosts=spec.slice_hosts)
        cluster.pools[pool.name] = pool
        owner = SLICE if pool.atomic else None
        for zone in pool.locations:
            base = gke_base_name(cluster.name, pool.name, self.engine.names.hex(8))
            mig = Mig(f"{base}-grp", zone, self.engine.names.uint64(), base, self.engine.links.template(base), t,
                      cluster.location, cluster.name, pool.name)
            self.state.migs[(zone, mig.name)] = mig
            pool.migs[zone] = mig
            for _ in range(spec.initial_node_count):
                member = self.engine.new_member(mig, owner=owner)
                if preexisting:
                    self.engine.new_vm(pool, mig, member, t, preexisting=True)
        if preexisting:
            pool.status = RUNNING
            return None
        op = self.new_op(CREATE_NODE_POOL, cluster.location, cluster.name, pool.name, t)
        if self.faults.async_quota_next > 0:
            self.faults.async_quota_next -= 1
            pool.cap, pool.cap_code = 0, "QUOTA_EXCEEDED"
            op.deadline = op.min_done
        elif not pool.atomic and gpu_count(pool) and self.faults.partial_gpu_grant is not None:
            pool.cap, pool.cap_code = max(0, self.faults.partial_gpu_grant), self.faults.stockout_gce_code
            self.faults.partial_gpu_grant = None
        elif pool.slice_hosts > 1 and self.faults.partial_slice_hosts is not None:
            pool.ready_hosts = max(0, self.faults.partial_slice_hosts)
            self.faults.partial_slice_hosts = None
        self._schedule(op, pool, t)
        return op

    def set_size(self, pool: NodePool, count: int, t: float) -> ContainerOp:
        op = self.new_op(SET_NODE_POOL_SIZE, pool.location, pool.cluster, pool.name, t)
        op.node_count = count
        pool.status = RECONCILING
        for mig in pool.migs.values():
            if count > mig.target_size:
                self.engine.grow(mig, count, t, owner=SLICE if pool.atomic else None)
            else:
                self.engine.shrink(mig, count, t)
        self._schedule(op, pool, t)
        return op

    def delete(self, pool: NodePool, t: float) -> ContainerOp:
        op = self.new_op(DELETE_NODE_POOL, pool.location, pool.cluster, pool.name, t)
        pool.status = STOPPING
        for mig in pool.migs.values():
            for rr in mig.resize_requests.values():
                rr.retry_at = rr.fail_at = None
            mig.retry_at = None
            for member in list(mig.members.values()):
                if member.vm is not None and not member.deleting:
                    self.engine.cordon(member.vm, t)
                self.engine.delete_member(mig, member, t, gone_at=op.min_done)
        op.due = op.min_done
        return op

    def set_autoscaling(self, pool: NodePool, autoscaling: JSON, t: float) -> ContainerOp:
        op = self.new_op(UPDATE_CLUSTER, pool.location, pool.cluster, pool.name, t)
        pool.autoscaling = autoscaling
        pool.generation += 1
        op.due = op.min_done
        return op

    def cancel(self, op: ContainerOp, t: float) -> None:
        """End a RUNNING create/setSize now, as cancelled: what exists stays, a slice's missing VMs are dropped."""
        op.error = {"code": E.RPC_CODES["CANCELLED"], "message": "Operation was cancelled."}
        op.status_message = op.error["message"]
        self._finish(op, t)
        pool = self.state.pool(op.location, op.cluster, op.pool or "")
        if pool is not None:
            self._drop_missing_slice(pool)
            pool.status = RUNNING_WITH_ERROR if self.state.pool_vms(pool) else ERROR

    # --- time -------------------------------------------------------------------------------------------

    def step(self, op: ContainerOp, t: float) -> None:
        pool = self.state.pool(op.location, op.cluster, op.pool or "")
        if op.op_type == DELETE_NODE_POOL:
            if pool is not None:
                self._remove(pool, t)
            self._finish(op, t)
            return
        if op.op_type == UPDATE_CLUSTER or pool is None:
            self._finish(op, t)
            return
        if pool.atomic:
            missing = self._missing(pool)
            if missing:
                self.engine.try_create(pool, missing, t)
        elif t >= op.deadline:
            for mig in pool.migs.values():  # a last attempt: stock may have come back since the MIG's last retry
                if mig.retry_at is not None:
                    self.engine.retry_mig(mig, t)
        self._check_op(op, pool, t)
        if op.status == DONE:
            return
        if t >= op.deadline:
            if self._uncreated(pool):
                self._fail(op, pool, t)
            else:
                op.due = None  # every VM exists and is booting: done when they run (see check)
            return
        op.due = min(op.deadline, t + max(self.faults.retry_seconds, 1e-3)) if pool.atomic else op.deadline

    def check(self, t: float) -> None:
        """Finish every create/setSize whose VMs all run (at the time they did, not before ``min_done``)."""
        for op in list(self.state.container_ops.values()):
            if op.status != DONE and op.op_type in (CREATE_NODE_POOL, SET_NODE_POOL_SIZE):
                pool = self.state.pool(op.location, op.cluster, op.pool or "")
                if pool is not None:
                    self._check_op(op, pool, t)

    def _schedule(self, op: ContainerOp, pool: NodePool, t: float) -> None:
        if pool.atomic:
            op.due = op.min_done
            return
        op.due = op.deadline
        for mig in pool.migs.values():
            if any(m.vm is None for m in mig.members.values()):
                mig.retry_at = t

    def _check_op(self, op: ContainerOp, pool: NodePool, t: float) -> None:
        goal = self._goal_time(pool)
        if goal is None:
            return
        when = max(goal, op.min_done, op.start)
        if when <= t:
            self._finish(op, when)
            pool.status = RUNNING
            pool.conditions = []
            pool.generation += 1

    def _goal_time(self, pool: NodePool) -> float | None:
        """When the pool's own members last reached their goal (all VMs running, none being deleted), or None."""
        times = [pool.last_removal]
        for mig in pool.migs.values():
            for member in mig.members.values():
                if member.owner not in (None, SLICE):
                    continue
                if member.deleting or member.vm is None:
                    return None
                times.append(member.vm.running_at)
        return max(times)

    def _uncreated(self, pool: NodePool) -> bool:
        return any(m.vm is None and m.owner in (None, SLICE) and not m.deleting
                   for mig in pool.migs.values() for m in mig.members.values())

    def _missing(self, pool: NodePool) -> list[tuple[Mig, Member]]:
        return [(mig, m) for mig in pool.migs.values() for m in mig.members.values()
                if m.vm is None and m.owner == SLICE and not m.deleting]

    def _drop_missing_slice(self, pool: NodePool) -> None:
        """A slice is never left partly wanted: its members without a VM leave the MIG (target size 0)."""
        if pool.atomic:
            for mig, member in self._missing(pool):
                mig.members.pop(member.name, None)

    def _fail(self, op: ContainerOp, pool: NodePool, t: float) -> None:
        members = [(mig, m) for mig in pool.migs.values() for m in mig.members.values() if m.owner in (None, SLICE)]
        running = [m for _, m in members if m.vm is not None and m.vm.status(t) == RUNNING]
        stuck = next(((mig, m) for mig, m in members if m.vm is None or m.vm.status(t) != RUNNING), None)
        mig, member = stuck if stuck is not None else members[0]
        error = member.errors[0] if member.errors else self.engine.stockout_error(mig.zone, pool.machine.name)
        quota = "QUOTA" in str(error.get("code"))
        tag = GCE_QUOTA_EXCEEDED if quota else GCE_STOCKOUT
        detail = str(error["message"]) if quota else f"{error['message']} '(resource type:compute)'."
        message = E.gke_instances_message(go_duration(t - op.start), len(members), len(running), tag, member.name,
                                          detail)
        code = E.RPC_CODES["RESOURCE_EXHAUSTED"] if quota else self.faults.stockout_error_code
        op.error = {"code": code, "message": message}
        op.status_message = message
        self._finish(op, t)
        self._drop_missing_slice(pool)
        pool.status = RUNNING_WITH_ERROR if self.state.pool_vms(pool) else ERROR
        pool.conditions = [{"code": tag, "message": message, "canonicalCode": "RESOURCE_EXHAUSTED"}]
        pool.generation += 1

    def _finish(self, op: ContainerOp, t: float) -> None:
        op.status = DONE
        op.end = t
        op.due = None

    def _remove(self, pool: NodePool, t: float) -> None:
        for mig in pool.migs.values():
            for member in list(mig.members.values()):
                if member.vm is not None:
                    self.engine.remove_vm(member.vm, t)
            self.state.migs.pop((mig.zone, mig.name), None)
        cluster = self.state.cluster(pool.location, pool.cluster)
        if cluster is not None:
            cluster.pools.pop(pool.name, None)
