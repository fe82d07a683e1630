"""The node-pool file: resolution against the catalog, overrides, and error reporting."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gangscale.config import ConfigError, PoolFile, load_pool_file, parse_pool_file, parse_pool_yaml
from gangscale.model.catalog import CATALOG, node_allocatable
from gangscale.model.nodepool import NodePool
from gangscale.model.policy import Policy
from gangscale.model.resources import ResourceList
from gangscale.model.scheduling import Taint

JSON = dict[str, Any]

SEED_TUTORIAL = """
nodePools:
  - name: nodepool1
    machineType: ct5lp-hightpu-4t
    tpuTopology: 2x4
    maxUnits: 3
"""


def only_pool(*pools: JSON) -> NodePool:
    return parse_pool_file({"nodePools": list(pools)}).pools[0]


def errors_of(data: object, source: str = "pools.yaml") -> str:
    with pytest.raises(ConfigError) as caught:
        parse_pool_file(data, source)
    return str(caught.value)


def test_seed_tutorial_v5e_2x4_on_4_chip_vms_is_a_two_host_slice() -> None:
    pool = parse_pool_yaml(SEED_TUTORIAL, "tutorial.yaml").pools[0]
    assert pool.nodes_per_unit == 2
    assert pool.allocatable["google.com/tpu"] == 4
    assert pool.unit_allocatable()["google.com/tpu"] == 8
    assert pool.labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
    assert pool.labels["cloud.google.com/gke-tpu-topology"] == "2x4"
    assert (pool.machine_type, pool.tpu_topology, pool.min_units, pool.max_units) == ("ct5lp-hightpu-4t", "2x4", 0, 3)


@pytest.mark.parametrize(("machine", "topology", "nodes", "resource", "per_node"), [
    ("ct5lp-hightpu-4t", "2x4", 2, "google.com/tpu", 4),
    ("ct5lp-hightpu-8t", "2x4", 1, "google.com/tpu", 8),
    ("ct4p-hightpu-4t", "2x2x4", 4, "google.com/tpu", 4),
    ("ct5p-hightpu-4t", "2x2x2", 2, "google.com/tpu", 4),
    ("ct6e-standard-4t", "4x4", 4, "google.com/tpu", 4),
    ("ct5lp-hightpu-4t", "", 1, "google.com/tpu", 4),
    ("a3-highgpu-8g", "", 1, "nvidia.com/gpu", 8),
    ("g2-standard-24", "", 1, "nvidia.com/gpu", 2),
], ids=["v5e-2x4-multi-host", "v5e-2x4-single-host", "v4-2x2x4", "v5p-2x2x2", "v6e-4x4", "tpu-without-topology",
        "a3-highgpu-8g", "g2-standard-24"])
def test_catalog_resolution(machine: str, topology: str, nodes: int, resource: str, per_node: int) -> None:
    raw: JSON = {"name": "p", "machineType": machine, "maxUnits": 2}
    if topology:
        raw["tpuTopology"] = topology
    pool = only_pool(raw)
    assert pool.nodes_per_unit == nodes
    assert pool.allocatable[resource] == per_node
    assert pool.allocatable == node_allocatable(CATALOG[machine])


def test_gpu_pool_labels() -> None:
    pool = only_pool({"name": "a3-h100", "machineType": "a3-highgpu-8g", "zone": "us-central1-a", "maxUnits": 4})
    assert dict(pool.labels) == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "gangscale.io/node-pool": "a3-h100",
        "node.kubernetes.io/instance-type": "a3-highgpu-8g",
        "topology.kubernetes.io/zone": "us-central1-a",
        "cloud.google.com/gke-nodepool": "a3-h100",
    }
    assert pool.zone == "us-central1-a"


def test_explicit_allocatable_overrides_the_catalog_key_by_key() -> None:
    pool = only_pool({"name": "p", "machineType": "a3-highgpu-8g", "maxUnits": 1,
                      "allocatable": {"cpu": "200", "nvidia.com/gpu": 7, "example.com/nic": "2"}})
    catalog = node_allocatable(CATALOG["a3-highgpu-8g"])
    assert pool.allocatable["cpu"] == 200_000
    assert pool.allocatable["nvidia.com/gpu"] == 7
    assert pool.allocatable["example.com/nic"] == 2
    assert pool.allocatable["memory"] == catalog["memory"]
    assert pool.allocatable["pods"] == 110


def test_explicit_labels_override_derived_labels() -> None:
    pool = only_pool({"name": "p", "machineType": "ct5lp-hightpu-4t", "tpuTopology": "2x4", "maxUnits": 1,
                      "labels": {"cloud.google.com/gke-tpu-topology": "custom", "team": "ml"}})
    assert pool.labels["cloud.google.com/gke-tpu-topology"] == "custom"
    assert pool.labels["team"] == "ml"
    assert pool.labels["gangscale.io/node-pool"] == "p"


def test_explicit_nodes_per_unit_overrides_the_topology() -> None:
    pool = only_pool({"name": "p", "machineType": "ct5lp-hightpu-4t", "tpuTopology": "2x4", "nodesPerUnit": 3,
                      "maxUnits": 1})
    assert pool.nodes_per_unit == 3


def test_machine_outside_the_catalog_needs_and_uses_explicit_allocatable() -> None:
    pool = only_pool({"name": "cpu", "machineType": "n2-standard-8", "maxUnits": 10, "minUnits": 1,
                      "allocatable": {"cpu": "7910m", "memory": "29Gi"},
                      "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
                                 {"key": "spot", "effect": "PreferNoSchedule"}],
                      "pricePerUnitHour": 0.39})
    assert pool.allocatable == ResourceList({"cpu": 7910, "memory": 29 * 2**30, "pods": 110})
    assert pool.taints == (Taint("dedicated", "batch", "NoSchedule"), Taint("spot", "", "PreferNoSchedule"))
    assert dict(pool.labels) == {"gangscale.io/node-pool": "cpu", "node.kubernetes.io/instance-type": "n2-standard-8"}
    assert (pool.min_units, pool.max_units, pool.price_per_unit_hour) == (1, 10, 0.39)
    assert pool.provider == {}


def test_pool_without_machine_type() -> None:
    pool = only_pool({"name": "bare", "maxUnits": 1, "allocatable": {"cpu": 4, "memory": "16Gi", "pods": 30}})
    assert dict(pool.labels) == {"gangscale.io/node-pool": "bare"}
    assert pool.allocatable["pods"] == 30


def test_custom_tpu_machine_with_explicit_nodes_per_unit() -> None:
    pool = only_pool({"name": "t", "machineType": "tpu7x-standard-4t", "tpuTopology": "2x2x2", "nodesPerUnit": 2,
                      "maxUnits": 1, "allocatable": {"cpu": 100, "memory": "100Gi", "google.com/tpu": 4}})
    assert pool.nodes_per_unit == 2
    assert "cloud.google.com/gke-tpu-topology" not in pool.labels


@pytest.mark.parametrize(("simulated", "provider"), [
    ({}, {"stock": None, "provisionSeconds": 60.0}),
    ({"stock": 2, "provisionSeconds": 5}, {"stock": 2, "provisionSeconds": 5.0}),
    ({"stock": None}, {"stock": None, "provisionSeconds": 60.0}),
], ids=["defaults", "explicit", "unlimited"])
def test_simulated_provider_section(simulated: JSON, provider: JSON) -> None:
    pool = only_pool({"name": "p", "machineType": "g2-standard-4", "maxUnits": 1, "simulated": simulated})
    assert pool.provider == {"simulated": provider}


def test_pool_file_keeps_order_and_defaults_policy() -> None:
    pool_file = parse_pool_file({"nodePools": [{"name": "b", "machineType": "g2-standard-4", "maxUnits": 1},
                                               {"name": "a", "machineType": "g2-standard-8", "maxUnits": 1}]})
    assert [pool.name for pool in pool_file.pools] == ["b", "a"]
    assert pool_file.policy == Policy()
    assert isinstance(pool_file, PoolFile)


GOOD = {"machineType": "a3-highgpu-8g", "maxUnits": 2}
TPU = {"machineType": "ct5lp-hightpu-4t", "maxUnits": 2}


@pytest.mark.parametrize(("pool", "field", "message"), [
    ({**GOOD, "name": "a3-h100", "maxUnits": -1}, "maxUnits", "Input should be greater than or equal to 0"),
    ({**GOOD, "name": "a3-h100", "maxUnits": 100_001}, "maxUnits", "less than or equal to 100000"),
    ({"name": "a3-h100", "machineType": "a3-highgpu-8g"}, "maxUnits", "Field required (every pool needs a maximum"),
    ({**GOOD, "name": "a3-h100", "maxUnits": "3"}, "maxUnits", "Input should be a valid integer"),
    ({**GOOD, "name": "a3-h100", "maxUnits": 1.5}, "maxUnits", "Input should be a valid integer"),
    ({**GOOD, "name": "a3-h100", "minUnits": 3}, "minUnits", "must not exceed maxUnits (2); got 3"),
    ({**GOOD, "name": "a3-h100", "minUnits": -1}, "minUnits", "greater than or equal to 0"),
    ({**GOOD, "name": "a3-h100", "nodesPerUnit": 0}, "nodesPerUnit", "greater than or equal to 1"),
    ({**GOOD, "name": "a3-h100", "pricePerUnitHour": -1}, "pricePerUnitHour", "greater than or equal to 0"),
    ({**GOOD, "name": "A3"}, "name", "must be a DNS-1123 label"),
    ({**GOOD, "name": "a3-"}, "name", "must be a DNS-1123 label"),
    ({**GOOD, "name": "a" * 64}, "name", "at most 63 characters"),
    ({**GOOD, "name": "a3_h100"}, "name", "got 'a3_h100'"),
    ({**GOOD, "name": "a3-h100", "maxUnit": 3}, "maxUnit", "unknown field; did you mean maxUnits?"),
    ({**GOOD, "name": "a3-h100", "tpu_topology": "2x4"}, "tpu_topology", "did you mean tpuTopology?"),
    ({**GOOD, "name": "a3-h100", "colour": "red"}, "colour", "unknown field; expected one of name, machineType"),
    ({**GOOD, "name": "a3-h100", "taints": [{"key": "k", "effect": "NoScheduleX"}]}, "taints[0].effect",
     "must be one of NoSchedule, PreferNoSchedule, NoExecute; got 'NoScheduleX'"),
    ({**GOOD, "name": "a3-h100", "taints": [{"effect": "NoSchedule"}]}, "taints[0].key", "Field required"),
    ({**GOOD, "name": "a3-h100", "taints": [{"key": "k", "effect": "NoSchedule", "operator": "Exists"}]},
     "taints[0].operator", "unknown field"),
    ({**GOOD, "name": "a3-h100", "labels": {"team": 7}}, "labels.team", "Input should be a valid string"),
    ({**GOOD, "name": "a3-h100", "allocatable": {"cpu": "lots"}}, "allocatable.cpu", "invalid quantity 'lots'"),
    ({**GOOD, "name": "a3-h100", "allocatable": {"nvidia.com/gpu": "0.5"}}, "allocatable.nvidia.com/gpu",
     "must be a whole number"),
    ({**GOOD, "name": "a3-h100", "allocatable": {"memory": "-1Gi"}}, "allocatable.memory", "must not be negative"),
    ({"name": "cpu", "machineType": "n2-standard-8", "maxUnits": 1}, "allocatable",
     "machine type 'n2-standard-8' is not in the built-in catalog, so allocatable must give cpu and memory; "
     "missing cpu, memory"),
    ({"name": "cpu", "maxUnits": 1, "allocatable": {"cpu": 4}}, "allocatable",
     "there is no machineType, so allocatable must give cpu and memory; missing memory"),
    ({**GOOD, "name": "a3-h100", "tpuTopology": "2x4"}, "tpuTopology", "machine type a3-highgpu-8g has no TPUs"),
    ({**TPU, "name": "tpu-a", "tpuTopology": "2x"}, "tpuTopology", "malformed TPU topology '2x'"),
    ({**TPU, "name": "tpu-a", "tpuTopology": "0x4"}, "tpuTopology", "every dimension must be at least 1"),
    ({**TPU, "name": "tpu-a", "tpuTopology": "axb"}, "tpuTopology", "malformed TPU topology 'axb'"),
    ({**TPU, "name": "tpu-a", "tpuTopology": "2x2x2"}, "tpuTopology", "this TPU generation uses 2 (such as 2x4)"),
    ({"name": "tpu-a", "machineType": "ct4p-hightpu-4t", "maxUnits": 1, "tpuTopology": "2x4"}, "tpuTopology",
     "this TPU generation uses 3 (such as 2x2x2)"),
    ({"name": "tpu-a", "machineType": "ct5lp-hightpu-8t", "maxUnits": 1, "tpuTopology": "2x2"}, "tpuTopology",
     "not a whole number of ct5lp-hightpu-8t VMs (8 chips each)"),
    ({**TPU, "name": "tpu-a", "tpuTopology": 24}, "tpuTopology", "Input should be a valid string"),
    ({"name": "tpu-a", "machineType": "tpu7x-standard-4t", "tpuTopology": "2x2x2", "maxUnits": 1,
      "allocatable": {"cpu": 1, "memory": "1Gi"}}, "nodesPerUnit",
     "required with tpuTopology because machine type 'tpu7x-standard-4t' is not in the built-in catalog"),
    ({"name": "tpu-a", "machineType": "tpu7x-standard-4t", "tpuTopology": "2x", "nodesPerUnit": 2, "maxUnits": 1,
      "allocatable": {"cpu": 1, "memory": "1Gi"}}, "tpuTopology", "malformed TPU topology '2x'"),
    ({**GOOD, "name": "a3-h100", "simulated": {"stock": -1}}, "simulated.stock", "greater than or equal to 0"),
    ({**GOOD, "name": "a3-h100", "simulated": {"provisionSeconds": -5}}, "simulated.provisionSeconds",
     "greater than or equal to 0"),
    ({**GOOD, "name": "a3-h100", "simulated": {"stok": 1}}, "simulated.stok", "did you mean stock?"),
    ({**GOOD, "name": "a3-h100", "simulated": "yes"}, "simulated", "expected a mapping, got a str"),
], ids=["max-negative", "max-too-large", "max-missing", "max-string", "max-float", "min-above-max", "min-negative",
        "nodes-per-unit-zero", "price-negative", "name-upper-case", "name-trailing-dash", "name-too-long",
        "name-underscore", "typo-maxUnit", "snake-case-key", "unknown-key-no-close-match", "taint-bad-effect",
        "taint-no-key", "taint-unknown-key", "label-not-string", "allocatable-bad-quantity",
        "allocatable-fractional-gpu", "allocatable-negative", "unknown-machine-no-allocatable",
        "no-machine-partial-allocatable", "topology-on-gpu-machine", "topology-trailing-x", "topology-zero",
        "topology-letters", "topology-3d-on-v5e", "topology-2d-on-v4", "topology-not-divisible",
        "topology-not-string", "topology-on-unknown-machine-needs-nodes-per-unit",
        "topology-on-unknown-machine-still-checked", "stock-negative", "provision-negative", "simulated-typo",
        "simulated-not-mapping"])
def test_pool_errors_name_the_pool_and_field(pool: JSON, field: str, message: str) -> None:
    ok = {"name": "fine", "machineType": "g2-standard-4", "maxUnits": 1}
    text = errors_of({"nodePools": [ok, pool]})
    assert f"pools.yaml: nodePools[1] ({pool['name']}).{field}: " in text
    assert message in text
    assert "nodePools[0]" not in text


def test_every_problem_is_collected_into_one_error_one_per_line() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_pool_yaml("""
planner: {policy: [waste, cost]}
nodePools:
  - {name: a3-h100, machineType: a3-highgpu-8g, maxUnits: -1}
  - {name: tpu-a, machineType: ct5lp-hightpu-4t, maxUnits: 1, tpuTopology: 3x3x3}
  - {name: gpu, machineType: g2-standard-4, maxUnit: 1}
