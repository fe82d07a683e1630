"""The Nodes of EKS worker instances: what the kubelet registers (from the launch template's user data and the
instance), and the taint AWS Node Termination Handler puts on a Node whose spot instance got its interruption notice.

Sources:
- Node name = the instance's private DNS name, ``spec.providerID`` = ``aws:///<availability zone>/<instance id>``
  (the AWS cloud provider's instance ids; EKS user guide on node names; the shared contract).
- Labels: ``kubernetes.io/hostname`` (the node name), ``kubernetes.io/os=linux``, ``kubernetes.io/arch``
  (``arm64`` for Graviton families, whose names carry a ``g`` after the generation digit: m7g, c7gn, r8g, g5g),
  ``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/region``/``zone`` (well-known labels the kubelet
  and cloud provider set), ``topology.k8s.aws/zone-id`` (set by the AWS cloud controller manager), plus the
  kubelet's ``--node-labels``; taints from ``--register-with-taints``. Capacity/allocatable from
  :mod:`gangscale.model.catalog` (``nvidia.com/gpu`` from the NVIDIA device plugin, ``aws.amazon.com/neuron`` from
  the Neuron device plugin).
- User data: EKS AL2023 nodes are configured by ``nodeadm`` from a ``NodeConfig`` (``apiVersion:
  node.eks.aws/v1alpha1``, ``kind: NodeConfig``, kubelet flags in ``spec.kubelet.flags``) in a MIME multi-part
  document whose part has ``Content-Type: application/node.eks.aws`` (EKS user guide, "Launch templates" / AL2023
  nodeadm); the API carries user data base64. AL2's ``bootstrap.sh --kubelet-extra-args '--node-labels=…'`` in a
  shell part is read too (the flags are found by name in any other part).
- AWS Node Termination Handler (IMDS mode, ``taintNode: true``) on a spot interruption notice: taints the Node
  ``aws-node-termination-handler/spot-itn`` with effect ``NoSchedule`` and cordons it (NTH README, ``TAINT_NODE``:
  "Currently used taint keys are … aws-node-termination-handler/spot-itn …"; NTH ``pkg/node/node.go``
  ``SpotInterruptionTaint``), then drains it: the drain (pod evictions) is NOT modelled.
"""

from __future__ import annotations

import base64
import binascii
import email
import re
import shlex
from typing import Any

import yaml

from gangscale.kube.errors import ApiError
from gangscale.model.catalog import GPU_RESOURCE, NEURON_RESOURCE, MachineType, node_allocatable
from gangscale.model.quantity import format_quantity
from gangscale.model.resources import CPU, MEMORY, PODS
from gangscale.sim.aws.state import Instance, zone_id
from gangscale.sim.gcp.nodes import (
    DELETE,
    NODES_PATH,
    READY,
    REGISTER,
    STRATEGIC_MERGE_PATCH,
    NodeAction,
    NodeWorker,
    ready_condition,
)
from gangscale.timefmt import rfc3339

__all__ = ["DELETE", "READY", "REGISTER", "TAINT", "Ec2NodeWorker", "NodeAction", "node_body", "parse_user_data"]

JSON = dict[str, Any]
TAINT = "taint"
SPOT_ITN_TAINT = "aws-node-termination-handler/spot-itn"
NODECONFIG_TYPE = "application/node.eks.aws"
_FLAG = re.compile(r"--(node-labels|register-with-taints)=(\S+)")
_GRAVITON = re.compile(r"^[a-z]+\d+([a-z-]*)$")


def _flags(text: str) -> dict[str, str]:
    """``--node-labels`` and ``--register-with-taints`` values found in a text (quotes removed)."""
    found: dict[str, str] = {}
    try:
        words = shlex.split(text, comments=False)
    except ValueError:
        words = text.split()
    for word in words:
        for match in _FLAG.finditer(word):
            found[match.group(1)] = match.group(2).strip("'\"")
    return found


