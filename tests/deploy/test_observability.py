"""The monitoring objects: the Grafana dashboard, the PrometheusRule and the ServiceMonitor (chart and
deploy/observability). Every metric name an alert or a panel uses must be one the controller exports."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.deploy import helm
from tests.deploy import manifests as m
from tests.deploy import monitoring as mo

DASHBOARD = helm.CHART / "dashboards" / "gangscale.json"
ON = ("--set", "prometheusRule.enabled=true", "--set", "serviceMonitor.enabled=true", "--set", "dashboard.enabled=true")


@pytest.fixture(scope="module")
def chart() -> list[dict[str, Any]]:
    return helm.template(*ON)


def test_the_metric_name_check_can_fail() -> None:
    exported = mo.exported_names()
    assert {"gangscale_provider_errors_total", "gangscale_decision_latency_seconds_bucket", "gangscale_leader",
            "gangscale_build_info", "gangscale_last_pass_timestamp_seconds", "process_cpu_seconds_total"} <= exported
    assert mo.metric_names('sum by (pool) (rate(gangscale_scaled_unit_total{direction="up"}[5m]))') - exported == {
        "gangscale_scaled_unit_total"}
    assert mo.metric_names('absent(x{a="sum(y)"}) unless on (z) w offset 5m') == {"x", "w"}


def test_the_dashboard_is_a_grafana_model_on_exported_metrics() -> None:
    model = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert mo.dashboard_problems(model) == []
    assert mo.dashboard_problems({**model, "panels": [*model["panels"], model["panels"][0]]}) != []
    exported = mo.exported_names()
    for expr in mo.dashboard_exprs(model):
        names = mo.metric_names(mo.label_values_metric(expr))
        assert names and names <= exported, (expr, names - exported)
    titles = " ".join(p["title"].lower() for p in model["panels"])
    for topic in ("phase", "latency", "scale-ups", "provider errors", "pool units", "backed off", "leader",
                  "pass", "build info"):
        assert topic in titles


def test_the_chart_ships_the_dashboard_file_unchanged(chart: list[dict[str, Any]]) -> None:
    configmap = m.one(chart, "ConfigMap", "gangscale-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["gangscale.json"]) == json.loads(DASHBOARD.read_text(encoding="utf-8"))


def test_alerts_use_only_exported_metrics_and_known_fields(chart: list[dict[str, Any]]) -> None:
    rule = m.one(chart, "PrometheusRule")
    exported = mo.exported_names()
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {"GangscaleScaleUpsFailing", "GangscaleRequestsPending", "GangscalePoolBackedOff",
                           "GangscalePoolUnhealthy", "GangscaleNoLeader", "GangscaleAbsent", "GangscaleNoPass"}
    assert "gangscale_pool_unhealthy" in alerts["GangscalePoolUnhealthy"]["expr"]
    for name, alert in alerts.items():
        names = mo.metric_names(alert["expr"])
        assert names and names <= exported, (name, names - exported)
    assert "absent(gangscale_leader" in alerts["GangscaleAbsent"]["expr"]
    assert "gangscale_last_pass_timestamp_seconds" in alerts["GangscaleNoPass"]["expr"]
    for kind in ("PrometheusRule", "ServiceMonitor"):
        assert mo.unknown_monitoring_fields(m.one(chart, kind), mo.MONITORING_FIELDS[kind]) == []
    assert mo.unknown_monitoring_fields({"spec": {"endpoints": [{"portName": "http"}]}},
                                        mo.MONITORING_FIELDS["ServiceMonitor"]) == ["spec.endpoints[0].portName"]


def test_the_service_monitor_selects_the_metrics_service_by_its_port_name(chart: list[dict[str, Any]]) -> None:
    monitor, service = m.one(chart, "ServiceMonitor"), m.one(chart, "Service")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert m.selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]


def test_the_plain_copies_for_kustomize_equal_the_chart(chart: list[dict[str, Any]]) -> None:
    plain = m.render(m.OBSERVABILITY)
    base_service = m.one(m.render(m.BASE), "Service")
    for kind in ("PrometheusRule", "ServiceMonitor"):
        ours = m.one(plain, kind)
        assert ours["spec"] == {**m.one(chart, kind)["spec"], **(
            {"selector": ours["spec"]["selector"]} if kind == "ServiceMonitor" else {})}
        assert mo.unknown_monitoring_fields(ours, mo.MONITORING_FIELDS[kind]) == []
    assert m.selects(m.one(plain, "ServiceMonitor")["spec"]["selector"], base_service["metadata"]["labels"])


def test_the_rules_file_is_yaml_prometheus_reads() -> None:
    (rule,) = [d for d in yaml.safe_load_all((m.OBSERVABILITY / "prometheusrule.yaml").read_text()) if d]
    assert all(r["for"] and r["labels"]["severity"] for g in rule["spec"]["groups"] for r in g["rules"])
