"""Per-kind rules the real registries and admission plugins apply on create and update.

What is reproduced, and from where upstream:
- Pods (``pkg/apis/core/v1/defaults.go``, ``pkg/registry/core/pod/strategy.go``, admission plugins
  ``DefaultTolerationSeconds`` and ``Priority``): spec defaults (restartPolicy, dnsPolicy, schedulerName,
  terminationGracePeriodSeconds, enableServiceLinks, container imagePullPolicy / terminationMessage*),
  **requests defaulted from limits** where a container sets limits but not requests, the
  ``not-ready``/``unreachable`` NoExecute tolerations (300 s), ``priority: 0``, ``status.phase: Pending``
  and ``status.qosClass`` on create; spec changes after create limited to images,
  activeDeadlineSeconds, tolerations additions and schedulingGates removal; ``spec.nodeName`` only through
  the ``binding`` subresource.
- PodTemplates: the same pod spec defaults on ``template.spec``.
- Jobs (``pkg/apis/batch/v1/defaults.go``, ``pkg/registry/batch/job/strategy.go``): ``parallelism`` 1 (and
  ``completions`` 1 when neither is set), ``backoffLimit`` 6, ``completionMode: NonIndexed``,
  ``suspend: false``, ``podReplacementPolicy: TerminatingOrFailed`` (``Failed`` with a
  ``podFailurePolicy``), the pod spec defaults on ``spec.template.spec``; unless ``manualSelector`` is true,
  the generated selector ``batch.kubernetes.io/controller-uid: <uid>`` and the template labels
  ``batch.kubernetes.io/controller-uid``, ``batch.kubernetes.io/job-name``, ``controller-uid`` and
  ``job-name``; ``status: {}`` on create. Job validation (restartPolicy included) is ``kindvalidation``'s.
- Secrets (``pkg/apis/core/v1/conversion.go``, ``defaults.go``): ``stringData`` folded into ``data``
  (base64) on create, ``type: Opaque`` by default.
- Nodes (``TaintNodesByCondition`` admission): every new Node gets ``node.kubernetes.io/not-ready:NoSchedule``;
  status may be set on create (nodes allow it, kubelets rely on it).
- Namespaces: ``spec.finalizers: [kubernetes]``, ``status.phase: Active``, label
  ``kubernetes.io/metadata.name``.
- CustomResourceDefinitions: name must be ``<plural>.<group>``, exactly one storage version; on create the
  CRD is established at once (``NamesAccepted`` and ``Established`` True).
- Custom resources with a status subresource: status dropped on create; generation bumped when anything
  but metadata and status changes.

Not reproduced: Secret validation (base64 ``data`` values, key names, per-type required keys, immutability)
and ``stringData`` on update; the ServiceAccount admission plugin (no ``serviceAccountName`` default, no token
volume), LimitRanger and ResourceQuota, pod security admission, node restriction, PriorityClass lookup
(``priorityClassName`` is kept but ``priority`` stays 0 unless set). Jobs: immutable
``selector``/``completionMode``, the template being immutable except for the scheduling directives of a
suspended, never-started Job, and ``batch/v1``'s default ``orphan`` propagation on delete (send
``propagationPolicy`` explicitly, as kubectl does). Defaults are applied on create only (the real server
defaults on every decode).
"""

from __future__ import annotations

import base64
from typing import Any

from gangscale.sim.apiserver.errors import Cause, StatusError, invalid
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.resources import ResourceType

JSON = dict[str, Any]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


# --- pod spec defaults ---------------------------------------------------------------------------------

def _default_container(c: JSON) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image", ""))
    if "imagePullPolicy" not in c:
        tagless = ":" not in image.rsplit("/", 1)[-1] and "@" not in image
        c["imagePullPolicy"] = "Always" if tagless or image.endswith(":latest") else "IfNotPresent"
    res = c.setdefault("resources", {})
    limits = res.get("limits") or {}
    if limits:
        requests = res.setdefault("requests", {})
        for name, qty in limits.items():
            requests.setdefault(name, qty)


def default_pod_spec(spec: JSON) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            if isinstance(c, dict):
                _default_container(c)


