"""The conditions gangscale writes on ProvisioningRequests: types, reasons and messages in one place.

Types and reasons are upstream's (provreq-spec §1.5, §2.2) so that Kueue and dashboards understand them;
gangscale adds two reasons of its own: ``ScaleUpInProgress`` (Provisioned=False while the nodes come up —
upstream has no such state because it reports success when the cloud call returns) and
``BookedNodeRemoved`` (CapacityRevoked, which upstream defines but never sets). Messages say what was
decided and why.

``lastTransitionTime`` changes only when a condition's status changes (the metav1 convention, unlike the
cluster-autoscaler); ``observedGeneration`` is always the PR's generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
#: The condition types gangscale owns (server-side apply field manager ``gangscale``).
OWNED_TYPES = (ACCEPTED, PROVISIONED, FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)
#: Any of these True ends the PR's life for gangscale: it writes nothing more and books nothing.
TERMINAL_TYPES = (FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)

# Reasons.
R_ACCEPTED = "Accepted"
R_PROVISIONED = "CapacityIsProvisioned"
R_FOUND = "CapacityIsFound"
R_NOT_FOUND = "CapacityIsNotFound"
R_IN_PROGRESS = "ScaleUpInProgress"
R_FAILED_TO_CREATE_PODS = "FailedToCreatePods"
R_EXPIRED = "Expired"
R_BOOKING_TIME_EXPIRED = "CapacityReservationTimeExpired"
R_BOOKING_CONSUMED = "CapacityBookingConsumed"
R_NODE_REMOVED = "BookedNodeRemoved"
R_NODE_NOT_READY = "BookedNodeNotReady"
#: A booked node the cloud is taking back (a spot VM's preemption notice: the kubelet's graceful shutdown, or a
#: termination handler's taint), before it is gone.
R_NODE_RECLAIMED = "BookedNodeReclaimed"
#: After a restart, a booking made on free capacity (no scale-up of its own) no longer fits on what is free.
R_BOOKING_LOST = "BookedCapacityLost"
#: gangscale's own: a step of gangscale raised on this request (:mod:`gangscale.controller.logic.isolation`).
R_RECONCILE_ERROR = "ReconcileError"

M_ACCEPTED = "ProvisioningRequest is accepted by gangscale"
M_BOOKING_TIME_EXPIRED = "Capacity reservation time is expired"
M_BOOKING_RECLAIMED = ("Capacity reservation time is expired: the booked nodes reached the end of their run duration "
                       "and the cloud deletes them")
M_BOOKING_CONSUMED = "Capacity booking consumed: all pods scheduled"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: str = ""
    observed_generation: int = 0

    @property
    def true(self) -> bool:
        return self.status == "True"

    def same(self, other: Condition | None) -> bool:
        return other is not None and (self.status, self.reason, self.message, self.observed_generation) == (
            other.status, other.reason, other.message, other.observed_generation)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "status": self.status, "reason": self.reason,
                               "message": self.message, "lastTransitionTime": self.last_transition}
        if self.observed_generation:
            out["observedGeneration"] = self.observed_generation
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Condition:
        return cls(str(raw.get("type", "")), str(raw.get("status", "")), str(raw.get("reason", "")),
                   str(raw.get("message", "")), str(raw.get("lastTransitionTime", "")),
                   int(raw.get("observedGeneration") or 0))


def with_condition(conditions: dict[str, Condition], new: Condition, now: str) -> bool:
    """Set ``new`` in ``conditions`` (keyed by type); the transition time moves only when the status does.

    Returns whether anything changed.
    """
    old = conditions.get(new.type)
    if new.same(old):
        return False
    ltt = old.last_transition if old is not None and old.status == new.status and old.last_transition else now
    conditions[new.type] = Condition(new.type, new.status, new.reason, _clip(new.message), ltt,
                                     new.observed_generation)
    return True


#: The CRD allows 32768 characters; keep messages readable well below it.
MAX_MESSAGE = 4000


def _clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
