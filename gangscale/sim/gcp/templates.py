"""The instance template of each fake MIG (compute v1 ``instanceTemplates.get``) and what follows from it: the
provisioning model of the MIG's VMs, their end of life, and whether the MIG takes resize requests.

Rules and their sources:

- The template is served at the path its URL names (``InstanceGroupManager.instanceTemplate``, a global template,
  ``projects/{project}/global/instanceTemplates/{instanceTemplate}`` in the compute v1 discovery document).
  ``properties.machineType`` is the machine type's name (``InstanceProperties.machineType``).
- ``properties.scheduling.provisioningModel`` follows the node pool: ``config.flexStart`` → ``FLEX_START``
  ("Flex Start provisioning model and has a limited runtime", ``Scheduling.provisioningModel``; GKE's flex-start
  pools are the "Flex Start flag for enabling Flex Start VM", ``NodeConfig.flexStart`` in container v1), with
  ``instanceTerminationAction: DELETE`` and ``onHostMaintenance: TERMINATE``, and ``maxRunDuration`` (a compute
  ``Duration``, seconds as an int64 string) when the pool's ``config.maxRunDuration`` ("The maximum duration for
  the nodes to exist", container v1 ``NodeConfig``) is set; ``config.spot`` → ``SPOT``; else ``STANDARD``.
  ``properties.reservationAffinity`` copies the pool's ``config.reservationAffinity``.
- A VM's end of life is its template's ``scheduling.maxRunDuration`` counted from its creation ("the instance
  will be terminated" at the end of it, ``Scheduling.maxRunDuration``), unless a resize request gave it one.
- Resize requests are for "the flex-start and reservation-bound provisioning models" (Google, "About resize
  requests in a MIG"): :func:`takes_resize_requests` is true for a template of model ``FLEX_START`` or
  ``RESERVATION_BOUND`` or one that consumes a specific reservation.

Simplified (the fake's own, not verified): the template carries only the fields above plus ``guestAccelerators``
(from ``config.accelerators``) and two metadata items (``cluster-name``, ``cluster-location``); no disks,
networks, service accounts or labels. ``STANDARD`` templates get ``onHostMaintenance: TERMINATE`` on GPU/TPU
machines (which cannot live-migrate) and ``MIGRATE`` otherwise; ``SPOT`` ones ``automaticRestart: false`` and
``onHostMaintenance: TERMINATE``. GKE's ``ANY_RESERVATION_THEN_FAIL`` (which compute's enum lacks) becomes
``ANY_RESERVATION``. A ``config.maxRunDuration`` on a pool that is not flex-start is stored and shown by GKE but
not applied to the VMs (how GKE applies it to standard VMs is not documented). A GKE node pool never gets
``RESERVATION_BOUND`` here (container v1 has no field that asks for it).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gangscale.sim.gcp.state import Mig, NodePool
from gangscale.sim.gcp.wire import Links, compute_time

JSON = dict[str, Any]

FLEX_START = "FLEX_START"
RESERVATION_BOUND = "RESERVATION_BOUND"
SPOT = "SPOT"
STANDARD = "STANDARD"
SPECIFIC_RESERVATION = "SPECIFIC_RESERVATION"
#: The provisioning models whose MIGs take resize requests ("About resize requests in a MIG").
RESIZE_REQUEST_MODELS = frozenset({FLEX_START, RESERVATION_BOUND})
#: Compute's ``ReservationAffinity.consumeReservationType`` values (compute v1 discovery document).
_COMPUTE_RESERVATION_TYPES = frozenset({"ANY_RESERVATION", "NO_RESERVATION", SPECIFIC_RESERVATION, "UNSPECIFIED"})
#: A protobuf ``Duration`` in JSON: decimal seconds with up to 9 fractional digits and an ``s``.
_DURATION = re.compile(r"^(?P<seconds>[0-9]+)(?:\.(?P<frac>[0-9]{1,9}))?s$")


def duration_seconds(text: Any) -> float | None:
    """Seconds of a google-duration string (``"86400s"``, ``"3.5s"``); None when it is not one."""
    if not isinstance(text, str):
        return None
    match = _DURATION.match(text)
    if match is None:
        return None
    return int(match["seconds"]) + (int(match["frac"].ljust(9, "0")) / 1e9 if match["frac"] else 0.0)


def provisioning_model(pool: NodePool) -> str:
    if pool.config.get("flexStart"):
        return FLEX_START
    if pool.config.get("spot"):
        return SPOT
    return STANDARD


def max_run_seconds(pool: NodePool) -> float | None:
    """The template's ``scheduling.maxRunDuration`` in seconds (flex-start pools with ``config.maxRunDuration``)."""
    if provisioning_model(pool) != FLEX_START:
        return None
    return duration_seconds(pool.config.get("maxRunDuration"))


