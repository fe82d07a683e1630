"""The pool file's ``aws:`` block: what the aws provider cannot do is refused before it runs, naming the field."""

from __future__ import annotations

import pytest

from gangscale.config import ConfigError, parse_pool_yaml

AWS = "aws: {region: us-east-1, cluster: my-eks, launchTemplate: lt-0123456789abcdef0, subnet: subnet-0abc"


def pool(extra: str = "", aws: str = "") -> str:
    return f"""
nodePools:
- name: gpu
  machineType: p5.48xlarge
  zone: us-east-1a
  maxUnits: 16
{extra}
  {AWS}{aws}}}
"""


def problems(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_pool_yaml(text)
    return str(caught.value)


def test_a_plain_pool_resolves_with_the_labels_its_nodes_carry() -> None:
    (gpu,) = parse_pool_yaml(pool()).pools
    assert gpu.provider["aws"] == {"region": "us-east-1", "cluster": "my-eks", "launchTemplate": "lt-0123456789abcdef0",
                                   "launchTemplateVersion": "$Default", "subnet": "subnet-0abc", "nodeGroup": "",
                                   "placementGroup": "", "capacityBlock": False}
    assert dict(gpu.labels) == {"gangscale.io/node-pool": "gpu", "node.kubernetes.io/instance-type": "p5.48xlarge",
                                "topology.kubernetes.io/zone": "us-east-1a",
                                "topology.kubernetes.io/region": "us-east-1"}
    assert gpu.taints == ()  # EKS does not taint GPU nodes by itself, unlike GKE


def test_a_managed_node_groups_pool_carries_its_labels() -> None:
    (gpu,) = parse_pool_yaml(pool("  capacityType: spot", ", nodeGroup: gpu-ng")).pools
    assert gpu.labels["eks.amazonaws.com/nodegroup"] == "gpu-ng"
    assert gpu.labels["eks.amazonaws.com/capacityType"] == "SPOT"
    assert "cloud.google.com/gke-spot" not in gpu.labels


def test_a_reservation_pool_carries_its_reservation_id() -> None:
    (gpu,) = parse_pool_yaml(pool("  capacityType: reservation\n  reservation: {name: cr-0abc, nodes: 8}",
                                  ", capacityBlock: true, nodeGroup: ng")).pools
    assert gpu.provider["aws"]["capacityReservationId"] == "cr-0abc"
    assert gpu.labels["eks.amazonaws.com/capacityType"] == "CAPACITY_BLOCK"
    assert gpu.unit_limit == 8


@pytest.mark.parametrize(("text", "expected"), [
    (pool().replace("  zone: us-east-1a\n", ""), "(gpu).zone: is required with aws"),
    (pool().replace("  machineType: p5.48xlarge\n", "  allocatable: {cpu: '8', memory: 32Gi}\n"),
     "(gpu).machineType: is required with aws"),
    (pool().replace(", subnet: subnet-0abc", ""), "(gpu).aws.subnet: is required"),
    (pool(aws=", subnet: sn-1"), "must be a subnet id"),
    (pool("  capacityType: reservation\n  reservation: {name: my-res}"), "(gpu).reservation.name: is required"),
    (pool("  capacityType: reservation"), "(gpu).reservation.name: is required"),
    (pool(aws=", capacityBlock: true"), "(gpu).aws.capacityBlock: is for a pool of capacityType reservation"),
    (pool("  capacityType: flex-start"), "(gpu).capacityType: flex-start is GKE's"),
    (pool("  nodesPerUnit: 2"), "(gpu).nodesPerUnit: a unit of the aws provider is one EC2 instance"),
    (pool(aws=", launchTemplateVersion: latest"), "must be $Default, $Latest or a version number"),
    (pool(aws=", launchTemplate: 'a b'"), "must be a launch template id"),
    (pool("  gke: {project: p, location: l, cluster: c}"), "(gpu).aws: a pool lives on one cloud"),
    (pool(aws=", subnets: [subnet-1]"), "unknown field; did you mean subnet?"),
])
def test_what_the_provider_cannot_do_is_refused(text: str, expected: str) -> None:
    assert expected in problems(text)
