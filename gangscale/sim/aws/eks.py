"""A fake of the EKS and Auto Scaling reads that ``gangscale pools --from-eks`` makes: ``ListNodegroups`` and
``DescribeNodegroup`` (EKS), and ``DescribeAutoScalingGroups`` (Auto Scaling) for a node group's Auto Scaling group.

Shapes and wire rules come from botocore's service models (``botocore/data/eks/2017-11-01/service-2.json.gz``,
``botocore/data/autoscaling/2011-01-01/service-2.json.gz``; the tests check every answer against them) and from
botocore's own protocol code, read, not imported:

- EKS is ``rest-json``: ``GET /clusters/{name}/node-groups`` (``maxResults``, ``nextToken`` in the query) and
  ``GET /clusters/{name}/node-groups/{nodegroupName}``; answers are JSON with the model's member names; timestamps
  are epoch seconds (rest-json's default ``unixTimestamp``). Errors: the HTTP status of the error shape
  (``ResourceNotFoundException``: 404, ``InvalidParameterException``: 400) with the code in the
  ``x-amzn-ErrorType`` header and ``{"message": …}`` in the body (botocore ``parsers.py``
  ``RestJSONParser._do_error_parse``). The messages ("No cluster found for name: …", "No node group found for
  name: …") are the forms EKS is widely seen to send, not checked against a live EKS.
- Auto Scaling is ``query``: ``POST /`` with ``Action=DescribeAutoScalingGroups&Version=2011-01-01`` and
  ``AutoScalingGroupNames.member.N`` (botocore ``serialize.py`` ``QuerySerializer``: lists are ``.member.N``); the
  answer is ``<DescribeAutoScalingGroupsResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">`` with a
  ``<DescribeAutoScalingGroupsResult>`` (the operation's ``resultWrapper``) whose lists have ``<member>`` elements.
  An unknown group name is not an error: the list leaves it out (DescribeAutoScalingGroups in the EC2 Auto Scaling
  API reference).

What EKS does that the fake reproduces (EKS user guide, "Simplify node lifecycle with managed node groups" and
"Customize managed nodes with launch templates"): every managed node group has an Auto Scaling group, launched from
a launch template that EKS makes in the account (a copy of the group's own template when it has one); EKS tags the
group for the cluster-autoscaler's auto-discovery (``k8s.io/cluster-autoscaler/enabled``,
``k8s.io/cluster-autoscaler/<cluster>``) and with ``eks:cluster-name`` / ``eks:nodegroup-name``. The EKS-made
template's name (``eks-<uuid>``, the uuid of the node group's ARN) is how such templates are seen named; nothing
here depends on it.

Mount :meth:`EksFake.handle` for the EKS paths and :meth:`EksFake.handle_autoscaling` for ``POST /`` requests whose
SigV4 credential scope names the ``autoscaling`` service (:func:`signed_service` tells them from EC2's).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from aiohttp import web

JSON = dict[str, Any]
AUTOSCALING_VERSION = "2011-01-01"
AUTOSCALING_NAMESPACE = f"http://autoscaling.amazonaws.com/doc/{AUTOSCALING_VERSION}/"
#: The tag EKS puts on every managed node group's Auto Scaling group for the cluster-autoscaler's auto-discovery.
CA_ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
_PATH = re.compile(r"^/clusters/(?P<cluster>[^/]+)/node-groups(?:/(?P<nodegroup>[^/]+))?/?$")
_SCOPE = re.compile(r"Credential=[^/]+/[0-9]{8}/[^/]+/(?P<service>[^/]+)/aws4_request")
#: An observer sees each exchange: (operation, HTTP status, the answer as the client reads it).
Observer = Callable[[str, int, Any], None]


@dataclass
class FakeNodegroup:
    """One managed node group and its Auto Scaling group, as EKS and Auto Scaling describe them."""

    cluster: str
    name: str
    instance_types: list[str] | None
    capacity_type: str
    min_size: int
    max_size: int
    desired_size: int
    subnets: list[str]
    labels: dict[str, str]
    taints: list[JSON]
    launch_template: JSON | None
    asg_name: str
    asg_launch_template: JSON
    asg_tags: dict[str, str]
    zones: list[str]
    status: str = "ACTIVE"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: float = 0.0

    def describe(self, region: str, account: str) -> JSON:
        """The ``Nodegroup`` structure of DescribeNodegroup."""
        out: JSON = {
            "nodegroupName": self.name, "clusterName": self.cluster, "status": self.status,
            "nodegroupArn": f"arn:aws:eks:{region}:{account}:nodegroup/{self.cluster}/{self.name}/{self.uid}",
            "createdAt": self.created, "modifiedAt": self.created, "capacityType": self.capacity_type,
            "scalingConfig": {"minSize": self.min_size, "maxSize": self.max_size, "desiredSize": self.desired_size},
            "subnets": list(self.subnets), "nodeRole": f"arn:aws:iam::{account}:role/{self.cluster}-node",
            "labels": dict(self.labels), "taints": [dict(t) for t in self.taints],
            "resources": {"autoScalingGroups": [{"name": self.asg_name}]},
            "health": {"issues": []}, "updateConfig": {"maxUnavailable": 1},
        }
        if self.instance_types is not None:
            out["instanceTypes"] = list(self.instance_types)
        if self.launch_template is not None:
            # EKS: amiType CUSTOM only when the template names an AMI; the fake's templates never do.
            out["launchTemplate"] = dict(self.launch_template)
        else:
            out["diskSize"] = 20
        out["amiType"] = "AL2023_x86_64_STANDARD"
        return out

    def auto_scaling_group(self, region: str, account: str) -> JSON:
        """The ``AutoScalingGroup`` structure of DescribeAutoScalingGroups (the members the model requires, the
        launch template as a mixed instances policy, as EKS sets it up, and the tags)."""
        spec = {"LaunchTemplateId": self.asg_launch_template["id"],
                "LaunchTemplateName": self.asg_launch_template["name"],
                "Version": str(self.asg_launch_template["version"])}
        return {
            "AutoScalingGroupName": self.asg_name,
            "AutoScalingGroupARN": f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:{self.uid}:"
                                   f"autoScalingGroupName/{self.asg_name}",
            "MixedInstancesPolicy": {"LaunchTemplate": {
                "LaunchTemplateSpecification": spec,
                "Overrides": [{"InstanceType": t} for t in self.instance_types or []]}},
            "MinSize": self.min_size, "MaxSize": self.max_size, "DesiredCapacity": self.desired_size,
            "DefaultCooldown": 300, "AvailabilityZones": list(self.zones), "HealthCheckType": "EC2",
            "CreatedTime": self.created, "VPCZoneIdentifier": ",".join(self.subnets), "CapacityRebalance": True,
            "Tags": [{"ResourceId": self.asg_name, "ResourceType": "auto-scaling-group", "Key": k, "Value": v,
                      "PropagateAtLaunch": True} for k, v in sorted(self.asg_tags.items())],
        }


class EksFake:
    """Clusters and their managed node groups in one region; ``observers`` see every exchange."""

    def __init__(self, region: str = "us-east-1", account: str = "123456789012", *, now: float = 0.0) -> None:
        self.region = region
        self.account = account
        self.now = now
        self.clusters: dict[str, dict[str, FakeNodegroup]] = {}
        self.observers: list[Observer] = []

    def add_cluster(self, name: str) -> None:
        self.clusters.setdefault(name, {})

    def add_nodegroup(self, cluster: str, name: str, *, subnets: Sequence[str], zones: Sequence[str],
                      instance_types: Sequence[str] | None = ("m5.large",), capacity_type: str = "ON_DEMAND",
                      scaling: tuple[int, int, int] = (0, 1, 0), labels: Mapping[str, str] | None = None,
                      taints: Sequence[Mapping[str, str]] = (), launch_template: Mapping[str, str] | None = None,
                      asg_launch_template: Mapping[str, str] | None = None,
                      asg_tags: Mapping[str, str] | None = None, status: str = "ACTIVE") -> FakeNodegroup:
        """A node group; ``scaling`` is (minSize, maxSize, desiredSize). Its Auto Scaling group gets EKS's tags
        (``asg_tags`` replaces them) and an EKS-made template ``eks-<uuid>`` unless ``asg_launch_template`` says."""
        self.add_cluster(cluster)
        group_id = str(uuid.uuid4())
        tags = {CA_ENABLED_TAG: "true", f"k8s.io/cluster-autoscaler/{cluster}": "owned",
                "eks:cluster-name": cluster, "eks:nodegroup-name": name} if asg_tags is None else dict(asg_tags)
        template = dict(asg_launch_template) if asg_launch_template is not None else {
            "id": "lt-" + group_id.replace("-", "")[:17], "name": f"eks-{group_id}", "version": "1"}
        group = FakeNodegroup(cluster, name, list(instance_types) if instance_types is not None else None,
                              capacity_type, scaling[0], scaling[1], scaling[2], list(subnets), dict(labels or {}),
                              [dict(t) for t in taints], dict(launch_template) if launch_template else None,
                              f"eks-{name}-{group_id}", template, tags, list(zones), status, group_id, self.now)
        self.clusters[cluster][name] = group
        return group

    # --- EKS (rest-json) ---------------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """``ListNodegroups`` and ``DescribeNodegroup``; any other path or method is EKS's 404."""
        match = _PATH.match(request.path)
        if request.method != "GET" or match is None:
            return self._eks_error("Unknown", "ResourceNotFoundException", 404, f"No route for {request.path}")
        cluster, name = match["cluster"], match["nodegroup"]
        operation = "DescribeNodegroup" if name else "ListNodegroups"
        groups = self.clusters.get(cluster)
        if groups is None:
            return self._eks_error(operation, "ResourceNotFoundException", 404,
                                   f"No cluster found for name: {cluster}.", clusterName=cluster)
        if name:
            group = groups.get(name)
            if group is None:
                return self._eks_error(operation, "ResourceNotFoundException", 404,
                                       f"No node group found for name: {name}.", clusterName=cluster,
                                       nodegroupName=name)
            return self._eks_answer(operation, {"nodegroup": group.describe(self.region, self.account)})
        return self._list(operation, cluster, sorted(groups), request.query)

    def _list(self, operation: str, cluster: str, names: list[str], query: Mapping[str, str]) -> web.Response:
        try:
            size = int(query.get("maxResults", "100"))
            start = int(query.get("nextToken", "0"))
        except ValueError:
            size, start = 0, -1
        if not 1 <= size <= 100 or not 0 <= start <= len(names):  # the model's ListNodegroupsRequestMaxResults
            return self._eks_error(operation, "InvalidParameterException", 400,
                                   "maxResults must be 1 to 100 and nextToken one this call gave",
                                   clusterName=cluster)
        body: JSON = {"nodegroups": names[start:start + size]}
        if start + size < len(names):
            body["nextToken"] = str(start + size)
        return self._eks_answer(operation, body)

    def _eks_answer(self, operation: str, body: JSON) -> web.Response:
        self._observe(operation, 200, body)
        return web.json_response(body)

    def _eks_error(self, operation: str, code: str, status: int, message: str, **members: str) -> web.Response:
        body = {"message": message, **members}
        self._observe(operation, status, {"code": code, **body})
        return web.Response(status=status, text=json.dumps(body), content_type="application/json",
                            headers={"x-amzn-ErrorType": code})

    # --- Auto Scaling (query) ----------------------------------------------------------------------------------

    async def handle_autoscaling(self, request: web.Request) -> web.Response:
        """``DescribeAutoScalingGroups`` by name (``AutoScalingGroupNames.member.N``); other actions are refused as
        Auto Scaling refuses an unknown action (``InvalidAction``, 400)."""
        form = await request.post()
        action = str(form.get("Action", ""))
        if action != "DescribeAutoScalingGroups":
            self._observe(action, 400, {"code": "InvalidAction"})
            return _query_error("InvalidAction", f"The action {action} is not valid for this web service.")
        wanted = {str(v) for k, v in form.items() if k.startswith("AutoScalingGroupNames.member.")}
        groups = [g for cluster in self.clusters.values() for g in cluster.values()
                  if not wanted or g.asg_name in wanted]
        found = [g.auto_scaling_group(self.region, self.account) for g in sorted(groups, key=lambda g: g.asg_name)]
        self._observe(action, 200, {"AutoScalingGroups": found})
        inner = "".join(f"<member>{_xml('AutoScalingGroup', g)}</member>" for g in found)
        body = (f'<DescribeAutoScalingGroupsResponse xmlns="{AUTOSCALING_NAMESPACE}"><DescribeAutoScalingGroupsResult>'
                f"<AutoScalingGroups>{inner}</AutoScalingGroups></DescribeAutoScalingGroupsResult>"
                f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
                "</DescribeAutoScalingGroupsResponse>")
        return web.Response(text=body, content_type="text/xml")

    def _observe(self, operation: str, status: int, body: Any) -> None:
        for observer in self.observers:
            observer(operation, status, body)


