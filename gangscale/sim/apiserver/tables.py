"""Server-side printing: ``meta.k8s.io/v1`` Table responses, which ``kubectl get`` asks for.

Built-in kinds print with the real printers (:mod:`gangscale.sim.apiserver.printers`: Pod, Node, PodTemplate,
Event, Namespace, Lease, Secret, CRD; events.k8s.io events print like core ones, from the same storage).
Custom resources print as the apiextensions table convertor does: ``Name``, then each
``additionalPrinterColumns`` entry (``priority``, ``format`` and ``description`` kept; a column without a
description gets upstream's ``Custom resource definition column (in JSONPath format): <path>``), or
``Age`` when the CRD declares none. A column's ``jsonPath`` is evaluated with the subset of JSONPath in
:mod:`gangscale.sim.apiserver.jsonpath` (filters included) and the first value found is printed by type:
``string`` as JSONPath prints it (maps and lists as compact JSON), ``integer``/``number``/``boolean`` as
JSON values (a mismatched type prints as ``<none>``), ``date`` as an age (``<invalid>`` if unparsable).

``includeObject`` is honoured: ``Metadata`` (the default) puts a ``PartialObjectMetadata`` in each row,
``Object`` the full object in the requested version (``kubectl get --sort-by`` asks for it), ``None`` no
object; another value is a 400. Other kinds built in here (batch/v1 Job) print ``Name`` and ``Age``, where
a real server has their own printers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gangscale.sim.apiserver import jsonpath
from gangscale.sim.apiserver.conversion import to_storage
from gangscale.sim.apiserver.errors import bad_request
from gangscale.sim.apiserver.goformat import go_float, go_json, go_quote
from gangscale.sim.apiserver.printers import AGE, NAME, PRINTERS, Column, Printer, parse_time, since
from gangscale.sim.apiserver.resources import ResourceType

JSON = dict[str, Any]
INCLUDE_OBJECT = ("Metadata", "Object", "None")


def wants_table(accept: str) -> bool:
    return any("as=Table" in part for part in accept.split(","))


def _crd_column(col: Mapping[str, Any]) -> Column:
    path = str(col.get("jsonPath", ""))
    return Column(str(col.get("name", "")), str(col.get("type", "string")), int(col.get("priority") or 0),
                  str(col.get("format") or ""),
                  str(col.get("description") or f"Custom resource definition column (in JSONPath format): {path}"))


def _printed(value: Any) -> str | None:
    """A value as JSONPath prints it: strings as they are, maps and lists as compact JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict | list):
        return go_json(value)
    return str(value)


def _typed(kind: str, value: Any, now: datetime) -> Any:
    """``cellForJSONValue``: the value when it has the column's type, else nothing."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "integer" and number:
        return int(value)
    if kind == "number" and number:
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        if value in ("", "null"):
            return "<unknown>"
        return since(value, now) if parse_time(value) is not None else "<invalid>"
    return None


def crd_cell(col: Mapping[str, Any], obj: JSON, now: datetime) -> Any:
    found = jsonpath.find(obj, str(col.get("jsonPath", "")))
    if not found:
        return None
    kind = col.get("type", "string")
    return _printed(found[0]) if kind == "string" else _typed(str(kind), found[0], now)


def _crd_printer(crd_columns: list[JSON]) -> Printer:
    if not crd_columns:  # the apiextensions server serves an Age column when a CRD declares none
        crd_columns = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                        "description": AGE.description}]
    columns = (NAME, *(_crd_column(c) for c in crd_columns))
    return Printer(columns, lambda o, now: [crd_cell(c, o, now) for c in crd_columns])


def _printer(rt: ResourceType, crd_columns: list[JSON]) -> Printer:
    if rt.custom:
        return _crd_printer(crd_columns)
    return PRINTERS.get(rt.kind) or Printer((NAME, AGE), lambda o, now: [since(
        (o.get("metadata") or {}).get("creationTimestamp"), now)])


def _row_object(obj: JSON, include: str) -> JSON | None:
    if include == "Object":
        return obj
    if include == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def check_include_object(include: str) -> str:
    """The ``includeObject`` value to use; an unknown one is the real 400."""
    if include and include not in INCLUDE_OBJECT:
        raise bad_request(f"unrecognized includeObject value: {go_quote(include)}")
    return include or "Metadata"


def to_table(rt: ResourceType, body: JSON, now: datetime, crd_columns: list[JSON] | None = None,
             include_object: str = "") -> JSON:
    include = check_include_object(include_object)
    printer = _printer(rt, crd_columns or [])
    items = body.get("items") if body.get("kind", "").endswith("List") and "items" in body else [body]
    rows = []
    for o in items or []:
        shown = to_storage(rt, o) if rt.kind == "Event" and not rt.custom else o
        shown.setdefault("metadata", {})
        cells = printer.cells(shown, now)
        if not printer.name_last:
            cells = [shown["metadata"].get("name", ""), *cells]
        rows.append({"cells": cells, "object": _row_object(o, include)})
    source_meta = body.get("metadata") or {}
    keep = ("resourceVersion", "continue", "remainingItemCount")
    meta_out = {k: v for k, v in source_meta.items() if k in keep}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta_out,
            "columnDefinitions": [c.definition() for c in printer.columns], "rows": rows}
