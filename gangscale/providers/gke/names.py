"""Names of what the ``gke`` provider makes, derived from the token, so that a repeated call finds its own
objects and a restarted provider recognises them (the container API takes no request id).

- A token's *claim* is the first 12 hex digits of its SHA-256: ``gs-<claim>`` stems every name.
- ``slice`` mode: unit ``i`` of ``n`` is the GKE node pool ``gs-<claim>-<i>`` (at most 40 characters, RFC 1035),
  labelled with the gangscale pool, the unit, the token and the slot ``<i>-of-<n>``; its nodes carry those
  labels (GKE copies a node pool's ``config.labels`` onto its nodes), so they are recognised by label.
- ``resize`` mode: VM ``i`` is the instance ``gs-<claim>-<i>`` of the existing node pool's managed instance group;
  its Node (named after the VM) carries only that node pool's labels, so it is recognised by its name.
- ``flex-start`` mode: the MIG resize request ``gs-<claim>`` (the token in its description); Compute Engine names
  its VMs and marks each with the request's name (instance metadata ``google-compute-mig-resize-request``), which
  GKE copies onto the Node as the label ``autoscaling.gke.io/provisioning-request``.
- ``queued-provisioning`` mode: the ProvisioningRequest and PodTemplate ``gs-<claim>`` in gangscale's namespace;
  GKE names the resize request it makes for them :func:`gke_resize_request_name` and its VMs carry that name as
  above.
- Compute calls carry a ``requestId`` derived from the token and the call (a UUID5), so a repeated call is one
  call to Compute Engine.
"""

from __future__ import annotations

import hashlib
import re
import uuid

PREFIX = "gs-"
#: A name of ours: ``gs-<12 hex>-<index>``.
UNIT_NAME = re.compile(r"^gs-([0-9a-f]{12})-([0-9]{1,4})$")
#: A resize request, ProvisioningRequest or PodTemplate of ours: ``gs-<12 hex>``.
REQUEST_NAME = re.compile(r"^gs-([0-9a-f]{12})$")
#: GKE's resize request for a ProvisioningRequest of ours: ``gke-<namespace>-gs-<12 hex>-<16 hex>``.
GKE_REQUEST_NAME = re.compile(r"-(gs-[0-9a-f]{12})-[0-9a-f]{16}$")
SLOT_LABEL = "gangscale.io/slot"
_REQUEST_NAMESPACE = uuid.UUID("6f0c4a52-3c55-4b7e-9a2e-5a1d0b2f8c11")


def claim(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def unit_name(token: str, index: int) -> str:
    return f"{PREFIX}{claim(token)}-{index}"


def resize_request_name(token: str) -> str:
    return f"{PREFIX}{claim(token)}"


def claim_of_request(name: str) -> str | None:
    """The claim in one of our resize request, ProvisioningRequest or PodTemplate names ``gs-<claim>``."""
    match = REQUEST_NAME.match(name)
    return match.group(1) if match else None


def gke_resize_request_name(namespace: str, name: str) -> str:
    """The name GKE gives the MIG resize request it makes for the ProvisioningRequest ``namespace/name`` of class
    ``queued-provisioning.gke.io``, which its nodes carry in the label ``autoscaling.gke.io/provisioning-request``:
    ``gke-`` + the namespace and the name, each cut to 20 characters, + 16 hex digits of the SHA-256 of
    ``namespace/name`` (GKE's published autoscaler, ``resizerequestclient.ResizeRequestName``)."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:16]
    return f"gke-{namespace[:20]}-{name[:20]}-{digest}"


def claim_of_gke_request(namespace: str, request: str) -> str | None:
    """The claim of our ProvisioningRequest ``gs-<claim>`` in ``namespace`` whose resize request GKE named
    ``request``; None for any other request."""
    match = GKE_REQUEST_NAME.search(request)
    if match is None or gke_resize_request_name(namespace, match.group(1)) != request:
        return None
    return claim_of_request(match.group(1))


def slot(index: int, count: int) -> str:
    return f"{index}-of-{count}"


def parse_slot(value: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"([0-9]+)-of-([0-9]+)", value)
    return (int(match.group(1)), int(match.group(2))) if match else None


def claim_of(name: str) -> str | None:
    """The claim in one of our unit names; None for any other name."""
    match = UNIT_NAME.match(name)
    return match.group(1) if match else None


def index_of(name: str) -> int:
    """The index in one of our unit names (``gs-<claim>-<i>``); -1 for any other name."""
    match = UNIT_NAME.match(name)
    return int(match.group(2)) if match else -1


def request_id(token: str, call: str) -> str:
    """A stable Compute ``requestId`` for one call made on behalf of ``token``."""
    return str(uuid.uuid5(_REQUEST_NAMESPACE, f"{token}/{call}"))