def signed_service(request: web.Request) -> str:
    """The service a SigV4-signed request is for (its ``Authorization`` credential scope: ``ec2``, ``autoscaling``,
    ``eks``); empty when unsigned."""
    match = _SCOPE.search(request.headers.get("Authorization", ""))
    return match["service"] if match else ""


#: Members whose values are lists, and their element structure (``None``: scalars), for the XML writer.
_LISTS: dict[str, str | None] = {"AvailabilityZones": None, "Overrides": "LaunchTemplateOverrides",
                                 "Tags": "TagDescription"}


def _xml(shape: str, value: Mapping[str, Any]) -> str:
    """A structure as Auto Scaling's XML: members by name, lists as ``<member>`` elements, booleans lower-case,
    timestamps ISO 8601 (botocore's query parser reads them so)."""
    out = []
    for key, item in value.items():
        if key in _LISTS:
            inner = "".join(f"<member>{_xml(str(_LISTS[key]), v) if isinstance(v, Mapping) else _text(key, v)}"
                            "</member>" for v in item)
        elif isinstance(item, Mapping):
            inner = _xml(key, item)
        else:
            inner = _text(key, item)
        out.append(f"<{key}>{inner}</{key}>")
    return "".join(out)


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if key == "CreatedTime":
        from datetime import UTC, datetime  # noqa: PLC0415 (only the fake's answers need it)

        return datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return escape(str(value))


def _query_error(code: str, message: str, status: int = 400) -> web.Response:
    body = (f'<ErrorResponse xmlns="{AUTOSCALING_NAMESPACE}"><Error><Type>Sender</Type><Code>{escape(code)}</Code>'
            f"<Message>{escape(message)}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>")
    return web.Response(status=status, text=body, content_type="text/xml")
