"""The built-in machine catalog: shapes, GKE's allocatable estimate, labels and TPU slice sizes."""

from __future__ import annotations

import re

import pytest

from gangscale.model.catalog import (
    CATALOG,
    EVICTION_THRESHOLD,
    GiB,
    MachineType,
    MiB,
    cpu_reserved_millis,
    machine_labels,
    memory_reserved,
    node_allocatable,
    topology_chips,
    tpu_hosts,
)
from gangscale.model.resources import ResourceList


@pytest.mark.parametrize(("machine", "topology", "hosts"), [
    ("ct5lp-hightpu-4t", "2x4", 2),
    ("ct5lp-hightpu-8t", "2x4", 1),
    ("ct5lp-hightpu-4t", "2x2", 1),
    ("ct5lp-hightpu-4t", "4x4", 4),
    ("ct5lp-hightpu-1t", "1x1", 1),
    ("ct4p-hightpu-4t", "2x2x1", 1),
    ("ct4p-hightpu-4t", "2x2x4", 4),
    ("ct5p-hightpu-4t", "2x2x2", 2),
    ("ct6e-standard-4t", "4x4", 4),
    ("ct6e-standard-4t", "2x4", 2),
    ("ct6e-standard-8t", "2x4", 1),
    ("ct6e-standard-4t", "16x16", 64),
], ids=["v5e-2x4-on-4t-seed-tutorial", "v5e-2x4-on-8t-single-host", "v5e-2x2", "v5e-4x4", "v5e-1x1",
        "v4-2x2x1", "v4-2x2x4", "v5p-2x2x2", "v6e-4x4", "v6e-2x4-on-4t", "v6e-2x4-on-8t", "v6e-full-pod"])
def test_tpu_hosts_is_chips_in_topology_over_chips_per_vm(machine: str, topology: str, hosts: int) -> None:
    assert tpu_hosts(CATALOG[machine], topology) == hosts


@pytest.mark.parametrize(("machine", "topology", "message"), [
    ("ct5lp-hightpu-4t", "2x", "malformed TPU topology '2x'"),
    ("ct5lp-hightpu-4t", "0x4", "every dimension must be at least 1"),
    ("ct5lp-hightpu-4t", "axb", "malformed TPU topology 'axb'"),
    ("ct5lp-hightpu-4t", "", "malformed TPU topology ''"),
    ("ct5lp-hightpu-4t", "2X4", "malformed TPU topology '2X4'"),
    ("ct5lp-hightpu-4t", " 2x4", "malformed TPU topology ' 2x4'"),
    ("ct5lp-hightpu-4t", "2x2x2", "has 3 dimension(s), but this TPU generation uses 2 (such as 2x4)"),
    ("ct6e-standard-4t", "2x2x1", "has 3 dimension(s), but this TPU generation uses 2"),
    ("ct4p-hightpu-4t", "2x4", "has 2 dimension(s), but this TPU generation uses 3 (such as 2x2x2)"),
    ("ct5p-hightpu-4t", "8", "has 1 dimension(s), but this TPU generation uses 3"),
    ("ct5lp-hightpu-8t", "2x2", "has 4 chip(s), which is not a whole number of ct5lp-hightpu-8t VMs (8 chips each)"),
    ("ct4p-hightpu-4t", "1x1x1", "has 1 chip(s), which is not a whole number of ct4p-hightpu-4t VMs"),
    ("a3-highgpu-8g", "2x4", "machine type a3-highgpu-8g has no TPUs"),
], ids=["trailing-x", "zero-dimension", "letters", "empty", "upper-case-x", "leading-space", "v5e-given-3d",
        "v6e-given-3d", "v4-given-2d", "v5p-given-1d", "not-divisible-v5e-8t", "not-divisible-v4", "gpu-machine"])
