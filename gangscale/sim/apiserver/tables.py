"""Server-side printing: ``meta.k8s.io/v1`` Table responses, which ``kubectl get`` asks for.

Columns follow the real printers for the kinds served (Pod, Node, Namespace, Event, Lease, CRD);
other kinds, including custom resources, get ``Name`` and ``Age`` plus any
``additionalPrinterColumns`` their CRD declares (simple dotted JSON paths only; filter expressions
print as empty cells). ``includeObject`` is honoured only as its default, ``Metadata``: each row
carries a ``PartialObjectMetadata``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gangscale.sim.apiserver.resources import ResourceType

JSON = dict[str, Any]


def wants_table(accept: str) -> bool:
    return any("as=Table" in part for part in accept.split(","))


def _age(ts: str | None, now: datetime) -> str:
    if not ts:
        return "<unknown>"
    try:
        then = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<invalid>"
    secs = max(0, int((now - then).total_seconds()))
    if secs < 120:
        return f"{secs}s"
    if secs < 3600 * 3:
        return f"{secs // 60}m"
    if secs < 86400 * 2:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def _col(name: str, fmt: str = "", type_: str = "string") -> JSON:
    return {"name": name, "type": type_, "format": fmt, "description": name, "priority": 0}


def _pod_cells(o: JSON) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = sum(1 for c in status.get("containerStatuses") or [] if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or [])
    phase = "Terminating" if o["metadata"].get("deletionTimestamp") else status.get("phase", "Pending")
    return [f"{ready}/{total}", phase, restarts]


def _node_cells(o: JSON) -> list[Any]:
    conds = (o.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conds if c.get("type") == "Ready"), None)
    state = "Ready" if ready == "True" else ("NotReady" if ready == "False" else "Unknown")
    if (o.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = o["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    version = ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [state, ",".join(roles) or "<none>", version]


def _jsonpath(o: Any, path: str) -> Any:
    cur = o
    for part in path.strip().lstrip(".").split("."):
        if "[" in part or not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


AGE = "Age"


def _columns(rt: ResourceType, crd_columns: list[JSON]) -> list[JSON]:
    """The columns after Name; ``Age`` marks where the object's age goes."""
    kind = "" if rt.custom else rt.kind
    if kind == "Pod":
        return [_col("Ready"), _col("Status"), _col("Restarts", type_="integer"), _col(AGE)]
    if kind == "Node":
        return [_col("Status"), _col("Roles"), _col(AGE), _col("Version")]
    if kind == "Namespace":
        return [_col("Status"), _col(AGE)]
    if kind == "Lease":
        return [_col("Holder"), _col(AGE)]
    if kind == "CustomResourceDefinition":
        return [_col("Created At", "date")]
    if crd_columns:
        # A CRD that declares printer columns gets exactly those, as the real server prints them.
        return [_col(c.get("name", ""), c.get("format", ""), c.get("type", "string")) for c in crd_columns]
    return [_col(AGE)]


def _cells(rt: ResourceType, o: JSON, crd_columns: list[JSON], now: datetime) -> list[Any]:
    kind = "" if rt.custom else rt.kind
    age = _age((o.get("metadata") or {}).get("creationTimestamp"), now)
    if kind == "Pod":
        return [*_pod_cells(o), age]
    if kind == "Node":
        state, roles, version = _node_cells(o)
        return [state, roles, age, version]
    if kind == "Namespace":
        return [(o.get("status") or {}).get("phase", ""), age]
    if kind == "Lease":
        return [(o.get("spec") or {}).get("holderIdentity", ""), age]
    if kind == "CustomResourceDefinition":
        return [o["metadata"].get("creationTimestamp", "")]
    if crd_columns:
        cells = []
        for c in crd_columns:
            value = _jsonpath(o, c.get("jsonPath", ""))
            # Date columns print as an age, as the real CRD table convertor does.
            cells.append(_age(value, now) if c.get("type") == "date" and value else value)
        return cells
    return [age]


def to_table(rt: ResourceType, body: JSON, now: datetime, crd_columns: list[JSON] | None = None) -> JSON:
    cols = crd_columns or []
    items = body.get("items") if body.get("kind", "").endswith("List") and "items" in body else [body]
    defs = [_col("Name", "name"), *_columns(rt, cols)]
    rows = []
    for o in items or []:
        meta = o.get("metadata") or {}
        cells = [meta.get("name", ""), *_cells(rt, o, cols, now)]
        rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata",
                                                  "apiVersion": "meta.k8s.io/v1", "metadata": meta}})
    source_meta = body.get("metadata") or {}
    keep = ("resourceVersion", "continue", "remainingItemCount")
    meta_out = {k: v for k, v in source_meta.items() if k in keep}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta_out,
            "columnDefinitions": defs, "rows": rows}
