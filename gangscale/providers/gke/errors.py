"""Google API failures as the provider's error classes (``cloud-providers.md`` §1.4 and §4.2).

Two kinds of failure reach the provider: an HTTP error answering a call (:func:`from_http`), and a long-running
operation, resize request or VM that ends in an error (:func:`from_text`, :func:`from_compute_errors`). GKE
reports a stockout only in text ("[GCE_STOCKOUT]", "does not have enough resources available"); its numeric
``error.code`` is not documented for it, so classification goes by the markers in the text first.

- STOCKOUT: ``GCE_STOCKOUT``; ``ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]``, ``RESOURCE_POOL_EXHAUSTED``,
  ``INSUFFICIENT_CAPACITY``; "does not have enough resources available"; an operation not done by the deadline.
- QUOTA: HTTP 403 "Insufficient regional quota"/"quota"; ``GCE_QUOTA_EXCEEDED``; a compute code containing
  ``QUOTA``.
- TRANSIENT: HTTP 429 ("Too many operations"), 400 ``FAILED_PRECONDITION`` "… Please wait and try again",
  500/502/503/504, connection errors.
- PERMANENT: everything else: 400 ``INVALID_ARGUMENT``, 403 ``PERMISSION_DENIED``, 401 after a fresh token, 404 of
  the cluster, pool or MIG, ``PERMISSIONS_ERROR``, ``IP_SPACE_EXHAUSTED``, ``CONDITION_NOT_MET``.

A 409 on create and a 404 on delete are not errors: the caller adopts the object or counts it as gone.

Current fields come first, the deprecated ones only as a fallback (the container v1 discovery document marks
``Operation.statusMessage``, ``NodePool.statusMessage`` and ``StatusCondition.code`` deprecated;
``StatusCondition.canonicalCode`` replaces the last): an operation's ``error`` before its ``statusMessage``
(:func:`gangscale.providers.gke.operations.operation_error`), a node pool's ``conditions[].message`` and
``canonicalCode`` before ``conditions[].code`` and ``statusMessage`` (:func:`from_pool`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gangscale.providers.base import ErrorClass, ProviderError
from gangscale.providers.gke.client import GcpError

STOCKOUT_MARKERS = ("GCE_STOCKOUT", "ZONE_RESOURCE_POOL_EXHAUSTED", "RESOURCE_POOL_EXHAUSTED", "INSUFFICIENT_CAPACITY",
                    "does not have enough resources available")
QUOTA_MARKERS = ("GCE_QUOTA_EXCEEDED", "QUOTA_EXCEEDED", "Insufficient regional quota", "Insufficient quota",
                 "Quota '")
#: A busy cluster (another operation runs on it): retried, not failed.
BUSY_MARKER = "Please wait and try again"
TRANSIENT_HTTP = frozenset({0, 429, 500, 502, 503, 504})


def from_http(exc: GcpError, pool: str, *, rolled_back: bool = True) -> ProviderError:
    """An HTTP error of a call. ``rolled_back``: whether nothing of the obtain is left (the caller says)."""
    text = f"{exc.status} {exc.reason} {exc.message}"
    if exc.http_status in TRANSIENT_HTTP or (exc.http_status in (400, 412) and BUSY_MARKER in exc.message):
        return ProviderError(ErrorClass.TRANSIENT, _code(exc), exc.message, pool=pool, retry_after=exc.retry_after,
                             rolled_back=rolled_back)
    if exc.http_status == 403 and any(marker.lower() in text.lower() for marker in ("quota",)):
        return ProviderError(ErrorClass.QUOTA, "QUOTA_EXCEEDED", exc.message, pool=pool, rolled_back=rolled_back)
    return ProviderError(ErrorClass.PERMANENT, _code(exc), exc.message, pool=pool, rolled_back=rolled_back)


def from_text(message: str, pool: str, *, rolled_back: bool = True) -> ProviderError:
    """A failed operation or resize request, by what its message says."""
    if any(marker in message for marker in STOCKOUT_MARKERS):
        return ProviderError(ErrorClass.STOCKOUT, "GCE_STOCKOUT", message, pool=pool, rolled_back=rolled_back)
    if any(marker in message for marker in QUOTA_MARKERS):
        return ProviderError(ErrorClass.QUOTA, "GCE_QUOTA_EXCEEDED", message, pool=pool, rolled_back=rolled_back)
    if BUSY_MARKER in message:
        return ProviderError(ErrorClass.TRANSIENT, "FAILED_PRECONDITION", message, pool=pool, rolled_back=rolled_back)
    return ProviderError(ErrorClass.PERMANENT, "OPERATION_FAILED", message, pool=pool, rolled_back=rolled_back)


def from_compute_errors(errors: Iterable[Mapping[str, Any]], pool: str, *, rolled_back: bool = True) -> ProviderError:
    """Compute's ``errors[] {code, message}`` (an operation, a resize request, a VM's last attempt)."""
    items = [(str(e.get("code", "")), str(e.get("message", ""))) for e in errors]
    codes = [code for code, _ in items]
    message = "; ".join(f"{code}: {text}" if code else text for code, text in items) or "unknown error"
    stocked_out = [code for code in codes if code and any(marker in code for marker in STOCKOUT_MARKERS)]
    if stocked_out:
        return ProviderError(ErrorClass.STOCKOUT, stocked_out[0], message, pool=pool, rolled_back=rolled_back)
    if any("QUOTA" in code for code in codes):
        return ProviderError(ErrorClass.QUOTA, next(c for c in codes if "QUOTA" in c), message, pool=pool,
                             rolled_back=rolled_back)
    return from_text(message, pool, rolled_back=rolled_back)


def _code(exc: GcpError) -> str:
    return exc.status if exc.http_status else "UNAVAILABLE"


def from_pool(pool: Mapping[str, Any], name: str, *, rolled_back: bool = True) -> ProviderError:
    """A node pool that is not RUNNING once its create is done, by its conditions: a quota marker in a message (or
    the deprecated code ``GCE_QUOTA_EXCEEDED``) is quota; a stockout marker, ``canonicalCode: RESOURCE_EXHAUSTED``
    or the deprecated code ``GCE_STOCKOUT`` is a stockout; anything else goes by the text."""
    conditions = [c for c in pool.get("conditions") or [] if isinstance(c, Mapping)]
    messages = [str(c.get("message") or "") for c in conditions]
    canonical = {str(c.get("canonicalCode") or "") for c in conditions}
    legacy = {str(c.get("code") or "") for c in conditions}
    text = "; ".join(f"[{c.get('canonicalCode') or c.get('code') or 'UNKNOWN'}]: {m}"
                     for c, m in zip(conditions, messages, strict=True))
    text = text or str(pool.get("statusMessage") or f"node pool {pool.get('name')} is {pool.get('status', '?')}")
    if any(marker in m for m in messages for marker in QUOTA_MARKERS) or "GCE_QUOTA_EXCEEDED" in legacy:
        return ProviderError(ErrorClass.QUOTA, "GCE_QUOTA_EXCEEDED", text, pool=name, rolled_back=rolled_back)
    if any(marker in m for m in messages for marker in STOCKOUT_MARKERS) or "RESOURCE_EXHAUSTED" in canonical \
            or "GCE_STOCKOUT" in legacy:
        return ProviderError(ErrorClass.STOCKOUT, "GCE_STOCKOUT", text, pool=name, rolled_back=rolled_back)
    return from_text(text, name, rolled_back=rolled_back)
