"""Per-kind validation of built-in objects, after metadata, as the real registries' ``Validate`` run it.

Reproduces (Kubernetes 1.36), reported together with the ObjectMeta errors in one 422:

- Pod / PodTemplate (``ValidatePodCreate``/``Update``, ``ValidatePodTemplate``): ``podvalidation``.
- Job (``pkg/apis/batch/validation``): ``parallelism``, ``completions``, ``activeDeadlineSeconds``,
  ``backoffLimit``, ``ttlSecondsAfterFinished``, ``backoffLimitPerIndex``, ``maxFailedIndexes`` not
  negative; ``completionMode`` values, ``completions`` required when Indexed; ``selector`` required with
  ``manualSelector``, a valid label selector matching the template labels (``\\`selector\\` does not match
  template \\`labels\\```); the template (``spec.template``); its ``restartPolicy``: ``Always`` (the pod
  default) is ``Required value: valid values: "OnFailure", "Never"``, another value is ``Unsupported``.
- Node (``ValidateNode``/``ValidateNodeUpdate``): taints (key a label name, value a label value, effect
  required and one of three, unique by key and effect) reported under ``metadata.taints[i]`` as upstream
  does; capacity/allocatable quantities; on update ``spec.providerID`` and ``spec.podCIDRs`` may only
  go from unset to set.
- Event (``ValidateEventCreate``/``Update``): core v1 gets only the legacy checks (namespace agreement,
  and with ``eventTime`` the reporting fields and lengths); events.k8s.io/v1 also ``eventTime`` required,
  ``type`` Normal/Warning, the deprecated fields unset, ``series``, and on update the immutable fields.
  Paths use the core field names (``involvedObject``, ``message``, ``source``), as upstream's internal
  type does.
- Lease (``ValidateLeaseSpec``): ``leaseDurationSeconds`` > 0, ``leaseTransitions`` >= 0, ``strategy``
  values, ``preferredHolder`` only with a strategy.

Not reproduced: integer ranges (a value beyond its Go field's int32/int64, e.g. ``spec.parallelism`` or a
container port, is a decoding error upstream, a 400 before any validation; our objects are not decoded into
typed structs, so such values are stored); the Job's immutable fields (``completions``, ``selector``,
``template`` after start), ``validateGeneratedSelector`` and its pod-failure / success policies; node
``podCIDRs`` format and dual-stack rules, status addresses; LeaseCandidates; core v1 Events' separate,
later ObjectMeta pass (a path-segment name rule; we apply the DNS-subdomain rule together with the rest).
Unverified against a live server: a duplicate taint's bad value (upstream prints the internal ``core.Taint``,
which has no JSON tags: ``{"Key":...,"Value":...,"Effect":...,"TimeAdded":null}``) and an Event's
immutable-field values (we print the JSON of the v1 field).
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver import conversion
from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.fielderrors import FieldError
from gangscale.sim.apiserver.metavalidation import IMMUTABLE, is_dns1123_subdomain, is_label_value
from gangscale.sim.apiserver.podvalidation import label_name_errors, label_selector_errors, pod_errors, template_errors
from gangscale.sim.apiserver.resources import ResourceType
from gangscale.sim.apiserver.resourcevalidation import NEGATIVE, as_dict, node_resource_errors

JSON = dict[str, Any]


def builtin_errors(rt: ResourceType, obj: JSON, old: JSON | None) -> list[FieldError]:
    """The kind-specific errors of a built-in object (``old`` is set on update)."""
    kind = rt.kind
    if kind == "Pod":
        return pod_errors(obj, create=old is None)
    if kind == "PodTemplate":
        return template_errors(obj.get("template"), "template")
    if kind == "Job":
        return job_errors(obj)
    if kind == "Node":
        return node_errors(obj, old)
    if kind == "Event":
        return event_errors(rt, obj, old)
    if kind == "Lease":
        return lease_errors(obj)
    return []


# --- Job ---------------------------------------------------------------------------------------------------

_JOB_COUNTS = ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished",
               "backoffLimitPerIndex", "maxFailedIndexes")


def _selector_matches(selector: JSON, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for rq in selector.get("matchExpressions") or []:
        key, op, values = rq.get("key"), rq.get("operator"), rq.get("values") or []
        present = key in labels
        ok = {"In": present and labels.get(key) in values, "NotIn": not present or labels.get(key) not in values,
              "Exists": present, "DoesNotExist": not present}.get(op)
        if not ok:
            return False
    return True


def _job_selector_errors(spec: JSON) -> list[FieldError]:
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        return [fe.required("spec.selector")]
    errs = label_selector_errors(selector, "spec.selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not errs and not _selector_matches(selector, labels):
        errs.append(fe.invalid("spec.template.metadata.labels", labels,
                               "`selector` does not match template `labels`"))
    return errs


def job_errors(job: JSON) -> list[FieldError]:
    spec = as_dict(job.get("spec"))
    errs: list[FieldError] = []
    for key in _JOB_COUNTS:
        value = spec.get(key)
        if isinstance(value, int) and value < 0:
            errs.append(fe.invalid(f"spec.{key}", value, NEGATIVE))
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        errs.append(fe.not_supported("spec.completionMode", mode, ["NonIndexed", "Indexed"]))
    if mode == "Indexed" and spec.get("completions") is None:
        errs.append(fe.required("spec.completions", "when completion mode is Indexed"))
    errs += template_errors(spec.get("template"), "spec.template")
    policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") or ""
    if policy in ("Always", ""):
        errs.append(fe.required("spec.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"'))
    elif policy not in ("OnFailure", "Never"):
        errs.append(fe.not_supported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"]))
    return errs + _job_selector_errors(spec)


# --- Node ----------------------------------------------------------------------------------------------------

def _taint_errors(taints: Any) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(taints if isinstance(taints, list) else []):
        t = raw if isinstance(raw, dict) else {}
        p = f"metadata.taints[{i}]"  # sic: upstream builds the taints path under metadata
        key, value, effect = str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "")
        errs += label_name_errors(key, f"{p}.key")
        msgs = is_label_value(value)
        if msgs:
            errs.append(fe.invalid(f"{p}.value", value, ";".join(msgs)))
        if not effect:
            errs.append(fe.required(f"{p}.effect"))
        elif effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append(fe.not_supported(f"{p}.effect", effect, ["NoSchedule", "PreferNoSchedule", "NoExecute"]))
        if (key, effect) in seen:
            # The bad value is the internal core.Taint struct, which has no JSON tags.
            bad = fe.GoStruct(Key=key, Value=value, Effect=effect, TimeAdded=t.get("timeAdded"))
            errs.append(FieldError(fe.DUPLICATE, p, bad, "taints must be unique by key and effect pair"))
            continue
        seen.add((key, effect))
    return errs


def node_errors(node: JSON, old: JSON | None) -> list[FieldError]:
    spec = as_dict(node.get("spec"))
    errs = _taint_errors(spec.get("taints")) if old is None else []
    errs += node_resource_errors(node)
    if old is not None:
        old_spec = old.get("spec") or {}
        old_cidrs = old_spec.get("podCIDRs") or []
        if old_cidrs and old_cidrs != (spec.get("podCIDRs") or []):
            errs.append(fe.forbidden("spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'))
        if old_spec.get("providerID") and old_spec.get("providerID") != spec.get("providerID"):
            errs.append(fe.forbidden("spec.providerID",
                                     'node updates may not change providerID except from "" to valid'))
        errs += _taint_errors(spec.get("taints"))
    return errs


# --- Event ---------------------------------------------------------------------------------------------------

_EVENT_LIMITS = (("reportingInstance", 128), ("action", 128), ("reason", 128))
_EVENT_IMMUTABLE = ("involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count",
                    "type", "eventTime", "action", "related", "reportingComponent", "reportingInstance")


def _legacy_event_errors(ev: JSON) -> list[FieldError]:
    ns = str((ev.get("metadata") or {}).get("namespace") or "")
    involved_ns = str((ev.get("involvedObject") or {}).get("namespace") or "")
    mismatch = fe.invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
    errs: list[FieldError] = []
    if not ev.get("eventTime"):
        if (not involved_ns and ns not in ("", "default")) or (involved_ns and ns != involved_ns):
            errs.append(mismatch)
    else:
        if not involved_ns and ns not in ("default", "kube-system"):
            errs.append(mismatch)
        controller = str(ev.get("reportingComponent") or "")
        if not controller:
            errs.append(fe.required("reportingController"))
        errs += [fe.invalid("reportingController", controller, m) for m in label_name_msgs(controller)]
        for key, limit in _EVENT_LIMITS:
            value = str(ev.get(key) or "")
            if not value:
                errs.append(fe.required(key))
            if len(value) > limit:
                errs.append(fe.invalid(key, "", f"can have at most {limit} characters"))
        if len(str(ev.get("message") or "")) > 1024:
            errs.append(fe.invalid("message", "", "can have at most 1024 characters"))
    errs += [fe.invalid("namespace", ns, m) for m in is_dns1123_subdomain(ns)]
    return errs


def label_name_msgs(value: str) -> list[str]:
    return [e.detail for e in label_name_errors(value, "")]


def _strict_event_errors(ev: JSON, old: JSON | None) -> list[FieldError]:
    errs: list[FieldError] = []
    series = ev.get("series")
    if isinstance(series, dict) and (old is None or series != old.get("series")):
        if int(series.get("count") or 0) < 2:
            errs.append(fe.invalid("series.count", "", "should be at least 2"))
        if not series.get("lastObservedTime"):
            errs.append(fe.required("series.lastObservedTime"))
    if old is not None:
        return errs + [fe.invalid(key, ev.get(key), IMMUTABLE) for key in _EVENT_IMMUTABLE
                       if ev.get(key) != old.get(key)]
    if not ev.get("eventTime"):
        errs.append(fe.required("eventTime"))
    if ev.get("type") not in ("Normal", "Warning"):
        errs.append(fe.invalid("type", "", f"has invalid value: {ev.get('type') or ''}"))
    for key in ("firstTimestamp", "lastTimestamp", "count"):
        if ev.get(key):
            errs.append(fe.invalid(key, "", "needs to be unset"))
    source = ev.get("source") or {}
    if source.get("component") or source.get("host"):
        errs.append(fe.invalid("source", "", "needs to be unset"))
    return errs


def event_errors(rt: ResourceType, obj: JSON, old: JSON | None) -> list[FieldError]:
    ev = conversion.to_storage(rt, obj)
    errs = _legacy_event_errors(ev)
    if rt.group == "events.k8s.io":
        errs += _strict_event_errors(ev, conversion.to_storage(rt, old) if old is not None else None)
    return errs


# --- Lease ---------------------------------------------------------------------------------------------------

def lease_errors(lease: JSON) -> list[FieldError]:
    spec = as_dict(lease.get("spec"))
    errs: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        errs.append(fe.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        errs.append(fe.invalid("spec.leaseTransitions", transitions, NEGATIVE))
    strategy = spec.get("strategy")
    if strategy is not None:
        if "/" not in str(strategy):
            if strategy != "OldestEmulationVersion":
                errs.append(fe.not_supported("spec.strategy.strategy", strategy, ["OldestEmulationVersion"]))
        else:
            errs += [fe.invalid("spec.strategy.strategy", strategy, m) for m in label_name_msgs(str(strategy))]
    if spec.get("preferredHolder") and not strategy:
        errs.append(fe.forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"))
    return errs
