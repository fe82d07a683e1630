"""The three non-apply PATCH bodies, applied as kube-apiserver applies them.

``merge_patch`` (``application/merge-patch+json``, see ``mergepatch``) and ``strategic_merge_patch``
(``application/strategic-merge-patch+json``, see ``strategicpatch``) are re-exported from their modules;
this one holds ``application/json-patch+json``.

Reproduces evanphx/json-patch v4 ``DecodePatch``/``Apply`` (RFC 6902, ``-`` index, ``~0``/``~1`` escapes,
at most 10000 operations (413), ``test`` of a missing member against null passes, ``replace`` of a missing
object member adds it). An undecodable
document is a 400 with Go's decoding message; a patch that fails to apply is the 422
``NewGenericServerResponse`` builds, whose message is the fixed "the server rejected our request due to
an error in our request" (the underlying error is chained as ``__cause__`` for debugging; the real
server drops it too).

Not reproduced: ``test`` compares numbers as JSON values (1 equals 1.0); v4's negative array indexes and
its leniency for paths without a leading ``/`` are rejected instead.
"""

from __future__ import annotations

import re
from typing import Any

from gangscale.sim.apiserver.errors import StatusError, cannot_unmarshal, generic_invalid
from gangscale.sim.apiserver.fieldsets import json_equal
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.mergepatch import merge_patch
from gangscale.sim.apiserver.strategicpatch import strategic_merge_patch

__all__ = ["MAX_JSON_PATCH_OPERATIONS", "json_patch", "merge_patch", "strategic_merge_patch"]

JSON = dict[str, Any]
MAX_JSON_PATCH_OPERATIONS = 10000


class _PatchFailed(Exception):
    pass


def json_patch(target: Any, ops: Any) -> Any:
    """An RFC 6902 patch; never mutates its arguments."""
    if ops is None:
        ops = []
    if not isinstance(ops, list):
        raise cannot_unmarshal(ops, "jsonpatch.Patch")
    for op in ops:
        if op is not None and not isinstance(op, dict):
            raise cannot_unmarshal(op, "jsonpatch.Operation")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise StatusError(413, "RequestEntityTooLarge", "Request entity too large: The allowed maximum "
                          f"operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}")
    doc = json_copy(target)
    try:
        for op in ops:
            doc = _apply_op(doc, op or {})
    except _PatchFailed as exc:
        raise generic_invalid() from exc
    return doc


def _pointer(op: JSON, field: str) -> list[str]:
    raw = op.get(field)
    if not isinstance(raw, str):
        raise _PatchFailed(f"operation missing {field} field")
    if raw == "":
        return []
    if not raw.startswith("/"):
        raise _PatchFailed(f"invalid JSON pointer {raw!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in raw[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and re.fullmatch(r"\d+", token) and int(token) < len(node):
            node = node[int(token)]
        else:
            raise _PatchFailed("doc is missing path")
    if not isinstance(node, dict | list):
        raise _PatchFailed("doc is missing path")
    return node


def _index(node: list[Any], token: str, *, allow_end: bool) -> int:
    limit = len(node) + (1 if allow_end else 0)
    if not re.fullmatch(r"\d+", token) or int(token) >= limit:
        raise _PatchFailed(f"Unable to access invalid index: {token}")
    return int(token)


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    node = _parent(doc, tokens)
    if isinstance(node, dict):
        if tokens[-1] not in node:
            raise _PatchFailed("doc is missing key")
        return node[tokens[-1]]
    return node[_index(node, tokens[-1], allow_end=False)]


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    node = _parent(doc, tokens)
    if isinstance(node, dict):
        node[tokens[-1]] = value
    elif tokens[-1] == "-":
        node.append(value)
    else:
        node.insert(_index(node, tokens[-1], allow_end=True), value)
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _PatchFailed("cannot remove the document root")
    node = _parent(doc, tokens)
    if isinstance(node, dict):
        if tokens[-1] not in node:
            raise _PatchFailed(f"Unable to remove nonexistent key: {tokens[-1]}")
        del node[tokens[-1]]
    else:
        del node[_index(node, tokens[-1], allow_end=False)]
    return doc


def _test(doc: Any, tokens: list[str], op: JSON) -> None:
    node = _parent(doc, tokens) if tokens else None
    missing = isinstance(node, dict) and tokens[-1] not in node
    # v4 passes a test for null (or no value) against a member that is absent or null.
    actual = None if missing else _get(doc, tokens)
    if actual is None and op.get("value") is None:
        return
    if not json_equal(actual, op.get("value")):
        raise _PatchFailed("testing value failed")


def _apply_op(doc: Any, op: JSON) -> Any:
    kind = op.get("op") if isinstance(op.get("op"), str) else "unknown"
    if kind == "add":
        return _add(doc, _pointer(op, "path"), json_copy(op.get("value")))
    if kind == "remove":
        return _remove(doc, _pointer(op, "path"))
    if kind == "replace":
        tokens = _pointer(op, "path")
        if not tokens:
            return json_copy(op.get("value"))
        node = _parent(doc, tokens)
        if isinstance(node, list):
            _index(node, tokens[-1], allow_end=False)  # an array element must exist ...
        # ... an object member need not: v4's partialDoc.get reports no error for a missing key, so replace
        # then adds it (the Ray autoscaler relies on this for workerGroupSpecs[i].scaleStrategy).
        node[tokens[-1] if isinstance(node, dict) else _index(node, tokens[-1], allow_end=False)] = (
            json_copy(op.get("value")))
        return doc
    if kind in ("move", "copy"):
        source = _pointer(op, "from")
        value = json_copy(_get(doc, source))
        if kind == "move":
            doc = _remove(doc, source)
        return _add(doc, _pointer(op, "path"), value)
    if kind == "test":
        _test(doc, _pointer(op, "path"), op)
        return doc
    raise _PatchFailed(f"Unexpected kind: {kind}")
