"""``gangscale pools --from-eks``: the pool file written from an EKS cluster's managed node groups, through
aiobotocore clients against the fake EKS and Auto Scaling (:mod:`gangscale.sim.aws.eks`) and a stand-in for EC2's
two reads (DescribeSubnets, DescribeLaunchTemplateVersions) written with the fake EC2's model module.

Every answer the fakes give is checked against botocore's service models (members, types, enums, ranges,
required members), and the checker is shown to catch a seeded wrong member.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from aiobotocore.session import get_session
from aiohttp import web
from botocore.exceptions import ClientError

from gangscale.config import parse_pool_yaml
from gangscale.providers.aws.eksdiscover import pool_file_from_eks
from gangscale.sim.aws import model as ec2_model
from gangscale.sim.aws.eks import CA_ENABLED_TAG, EksFake, signed_service

JSON = dict[str, Any]
REGION, CLUSTER = "us-east-1", "train"
SUBNETS = {"subnet-0a1": "us-east-1a", "subnet-0b2": "us-east-1b", "subnet-0c3": "us-east-1a"}
CB_RESERVATION = "cr-0123456789abcdef0"
NO_CA_TAGS = {"eks:cluster-name": CLUSTER}
#: DescribeInstanceTypes' facts for the types outside the built-in catalog (EC2's published figures).
INSTANCE_TYPES = {"t3.medium": {"InstanceType": "t3.medium", "VCpuInfo": {"DefaultVCpus": 2},
                                "MemoryInfo": {"SizeInMiB": 4096}}}


def service_model(service: str, version: str) -> JSON:
    path = importlib.resources.files("botocore").joinpath("data", service, version, "service-2.json.gz")
    with path.open("rb") as raw:
        document: JSON = json.loads(gzip.decompress(raw.read()))
    return document


EKS_MODEL = service_model("eks", "2017-11-01")
ASG_MODEL = service_model("autoscaling", "2011-01-01")


def model_problems(model: JSON, shape_name: str, value: Any, path: str = "") -> list[str]:
    """Every way ``value`` breaks ``shape_name`` of a botocore model: unknown or missing required members, types,
    enums, string lengths and integer ranges. Timestamps: epoch seconds (rest-json) or datetimes (parsed)."""
    shape = model["shapes"][shape_name]
    kind, out = shape["type"], []
    if kind == "structure":
        if not isinstance(value, dict):
            return [f"{path}: expected a structure {shape_name}"]
        out += [f"{path}.{k}: not a member of {shape_name}" for k in value if k not in shape["members"]]
        out += [f"{path}.{k}: required by {shape_name}" for k in shape.get("required", []) if k not in value]
        for key, child in value.items():
            if key in shape["members"]:
                out += model_problems(model, shape["members"][key]["shape"], child, f"{path}.{key}")
    elif kind == "list":
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        for i, child in enumerate(value):
            out += model_problems(model, shape["member"]["shape"], child, f"{path}[{i}]")
    elif kind == "map":
        if not isinstance(value, dict):
            return [f"{path}: expected a map"]
        for key, child in value.items():
            out += model_problems(model, shape["key"]["shape"], key, f"{path}<key>")
            out += model_problems(model, shape["value"]["shape"], child, f"{path}[{key}]")
    elif kind == "string":
        if not isinstance(value, str):
            return [f"{path}: expected a string"]
        if "enum" in shape and value not in shape["enum"]:
            out.append(f"{path}: {value!r} not in {shape_name} {shape['enum']}")
        if not shape.get("min", 0) <= len(value) <= shape.get("max", len(value)):
            out.append(f"{path}: length {len(value)} outside {shape_name}'s")
    elif kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{path}: expected an integer"]
        if not shape.get("min", value) <= value <= shape.get("max", value):
            out.append(f"{path}: {value} outside {shape_name}'s range")
    elif kind == "boolean" and not isinstance(value, bool):
        out.append(f"{path}: expected a boolean")
    elif kind == "timestamp" and (isinstance(value, bool) or not isinstance(value, int | float | datetime)):
        out.append(f"{path}: expected a timestamp")
    return out


def output_problems(model: JSON, operation: str, status: int, body: JSON) -> list[str]:
    """An answer (as the fake built it) against the operation's output shape, or an error against its error
    shape (the code must be one the operation declares, with the shape's HTTP status)."""
    spec = model["operations"][operation]
    if status < 300:
        return model_problems(model, spec["output"]["shape"], body, operation)
    code = str(body.get("code"))
    declared = {e["shape"] for e in spec.get("errors", [])}
    if code not in declared:
        return [f"{operation}: error {code} is not one it declares ({sorted(declared)})"]
    expected = model["shapes"][code].get("error", {}).get("httpStatusCode")
    problems = [f"{operation}: {code} with status {status}, the model says {expected}"] if expected != status else []
    return problems + model_problems(model, code, {k: v for k, v in body.items() if k != "code"}, code)


@dataclass
class Ec2StandIn:
    """EC2's two reads that discovery makes, answered from a table, each request checked against EC2's model."""

    templates: dict[str, JSON] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        operation = form.get("Action", "")
        self.problems += [f"{operation} request: {p}" for p in ec2_model.request_problems(operation, form)]
        params = ec2_model.parse_request(operation, form)
        if operation == "DescribeSubnets":
            (wanted,) = [f["Values"] for f in params["Filters"] if f["Name"] == "subnet-id"]
            data: JSON = {"Subnets": [{"SubnetId": s, "AvailabilityZone": z, "State": "available", "VpcId": "vpc-01",
                                       "CidrBlock": f"10.0.{i}.0/24"}
                                      for i, (s, z) in enumerate(sorted(SUBNETS.items())) if s in wanted]}
        elif operation == "DescribeInstanceTypes":
            (wanted,) = [f["Values"] for f in params["Filters"] if f["Name"] == "instance-type"]
            data = {"InstanceTypes": [INSTANCE_TYPES[t] for t in wanted if t in INSTANCE_TYPES]}
        elif operation == "DescribeLaunchTemplateVersions":
            key = str(params.get("LaunchTemplateId") or params.get("LaunchTemplateName"))
            data = {"LaunchTemplateVersions": [{"LaunchTemplateId": key, "VersionNumber": int(params["Versions"][0]),
                                                "LaunchTemplateData": self.templates.get(key, {})}]}
        else:
            return web.Response(status=400, text=ec2_model.error_xml("InvalidAction", operation, "r-1"))
        self.problems += [f"{operation} answer: {p}" for p in ec2_model.validate_output(operation, data)]
        return web.Response(text=ec2_model.answer_xml(operation, data, "r-1"), content_type="text/xml")


@dataclass
class Cloud:
    eks: EksFake
    ec2: Ec2StandIn
    traffic: list[tuple[str, str, int, JSON]]
    clients: dict[str, Any]


def recorder(service: str, traffic: list[tuple[str, str, int, JSON]]) -> Callable[[str, int, Any], None]:
    def observe(operation: str, status: int, body: Any) -> None:
        traffic.append((service, operation, status, body))
    return observe


@pytest.fixture
async def cloud() -> AsyncIterator[Cloud]:
    eks, ec2 = EksFake(REGION), Ec2StandIn()
    traffic: list[tuple[str, str, int, JSON]] = []
    eks.observers.append(recorder("eks+autoscaling", traffic))

    async def query(request: web.Request) -> web.Response:
        if signed_service(request) == "autoscaling":
            return await eks.handle_autoscaling(request)
        return await ec2.handle(request)

    app = web.Application()
    app.router.add_get("/clusters/{tail:.*}", eks.handle)
    app.router.add_post("/", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    async with AsyncExitStack() as stack:
        session = get_session()
        clients = {name: await stack.enter_async_context(session.create_client(
            name, region_name=REGION, endpoint_url=url, aws_access_key_id="AKIDTEST",
            aws_secret_access_key="secret")) for name in ("eks", "ec2", "autoscaling")}
        yield Cloud(eks, ec2, traffic, clients)
    await runner.cleanup()


async def discover(cloud: Cloud) -> tuple[str, list[str]]:
    c = cloud.clients
    return await pool_file_from_eks(c["eks"], c["ec2"], CLUSTER, REGION, autoscaling_client=c["autoscaling"])


def traffic_problems(cloud: Cloud) -> list[str]:
    out = list(cloud.ec2.problems)
    for _, operation, status, body in cloud.traffic:
        model = EKS_MODEL if operation in EKS_MODEL["operations"] else ASG_MODEL
        out += output_problems(model, operation, status, body)
    return out


def add_groups(eks: EksFake, ec2: Ec2StandIn) -> None:
    gpu_template = {"id": "lt-0aaa00000000000a1", "name": "eks-gpu", "version": "3"}
    eks.add_nodegroup(CLUSTER, "gpu", subnets=["subnet-0a1", "subnet-0b2"], zones=["us-east-1a", "us-east-1b"],
                      instance_types=["p5.48xlarge"], scaling=(0, 8, 0), labels={"team": "ml"},
                      taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
                      launch_template={"id": "lt-0ffffffffffffff01", "name": "mine", "version": "7"},
                      asg_launch_template=gpu_template, asg_tags=NO_CA_TAGS)
    eks.add_nodegroup(CLUSTER, "spot_l4", subnets=["subnet-0c3", "subnet-0a1"], zones=["us-east-1a"],
                      instance_types=["g6.xlarge", "g6.2xlarge"], capacity_type="SPOT", scaling=(0, 4, 0),
                      asg_tags=NO_CA_TAGS)
    cb = eks.add_nodegroup(CLUSTER, "cb", subnets=["subnet-0a1"], zones=["us-east-1a"], instance_types=None,
                           capacity_type="CAPACITY_BLOCK", scaling=(0, 2, 0), asg_tags=NO_CA_TAGS)
    ec2.templates[cb.asg_launch_template["id"]] = {"InstanceType": "p5.48xlarge", "CapacityReservationSpecification": {
        "CapacityReservationTarget": {"CapacityReservationId": CB_RESERVATION}}}
    eks.add_nodegroup(CLUSTER, "plain", subnets=["subnet-0b2"], zones=["us-east-1b"], instance_types=None,
                      asg_tags=NO_CA_TAGS)
    eks.add_nodegroup(CLUSTER, "system", subnets=["subnet-0a1"], zones=["us-east-1a"], scaling=(2, 4, 2),
                      asg_tags=NO_CA_TAGS)
    eks.add_nodegroup(CLUSTER, "auto", subnets=["subnet-0a1"], zones=["us-east-1a"], scaling=(0, 5, 0))
    eks.add_nodegroup(CLUSTER, "dying", subnets=["subnet-0a1"], zones=["us-east-1a"], status="DELETING",
                      asg_tags=NO_CA_TAGS)
    eks.add_nodegroup(CLUSTER, "lost", subnets=["subnet-0ffff"], zones=["us-east-1f"], asg_tags=NO_CA_TAGS)


async def test_node_groups_become_pools_and_groups_that_scale_themselves_are_left_out(cloud: Cloud) -> None:
    add_groups(cloud.eks, cloud.ec2)
    text, refused = await discover(cloud)
    assert traffic_problems(cloud) == []
    reasons = dict(line.split(": ", 1) for line in refused)
    assert sorted(reasons) == ["auto", "dying", "lost", "system"]
    assert "keeps nodes of its own (minSize 2, desiredSize 2)" in reasons["system"]
    assert "minSize=0,maxSize=4,desiredSize=0" in reasons["system"]
    assert CA_ENABLED_TAG in reasons["auto"] and "aws autoscaling delete-tags" in reasons["auto"]
    assert reasons["dying"] == "its status is DELETING" and "no zone" in reasons["lost"]
    assert all(f"# left out: {line}" in text for line in refused)
    assert "# note: spot_l4 lists instance types g6.xlarge, g6.2xlarge" in text
    pools = {p.name: p for p in parse_pool_yaml(text).pools}
    assert sorted(pools) == ["cb", "gpu-1a", "gpu-1b", "plain", "spot-l4"]
    gpu = pools["gpu-1b"]
    # The Auto Scaling group's template (EKS's copy), not the group's own "mine".
    expected = {"region": REGION, "cluster": CLUSTER, "launchTemplate": "lt-0aaa00000000000a1",
                "launchTemplateVersion": "3", "subnet": "subnet-0b2", "nodeGroup": "gpu"}
    assert gpu.provider["aws"].items() >= expected.items()
    assert (gpu.machine_type, gpu.zone, gpu.capacity_type, gpu.max_units) == (
        "p5.48xlarge", "us-east-1b", "on-demand", 8)
    assert gpu.labels["team"] == "ml" and gpu.labels["eks.amazonaws.com/nodegroup"] == "gpu"
    assert [(t.key, t.value, t.effect) for t in gpu.taints] == [("nvidia.com/gpu", "true", "NoSchedule")]
    spot = pools["spot-l4"]
    assert (spot.machine_type, spot.zone, spot.capacity_type, spot.provider["aws"]["subnet"]) == (
        "g6.xlarge", "us-east-1a", "spot", "subnet-0a1")
    cb = pools["cb"]
    assert (cb.machine_type, cb.capacity_type, cb.provider["aws"]["capacityBlock"]) == (
        "p5.48xlarge", "reservation", True)
    assert cb.provider["aws"]["capacityReservationId"] == CB_RESERVATION
    assert cb.labels["eks.amazonaws.com/capacityType"] == "CAPACITY_BLOCK"
    plain = pools["plain"]
    assert plain.machine_type == "t3.medium" and plain.allocatable["cpu"] == 1930 and plain.allocatable["pods"] == 110
    assert "nvidia.com/gpu" not in plain.allocatable


async def test_a_capacity_block_group_without_a_reservation_in_its_template_is_left_out(cloud: Cloud) -> None:
    cloud.eks.add_nodegroup(CLUSTER, "cb", subnets=["subnet-0a1"], zones=["us-east-1a"], instance_types=None,
                            capacity_type="CAPACITY_BLOCK", asg_tags=NO_CA_TAGS)
    text, refused = await discover(cloud)
    assert len(refused) == 1 and refused[0].startswith("cb: it is a Capacity Block group") and \
        "nodePools: []" in text
    assert traffic_problems(cloud) == []


async def test_every_node_group_is_read_across_pages(cloud: Cloud) -> None:
    for i in range(103):
        cloud.eks.add_nodegroup(CLUSTER, f"ng-{i:03d}", subnets=["subnet-0a1"], zones=["us-east-1a"],
                                asg_tags=NO_CA_TAGS)
    page = await cloud.clients["eks"].list_nodegroups(clusterName=CLUSTER, maxResults=2)
    assert page["nodegroups"] == ["ng-000", "ng-001"] and page["nextToken"]
    text, refused = await discover(cloud)
    assert refused == [] and len(parse_pool_yaml(text).pools) == 103
    assert [op for _, op, _, _ in cloud.traffic].count("ListNodegroups") == 3  # the one above, then 100 and 3
    assert [op for _, op, _, _ in cloud.traffic].count("DescribeAutoScalingGroups") == 3  # 50 names a call
    assert traffic_problems(cloud) == []


async def test_an_unknown_cluster_is_eks_resource_not_found(cloud: Cloud) -> None:
    with pytest.raises(ClientError) as raised:
        await discover(cloud)
    error = raised.value.response
    assert error["Error"]["Code"] == "ResourceNotFoundException"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert error["Error"]["Message"] == f"No cluster found for name: {CLUSTER}."
    assert traffic_problems(cloud) == []
    cloud.eks.add_cluster(CLUSTER)
    with pytest.raises(ClientError) as missing:
        await cloud.clients["eks"].describe_nodegroup(clusterName=CLUSTER, nodegroupName="nope")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert traffic_problems(cloud) == []


async def test_the_auto_scaling_answer_reads_back_as_the_fake_built_it(cloud: Cloud) -> None:
    group = cloud.eks.add_nodegroup(CLUSTER, "gpu", subnets=["subnet-0a1"], zones=["us-east-1a"],
                                    instance_types=["p5.48xlarge"])
    answer = await cloud.clients["autoscaling"].describe_auto_scaling_groups(AutoScalingGroupNames=[group.asg_name])
    (asg,) = answer["AutoScalingGroups"]
    built = group.auto_scaling_group(REGION, cloud.eks.account)
    assert {k: v for k, v in asg.items() if k != "CreatedTime"} == {k: v for k, v in built.items()
                                                                   if k != "CreatedTime"}
    assert {t["Key"] for t in asg["Tags"]} >= {CA_ENABLED_TAG, f"k8s.io/cluster-autoscaler/{CLUSTER}"}
    assert model_problems(ASG_MODEL, "AutoScalingGroupsType", {k: v for k, v in answer.items()
                                                               if k != "ResponseMetadata"}) == []


@pytest.mark.parametrize(("change", "found"), [
    (lambda ng: ng.update(capacityType="RESERVED"), "not in CapacityTypes"),
    (lambda ng: ng.update(scalingConfig={"minSize": -1}), "outside ZeroCapacity's range"),
    (lambda ng: ng.update(launchTemplates=[]), "not a member of Nodegroup"),
    (lambda ng: ng["taints"].append({"key": "k", "effect": "NoSchedule"}), "not in TaintEffect"),
])
def test_the_model_check_catches_a_seeded_wrong_member(change: Callable[[JSON], None], found: str) -> None:
    eks = EksFake(REGION)
    group = eks.add_nodegroup(CLUSTER, "gpu", subnets=["subnet-0a1"], zones=["us-east-1a"])
    body = {"nodegroup": group.describe(REGION, eks.account)}
    assert output_problems(EKS_MODEL, "DescribeNodegroup", 200, body) == []
    change(body["nodegroup"])
    problems = output_problems(EKS_MODEL, "DescribeNodegroup", 200, body)
    assert any(found in p for p in problems), problems


def test_an_error_the_operation_does_not_declare_is_caught() -> None:
    assert output_problems(EKS_MODEL, "ListNodegroups", 404, {"code": "NotFound", "message": "x"})
    assert output_problems(EKS_MODEL, "ListNodegroups", 400, {"code": "ResourceNotFoundException", "message": "x"})
    assert output_problems(EKS_MODEL, "ListNodegroups", 404, {"code": "ResourceNotFoundException", "message": "x"}) \
        == []


def test_signed_service_reads_the_credential_scope() -> None:
    class Fake:
        headers: Mapping[str, str] = {"Authorization": "AWS4-HMAC-SHA256 Credential=AKID/20261127/us-east-1/"
                                                       "autoscaling/aws4_request, SignedHeaders=host, Signature=ab"}
    assert signed_service(Fake()) == "autoscaling"  # type: ignore[arg-type]
