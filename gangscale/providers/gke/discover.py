"""``gangscale pools --from-gke PROJECT/LOCATION/CLUSTER``: a pool file written from the cluster's node pools.

Each node pool becomes what gangscale can do with it:

- a multi-host TPU pool (``placementPolicy.tpuTopology`` whose slice spans several VMs) becomes a ``slice`` pool:
  gangscale makes each new slice as a node pool of its own, copying this pool's node config, management and
  upgrade settings (``nodePool`` names it as the template);
- a pool with queued provisioning (``queuedProvisioning.enabled``) becomes one ``queued-provisioning`` pool per
  zone: gangscale asks GKE for its nodes with ``queued-provisioning.gke.io`` ProvisioningRequests (such a pool keeps
  GKE's autoscaling on: it is what serves those requests);
- a flex-start pool (``config.flexStart``) becomes one ``flex-start`` pool per zone, its ``config.maxRunDuration``
  as ``maxRunDurationSeconds``: gangscale asks its instance group for VMs with resize requests;
- any other pool becomes one ``resize`` pool per zone of its ``locations``: gangscale adds named VMs to the pool's
  instance group in that zone;
- a pool GKE's own autoscaler manages (other than a queued-provisioning one) is left out, and the reason is
  written at the top of the file and on stderr: two autoscalers on one pool undo each other's work.

Labels and taints are the node config's own (GKE and gangscale add theirs); ``maxUnits`` cannot be read from a
pool GKE does not autoscale, so it is written as a stated default for the operator to set to their budget.

Each pool's ``capacityType`` comes from the node config (container v1 ``NodeConfig``): ``spot`` (or the older
``preemptible``) makes ``spot``; a ``reservationAffinity`` that must consume a reservation (``SPECIFIC_RESERVATION``,
``ANY_RESERVATION_THEN_FAIL``) makes ``reservation``, with the reservation's name when it is a specific one — its
size is not in the node pool, so it is left for the operator (``reservation.nodes``); flex-start and queued
provisioning pools are flex-start by their mode. ``ANY_RESERVATION`` takes a reservation when one matches and
on-demand capacity otherwise, so such a pool is written as on-demand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from gangscale.configschema import MAX_RUN_SECONDS, MIN_RUN_SECONDS
from gangscale.model.catalog import CATALOG, tpu_hosts
from gangscale.providers.gke.client import GcpHttp
from gangscale.providers.gke.pools import RESERVED_PREFIXES

JSON = dict[str, Any]
DEFAULT_MAX_UNITS = 4
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}
GKE_TAINT_KEYS = ("nvidia.com/gpu", "google.com/tpu")


async def pool_file_from_gke(http: GcpHttp, project: str, location: str, cluster: str) -> tuple[str, list[str]]:
    """The pool file's text, and the node pools left out with why."""
    listed = await http.container("GET", f"/v1/projects/{project}/locations/{location}/clusters/{cluster}/nodePools")
    pools: list[JSON] = []
    refused: list[str] = []
    for node_pool in sorted(listed.get("nodePools") or [], key=lambda p: str(p.get("name"))):
        why = _refusal(node_pool)
        if why:
            refused.append(f"{node_pool.get('name')}: {why}")
            continue
        pools.extend(_pools_of(node_pool, project, location, cluster))
    header = [f"# gangscale pool file written from GKE cluster {project}/{location}/{cluster}.",
              f"# maxUnits is {DEFAULT_MAX_UNITS} everywhere: set it to what each pool may cost you."]
    header += [f"# left out: {line}" for line in refused]
    body = yaml.safe_dump({"nodePools": pools}, sort_keys=False, default_flow_style=False) if pools else \
        "nodePools: []\n"
    return "\n".join(header) + "\n" + body, refused


def _refusal(node_pool: JSON) -> str | None:
    autoscaling = node_pool.get("autoscaling") or {}
    if (node_pool.get("queuedProvisioning") or {}).get("enabled"):
        return None
    if autoscaling.get("enabled"):
        limits = [f"{k} {autoscaling[k]}" for k in ("minNodeCount", "maxNodeCount", "totalMinNodeCount",
                                                    "totalMaxNodeCount") if k in autoscaling]
        return ("GKE's cluster autoscaler manages it" + (f" ({', '.join(limits)})" if limits else "") +
                "; two autoscalers on one pool undo each other's work: disable it "
                f"(gcloud container node-pools update {node_pool.get('name')} --no-enable-autoscaling) to hand the "
                "pool to gangscale")
    return None


