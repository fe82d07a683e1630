"""Default prices per node-hour, for pools whose file gives no ``pricePerUnitHour``.

They rank pools and tiers (the planner's ``price`` criterion) and put a cost on the demo's accelerator-hours; they
are not a bill. Set ``pricePerUnitHour`` in the pool file for what you actually pay (committed-use discounts,
negotiated prices, your region).

What they are: on-demand list prices in USD per hour of one VM, us-central1, per accelerator of the machine (a GPU
VM's price is close to proportional to its GPU count within a series; a TPU VM's is its chips times the per-chip-hour
price). UNVERIFIED: these are approximate figures of Google Cloud's published GPU and TPU price lists as the
project's authors knew them, not read from a current price list, and prices change. The tier factors:

- spot: 0.4 of on-demand. Google's Spot VM pricing page promises discounts of 60 to 91 % off the on-demand price,
  so 0.4 is the dearest a spot VM can be, which keeps spot from looking cheaper than it surely is;
- flex-start: 0.5 of on-demand (UNVERIFIED: Dynamic Workload Scheduler capacity is billed at a discount; the figure
  is an assumption);
- reservation and on-demand: 1.0 (a reservation is paid at its rate whether used or not).

EC2 instance types have a price per instance-hour of their own (:data:`PER_INSTANCE_HOUR`): approximate on-demand
list prices in us-east-1, UNVERIFIED in the same way (AWS cut the P4 and P5 prices in 2025; the figures try to follow
that). EC2 spot prices float with demand; the 0.4 factor is kept for them too, as an assumption.

A machine type the catalog does not know has no default price (the planner counts it as 0, as before).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gangscale.model.catalog import CATALOG
from gangscale.model.tiers import FLEX_START, ON_DEMAND, RESERVATION, SPOT

#: USD per accelerator-hour on demand, by the accelerator label value of the catalog (UNVERIFIED, see above).
PER_ACCELERATOR_HOUR: Mapping[str, float] = MappingProxyType({
    "nvidia-b200": 14.0,
    "nvidia-h200-141gb": 13.0,
    "nvidia-h100-mega-80gb": 11.5,
    "nvidia-h100-80gb": 11.0,
    "nvidia-a100-80gb": 5.0,
    "nvidia-tesla-a100": 3.7,
    "nvidia-l4": 0.7,
    "tpu-v4-podslice": 3.2,
    "tpu-v5p-slice": 4.2,
    "tpu-v5-lite-podslice": 1.2,
    "tpu-v6e-slice": 2.7,
})

#: USD per on-demand instance-hour of the EC2 instance types of the catalog (UNVERIFIED, see above).
PER_INSTANCE_HOUR: Mapping[str, float] = MappingProxyType({
    "p5.48xlarge": 55.04, "p5e.48xlarge": 63.3, "p5en.48xlarge": 63.3, "p4d.24xlarge": 21.96,
    "p4de.24xlarge": 27.45, "g5.xlarge": 1.006, "g5.2xlarge": 1.212, "g5.12xlarge": 5.672, "g5.48xlarge": 16.288,
    "g6.xlarge": 0.805, "g6.12xlarge": 4.602, "g6.48xlarge": 13.35, "g6e.xlarge": 1.861, "g6e.12xlarge": 10.493,
    "g6e.48xlarge": 30.131, "trn1.32xlarge": 21.5,
})

TIER_FACTOR: Mapping[str, float] = MappingProxyType({RESERVATION: 1.0, ON_DEMAND: 1.0, SPOT: 0.4, FLEX_START: 0.5})


def node_hour(machine_type: str, capacity_type: str = ON_DEMAND) -> float | None:
    """The default price of one node of ``machine_type`` for an hour in ``capacity_type``; None when unknown."""
    if (instance := PER_INSTANCE_HOUR.get(machine_type)) is not None:
        return round(instance * TIER_FACTOR[capacity_type], 4)
    machine = CATALOG.get(machine_type)
    if machine is None:
        return None
    label = machine.gpu_label or machine.tpu_accelerator
    rate = PER_ACCELERATOR_HOUR.get(label)
    count = machine.gpus or machine.tpu_chips
    if rate is None or not count:
        return None
    return round(rate * count * TIER_FACTOR[capacity_type], 4)
