"""Hand-written, compact schemas of the custom resources the embedded API server serves from the start.

Facts come from the upstream CRDs (autoscaler ``apis/config/crd``, Kueue v0.19 ``config/components/crd``,
KubeRay 1.x); only the facts are carried, in our own compact form. ``BUILTIN_CUSTOM_RESOURCES`` holds, per
resource, what a CRD declares: names, scope, categories, and per version ``served``/``storage``/
``deprecated``/``deprecationWarning``, the OpenAPI v3 schema, the status subresource, ``selectableFields``
and ``additionalPrinterColumns``.

ProvisioningRequest (v1 storage, v1beta1 deprecated; identical schemas) carries every upstream constraint:
``spec`` required with ``podSets`` (1..32 items; ``count`` int32 >= 1; ``podTemplateRef.name`` required,
<= 253, DNS-subdomain pattern) and ``provisioningClassName`` (<= 253, same pattern); ``parameters``
(<= 100 entries, values <= 255); the ``self == oldSelf`` / ``Value is immutable`` rules on each of those
three spec fields (upstream puts them there, not on ``spec``); ``status.conditions`` as metav1.Condition,
list-type map keyed by ``type``; ``provisioningClassDetails`` (<= 64 entries, values <= 32768).

Kueue (v1beta2 storage, v1beta1 deprecated), Ray (v1 storage, v1alpha1 deprecated) and JobSet
(``jobset.x-k8s.io/v1alpha2`` only, no short names or categories, as upstream) are lightweight:
``spec`` and ``status`` are ``x-kubernetes-preserve-unknown-fields`` objects that declare only
- the list-type=map lists of ``status`` (and Workload ``spec.podSets``/``preemptionGates``), with their keys,
  key defaults and upstream ``required`` item fields, so server-side apply merges them like a real server;
- metav1.Condition lists with the full condition schema (the same as ProvisioningRequest's);
- the ``self == oldSelf`` immutability rules of AdmissionCheck ``spec.controllerName``, LocalQueue
  ``spec.clusterQueue``, Ray ``spec.managedBy`` and ``gcsFaultToleranceOptions.backend``, JobSet
  ``spec.failurePolicy``/``network``/``successPolicy``;
- JobSet ``status.replicatedJobsStatus`` (map list by ``name``) and its scalar status fields;
- WorkloadPriorityClass's top-level ``value`` (int32, required) and ``description`` (it has no spec).
NOT carried for Kueue/Ray/JobSet: every other field schema (types, enums, patterns, minimums, defaults), the
other CEL rules (e.g. Workload's quota-reservation immutability, ClusterQueue cohort rules, ResourceFlavor
topology rules, Ray ``managedBy`` allowed values), list-type markers nested in pod templates and in
ClusterQueue/ProvisioningRequestConfig spec, and ``x-kubernetes-map-type: atomic`` markers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.sim.apiserver.jsoncopy import json_copy

Schema = dict[str, Any]


@dataclass(frozen=True)
class CustomResourceVersion:
    name: str
    schema: Mapping[str, Any]
    served: bool = True
    storage: bool = False
    deprecated: bool = False
    deprecation_warning: str | None = None
    has_status_subresource: bool = True
    selectable_fields: tuple[str, ...] = ()  # JSON paths without the leading dot
    printer_columns: tuple[Mapping[str, Any], ...] = ()  # CRD additionalPrinterColumns entries


@dataclass(frozen=True)
class CustomResourceSpec:
    group: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    versions: tuple[CustomResourceVersion, ...]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage_version(self) -> str:
        return next(v.name for v in self.versions if v.storage)

    def version(self, name: str) -> CustomResourceVersion | None:
        return next((v for v in self.versions if v.name == name), None)

    def schema(self, version: str) -> Schema:
        """A private deep copy of a version's schema (the table itself must stay unchanged)."""
        found = self.version(version)
        return json_copy(dict(found.schema)) if found else {}


