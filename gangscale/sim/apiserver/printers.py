"""The real server's printers for the built-in kinds served here (``pkg/printers/internalversion``).

kube-apiserver always prints the wide form (``GenerateOptions{Wide: true}``); columns with ``priority: 1``
are the ones kubectl shows only with ``-o wide``. Each printer returns the cells after the row's object has
been read in its core shape. Times print as ``duration.HumanDuration`` of their age (``<unknown>`` when
unset). Column descriptions are short summaries, not upstream's swagger text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> JSON:
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description or self.name, "priority": self.priority}


NAME = Column("Name", format="name", description="Name must be unique within a namespace.")
AGE = Column("Age", description="CreationTimestamp of the object.")


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    secs = int(seconds)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 120:
        return f"{secs}s"
    minutes, hours = secs // 60, secs // 3600
    if minutes < 10:
        return f"{minutes}m" if secs % 60 == 0 else f"{minutes}m{secs % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d" if hours % 24 == 0 else f"{days}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return f"{days // 365}y" if days % 365 == 0 else f"{days // 365}y{days % 365}d"
    return f"{days // 365}y"


def parse_time(ts: Any) -> datetime | None:
    """An RFC 3339 timestamp (``metav1.Time`` or ``MicroTime``); None when unset or unparsable."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        parsed = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None  # RFC 3339 always carries an offset


def since(ts: Any, now: datetime) -> str:
    """``translateTimestampSince``: the age of ``ts``, ``<unknown>`` when unset."""
    then = parse_time(ts)
    return "<unknown>" if then is None else human_duration((now - then).total_seconds())


