"""The built-in machine catalog: what a GKE or EKS node of a known machine type offers, and how TPU slices divide.

Sources of the figures (vCPUs and memory per VM, accelerators per VM):

- vCPU and memory of every entry: the Compute Engine machine-type listing (``gcloud compute machine-types
  list``, as tabulated in Cyclenerd/google-cloud-pricing-cost-calculator ``tools/machinetypes.csv``). GCE
  writes memory in "GB" but means GiB (the API reports ``memoryMb`` = GB x 1024), so memory is GiB here.
  Cross-checked: the Cloud TPU v5e page (``cloud.google.com/tpu/docs/v5e``: 24/48, 112/192, 224/384 for
  ct5lp-hightpu-1t/4t/8t) and the A3 series summary on the accelerator-optimized machines page (208 vCPU,
  1,872 GB for a3-highgpu-8g).
- A4 (a4-highgpu-8g, 224 vCPU, 3,968 GB): UNVERIFIED here. It comes from the project's research notes (a copy
  of the GCE "GPU machine types" page) and agrees with one third-party catalog, but the machine-type listing
  consulted predates A4.
- GPU counts per machine type: the ``-<n>g`` suffix for A2/A3/A4; for G2 the published L4 counts
  (1 for g2-standard-4/8/12/16/32, 2 for -24, 4 for -48, 8 for -96).
- GPU label values (``cloud.google.com/gke-accelerator``): the GCE GPU docs as summarised in the research
  notes (§4.4): nvidia-b200, nvidia-h200-141gb, nvidia-h100-mega-80gb, nvidia-h100-80gb (A3 High and A3 Edge;
  the latter also seen in a GKE ComputeClass example), nvidia-a100-80gb, nvidia-tesla-a100, nvidia-l4.
- TPU chips per VM: the trailing ``-<n>t`` of the machine name; TPU accelerator label values and the
  dimensionality of each generation's topology (2-D for v5e/v6e, 3-D for v4/v5p): Cloud TPU and GKE TPU docs
  via the research notes (§4.1-4.2). The v6e page lists ct6e-standard-1t/4t/8t as the GKE machine types.

EC2 instance types (``cloud="ec2"``, for the aws provider's pools): vCPUs, memory (GiB) and accelerators per
instance from AWS's instance-type pages (Accelerated computing: P5/P5e/P5en 192 vCPU, 2,048 GiB, 8 H100/H200;
P4d/P4de 96 vCPU, 1,152 GiB, 8 A100; G5/G6 1-8 A10G/L4; G6e 1-8 L40S; Trn1 16 Trainium chips, advertised by the
Neuron device plugin as ``aws.amazon.com/neuron`` devices), cross-checked for P4/P5 against torchx's
``named_resources_aws``. General purpose M5/M6i/M7i: 4 GiB per vCPU. UNVERIFIED here: ``p6-b200.48xlarge``
(192 vCPU, 2,048 GiB, 8 B200), taken from AWS's P6 announcement as summarised, not from the instance-type page.

Assumptions: every node of a pool is one VM; allocatable follows GKE's documented reservation formula (see
:func:`node_allocatable`), which a real node can undercut slightly because the kernel keeps some memory out of
the node's capacity. A pool file's explicit ``allocatable`` overrides these estimates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

from gangscale.model.resources import CPU, DEFAULT_MAX_PODS, MEMORY, PODS, ResourceList

MiB = 2**20
GiB = 2**30

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"
GPU_LABEL = "cloud.google.com/gke-accelerator"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"


@dataclass(frozen=True, slots=True)
class MachineType:
    """One VM shape. ``memory`` is in bytes; ``tpu_dims`` is how many dimensions its slice topologies have."""

    name: str
    vcpus: int
    memory: int
    gpus: int = 0
    gpu_label: str = ""
    tpu_chips: int = 0
    tpu_accelerator: str = ""
    tpu_dims: int = 0
    #: Whose machine this is: ``gce`` (GKE's allocatable formula) or ``ec2`` (EKS's).
    cloud: str = "gce"
    #: AWS Trainium/Inferentia devices (``aws.amazon.com/neuron``).
    neuron: int = 0

    @property
    def is_tpu(self) -> bool:
        return self.tpu_chips > 0


def _gpu(name: str, vcpus: int, memory_gib: int, gpus: int, label: str) -> MachineType:
    return MachineType(name, vcpus, memory_gib * GiB, gpus=gpus, gpu_label=label)


def _tpu(name: str, vcpus: int, memory_gib: int, chips: int, accelerator: str, dims: int) -> MachineType:
    return MachineType(name, vcpus, memory_gib * GiB, tpu_chips=chips, tpu_accelerator=accelerator, tpu_dims=dims)


_B200 = "nvidia-b200"
_H200 = "nvidia-h200-141gb"
_H100_MEGA = "nvidia-h100-mega-80gb"
_H100 = "nvidia-h100-80gb"
_A100_80 = "nvidia-a100-80gb"
_A100_40 = "nvidia-tesla-a100"
_L4 = "nvidia-l4"
_V4 = "tpu-v4-podslice"
_V5E = "tpu-v5-lite-podslice"
_V5P = "tpu-v5p-slice"
_V6E = "tpu-v6e-slice"

_MACHINES: tuple[MachineType, ...] = (
    # A4 (B200). UNVERIFIED: see the module docstring.
    _gpu("a4-highgpu-8g", 224, 3968, 8, _B200),
    # A3 (H100 / H200).
    _gpu("a3-highgpu-1g", 26, 234, 1, _H100),
    _gpu("a3-highgpu-2g", 52, 468, 2, _H100),
    _gpu("a3-highgpu-4g", 104, 936, 4, _H100),
    _gpu("a3-highgpu-8g", 208, 1872, 8, _H100),
    _gpu("a3-megagpu-8g", 208, 1872, 8, _H100_MEGA),
    _gpu("a3-ultragpu-8g", 224, 2952, 8, _H200),
    _gpu("a3-edgegpu-8g", 208, 1872, 8, _H100),
    # A2 (A100 40GB in highgpu/megagpu, 80GB in ultragpu).
    _gpu("a2-highgpu-1g", 12, 85, 1, _A100_40),
    _gpu("a2-highgpu-2g", 24, 170, 2, _A100_40),
    _gpu("a2-highgpu-4g", 48, 340, 4, _A100_40),
    _gpu("a2-highgpu-8g", 96, 680, 8, _A100_40),
    _gpu("a2-megagpu-16g", 96, 1360, 16, _A100_40),
    _gpu("a2-ultragpu-1g", 12, 170, 1, _A100_80),
    _gpu("a2-ultragpu-2g", 24, 340, 2, _A100_80),
    _gpu("a2-ultragpu-4g", 48, 680, 4, _A100_80),
    _gpu("a2-ultragpu-8g", 96, 1360, 8, _A100_80),
    # G2 (L4).
    _gpu("g2-standard-4", 4, 16, 1, _L4),
    _gpu("g2-standard-8", 8, 32, 1, _L4),
    _gpu("g2-standard-12", 12, 48, 1, _L4),
    _gpu("g2-standard-16", 16, 64, 1, _L4),
    _gpu("g2-standard-24", 24, 96, 2, _L4),
    _gpu("g2-standard-32", 32, 128, 1, _L4),
    _gpu("g2-standard-48", 48, 192, 4, _L4),
    _gpu("g2-standard-96", 96, 384, 8, _L4),
    # TPU v4 and v5p: 3-D topologies.
    _tpu("ct4p-hightpu-4t", 240, 407, 4, _V4, 3),
    _tpu("ct5p-hightpu-4t", 208, 448, 4, _V5P, 3),
    # TPU v5e and v6e: 2-D topologies.
    _tpu("ct5lp-hightpu-1t", 24, 48, 1, _V5E, 2),
    _tpu("ct5lp-hightpu-4t", 112, 192, 4, _V5E, 2),
    _tpu("ct5lp-hightpu-8t", 224, 384, 8, _V5E, 2),
    _tpu("ct6e-standard-1t", 44, 176, 1, _V6E, 2),
    _tpu("ct6e-standard-4t", 180, 720, 4, _V6E, 2),
    _tpu("ct6e-standard-8t", 360, 1440, 8, _V6E, 2),
)



def _ec2(name: str, vcpus: int, memory_gib: int, gpus: int = 0, neuron: int = 0) -> MachineType:
    return MachineType(name, vcpus, memory_gib * GiB, gpus=gpus, cloud="ec2", neuron=neuron)


_EC2_MACHINES: tuple[MachineType, ...] = (
    _ec2("p6-b200.48xlarge", 192, 2048, 8),  # UNVERIFIED: see the module docstring.
    _ec2("p5.48xlarge", 192, 2048, 8),
    _ec2("p5e.48xlarge", 192, 2048, 8),
    _ec2("p5en.48xlarge", 192, 2048, 8),
    _ec2("p4d.24xlarge", 96, 1152, 8),
    _ec2("p4de.24xlarge", 96, 1152, 8),
    _ec2("g5.xlarge", 4, 16, 1),
    _ec2("g5.2xlarge", 8, 32, 1),
    _ec2("g5.12xlarge", 48, 192, 4),
    _ec2("g5.48xlarge", 192, 768, 8),
    _ec2("g6.xlarge", 4, 16, 1),
    _ec2("g6.12xlarge", 48, 192, 4),
    _ec2("g6.48xlarge", 192, 768, 8),
    _ec2("g6e.xlarge", 4, 32, 1),
    _ec2("g6e.12xlarge", 48, 384, 4),
    _ec2("g6e.48xlarge", 192, 1536, 8),
    _ec2("trn1.32xlarge", 128, 512, neuron=16),
    *(_ec2(f"{family}.{size}", vcpus, vcpus * 4) for family in ("m5", "m6i", "m7i")
      for size, vcpus in (("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16), ("8xlarge", 32))),
)

CATALOG: Mapping[str, MachineType] = MappingProxyType({machine.name: machine
                                                        for machine in (*_MACHINES, *_EC2_MACHINES)})
NEURON_RESOURCE = "aws.amazon.com/neuron"

# GKE's kube-reserved tiers: (upper bound of the tier or None for "the rest", marginal rate within the tier).
_CPU_TIERS_MILLI: tuple[tuple[int | None, Fraction], ...] = (
    (1000, Fraction(6, 100)),
    (2000, Fraction(1, 100)),
    (4000, Fraction(5, 1000)),
    (None, Fraction(25, 10000)),
)
_MEMORY_TIERS: tuple[tuple[int | None, Fraction], ...] = (
    (4 * GiB, Fraction(25, 100)),
    (8 * GiB, Fraction(20, 100)),
    (16 * GiB, Fraction(10, 100)),
    (128 * GiB, Fraction(6, 100)),
    (None, Fraction(2, 100)),
)
#: GKE reserves a flat amount on machines under 1 GiB instead of the tiers.
_SMALL_MACHINE_MEMORY_RESERVED = 255 * MiB
#: kubelet's hard eviction threshold ``memory.available<100Mi``, also kept out of allocatable.
EVICTION_THRESHOLD = 100 * MiB


def _tiered(amount: int, tiers: Sequence[tuple[int | None, Fraction]]) -> Fraction:
    reserved, floor = Fraction(0), 0
    for ceiling, rate in tiers:
        top = amount if ceiling is None else min(amount, ceiling)
        if top <= floor:
            break
        reserved += (top - floor) * rate
        floor = top
    return reserved


def cpu_reserved_millis(vcpus: int) -> int:
    """GKE's CPU reservation for a node with ``vcpus`` cores, in millicores, rounded up."""
    return math.ceil(_tiered(vcpus * 1000, _CPU_TIERS_MILLI))