def _qos_class(spec: JSON) -> str:
    containers = [c for g in ("initContainers", "containers") for c in spec.get(g) or [] if isinstance(c, dict)]
    requests_any = limits_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        requests_any = requests_any or any(k in req for k in ("cpu", "memory"))
        limits_any = limits_any or any(k in lim for k in ("cpu", "memory"))
        for k in ("cpu", "memory"):
            if k not in lim or req.get(k, lim.get(k)) != lim.get(k):
                guaranteed = False
    if not requests_any and not limits_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_tolerations(spec: JSON) -> None:
    tolerations = spec.setdefault("tolerations", [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if not any((t.get("key") == key and t.get("effect") in ("NoExecute", None, "")) or
                   (t.get("operator") == "Exists" and not t.get("key")) for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": 300})


# --- create ---------------------------------------------------------------------------------------------

def prepare_create(rt: ResourceType, obj: JSON) -> None:
    """Defaults and resets the real registry applies before validating a new object."""
    kind = rt.kind if not rt.custom else ""
    if rt.custom and rt.status_subresource:
        obj.pop("status", None)
    if kind == "Pod":
        spec = obj.setdefault("spec", {})
        default_pod_spec(spec)
        _default_tolerations(spec)
        spec.setdefault("priority", 0)
        if spec.get("priorityClassName") is None:
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
    elif kind == "PodTemplate":
        tmpl_spec = obj.setdefault("template", {}).setdefault("spec", {})
        default_pod_spec(tmpl_spec)
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
        for key, value in (obj.pop("stringData", None) or {}).items():
            obj.setdefault("data", {})[key] = base64.b64encode(str(value).encode()).decode()
    elif kind == "Job":
        _prepare_job(obj)
    elif kind == "Node":
        taints = obj.setdefault("spec", {}).setdefault("taints", [])
        if not any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoSchedule" for t in taints):
            taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    elif kind == "Namespace":
        name = obj["metadata"]["name"]
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif kind == "CustomResourceDefinition":
        _establish_crd(obj)
    if rt.has_generation:
        obj["metadata"]["generation"] = 1


JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"


def _prepare_job(job: JSON) -> None:
    meta = job["metadata"]
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    default_pod_spec(template.setdefault("spec", {}))
    if not spec.get("manualSelector"):
        uid, name = meta["uid"], meta.get("name", "")
        spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update({CONTROLLER_UID_LABEL: uid, JOB_NAME_LABEL: name,
                       LEGACY_CONTROLLER_UID_LABEL: uid, LEGACY_JOB_NAME_LABEL: name})
    job["status"] = {}


def _establish_crd(crd: JSON) -> None:
    names = (crd.get("spec") or {}).get("names") or {}
    accepted = {k: v for k, v in names.items()}
    accepted.setdefault("singular", str(names.get("kind", "")).lower())
    accepted.setdefault("listKind", f"{names.get('kind', '')}List")
    status: JSON = {
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": crd["metadata"]["creationTimestamp"]},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted",
             "lastTransitionTime": crd["metadata"]["creationTimestamp"]},
        ],
        "storedVersions": [v["name"] for v in (crd.get("spec") or {}).get("versions", []) if v.get("storage")],
    }
    crd["status"] = status


_ONE_STORAGE = "must have exactly one version marked as storage version"


def validate_crd(crd: JSON) -> None:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    name = crd["metadata"].get("name", "")
    causes: list[Cause] = []
    expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
    if name != expected:
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                            "metadata.name"))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(Cause("FieldValueRequired", f"Required value: {_ONE_STORAGE}", "spec.versions"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(Cause("FieldValueInvalid",
                            f"Invalid value: {[v.get('name') for v in versions]!r}: {_ONE_STORAGE}",
                            "spec.versions"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(Cause("FieldValueNotSupported",
                            f'Unsupported value: "{spec.get("scope", "")}": supported values: "Cluster", "Namespaced"',
                            "spec.scope"))
    if causes:
        raise invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, causes)


# --- update ---------------------------------------------------------------------------------------------

def reset_for_subresource(rt: ResourceType, old: JSON, new: JSON, subresource: str | None) -> JSON:
    """What a write to the main endpoint or to ``/status`` may change, as the status strategies decide."""
    if subresource == "status":
        if rt.custom or rt.kind == "CustomResourceDefinition":
            out = json_copy(old)
            out["metadata"]["managedFields"] = new.get("metadata", {}).get("managedFields", [])
            if "status" in new:
                out["status"] = json_copy(new["status"])
            else:
                out.pop("status", None)
            return out
        out = dict(new)  # ``new`` is the caller's own fresh object: only the top level changes
        if "spec" in old:
            out["spec"] = json_copy(old["spec"])
        else:
            out.pop("spec", None)
        return out
    if rt.status_subresource:
        out = dict(new)
        if "status" in old:
            out["status"] = json_copy(old["status"])
        else:
            out.pop("status", None)
        return out
    return new


def bump_generation(rt: ResourceType, old: JSON, new: JSON) -> None:
    if not rt.has_generation:
        return
    gen = int(old.get("metadata", {}).get("generation", 1) or 1)

    def body(o: JSON) -> JSON:
        return {k: v for k, v in o.items() if k not in ("metadata", "status", "apiVersion", "kind")}

    changed = body(old) != body(new) if rt.custom else old.get("spec") != new.get("spec")
    new["metadata"]["generation"] = gen + 1 if changed else gen


_POD_MUTABLE_HINT = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def validate_pod_update(old: JSON, new: JSON) -> None:
    """Pod specs are immutable but for a few fields; ``nodeName`` is set only through binding."""
    o, n = json_copy(old.get("spec") or {}), json_copy(new.get("spec") or {})
    for group in ("containers", "initContainers"):
        for oc, nc in zip(o.get(group) or [], n.get(group) or [], strict=False):
            if isinstance(oc, dict) and isinstance(nc, dict):
                oc["image"] = nc.get("image")
    o["activeDeadlineSeconds"] = n.get("activeDeadlineSeconds")
    old_tol = o.get("tolerations") or []
    new_tol = n.get("tolerations") or []
    if all(t in new_tol for t in old_tol):
        o["tolerations"] = new_tol
    old_gates = o.get("schedulingGates") or []
    new_gates = n.get("schedulingGates") or []
    if all(g in old_gates for g in new_gates):
        o["schedulingGates"] = new_gates
    for d in (o, n):
        for k in ("activeDeadlineSeconds", "schedulingGates"):
            if d.get(k) in (None, []):
                d.pop(k, None)
    if o != n:
        name = new.get("metadata", {}).get("name", "")
        raise StatusError(
            422, "Invalid", f'Pod "{name}" is invalid: {_POD_MUTABLE_HINT}', kind="Pod", name=name,
            causes=[Cause("FieldValueForbidden", _POD_MUTABLE_HINT.split(": ", 1)[1], "spec")],
        )
