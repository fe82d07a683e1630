"""Structural pruning of custom resources and the ``fieldValidation`` unknown-field report.

Reproduces apiextensions-apiserver's decode-time handling of a CR body:

- ``pruning.PruneWithOptions``: fields not declared by ``properties``/``additionalProperties`` are dropped,
  except under ``x-kubernetes-preserve-unknown-fields: true`` (whose declared properties are still pruned
  recursively); the root and ``x-kubernetes-embedded-resource`` objects keep ``apiVersion``, ``kind`` and
  ``metadata``; an array or object with no schema for its items loses them entirely;
- ``schemaobjectmeta.Coerce``: unknown fields under the root ``metadata`` are dropped;
- ``PruneNonNullableNullsWithoutDefaults``: ``null`` for a non-nullable property without a default is
  removed (so a required field sent as ``null`` is reported as ``Required value``, not a type error);
- the unknown-field paths in upstream's notation (``spec.podSets[0].foo``, map keys as ``.key``), which
  ``fieldValidation=Warn`` returns as ``unknown field "<path>"`` warnings and ``Strict`` as a 400:
  ``ProvisioningRequest in version "v1" cannot be handled as a ProvisioningRequest: strict decoding
  error: unknown field "spec.foo", unknown field "spec.bar"``.

Not reproduced: ``default`` values (no defaulting), metadata coercion of embedded resources, and
duplicate-JSON-key detection (``duplicate field "x"``; our decoder has already merged duplicates).
Go reports unknown fields in map order; we report them in document order.
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver.errors import StatusError, bad_request
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.metavalidation import OBJECT_META_FIELDS

JSON = dict[str, Any]
Schema = dict[str, Any]

_RESOURCE_FIELDS = ("apiVersion", "kind", "metadata")


def prune(obj: JSON, schema: Schema) -> JSON:
    """A pruned deep copy of ``obj`` (the input is left untouched)."""
    out = json_copy(obj)
    _prune(out, schema, "", [], root=True)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in [k for k in meta if k not in OBJECT_META_FIELDS]:
            del meta[key]
    _drop_nulls(out, schema)
    return out


def unknown_fields(obj: JSON, schema: Schema) -> list[str]:
    """Paths of the fields pruning would drop, metadata included (``metadata.foo``)."""
    found: list[str] = []
    _prune(json_copy(obj), schema, "", found, root=True)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        found += [f"metadata.{k}" for k in meta if k not in OBJECT_META_FIELDS]
    return found


def unknown_field_messages(paths: list[str]) -> list[str]:
    """The ``Warning`` texts of ``fieldValidation=Warn``."""
    return [f'unknown field "{p}"' for p in paths]


def unknown_fields_error(kind: str, version: str, paths: list[str]) -> StatusError:
    """The 400 of ``fieldValidation=Strict``."""
    joined = ", ".join(unknown_field_messages(paths))
    return bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: '
                       f"strict decoding error: {joined}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _prune(x: Any, s: Schema | None, path: str, found: list[str], *, root: bool = False) -> None:
    keep_unknown = s is not None and (s.get("x-kubernetes-preserve-unknown-fields")
                                      or s.get("additionalProperties") is True)
    if s is not None and keep_unknown:
        _descend_known(x, s, path, found, root=root)
        return
    if isinstance(x, dict):
        embedded = root or bool(s and s.get("x-kubernetes-embedded-resource"))
        props: dict[str, Schema] = (s or {}).get("properties") or {}
        extra = (s or {}).get("additionalProperties")
        for key in list(x):
            if embedded and key in _RESOURCE_FIELDS:
                continue
            if key in props:
                _prune(x[key], props[key], _join(path, key), found)
            elif isinstance(extra, dict):
                _prune(x[key], extra, _join(path, key), found)
            else:
                found.append(_join(path, key))
                del x[key]
    elif isinstance(x, list):
        items = (s or {}).get("items")
        for i, item in enumerate(x):
            _prune(item, items if isinstance(items, dict) else None, f"{path}[{i}]", found)


def _descend_known(x: Any, s: Schema, path: str, found: list[str], *, root: bool) -> None:
    """Under preserve-unknown-fields only declared fields are pruned further."""
    if isinstance(x, dict):
        embedded = root or bool(s.get("x-kubernetes-embedded-resource"))
        props: dict[str, Schema] = s.get("properties") or {}
        extra = s.get("additionalProperties")
        for key, value in x.items():
            if embedded and key in _RESOURCE_FIELDS:
                continue
            if key in props:
                _prune(value, props[key], _join(path, key), found)
            elif isinstance(extra, dict):
                _prune(value, extra, _join(path, key), found)
    elif isinstance(x, list) and isinstance(s.get("items"), dict):
        for i, item in enumerate(x):
            _descend_known(item, s["items"], f"{path}[{i}]", found, root=False)


def _drop_nulls(x: Any, s: Schema | None) -> None:
    if not isinstance(s, dict):
        return
    if isinstance(x, dict):
        props: dict[str, Schema] = s.get("properties") or {}
        extra = s.get("additionalProperties")
        for key in list(x):
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is None:
                continue
            if x[key] is None and not sub.get("nullable") and "default" not in sub:
                del x[key]
            else:
                _drop_nulls(x[key], sub)
    elif isinstance(x, list):
        for item in x:
            _drop_nulls(item, s.get("items"))