def memory_reserved(memory: int) -> int:
    """GKE's memory reservation (without the eviction threshold) for ``memory`` bytes, rounded up."""
    if memory < GiB:
        return _SMALL_MACHINE_MEMORY_RESERVED
    return math.ceil(_tiered(memory, _MEMORY_TIERS))


def node_allocatable(machine: MachineType) -> ResourceList:
    """What a node of ``machine`` offers to pods: :func:`eks_allocatable` for an EC2 instance type, else a GKE
    Standard node's.

    Formula from GKE's "Plan GKE Standard node sizes" page
    (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations),
    the same tiers the cluster autoscaler's GCE provider uses (``cloudprovider/gce/reserved.go``):

    - CPU: capacity minus 6% of the first core, 1% of the second, 0.5% of the third and fourth, and 0.25% of
      every core above four.
    - memory: capacity minus 25% of the first 4 GiB, 20% of the next 4 GiB, 10% of the next 8 GiB, 6% of the
      next 112 GiB and 2% above 128 GiB (a flat 255 MiB below 1 GiB), minus the 100 MiB eviction threshold.

    Reservations are exact fractions rounded up, so the estimate errs towards less room. Known gaps: the
    kernel's own reservation, which lowers a real node's memory capacity, is not modelled; the autoscaler's
    source notes that GKE computes its memory tiers with 1 GB = 1000 MiB rather than 1024, which reserves a
    little less than the documented tiers. Pods: kubelet's default 110.
    """
    if machine.cloud == "ec2":
        return eks_allocatable(machine)
    amounts = {
        CPU: machine.vcpus * 1000 - cpu_reserved_millis(machine.vcpus),
        MEMORY: machine.memory - memory_reserved(machine.memory) - EVICTION_THRESHOLD,
        PODS: DEFAULT_MAX_PODS,
    }
    return _with_accelerators(machine, amounts)


