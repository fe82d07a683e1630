"""Pod specs validated as ``pkg/apis/core/validation`` ``ValidatePodSpec`` / ``ValidatePodTemplateSpec`` do.

Reproduces (Kubernetes 1.36), with upstream's field paths and messages:

- containers: ``spec.containers`` required; each name required and a DNS-1123 label, unique across
  containers and initContainers (``Duplicate value``); ``image`` required (templates included);
  ``terminationMessagePolicy`` and ``imagePullPolicy`` values; ``restartPolicy`` forbidden on regular
  containers; lifecycle/probes forbidden on init containers without ``restartPolicy: Always``; resources
  (``resourcevalidation``); for Pods only, an image with surrounding whitespace;
- ``restartPolicy``, ``dnsPolicy``, ``preemptionPolicy`` values (``Unsupported value``);
  ``nodeSelector`` label keys/values; ``nodeName``, ``priorityClassName`` (DNS subdomains), ``hostname``,
  ``subdomain`` (DNS labels), ``activeDeadlineSeconds`` range, ``schedulingGates`` names and duplicates;
- tolerations (``ValidateTolerations``): key a label name, empty key only with ``Exists``, ``Exists``
  without a value, values a label value, operator ``Equal``/``Exists``, effect values,
  ``tolerationSeconds`` only with ``NoExecute``;
- affinity: node selector terms required under ``requiredDuringScheduling...``, operators and their
  value counts (In/NotIn need values, Exists/DoesNotExist take none, Gt/Lt exactly one), keys and values,
  ``matchFields`` (only ``metadata.name`` with one value), preferred weights 1-100; pod (anti-)affinity
  label selectors and namespace selectors (``ValidateLabelSelector``), topologyKey required;
- the template wrapper: ``<path>.labels`` / ``<path>.annotations`` (upstream's paths, without
  ``metadata``), ephemeral containers forbidden in templates.

Fields the registry always defaults (``terminationGracePeriodSeconds``, ``dnsPolicy``, ``restartPolicy``,
``terminationMessagePolicy``, ``imagePullPolicy``) are not reported missing: our server defaults only on
create, the real one on every decode. Not validated: volumes and volume mounts, ports, env / envFrom,
probes' contents, security contexts, DNS config, host aliases, topology spread constraints, overhead,
resource claims, OS-specific rules, annotations with pod-specific meaning.
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.fielderrors import FieldError
from gangscale.sim.apiserver.metavalidation import (
    annotation_errors,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_value,
    is_qualified_name,
    label_errors,
)
from gangscale.sim.apiserver.resourcevalidation import as_dict, requirements_errors

JSON = dict[str, Any]

_INIT_ONLY = "may not be set for init containers without restartPolicy=Always"
_MAX_INT32 = 2147483647


def _dicts(v: Any) -> list[JSON]:
    return [x if isinstance(x, dict) else {} for x in v] if isinstance(v, list) else []


def _enum(value: Any, path: str, allowed: list[str]) -> list[FieldError]:
    """An optional enum: absent is fine (defaulted), anything else must be listed."""
    if value in (None, "") or value in allowed:
        return []
    return [fe.not_supported(path, value, allowed)]


def label_name_errors(key: str, path: str) -> list[FieldError]:
    return [fe.invalid(path, key, m) for m in is_qualified_name(key)]


def _container_common(c: JSON, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    name = c.get("name") or ""
    name_path = fe.child(path, "name")
    errs += [fe.required(name_path)] if not name else \
        [fe.invalid(name_path, name, m) for m in is_dns1123_label(str(name))]
    if not c.get("image"):
        errs.append(fe.required(fe.child(path, "image")))
    errs += _enum(c.get("terminationMessagePolicy"), fe.child(path, "terminationMessagePolicy"),
                  ["File", "FallbackToLogsOnError"])
    errs += _enum(c.get("imagePullPolicy"), fe.child(path, "imagePullPolicy"), ["Always", "IfNotPresent", "Never"])
    errs += requirements_errors(c.get("resources"), fe.child(path, "resources"))
    return errs


def _containers(spec: JSON, path: str) -> list[FieldError]:
    cpath = fe.child(path, "containers")
    containers = _dicts(spec.get("containers"))
    if not containers:
        return [fe.required(cpath)]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, c in enumerate(containers):
        p = fe.index(cpath, i)
        errs += _container_common(c, p)
        name = str(c.get("name") or "")
        if name in seen:
            errs.append(fe.duplicate(fe.child(p, "name"), name))
        seen.add(name)
        if c.get("restartPolicy") is not None:
            errs.append(fe.forbidden(fe.child(p, "restartPolicy"), "may not be set for non-init containers"))
    return errs


def _init_containers(spec: JSON, path: str) -> list[FieldError]:
    ipath = fe.child(path, "initContainers")
    seen = {str(c.get("name") or "") for c in _dicts(spec.get("containers"))}
    errs: list[FieldError] = []
    for i, c in enumerate(_dicts(spec.get("initContainers"))):
        p = fe.index(ipath, i)
        errs += _container_common(c, p)
        name = str(c.get("name") or "")
        if name in seen:
            errs.append(fe.duplicate(fe.child(p, "name"), name))
        elif name:
            seen.add(name)
        if c.get("restartPolicy") != "Always":
            for key in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
                if c.get(key) is not None:
                    errs.append(fe.forbidden(fe.child(p, key), _INIT_ONLY))
    return errs


def _names(spec: JSON, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for key, check in (("nodeName", is_dns1123_subdomain), ("priorityClassName", is_dns1123_subdomain),
                       ("hostname", is_dns1123_label), ("subdomain", is_dns1123_label)):
        value = spec.get(key)
        if value:
            errs += [fe.invalid(fe.child(path, key), value, m) for m in check(str(value))]
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not 1 <= deadline <= _MAX_INT32:
        errs.append(fe.invalid(fe.child(path, "activeDeadlineSeconds"), deadline,
                               f"must be between 1 and {_MAX_INT32}, inclusive"))
    gates_path = fe.child(path, "schedulingGates")
    seen: set[str] = set()
    for i, gate in enumerate(_dicts(spec.get("schedulingGates"))):
        name = str(gate.get("name") or "")
        errs += label_name_errors(name, fe.index(gates_path, i))
        if name in seen:
            errs.append(fe.duplicate(fe.index(gates_path, i), name))
        seen.add(name)
    return errs


def toleration_errors(tolerations: Any, path: str) -> list[FieldError]:
    """``ValidateTolerations``."""
    errs: list[FieldError] = []
    for i, t in enumerate(_dicts(tolerations)):
        p = fe.index(path, i)
        key, op, value = str(t.get("key") or ""), t.get("operator") or "", str(t.get("value") or "")
        effect = t.get("effect") or ""
        if key:
            errs += label_name_errors(key, fe.child(p, "key"))
        if not key and op != "Exists":
            errs.append(fe.invalid(fe.child(p, "operator"), op,
                                   'operator must be Exists when `key` is empty, which means "match all values and '
                                   'all keys"'))
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(fe.invalid(fe.child(p, "effect"), effect,
                                   "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if op in ("Equal", ""):
            msgs = is_label_value(value)
            if msgs:
                errs.append(fe.invalid(fe.child(p, "operator"), value, ";".join(msgs)))
        elif op == "Exists":
            if value:
                errs.append(fe.invalid(fe.child(p, "operator"), value,
                                       "value must be empty when `operator` is 'Exists'"))
        else:
            errs.append(fe.not_supported(fe.child(p, "operator"), op, ["Equal", "Exists"]))
        if effect:
            errs += _enum(effect, fe.child(p, "effect"), ["NoSchedule", "PreferNoSchedule", "NoExecute"])
    return errs


def _node_requirement(rq: JSON, path: str, check_values: bool) -> list[FieldError]:
    op, values = rq.get("operator") or "", [str(v) for v in rq.get("values") or []]
    vpath = fe.child(path, "values")
    errs: list[FieldError] = []
    if op in ("In", "NotIn"):
        if not values:
            errs.append(fe.required(vpath, "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist"):
        if values:
            errs.append(fe.forbidden(vpath, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            errs.append(fe.required(vpath, "must be specified single value when `operator` is 'Lt' or 'Gt'"))
    else:
        errs.append(fe.invalid(fe.child(path, "operator"), op, "not a valid selector operator"))
    errs += label_name_errors(str(rq.get("key") or ""), fe.child(path, "key"))
    if check_values:
        errs += [fe.invalid(fe.index(vpath, i), v, m) for i, v in enumerate(values) for m in is_label_value(v)]
    return errs


def _field_requirement(rq: JSON, path: str) -> list[FieldError]:
    op, values = rq.get("operator") or "", [str(v) for v in rq.get("values") or []]
    errs: list[FieldError] = []
    if op in ("In", "NotIn"):
        if len(values) != 1:
            errs.append(fe.required(fe.child(path, "values"), "must be only one value when `operator` is 'In' or "
                                    "'NotIn' for node field selector"))
    else:
        errs.append(fe.invalid(fe.child(path, "operator"), op, "not a valid selector operator"))
    key = rq.get("key") or ""
    if key != "metadata.name":
        errs.append(fe.invalid(fe.child(path, "key"), key, "not a valid field selector key"))
    else:
        errs += [fe.invalid(fe.index(fe.child(path, "values"), i), v, m)
                 for i, v in enumerate(values) for m in is_dns1123_subdomain(v)]
    return errs


def _node_selector_term(term: JSON, path: str, check_values: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    for j, rq in enumerate(_dicts(term.get("matchExpressions"))):
        errs += _node_requirement(rq, fe.index(fe.child(path, "matchExpressions"), j), check_values)
    for j, rq in enumerate(_dicts(term.get("matchFields"))):
        errs += _field_requirement(rq, fe.index(fe.child(path, "matchFields"), j))
    return errs


def _node_affinity(na: JSON, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    required = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, dict):
        terms_path = fe.child(fe.child(path, "requiredDuringSchedulingIgnoredDuringExecution"), "nodeSelectorTerms")
        terms = _dicts(required.get("nodeSelectorTerms"))
        if not terms:
            errs.append(fe.required(terms_path, "must have at least one node selector term"))
        for i, term in enumerate(terms):
            errs += _node_selector_term(term, fe.index(terms_path, i), True)
    preferred_path = fe.child(path, "preferredDuringSchedulingIgnoredDuringExecution")
    for i, pref in enumerate(_dicts(na.get("preferredDuringSchedulingIgnoredDuringExecution"))):
        weight = pref.get("weight", 0)
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            errs.append(fe.invalid(fe.child(fe.index(preferred_path, i), "weight"), weight,
                                   "must be in the range 1-100"))
        errs += _node_selector_term(pref.get("preference") or {}, fe.child(fe.index(preferred_path, i), "preference"),
                                    False)
    return errs


def label_selector_errors(selector: Any, path: str) -> list[FieldError]:
    """``metav1validation.ValidateLabelSelector`` (invalid label values not allowed)."""
    if not isinstance(selector, dict):
        return []
    errs = label_errors(selector.get("matchLabels") or {}, fe.child(path, "matchLabels"))
    for i, rq in enumerate(_dicts(selector.get("matchExpressions"))):
        p = fe.index(fe.child(path, "matchExpressions"), i)
        op, values = rq.get("operator") or "", [str(v) for v in rq.get("values") or []]
        if op in ("In", "NotIn"):
            if not values:
                errs.append(fe.required(fe.child(p, "values"), "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(fe.forbidden(fe.child(p, "values"),
                                         "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            errs.append(fe.invalid(fe.child(p, "operator"), op, "not a valid selector operator"))
        errs += label_name_errors(str(rq.get("key") or ""), fe.child(p, "key"))
        errs += [fe.invalid(fe.index(fe.child(p, "values"), j), v, m)
                 for j, v in enumerate(values) for m in is_label_value(v)]
    return errs


def _pod_affinity_term(term: JSON, path: str) -> list[FieldError]:
    errs = label_selector_errors(term.get("labelSelector"), fe.child(path, "labelSelector"))
    errs += label_selector_errors(term.get("namespaceSelector"), fe.child(path, "namespaceSelector"))
    for ns in term.get("namespaces") or []:
        errs += [fe.invalid(fe.child(path, "namespace"), ns, m) for m in is_dns1123_label(str(ns))]
    key = str(term.get("topologyKey") or "")
    if not key:
        errs.append(fe.required(fe.child(path, "topologyKey"), "can not be empty"))
    return errs + label_name_errors(key, fe.child(path, "topologyKey"))


def _pod_affinity(pa: JSON, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    req_path = fe.child(path, "requiredDuringSchedulingIgnoredDuringExecution")
    for i, term in enumerate(_dicts(pa.get("requiredDuringSchedulingIgnoredDuringExecution"))):
        errs += _pod_affinity_term(term, fe.index(req_path, i))
    pref_path = fe.child(path, "preferredDuringSchedulingIgnoredDuringExecution")
    for i, wt in enumerate(_dicts(pa.get("preferredDuringSchedulingIgnoredDuringExecution"))):
        weight = wt.get("weight", 0)
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            errs.append(fe.invalid(fe.child(fe.index(pref_path, i), "weight"), weight, "must be in the range 1-100"))
        errs += _pod_affinity_term(wt.get("podAffinityTerm") or {}, fe.child(fe.index(pref_path, i), "podAffinityTerm"))
    return errs


def affinity_errors(affinity: Any, path: str) -> list[FieldError]:
    if not isinstance(affinity, dict):
        return []
    errs: list[FieldError] = []
    if isinstance(affinity.get("nodeAffinity"), dict):
        errs += _node_affinity(affinity["nodeAffinity"], fe.child(path, "nodeAffinity"))
    for key in ("podAffinity", "podAntiAffinity"):
        if isinstance(affinity.get(key), dict):
            errs += _pod_affinity(affinity[key], fe.child(path, key))
    return errs


def pod_spec_errors(spec: Any, path: str) -> list[FieldError]:
    """``ValidatePodSpec`` (the parts listed in the module docstring)."""
    s = spec if isinstance(spec, dict) else {}
    errs = _containers(s, path) + _init_containers(s, path)
    errs += _enum(s.get("restartPolicy"), fe.child(path, "restartPolicy"), ["Always", "OnFailure", "Never"])
    errs += _enum(s.get("dnsPolicy"), fe.child(path, "dnsPolicy"),
                  ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"])
    errs += label_errors(s.get("nodeSelector") or {}, fe.child(path, "nodeSelector"))
    errs += affinity_errors(s.get("affinity"), fe.child(path, "affinity"))
    errs += _names(s, path)
    errs += toleration_errors(s.get("tolerations"), fe.child(path, "tolerations"))
    errs += _enum(s.get("preemptionPolicy"), fe.child(path, "preemptionPolicy"), ["PreemptLowerPriority", "Never"])
    return errs


def pod_errors(pod: JSON, *, create: bool) -> list[FieldError]:
    """``ValidatePodCreate`` / the spec half of ``ValidatePodUpdate`` (metadata is validated elsewhere)."""
    spec = as_dict(pod.get("spec"))
    errs = pod_spec_errors(spec, "spec")
    if create and spec.get("ephemeralContainers"):
        errs.append(fe.forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if create and spec.get("nodeName") and spec.get("schedulingGates"):
        errs.append(fe.forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    for group in ("containers", "initContainers"):
        for i, c in enumerate(_dicts(spec.get(group))):
            image = str(c.get("image") or "")
            if image != image.strip():
                errs.append(fe.invalid(f"spec.{group}[{i}].image", image,
                                       "must not have leading or trailing whitespace"))
    return errs


def template_errors(template: Any, path: str) -> list[FieldError]:
    """``ValidatePodTemplateSpec``: labels and annotations at ``<path>.labels`` (sic), then the spec."""
    t = template if isinstance(template, dict) else {}
    meta = as_dict(t.get("metadata"))
    errs = label_errors(meta.get("labels") or {}, fe.child(path, "labels"))
    errs += annotation_errors(meta.get("annotations") or {}, fe.child(path, "annotations"))
    spec = as_dict(t.get("spec"))
    errs += pod_spec_errors(spec, fe.child(path, "spec"))
    if spec.get("ephemeralContainers"):
        errs.append(fe.forbidden(fe.child(fe.child(path, "spec"), "ephemeralContainers"),
                                 "ephemeral containers not allowed in pod template"))
    return errs