""", "pools.yaml")
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.source == "pools.yaml"
    lines = str(error).splitlines()
    assert lines == [f"pools.yaml: {problem}" for problem in error.problems]
    assert lines == [
        "pools.yaml: planner.policy: policy criteria must be a non-empty list drawn from waste, price, nodes; "
        "got ['waste', 'cost']",
        "pools.yaml: nodePools[0] (a3-h100).maxUnits: Input should be greater than or equal to 0",
        "pools.yaml: nodePools[1] (tpu-a).tpuTopology: TPU topology '3x3x3' has 3 dimension(s), but this TPU "
        "generation uses 2 (such as 2x4)",
        "pools.yaml: nodePools[2] (gpu).maxUnits: Field required (every pool needs a maximum, so a runaway gang "
        "cannot buy unbounded capacity)",
        "pools.yaml: nodePools[2] (gpu).maxUnit: unknown field; did you mean maxUnits?",
    ]


def test_duplicate_pool_names() -> None:
    pool = {"name": "dup", "machineType": "g2-standard-4", "maxUnits": 1}
    text = errors_of({"nodePools": [pool, {"name": "other", "machineType": "g2-standard-4", "maxUnits": 1}, pool]})
    assert text == "pools.yaml: nodePools[2] (dup).name: duplicate pool name; nodePools[0] already uses it"


def test_duplicate_is_reported_even_when_the_first_pool_is_invalid() -> None:
    text = errors_of({"nodePools": [{"name": "dup", "maxUnits": -1, "machineType": "g2-standard-4"},
                                    {"name": "dup", "maxUnits": 1, "machineType": "g2-standard-4"}]})
    assert "nodePools[0] (dup).maxUnits" in text
    assert "nodePools[1] (dup).name: duplicate pool name" in text


@pytest.mark.parametrize(("text", "message"), [
    ("nodePools: [\n  {name: a, maxUnits: 1", "pools.yaml: line 2, column "),
    ("nodePools:\n  - name: a\n   maxUnits: 1\n", "invalid YAML"),
    ("nodePools: []\n---\nnodePools: []\n", "invalid YAML"),
    ("", "pools.yaml: expected a mapping with a nodePools list at the top level, got nothing"),
    ("- name: a\n", "pools.yaml: expected a mapping with a nodePools list at the top level, got a list"),
    ("just text", "got a str"),
    ("planner: {}\n", "pools.yaml: nodePools: Field required"),
    ("nodePools: {name: a}\n", "pools.yaml: nodePools: Input should be a valid list"),
    ("nodePools: []\n", "pools.yaml: nodePools: must list at least one pool"),
    ("nodePools: [3]\n", "pools.yaml: nodePools[0]: expected a mapping, got an int"),
    ("nodePool: []\n", "pools.yaml: nodePool: unknown field; did you mean nodePools?"),
], ids=["yaml-unclosed-flow", "yaml-bad-indent", "yaml-two-documents", "empty-file", "top-level-list",
        "top-level-scalar", "missing-nodePools", "nodePools-not-a-list", "nodePools-empty", "pool-not-a-mapping",
        "top-level-typo"])
def test_file_level_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_pool_yaml(text, "pools.yaml")


POOLS = [{"name": "p", "machineType": "g2-standard-4", "maxUnits": 1}]


@pytest.mark.parametrize(("planner", "policy"), [
    (None, Policy()),
    ({}, Policy()),
    ({"policy": ["nodes"]}, Policy(("nodes",))),
    ({"policy": ["price", "nodes"], "extendedResourceToleration": False}, Policy(("price", "nodes"), False)),
], ids=["absent", "empty", "nodes-only", "price-then-nodes-no-toleration"])
def test_planner_section(planner: JSON | None, policy: Policy) -> None:
    data: JSON = {"nodePools": POOLS}
    if planner is not None:
        data["planner"] = planner
    assert parse_pool_file(data).policy == policy


@pytest.mark.parametrize(("planner", "message"), [
    ({"policy": ["waste", "cost"]}, "planner.policy: policy criteria must be a non-empty list drawn from waste, "
                                    "price, nodes; got ['waste', 'cost']"),
    ({"policy": ["price", "price"]}, "planner.policy: policy criteria must not repeat"),
    ({"policy": []}, "planner.policy: policy criteria must be a non-empty list"),
    ({"policy": "waste"}, "planner.policy: Input should be a valid list"),
    ({"policy": ["waste"], "extendedResourceToleration": "yes"}, "planner.extendedResourceToleration: "
                                                                 "Input should be a valid boolean"),
    ({"polcy": ["waste"]}, "planner.polcy: unknown field; did you mean policy?"),
    (["waste"], "planner: expected a mapping, got a list"),
], ids=["bad-criterion", "repeated-criterion", "empty-criteria", "criteria-not-a-list", "toleration-not-bool",
        "typo", "not-a-mapping"])
def test_planner_errors(planner: object, message: str) -> None:
    assert f"pools.yaml: {message}" in errors_of({"nodePools": POOLS, "planner": planner})


def test_load_pool_file_reads_yaml(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(SEED_TUTORIAL, encoding="utf-8")
    assert load_pool_file(path).pools[0].nodes_per_unit == 2


def test_load_pool_file_prefixes_errors_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("nodePools:\n  - {name: p, machineType: g2-standard-4, maxUnits: -1}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: nodePools[0] (p).maxUnits: ")):
        load_pool_file(path)


def test_load_pool_file_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the pool file"):
        load_pool_file(tmp_path / "absent.yaml")


def test_the_pool_label_cannot_be_overridden() -> None:
    text = ("nodePools:\n- {name: cpu, allocatable: {cpu: '4', memory: 16Gi}, maxUnits: 2,\n"
            "   labels: {gangscale.io/node-pool: x}}\n")
    with pytest.raises(ConfigError, match=r"nodePools\[0\] \(cpu\)\.labels\.gangscale\.io/node-pool: is set by"):
        parse_pool_yaml(text)


# --- what the API server would refuse later (issue 25) -------------------------------------------------------
# Upstream's texts, written out here rather than imported, so that the tests check the wording independently:
# k8s.io/apimachinery/pkg/util/validation/validation.go (RegexError, MaxLenError, IsQualifiedName,
# IsValidLabelValue).
QNAME = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
         "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
         "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
               "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
               "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
             "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
             r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
REFUSED = "(the API server would refuse the pool's nodes)"
NODE_LABEL = f"not a valid label value {REFUSED}"
CPU_POOL: JSON = {"name": "cpu", "allocatable": {"cpu": "16", "memory": "64Gi"}, "maxUnits": 2}
LONG = "a" * 64


def _taints(*taints: tuple[str, str, str]) -> JSON:
    return {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]}


@pytest.mark.parametrize(("extra", "field", "message"), [
    ({"labels": {"team": "ml training"}}, "labels.team",
     f"not a valid label value {REFUSED}: {LABEL_VALUE}; got 'ml training'"),
    ({"labels": {"team": "-ml"}}, "labels.team", f"not a valid label value {REFUSED}: {LABEL_VALUE}; got '-ml'"),
    ({"labels": {"team": LONG}}, "labels.team",
     f"not a valid label value {REFUSED}: must be no more than 63 characters; got '{LONG}'"),
    ({"labels": {"team": LONG + "!"}}, "labels.team",
     f"not a valid label value {REFUSED}: must be no more than 63 characters; {LABEL_VALUE}; got '{LONG}!'"),
    ({"labels": {"ml team": "x"}}, "labels.ml team",
     f"not a valid label key {REFUSED}: name part {QNAME}; got 'ml team'"),
    ({"labels": {"example.com/a/b": "x"}}, "labels.example.com/a/b",
     f"not a valid label key {REFUSED}: a valid label key {QNAME} with an optional DNS subdomain prefix and '/' "
     "(e.g. 'example.com/MyName'); got 'example.com/a/b'"),
    ({"labels": {"Example.com/team": "x"}}, "labels.Example.com/team",
     f"not a valid label key {REFUSED}: prefix part {SUBDOMAIN}; got 'Example.com/team'"),
    ({"labels": {"/team": "x"}}, "labels./team",
     f"not a valid label key {REFUSED}: prefix part must be non-empty; got '/team'"),
    ({"labels": {"example.com/": "x"}}, "labels.example.com/",
     f"not a valid label key {REFUSED}: name part must be non-empty; name part {QNAME}; got 'example.com/'"),
    ({"labels": {f"example.com/{LONG}": "x"}}, f"labels.example.com/{LONG}",
     f"not a valid label key {REFUSED}: name part must be no more than 63 characters; got 'example.com/{LONG}'"),
    ({"labels": {"a" * 254 + "/team": "x"}}, "labels." + "a" * 254 + "/team",
     f"not a valid label key {REFUSED}: prefix part must be no more than 253 characters; got '{'a' * 254}/team'"),
    (_taints(("dedicated team", "", "NoSchedule")), "taints[0].key",
     f"not a valid taint key {REFUSED}: name part {QNAME}; got 'dedicated team'"),
    (_taints(("dedicated", "ml training", "NoSchedule")), "taints[0].value",
     f"not a valid taint value {REFUSED}: {LABEL_VALUE}; got 'ml training'"),
    (_taints(("dedicated", "a", "NoSchedule"), ("dedicated", "b", "NoSchedule")), "taints[1]",
     "taints must be unique by key and effect pair; taints[0] already has key dedicated with effect NoSchedule; "
     "got 'dedicated=b:NoSchedule'"),
    (_taints(("d", "", "NoSchedule"), ("e", "", "NoExecute"), ("e", "x", "NoExecute")), "taints[2]",
     "taints must be unique by key and effect pair; taints[1] already has key e with effect NoExecute; "
     "got 'e=x:NoExecute'"),
    ({"machineType": "n2 standard 8"}, "machineType", f"{NODE_LABEL}: {LABEL_VALUE}; got 'n2 standard 8'"),
    ({"machineType": "-n2"}, "machineType", f"{NODE_LABEL}: {LABEL_VALUE}; got '-n2'"),
    ({"machineType": "a" * 64}, "machineType",
     f"{NODE_LABEL}: must be no more than 63 characters; got '{'a' * 64}'"),
    ({"zone": "us central1-a"}, "zone", f"{NODE_LABEL}: {LABEL_VALUE}; got 'us central1-a'"),
    ({"zone": "us-central1-a\n"}, "zone", f"{NODE_LABEL}: {LABEL_VALUE}; got 'us-central1-a\\n'"),
    ({"zone": "us-central1-"}, "zone", f"{NODE_LABEL}: {LABEL_VALUE}; got 'us-central1-'"),
    ({"name": "cpu\n"}, "name", "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
                                "with a letter or digit, at most 63 characters; got 'cpu\\n'"),
    ({"gke": {"project": "p", "location": "us-central1", "cluster": "c\n"}}, "gke.cluster",
     "must be a GKE name: lowercase letters, digits and '-', starting with a letter, at most 40 characters; got "
     "'c\\n'"),
], ids=["label-value-space", "label-value-leading-dash", "label-value-too-long", "label-value-too-long-and-bad",
        "label-key-space", "label-key-two-slashes", "label-key-prefix-upper-case", "label-key-empty-prefix",
        "label-key-empty-name", "label-key-name-too-long", "label-key-prefix-too-long", "taint-key-space",
        "taint-value-space", "taint-duplicate-key-and-effect", "taint-duplicate-later", "machine-type-spaces",
        "machine-type-leading-dash", "machine-type-too-long", "zone-space", "zone-trailing-newline",
        "zone-trailing-dash", "name-trailing-newline", "gke-cluster-trailing-newline"])
def test_what_the_api_server_would_refuse_is_one_line_naming_field_and_value(extra: JSON, field: str,
                                                                               message: str) -> None:
    pool = {**CPU_POOL, **extra}
    name = pool["name"] if pool["name"].isprintable() else repr(pool["name"])
    assert errors_of({"nodePools": [pool]}) == f"pools.yaml: nodePools[0] ({name}).{field}: {message}"


@pytest.mark.parametrize("extra", [
    {"labels": {"team": ""}},
    {"labels": {"team": "a" * 63, "example.com/" + "b" * 63: "x"}},
    {"labels": {"Team_1.x": "ML_training-2.0", "a" * 253 + "/t": "v"}},
    _taints(("example.com/dedicated", "", "NoSchedule"), ("example.com/dedicated", "", "NoExecute")),
    _taints(("spot", "true", "PreferNoSchedule"), ("Spot", "true", "PreferNoSchedule")),
    {"machineType": "custom-4-16384", "zone": "us-central1-a"},
    {"machineType": "n2-custom-4-8192-ext", "zone": "europe-west4-b"},
    {"machineType": "a" * 63},
    {"machineType": "p5.48xlarge", "zone": "us-east-1a"},
], ids=["empty-label-value", "63-character-names", "mixed-case-key-and-value", "same-taint-key-other-effect",
        "taint-keys-differ-by-case", "custom-machine-type", "extended-custom-machine-type", "63-character-machine",
        "ec2-instance-type"])
def test_what_the_api_server_accepts_is_accepted(extra: JSON) -> None:
    only_pool({**CPU_POOL, **extra})


DUPLICATE_CASES = [
    ("pool-field", "nodePools:\n- name: cpu\n  allocatable: {cpu: '16', memory: 64Gi}\n  maxUnits: 2\n"
                   "  maxUnits: 200\n",
     ['nodePools[0] (cpu).maxUnits: line 5: key "maxUnits" already set in map at line 4; got 2, then 200']),
    ("flow-mapping", "nodePools:\n- {name: cpu, allocatable: {cpu: '16', memory: 64Gi}, maxUnits: 2,\n"
                     "   labels: {team: a, 'team': \"b\"}}\n",
     ["nodePools[0] (cpu).labels.team: line 3: key \"team\" already set in map at line 3; got a, then 'b'"]),
    ("top-level", "planner: {policy: [nodes]}\nnodePools:\n- {name: cpu, allocatable: {cpu: '16', memory: 64Gi},"
                  " maxUnits: 2}\nplanner:\n  policy: [price]\n",
     ['planner: line 4: key "planner" already set in map at line 1; got a mapping, then a mapping']),
    ("name-uses-the-last-value", "nodePools:\n- name: a\n  name: b\n  allocatable: {cpu: '16', memory: 64Gi}\n"
                                 "  maxUnits: 2\n",
     ['nodePools[0] (b).name: line 3: key "name" already set in map at line 2; got a, then b']),
    ("three-times-and-other-problems", "nodePools:\n- name: cpu\n  maxUnits: 1\n  maxUnits: 2\n  maxUnits: -3\n",
     ['nodePools[0] (cpu).maxUnits: line 4: key "maxUnits" already set in map at line 3; got 1, then 2',
      'nodePools[0] (cpu).maxUnits: line 5: key "maxUnits" already set in map at line 3; got 1, then -3',
      "nodePools[0] (cpu).maxUnits: Input should be greater than or equal to 0"]),
]


@pytest.mark.parametrize(("text", "problems"), [c[1:] for c in DUPLICATE_CASES], ids=[c[0] for c in DUPLICATE_CASES])
def test_a_key_repeated_in_one_mapping_is_refused_with_its_lines(text: str, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_pool_yaml(text, "pools.yaml")
    assert list(caught.value.problems) == problems


def test_merge_keys_may_be_overridden_without_a_duplicate() -> None:
    text = """
nodePools:
  - &base {name: a, machineType: g2-standard-4, maxUnits: 1, labels: {team: ml}}
  - <<: *base
    name: b
  - <<: [*base]
    name: c
    maxUnits: 3
"""
    pools = parse_pool_yaml(text, "pools.yaml").pools
    assert [(p.name, p.max_units, p.labels["team"]) for p in pools] == [("a", 1, "ml"), ("b", 1, "ml"), ("c", 3, "ml")]
