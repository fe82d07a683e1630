"""container v1 node pools on the fake: create → operation → RUNNING pool with MIGs → registered Nodes, and
get/list/delete/setSize/setAutoscaling, 400/404/409."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import FakeGcp
from tests.sim.gcp.client import CLUSTER, OPERATIONS, POOLS, PROJECT, REGION, ZONE_A, ZONE_B, Client, compute_path

OP_NAME = re.compile(r"^operation-[0-9]{13}-[0-9a-f]{8}$")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")


async def nodes(http: KubeHTTP) -> dict[str, dict[str, Any]]:
    page = await http.request("GET", "/api/v1/nodes")
    return {node["metadata"]["name"]: node for node in page.get("items") or []}


def ready(node: dict[str, Any]) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


async def test_create_runs_an_operation_then_the_pool_runs_and_its_nodes_register(
        gcp: FakeGcp, client: Client, clock: ManualClock, http: KubeHTTP) -> None:
    gcp.faults.operation_seconds = 120
    gcp.faults.ready_seconds = 150  # VMs come up (and register) at once; Ready 150 s later, after the op is DONE
    resp = await client.create_pool("gpu", "a3-highgpu-8g", 1, [ZONE_A, ZONE_B],
                                    config={"labels": {"team": "ml"},
                                            "taints": [{"key": "dedicated", "value": "ml", "effect": "NO_SCHEDULE"}]})
    assert resp.status == 200, resp.text
    op = resp.body
    assert OP_NAME.match(op["name"])
    assert (op["operationType"], op["status"], op["zone"]) == ("CREATE_NODE_POOL", "RUNNING", REGION)
    number = gcp.state.project_number
    assert op["targetLink"] == (f"https://container.googleapis.com/v1/projects/{number}/locations/{REGION}/clusters/"
                                "c1/nodePools/gpu")
    assert op["selfLink"] == (f"https://container.googleapis.com/v1/projects/{number}/locations/{REGION}/operations/"
                              f"{op['name']}")
    assert TIME.match(op["startTime"]) and "endTime" not in op
    assert (await client.pool("gpu"))["status"] == "PROVISIONING"

    await clock.advance(119)
    assert (await client.op(op["name"]))["status"] == "RUNNING"
    await clock.advance(1)
    done = await client.op(op["name"])
    assert (done["status"], "error" in done) == ("DONE", False)
    assert TIME.match(done["endTime"])
    pool = await client.pool("gpu")
    assert pool["status"] == "RUNNING"
    assert pool["selfLink"] == f"https://container.googleapis.com{POOLS}/gpu"
    migs = pool["instanceGroupUrls"]
    assert len(migs) == 2
    assert all(re.match(rf"^https://www\.googleapis\.com/compute/v1/projects/{PROJECT}/zones/{zone}/"
                        r"instanceGroupManagers/gke-c1-gpu-[0-9a-f]{8}-grp$", url) for url, zone in
               zip(migs, [ZONE_A, ZONE_B], strict=True))

    await gcp.settle()
    found = await nodes(http)
    assert len(found) == 2
    name, node = next(iter(sorted(found.items())))
    zone = node["metadata"]["labels"]["topology.kubernetes.io/zone"]
    assert re.match(r"^gke-c1-gpu-[0-9a-f]{8}-[a-z0-9]{4}$", name)
    assert node["spec"]["providerID"] == f"gce://{PROJECT}/{zone}/{name}"
    labels = node["metadata"]["labels"]
    assert {k: labels[k] for k in ("team", "cloud.google.com/gke-nodepool", "kubernetes.io/hostname",
                                   "node.kubernetes.io/instance-type", "topology.kubernetes.io/region",
                                   "cloud.google.com/machine-family", "cloud.google.com/gke-accelerator")} == {
        "team": "ml", "cloud.google.com/gke-nodepool": "gpu", "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": "a3-highgpu-8g", "topology.kubernetes.io/region": REGION,
        "cloud.google.com/machine-family": "a3", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    taints = [t for t in node["spec"]["taints"] if not t["key"].startswith("node.kubernetes.io/")]
    assert taints == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                      {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert node["status"]["allocatable"] == {"cpu": "207410m", "memory": "1962480448307", "nvidia.com/gpu": "8",
                                             "pods": "110"}
    assert node["status"]["capacity"] == {"cpu": "208", "memory": "1872Gi", "nvidia.com/gpu": "8", "pods": "110"}
    assert ready(node) == "False"
    await clock.advance(29)
    await gcp.settle()
    assert {ready(n) for n in (await nodes(http)).values()} == {"False"}
    await clock.advance(1)
    await gcp.settle()
    assert {ready(n) for n in (await nodes(http)).values()} == {"True"}


async def test_tpu_slice_pool_nodes_carry_tpu_labels_and_taint(gcp: FakeGcp, client: Client,
                                                               http: KubeHTTP) -> None:
    resp = await client.create_pool("tpu", "ct5lp-hightpu-4t", 2, [ZONE_A],
                                    placementPolicy={"type": "COMPACT", "tpuTopology": "2x4"})
    assert resp.status == 200, resp.text
    assert (await client.op(resp.body["name"]))["status"] == "DONE"
    pool = await client.pool("tpu")
    assert (pool["status"], pool["placementPolicy"]) == ("RUNNING", {"type": "COMPACT", "tpuTopology": "2x4"})
    await gcp.settle()
    found = await nodes(http)
    assert len(found) == 2
    for node in found.values():
        labels = node["metadata"]["labels"]
        assert (labels["cloud.google.com/gke-tpu-accelerator"], labels["cloud.google.com/gke-tpu-topology"]) == (
            "tpu-v5-lite-podslice", "2x4")
        assert {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"} in node["spec"]["taints"]
        assert node["status"]["allocatable"]["google.com/tpu"] == "4"
        assert node["status"]["allocatable"]["cpu"] == "111650m"


NAME_RULE = ("Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)' (only lowercase alphanumerics and '-' "
             "allowed, must start with a letter and end with an alphanumeric, and must be no longer than 40 "
             "characters).")


@pytest.mark.parametrize(("body", "message"), [
    ({"nodePool": {"initialNodeCount": 1}}, "Node_pool.name must be specified."),
    ({}, "Node_pool.name must be specified."),
    ({"nodePool": {"name": "Bad_Name"}}, f'Invalid value for field "node_pool.name": "Bad_Name". {NAME_RULE}'),
    ({"nodePool": {"name": "a" * 41}}, f'Invalid value for field "node_pool.name": "{"a" * 41}". {NAME_RULE}'),
    ({"nodePool": {"name": "p", "initialNodeCount": -1}}, "Node_pool.initial_node_count must be non-negative."),
    ({"nodePool": {"name": "p", "initialNodeCount": "x"}},
     "Invalid value at 'node_pool.initial_node_count' (TYPE_INT32), \"x\""),
    ({"nodePool": {"name": "p"}, "extra": 1},
     'Invalid JSON payload received. Unknown name "extra": Cannot find field.'),
    ({"nodePool": {"name": "p", "config": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}},
     "Invalid value at 'node_pool.config.taints[0].effect' (type.googleapis.com/google.container.v1.NodeTaint.Effect),"
     ' "NoSchedule"'),
    ({"nodePool": {"name": "p", "config": {"machineType": "no-such-type"}}},
     'Machine type "no-such-type" is not known in the cluster\'s locations.'),
    ({"nodePool": {"name": "p", "locations": ["europe-west4-a"]}},
     f'Node pool location "europe-west4-a" is not one of the cluster\'s locations ({ZONE_A}, {ZONE_B}).'),
    ({"nodePool": {"name": "p", "initialNodeCount": 3, "locations": [ZONE_A],
                   "config": {"machineType": "ct5lp-hightpu-4t"}, "placementPolicy": {"tpuTopology": "2x4"}}},
     'TPU topology "2x4" of machine type "ct5lp-hightpu-4t" needs 2 nodes; initial_node_count is 3.'),
    ({"nodePool": {"name": "p", "management": {"autoRepair": True, "autoUpgrade": False}}},
     "Auto_upgrade cannot be false when release_channel REGULAR is set."),
    ({"nodePool": {"name": "p", "management": {"autoRepair": False, "autoUpgrade": False}}},
     "Auto_upgrade cannot be false when release_channel REGULAR is set."),
    ({"nodePool": {"name": "p", "management": {"autoUpgrade": "false"}}},
     "Invalid value at 'node_pool.management.auto_upgrade' (TYPE_BOOL), \"false\""),
], ids=["no-name", "no-node-pool", "bad-name", "long-name", "negative-count", "count-not-int", "unknown-field",
        "taint-effect", "machine-type", "location", "tpu-count", "no-auto-upgrade-in-channel",
        "neither-in-channel", "management-not-bool"])
async def test_invalid_create_bodies_get_400(gcp: FakeGcp, client: Client, body: dict[str, Any],
                                             message: str) -> None:
    resp = await client.post(POOLS, body)
    assert resp.status == 400
    error = resp.error
    assert (error["code"], error["status"], error["message"]) == (400, "INVALID_ARGUMENT", message)
    assert error["errors"][0]["reason"] == "badRequest"
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.RequestInfo"
    assert gcp.state.cluster(REGION, "c1").pools == {}  # type: ignore[union-attr]


async def test_a_cluster_in_no_release_channel_takes_auto_upgrade_off(gcp: FakeGcp, client: Client) -> None:
    cluster = gcp.state.cluster(REGION, "c1")
    assert cluster is not None and (await client.get(CLUSTER)).body["releaseChannel"] == {"channel": "REGULAR"}
    no_repair = {"autoRepair": False, "autoUpgrade": True}  # allowed in a channel (queued-provisioning pools use it)
    assert (await client.create_pool("q", "e2-standard-4", 1, [ZONE_A], management=no_repair)).status == 200
    cluster.release_channel = ""
    off = {"autoRepair": True, "autoUpgrade": False}
    assert (await client.create_pool("p", "e2-standard-4", 1, [ZONE_A], management=off)).status == 200
    assert (await client.pool("p"))["management"] == off
    assert "releaseChannel" not in (await client.get(CLUSTER)).body


async def test_malformed_json_gets_400(client: Client) -> None:
    async with client.session.post(client.url + POOLS, data=b"{not json",
                                   headers={"Authorization": f"Bearer {client.token}"}) as raw:
        assert raw.status == 400
        assert (await raw.json())["error"]["message"] == "Invalid JSON payload received. Unexpected token."


async def test_duplicate_name_gets_409_with_the_real_message(gcp: FakeGcp, client: Client) -> None:
    assert (await client.create_pool("p1", "e2-standard-4", 1, [ZONE_A])).status == 200
    again = await client.create_pool("p1", "e2-standard-4", 1, [ZONE_A])
    assert again.status == 409
    assert (again.error["status"], again.error["message"]) == (
        "ALREADY_EXISTS", f"Already exists: projects/{PROJECT}/locations/{REGION}/clusters/c1/nodePools/p1.")
    assert len(gcp.state.container_ops) == 1


@pytest.mark.parametrize(("method", "path", "message"), [
    ("GET", f"{POOLS}/nope", f"Not found: projects/{PROJECT}/locations/{REGION}/clusters/c1/nodePools/nope."),
    ("DELETE", f"{POOLS}/nope", f"Not found: projects/{PROJECT}/locations/{REGION}/clusters/c1/nodePools/nope."),
    ("POST", f"{POOLS}/nope:setSize", f"Not found: projects/{PROJECT}/locations/{REGION}/clusters/c1/nodePools/nope."),
    ("GET", f"/v1/projects/{PROJECT}/locations/{REGION}/clusters/c9/nodePools",
     f"Not found: projects/{PROJECT}/locations/{REGION}/clusters/c9."),
    ("GET", f"{OPERATIONS}/operation-1-deadbeef",
     f"Not found: projects/{PROJECT}/locations/{REGION}/operations/operation-1-deadbeef."),
    ("GET", f"/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instanceGroupManagers/gke-x-grp",
     f"The resource 'projects/{PROJECT}/zones/{ZONE_A}/instanceGroupManagers/gke-x-grp' was not found"),
    ("GET", f"/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/operations/operation-1",
     f"The resource 'projects/{PROJECT}/zones/{ZONE_A}/operations/operation-1' was not found"),
    ("GET", f"/compute/v1/projects/{PROJECT}/zones/{ZONE_A}/instances/vm-1",
     f"The resource 'projects/{PROJECT}/zones/{ZONE_A}/instances/vm-1' was not found"),
], ids=["get-pool", "delete-pool", "set-size", "cluster", "container-op", "mig", "compute-op", "instance"])
async def test_unknown_resources_get_404(client: Client, method: str, path: str, message: str) -> None:
    resp = await client.call(method, path, json={"nodeCount": 1} if method == "POST" else None)
    assert resp.status == 404
    assert (resp.error["status"], resp.error["message"], resp.error["errors"][0]["reason"]) == (
        "NOT_FOUND", message, "notFound")


async def test_unknown_paths_get_googles_html_404(client: Client) -> None:
    resp = await client.get(f"{CLUSTER}/nodePoolz")
    assert resp.status == 404
    assert resp.headers["Content-Type"].startswith("text/html")


async def test_delete_stops_the_pool_then_it_is_gone_with_its_nodes(gcp: FakeGcp, client: Client,
                                                                    clock: ManualClock, http: KubeHTTP) -> None:
    gcp.add_node_pool((REGION, "c1"), "cpu", machine_type="e2-standard-8", zones=[ZONE_A], node_count_per_zone=2)
    await gcp.settle()
    assert len(await nodes(http)) == 2
    assert {ready(n) for n in (await nodes(http)).values()} == {"True"}
    mig = compute_path((await client.pool("cpu"))["instanceGroupUrls"][0])
    gcp.faults.operation_seconds = 45
    resp = await client.delete(f"{POOLS}/cpu")
    assert (resp.status, resp.body["operationType"], resp.body["status"]) == (200, "DELETE_NODE_POOL", "RUNNING")
    assert (await client.pool("cpu"))["status"] == "STOPPING"
    instances = (await client.post(f"{mig}/listManagedInstances")).body["managedInstances"]
    assert {(i["currentAction"], i["instanceStatus"]) for i in instances} == {("DELETING", "STOPPING")}
    await gcp.settle()
    # GKE drains the nodes of a node pool it deletes: a drain cordons first, so nothing new lands on them.
    assert {bool((n.get("spec") or {}).get("unschedulable")) for n in (await nodes(http)).values()} == {True}
    await clock.advance(45)
    assert (await client.op(resp.body["name"]))["status"] == "DONE"
    assert (await client.get(f"{POOLS}/cpu")).status == 404
    assert (await client.get(mig)).status == 404
    await gcp.settle()
    assert await nodes(http) == {}
    assert (await client.delete(f"{POOLS}/cpu")).status == 404


async def test_set_size_grows_and_shrinks_every_zone(gcp: FakeGcp, client: Client, clock: ManualClock,
                                                     http: KubeHTTP) -> None:
    gcp.add_node_pool((REGION, "c1"), "cpu", machine_type="e2-standard-8", node_count_per_zone=1)
    gcp.faults.operation_seconds = 10
    resp = await client.post(f"{POOLS}/cpu:setSize", {"nodeCount": 3})
    assert (resp.status, resp.body["operationType"]) == (200, "SET_NODE_POOL_SIZE")
    assert (await client.pool("cpu"))["status"] == "RECONCILING"
    await clock.advance(10)
    assert (await client.op(resp.body["name"]))["status"] == "DONE"
    pool = await client.pool("cpu")
    assert pool["status"] == "RUNNING"
    sizes = [(await client.get(compute_path(url))).body["targetSize"] for url in pool["instanceGroupUrls"]]
    assert sizes == [3, 3]
    await gcp.settle()
    assert len(await nodes(http)) == 6
    down = await client.post(f"{POOLS}/cpu:setSize", {"nodeCount": 0})
    await clock.advance(10)
    assert (await client.op(down.body["name"]))["status"] == "DONE"
    await gcp.settle()
    assert await nodes(http) == {}
    negative = await client.post(f"{POOLS}/cpu:setSize", {"nodeCount": -2})
    assert (negative.status, negative.error["status"]) == (400, "INVALID_ARGUMENT")


async def test_set_size_of_a_multi_host_slice_is_refused(gcp: FakeGcp, client: Client) -> None:
    gcp.add_node_pool((REGION, "c1"), "tpu", machine_type="ct5lp-hightpu-4t", zones=[ZONE_A], node_count_per_zone=2,
                      tpu_topology="2x4")
    resp = await client.post(f"{POOLS}/tpu:setSize", {"nodeCount": 4})
    assert (resp.status, resp.error["status"]) == (400, "INVALID_ARGUMENT")
    assert resp.error["message"] == ('Node pool "tpu" is a multi-host TPU slice node pool: its size cannot be set; '
                                     "create or delete the node pool instead.")
    gcp.faults.setsize_multihost_rejected = False
    assert (await client.post(f"{POOLS}/tpu:setSize", {"nodeCount": 3})).status == 400  # only 0 or the whole slice
    assert (await client.post(f"{POOLS}/tpu:setSize", {"nodeCount": 0})).status == 200
    queued = await client.create_pool("queued", "a3-highgpu-8g", 0, [ZONE_A], queuedProvisioning={"enabled": True})
    assert queued.status == 200
    refused = await client.post(f"{POOLS}/queued:setSize", {"nodeCount": 1})
    assert (refused.status, refused.error["status"]) == (400, "FAILED_PRECONDITION")
    assert (await client.pool("queued"))["queuedProvisioning"] == {"enabled": True}


async def test_list_pools_operations_and_set_autoscaling(gcp: FakeGcp, client: Client) -> None:
    assert (await client.get(POOLS)).body == {}
    assert (await client.get(OPERATIONS)).body == {}
    first = (await client.create_pool("a", "e2-standard-4", 0, [ZONE_A])).body
    second = (await client.create_pool("b", "e2-standard-4", 0, [ZONE_B])).body
    assert [p["name"] for p in (await client.get(POOLS)).body["nodePools"]] == ["a", "b"]
    listed = (await client.get(OPERATIONS)).body["operations"]
    assert [(o["name"], o["targetLink"].rsplit("/", 1)[1]) for o in listed] == [(first["name"], "a"),
                                                                                (second["name"], "b")]
    resp = await client.post(f"{POOLS}/a:setAutoscaling",
                             {"autoscaling": {"enabled": True, "minNodeCount": 0, "maxNodeCount": 4}})
    assert (resp.status, resp.body["operationType"]) == (200, "UPDATE_CLUSTER")
    assert (await client.pool("a"))["autoscaling"] == {"enabled": True, "minNodeCount": 0, "maxNodeCount": 4}
    bad = await client.post(f"{POOLS}/a:setAutoscaling",
                            {"autoscaling": {"enabled": True, "minNodeCount": 5, "maxNodeCount": 4}})
    assert (bad.status, bad.error["status"]) == (400, "INVALID_ARGUMENT")


async def test_vms_boot_then_register_and_the_operation_waits_for_them(gcp: FakeGcp, client: Client,
                                                                       clock: ManualClock, http: KubeHTTP) -> None:
    gcp.faults.boot_seconds = 40  # longer than the (zero) stockout window: booting is not a stockout
    gcp.faults.register_seconds = 20
    op = (await client.create_pool("cpu", "e2-standard-8", 1, [ZONE_A])).body["name"]
    mig = compute_path((await client.pool("cpu"))["instanceGroupUrls"][0])
    instance = (await client.post(f"{mig}/listManagedInstances")).body["managedInstances"][0]
    path = compute_path(instance["instance"])
    assert (instance["currentAction"], instance["instanceStatus"]) == ("CREATING", "PROVISIONING")
    await clock.advance(20)
    assert (await client.get(path)).body["status"] == "STAGING"
    assert (await client.op(op))["status"] == "RUNNING"
    await clock.advance(20)
    assert (await client.get(path)).body["status"] == "RUNNING"
    done = await client.op(op)
    assert (done["status"], "error" in done) == ("DONE", False)
    await gcp.settle()
    assert await nodes(http) == {}
    await clock.advance(20)
    await gcp.settle()
    assert list(await nodes(http)) == [instance["name"]]


async def test_accelerator_config_makes_a_gpu_node(gcp: FakeGcp, client: Client, http: KubeHTTP) -> None:
    resp = await client.create_pool("t4", "n1-standard-4", 1, [ZONE_A], config={
        "accelerators": [{"acceleratorCount": 2, "acceleratorType": "nvidia-tesla-t4"}]})
    assert resp.status == 200, resp.text
    assert (await client.pool("t4"))["config"]["accelerators"] == [
        {"acceleratorCount": "2", "acceleratorType": "nvidia-tesla-t4"}]
    await gcp.settle()
    (node,) = (await nodes(http)).values()
    assert node["metadata"]["labels"]["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert node["status"]["capacity"]["cpu"] == "4"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in node["spec"]["taints"]


async def test_cancel_ends_a_running_create(gcp: FakeGcp, client: Client, clock: ManualClock) -> None:
    gcp.faults.stock[(ZONE_A, "ct5lp-hightpu-4t")] = 0
    gcp.faults.stockout_after = 600
    op = (await client.create_pool("tpu", "ct5lp-hightpu-4t", 2, [ZONE_A],
                                   placementPolicy={"type": "COMPACT", "tpuTopology": "2x4"})).body["name"]
    resp = await client.post(f"{OPERATIONS}/{op}:cancel")
    assert (resp.status, resp.body) == (200, {})
    done = await client.op(op)
    assert (done["status"], done["error"]["code"]) == ("DONE", 1)
    assert (await client.pool("tpu"))["status"] == "ERROR"
    again = await client.post(f"{OPERATIONS}/{op}:cancel")
    assert (again.status, again.error["status"]) == (400, "FAILED_PRECONDITION")
    assert (await client.delete(f"{POOLS}/tpu")).status == 200