def _pools_of(node_pool: JSON, project: str, location: str, cluster: str) -> list[JSON]:
    config = node_pool.get("config") or {}
    machine_type = str(config.get("machineType", ""))
    topology = str((node_pool.get("placementPolicy") or {}).get("tpuTopology", ""))
    name = str(node_pool.get("name"))
    zones: Sequence[str] = node_pool.get("locations") or []
    labels = {k: str(v) for k, v in (config.get("labels") or {}).items() if not str(k).startswith(RESERVED_PREFIXES)}
    taints = [{"key": t.get("key"), "value": t.get("value", ""), "effect": EFFECTS.get(t.get("effect"), "NoSchedule")}
              for t in config.get("taints") or [] if t.get("key") not in GKE_TAINT_KEYS]
    common: JSON = {"machineType": machine_type, **_capacity(config)}
    if labels:
        common["labels"] = labels
    if taints:
        common["taints"] = taints
    machine = CATALOG.get(machine_type)
    if topology and machine is not None and machine.is_tpu and tpu_hosts(machine, topology) > 1:
        return [{"name": _pool_name(name, ""), **common, "tpuTopology": topology, "zone": zones[0] if zones else "",
                 "maxUnits": DEFAULT_MAX_UNITS,
                 "gke": {"project": project, "location": location, "cluster": cluster, "mode": "slice",
                         "nodePool": name}}]
    if topology:
        common["tpuTopology"] = topology
    gke: JSON = {"project": project, "location": location, "cluster": cluster, "mode": _mode(node_pool),
                 "nodePool": name}
    run = _seconds(str(config.get("maxRunDuration") or ""))
    if run is not None and gke["mode"] != "resize" and MIN_RUN_SECONDS <= run <= MAX_RUN_SECONDS:
        gke["maxRunDurationSeconds"] = run
    return [{"name": _pool_name(name, zone if len(zones) > 1 else ""), **common, "zone": zone,
             "maxUnits": DEFAULT_MAX_UNITS, "gke": dict(gke)}
            for zone in zones]


#: Reservation affinities whose VMs come only from a reservation.
RESERVED_ONLY = ("SPECIFIC_RESERVATION", "ANY_RESERVATION_THEN_FAIL")
#: ``reservationAffinity.key`` of a specific reservation (its values name it).
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"


def _capacity(config: JSON) -> JSON:
    """The pool file's ``capacityType`` (and ``reservation``) for a node config; nothing for on-demand."""
    if config.get("spot") or config.get("preemptible"):
        return {"capacityType": "spot"}
    affinity = config.get("reservationAffinity") or {}
    if affinity.get("consumeReservationType") in RESERVED_ONLY:
        values = affinity.get("values") or []
        named = affinity.get("key") == RESERVATION_NAME_KEY and len(values) == 1
        return {"capacityType": "reservation", **({"reservation": {"name": str(values[0])}} if named else {})}
    return {}


def _mode(node_pool: JSON) -> str:
    if (node_pool.get("queuedProvisioning") or {}).get("enabled"):
        return "queued-provisioning"
    if (node_pool.get("config") or {}).get("flexStart"):
        return "flex-start"
    return "resize"


def _seconds(duration: str) -> int | None:
    """A google-duration (``"86400s"``, ``"3.5s"``) as whole seconds; None when absent or not one."""
    if not duration.endswith("s"):
        return None
    try:
        return int(float(duration[:-1]))
    except ValueError:
        return None


def _pool_name(node_pool: str, zone: str) -> str:
    """A pool file name (a DNS label): the node pool's, with the zone's suffix when the pool spans zones."""
    suffix = f"-{zone.rsplit('-', 1)[-1]}" if zone else ""
    return f"{node_pool[:63 - len(suffix)]}{suffix}"
