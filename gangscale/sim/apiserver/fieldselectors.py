"""Field selectors (``fieldSelector``) as kube-apiserver parses, checks and applies them.

Parsing follows ``k8s.io/apimachinery/pkg/fields/selector.go``: split on unescaped commas, the first
``!=``, ``==`` or ``=`` splits each term (no whitespace trimming: ``a = b`` selects field ``"a "``),
values unescape ``\\\\``, ``\\,``, ``\\=`` and reject other escapes and bare ``,``/``=``
(``invalid field selector: unescaped character in value: 61`` - Go prints the rune as a number); a missing
field compares as ``""``. Errors are 400 BadRequest with the parser's message.

Supported labels per kind come from ``pkg/apis/core/v1/conversion.go`` (Pod incl. the ``spec.host`` alias,
Node, Event, Namespace, Secret, Service, ReplicationController) and reject with ``field label not
supported: x``; events.k8s.io/v1 events take their own spellings (``regarding.name``, ``reportingController``
...; ``pkg/apis/events/v1/conversion.go``), renamed to the core Event fields they select, and refuse the core
ones (``involvedObject.name``); other built-in kinds use ``DefaultMetaV1FieldSelectorConversion`` (``"x" is not a known
field selector: only "metadata.name", "metadata.namespace"``); custom resources use the CRD converter
(``metadata.name``, ``metadata.namespace`` when namespaced, plus ``selectableFields``). Field sets mirror
each registry's ``ToSelectableFields`` (Pod ``status.podIP`` is the first of ``status.podIPs``, Event
``source`` falls back to ``reportingComponent``, booleans print as ``true``/``false``).

Not reproduced: set-based field selectors of newer releases, and the conversions of kinds not listed above
(apps ReplicaSet ``status.replicas``, batch Job ``status.successful``, CSR ``spec.signerName``), which
fall back to the default conversion here. Service's ``spec.clusterIP``/``spec.type`` were read from
conversion.go; the release that added them was not verified.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.sim.apiserver.errors import StatusError, bad_request

JSON = dict[str, Any]


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: str  # "=", "==" or "!="
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        equal = fields.get(self.field, "") == self.value
        return not equal if self.operator == "!=" else equal


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements

    def fields(self) -> list[str]:
        return [r.field for r in self.requirements]

    def __str__(self) -> str:
        return ",".join(f"{r.field}{'!=' if r.operator == '!=' else '='}{r.value}" for r in self.requirements)


def _split_terms(text: str) -> list[str]:
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _unescape(value: str) -> str:
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise bad_request(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            # Go prints the rune with %v, i.e. as its code point number.
            raise bad_request(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(text: str) -> FieldSelector:
    """Parse ``fieldSelector``; a syntax error raises the real 400 BadRequest."""
    reqs: list[FieldRequirement] = []
    for term in sorted(_split_terms(text)) if text else []:
        if not term:
            continue
        match = re.search("!=|==|=", term)
        if match is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        op = match.group()
        reqs.append(FieldRequirement(term[:match.start()], op, _unescape(term[match.end():])))
    return FieldSelector(tuple(reqs))


# --- supported fields and field sets -----------------------------------------------------------------------

_META = ("metadata.name", "metadata.namespace")
_EVENT_FIELDS = (
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source", "type",
)
_POD_STRINGS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                "status.phase", "status.nominatedNodeName")
_POD_FIELDS = (*_POD_STRINGS, "spec.hostNetwork", "status.podIP", "status.podIPs")
# events.k8s.io/v1 label -> the core Event field it selects (the two share one storage).
_EVENTS_API_LABELS = {
    **{f"regarding.{f}": f"involvedObject.{f}"
       for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reportingController": "reportingComponent",
    **{f: f for f in ("reason", "source", "type", *_META)},
}
# events.k8s.io/v1 object field -> core Event field, for reading the selectable fields of either shape.
_EVENTS_API_RENAMES = {"regarding": "involvedObject", "reportingController": "reportingComponent",
                       "deprecatedSource": "source"}
# Built-in kinds with their own field-label conversion; "spec.host" is the legacy alias of spec.nodeName.
_KIND_FIELDS: dict[str, frozenset[str]] = {
    "Pod": frozenset((*_META, *_POD_FIELDS, "spec.host")),
    "Node": frozenset(("metadata.name", "spec.unschedulable")),
    "Event": frozenset((*_META, *_EVENT_FIELDS)),
    "Namespace": frozenset(("metadata.name", "status.phase")),
    "Secret": frozenset((*_META, "type")),
    "Service": frozenset((*_META, "spec.clusterIP", "spec.type")),
    "ReplicationController": frozenset((*_META, "status.replicas")),
}


def supported_fields(kind: str, selectable_fields: Iterable[str] = (), *,
                     namespaced: bool = True, group: str = "") -> frozenset[str]:
    """Field labels the server accepts; ``kind == ""`` means a custom resource."""
    if kind == "Event" and group == "events.k8s.io":
        return frozenset(_EVENTS_API_LABELS)
    if kind in _KIND_FIELDS:
        return _KIND_FIELDS[kind]
    if kind:
        return frozenset(_META)
    custom = {"metadata.name", *(f.lstrip(".") for f in selectable_fields)}
    return frozenset(custom | ({"metadata.namespace"} if namespaced else set()))


def unsupported_field_error(kind: str, label: str) -> StatusError:
    """The 400 for an unsupported field label; built-in kinds without a conversion word it differently."""
    if kind and kind not in _KIND_FIELDS:
        return bad_request(f'"{label}" is not a known field selector: only "metadata.name", '
                           '"metadata.namespace"')
    return bad_request(f"field label not supported: {label}")


def _renamed(kind: str, group: str, label: str) -> str:
    if kind == "Pod" and label == "spec.host":
        return "spec.nodeName"
    if kind == "Event" and group == "events.k8s.io":
        return _EVENTS_API_LABELS[label]
    return label


def check_field_selector(selector: FieldSelector, kind: str, selectable_fields: Iterable[str] = (), *,
                         namespaced: bool = True, group: str = "") -> FieldSelector:
    """Reject unsupported labels like ``ConvertFieldLabel`` does and apply its renames (``spec.host``,
    events.k8s.io's ``regarding.*``)."""
    allowed = supported_fields(kind, selectable_fields, namespaced=namespaced, group=group)
    for field in selector.fields():
        if field not in allowed:
            raise unsupported_field_error(kind, field)
    return FieldSelector(tuple(FieldRequirement(_renamed(kind, group, r.field), r.operator, r.value)
                               for r in selector.requirements))


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _meta_fields(obj: JSON, namespaced: bool) -> dict[str, str]:
    out = {"metadata.name": _text(_get(obj, "metadata.name"))}
    if namespaced:
        out["metadata.namespace"] = _text(_get(obj, "metadata.namespace"))
    return out


def _pod_fields(obj: JSON) -> dict[str, str]:
    ips = _get(obj, "status.podIPs") or []
    first_ip = ips[0].get("ip") if ips and isinstance(ips[0], dict) else _get(obj, "status.podIP")
    out = {f: _text(_get(obj, f)) for f in _POD_STRINGS}
    out["spec.host"] = out["spec.nodeName"]
    out["spec.hostNetwork"] = _text(bool(_get(obj, "spec.hostNetwork")))
    out["status.podIP"] = _text(first_ip)
    return out


def _event_fields(obj: JSON) -> dict[str, str]:
    if str(obj.get("apiVersion", "")).startswith("events.k8s.io/"):
        obj = {_EVENTS_API_RENAMES.get(k, k): v for k, v in obj.items()}
    out = {f: _text(_get(obj, f)) for f in _EVENT_FIELDS if f != "source"}
    out["source"] = _text(_get(obj, "source.component")) or out["reportingComponent"]
    return out


def field_set(kind: str, obj: JSON, *, namespaced: bool = True) -> dict[str, str]:
    """The fields a built-in kind exposes to field selectors (its registry's ``ToSelectableFields``)."""
    if kind == "Pod":
        return {**_meta_fields(obj, True), **_pod_fields(obj)}
    if kind == "Node":
        unschedulable = _text(bool(_get(obj, "spec.unschedulable")))
        return {**_meta_fields(obj, False), "spec.unschedulable": unschedulable}
    if kind == "Namespace":
        return {**_meta_fields(obj, False), "status.phase": _text(_get(obj, "status.phase"))}
    if kind == "Event":
        return {**_meta_fields(obj, True), **_event_fields(obj)}
    extra: dict[str, str] = {}
    if kind == "Secret":
        extra = {"type": _text(obj.get("type"))}
    elif kind == "Service":
        extra = {f: _text(_get(obj, f)) for f in ("spec.clusterIP", "spec.type")}
    elif kind == "ReplicationController":
        extra = {"status.replicas": _text(_get(obj, "status.replicas") or 0)}
    return {**_meta_fields(obj, namespaced and kind not in ("Node", "Namespace")), **extra}


def _path_getter(path: str) -> Callable[[JSON], str]:
    parts = tuple(path.split("."))

    def get(obj: JSON) -> str:
        value: Any = obj
        for part in parts:
            if not isinstance(value, dict):
                return ""
            value = value.get(part)
        return _text(value)

    return get


def _pod_ip(obj: JSON) -> str:
    ips = _get(obj, "status.podIPs") or []
    return _text(ips[0].get("ip") if ips and isinstance(ips[0], dict) else _get(obj, "status.podIP"))


#: Per field, the value ``field_set`` gives it, for the kinds listed with the most objects to filter (a LIST of
#: every pod with a selector reads two or three fields of each, not all of them).
_GETTERS: dict[str, dict[str, Callable[[JSON], str]]] = {
    "Pod": {**{f: _path_getter(f) for f in (*_META, *_POD_STRINGS)},
            "spec.host": _path_getter("spec.nodeName"),
            "spec.hostNetwork": lambda obj: _text(bool(_get(obj, "spec.hostNetwork"))),
            "status.podIP": _pod_ip},
    "Node": {"metadata.name": _path_getter("metadata.name"),
             "spec.unschedulable": lambda obj: _text(bool(_get(obj, "spec.unschedulable")))},
}


def selected_fields(kind: str, obj: JSON, names: Sequence[str], *, namespaced: bool = True) -> dict[str, str]:
    """``field_set`` restricted to ``names`` (at least those; a field the kind does not expose is left out, as
    there): what a field selector reads, without computing the fields it does not name."""
    getters = _GETTERS.get(kind)
    if getters is None or any(n not in getters for n in names):
        return field_set(kind, obj, namespaced=namespaced)
    return {n: getters[n](obj) for n in names}


def field_set_from_jsonpaths(obj: JSON, paths: Sequence[str], *, namespaced: bool = True) -> dict[str, str]:
    """Custom resources: metadata fields plus each CRD ``selectableFields`` path (``.a.b`` or ``a.b``)."""
    out = _meta_fields(obj, namespaced)
    for path in paths:
        value = _get(obj, path.lstrip("."))
        if isinstance(value, str | int | bool):
            out[path.lstrip(".")] = _text(value)
    return out