def format_labels(labels: Mapping[str, Any] | None) -> str:
    """``labels.FormatLabels``: ``k=v`` sorted by key, comma-joined; ``<none>`` when empty."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels)) if labels else "<none>"


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _containers(containers: Any) -> list[str]:
    items = [c for c in containers or [] if isinstance(c, dict)]
    return [",".join(_str(c.get("name")) for c in items), ",".join(_str(c.get("image")) for c in items)]


# --- Pod ---------------------------------------------------------------------------------------------------

def _container_reason(status: JSON, reason: str) -> tuple[str, bool]:
    """The reason one container status sets, and whether it counts as ready and running."""
    state = status.get("state") or {}
    waiting, terminated = state.get("waiting"), state.get("terminated")
    if isinstance(waiting, dict) and waiting.get("reason"):
        return str(waiting["reason"]), False
    if isinstance(terminated, dict):
        if terminated.get("reason"):
            return str(terminated["reason"]), False
        if terminated.get("signal"):
            return f"Signal:{terminated['signal']}", False
        return f"ExitCode:{terminated.get('exitCode', 0)}", False
    return reason, bool(status.get("ready")) and isinstance(state.get("running"), dict)


def _last_restart(statuses: list[JSON]) -> datetime | None:
    times = [parse_time(_get(s, "lastState", "terminated", "finishedAt")) for s in statuses]
    return max((t for t in times if t is not None), default=None)


def _pod_cells(o: JSON, now: datetime) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    phase = _str(status.get("phase"))
    reason = _str(status.get("reason")) or phase
    conditions = status.get("conditions") or []
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
        reason = "SchedulingGated"
    statuses = [s for s in status.get("containerStatuses") or [] if isinstance(s, dict)]
    ready, running = 0, False
    for cs in reversed(statuses):
        reason, ok = _container_reason(cs, reason)
        ready, running = ready + ok, running or ok
    if reason == "Completed" and running:
        pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        reason = "Running" if pod_ready else "NotReady"
    if o["metadata"].get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    last = _last_restart(statuses)
    restarts_cell = f"{restarts} ({human_duration((now - last).total_seconds())} ago)" \
        if restarts and last is not None else str(restarts)
    ips = status.get("podIPs") or []
    ip = _str(ips[0].get("ip")) if ips and isinstance(ips[0], dict) else ""
    gates = spec.get("readinessGates") or []
    gates_cell = "<none>"
    if gates:
        by_type = {c.get("type"): c.get("status") for c in reversed(conditions)}
        gates_cell = f"{sum(1 for g in gates if by_type.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    return [f"{ready}/{len(spec.get('containers') or [])}", reason, restarts_cell,
            since(o["metadata"].get("creationTimestamp"), now), ip or "<none>",
            _str(spec.get("nodeName")) or "<none>", _str(status.get("nominatedNodeName")) or "<none>", gates_cell]


# --- Node, PodTemplate, Event, others ----------------------------------------------------------------------

def _node_roles(labels: Mapping[str, Any]) -> str:
    roles = {k.removeprefix("node-role.kubernetes.io/") for k in labels
             if k.startswith("node-role.kubernetes.io/") and k != "node-role.kubernetes.io/"}
    if labels.get("kubernetes.io/role"):
        roles.add(str(labels["kubernetes.io/role"]))
    return ",".join(sorted(roles)) or "<none>"


def _node_address(o: JSON, kind: str) -> str:
    for address in _get(o, "status", "addresses") or []:
        if isinstance(address, dict) and address.get("type") == kind:
            return _str(address.get("address"))
    return "<none>"


def _node_cells(o: JSON, now: datetime) -> list[Any]:
    conditions = _get(o, "status", "conditions") or []
    ready = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
    states = ["Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")]
    if _get(o, "spec", "unschedulable"):
        states.append("SchedulingDisabled")
    info = _get(o, "status", "nodeInfo") or {}
    return [",".join(states), _node_roles(o["metadata"].get("labels") or {}),
            since(o["metadata"].get("creationTimestamp"), now), _str(info.get("kubeletVersion")),
            _node_address(o, "InternalIP"), _node_address(o, "ExternalIP"),
            *(_str(info.get(k)) or "<unknown>" for k in ("osImage", "kernelVersion", "containerRuntimeVersion"))]


def _pod_template_cells(o: JSON, now: datetime) -> list[Any]:
    template = o.get("template") or {}
    return [*_containers(_get(template, "spec", "containers")), format_labels(_get(template, "metadata", "labels"))]


def _event_source(o: JSON) -> str:
    component = _str(_get(o, "source", "component")) or _str(o.get("reportingComponent"))
    instance = _str(_get(o, "source", "host")) or _str(o.get("reportingInstance"))
    return f"{component}, {instance}" if instance else component


def _event_cells(o: JSON, now: datetime) -> list[Any]:
    """``printEvent`` on the core (storage) shape; events.k8s.io events are printed from it too."""
    first = since(o.get("firstTimestamp") or o.get("eventTime"), now)
    last = since(o["lastTimestamp"], now) if o.get("lastTimestamp") else first
    count = int(o.get("count") or 0)
    series = o.get("series")
    if isinstance(series, dict):
        last, count = since(series.get("lastObservedTime"), now), int(series.get("count") or 0)
    elif count == 0:
        count = 1  # singleton events of the new API carry no count
    involved = o.get("involvedObject") or {}
    kind, name = _str(involved.get("kind")).lower(), _str(involved.get("name"))
    return [last, _str(o.get("type")), _str(o.get("reason")), f"{kind}/{name}" if name else kind,
            _str(involved.get("fieldPath")), _event_source(o), _str(o.get("message")).strip(), first, count,
            o["metadata"].get("name", "")]


def _age_only(field: Callable[[JSON], Any]) -> Callable[[JSON, datetime], list[Any]]:
    return lambda o, now: [field(o), since(o["metadata"].get("creationTimestamp"), now)]


@dataclass(frozen=True)
class Printer:
    columns: tuple[Column, ...]  # Name first, except for Event (its Name is the last, wide-only column)
    cells: Callable[[JSON, datetime], list[Any]]  # every cell but the Name
    name_last: bool = False


_WIDE_TEMPLATE = (Column("Containers", priority=1), Column("Images", priority=1))
PRINTERS: dict[str, Printer] = {
    "Pod": Printer((NAME, Column("Ready"), Column("Status"), Column("Restarts"), AGE, Column("IP", priority=1),
                    Column("Node", priority=1), Column("Nominated Node", priority=1),
                    Column("Readiness Gates", priority=1)), _pod_cells),
    "Node": Printer((NAME, Column("Status"), Column("Roles"), AGE, Column("Version"),
                     Column("Internal-IP", priority=1), Column("External-IP", priority=1),
                     Column("OS-Image", priority=1), Column("Kernel-Version", priority=1),
                     Column("Container-Runtime", priority=1)), _node_cells),
    "PodTemplate": Printer((NAME, Column("Containers"), Column("Images"), Column("Pod Labels")),
                           _pod_template_cells),
    "Event": Printer((Column("Last Seen"), Column("Type"), Column("Reason"), Column("Object"),
                      Column("Subobject", priority=1), Column("Source", priority=1), Column("Message"),
                      Column("First Seen", priority=1), Column("Count", priority=1),
                      Column("Name", priority=1, format="name")), _event_cells, name_last=True),
    "Namespace": Printer((NAME, Column("Status"), AGE), _age_only(lambda o: _str(_get(o, "status", "phase")))),
    "Lease": Printer((NAME, Column("Holder"), AGE), _age_only(lambda o: _str(_get(o, "spec", "holderIdentity")))),
    "Secret": Printer((NAME, Column("Type"), Column("Data"), AGE),
                      lambda o, now: [_str(o.get("type")), len(o.get("data") or {}),
                                      since(o["metadata"].get("creationTimestamp"), now)]),
    "CustomResourceDefinition": Printer((NAME, Column("Created At", type="date")),
                                        lambda o, now: [o["metadata"].get("creationTimestamp", "")]),
}