# --- schema building blocks -----------------------------------------------------------------------------

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_TYPE_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                          r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")


def _str(**kw: Any) -> Schema:
    return {"type": "string", **kw}


def _int(fmt: str = "int32", **kw: Any) -> Schema:
    return {"type": "integer", "format": fmt, **kw}


def _obj(props: Mapping[str, Schema] | None = None, required: Sequence[str] = (), **kw: Any) -> Schema:
    out: Schema = {"type": "object"}
    if props:
        out["properties"] = dict(props)
    if required:
        out["required"] = list(required)
    return {**out, **kw}


def _open(props: Mapping[str, Schema] | None = None, required: Sequence[str] = ()) -> Schema:
    """An object that keeps unknown fields; only ``props`` are declared."""
    return _obj(props, required, **{"x-kubernetes-preserve-unknown-fields": True})


def _immutable(message: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": message}]}


def _map_list(keys: Sequence[str], item: Schema) -> Schema:
    return {"type": "array", "items": item, "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": list(keys)}


def _named_list(required: Sequence[str] = ("name",), *, default: str | None = None,
                **props: Schema) -> Schema:
    """A map list keyed by ``name``, items otherwise open."""
    key = _str(default=default) if default is not None else _str()
    return _map_list(["name"], _open({"name": key, **props}, required))


def condition_schema() -> Schema:
    """metav1.Condition as controller-gen emits it."""
    return _obj({
        "lastTransitionTime": _str(format="date-time"),
        "message": _str(maxLength=32768),
        "observedGeneration": _int("int64", minimum=0),
        "reason": _str(maxLength=1024, minLength=1, pattern=CONDITION_REASON_PATTERN),
        "status": _str(enum=["True", "False", "Unknown"]),
        "type": _str(maxLength=316, pattern=CONDITION_TYPE_PATTERN),
    }, required=("lastTransitionTime", "message", "reason", "status", "type"))


def _conditions() -> Schema:
    return _map_list(["type"], condition_schema())


def _root(required: Sequence[str] = (), **props: Schema) -> Schema:
    base = {"apiVersion": _str(), "kind": _str(), "metadata": _obj()}
    return _obj({**base, **props}, required)


# --- ProvisioningRequest --------------------------------------------------------------------------------

def provisioning_request_schema() -> Schema:
    dns_name = {"maxLength": 253, "pattern": DNS_SUBDOMAIN_PATTERN}
    pod_set = _obj({
        "count": _int(minimum=1),
        "podTemplateRef": _obj({"name": _str(**dns_name)}, required=("name",)),
    }, required=("count", "podTemplateRef"))
    spec = _obj({
        "parameters": _obj(additionalProperties=_str(maxLength=255), maxProperties=100,
                           **_immutable("Value is immutable")),
        "podSets": {"type": "array", "items": pod_set, "maxItems": 32, "minItems": 1,
                    **_immutable("Value is immutable")},
        "provisioningClassName": _str(**dns_name, **_immutable("Value is immutable")),
    }, required=("podSets", "provisioningClassName"))
    status = _obj({
        "conditions": _conditions(),
        "provisioningClassDetails": _obj(additionalProperties=_str(maxLength=32768), maxProperties=64),
    })
    return _root(("spec",), spec=spec, status=status)


# --- Kueue ----------------------------------------------------------------------------------------------

def _usage_list() -> Schema:
    """ClusterQueue/LocalQueue flavor usage: by flavor name, then by resource name."""
    return _named_list(("name", "resources"), resources=_named_list())


def workload_schema(v1beta2: bool) -> Schema:
    spec_props: dict[str, Schema] = {
        "podSets": _named_list(("template",) if v1beta2 else ("count", "template"), default="main"),
    }
    status_props: dict[str, Schema] = {
        "admission": _open({"podSetAssignments": _named_list(() if v1beta2 else ("name",), default="main")}),
        "admissionChecks": _named_list(("lastTransitionTime", "message", "name", "state")),
        "conditions": _conditions(),
        "reclaimablePods": _named_list(("count", "name")),
        "resourceRequests": _named_list(),
        "schedulingStats": _open({"evictions": _map_list(
            ["reason", "underlyingCause"],
            _open({"reason": _str(), "underlyingCause": _str()}, ("count", "reason", "underlyingCause")))}),
    }
    if v1beta2:
        spec_props["preemptionGates"] = _named_list()
        status_props["preemptionGates"] = _named_list(("lastTransitionTime", "name", "position"))
        status_props["unhealthyNodes"] = _named_list()
    return _root(spec=_open(spec_props, ("podSets",)), status=_open(status_props))


def admission_check_schema(v1beta2: bool) -> Schema:
    name = _str(**({"maxLength": 253, "minLength": 1} if v1beta2 else {}), **_immutable("field is immutable"))
    return _root(spec=_open({"controllerName": name}, ("controllerName",)),
                 status=_open({"conditions": _conditions()}))


def cluster_queue_schema() -> Schema:
    return _root(spec=_open(), status=_open({"conditions": _conditions(), "flavorsReservation": _usage_list(),
                                             "flavorsUsage": _usage_list()}))


def local_queue_schema(v1beta2: bool) -> Schema:
    cq = _str(maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN, **_immutable("field is immutable"))
    status: dict[str, Schema] = {"conditions": _conditions(), "flavorsReservation": _usage_list()}
    if v1beta2:
        status["flavorsUsage"] = _usage_list()
    else:
        status["flavorUsage"] = _usage_list()
        status["flavors"] = _named_list(resources={"type": "array", "items": _str(),
                                                   "x-kubernetes-list-type": "set"})
    return _root(spec=_open({"clusterQueue": cq}), status=_open(status))


def spec_only_schema() -> Schema:
    """ProvisioningRequestConfig and ResourceFlavor: no status, spec kept as sent."""
    return _root(spec=_open())


def workload_priority_class_schema(v1beta2: bool) -> Schema:
    description = _str(maxLength=2048) if v1beta2 else _str()
    return _root(("value",), description=description, value=_int())


# --- Ray ------------------------------------------------------------------------------------------------

def _ray_cluster_spec() -> dict[str, Schema]:
    return {
        "gcsFaultToleranceOptions": _open({"backend": _str(
            enum=["redis", "rocksdb"], **_immutable("gcsFaultToleranceOptions.backend is immutable"))}),
        "managedBy": _str(**_immutable("the managedBy field is immutable")),
    }


def ray_cluster_schema() -> Schema:
    return _root(spec=_open(_ray_cluster_spec()), status=_open({"conditions": _conditions()}))


def ray_job_schema() -> Schema:
    spec = _open({"managedBy": _str(**_immutable("the managedBy field is immutable")),
                  "rayClusterSpec": _open(_ray_cluster_spec())})
    return _root(spec=spec, status=_open({"rayClusterStatus": _open({"conditions": _conditions()})}))


def open_schema() -> Schema:
    """Deprecated Ray v1alpha1: nothing declared beyond spec/status."""
    return _root(spec=_open(), status=_open())


# --- JobSet ---------------------------------------------------------------------------------------------

def jobset_schema() -> Schema:
    """JobSet v1alpha2: the spec fields upstream makes immutable by CEL, the status map lists."""
    def immutable() -> Schema:
        return _open() | _immutable("Value is immutable")

    spec = _open({"failurePolicy": immutable(), "network": immutable(), "successPolicy": immutable(),
                  "suspend": {"type": "boolean"}})
    replicated_job_status = _map_list(["name"], _open(
        {"name": _str(), **{k: _int() for k in ("active", "failed", "ready", "succeeded", "suspended")}},
        ("active", "failed", "name", "ready", "succeeded", "suspended")))
    status = _open({"conditions": _conditions(), "replicatedJobsStatus": replicated_job_status,
                    "restarts": _int(), "restartsCountTowardsMax": _int(), "terminalState": _str()})
    return _root(spec=spec, status=status)


# --- the table ------------------------------------------------------------------------------------------

def _cols(*specs: tuple[Any, ...]) -> tuple[Mapping[str, Any], ...]:
    """Printer columns from ``(name, type, jsonPath[, priority])``; descriptions are not carried."""
    out = []
    for name, kind, path, *priority in specs:
        col: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
        if priority:
            col["priority"] = priority[0]
        out.append(col)
    return tuple(out)


_AGE = ("Age", "date", ".metadata.creationTimestamp")
_KUEUE_DEPRECATED = "This version is deprecated. Use v1beta2 instead."


def _kueue(kind: str, plural: str, short: tuple[str, ...], namespaced: bool, schema_for: Any, *,
           status: bool = True, columns: tuple[Mapping[str, Any], ...] = (),
           columns_v1beta1: tuple[Mapping[str, Any], ...] | None = None,
           selectable: tuple[str, ...] = ()) -> CustomResourceSpec:
    """Both Kueue versions; ``schema_for(v1beta2: bool)`` builds each version's schema."""
    return CustomResourceSpec(
        group="kueue.x-k8s.io", kind=kind, plural=plural, singular=kind.lower(), namespaced=namespaced,
        short_names=short,
        versions=(
            CustomResourceVersion("v1beta2", schema_for(True), storage=True, has_status_subresource=status,
                                  selectable_fields=selectable, printer_columns=columns),
            CustomResourceVersion("v1beta1", schema_for(False), deprecated=True,
                                  deprecation_warning=_KUEUE_DEPRECATED, has_status_subresource=status,
                                  printer_columns=columns if columns_v1beta1 is None else columns_v1beta1),
        ),
    )


def _ray(kind: str, plural: str, schema: Schema,
         columns: tuple[Mapping[str, Any], ...]) -> CustomResourceSpec:
    warning = (f"ray.io/v1alpha1 {kind} is deprecated; use ray.io/v1 {kind}. v1alpha1 receives no new fields "
               "and will be unavailable in KubeRay 1.9.")
    return CustomResourceSpec(
        group="ray.io", kind=kind, plural=plural, singular=kind.lower(), namespaced=True, categories=("all",),
        versions=(
            CustomResourceVersion("v1", schema, storage=True, printer_columns=columns),
            CustomResourceVersion("v1alpha1", open_schema(), deprecated=True, deprecation_warning=warning,
                                  printer_columns=columns if kind == "RayCluster" else ()),
        ),
    )


# Kueue v0.19 and KubeRay 1.7 declare these (tests/crds/); tests/apiserver/test_tables.py compares them.
_CQ_COLUMNS = (("Strategy", "string", ".spec.queueingStrategy", 1),
               ("Pending Workloads", "integer", ".status.pendingWorkloads"),
               ("Admitted Workloads", "integer", ".status.admittedWorkloads", 1))
_LQ_COLUMNS = _cols(("ClusterQueue", "string", ".spec.clusterQueue"),
                    ("Pending Workloads", "integer", ".status.pendingWorkloads"),
                    ("Admitted Workloads", "integer", ".status.admittedWorkloads"))
_WORKLOAD_COLUMNS = _cols(
    ("Queue", "string", ".spec.queueName"), ("Reserved in", "string", ".status.admission.clusterQueue"),
    ("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status"),
    ("Finished", "string", ".status.conditions[?(@.type=='Finished')].status"), _AGE)
_RAY_CLUSTER_COLUMNS = _cols(
    ("desired workers", "integer", ".status.desiredWorkerReplicas"),
    ("available workers", "integer", ".status.availableWorkerReplicas"),
    ("cpus", "string", ".status.desiredCPU"), ("memory", "string", ".status.desiredMemory"),
    ("gpus", "string", ".status.desiredGPU"), ("tpus", "string", ".status.desiredTPU", 1),
    ("status", "string", ".status.state"), ("age", "date", ".metadata.creationTimestamp"),
    ("head pod IP", "string", ".status.head.podIP", 1), ("head service IP", "string", ".status.head.serviceIP", 1))
_RAY_JOB_COLUMNS = _cols(
    ("job status", "string", ".status.jobStatus"),
    ("deployment status", "string", ".status.jobDeploymentStatus"),
    ("ray cluster name", "string", ".status.rayClusterName"), ("start time", "string", ".status.startTime"),
    ("end time", "string", ".status.endTime"), ("age", "date", ".metadata.creationTimestamp"))

_JOBSET_COLUMNS = (
    {"name": "TerminalState", "type": "string", "jsonPath": ".status.terminalState",
     "description": "Final state of JobSet"},
    {"name": "Restarts", "type": "string", "jsonPath": ".status.restarts", "description": "Number of restarts"},
    {"name": "Completed", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Completed")].status'},
    {"name": "Suspended", "type": "string", "jsonPath": ".spec.suspend", "description": "JobSet suspended"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
     "description": "Time this JobSet was created"},
)

JOBSET = CustomResourceSpec(
    group="jobset.x-k8s.io", kind="JobSet", plural="jobsets", singular="jobset", namespaced=True,
    versions=(CustomResourceVersion("v1alpha2", jobset_schema(), storage=True, printer_columns=_JOBSET_COLUMNS),),
)

PROVISIONING_REQUEST = CustomResourceSpec(
    group="autoscaling.x-k8s.io", kind="ProvisioningRequest", plural="provisioningrequests",
    singular="provisioningrequest", namespaced=True, short_names=("provreq", "provreqs"),
    versions=(
        CustomResourceVersion("v1", provisioning_request_schema(), storage=True, printer_columns=_cols(_AGE)),
        # Upstream's warning names the wrong group (autoscaling.k8s.io); kept verbatim.
        CustomResourceVersion("v1beta1", provisioning_request_schema(), deprecated=True,
                              deprecation_warning="autoscaling.k8s.io/v1beta1 API is deprecated",
                              printer_columns=_cols(_AGE)),
    ),
)

BUILTIN_CUSTOM_RESOURCES: list[CustomResourceSpec] = [
    PROVISIONING_REQUEST,
    _kueue("Workload", "workloads", ("kwl", "kueueworkload", "kueueworkloads"), True, workload_schema,
           columns=_WORKLOAD_COLUMNS, selectable=("status.admission.clusterQueue",)),
    _kueue("AdmissionCheck", "admissionchecks", ("ac",), False, admission_check_schema),
    _kueue("ProvisioningRequestConfig", "provisioningrequestconfigs", ("prc",), False,
           lambda _v: spec_only_schema(), status=False),
    _kueue("ClusterQueue", "clusterqueues", ("cq",), False, lambda _v: cluster_queue_schema(),
           columns=_cols(("Cohort", "string", ".spec.cohortName"), *_CQ_COLUMNS),
           columns_v1beta1=_cols(("Cohort", "string", ".spec.cohort"), *_CQ_COLUMNS)),
    _kueue("LocalQueue", "localqueues", ("queue", "queues", "lq"), True, local_queue_schema,
           columns=_LQ_COLUMNS),
    _kueue("ResourceFlavor", "resourceflavors", ("flavor", "flavors", "rf"), False,
           lambda _v: spec_only_schema(), status=False),
    _kueue("WorkloadPriorityClass", "workloadpriorityclasses", ("wpc",), False,
           workload_priority_class_schema, status=False, columns=_cols(("Value", "integer", ".value"))),
    _ray("RayCluster", "rayclusters", ray_cluster_schema(), _RAY_CLUSTER_COLUMNS),
    _ray("RayJob", "rayjobs", ray_job_schema(), _RAY_JOB_COLUMNS),
    JOBSET,
]
