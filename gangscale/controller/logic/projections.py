"""The fields of pods and nodes their records are made of: all the reflectors decode (:mod:`gangscale.kube.projection`).

Each struct names exactly the members that :func:`~gangscale.controller.logic.view.parse_pod`,
:func:`~gangscale.sources.raycluster.worker_pod` (pods) and :func:`~gangscale.controller.logic.view.parse_node` with
any provider's ``node_ref`` (nodes: it reads the name and labels only) read. A field read by a transform and missing
here would read as absent: ``tests/kube/test_projection.py`` compares every transform's record of whole objects with
its record of their projections, over a table that sets each field, so adding a read without its field fails there.
``Any`` marks a member read whole (small: resource lists, labels, owner references); a struct, one read in part
(``metadata`` without ``managedFields``, a container without its image, env and mounts).
"""

from __future__ import annotations

from typing import Any

from gangscale.kube.projection import Fields


class ObjectMeta(Fields):
    name: Any = None
    namespace: Any = None
    resourceVersion: Any = None
    labels: Any = None
    annotations: Any = None
    ownerReferences: Any = None
    deletionTimestamp: Any = None


class Container(Fields):
    resources: Any = None
    restartPolicy: Any = None


class PodSpec(Fields):
    nodeName: Any = None
    containers: list[Container] | None = None
    initContainers: list[Container] | None = None
    resources: Any = None
    overhead: Any = None


class PodStatus(Fields):
    phase: Any = None


class Pod(Fields):
    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None
    status: PodStatus | None = None


class NodeMeta(Fields):
    name: Any = None
    resourceVersion: Any = None
    labels: Any = None
    deletionTimestamp: Any = None


class NodeSpec(Fields):
    taints: Any = None
    unschedulable: Any = None


class NodeCondition(Fields):
    type: Any = None
    status: Any = None
    lastTransitionTime: Any = None
    message: Any = None


class NodeStatus(Fields):
    allocatable: Any = None
    conditions: list[NodeCondition] | None = None


class Node(Fields):
    metadata: NodeMeta | None = None
    spec: NodeSpec | None = None
    status: NodeStatus | None = None