def scheduling(pool: NodePool) -> JSON:
    """``InstanceProperties.scheduling`` of the pool's VMs."""
    model = provisioning_model(pool)
    if model == FLEX_START:
        out: JSON = {"provisioningModel": FLEX_START, "instanceTerminationAction": "DELETE",
                     "onHostMaintenance": "TERMINATE"}
        seconds = max_run_seconds(pool)
        if seconds is not None:
            whole = int(seconds)
            out["maxRunDuration"] = {"seconds": str(whole)}
            nanos = round((seconds - whole) * 1e9)
            if nanos:
                out["maxRunDuration"]["nanos"] = nanos
        return out
    if model == SPOT:
        return {"provisioningModel": SPOT, "onHostMaintenance": "TERMINATE", "automaticRestart": False}
    accelerated = bool(pool.machine.gpus or pool.machine.tpu_chips or pool.config.get("accelerators"))
    return {"provisioningModel": STANDARD, "onHostMaintenance": "TERMINATE" if accelerated else "MIGRATE",
            "automaticRestart": True, "preemptible": False}


def reservation_affinity(pool: NodePool) -> JSON | None:
    """Compute's ``ReservationAffinity`` for the pool's ``config.reservationAffinity`` (None when not given)."""
    given = pool.config.get("reservationAffinity")
    if not isinstance(given, dict):
        return None
    kind = str(given.get("consumeReservationType") or "UNSPECIFIED")
    out: JSON = {"consumeReservationType": kind if kind in _COMPUTE_RESERVATION_TYPES else "ANY_RESERVATION"}
    if given.get("key"):
        out["key"] = str(given["key"])
    if given.get("values"):
        out["values"] = [str(v) for v in given["values"]]
    return out


def takes_resize_requests(pool: NodePool) -> bool:
    """Whether Compute Engine takes a resize request for a MIG of this pool ("About resize requests in a MIG": the
    flex-start and reservation-bound provisioning models, or VMs that consume a specific reservation)."""
    affinity = reservation_affinity(pool) or {}
    return provisioning_model(pool) in RESIZE_REQUEST_MODELS \
        or affinity.get("consumeReservationType") == SPECIFIC_RESERVATION


def resize_request_refusal(pool: NodePool, mig: Mig) -> str | None:
    """Why a resize request for ``mig`` is refused (the 400 message, the fake's own wording), or None."""
    if takes_resize_requests(pool):
        return None
    return ("Invalid value for field 'resource': resize requests are supported only for managed instance groups "
            "whose instance template uses the FLEX_START or RESERVATION_BOUND provisioning model or consumes a "
            f"specific reservation; the instance template of '{mig.name}' uses {provisioning_model(pool)}.")


def template_name(mig: Mig) -> str:
    return mig.template.rsplit("/", 1)[-1]


def instance_template(links: Links, mig: Mig, pool: NodePool) -> JSON:
    """The ``InstanceTemplate`` of ``mig`` (proto3 JSON: int64/uint64 as strings)."""
    name = template_name(mig)
    properties: JSON = {
        "machineType": pool.machine.name,
        "scheduling": scheduling(pool),
        "metadata": {"kind": "compute#metadata", "items": [{"key": "cluster-name", "value": pool.cluster},
                                                           {"key": "cluster-location", "value": pool.location}]},
    }
    affinity = reservation_affinity(pool)
    if affinity is not None:
        properties["reservationAffinity"] = affinity
    accelerators = [a for a in pool.config.get("accelerators") or [] if isinstance(a, dict)]
    if accelerators:
        properties["guestAccelerators"] = [{"acceleratorType": str(a.get("acceleratorType", "")),
                                            "acceleratorCount": int(a.get("acceleratorCount") or 0)}
                                           for a in accelerators]
    return {
        "kind": "compute#instanceTemplate",
        "id": str(int(hashlib.sha256(name.encode()).hexdigest()[:15], 16) | (1 << 60)),
        "creationTimestamp": compute_time(mig.created_at),
        "name": name,
        "properties": properties,
        "selfLink": links.template(name),
    }
