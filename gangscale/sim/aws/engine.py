"""The fake EC2's behaviour over time: launching instances, their states, spot interruptions, and the Node calls a
kubelet (and the cluster's controllers) would make for them.

Everything here is synchronous and reads time only from its arguments: the server calls :meth:`Engine.advance` with
the clock's time before each request and from its ticker at :meth:`Engine.next_due`, and each event is applied at
its own due time (as the fake Google Cloud's engine does).

Rules and their sources:
- ``pending`` → ``running`` after ``boot_seconds``; ``shutting-down`` → ``terminated`` after ``shutdown_seconds``
  (instance states: botocore's ``InstanceState``; EC2 user guide "Instance state changes").
- "Terminated instances remain visible after termination (for approximately one hour)" (TerminateInstances in the
  EC2 API reference, as the SDKs quote it; DescribeInstances: "Recently terminated instances might appear in the
  returned results. This interval is usually less than one hour."): a terminated instance is listed for
  ``terminated_visible_seconds`` (default 3600), then forgotten.
- Terminated instances give their capacity back: stock of their ``(type, zone, lifecycle)`` rises by one and their
  capacity reservation's available count too (EC2 user guide, "Launch instances using Capacity Blocks": "the
  available capacity in your Capacity Block will update to show another instance available to use" once the
  instance is terminated).
- ``StateReason`` of a terminated instance: ``Client.UserInitiatedShutdown`` after TerminateInstances,
  ``Server.SpotInstanceTermination`` after a spot interruption (EC2 API reference, ``StateReason``).
- Nodes: registered ``register_seconds`` after the instance runs (``Ready=False``), Ready ``ready_seconds`` later;
  deleted when the instance is terminated, as the AWS cloud controller manager's node lifecycle controller deletes
  the Node of an instance that no longer exists (Kubernetes cloud-node-lifecycle controller). A spot interruption
  notice taints the Node as AWS Node Termination Handler does (:mod:`.nodes`) and the instance is interrupted
  ``spot_notice_seconds`` later ("two-minute warning", EC2 user guide "Spot Instance interruption notices").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from gangscale.model.catalog import MachineType
from gangscale.sim.aws.faults import Ec2Faults
from gangscale.sim.aws.nodes import DELETE, READY, REGISTER, TAINT, NodeAction, node_body, parse_user_data
from gangscale.sim.aws.state import (
    PENDING,
    RUNNING,
    SHUTTING_DOWN,
    SPOT,
    TERMINATED,
    Ec2State,
    Ids,
    Instance,
    LaunchTemplate,
    Subnet,
    dns_domain,
)

_MAX_EVENTS = 1_000_000
USER_SHUTDOWN = ("Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown")
SPOT_TERMINATION = ("Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination")


class Engine:
    def __init__(self, state: Ec2State, faults: Ec2Faults, ids: Ids, machines: dict[str, MachineType]) -> None:
        self.state = state
        self.faults = faults
        self.ids = ids
        #: Instance type → its shape (vCPUs, memory, GPUs), for DescribeInstanceTypes, quotas and Nodes.
        self.machines = machines
        #: Kubernetes calls to make, drained by the server.
        self.actions: list[NodeAction] = []
        #: Instance id → when it vanishes from DescribeInstances.
        self.forget_at: dict[str, float] = {}

    # --- launching and terminating ------------------------------------------------------------------------

    def launch(self, *, template: LaunchTemplate, version: int, instance_type: str, subnet: Subnet,
               lifecycle: str, reservation_id: str | None, tags: dict[str, str], token: str,
               placement_group: str | None, launch_id: str, now: float) -> Instance:
        """One new ``pending`` instance; its stock is taken by the caller."""
        machine = self.machines[instance_type]
        address = subnet.allocate()
        instance_id = self.ids.hex17("i")
        region = self.state.region
        host = instance_id if subnet.hostname_type == "resource-name" else f"ip-{address.replace('.', '-')}"
        labels, taints = parse_user_data(str(template.versions[version].get("UserData") or ""))
        instance = Instance(instance_id, instance_type, subnet.zone, subnet.id, address, f"{host}.{dns_domain(region)}",
                            lifecycle, now, now + self.faults.boot_seconds, launch_id, template.id, version, token,
                            dict(tags), reservation_id, placement_group, machine.vcpus,
                            node_labels=labels, node_taints=taints)
        self.state.instances[instance_id] = instance
        return instance

    def terminate(self, instance: Instance, now: float, reason: tuple[str, str] = USER_SHUTDOWN) -> None:
        if instance.state in (SHUTTING_DOWN, TERMINATED):
            return
        instance.state = SHUTTING_DOWN
        instance.state_reason = reason
        instance.shutting_down_at = now
        instance.interrupt_at = None
        instance.terminated_at = now + self.faults.shutdown_seconds

    def interrupt(self, instance: Instance, now: float) -> None:
        """A spot interruption notice: the Node is tainted now, the instance interrupted after the notice."""
        if instance.lifecycle != SPOT or instance.state != RUNNING or instance.interrupt_at is not None:
            return
        instance.interrupt_at = now + self.faults.spot_notice_seconds
        if instance.registered:
            self.actions.append(NodeAction(TAINT, instance.private_dns, now))

    # --- time ---------------------------------------------------------------------------------------------

    def _events(self) -> Iterable[tuple[float, int, Callable[[float], None]]]:
        for instance in list(self.state.instances.values()):
            if instance.state == PENDING:
                yield instance.running_at, 0, partial(self._run, instance)
            if instance.interrupt_at is not None:
                yield instance.interrupt_at, 1, partial(self._interrupted, instance)
            if instance.state == SHUTTING_DOWN and instance.terminated_at is not None:
                yield instance.terminated_at, 2, partial(self._terminated, instance)
            if instance.register_at is not None:
                yield instance.register_at, 3, partial(self._register, instance)
            if instance.ready_at is not None:
                yield instance.ready_at, 4, partial(self._ready, instance)
        for instance_id, due in list(self.forget_at.items()):
            yield due, 5, partial(self._forget, instance_id)

    def next_due(self) -> float | None:
        dues = [due for due, _, _ in self._events()]
        return min(dues) if dues else None

    def advance(self, now: float) -> None:
        """Apply, in time order and each at its own time, every event due by ``now``."""
        for _ in range(_MAX_EVENTS):
            due = [event for event in self._events() if event[0] <= now]
            if not due:
                return
            t, _, apply = min(due, key=lambda event: (event[0], event[1]))
            apply(t)
        raise RuntimeError(f"fake EC2: more than {_MAX_EVENTS} events due at once")

    def _run(self, instance: Instance, t: float) -> None:
        instance.state = RUNNING
        instance.register_at = t + self.faults.register_seconds

    def _interrupted(self, instance: Instance, t: float) -> None:
        instance.interrupt_at = None
        self.terminate(instance, t, SPOT_TERMINATION)

    def _terminated(self, instance: Instance, t: float) -> None:
        instance.state = TERMINATED
        instance.register_at = instance.ready_at = None
        subnet = self.state.subnets.get(instance.subnet_id)
        if subnet is not None:
            subnet.used.discard(instance.private_ip)
        if instance.capacity_reservation_id is None:
            key = (instance.instance_type, instance.zone, instance.lifecycle)
            stock = self.state.stock.get(key)
            if stock is not None:
                self.state.stock[key] = stock + 1
        if instance.registered:
            instance.registered = False
            self.actions.append(NodeAction(DELETE, instance.private_dns, t,
                                           {"spec": {"providerID": f"aws:///{instance.zone}/{instance.id}"}}))
        self.forget_at[instance.id] = t + self.faults.terminated_visible_seconds

    def _forget(self, instance_id: str, t: float) -> None:
        self.forget_at.pop(instance_id, None)
        self.state.instances.pop(instance_id, None)

    def _register(self, instance: Instance, t: float) -> None:
        instance.register_at = None
        instance.registered = True
        instance.ready_at = t + self.faults.ready_seconds
        machine = self.machines[instance.instance_type]
        self.actions.append(NodeAction(REGISTER, instance.private_dns, t,
                                       node_body(instance, machine, self.state.region, t)))
        if instance.interrupt_at is not None:
            # Noticed before its node joined: NTH (IMDS mode, a DaemonSet) starts on the node once it has joined and
            # finds the notice pending in the instance metadata (``spot/instance-action``), so the taint follows the
            # registration (chaos seed 24024: a node reclaimed untainted looked removed for no reason).
            self.actions.append(NodeAction(TAINT, instance.private_dns, t))

    def _ready(self, instance: Instance, t: float) -> None:
        instance.ready_at = None
        self.actions.append(NodeAction(READY, instance.private_dns, t))
