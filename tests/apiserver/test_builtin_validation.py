"""Built-in pod specs (Pod, PodTemplate, Job template) are validated as kube-apiserver 1.36 does.

Every case goes over HTTP through the production client and checks the status code, reason, the
``details.causes`` (reason, field, message) and, where given, the whole top-level message.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gangscale.kube.resources import JOBS, PODS, PODTEMPLATES
from gangscale.kube.transport import KubeHTTP
from tests.apiserver.validation_support import DUP, ENUM, FORB, INV, JSON, NS, REQ, Cause, causes_of, rejected

MERGE = "application/merge-patch+json"
QTY_RE = "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
FPGA = "example.com/fpga"
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
             "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
             "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex "
             "used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def container(**over: Any) -> JSON:
    return {"name": "main", "image": "busybox:1.36", **over}


def pod_spec(**over: Any) -> JSON:
    return {"containers": [container()], **over}


def with_resources(spec: JSON, **resources: Any) -> JSON:
    spec["containers"][0]["resources"] = resources
    return spec


def podtemplate(spec: JSON) -> JSON:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": {"spec": spec}}


def pod(spec: JSON) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def job(spec: JSON, **job_spec: Any) -> JSON:
    spec.setdefault("restartPolicy", "Never")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": {"spec": spec}, **job_spec}}


T = "template.spec.containers[0]"
AFF = "template.spec.affinity"
NSTERMS = f"{AFF}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def node_affinity(*exprs: JSON) -> JSON:
    return pod_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}})


TEMPLATE_CASES: list[tuple[str, JSON, list[Cause]]] = [
    ("extended-request-without-limit", with_resources(pod_spec(), requests={FPGA: "1"}),
     [(REQ, f"{T}.resources.limits", "Required value: Limit must be set for non overcommitable resources")]),
    ("extended-request-below-limit", with_resources(pod_spec(), requests={FPGA: 1}, limits={FPGA: 2}),
     [(INV, f"{T}.resources.requests", f'Invalid value: "1": must be equal to {FPGA} limit of 2')]),
    ("cpu-request-above-limit", with_resources(pod_spec(), requests={"cpu": "2"}, limits={"cpu": "1"}),
     [(INV, f"{T}.resources.requests", 'Invalid value: "2": must be less than or equal to cpu limit of 1')]),
    ("request-above-limit-canonical", with_resources(pod_spec(), requests={"memory": "1.5Gi"},
                                                     limits={"memory": "1024Mi"}),
     [(INV, f"{T}.resources.requests", 'Invalid value: "1536Mi": must be less than or equal to memory limit of 1Gi')]),
    ("negative-limit", with_resources(pod_spec(), limits={"memory": "-1Gi"}),
     [(INV, f"{T}.resources.limits[memory]", 'Invalid value: "-1Gi": must be greater than or equal to 0'),
      (INV, f"{T}.resources.requests[memory]", 'Invalid value: "-1Gi": must be greater than or equal to 0')]),
    ("fractional-extended", with_resources(pod_spec(), limits={FPGA: "0.5"}),
     [(INV, f"{T}.resources.limits[{FPGA}]", 'Invalid value: "500m": must be an integer'),
      (INV, f"{T}.resources.requests[{FPGA}]", 'Invalid value: "500m": must be an integer')]),
    ("unknown-bare-resource", with_resources(pod_spec(), limits={"gpu": "1"}), [  # upstream reports both rules
        (INV, f"{T}.resources.{part}[gpu]", f'Invalid value: "gpu": {why}') for part in ("limits", "requests")
        for why in ("must be a standard resource type or fully qualified",
                    "must be a standard resource for containers")]),
    ("hugepages-alone", with_resources(pod_spec(), limits={"hugepages-2Mi": "2Mi"}),
     [(FORB, f"{T}.resources", "Forbidden: HugePages require cpu or memory")]),
    ("hugepages-not-a-multiple", with_resources(pod_spec(), limits={"hugepages-2Mi": "3Mi", "memory": "1Gi"}),
     [(INV, f"{T}.resources.limits[hugepages-2Mi]", 'Invalid value: "3Mi": 3Mi is not positive integer multiple '
       "of hugepages-2Mi"),
      (INV, f"{T}.resources.requests[hugepages-2Mi]", 'Invalid value: "3Mi": 3Mi is not positive integer multiple '
       "of hugepages-2Mi")]),
    ("no-containers", {"containers": []}, [(REQ, "template.spec.containers", "Required value")]),
    ("container-name-missing", {"containers": [{"image": "busybox"}]}, [(REQ, f"{T}.name", "Required value")]),
    ("container-name-not-a-label", {"containers": [container(name="Main_1")]},
     [(INV, f"{T}.name", f'Invalid value: "Main_1": {LABEL_MSG}')]),
    ("duplicate-name-across-init", pod_spec(initContainers=[container()]),
     [(DUP, "template.spec.initContainers[0].name", 'Duplicate value: "main"')]),
    ("image-missing-in-template", {"containers": [{"name": "main"}]}, [(REQ, f"{T}.image", "Required value")]),
    ("restart-policy", pod_spec(restartPolicy="Sometimes"),
     [(ENUM, "template.spec.restartPolicy",
       'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"')]),
    ("container-restart-policy", {"containers": [container(restartPolicy="Always")]},
     [(FORB, f"{T}.restartPolicy", "Forbidden: may not be set for non-init containers")]),
    ("node-selector-value", pod_spec(nodeSelector={"pool": "bad value!"}),
     [(INV, "template.spec.nodeSelector", f'Invalid value: "bad value!": {VALUE_MSG}')]),
    ("toleration-exists-with-value", pod_spec(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
     [(INV, "template.spec.tolerations[0].operator",
       "Invalid value: \"v\": value must be empty when `operator` is 'Exists'")]),
    ("toleration-seconds-without-noexecute",
     pod_spec(tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]),
     [(INV, "template.spec.tolerations[0].effect",
       "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set")]),
    ("toleration-operator", pod_spec(tolerations=[{"key": "k", "operator": "Has"}]),
     [(ENUM, "template.spec.tolerations[0].operator",
       'Unsupported value: "Has": supported values: "Equal", "Exists"')]),
    ("toleration-effect", pod_spec(tolerations=[{"key": "k", "operator": "Exists", "effect": "Never"}]),
     [(ENUM, "template.spec.tolerations[0].effect",
       'Unsupported value: "Never": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')]),
    ("toleration-empty-key-equal", pod_spec(tolerations=[{"operator": "Equal", "value": "v"}]),
     [(INV, "template.spec.tolerations[0].operator",
       'Invalid value: "Equal": operator must be Exists when `key` is empty, which means "match all values and '
       'all keys"')]),
    ("node-selector-terms-empty",
     pod_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}),
     [(REQ, NSTERMS, "Required value: must have at least one node selector term")]),
    ("node-selector-operator", node_affinity({"key": "zone", "operator": "Like", "values": ["a"]}),
     [(INV, f"{NSTERMS}[0].matchExpressions[0].operator", 'Invalid value: "Like": not a valid selector operator')]),
    ("node-selector-in-without-values", node_affinity({"key": "zone", "operator": "In"}),
     [(REQ, f"{NSTERMS}[0].matchExpressions[0].values",
       "Required value: must be specified when `operator` is 'In' or 'NotIn'")]),
    ("node-selector-exists-with-values", node_affinity({"key": "zone", "operator": "Exists", "values": ["a"]}),
     [(FORB, f"{NSTERMS}[0].matchExpressions[0].values",
       "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")]),
    ("node-selector-gt-two-values", node_affinity({"key": "gen", "operator": "Gt", "values": ["1", "2"]}),
     [(REQ, f"{NSTERMS}[0].matchExpressions[0].values",
       "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'")]),
    ("pod-affinity-selector-operator",
     pod_spec(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
         "topologyKey": "zone",
         "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}}]}}),
     [(INV, f"{AFF}.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0]"
       ".operator", 'Invalid value: "Equals": not a valid selector operator')]),
    ("preferred-weight",
     pod_spec(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
         "weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]}}),
     [(INV, f"{AFF}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
       "Invalid value: 0: must be in the range 1-100")]),
]


@pytest.mark.parametrize(("spec", "want"), [c[1:] for c in TEMPLATE_CASES], ids=[c[0] for c in TEMPLATE_CASES])
async def test_podtemplate_rules(http: KubeHTTP, spec: JSON, want: list[Cause]) -> None:
    err = await rejected(http, "POST", PODTEMPLATES.path(NS), podtemplate(copy.deepcopy(spec)))
    assert (err.status, err.reason) == (422, "Invalid")
    assert causes_of(err) == want
    bodies = list(dict.fromkeys(f"{f}: {m}" for _, f, m in want))
    joined = bodies[0] if len(bodies) == 1 else "[" + ", ".join(bodies) + "]"
    assert err.message == f'PodTemplate "t" is invalid: {joined}'


async def test_the_reported_extended_resource_case_matches_the_real_server(http: KubeHTTP) -> None:
    body = podtemplate(with_resources(pod_spec(), requests={FPGA: 1}))
    err = await rejected(http, "POST", PODTEMPLATES.path(NS), body)
    assert err.message == ('PodTemplate "t" is invalid: template.spec.containers[0].resources.limits: '
                           "Required value: Limit must be set for non overcommitable resources")
    assert err.body["details"] == {"name": "t", "kind": "PodTemplate", "causes": [{
        "reason": REQ, "message": "Required value: Limit must be set for non overcommitable resources",
        "field": "template.spec.containers[0].resources.limits"}]}


ACCEPTED = [
    ("extended-limit-only", with_resources(pod_spec(), limits={FPGA: 2})),
    ("extended-equal", with_resources(pod_spec(), limits={FPGA: "2"}, requests={FPGA: 2})),
    ("kubernetes-io-overcommit", with_resources(pod_spec(), requests={"kubernetes.io/batteries": "1"})),
    ("cpu-below-limit", with_resources(pod_spec(), limits={"cpu": "2"}, requests={"cpu": "500m"})),
    ("hugepages-with-memory", with_resources(pod_spec(), limits={"hugepages-2Mi": "4Mi", "memory": "1Gi"})),
    ("tolerations", pod_spec(tolerations=[{"operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute",
                                                                  "tolerationSeconds": 3}])),
    ("affinity", node_affinity({"key": "zone", "operator": "In", "values": ["a"]},
                               {"key": "gen", "operator": "Lt", "values": ["3"]})),
]


@pytest.mark.parametrize("spec", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
async def test_valid_specs_are_accepted(http: KubeHTTP, spec: JSON) -> None:
    created = await http.request("POST", PODTEMPLATES.path(NS), body=podtemplate(copy.deepcopy(spec)))
    assert created["metadata"]["name"] == "t"


QTY_CASES = [
    ("garbage", "abc", f"quantities must match the regular expression {QTY_RE}"),
    ("trailing-unit", "1Gb", f"quantities must match the regular expression {QTY_RE}"),
    ("unknown-suffix", "1mm", "unable to parse quantity's suffix"),
    ("empty", "", f"quantities must match the regular expression {QTY_RE}"),
    ("bool", True, f"quantities must match the regular expression {QTY_RE}"),
]


@pytest.mark.parametrize(("raw", "why"), [c[1:] for c in QTY_CASES], ids=[c[0] for c in QTY_CASES])
@pytest.mark.parametrize("kind", ["Pod", "PodTemplate", "Job"])
async def test_malformed_quantity_fails_decoding_with_400(http: KubeHTTP, kind: str, raw: Any, why: str) -> None:
    spec = with_resources(pod_spec(), limits={"cpu": raw})
    body, path, version = {"Pod": (pod(spec), PODS.path(NS), "v1"), "PodTemplate": (podtemplate(spec),
                           PODTEMPLATES.path(NS), "v1"), "Job": (job(spec), JOBS.path(NS), "v1")}[kind]
    err = await rejected(http, "POST", path, body)
    assert (err.status, err.reason) == (400, "BadRequest")
    assert err.message == f'{kind} in version "{version}" cannot be handled as a {kind}: {why}'


POD_CASES: list[tuple[str, JSON, list[Cause]]] = [
    ("extended-without-limit", with_resources(pod_spec(), requests={FPGA: "1"}),
     [(REQ, "spec.containers[0].resources.limits", "Required value: Limit must be set for non overcommitable "
       "resources")]),
    ("image-whitespace", {"containers": [container(image=" busybox")]},
     [(INV, "spec.containers[0].image", 'Invalid value: " busybox": must not have leading or trailing whitespace')]),
    ("ephemeral-on-create", pod_spec(ephemeralContainers=[{"name": "dbg", "image": "busybox"}]),
     [(FORB, "spec.ephemeralContainers", "Forbidden: cannot be set on create")]),
    ("node-name-with-gates", pod_spec(nodeName="n1", schedulingGates=[{"name": "example.com/wait"}]),
     [(FORB, "spec.nodeName", "Forbidden: cannot be set until all schedulingGates have been cleared")]),
]


@pytest.mark.parametrize(("spec", "want"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES])
async def test_pod_rules(http: KubeHTTP, spec: JSON, want: list[Cause]) -> None:
    err = await rejected(http, "POST", PODS.path(NS), pod(copy.deepcopy(spec)))
    assert (err.status, err.reason) == (422, "Invalid")
    assert causes_of(err) == want


JT = "spec.template.spec.containers[0]"
JOB_CASES: list[tuple[str, JSON, list[Cause]]] = [
    ("negative-parallelism", job(pod_spec(), parallelism=-1),
     [(INV, "spec.parallelism", "Invalid value: -1: must be greater than or equal to 0")]),
    ("negative-backoff-limit", job(pod_spec(), backoffLimit=-2),
     [(INV, "spec.backoffLimit", "Invalid value: -2: must be greater than or equal to 0")]),
    ("extended-without-limit", job(with_resources(pod_spec(), requests={FPGA: "1"})),
     [(REQ, f"{JT}.resources.limits", "Required value: Limit must be set for non overcommitable resources")]),
    ("restart-policy-unsupported", job(pod_spec(restartPolicy="Sometimes")),
     [(ENUM, "spec.template.spec.restartPolicy",
       'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"'),
      (ENUM, "spec.template.spec.restartPolicy", 'Unsupported value: "Sometimes": supported values: "OnFailure", '
       '"Never"')]),
    ("completion-mode", job(pod_spec(), completionMode="Sometimes"),
     [(ENUM, "spec.completionMode", 'Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"')]),
    ("manual-selector-mismatch",
     {**job(pod_spec(), manualSelector=True, selector={"matchLabels": {"app": "y"}}),
      "spec": {**job(pod_spec())["spec"], "manualSelector": True, "selector": {"matchLabels": {"app": "y"}},
               "template": {"metadata": {"labels": {"app": "x"}}, "spec": {**pod_spec(), "restartPolicy": "Never"}}}},
     [(INV, "spec.template.metadata.labels", 'Invalid value: {"app":"x"}: `selector` does not match template '
       "`labels`")]),
    ("manual-selector-missing",
     {**job(pod_spec()), "spec": {**job(pod_spec())["spec"], "manualSelector": True}},
     [(REQ, "spec.selector", "Required value")]),
]


@pytest.mark.parametrize(("body", "want"), [c[1:] for c in JOB_CASES], ids=[c[0] for c in JOB_CASES])
async def test_job_rules(http: KubeHTTP, body: JSON, want: list[Cause]) -> None:
    err = await rejected(http, "POST", JOBS.path(NS), copy.deepcopy(body))
    assert (err.status, err.reason) == (422, "Invalid")
    assert causes_of(err) == want
    assert err.message.startswith('Job.batch "j" is invalid: ')


async def test_patches_go_through_the_same_validation(http: KubeHTTP) -> None:
    await http.request("POST", PODTEMPLATES.path(NS), body=podtemplate(pod_spec()))
    patch = {"template": {"spec": {"containers": [container(resources={"requests": {FPGA: "1"}})]}}}
    err = await rejected(http, "PATCH", PODTEMPLATES.path(NS, "t"), patch, content_type=MERGE)
    assert (err.status, causes_of(err)) == (422, [(REQ, f"{T}.resources.limits", "Required value: Limit must be set "
                                                   "for non overcommitable resources")])
    patch = {"template": {"spec": {"containers": [container(resources={"limits": {"cpu": "lots"}})]}}}
    err = await rejected(http, "PATCH", PODTEMPLATES.path(NS, "t"), patch, content_type=MERGE)
    assert (err.status, err.reason) == (400, "BadRequest")
    stored = await http.request("GET", PODTEMPLATES.path(NS, "t"))
    assert stored["template"]["spec"]["containers"][0]["resources"] == {}
