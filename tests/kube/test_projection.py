"""Projections (gangscale.kube.projection, controller/logic/projections.py): each transform makes the same record of
an object's projection as of the whole object, over a table that sets every field a transform reads; what is left
out is left out; pages and events keep their list metadata and event type; objects in a shape the projection does
not expect are decoded whole, so their errors read as before."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from gangscale.controller.logic.projections import Node, Pod
from gangscale.controller.logic.view import parse_node, parse_pod
from gangscale.kube.projection import Projection
from gangscale.providers.base import POOL_LABEL, TOKEN_LABEL, UNIT_LABEL
from gangscale.sources.provreq import CONSUME_ANNOTATION, DEPRECATED_CONSUME_ANNOTATION
from gangscale.sources.raycluster import CLUSTER_LABEL, GROUP_LABEL, NODE_TYPE_LABEL, REPLICA_NAME_LABEL, worker_pod

JSON = dict[str, Any]
MANAGED = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}, "f:conditions": {".": {}}}}}]


def full_pod(**change: Any) -> JSON:
    """A bound training pod with everything a kubelet and a controller put there; ``change`` sets dotted paths
    (None deletes)."""
    pod: JSON = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "u-1", "resourceVersion": "42",
                     "creationTimestamp": "2026-11-20T10:00:00Z", "labels": {"job-name": "train"},
                     "annotations": {"note": "x"}, "managedFields": MANAGED,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": "gpu-1", "restartPolicy": "Never", "schedulerName": "default-scheduler",
                 "containers": [{"name": "main", "image": "llm:1", "env": [{"name": "A", "value": "1"}],
                                 "resources": {"requests": {"cpu": "20", "memory": "160Gi", "nvidia.com/gpu": "1"},
                                               "limits": {"nvidia.com/gpu": "1"}},
                                 "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                 "volumes": [{"name": "v", "emptyDir": {}}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.2", "hostIP": "10.1.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                          "state": {"running": {"startedAt": "2026-11-20T10:00:00Z"}}}]}}
    return changed(pod, change)


def full_node(**change: Any) -> JSON:
    node: JSON = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-1", "uid": "n-1", "resourceVersion": "7", "managedFields": MANAGED,
                     "labels": {"kubernetes.io/hostname": "gpu-1", POOL_LABEL: "a3", UNIT_LABEL: "u1",
                                TOKEN_LABEL: "t1"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"providerID": "gce://p/z/gpu-1", "podCIDR": "10.64.0.0/24",
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "208", "nvidia.com/gpu": "8", "pods": "110"},
                   "allocatable": {"cpu": "207640m", "memory": "1874124800Ki", "nvidia.com/gpu": "8", "pods": "110"},
                   "conditions": [{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                                   "lastHeartbeatTime": "2026-11-20T10:00:00Z"},
                                  {"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "lastHeartbeatTime": "2026-11-20T10:05:00Z",
                                   "lastTransitionTime": "2026-11-20T10:00:00Z"}],
                   "images": [{"names": ["llm:1"], "sizeBytes": 1 << 30}],
                   "nodeInfo": {"kubeletVersion": "v1.36.0"}}}
    return changed(node, change)


def changed(obj: JSON, change: dict[str, Any]) -> JSON:
    obj = copy.deepcopy(obj)
    for dotted, value in change.items():
        *parents, leaf = dotted.split("__")
        at = obj
        for part in parents:
            at = at.setdefault(part, {}) if isinstance(at, dict) else at[int(part)]
        if value is None:
            at.pop(leaf, None) if isinstance(at, dict) else None
        elif isinstance(at, list):
            at[int(leaf)] = value
        else:
            at[leaf] = value
    return obj


SIDECAR = {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
INIT = {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "40", "memory": "1Gi"}}}
RAY = {CLUSTER_LABEL: "rc", NODE_TYPE_LABEL: "worker", GROUP_LABEL: "tpu", REPLICA_NAME_LABEL: "tpu-0"}

# Every field parse_pod or worker_pod reads is set (or unset) by at least one row.
PODS = [
    pytest.param(full_pod(), id="bound-running"),
    pytest.param(full_pod(spec__nodeName=None), id="pending"),
    pytest.param(full_pod(status__phase="Succeeded"), id="succeeded"),
    pytest.param(full_pod(status__phase="Failed"), id="failed"),
    pytest.param(full_pod(spec__initContainers=[INIT, SIDECAR]), id="init-and-sidecar"),
    pytest.param(full_pod(spec__resources={"requests": {"cpu": "64", "memory": "512Gi"}}), id="pod-level-resources"),
    pytest.param(full_pod(spec__overhead={"cpu": "250m", "memory": "120Mi"}), id="runtime-class-overhead"),
    pytest.param(full_pod(metadata__ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm",
                                                      "uid": "d", "controller": True}]), id="daemonset"),
    pytest.param(full_pod(metadata__ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm",
                                                      "uid": "d"}]), id="daemonset-not-controller"),
    pytest.param(full_pod(metadata__annotations={"kubernetes.io/config.mirror": "abc"}), id="mirror"),
    pytest.param(full_pod(metadata__annotations={CONSUME_ANNOTATION: "pr-1"}), id="consumer"),
    pytest.param(full_pod(metadata__annotations={DEPRECATED_CONSUME_ANNOTATION: "pr-2"}), id="consumer-deprecated"),
    pytest.param(full_pod(metadata__labels=RAY), id="ray-worker"),
    pytest.param(full_pod(metadata__labels={**RAY, NODE_TYPE_LABEL: "head"}), id="ray-head"),
    pytest.param(full_pod(metadata__labels=RAY, spec__nodeName=None), id="ray-worker-pending"),
    pytest.param(full_pod(metadata__labels=RAY, metadata__deletionTimestamp="2026-11-20T11:00:00Z"),
                 id="ray-worker-deleting"),
    pytest.param(full_pod(metadata__labels={k: v for k, v in RAY.items() if k != REPLICA_NAME_LABEL}),
                 id="ray-worker-no-replica-label"),
    pytest.param(full_pod(spec__containers=[{"name": "main", "resources": {"requests": {"cpu": "lots"}}}]),
                 id="bad-quantity"),
    pytest.param(full_pod(spec__containers={"name": "main"}), id="containers-not-a-list"),
    pytest.param(full_pod(spec__containers=[{"name": "main", "resources": None}]), id="null-resources"),
    pytest.param(full_pod(metadata__namespace=None), id="no-namespace"),
]

NODES = [
    pytest.param(full_node(), id="ready-unit"),
    pytest.param(full_node(metadata__labels={"kubernetes.io/hostname": "gpu-1"}), id="not-gangscale"),
    pytest.param(full_node(spec__unschedulable=True), id="cordoned"),
    pytest.param(full_node(spec__taints=None), id="no-taints"),
    pytest.param(full_node(metadata__deletionTimestamp="2026-11-20T11:00:00Z"), id="deleting"),
    pytest.param(full_node(status__conditions=[{"type": "Ready", "status": "Unknown",
                                                "lastTransitionTime": "2026-11-20T10:09:00Z"}]), id="not-ready"),
    pytest.param(full_node(status__conditions=None), id="no-conditions"),
    pytest.param(full_node(status__conditions=[{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                                "message": "node is shutting down",
                                                "lastTransitionTime": "2026-11-20T10:09:00Z"}]), id="shutting-down"),
    pytest.param(full_node(spec__taints=[{"key": "cloud.google.com/impending-node-termination",
                                          "effect": "NoSchedule"}]), id="termination-taint"),
    pytest.param(full_node(status__allocatable={"cpu": "eight"}), id="bad-allocatable"),
    pytest.param(full_node(spec__taints=[{"key": "k", "effect": "Sometimes"}]), id="bad-taint"),
    pytest.param(full_node(status__conditions="Ready"), id="conditions-not-a-list"),
]


def projected(projection: Projection[Any], obj: JSON, via: str) -> JSON:
    if via == "page":
        page = projection.page(json.dumps({"kind": "List", "metadata": {"resourceVersion": "9"},
                                           "items": [obj]}).encode())
        [item] = page["items"]
        return item
    event = projection.event(json.dumps({"type": "MODIFIED", "object": obj}).encode())
    assert event["type"] == "MODIFIED"
    return event["object"]


Transform = Callable[[JSON], Any]


def same_record(transform: Transform, projection: Projection[Any], obj: JSON, via: str,
                caplog: pytest.LogCaptureFixture) -> None:
    """The transform's record (and warnings) of the projection equal those of the whole object."""
    with caplog.at_level(logging.WARNING):
        whole = transform(copy.deepcopy(obj))
        warned_whole = [r.getMessage() for r in caplog.records]
        caplog.clear()
        part = transform(projected(projection, obj, via))
        assert [r.getMessage() for r in caplog.records] == warned_whole
    assert part == whole


