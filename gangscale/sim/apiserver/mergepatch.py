"""``application/merge-patch+json`` bodies, applied as kube-apiserver applies them.

Reproduces evanphx/json-patch v4 ``MergePatch``: RFC 7386 plus its quirks — nulls are also pruned from
objects nested in newly added values and arrays, a null or scalar patch fails with ``Invalid JSON Patch``
(the server answers 500), an array patch replaces the document, and replacing an object with a
non-object keeps that value's nulls.

Not reproduced: no known differences.
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.jsoncopy import json_copy

JSON = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """A JSON merge patch; never mutates its arguments."""
    if isinstance(patch, list):
        return [prune_nulls(v) for v in json_copy(patch)]
    if not isinstance(patch, dict):
        raise StatusError(500, "", "Invalid JSON Patch")
    if not isinstance(target, dict):
        return prune_nulls(json_copy(patch))
    doc = json_copy(target)
    _merge_docs(doc, json_copy(patch))
    return doc


def _merge_docs(doc: JSON, patch: JSON) -> None:
    for key, value in patch.items():
        if value is None:
            doc.pop(key, None)
        elif not isinstance(doc.get(key), dict):
            doc[key] = prune_nulls(value)
        elif isinstance(value, dict):
            _merge_docs(doc[key], value)
        else:
            doc[key] = value  # replacing an object with a non-object keeps that value's nulls


def prune_nulls(value: Any) -> Any:
    """Drop null members of objects at any depth, as v4 does to a value it adds."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value
