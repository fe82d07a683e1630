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

TIER_FACTOR: Mapping[str, float] = MappingProxyType({RESERVATION: 1.0, ON_DEMAND: 1.0, SPOT: 0.4, FLEX_START: 0.5})


def node_hour(machine_type: str, capacity_type: str = ON_DEMAND) -> float | None:
    """The default price of one node of ``machine_type`` for an hour in ``capacity_type``; None when unknown."""
    machine = CATALOG.get(machine_type)
    if machine is None:
        return None
    label = machine.gpu_label or machine.tpu_accelerator
    rate = PER_ACCELERATOR_HOUR.get(label)
    count = machine.gpus or machine.tpu_chips
    if rate is None or not count:
        return None
    return round(rate * count * TIER_FACTOR[capacity_type], 4)