@pytest.mark.parametrize("via", ["page", "event"])
@pytest.mark.parametrize("transform", [parse_pod, worker_pod], ids=["parse_pod", "worker_pod"])
@pytest.mark.parametrize("pod", PODS)
def test_pod_records_of_projections_equal_those_of_whole_objects(pod: JSON, transform: Transform, via: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    same_record(transform, Projection(Pod), pod, via, caplog)


@pytest.mark.parametrize("via", ["page", "event"])
@pytest.mark.parametrize("node", NODES)
def test_node_records_of_projections_equal_those_of_whole_objects(node: JSON, via: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    same_record(parse_node, Projection(Node), node, via, caplog)


def test_the_table_reaches_every_outcome() -> None:
    """The rows are not all alike: records, None, daemons, consumers and Ray workers all occur."""
    records = [parse_pod(p.values[0]) for p in PODS]
    assert None in records and any(r is not None and r.daemon for r in records)
    assert {r.consumes for r in records if r is not None} >= {"ml/pr-1", "ml/pr-2", None}
    assert sum(worker_pod(p.values[0]) is not None for p in PODS) >= 3
    nodes = [parse_node(n.values[0]) for n in NODES]
    assert None in nodes and any(n is not None and n.pool == "a3" for n in nodes)
    assert {n.readiness.notice for n in nodes if n is not None} == {
        "", "node is shutting down", "tainted cloud.google.com/impending-node-termination"}


def test_what_the_transforms_do_not_read_is_not_decoded() -> None:
    pod = projected(Projection(Pod), full_pod(spec__initContainers=[SIDECAR]), "page")
    assert pod == {
        "metadata": {"name": "train-0", "namespace": "ml", "resourceVersion": "42", "labels": {"job-name": "train"},
                     "annotations": {"note": "x"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": "gpu-1",
                 "containers": [{"resources": {"requests": {"cpu": "20", "memory": "160Gi", "nvidia.com/gpu": "1"},
                                               "limits": {"nvidia.com/gpu": "1"}}}],
                 "initContainers": [{"resources": {"requests": {"cpu": "1"}}, "restartPolicy": "Always"}]},
        "status": {"phase": "Running"}}
    node = projected(Projection(Node), full_node(), "event")
    assert set(node["metadata"]) == {"name", "resourceVersion", "labels"}
    assert set(node["status"]) == {"allocatable", "conditions"}
    assert node["status"]["conditions"][0] == {"type": "MemoryPressure", "status": "False"}


def test_a_page_keeps_its_list_metadata() -> None:
    raw = json.dumps({"kind": "PodList", "apiVersion": "v1",
                      "metadata": {"resourceVersion": "123", "continue": "tok", "remainingItemCount": 5},
                      "items": [full_pod(), full_pod(metadata__name="train-1")]}).encode()
    page = Projection(Pod).page(raw)
    assert page["metadata"] == {"resourceVersion": "123", "continue": "tok"}
    assert [p["metadata"]["name"] for p in page["items"]] == ["train-0", "train-1"]
    assert Projection(Pod).page(b'{"metadata": {"resourceVersion": "5"}, "items": null}') == {
        "metadata": {"resourceVersion": "5"}, "items": []}


def test_bookmarks_keep_their_resource_version_and_errors_are_decoded_whole() -> None:
    projection = Projection(Pod)
    bookmark = projection.event(b'{"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", '
                                b'"metadata": {"resourceVersion": "77", "annotations": '
                                b'{"k8s.io/initial-events-end": "true"}}}}')
    assert bookmark == {"type": "BOOKMARK", "object": {"metadata": {
        "resourceVersion": "77", "annotations": {"k8s.io/initial-events-end": "true"}}}}
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": "too old resource version: 1 (77)", "reason": "Expired", "code": 410}
    error = projection.event(json.dumps({"type": "ERROR", "object": status}).encode())
    assert error == {"type": "ERROR", "object": status}
    assert projection.whole == 0


def test_what_the_projection_cannot_read_is_decoded_whole() -> None:
    projection = Projection(Pod)
    odd = full_pod(spec__containers={"name": "main"})
    page = projection.page(json.dumps({"metadata": {}, "items": [odd, full_pod()]}).encode())
    assert page["items"] == [odd, full_pod()] and projection.whole == 1
    with pytest.raises(ValueError):
        projection.page(b"<html>502 Bad Gateway</html>")
    with pytest.raises(ValueError):
        projection.event(b'["not", "an", "object"]')
