"""The JSON the fake answers with: container v1 NodePool, Cluster and Operation; compute v1
InstanceGroupManager, ManagedInstance, Instance, InstanceGroupManagerResizeRequest and Operation.

Proto3 JSON conventions as the real services use them: camelCase names, int64/uint64 as strings, empty
repeated fields and unset messages left out.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gangscale.sim.gcp.state import (
    DONE,
    RUNNING,
    CloudState,
    Cluster,
    ComputeOp,
    ContainerOp,
    Member,
    Mig,
    NodePool,
    ResizeRequest,
    Vm,
)
from gangscale.sim.gcp.templates import scheduling
from gangscale.sim.gcp.wire import Links, compute_time, container_time

JSON = dict[str, Any]
GKE_VERSION = "1.33.5-gke.1080000"
#: The metadata item Compute Engine puts on a VM made by a MIG resize request (GKE's gcp-controller-manager copies
#: it into the Node label ``autoscaling.gke.io/provisioning-request``; research notes gke-queued-code §6).
RESIZE_REQUEST_METADATA = "google-compute-mig-resize-request"
HTTP_MESSAGES = {400: "BAD REQUEST", 403: "FORBIDDEN", 404: "NOT FOUND", 409: "CONFLICT", 412: "PRECONDITION FAILED"}


def node_pool(links: Links, pool: NodePool) -> JSON:
    out: JSON = {
        "name": pool.name,
        "config": pool.config,
        "initialNodeCount": pool.initial_node_count,
        "locations": list(pool.locations),
        "selfLink": links.pool(pool.location, pool.cluster, pool.name),
        "version": GKE_VERSION,
        "instanceGroupUrls": [links.mig(zone, mig.name) for zone, mig in pool.migs.items()],
        "status": pool.status,
        "management": pool.management or {"autoRepair": True, "autoUpgrade": True},
        "maxPodsConstraint": {"maxPodsPerNode": "110"},
        "podIpv4CidrSize": 24,
        "upgradeSettings": {"maxSurge": 1, "strategy": "SURGE"},
        "etag": hashlib.sha256(f"{pool.name}/{pool.generation}/{pool.status}".encode()).hexdigest()[:16],
        **pool.extra,
    }
    if pool.autoscaling:
        out["autoscaling"] = pool.autoscaling
    if pool.placement:
        out["placementPolicy"] = pool.placement
    if pool.conditions:
        out["conditions"] = [dict(c) for c in pool.conditions]
        out["statusMessage"] = pool.conditions[0]["message"]
    return out


def cluster(links: Links, found: Cluster) -> JSON:
    return {
        "name": found.name,
        "location": found.location,
        "locations": list(found.zones),
        "zone": found.location,
        "selfLink": links.cluster(found.location, found.name),
        "status": "RUNNING",
        "currentMasterVersion": GKE_VERSION,
        "currentNodeVersion": GKE_VERSION,
        "createTime": container_time(found.created_at),
        "nodePools": [node_pool(links, pool) for pool in found.pools.values()],
        **({"releaseChannel": {"channel": found.release_channel}} if found.release_channel else {}),
    }


def container_operation(links: Links, op: ContainerOp) -> JSON:
    out: JSON = {
        "name": op.name,
        "zone": op.location,
        "location": op.location,
        "operationType": op.op_type,
        "status": op.status,
        "selfLink": links.container_operation(op.location, op.name),
        "targetLink": links.container_target(op.location, op.cluster, op.pool),
        "startTime": container_time(op.start),
    }
    if op.end is not None:
        out["endTime"] = container_time(op.end)
    if op.error is not None:
        out["error"] = dict(op.error)
    if op.status_message:
        out["statusMessage"] = op.status_message
    return out


def _actions(mig: Mig, now: float) -> dict[str, int]:
    counts = dict.fromkeys(("abandoning", "creating", "creatingWithoutRetries", "deleting", "none", "recreating",
                            "refreshing", "restarting", "resuming", "starting", "stopping", "suspending",
                            "verifying"), 0)
    for member in mig.members.values():
        counts[{"CREATING": "creating", "DELETING": "deleting", "NONE": "none"}[current_action(member, now)]] += 1
    return counts


def current_action(member: Member, now: float) -> str:
    if member.deleting:
        return "DELETING"
    if member.vm is None or member.vm.status(now) != RUNNING:
        return "CREATING"
    return "NONE"


def mig(links: Links, found: Mig, now: float) -> JSON:
    actions = _actions(found, now)
    return {
        "kind": "compute#instanceGroupManager",
        "id": found.id,
        "creationTimestamp": compute_time(found.created_at),
        "name": found.name,
        "zone": links.zone(found.zone),
        "instanceTemplate": found.template,
        "versions": [{"instanceTemplate": found.template}],
        "instanceGroup": links.instance_group(found.zone, found.name),
        "baseInstanceName": found.base_instance_name,
        "fingerprint": hashlib.sha256(f"{found.name}/{found.target_size}".encode()).hexdigest()[:12],
        "currentActions": actions,
        "status": {"isStable": actions["none"] == len(found.members), "versionTarget": {"isReached": True},
                   "stateful": {"hasStatefulConfig": False, "perInstanceConfigs": {"allEffective": True}}},
        "targetSize": found.target_size,
        "targetSizePolicy": {"mode": "INDIVIDUAL"},
        "listManagedInstancesResults": "PAGELESS",
        "selfLink": links.mig(found.zone, found.name),
        "updatePolicy": {"type": "OPPORTUNISTIC", "minimalAction": "REPLACE", "maxSurge": {"fixed": 1},
                         "maxUnavailable": {"fixed": 1}, "replacementMethod": "SUBSTITUTE"},
    }


def managed_instance(links: Links, found: Mig, member: Member, now: float) -> JSON:
    out: JSON = {
        "instance": links.instance(found.zone, member.name),
        "name": member.name,
        "currentAction": current_action(member, now),
        "targetStatus": "RUNNING",
        "version": {"instanceTemplate": found.template},
    }
    if member.vm is not None:
        out["id"] = member.vm.id
        out["instanceStatus"] = member.vm.status(now)
        if member.vm.terminate_at is not None and not member.deleting:
            # Output only: "The timestamp at which the managed instance will be terminated".
            out["scheduling"] = {"terminationTimestamp": compute_time(member.vm.terminate_at)}
    if member.errors and member.vm is None:
        out["lastAttempt"] = {"errors": {"errors": [dict(e) for e in member.errors]}}
    return out


def instance(links: Links, vm: Vm, now: float, pool: NodePool | None = None) -> JSON:
    """``Instance``: its scheduling as its template's; its end of life (if any) in the output-only
    ``resourceStatus.scheduling.terminationTimestamp``; metadata ``created-by`` (its MIG) and, for a VM made by a
    resize request, ``google-compute-mig-resize-request``."""
    items = [{"key": "created-by", "value": links.mig(vm.zone, vm.mig).split("/compute/v1/")[1]}]
    if vm.resize_request is not None:
        items.append({"key": RESIZE_REQUEST_METADATA, "value": vm.resize_request})
    out: JSON = {
        "kind": "compute#instance",
        "id": vm.id,
        "creationTimestamp": compute_time(vm.created_at),
        "name": vm.name,
        "zone": links.zone(vm.zone),
        "machineType": links.machine_type(vm.zone, vm.machine_type),
        "status": vm.status(now),
        "selfLink": links.instance(vm.zone, vm.name),
        "metadata": {"kind": "compute#metadata", "items": items},
    }
    if pool is not None:
        out["scheduling"] = scheduling(pool)
    if vm.terminate_at is not None and vm.deleting_at is None:
        out["resourceStatus"] = {"scheduling": {"terminationTimestamp": compute_time(vm.terminate_at)}}
    return out


def compute_operation(links: Links, op: ComputeOp) -> JSON:
    out: JSON = {
        "kind": "compute#operation",
        "id": op.id,
        "name": op.name,
        "zone": links.zone(op.zone),
        "operationType": op.op_type,
        "targetLink": op.target_link,
        "targetId": op.target_id,
        "status": op.status,
        "user": op.user,
        "progress": 100 if op.status == DONE else 0,
        "insertTime": compute_time(op.insert),
        "startTime": compute_time(op.insert),
        "selfLink": links.compute_operation(op.zone, op.name),
    }
    if op.end is not None:
        out["endTime"] = compute_time(op.end)
    if op.request_id is not None:
        out["clientOperationId"] = op.request_id
    if op.error:
        out["error"] = {"errors": [dict(e) for e in op.error]}
        out["httpErrorStatusCode"] = op.http_status or 400
        out["httpErrorMessage"] = HTTP_MESSAGES.get(op.http_status or 400, "BAD REQUEST")
    return out


def resize_request(links: Links, rr: ResizeRequest) -> JSON:
    out: JSON = {
        "kind": "compute#instanceGroupManagerResizeRequest",
        "id": rr.id,
        "creationTimestamp": compute_time(rr.created_at),
        "name": rr.name,
        "zone": links.zone(rr.zone),
        "state": rr.state,
        "selfLink": links.resize_request(rr.zone, rr.mig, rr.name),
        "selfLinkWithId": links.resize_request(rr.zone, rr.mig, rr.id),
    }
    if rr.description:
        out["description"] = rr.description
    if rr.resize_by is not None:
        out["resizeBy"] = rr.resize_by
    if rr.instances is not None:
        out["instances"] = [{"name": name} for name in rr.instances]
    if rr.run_duration is not None:
        out["requestedRunDuration"] = dict(rr.run_duration)
    status: JSON = {}
    if rr.errors:
        status["error"] = {"errors": [dict(e) for e in rr.errors]}
    if rr.last_errors:
        status["lastAttempt"] = {"error": {"errors": [dict(e) for e in rr.last_errors]}}
    out["status"] = status
    return out


def operations_in(state: CloudState, location: str) -> list[ContainerOp]:
    return sorted((op for op in state.container_ops.values() if op.location == location),
                  key=lambda op: (op.start, op.name))
