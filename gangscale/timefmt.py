"""Kubernetes' time on the wire (``metav1.Time``), as pure functions: formatting a time reads no clock."""

from __future__ import annotations

from datetime import UTC, datetime


def to_datetime(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def rfc3339(timestamp: float) -> str:
    """Kubernetes' ``metav1.Time`` wire form (whole seconds, UTC)."""
    return to_datetime(timestamp).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