def test_tpu_hosts_rejects(machine: str, topology: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        tpu_hosts(CATALOG[machine], topology)


@pytest.mark.parametrize(("topology", "dims", "chips"), [
    ("2x4", 2, 8),
    ("2x2x4", 3, 16),
    ("8x16x16", 3, 2048),
    ("4x4x4x4", 0, 256),
], ids=["2d", "3d", "large-3d", "any-dims-when-0"])
def test_topology_chips(topology: str, dims: int, chips: int) -> None:
    assert topology_chips(topology, dims) == chips


@pytest.mark.parametrize(("vcpus", "reserved"), [
    (1, 60),      # 6% of the first core
    (2, 70),      # + 1% of the second
    (4, 80),      # + 0.5% of the third and fourth
    (8, 90),      # + 0.25% of each core above 4
    (112, 350),   # 80 + 108 * 2.5
    (208, 590),   # 80 + 204 * 2.5
    (3, 75),
], ids=["1-core", "2-cores", "4-cores", "8-cores", "112-cores", "208-cores", "3-cores"])
def test_cpu_reservation_tiers(vcpus: int, reserved: int) -> None:
    assert cpu_reserved_millis(vcpus) == reserved


@pytest.mark.parametrize(("memory", "reserved"), [
    (GiB // 2, 255 * MiB),
    (4 * GiB, 1 * GiB),
    # 1 + 0.8 = 1.8 GiB = 1932735283.2 bytes, rounded up.
    (8 * GiB, 1932735284),
    # 1 + 0.8 + 0.8 = 2.6 GiB = 2791728742.4 bytes, rounded up.
    (16 * GiB, 2791728743),
    # 1 + 0.8 + 0.8 + 6.72 = 9.32 GiB = 10007273799.68 bytes, rounded up.
    (128 * GiB, 10007273800),
    # 1 + 0.8 + 0.8 + 0.06 * 1 GiB: 2.66 GiB = 2856153251.84 bytes, rounded up.
    (17 * GiB, 2856153252),
], ids=["under-1GiB-flat", "4GiB", "8GiB", "16GiB", "128GiB", "17GiB-rounds-up"])
def test_memory_reservation_tiers(memory: int, reserved: int) -> None:
    assert memory_reserved(memory) == reserved


def test_node_allocatable_by_hand_for_ct5lp_hightpu_4t() -> None:
    # 112 vCPU, 192 GiB, 4 chips.
    # cpu: 112000m - (60 + 10 + 2*5 + 108*2.5 = 350m) = 111650m
    # memory reserved: 25% of 4 GiB (1) + 20% of 4 (0.8) + 10% of 8 (0.8) + 6% of 112 (6.72) + 2% of 64 (1.28)
    #   = 10.6 GiB = 10.6 * 1073741824 = 11381663334.4 bytes -> rounded up to 11381663335
    # memory allocatable: 192 * 1073741824 - 11381663335 - 100 * 1048576 (eviction) = 194671909273
    assert 192 * GiB == 206158430208
    assert node_allocatable(CATALOG["ct5lp-hightpu-4t"]) == ResourceList({
        "cpu": 111650, "memory": 194671909273, "pods": 110, "google.com/tpu": 4})


def test_node_allocatable_for_a3_highgpu_8g_offers_eight_gpus() -> None:
    allocatable = node_allocatable(CATALOG["a3-highgpu-8g"])
    assert allocatable["nvidia.com/gpu"] == 8
    assert "google.com/tpu" not in allocatable
    assert allocatable["cpu"] == 208000 - 590
    assert allocatable["memory"] == 1872 * GiB - memory_reserved(1872 * GiB) - EVICTION_THRESHOLD


def test_node_allocatable_of_a_small_machine_uses_the_flat_reservation() -> None:
    tiny = MachineType("tiny", 1, 512 * MiB)
    assert node_allocatable(tiny) == ResourceList({"cpu": 940, "memory": 512 * MiB - 255 * MiB - 100 * MiB,
                                                   "pods": 110})


@pytest.mark.parametrize(("machine", "topology", "labels"), [
    ("a3-highgpu-8g", "", {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}),
    ("a3-megagpu-8g", "", {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}),
    ("a3-ultragpu-8g", "", {"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}),
    ("a4-highgpu-8g", "", {"cloud.google.com/gke-accelerator": "nvidia-b200"}),
    ("a2-ultragpu-1g", "", {"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}),
    ("a2-highgpu-1g", "", {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}),
    ("g2-standard-24", "", {"cloud.google.com/gke-accelerator": "nvidia-l4"}),
    ("ct5lp-hightpu-4t", "2x4", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                 "cloud.google.com/gke-tpu-topology": "2x4"}),
    ("ct5lp-hightpu-4t", "", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}),
    ("ct4p-hightpu-4t", "2x2x4", {"cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
                                  "cloud.google.com/gke-tpu-topology": "2x2x4"}),
    ("ct5p-hightpu-4t", "2x2x2", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                                  "cloud.google.com/gke-tpu-topology": "2x2x2"}),
    ("ct6e-standard-4t", "4x4", {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                 "cloud.google.com/gke-tpu-topology": "4x4"}),
], ids=["h100", "h100-mega", "h200", "b200", "a100-80gb", "a100-40gb", "l4", "v5e-with-topology",
        "v5e-without-topology", "v4", "v5p", "v6e"])
def test_machine_labels(machine: str, topology: str, labels: dict[str, str]) -> None:
    assert machine_labels(CATALOG[machine], topology) == labels


REQUIRED = [
    "a4-highgpu-8g",
    "a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g",
    "a3-edgegpu-8g",
    "a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g", "a2-megagpu-16g",
    "a2-ultragpu-1g", "a2-ultragpu-2g", "a2-ultragpu-4g", "a2-ultragpu-8g",
    "g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16", "g2-standard-24", "g2-standard-32",
    "g2-standard-48", "g2-standard-96",
    "ct4p-hightpu-4t", "ct5lp-hightpu-1t", "ct5lp-hightpu-4t", "ct5lp-hightpu-8t", "ct5p-hightpu-4t",
    "ct6e-standard-1t", "ct6e-standard-4t", "ct6e-standard-8t",
]


@pytest.mark.parametrize("name", REQUIRED, ids=REQUIRED)
def test_catalog_entry_is_consistent_with_its_name(name: str) -> None:
    machine = CATALOG[name]
    assert machine.name == name
    assert machine.vcpus > 0 and machine.memory % GiB == 0
    if gpus := re.search(r"-(\d+)g$", name):
        assert (machine.gpus, machine.tpu_chips) == (int(gpus[1]), 0)
        assert machine.gpu_label.startswith("nvidia-")
    elif chips := re.search(r"-(\d+)t$", name):
        assert (machine.tpu_chips, machine.gpus) == (int(chips[1]), 0)
        assert machine.tpu_accelerator.startswith("tpu-")
        assert machine.tpu_dims == (3 if name.startswith(("ct4p", "ct5p")) else 2)
    else:
        assert name.startswith("g2-") and machine.gpu_label == "nvidia-l4"


@pytest.mark.parametrize(("name", "vcpus", "memory_gib", "accelerators"), [
    ("a3-highgpu-8g", 208, 1872, 8),
    ("a3-highgpu-1g", 26, 234, 1),
    ("a3-ultragpu-8g", 224, 2952, 8),
    ("a2-megagpu-16g", 96, 1360, 16),
    ("a2-ultragpu-1g", 12, 170, 1),
    ("g2-standard-24", 24, 96, 2),
    ("g2-standard-32", 32, 128, 1),
    ("g2-standard-96", 96, 384, 8),
    ("ct4p-hightpu-4t", 240, 407, 4),
    ("ct5lp-hightpu-1t", 24, 48, 1),
    ("ct5lp-hightpu-8t", 224, 384, 8),
    ("ct5p-hightpu-4t", 208, 448, 4),
    ("ct6e-standard-4t", 180, 720, 4),
], ids=["a3-high-8", "a3-high-1", "a3-ultra", "a2-mega", "a2-ultra-1", "g2-24", "g2-32", "g2-96", "v4", "v5e-1",
        "v5e-8", "v5p", "v6e-4"])
def test_catalog_figures(name: str, vcpus: int, memory_gib: int, accelerators: int) -> None:
    machine = CATALOG[name]
    assert (machine.vcpus, machine.memory, machine.gpus + machine.tpu_chips) == (vcpus, memory_gib * GiB,
                                                                                  accelerators)


def test_an_eks_node_reserves_memory_by_its_pods_not_by_gke_tiers() -> None:
    # p5.48xlarge: 192 vCPU, 2,048 GiB, 8 GPUs. cpu: 192000m - (60 + 10 + 2*5 + 188*2.5 = 550m) = 191450m.
    # memory: 2048 GiB - (11 MiB x 110 pods + 255 MiB = 1465 MiB) - 100 MiB eviction.
    assert node_allocatable(CATALOG["p5.48xlarge"]) == ResourceList({
        "cpu": 191450, "memory": 2048 * GiB - 1565 * MiB, "pods": 110, "nvidia.com/gpu": 8})


def test_a_trainium_instance_offers_neuron_devices() -> None:
    assert node_allocatable(CATALOG["trn1.32xlarge"])["aws.amazon.com/neuron"] == 16