def eks_allocatable(machine: MachineType, max_pods: int = DEFAULT_MAX_PODS) -> ResourceList:
    """What an EKS node of an EC2 instance type offers to pods, as the EKS-optimized AMIs reserve it: CPU with the
    same tiers as GKE (6 % of the first core, 1 % of the second, 0.5 % of the next two, 0.25 % above four); memory
    ``11 MiB x maxPods + 255 MiB`` for kube-reserved, and the 100 MiB eviction threshold (the AMIs' bootstrap, and
    Bottlerocket's ``memory_mebibytes_to_reserve``). Assumption: ``maxPods`` is the kubelet's default 110; a real
    node's depends on the VPC CNI's per-ENI limits and the AMI, and a pool file's ``allocatable`` overrides it."""
    amounts = {
        CPU: machine.vcpus * 1000 - cpu_reserved_millis(machine.vcpus),
        MEMORY: machine.memory - (11 * max_pods + 255) * MiB - EVICTION_THRESHOLD,
        PODS: max_pods,
    }
    return _with_accelerators(machine, amounts)


def _with_accelerators(machine: MachineType, amounts: dict[str, int]) -> ResourceList:
    if machine.gpus:
        amounts[GPU_RESOURCE] = machine.gpus
    if machine.tpu_chips:
        amounts[TPU_RESOURCE] = machine.tpu_chips
    if machine.neuron:
        amounts[NEURON_RESOURCE] = machine.neuron
    return ResourceList(amounts)


