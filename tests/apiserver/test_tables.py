"""Server-side printing (Table responses): the printers of built-in kinds, CRD printer columns with the JSONPath
subset, ``includeObject``, and the events.k8s.io field selectors ``kubectl describe``-like clients use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangscale.clock import ManualClock
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import EVENTS, EVENTS_V1
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.apiserver import jsonpath
from gangscale.sim.apiserver.printers import PRINTERS, human_duration
from gangscale.sim.apiserver.schemas import BUILTIN_CUSTOM_RESOURCES
from gangscale.sim.apiserver.tables import crd_cell
from tests.deploy import manifests as m

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def ago(**kw: float) -> str:
    return (NOW - timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("seconds", "want"), [
    (-5, "<invalid>"), (-1.5, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (182, "3m2s"), (600, "10m"),
    (10799, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60 * 5, "3h5m"), (8 * 3600 + 59 * 60, "8h"),
    (47 * 3600, "47h"), (2 * 86400, "2d"), (2 * 86400 + 3 * 3600, "2d3h"), (30 * 86400, "30d"),
    (800 * 86400, "2y70d"), (730 * 86400, "2y"), (9 * 365 * 86400, "9y"),
], ids=str)
def test_human_duration(seconds: float, want: str) -> None:
    assert human_duration(seconds) == want


CONDITIONS = {"status": {"conditions": [{"type": "Admitted", "status": "True"},
                                        {"type": "Finished", "status": "False"}],
                         "nums": [1, 2, 3], "nested": {"a": {"b": "deep"}}}}


@pytest.mark.parametrize(("path", "want"), [
    (".status.nested.a.b", ["deep"]),
    ("{.status.nested.a.b}", ["deep"]),
    (".status.conditions[?(@.type=='Admitted')].status", ["True"]),
    ('.status.conditions[?(@.type=="Finished")].status', ["False"]),
    (".status.conditions[?(@.type!='Admitted')].type", ["Finished"]),
    (".status.conditions[?(@.type=='Evicted')].status", []),
    (".status.conditions[?(@.reason)].status", []),
    (".status.conditions[*].type", ["Admitted", "Finished"]),
    (".status.nums[-1]", [3]), (".status.nums[5]", []),
    (".status.nums[?(@ > 1)]", []),  # outside the subset: finds nothing
    (".status.missing.deeper", []),
    (".status..type", []),
], ids=str)
def test_jsonpath_subset(path: str, want: list[Any]) -> None:
    assert jsonpath.find(CONDITIONS, path) == want


@pytest.mark.parametrize(("col_type", "value", "want"), [
    ("string", "x", "x"), ("string", 3, "3"), ("string", True, "true"), ("string", 1.5, "1.5"),
    ("string", {"b": 1, "a": [1]}, '{"a":[1],"b":1}'),
    ("integer", 4, 4), ("integer", 4.7, 4), ("integer", "4", None), ("integer", True, None),
    ("number", 2, 2.0), ("boolean", False, False), ("boolean", "true", None),
    ("date", ago(minutes=3, seconds=2), "3m2s"), ("date", "yesterday", "<invalid>"), ("date", 5, None),
], ids=str)
def test_crd_cells_print_by_column_type(col_type: str, value: Any, want: Any) -> None:
    assert crd_cell({"type": col_type, "jsonPath": ".v"}, {"v": value}, NOW) == want
    assert crd_cell({"type": col_type, "jsonPath": ".absent"}, {"v": value}, NOW) is None


def _declared(path: Any) -> dict[tuple[str, str], list[dict[str, Any]]]:
    (crd,) = m.load_documents(path)
    kind = crd["spec"]["names"]["kind"]
    return {(kind, v["name"]): [{k: c[k] for k in ("name", "type", "jsonPath", "priority", "format") if k in c}
                                for c in v.get("additionalPrinterColumns") or []]
            for v in crd["spec"]["versions"]}


VENDORED = {key: cols for path in [m.PROVREQ_CRD, *sorted(m.TEST_CRDS.glob("*.yaml"))]
            for key, cols in _declared(path).items()}


@pytest.mark.parametrize("key", sorted(VENDORED), ids=lambda k: f"{k[0]}-{k[1]}")
def test_embedded_printer_columns_are_the_upstream_crds(key: tuple[str, str]) -> None:
    kind, version = key
    spec = next(s for s in BUILTIN_CUSTOM_RESOURCES if s.kind == kind)
    served = spec.version(version)
    assert served is not None
    embedded = [{k: c[k] for k in ("name", "type", "jsonPath", "priority", "format") if k in c}
                for c in served.printer_columns]
    assert embedded == VENDORED[key]


NODE = {"metadata": {"name": "n1", "creationTimestamp": ago(hours=5),
                     "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "gpu"}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
                   "nodeInfo": {"kubeletVersion": "v1.36.0", "osImage": "COS"}}}
EVENT = {"metadata": {"name": "pr.1"}, "involvedObject": {"kind": "ProvisioningRequest", "name": "train"},
         "type": "Normal", "reason": "Provisioned", "message": " ready \n", "count": 4,
         "firstTimestamp": ago(minutes=10), "lastTimestamp": ago(minutes=3, seconds=2),
         "source": {"component": "gangscale"}, "reportingInstance": "replica-0"}
NEW_API_EVENT = {"metadata": {"name": "e2"}, "involvedObject": {"kind": "Node"}, "eventTime": ago(seconds=30),
                 "reportingComponent": "kubelet"}
SERIES_EVENT = {**NEW_API_EVENT, "series": {"count": 7, "lastObservedTime": ago(seconds=5)}}
POD = {"metadata": {"name": "p", "creationTimestamp": ago(minutes=1), "deletionTimestamp": ago(seconds=1)},
       "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
       "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.7"}],
                  "containerStatuses": [
                      {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}},
                       "lastState": {"terminated": {"finishedAt": ago(minutes=4)}}},
                      {"name": "b", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "Pulling"}}}]}}
TEMPLATE = {"metadata": {"name": "t"}, "template": {"metadata": {"labels": {"z": "1", "a": "2"}}, "spec": {
    "containers": [{"name": "w", "image": "img:1"}, {"name": "s", "image": "side:2"}]}}}


@pytest.mark.parametrize(("kind", "obj", "want"), [
    ("Node", NODE, ["NotReady,SchedulingDisabled", "gpu,worker", "5h", "v1.36.0", "10.0.0.4", "<none>", "COS",
                    "<unknown>", "<unknown>"]),
    ("Node", {"metadata": {"name": "bare"}}, ["Unknown", "<none>", "<unknown>", "", "<none>", "<none>",
                                              "<unknown>", "<unknown>", "<unknown>"]),
    ("Event", EVENT, ["3m2s", "Normal", "Provisioned", "provisioningrequest/train", "", "gangscale, replica-0",
                      "ready", "10m", 4, "pr.1"]),
    ("Event", NEW_API_EVENT, ["30s", "", "", "node", "", "kubelet", "", "30s", 1, "e2"]),
    ("Event", SERIES_EVENT, ["5s", "", "", "node", "", "kubelet", "", "30s", 7, "e2"]),
    ("Pod", POD, ["1/2", "Terminating", "2 (4m ago)", "60s", "10.1.0.7", "n1", "<none>", "<none>"]),
    ("PodTemplate", TEMPLATE, ["w,s", "img:1,side:2", "a=2,z=1"]),
], ids=["node", "node-bare", "event", "event-new-api", "event-series", "pod", "podtemplate"])
def test_builtin_printers(kind: str, obj: dict[str, Any], want: list[Any]) -> None:
    printer = PRINTERS[kind]
    assert printer.cells(obj, NOW) == want
    assert len(printer.columns) == len(want) + (0 if printer.name_last else 1)


async def _table(http: KubeHTTP, path: str, **query: str) -> tuple[int, dict[str, Any]]:
    client = http.api_client
    resp = await client.rest_client.pool_manager.get(f"{client.configuration.host}{path}", params=query,
                                                     headers={"Accept": TABLE})
    async with resp:
        return resp.status, await resp.json()


def _event(name: str, regarding: str, last: str, uid: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}, "type": "Normal", "reason": "Test",
            "message": name, "involvedObject": {"kind": "ProvisioningRequest", "name": regarding,
                                                "namespace": "default", "uid": uid},
            "firstTimestamp": last, "lastTimestamp": last, "count": 1}


@pytest.mark.parametrize(("include", "want"), [
    ("", "PartialObjectMetadata"), ("Metadata", "PartialObjectMetadata"), ("Object", "Event"), ("None", None),
], ids=["default", "metadata", "object", "none"])
async def test_include_object(http: KubeHTTP, clock: ManualClock, include: str, want: str | None) -> None:
    await http.request("POST", EVENTS.path("default"), body=_event("e1", "train", ago(minutes=1)))
    status, table = await _table(http, EVENTS.path("default"), **({"includeObject": include} if include else {}))
    assert status == 200 and table["kind"] == "Table"
    (row,) = table["rows"]
    assert (row["object"] or {}).get("kind") == want
    if want == "Event":
        assert row["object"]["lastTimestamp"] == ago(minutes=1) and row["object"]["apiVersion"] == "v1"
    assert [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0] == [
        "Last Seen", "Type", "Reason", "Object", "Message"]


async def test_unknown_include_object_is_a_400(http: KubeHTTP) -> None:
    status, body = await _table(http, EVENTS.path("default"), includeObject="Everything")
    assert status == 400 and body["message"] == 'unrecognized includeObject value: "Everything"'


async def test_events_api_events_print_like_core_events(http: KubeHTTP, clock: ManualClock) -> None:
    await http.request("POST", EVENTS.path("default"), body=_event("e1", "train", clock.datetime().strftime(
        "%Y-%m-%dT%H:%M:%SZ")))
    status, table = await _table(http, EVENTS_V1.path("default"), includeObject="Object")
    assert status == 200
    assert table["rows"][0]["cells"][:4] == ["0s", "Normal", "Test", "provisioningrequest/train"]
    assert table["rows"][0]["object"]["regarding"]["name"] == "train"


@pytest.mark.parametrize(("resource", "selector", "want"), [
    ("core", "involvedObject.name=train,involvedObject.namespace=default,involvedObject.kind=ProvisioningRequest,"
             "involvedObject.uid=u-1", ["e1"]),
    ("core", "involvedObject.name=other", ["e2"]),
    ("events.k8s.io", "regarding.name=train,regarding.uid=u-1", ["e1"]),
    ("events.k8s.io", "regarding.kind=ProvisioningRequest,reason=Test,type=Normal", ["e1", "e2"]),
    ("events.k8s.io", "reportingController=gangscale", []),
], ids=["core-describe", "core-name", "events-regarding", "events-kind", "events-reporting"])
async def test_event_field_selectors(http: KubeHTTP, resource: str, selector: str, want: list[str]) -> None:
    await http.request("POST", EVENTS.path("default"), body=_event("e1", "train", ago(minutes=1), "u-1"))
    await http.request("POST", EVENTS.path("default"), body=_event("e2", "other", ago(minutes=1), "u-2"))
    res = EVENTS if resource == "core" else EVENTS_V1
    listed = await http.request("GET", res.path("default"), query={"fieldSelector": selector})
    assert [e["metadata"]["name"] for e in listed["items"]] == want


async def test_events_api_refuses_core_field_labels(http: KubeHTTP) -> None:
    with pytest.raises(ApiError) as err:
        await http.request("GET", EVENTS_V1.path("default"), query={"fieldSelector": "involvedObject.name=x"})
    assert err.value.status == 400 and err.value.message == "field label not supported: involvedObject.name"


async def test_workload_filter_columns_are_printed(http: KubeHTTP) -> None:
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w1"},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "i"}]}}}]}}
    await http.request("POST", "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads", body=body)
    status = {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}], "admission": {"clusterQueue": "cq"}}
    await http.request("PATCH", "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/w1/status",
                       body={"status": status}, content_type="application/merge-patch+json")
    code, table = await _table(http, "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads")
    assert code == 200
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Queue", "Reserved in", "Admitted",
                                                               "Finished", "Age"]
    assert table["rows"][0]["cells"][:5] == ["w1", "lq", "cq", "True", None]