def _nodeconfig_flags(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "NodeConfig":
            flags = ((doc.get("spec") or {}).get("kubelet") or {}).get("flags") or []
            found.update(_flags(" ".join(shlex.quote(str(f)) for f in flags)))
    return found


def parse_user_data(user_data: str) -> tuple[dict[str, str], list[JSON]]:
    """The labels and taints a node gets from a launch template's (base64) user data."""
    try:
        text = base64.b64decode(user_data, validate=True).decode("utf-8", "replace") if user_data else ""
    except (binascii.Error, ValueError):
        text = user_data
    flags: dict[str, str] = {}
    message = email.message_from_string(text)
    if message.is_multipart():
        for part in message.walk():
            if part.is_multipart():
                continue
            payload = part.get_payload(decode=True)
            body = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(part.get_payload())
            flags.update(_nodeconfig_flags(body) if part.get_content_type() == NODECONFIG_TYPE else _flags(body))
    elif "kind: NodeConfig" in text:
        flags = _nodeconfig_flags(text)
    else:
        flags = _flags(text)
    labels = dict(pair.split("=", 1) for pair in flags.get("node-labels", "").split(",") if "=" in pair)
    taints = []
    for item in filter(None, flags.get("register-with-taints", "").split(",")):
        key_value, _, effect = item.rpartition(":")
        key, _, value = key_value.partition("=")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        taints.append(taint)
    return labels, taints


def arch(instance_type: str) -> str:
    match = _GRAVITON.match(instance_type.split(".", maxsplit=1)[0])
    return "arm64" if match and "g" in match.group(1) else "amd64"


def node_body(instance: Instance, machine: MachineType, region: str, now: float) -> JSON:
    labels = {
        **instance.node_labels,
        "kubernetes.io/hostname": instance.private_dns,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch(instance.instance_type),
        "node.kubernetes.io/instance-type": instance.instance_type,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": instance.zone,
        "topology.k8s.aws/zone-id": zone_id(instance.zone),
    }
    allocatable = dict(node_allocatable(machine))
    capacity = {CPU: machine.vcpus * 1000, MEMORY: machine.memory, PODS: allocatable.get(PODS, 110)}
    for resource, count in ((GPU_RESOURCE, machine.gpus), (NEURON_RESOURCE, machine.neuron)):
        if count:
            capacity[resource] = count
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": instance.private_dns, "labels": labels},
        "spec": {"providerID": f"aws:///{instance.zone}/{instance.id}",
                 **({"taints": [dict(t) for t in instance.node_taints]} if instance.node_taints else {})},
        "status": {
            "capacity": {name: format_quantity(name, amount) for name, amount in capacity.items()},
            "allocatable": {name: format_quantity(name, amount) for name, amount in allocatable.items()},
            "conditions": [ready_condition(False, rfc3339(now))],
        },
    }


class Ec2NodeWorker(NodeWorker):
    """The fake GCP's kubelet worker, plus Node Termination Handler's taint-and-cordon (``TAINT`` actions). A Node is
    deleted only while it is still the terminated instance's (its ``providerID``): the cloud node lifecycle
    controller removes the Node of an instance that no longer exists, and a new instance may by then have
    registered under the same name (private addresses are reused)."""

    async def _still_of(self, action: NodeAction) -> bool:
        assert self.kube is not None and action.body is not None
        try:
            node = await self.kube.request("GET", f"{NODES_PATH}/{action.name}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return bool((node.get("spec") or {}).get("providerID") == action.body["spec"]["providerID"])

    async def _apply(self, action: NodeAction) -> None:
        if action.kind == DELETE and action.body is not None and not await self._still_of(action):
            return
        if action.kind != TAINT:
            await super()._apply(action)
            return
        assert self.kube is not None
        try:
            node = await self.kube.request("GET", f"{NODES_PATH}/{action.name}")
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != SPOT_ITN_TAINT]
        # NTH puts the interruption event's id in the taint value; the fake's event id is the node's name.
        taints.append({"key": SPOT_ITN_TAINT, "value": action.name.split(".")[0][:63], "effect": "NoSchedule"})
        await self.kube.request("PATCH", f"{NODES_PATH}/{action.name}",
                                body={"spec": {"taints": taints, "unschedulable": True}},
                                content_type=STRATEGIC_MERGE_PATCH)
