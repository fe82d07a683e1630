"""The fake cloud's behaviour over time: VMs created against stock and quota, MIGs that retry what they could not
create, resize requests that create all their VMs at once or fail, compute operations, and the events that move
all of it on (:meth:`Engine.advance`). Node-pool operations are in :mod:`.pools`.

Everything here is synchronous and reads time only from its arguments: the server calls :meth:`Engine.advance`
with the clock's time before serving each request and from its ticker at :meth:`Engine.next_due`. Each event is
applied at its own due time, so the outcome does not depend on when the ticker happens to wake.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from gangscale.sim.gcp import errors as E
from gangscale.sim.gcp.faults import GcpFaults
from gangscale.sim.gcp.nodes import CORDON, DELETE, READY, REGISTER, NodeAction, node_body
from gangscale.sim.gcp.pools import SLICE, PoolLogic
from gangscale.sim.gcp.state import (
    ACCEPTED,
    ACTIVE_RR_STATES,
    CREATING,
    DONE,
    FAILED,
    SUCCEEDED,
    CloudState,
    ComputeOp,
    Member,
    Mig,
    NodePool,
    ResizeRequest,
    Vm,
)
from gangscale.sim.gcp.templates import max_run_seconds
from gangscale.sim.gcp.wire import Links, Names, region_of

JSON = dict[str, Any]
QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
USER = "fake-gcp@developer.gserviceaccount.com"
#: A guard against an event that never moves on (a bug would otherwise hang the server).
_MAX_EVENTS = 1_000_000


class Engine:
    def __init__(self, state: CloudState, faults: GcpFaults, names: Names, links: Links) -> None:
        self.state = state
        self.faults = faults
        self.names = names
        self.links = links
        self.pools = PoolLogic(self)
        #: Kubernetes calls to make, drained by the server.
        self.actions: list[NodeAction] = []
        #: Called with a compute operation's name when it turns DONE (wakes ``wait`` requests).
        self.on_compute_done: Callable[[str], None] = lambda name: None

    # --- capacity ---------------------------------------------------------------------------------------

    def vcpus_in_region(self, region: str) -> float:
        return float(sum(vm.vcpus for vm in self.state.vms.values() if region_of(vm.zone) == region))

    def stockout_error(self, zone: str, machine_type: str) -> JSON:
        code = self.faults.stockout_gce_code
        error: JSON = {"code": code, "message": E.zone_exhausted_message(self.state.project, zone)}
        if code.endswith("_WITH_DETAILS"):
            error["errorDetails"] = [{"errorInfo": {
                "reason": "resource_availability", "domain": "compute.googleapis.com",
                "metadatas": {"zone": zone, "vmType": machine_type, "zonesAvailable": ""}}}]
        return error

    def quota_error(self, region: str, limit: float) -> JSON:
        return {"code": QUOTA_EXCEEDED, "message": E.quota_exceeded_message(limit, region),
                "errorDetails": [{"quotaInfo": {"metricName": "compute.googleapis.com/cpus",
                                                "limitName": "CPUS-per-project-region",
                                                "dimensions": {"region": region}, "limit": limit}}]}

    def shortfall(self, pool: NodePool, members: list[tuple[Mig, Member]]) -> JSON | None:
        """Why ``members`` cannot all get a VM now (the first reason found), or None if they can."""
        if not members:
            return None
        if pool.cap is not None and len(self.state.pool_vms(pool)) + len(members) > pool.cap:
            zone = members[0][0].zone
            if pool.cap_code == QUOTA_EXCEEDED:
                region = region_of(zone)
                return self.quota_error(region, self.faults.cpu_quota.get(region, self.vcpus_in_region(region)))
            return self.stockout_error(zone, pool.machine.name)
        by_region = Counter(region_of(mig.zone) for mig, _ in members)
        for region, count in by_region.items():
            limit = self.faults.cpu_quota.get(region)
            if limit is not None and self.vcpus_in_region(region) + count * pool.machine.vcpus > limit:
                return self.quota_error(region, limit)
        by_zone = Counter(mig.zone for mig, _ in members)
        for zone, count in by_zone.items():
            stock = self.faults.stock.get((zone, pool.machine.name))
            if stock is not None and stock < count:
                return self.stockout_error(zone, pool.machine.name)
        return None

    def try_create(self, pool: NodePool, members: list[tuple[Mig, Member]], t: float) -> bool:
        """Create a VM for every one of ``members``, or for none (each then records why)."""
        error = self.shortfall(pool, members)
        if error is not None:
            for _, member in members:
                member.errors = [error]
            return False
        for i, (mig, member) in enumerate(members):
            self.new_vm(pool, mig, member, t, register_later=i * self.faults.register_spread_seconds)
        return True

    # --- VMs and members --------------------------------------------------------------------------------

    def new_vm(self, pool: NodePool, mig: Mig, member: Member, t: float, *, preexisting: bool = False,
               register_later: float = 0.0) -> Vm:
        """A VM for ``member``; one made for a resize request records its name (the instance's metadata item
        ``google-compute-mig-resize-request``); its template's ``maxRunDuration`` sets its end of life."""
        boot = 0.0 if preexisting else self.faults.boot_seconds
        register = 0.0 if preexisting else self.faults.register_seconds + register_later
        run = max_run_seconds(pool)
        vm = Vm(member.name, mig.zone, pool.machine.name, pool.machine.vcpus, mig.name, self.names.uint64(), t,
                t + boot, register_at=t + boot + register, preexisting=preexisting,
                never_ready=not preexisting and self._broken_kubelet(pool),
                resize_request=member.owner if member.owner not in (None, SLICE) else None,
                terminate_at=None if run is None else t + run)
        member.vm = vm
        member.errors = []
        self.state.vms[(vm.zone, vm.name)] = vm
        key = (vm.zone, vm.machine_type)
        stock = self.faults.stock.get(key)
        if stock is not None:
            self.faults.stock[key] = stock - 1
        return vm

    def _broken_kubelet(self, pool: NodePool) -> bool:
        """Whether the VM about to be made for ``pool`` gets a Node that never turns Ready: under ``never_ready``,
        or once a partial slice has its quota of healthy hosts (the first ones made are the healthy ones)."""
        if self.faults.never_ready:
            return True
        if pool.ready_hosts is None:
            return False
        return sum(1 for vm in self.state.pool_vms(pool) if not vm.never_ready) >= pool.ready_hosts

    def new_member(self, mig: Mig, *, owner: str | None = None, name: str | None = None) -> Member:
        while name is None or name in mig.members or (mig.zone, name) in self.state.vms \
                or name in self.state.node_deletions:
            name = f"{mig.base_instance_name}-{self.names.suffix()}"
        member = Member(name, owner=owner)
        mig.members[name] = member
        return member

    def delete_member(self, mig: Mig, member: Member, t: float, *, gone_at: float | None = None) -> None:
        """Start deleting a member: one without a VM goes at once; a VM is STOPPING until ``gone_at``."""
        if member.vm is None:
            mig.members.pop(member.name, None)
            return
        if member.deleting:
            return
        member.deleting = True
        member.vm.deleting_at = t
        member.vm.gone_at = t + self.faults.vm_delete_seconds if gone_at is None else gone_at

    def cordon(self, vm: Vm, t: float) -> None:
        """The VM's Node is marked unschedulable: GKE drains every node of a node pool it deletes ("About node
        pools": "When you delete a node pool, GKE drains all the nodes in the node pool"), and a drain cordons the
        node before it evicts. Only a registered Node; one still to register is STOPPING and never will."""
        if vm.registered:
            self.actions.append(NodeAction(CORDON, vm.name, t))

    def remove_vm(self, vm: Vm, t: float) -> None:
        """The VM is gone: out of its MIG, its stock given back, its Node deleted."""
        self.state.vms.pop((vm.zone, vm.name), None)
        mig = self.state.mig(vm.zone, vm.mig)
        if mig is not None:
            member = mig.members.get(vm.name)
            if member is not None and member.vm is vm:
                del mig.members[vm.name]
            pool = self.state.pool_of(mig)
            if pool is not None:
                pool.last_removal = max(pool.last_removal, t)
        key = (vm.zone, vm.machine_type)
        stock = self.faults.stock.get(key)
        if stock is not None:
            self.faults.stock[key] = stock + 1
        if self.faults.node_delete_seconds > 0:
            self.state.node_deletions[vm.name] = t + self.faults.node_delete_seconds
        else:
            self.actions.append(NodeAction(DELETE, vm.name, t))

    def _delete_node(self, name: str, t: float) -> None:
        self.state.node_deletions.pop(name, None)
        self.actions.append(NodeAction(DELETE, name, t))

    def shrink(self, mig: Mig, size: int, t: float, *, gone_at: float | None = None) -> None:
        """Remove members down to ``size``: members without a VM first, then the newest VMs. Members of resize
        requests are never picked."""
        live = [m for m in mig.members.values() if not m.deleting and m.owner in (None, "slice")]
        excess = mig.target_size - size
        pending = [m for m in live if m.vm is None]
        made = sorted((m for m in live if m.vm is not None), key=lambda m: (m.vm.created_at if m.vm else 0, m.name),
                      reverse=True)
        for member in (pending + made)[:max(0, excess)]:
            self.delete_member(mig, member, t, gone_at=gone_at)

    def grow(self, mig: Mig, size: int, t: float, *, owner: str | None = None) -> None:
        for _ in range(size - mig.target_size):
            self.new_member(mig, owner=owner)
        if owner is None:
            mig.retry_at = t

    def retry_mig(self, mig: Mig, t: float) -> None:
        """The MIG tries again to create each of its own members that has no VM yet."""
        pool = self.state.pool_of(mig)
        waiting = [m for m in mig.members.values() if m.vm is None and m.owner is None and not m.deleting]
        if pool is not None:
            for member in waiting:
                self.try_create(pool, [(mig, member)], t)
        left = any(m.vm is None and m.owner is None for m in mig.members.values())
        mig.retry_at = t + max(self.faults.retry_seconds, 1e-3) if left and pool is not None else None

    # --- resize requests ---------------------------------------------------------------------------------

    def insert_resize_request(self, mig: Mig, name: str, count: int, instances: list[str] | None,
                              duration: JSON | None, run_seconds: float | None, description: str,
                              t: float) -> ResizeRequest:
        rr = ResizeRequest(name, self.names.uint64(), mig.zone, mig.name, t, [],
                           None if instances is not None else count, instances, duration, run_seconds, description)
        for given in instances if instances is not None else [None] * count:
            rr.members.append(self.new_member(mig, owner=name, name=given).name)
        rr.retry_at = t
        if self.faults.resize_request_fail_after is not None:
            rr.fail_at = t + self.faults.resize_request_fail_after
        mig.resize_requests[name] = rr
        return rr

    def _rr_members(self, mig: Mig, rr: ResizeRequest) -> list[tuple[Mig, Member]]:
        return [(mig, mig.members[name]) for name in rr.members if name in mig.members]

    def _rr_attempt(self, mig: Mig, rr: ResizeRequest, t: float) -> None:
        if rr.state == CREATING:
            rr.state = ACCEPTED
        pool = self.state.pool_of(mig)
        members = [(m, member) for m, member in self._rr_members(mig, rr) if member.vm is None]
        if pool is not None and self.try_create(pool, members, t):
            for _, member in members:
                member.owner = None  # from now on ordinary members of the MIG
                if member.vm is not None and rr.run_seconds is not None:
                    member.vm.terminate_at = t + rr.run_seconds  # counted from the request's success
            rr.state = SUCCEEDED
            rr.last_errors = []
            rr.retry_at = rr.fail_at = None
            rr.ended_at = t
            return
        rr.last_errors = [dict(e) for e in members[0][1].errors] if members and members[0][1].errors else []
        rr.retry_at = t + max(self.faults.retry_seconds, 1e-3)

    def end_resize_request(self, mig: Mig, rr: ResizeRequest, state: str, t: float) -> None:
        """FAILED or CANCELLED: every VM made for it is rolled back and its members leave the MIG."""
        rr.state = state
        rr.ended_at = t
        if state == FAILED:
            rr.errors = rr.last_errors or [self.stockout_error(mig.zone, self._machine_of(mig))]
        rr.retry_at = rr.fail_at = None
        for _, member in self._rr_members(mig, rr):
            if member.vm is not None:
                self.remove_vm(member.vm, t)
            mig.members.pop(member.name, None)

    def _machine_of(self, mig: Mig) -> str:
        pool = self.state.pool_of(mig)
        return pool.machine.name if pool is not None else ""

    # --- compute operations ------------------------------------------------------------------------------

    def compute_op(self, op_type: str, zone: str, target_link: str, target_id: str, request_id: str | None,
                   t: float) -> ComputeOp:
        op = ComputeOp(self.names.compute_operation(t), self.names.uint64(), op_type, zone, target_link, target_id,
                       t, t + self.faults.compute_operation_seconds, request_id, USER)
        self.state.compute_ops[op.name] = op
        if request_id is not None:
            self.state.request_ids[request_id] = op.name
        return op

    # --- time -------------------------------------------------------------------------------------------

    def _events(self) -> Iterable[tuple[float, int, Callable[[float], None]]]:
        """Every pending event as ``(due, order, apply)``."""
        # At one instant: MIGs and resize requests act first, then the operations that watch them.
        for mig in list(self.state.migs.values()):
            if mig.retry_at is not None:
                yield mig.retry_at, 0, partial(self.retry_mig, mig)
            for rr in mig.resize_requests.values():
                for due in (rr.retry_at, rr.fail_at):
                    if due is not None:
                        yield due, 1, partial(self._rr_event, mig, rr)
        for op in self.state.container_ops.values():
            if op.status != DONE and op.due is not None:
                yield op.due, 2, partial(self.pools.step, op)
        for cop in self.state.compute_ops.values():
            if cop.status != DONE:
                yield cop.due, 3, partial(self._finish_compute, cop)
        for vm in list(self.state.vms.values()):
            if vm.terminate_at is not None and vm.deleting_at is None:
                yield vm.terminate_at, 1, partial(self._terminate, vm)
            if vm.gone_at is not None:
                yield vm.gone_at, 4, partial(self.remove_vm, vm)
            elif vm.register_at is not None:
                yield vm.register_at, 5, partial(self._register, vm)
            elif vm.ready_at is not None:
                yield vm.ready_at, 6, partial(self._ready, vm)
        for name, due in list(self.state.node_deletions.items()):
            yield due, 7, partial(self._delete_node, name)

    def next_due(self, now: float) -> float | None:
        """The earliest time at which something will happen by itself (None: nothing will)."""
        dues = [due for due, _, _ in self._events()]
        dues += [vm.running_at for vm in self.state.vms.values() if vm.running_at > now]
        dues += [op.min_done for op in self.state.container_ops.values() if op.status != DONE and op.min_done > now]
        return min(dues) if dues else None

    def advance(self, now: float) -> None:
        """Apply, in time order and each at its own time, every event due by ``now``."""
        for _ in range(_MAX_EVENTS):
            due = [event for event in self._events() if event[0] <= now]
            if not due:
                break
            t, _, apply = min(due, key=lambda event: (event[0], event[1]))
            apply(t)
            self.pools.check(t)
        else:
            raise RuntimeError(f"fake GCP: more than {_MAX_EVENTS} events due at once; an event does not progress")
        self.pools.check(now)

    def _finish_compute(self, op: ComputeOp, t: float) -> None:
        op.status = DONE
        op.end = t
        self.on_compute_done(op.name)

    def _terminate(self, vm: Vm, t: float) -> None:
        """The VM's end of life: Compute Engine deletes it, and it leaves its MIG's target size (Google does not
        document whether the target size drops; the fake assumes it does, as for deleteInstances)."""
        mig = self.state.mig(vm.zone, vm.mig)
        member = mig.members.get(vm.name) if mig is not None else None
        if mig is None or member is None or member.vm is not vm:
            vm.terminate_at = None
            return
        self.delete_member(mig, member, t)

    def _rr_event(self, mig: Mig, rr: ResizeRequest, t: float) -> None:
        if rr.fail_at is not None and rr.fail_at <= t and rr.state in ACTIVE_RR_STATES:
            self._rr_attempt(mig, rr, t)  # stock that arrived just now still counts
            if rr.state != SUCCEEDED:
                self.end_resize_request(mig, rr, FAILED, t)
        elif rr.retry_at is not None and rr.retry_at <= t and rr.state in ACTIVE_RR_STATES:
            self._rr_attempt(mig, rr, t)
        if rr.state not in ACTIVE_RR_STATES:
            rr.retry_at = rr.fail_at = None

    def _register(self, vm: Vm, t: float) -> None:
        vm.register_at = None
        vm.registered = True
        # A broken kubelet registers (Ready=False) and then never posts Ready.
        vm.ready_at = None if vm.never_ready else t if vm.preexisting else t + self.faults.ready_seconds
        mig = self.state.mig(vm.zone, vm.mig)
        pool = self.state.pool_of(mig) if mig is not None else None
        if pool is not None:
            self.actions.append(NodeAction(REGISTER, vm.name, t, node_body(self.state.project, pool, vm, t)))

    def _ready(self, vm: Vm, t: float) -> None:
        vm.ready_at = None
        self.actions.append(NodeAction(READY, vm.name, t))
