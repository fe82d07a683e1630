"""Helpers for the monitoring objects: PromQL metric names, the series the controller exports, a hand-written
schema of the prometheus-operator fields the chart uses, and the Grafana dashboard model.

``metric_names`` is a small PromQL tokenizer, not a parser: it drops string literals, range/offset brackets
and label matchers, skips the label lists after ``by``/``without``/``on``/``ignoring``/``group_left``/
``group_right``, and keeps every remaining identifier that is neither a keyword nor a function call. That is
enough for the expressions written here; an expression it cannot read would show up as an unknown name.

``MONITORING_FIELDS`` lists the fields of ``monitoring.coreos.com/v1`` ServiceMonitor and PrometheusRule the
chart may use, as the prometheus-operator API reference names them (the kubernetes client has no models for
these custom resources). Assumption: the operator's CRDs of v0.50 or later (all these fields exist there).
"""

from __future__ import annotations

import re
from typing import Any

from gangscale.observe.metrics import Metrics

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_BRACKETS = re.compile(r"\[[^\]]*\]|\{[^}]*\}")
_TOKEN = re.compile(r"[0-9][0-9A-Za-z_.+]*|[A-Za-z_:][A-Za-z0-9_:]*|\(|\)|[^\sA-Za-z0-9_:()]+")
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _GROUPING | {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = _BRACKETS.sub(" ", _STRING.sub('""', expr))
    tokens = _TOKEN.findall(text)
    out: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok.lower() in _GROUPING and nxt == "(":
            i = tokens.index(")", i) + 1  # the label list: label names, not metrics
            continue
        # A name followed by "(" is a function; one followed by by/without an aggregation (`sum by (x) (...)`).
        called = nxt == "(" or nxt.lower() in ("by", "without")
        if re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok) and tok.lower() not in _KEYWORDS and not called:
            out.add(tok)
        i += 1
    return out


_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "summary": ("_sum", "_count", "_created"), "info": ("_info",)}


def exported_names(metrics: Metrics | None = None) -> set[str]:
    """Every sample name the controller's registry can expose, labelled series without samples yet included."""
    registry = (metrics or Metrics()).registry
    out: set[str] = set()
    for family in registry.collect():
        suffixes = _SUFFIXES.get(family.type)
        out.update(family.name + s for s in suffixes) if suffixes else out.add(family.name)
    return out


# A field name -> its schema: a nested dict, [schema] for a list of items, or None for a leaf (any value).
Schema = dict[str, Any]
_META: Schema = {"name": None, "namespace": None, "labels": None, "annotations": None}
MONITORING_FIELDS: dict[str, Schema] = {
    "ServiceMonitor": {"apiVersion": None, "kind": None, "metadata": _META, "spec": {
        "selector": {"matchLabels": None, "matchExpressions": None},
        "namespaceSelector": {"any": None, "matchNames": None},
        "jobLabel": None,
        "endpoints": [{"port": None, "path": None, "interval": None, "scrapeTimeout": None, "scheme": None,
                       "honorLabels": None, "relabelings": None, "metricRelabelings": None}]}},
    "PrometheusRule": {"apiVersion": None, "kind": None, "metadata": _META, "spec": {
        "groups": [{"name": None, "interval": None, "limit": None, "rules": [
            {"alert": None, "record": None, "expr": None, "for": None, "keep_firing_for": None, "labels": None,
             "annotations": None}]}]}},
}


def unknown_monitoring_fields(obj: Any, schema: Schema | list[Any] | None, path: str = "") -> list[str]:
    """Paths of the fields of ``obj`` that ``schema`` does not list."""
    if schema is None:
        return []
    if isinstance(schema, list):
        if not isinstance(obj, list):
            return [f"{path} (not a list)"]
        return [p for i, item in enumerate(obj) for p in unknown_monitoring_fields(item, schema[0], f"{path}[{i}]")]
    if not isinstance(obj, dict):
        return [f"{path} (not a mapping)"]
    out: list[str] = []
    for key, value in obj.items():
        where = f"{path}.{key}".lstrip(".")
        if key not in schema:
            out.append(where)
        else:
            out.extend(unknown_monitoring_fields(value, schema[key], where))
    return out


def dashboard_problems(model: dict[str, Any]) -> list[str]:
    """What makes ``model`` not a usable Grafana dashboard for the sidecar: missing keys, panel ids that repeat,
    panels without a grid position or queries, or a data source that is not the ``${datasource}`` variable."""
    problems = [f"missing {key}" for key in ("title", "uid", "schemaVersion", "panels") if key not in model]
    variables = {v.get("name"): v for v in (model.get("templating") or {}).get("list", [])}
    source = variables.get("datasource") or {}
    if source.get("type") != "datasource" or source.get("query") != "prometheus":
        problems.append("no templated data source variable 'datasource' of type prometheus")
    ids = [p.get("id") for p in model.get("panels", [])]
    if len(ids) != len(set(ids)) or None in ids:
        problems.append(f"panel ids must be unique: {ids}")
    wanted = {"type": "prometheus", "uid": "${datasource}"}
    for panel in model.get("panels", []):
        title = panel.get("title", panel.get("id"))
        if set(panel.get("gridPos") or {}) != {"h", "w", "x", "y"}:
            problems.append(f"{title}: gridPos")
        if panel.get("datasource") != wanted:
            problems.append(f"{title}: datasource is not ${{datasource}}")
        targets = panel.get("targets") or []
        if not targets or not all(t.get("expr") and t.get("refId") for t in targets):
            problems.append(f"{title}: every panel needs targets with expr and refId")
        if any(t.get("datasource", wanted) != wanted for t in targets):
            problems.append(f"{title}: a target's datasource is not ${{datasource}}")
    return problems


def dashboard_exprs(model: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in model.get("panels", []) for t in p.get("targets", [])]
    for var in (model.get("templating") or {}).get("list", []):
        query = var.get("query")
        if var.get("type") == "query" and isinstance(query, dict):
            exprs.append(str(query.get("query", "")))
    return exprs


def label_values_metric(query: str) -> str:
    """``label_values(metric, label)`` -> ``metric`` (Grafana's variable query syntax, not PromQL)."""
    found = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{[^}]*\})?\s*,\s*\w+\s*\)\s*", query)
    return found.group(1) if found else query
