"""Names of what the ``gke`` provider makes, derived from the token, so that a repeated call finds its own
objects and a restarted provider recognises them (the container API takes no request id).

- A token's *claim* is the first 12 hex digits of its SHA-256: ``gs-<claim>`` stems every name.
- ``slice`` mode: unit ``i`` of ``n`` is the GKE node pool ``gs-<claim>-<i>`` (at most 40 characters, RFC 1035),
  labelled with the gangscale pool, the unit, the token and the slot ``<i>-of-<n>``; its nodes carry those
  labels (GKE copies a node pool's ``config.labels`` onto its nodes), so they are recognised by label.
- ``resize-request`` and ``resize`` modes: VM ``i`` is the instance ``gs-<claim>-<i>`` of the existing node
  pool's managed instance group; its Node (named after the VM) carries only that node pool's labels, so it is
  recognised by its name. A resize request is ``gs-<claim>`` with the token in its description.
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
SLOT_LABEL = "gangscale.io/slot"
_REQUEST_NAMESPACE = uuid.UUID("6f0c4a52-3c55-4b7e-9a2e-5a1d0b2f8c11")


def claim(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def unit_name(token: str, index: int) -> str:
    return f"{PREFIX}{claim(token)}-{index}"


def resize_request_name(token: str) -> str:
    return f"{PREFIX}{claim(token)}"


def slot(index: int, count: int) -> str:
    return f"{index}-of-{count}"


def parse_slot(value: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"([0-9]+)-of-([0-9]+)", value)
    return (int(match.group(1)), int(match.group(2))) if match else None


def claim_of(name: str) -> str | None:
    """The claim in one of our unit names; None for any other name."""
    match = UNIT_NAME.match(name)
    return match.group(1) if match else None


def request_id(token: str, call: str) -> str:
    """A stable Compute ``requestId`` for one call made on behalf of ``token``."""
    return str(uuid.uuid5(_REQUEST_NAMESPACE, f"{token}/{call}"))