def machine_labels(machine: MachineType, tpu_topology: str = "") -> dict[str, str]:
    """The accelerator labels GKE puts on a node of ``machine`` (the ones pods select accelerators by)."""
    labels: dict[str, str] = {}
    if machine.gpu_label:
        labels[GPU_LABEL] = machine.gpu_label
    if machine.tpu_accelerator:
        labels[TPU_ACCELERATOR_LABEL] = machine.tpu_accelerator
        if tpu_topology:
            labels[TPU_TOPOLOGY_LABEL] = tpu_topology
    return labels


_TOPOLOGY = re.compile(r"^[0-9]+(?:x[0-9]+)*$")


def topology_chips(topology: str, dims: int = 0) -> int:
    """The number of chips in a TPU topology such as ``2x4`` or ``2x2x2``.

    ``dims`` is the dimensionality the generation uses (2 for v5e/v6e, 3 for v4/v5p); 0 accepts any.
    """
    if not _TOPOLOGY.match(topology):
        raise ValueError(f"malformed TPU topology {topology!r}: expected positive whole numbers joined by 'x', "
                         "such as 2x4 or 2x2x2")
    sizes = [int(part) for part in topology.split("x")]
    if any(size < 1 for size in sizes):
        raise ValueError(f"malformed TPU topology {topology!r}: every dimension must be at least 1")
    if dims and len(sizes) != dims:
        example = "2x4" if dims == 2 else "2x2x2"
        raise ValueError(f"TPU topology {topology!r} has {len(sizes)} dimension(s), but this TPU generation uses "
                         f"{dims} (such as {example})")
    return math.prod(sizes)


def tpu_hosts(machine: MachineType, topology: str) -> int:
    """How many VMs (nodes) of ``machine`` one slice of ``topology`` spans: chips in the slice / chips per VM.

    The chips-per-VM figure comes from the machine type, not from the topology, because the same topology can
    be one 8-chip VM or two 4-chip VMs (v5e and v6e ``2x4``).
    """
    if not machine.is_tpu:
        raise ValueError(f"machine type {machine.name} has no TPUs, so a TPU topology does not apply")
    chips = topology_chips(topology, machine.tpu_dims)
    if chips % machine.tpu_chips:
        raise ValueError(f"TPU topology {topology!r} has {chips} chip(s), which is not a whole number of "
                         f"{machine.name} VMs ({machine.tpu_chips} chips each)")
    return chips // machine.tpu_chips
