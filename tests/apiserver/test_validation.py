"""Schema validation, pruning, metadata validation and the built-in CRD table, with exact messages."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver import validation
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.schemas import BUILTIN_CUSTOM_RESOURCES, PROVISIONING_REQUEST, CustomResourceSpec

JSON = dict[str, Any]
Cause = tuple[str, str, str]  # (reason, field, message)
INV, TYP, REQ = "FieldValueInvalid", "FieldValueTypeInvalid", "FieldValueRequired"
DUP, MANY, LONG = "FieldValueDuplicate", "FieldValueTooMany", "FieldValueTooLong"
ENUM, FORB = "FieldValueNotSupported", "FieldValueForbidden"

GROUP = "autoscaling.x-k8s.io"
PR_SCHEMA = PROVISIONING_REQUEST.schema("v1")
REASON_RE = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
DNS_RE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
NOW = "2026-08-01T10:00:00Z"
POD_SET = {"podTemplateRef": {"name": "t"}, "count": 1}
COUNT = "spec.podSets[0].count"


def provreq() -> JSON:
    return {
        "apiVersion": f"{GROUP}/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": "pr", "namespace": "default"},
        "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                 "parameters": {"noRetry": "true"},
                 "podSets": [{"podTemplateRef": {"name": "ppt-job"}, "count": 4}]},
    }


def condition(**over: Any) -> JSON:
    return {"type": "Provisioned", "status": "True", "reason": "CapacityIsFound",
            "message": "Capacity is found in the cluster", "lastTransitionTime": NOW, **over}


def with_status(*conditions: JSON) -> JSON:
    obj = provreq()
    obj["status"] = {"conditions": list(conditions)}
    return obj


def check_pr(obj: JSON, old: JSON | None = None) -> None:
    validation.validate(obj, PR_SCHEMA, old=old, kind="ProvisioningRequest", group=GROUP, name="pr")


def invalid_error(obj: JSON, schema: JSON = PR_SCHEMA, old: JSON | None = None,
                  kind: str = "ProvisioningRequest", group: str = GROUP) -> StatusError:
    with pytest.raises(StatusError) as info:
        validation.validate(obj, schema, old=old, kind=kind, group=group, name="pr")
    return info.value


def causes(err: StatusError) -> list[Cause]:
    return [(c.type, c.field, c.message) for c in err.causes]


def set_path(obj: JSON, path: str, value: Any) -> JSON:
    """Copy ``obj`` with ``path`` (dots, ``[i]``) set; ``...`` deletes the key."""
    out = copy.deepcopy(obj)
    parts = path.replace("[", ".").replace("]", "").split(".")
    node: Any = out
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    last: Any = int(parts[-1]) if isinstance(node, list) else parts[-1]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return out


# --- ProvisioningRequest: valid objects -------------------------------------------------------------------

@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_valid_provisioning_request_passes(version: str) -> None:
    accepted = condition(type="Accepted", reason="Accepted", message="", observedGeneration=1)
    obj = with_status(condition(), accepted)
    obj["status"]["provisioningClassDetails"] = {"ResizeRequestName": "r-1"}
    validation.validate(obj, PROVISIONING_REQUEST.schema(version), kind="ProvisioningRequest", group=GROUP,
                        name="pr")


def test_valid_update_of_status_only_passes() -> None:
    check_pr(with_status(condition()), old=provreq())


# --- ProvisioningRequest: invalid objects ------------------------------------------------------------------

PR_CASES: list[tuple[str, Callable[[], JSON], list[Cause]]] = [
    ("empty-podsets", lambda: set_path(provreq(), "spec.podSets", []),
     [(INV, "spec.podSets", "Invalid value: 0: spec.podSets in body should have at least 1 items")]),
    ("count-zero", lambda: set_path(provreq(), "spec.podSets[0].count", 0),
     [(INV, "spec.podSets[0].count",
       "Invalid value: 0: spec.podSets[0].count in body should be greater than or equal to 1")]),
    ("count-string", lambda: set_path(provreq(), "spec.podSets[0].count", "4"),
     [(TYP, "spec.podSets[0].count",
       'Invalid value: "string": spec.podSets[0].count in body must be of type integer: "string"')]),
    ("count-fraction-reports-format-and-range", lambda: set_path(provreq(), "spec.podSets[0].count", 1.5),
     [(TYP, "spec.podSets[0].count",
       'Invalid value: "float64": spec.podSets[0].count in body must be of type int32: "float64"'),
      (INV, "<nil>", f'Invalid value: "": Checked value must be of type integer with format int32 in {COUNT}')]),
    ("count-beyond-int32", lambda: set_path(provreq(), "spec.podSets[0].count", 2 ** 31),
     [(INV, "<nil>", f'Invalid value: "": Checked value must be of type integer with format int32 in {COUNT}')]),
    ("count-integral-float-beyond-int32", lambda: set_path(provreq(), "spec.podSets[0].count", 2.0 ** 31),
     [(INV, "<nil>", f'Invalid value: "": Checked value must be of type integer with format int32 in {COUNT}')]),
    ("too-many-podsets", lambda: set_path(provreq(), "spec.podSets", [POD_SET] * 33),
     [(MANY, "spec.podSets", "Too many: 33: must have at most 32 items")]),
    ("template-name-missing", lambda: set_path(provreq(), "spec.podSets[0].podTemplateRef", {}),
     [(REQ, "spec.podSets[0].podTemplateRef.name", "Required value")]),
    ("template-name-pattern", lambda: set_path(provreq(), "spec.podSets[0].podTemplateRef.name", "Bad_Name"),
     [(INV, "spec.podSets[0].podTemplateRef.name",
       f"Invalid value: \"Bad_Name\": spec.podSets[0].podTemplateRef.name in body should match '{DNS_RE}'")]),
    ("class-too-long", lambda: set_path(provreq(), "spec.provisioningClassName", "a" * 254),
     [(LONG, "spec.provisioningClassName", "Too long: may not be more than 253 bytes")]),
    ("spec-missing", lambda: set_path(provreq(), "spec", ...), [(REQ, "spec", "Required value")]),
    ("class-and-podsets-missing", lambda: set_path(provreq(), "spec", {}),
     [(REQ, "spec.podSets", "Required value"),
      (REQ, "spec.provisioningClassName", "Required value")]),
    ("parameter-too-long", lambda: set_path(provreq(), "spec.parameters", {"noRetry": "x" * 256}),
     [(LONG, "spec.parameters.noRetry", "Too long: may not be more than 255 bytes")]),
    ("too-many-parameters", lambda: set_path(provreq(), "spec.parameters", {f"k{i}": "" for i in range(101)}),
     [(MANY, "spec.parameters", "Too many: 101: must have at most 100 items")]),
    ("reason-with-spaces", lambda: with_status(condition(reason="has space")),
     [(INV, "status.conditions[0].reason",
       f"Invalid value: \"has space\": status.conditions[0].reason in body should match '{REASON_RE}'")]),
    ("reason-empty", lambda: with_status(condition(reason="")),
     [(INV, "status.conditions[0].reason",
       'Invalid value: "": status.conditions[0].reason in body should be at least 1 chars long')]),
    ("condition-without-message", lambda: with_status(set_path(condition(), "message", ...)),
     [(REQ, "status.conditions[0].message", "Required value")]),
    ("condition-status-enum", lambda: with_status(condition(status="Yes")),
     [(ENUM, "status.conditions[0].status",
       'Unsupported value: "Yes": supported values: "True", "False", "Unknown"')]),
    ("transition-time-format", lambda: with_status(condition(lastTransitionTime="yesterday")),
     [(TYP, "status.conditions[0].lastTransitionTime",
       'Invalid value: "yesterday": status.conditions[0].lastTransitionTime in body must be of type '
       'date-time: "yesterday"')]),
    ("observed-generation-beyond-int64", lambda: with_status(condition(observedGeneration=2 ** 63)),
     [(TYP, "status.conditions[0].observedGeneration",
       'Invalid value: "float64": status.conditions[0].observedGeneration in body must be of type int64: '
       '"float64"'),
      (INV, "<nil>", 'Invalid value: "": Checked value must be of type integer with format int64 in '
                     "status.conditions[0].observedGeneration")]),
    ("observed-generation-negative", lambda: with_status(condition(observedGeneration=-1)),
     [(INV, "status.conditions[0].observedGeneration",
       "Invalid value: -1: status.conditions[0].observedGeneration in body should be greater than or equal "
       "to 0")]),
    ("duplicate-condition-type", lambda: with_status(condition(), condition(status="False")),
     [(DUP, "status.conditions[1]", 'Duplicate value: {"type":"Provisioned"}')]),
    ("too-many-class-details", lambda: set_path(with_status(), "status.provisioningClassDetails",
                                                {str(i): "" for i in range(65)}),
     [(MANY, "status.provisioningClassDetails", "Too many: 65: must have at most 64 items")]),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in PR_CASES], ids=[c[0] for c in PR_CASES])
def test_invalid_provisioning_request(make: Callable[[], JSON], expected: list[Cause]) -> None:
    err = invalid_error(make())
    assert (err.code, err.reason, err.kind, err.group) == (422, "Invalid", "ProvisioningRequest", GROUP)
    assert err.name == "pr"
    assert causes(err) == expected
    body = ", ".join(f"{f}: {m}" for _, f, m in expected)
    detail = body if len(expected) == 1 else f"[{body}]"
    assert err.message == f'ProvisioningRequest.{GROUP} "pr" is invalid: {detail}'


def test_all_condition_errors_are_reported_together() -> None:
    err = invalid_error(with_status(set_path(condition(reason="bad reason", status="Maybe"), "message", ...)))
    assert [c[1] for c in causes(err)] == ["status.conditions[0].reason", "status.conditions[0].status",
                                           "status.conditions[0].message"]
    prefix = f'ProvisioningRequest.{GROUP} "pr" is invalid: [status.conditions[0].reason: '
    assert err.message.startswith(prefix)


# --- immutability and ratcheting -------------------------------------------------------------------------

IMMUTABLE_CASES: list[tuple[str, str, Any, list[Cause]]] = [
    ("podsets-count", "spec.podSets[0].count", 5,
     [(INV, "spec.podSets", "Invalid value: Value is immutable")]),
    ("class-name", "spec.provisioningClassName", "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
     [(INV, "spec.provisioningClassName",
       'Invalid value: "best-effort-atomic-scale-up.autoscaling.x-k8s.io": Value is immutable')]),
    ("parameters", "spec.parameters", {"noRetry": "false"},
     [(INV, "spec.parameters", "Invalid value: Value is immutable")]),
]


@pytest.mark.parametrize(("path", "value", "expected"), [c[1:] for c in IMMUTABLE_CASES],
                         ids=[c[0] for c in IMMUTABLE_CASES])
def test_spec_change_on_update_is_immutable(path: str, value: Any, expected: list[Cause]) -> None:
    old = provreq()
    assert causes(invalid_error(set_path(old, path, value), old=old)) == expected
    # Create never evaluates transition rules.
    check_pr(set_path(old, path, value))


def test_transition_rules_need_both_values() -> None:
    old = set_path(provreq(), "spec.parameters", ...)
    check_pr(provreq(), old=old)
    check_pr(old, old=provreq())


def test_ratcheting_keeps_unchanged_invalid_values() -> None:
    old = with_status(condition(reason="bad reason"))
    new = copy.deepcopy(old)
    new["status"]["conditions"].append(condition(type="Accepted", reason="Accepted"))
    check_pr(new, old=old)
    changed = set_path(new, "status.conditions[1].reason", "also bad")
    assert [c[1] for c in causes(invalid_error(changed, old=old))] == ["status.conditions[1].reason"]


def test_list_type_errors_ratchet_on_old_duplicates() -> None:
    old = with_status(condition(), condition())
    check_pr(copy.deepcopy(old), old=old)
    assert causes(invalid_error(old))[0][0] == DUP


# --- generic keywords ---------------------------------------------------------------------------------

def _schema(**props: JSON) -> JSON:
    return {"type": "object", "properties": props}


KEYWORD_CASES: list[tuple[str, JSON, JSON, list[Cause]]] = [
    ("int-enum", _schema(n={"type": "integer", "enum": [1, 2]}), {"n": 3},
     [(ENUM, "n", 'Unsupported value: 3: supported values: "1", "2"')]),
    ("null-not-nullable", _schema(s={"type": "string"}), {"s": None},
     [(TYP, "s", 'Invalid value: "null": s in body must be of type string: "null"')]),
    ("object-for-string", _schema(s={"type": "string"}), {"s": {"a": 1}},
     [(TYP, "s", 'Invalid value: "object": s in body must be of type string: "object"')]),
    ("bool-for-int32", _schema(n={"type": "integer", "format": "int32"}), {"n": True},
     [(TYP, "n", 'Invalid value: "": n in body must be of type int32: ""')]),
    ("max-length-one-byte", _schema(s={"type": "string", "maxLength": 1}), {"s": "ab"},
     [(LONG, "s", "Too long: may not be more than 1 byte")]),
    ("max-items-one", _schema(a={"type": "array", "maxItems": 1}), {"a": [1, 2]},
     [(MANY, "a", "Too many: 2: must have at most 1 item")]),
    ("min-properties-stops-object", _schema(o={"type": "object", "minProperties": 2, "required": ["x"]}),
     {"o": {"y": 1}}, [(INV, "o", "Invalid value: 1: o in body should have at least 2 properties")]),
    ("exclusive-minimum", _schema(n={"type": "number", "minimum": 1, "exclusiveMinimum": True}), {"n": 1},
     [(INV, "n", "Invalid value: 1: n in body should be greater than 1")]),
    ("maximum-float", _schema(n={"type": "number", "maximum": 1.5}), {"n": 2.25},
     [(INV, "n", "Invalid value: 2.25: n in body should be less than or equal to 1.5")]),
    ("pattern-dollar-is-end-of-text", _schema(s={"type": "string", "pattern": "^a$"}), {"s": "a\n"},
     [(INV, "s", "Invalid value: \"a\\n\": s in body should match '^a$'")]),
    ("set-duplicates", _schema(a={"type": "array", "x-kubernetes-list-type": "set"}),
     {"a": ["x", "y", "x", "x"]}, [(DUP, "a[2]", 'Duplicate value: "x"')]),
    ("map-list-item-not-object", _schema(a={"type": "array", "x-kubernetes-list-type": "map",
                                            "x-kubernetes-list-map-keys": ["k"]}), {"a": [{"k": 1}, 2]},
     [(INV, "a[1]", "Invalid value: 2: must be an object for an array of list-type map")]),
    ("map-list-two-keys", _schema(a={"type": "array", "x-kubernetes-list-type": "map",
                                     "x-kubernetes-list-map-keys": ["k", "p"]}),
     {"a": [{"k": "x", "p": 1}, {"k": "x", "p": 2}, {"p": 1, "k": "x"}]},
     [(DUP, "a[2]", 'Duplicate value: {"k":"x","p":1}')]),
]


@pytest.mark.parametrize(("schema", "obj", "expected"), [c[1:] for c in KEYWORD_CASES],
                         ids=[c[0] for c in KEYWORD_CASES])
def test_schema_keywords(schema: JSON, obj: JSON, expected: list[Cause]) -> None:
    assert causes(invalid_error(obj, schema, kind="Widget", group="example.com")) == expected


ACCEPTED = [
    ("float-with-integral-value", _schema(n={"type": "integer"}), {"n": 2.0}),
    ("int-for-number", _schema(n={"type": "number", "minimum": 0.5}), {"n": 1}),
    ("nullable", _schema(s={"type": "string", "nullable": True}), {"s": None}),
    ("int-or-string", _schema(v={"x-kubernetes-int-or-string": True}), {"v": "50%"}),
    ("preserve-unknown", _schema(o={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
     {"o": {"anything": [1, {"x": None}]}}),
    ("date-time-offset-and-fraction", _schema(t={"type": "string", "format": "date-time"}),
     {"t": "2026-02-28T23:59:59.123456+02:00"}),
    ("unknown-format-ignored", _schema(t={"type": "string", "format": "no-such-format"}), {"t": "x"}),
    ("int32-max", _schema(n={"type": "integer", "format": "int32"}), {"n": 2 ** 31 - 1}),
    ("int32-min", _schema(n={"type": "integer", "format": "int32"}), {"n": -(2 ** 31)}),
    ("int32-integral-float", _schema(n={"type": "integer", "format": "int32"}), {"n": 2147483647.0}),
    ("int64-max", _schema(n={"type": "integer", "format": "int64"}), {"n": 2 ** 63 - 1}),
    ("int64-min", _schema(n={"type": "integer"}), {"n": -(2 ** 63)}),
    ("float32-max", _schema(n={"type": "number", "format": "float"}), {"n": 3.4028234663852886e38}),
    ("double-not-range-checked", _schema(n={"type": "number", "format": "double"}), {"n": 1e308}),
    ("int32-format-on-number-is-dropped", _schema(n={"type": "number", "format": "int32"}), {"n": 2 ** 31}),
    ("int-or-string-not-range-checked", _schema(v={"x-kubernetes-int-or-string": True, "format": "int32"}),
     {"v": 2 ** 40}),
]


def _range(prefix: str, kind: str, fmt: str, path: str = "n") -> Cause:
    form = f"with format {fmt}" if fmt else "(default format)"
    return (INV, "<nil>", f'Invalid value: "": {prefix} value must be of type {kind} {form} in {path}')


# kube-openapi validate/values.go IsValueValidAgainstRange, run by numberValidator (validator.go) since the
# 2026-01-09 commit in Kubernetes 1.36's kube-openapi; cases from its TestNumericFormatEnforcement and beyond.
RANGE_CASES: list[tuple[str, JSON, JSON, list[Cause]]] = [
    ("int32-overflow", _schema(n={"type": "integer", "format": "int32"}), {"n": 2147483648},
     [_range("Checked", "integer", "int32")]),
    ("int32-underflow", _schema(n={"type": "integer", "format": "int32"}), {"n": -2147483649},
     [_range("Checked", "integer", "int32")]),
    ("int32-nested-path", _schema(a={"type": "array", "items": _schema(n={"type": "integer", "format": "int32"})}),
     {"a": [{"n": 1}, {"n": 2 ** 40}]}, [_range("Checked", "integer", "int32", "a[1].n")]),
    ("int32-near-integer-passes-type-not-range", _schema(n={"type": "integer", "format": "int32"}),
     {"n": 100000000.01}, [_range("Checked", "integer", "int32")]),
    ("int32-negative-fraction", _schema(n={"type": "integer", "format": "int32"}), {"n": -0.5},
     [(TYP, "n", 'Invalid value: "float64": n in body must be of type int32: "float64"'),
      _range("Checked", "integer", "int32")]),
    ("int64-overflow-is-a-float64", _schema(n={"type": "integer", "format": "int64"}), {"n": 2 ** 63},
     [(TYP, "n", 'Invalid value: "float64": n in body must be of type int64: "float64"'),
      _range("Checked", "integer", "int64")]),
    ("integer-default-format-overflow", _schema(n={"type": "integer"}), {"n": -(2 ** 64)},
     [(TYP, "n", 'Invalid value: "number": n in body must be of type integer: "number"'),
      _range("Checked", "integer", "")]),
    # Go decodes -2^63-1 as a float64, which rounds to -2^63: no longer an integer, yet inside int64's range.
    ("int64-min-minus-one-rounds-into-range", _schema(n={"type": "integer"}), {"n": -(2 ** 63) - 1},
     [(TYP, "n", 'Invalid value: "number": n in body must be of type integer: "number"')]),
    ("integer-default-format-fraction", _schema(n={"type": "integer"}), {"n": 1.5},
     [(TYP, "n", 'Invalid value: "number": n in body must be of type integer: "number"'),
      _range("Checked", "integer", "")]),
    ("integral-float-beyond-2-53-is-not-an-integer", _schema(n={"type": "integer"}), {"n": 2.0 ** 53},
     [(TYP, "n", 'Invalid value: "number": n in body must be of type integer: "number"')]),
    ("float32-overflow", _schema(n={"type": "number", "format": "float"}), {"n": 3.5e38},
     [_range("Checked", "number", "float")]),
    ("float32-negative-overflow", _schema(n={"type": "number", "format": "float"}), {"n": -1e39},
     [_range("Checked", "number", "float")]),
    ("maximum-beyond-int32", _schema(n={"type": "integer", "format": "int32", "maximum": 2 ** 32}),
     {"n": 2 ** 32 + 1},
     [_range("Checked", "integer", "int32"), _range("Maximum boundary", "integer", "int32"),
      (INV, "n", "Invalid value: 4.294967297e+09: n in body should be less than or equal to 4.294967296e+09")]),
    ("fractional-minimum-on-integer", _schema(n={"type": "integer", "minimum": 0.5}), {"n": 0},
     [_range("Minimum boundary", "integer", ""),
      (INV, "n", "Invalid value: 0: n in body should be greater than or equal to 0.5")]),
    ("fractional-multiple-of-on-integer", _schema(n={"type": "integer", "multipleOf": 0.5}), {"n": 2},
     [_range("MultipleOf", "integer", "")]),
]


@pytest.mark.parametrize(("schema", "obj", "expected"), [c[1:] for c in RANGE_CASES], ids=[c[0] for c in RANGE_CASES])
def test_numeric_formats_are_range_checked(schema: JSON, obj: JSON, expected: list[Cause]) -> None:
    err = invalid_error(obj, schema, kind="Widget", group="example.com")
    assert causes(err) == expected
    assert err.message == 'Widget.example.com "pr" is invalid: ' + (
        f"{expected[0][1]}: {expected[0][2]}" if len(expected) == 1
        else "[" + ", ".join(f"{f}: {m}" for _, f, m in expected) + "]")


@pytest.mark.parametrize(("schema", "obj"), [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_schema_accepts(schema: JSON, obj: JSON) -> None:
    validation.validate(obj, schema, kind="Widget", group="example.com", name="pr")


@pytest.mark.parametrize("value", ["2026-02-30T00:00:00Z", "2026-01-01 00:00:00Z", "2026-01-01T24:00:00Z",
                                   "2026-01-01T00:00:00"])
def test_date_time_rejects(value: str) -> None:
    err = invalid_error({"t": value}, _schema(t={"type": "string", "format": "date-time"}))
    assert causes(err) == [(TYP, "t",
                            f'Invalid value: "{value}": t in body must be of type date-time: "{value}"')]


def test_extra_errors_come_first() -> None:
    meta = [fe.required("metadata.name", "name or generateName is required")]
    err = invalid_error(set_path(provreq(), "spec", ...))
    with pytest.raises(StatusError) as info:
        validation.validate(set_path(provreq(), "spec", ...), PR_SCHEMA, kind="ProvisioningRequest",
                            group=GROUP, name="pr", extra_errors=meta)
    assert [c[1] for c in causes(info.value)] == ["metadata.name", *[c[1] for c in causes(err)]]


# --- pruning and unknown fields -------------------------------------------------------------------------

def test_prune_and_unknown_fields() -> None:
    obj = provreq()
    obj["metadata"]["bogus"] = 1
    obj["spec"]["podSets"][0]["extra"] = {"a": 1}
    obj["spec"]["podSets"][0]["podTemplateRef"]["zz"] = 1
    obj["status"] = {"conditions": [condition(message=None)], "other": True}
    obj["top"] = 1
    paths = validation.unknown_fields(obj, PR_SCHEMA)
    assert paths == ["spec.podSets[0].podTemplateRef.zz", "spec.podSets[0].extra", "status.other", "top",
                     "metadata.bogus"]
    pruned = validation.prune(obj, PR_SCHEMA)
    assert "top" not in pruned and "bogus" not in pruned["metadata"]
    assert pruned["spec"]["podSets"] == [{"podTemplateRef": {"name": "ppt-job"}, "count": 4}]
    # A non-nullable null is dropped, so it reads as missing rather than as a type error.
    assert "message" not in pruned["status"]["conditions"][0]
    assert obj["top"] == 1  # the input is not modified
    assert causes(invalid_error(pruned)) == [(REQ, "status.conditions[0].message",
                                               "Required value")]


def test_unknown_field_messages_and_strict_error() -> None:
    assert validation.unknown_field_messages(["spec.foo"]) == ['unknown field "spec.foo"']
    err = validation.unknown_fields_error("ProvisioningRequest", "v1", ["spec.foo", "spec.bar"])
    assert (err.code, err.reason) == (400, "BadRequest")
    assert err.message == ('ProvisioningRequest in version "v1" cannot be handled as a ProvisioningRequest: '
                           'strict decoding error: unknown field "spec.foo", unknown field "spec.bar"')


def test_preserve_unknown_fields_keeps_undeclared_but_prunes_declared() -> None:
    schema = workload_schema()
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"},
          "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}]},
          "status": {"anything": {"goes": True}}}
    assert validation.unknown_fields(wl, schema) == []
    assert validation.prune(wl, schema) == wl


# --- metadata -------------------------------------------------------------------------------------------

META_CASES: list[tuple[str, JSON, bool, str, list[Cause]]] = [
    ("name-required", {"namespace": "d"}, True, "subdomain",
     [(REQ, "metadata.name", "Required value: name or generateName is required")]),
    ("name-not-subdomain", {"name": "Bad_Name", "namespace": "d"}, True, "subdomain",
     [(INV, "metadata.name", f'Invalid value: "Bad_Name": {SUBDOMAIN_MSG}')]),
    ("namespace-required", {"name": "x"}, True, "subdomain", [(REQ, "metadata.namespace",
                                                                "Required value")]),
    ("namespace-forbidden", {"name": "x", "namespace": "d"}, False, "subdomain",
     [(FORB, "metadata.namespace", "Forbidden: not allowed on this type")]),
    ("namespace-name-with-dot", {"name": "a.b"}, False, "label",
     [(INV, "metadata.name", 'Invalid value: "a.b": must not contain dots')]),
    ("generate-name-trailing-dash-ok", {"generateName": "job-", "name": "job-x1", "namespace": "d"}, True,
     "subdomain", []),
    ("name-too-long", {"name": "a" * 254}, False, "subdomain",
     [(INV, "metadata.name", f'Invalid value: "{"a" * 254}": must be no more than 253 '
                             "characters")]),
    ("bad-label-value", {"name": "x", "labels": {"app": "-x"}}, False, "subdomain",
     [(INV, "metadata.labels",
       "Invalid value: \"-x\": a valid label must be an empty string or consist of alphanumeric characters, "
       "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
       "'my_value',  or '12345', regex used for validation is "
       "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")]),
    ("annotations-too-large", {"name": "x", "annotations": {"a": "v" * 262144}}, False, "subdomain",
     [(LONG, "metadata.annotations", "Too long: may not be more than 262144 bytes")]),
    ("negative-generation", {"name": "x", "generation": -1}, False, "subdomain",
     [(INV, "metadata.generation", "Invalid value: -1: must be greater than or equal to 0")]),
    ("owner-reference-empty-uid", {"name": "x", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                                                      "name": "p"}]}, False, "subdomain",
     [(INV, "metadata.ownerReferences.uid", 'Invalid value: "": must not be empty')]),
]


@pytest.mark.parametrize(("meta", "namespaced", "rule", "expected"), [c[1:] for c in META_CASES],
                         ids=[c[0] for c in META_CASES])
def test_object_meta(meta: JSON, namespaced: bool, rule: str, expected: list[Cause]) -> None:
    obj = {"kind": "Thing", "metadata": meta}
    if not expected:
        validation.validate_object_meta(obj, namespaced=namespaced, name_rule=rule, kind="Thing", group="")
        return
    with pytest.raises(StatusError) as info:
        validation.validate_object_meta(obj, namespaced=namespaced, name_rule=rule, kind="Thing", group="")
    assert (info.value.code, info.value.reason) == (422, "Invalid")
    assert causes(info.value) == expected
    assert info.value.message.startswith(f'Thing "{meta.get("name", "")}" is invalid: ')


def test_object_meta_update_immutability() -> None:
    old = {"metadata": {"name": "x", "namespace": "d", "uid": "u1"}}
    new = {"metadata": {"name": "x", "namespace": "d", "uid": "u2"}}
    with pytest.raises(StatusError) as info:
        validation.validate_object_meta(new, namespaced=True, kind="Pod", group="", old=old)
    assert causes(info.value) == [(INV, "metadata.uid", 'Invalid value: "u2": field is immutable')]


# --- Go rendering helpers -------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "text"), [
    (1.0, "1"), (0.5, "0.5"), (1e6, "1e+06"), (123456.0, "123456"), (1234567.0, "1.234567e+06"),
    (1e-5, "1e-05"), (0.0001, "0.0001"), (-2.5, "-2.5"),
], ids=str)
def test_go_float(value: float, text: str) -> None:
    assert fe.go_float(value) == text


def test_go_rendering_of_values() -> None:
    assert fe.go_value("a\"b\n\x01é") == '"a\\"b\\n\\x01é"'
    assert fe.go_value({"b": [1, 2.0, None], "a": "<&>"}) == '{"a":"\\u003c\\u0026\\u003e","b":[1,2,null]}'
    assert fe.go_value(True) == "true"


# --- the built-in CRD table -----------------------------------------------------------------------------

def workload_schema() -> JSON:
    return _spec("Workload").schema("v1beta2")


def _spec(kind: str) -> CustomResourceSpec:
    return next(s for s in BUILTIN_CUSTOM_RESOURCES if s.kind == kind)


TABLE = [
    ("ProvisioningRequest", "autoscaling.x-k8s.io", "provisioningrequests", True, ("provreq", "provreqs"),
     ("v1", "v1beta1"), True),
    ("Workload", "kueue.x-k8s.io", "workloads", True, ("kwl", "kueueworkload", "kueueworkloads"),
     ("v1beta2", "v1beta1"), True),
    ("AdmissionCheck", "kueue.x-k8s.io", "admissionchecks", False, ("ac",), ("v1beta2", "v1beta1"), True),
    ("ProvisioningRequestConfig", "kueue.x-k8s.io", "provisioningrequestconfigs", False, ("prc",),
     ("v1beta2", "v1beta1"), False),
    ("ClusterQueue", "kueue.x-k8s.io", "clusterqueues", False, ("cq",), ("v1beta2", "v1beta1"), True),
    ("LocalQueue", "kueue.x-k8s.io", "localqueues", True, ("queue", "queues", "lq"), ("v1beta2", "v1beta1"),
     True),
    ("ResourceFlavor", "kueue.x-k8s.io", "resourceflavors", False, ("flavor", "flavors", "rf"),
     ("v1beta2", "v1beta1"), False),
    ("WorkloadPriorityClass", "kueue.x-k8s.io", "workloadpriorityclasses", False, ("wpc",),
     ("v1beta2", "v1beta1"), False),
    ("RayCluster", "ray.io", "rayclusters", True, (), ("v1", "v1alpha1"), True),
    ("RayJob", "ray.io", "rayjobs", True, (), ("v1", "v1alpha1"), True),
]


@pytest.mark.parametrize("row", TABLE, ids=[t[0] for t in TABLE])
def test_builtin_table(row: tuple[Any, ...]) -> None:
    kind, group, plural, namespaced, short, versions, status = row
    spec = _spec(kind)
    assert (spec.group, spec.plural, spec.singular, spec.namespaced, spec.short_names) == (
        group, plural, kind.lower(), namespaced, short)
    assert tuple(v.name for v in spec.versions) == versions
    assert spec.storage_version == versions[0]
    storage, old = spec.versions
    assert storage.served and old.served and not storage.deprecated
    assert old.deprecated and old.deprecation_warning
    assert all(v.has_status_subresource is status for v in spec.versions)
    assert spec.categories == (("all",) if group == "ray.io" else ())
    assert spec.name == f"{plural}.{group}" and spec.list_kind == f"{kind}List"


def _walk(schema: JSON, path: str = "") -> list[tuple[str, JSON]]:
    out = [(path, schema)]
    for key, sub in (schema.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out += _walk(schema[key], f"{path}[]")
    return out


@pytest.mark.parametrize("spec", BUILTIN_CUSTOM_RESOURCES, ids=[s.kind for s in BUILTIN_CUSTOM_RESOURCES])
def test_builtin_schemas_are_structural(spec: CustomResourceSpec) -> None:
    for version in spec.versions:
        for path, node in _walk(dict(version.schema)):
            typed = node.get("type") or node.get("x-kubernetes-int-or-string") or node.get(
                "x-kubernetes-preserve-unknown-fields")
            assert typed, f"{spec.kind} {version.name} {path}: no type"
            if node.get("x-kubernetes-list-type") == "map":
                item = node["items"]
                for key in node["x-kubernetes-list-map-keys"]:
                    declared = item["properties"][key]
                    assert key in item.get("required", []) or "default" in declared, f"{path}: key {key}"


def test_provisioning_request_versions_share_the_schema() -> None:
    assert PROVISIONING_REQUEST.schema("v1") == PROVISIONING_REQUEST.schema("v1beta1")
    v1beta1 = PROVISIONING_REQUEST.version("v1beta1")
    assert v1beta1 is not None
    assert v1beta1.deprecation_warning == "autoscaling.k8s.io/v1beta1 API is deprecated"


def test_workload_selectable_field_and_status_map_lists() -> None:
    v1beta2 = _spec("Workload").version("v1beta2")
    assert v1beta2 is not None and v1beta2.selectable_fields == ("status.admission.clusterQueue",)
    status = workload_schema()["properties"]["status"]["properties"]
    assert status["admissionChecks"]["x-kubernetes-list-map-keys"] == ["name"]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_workload_priority_class_has_top_level_value() -> None:
    schema = _spec("WorkloadPriorityClass").schema("v1beta2")
    assert schema["required"] == ["value"] and "spec" not in schema["properties"]
    err = invalid_error({"description": "x"}, schema, kind="WorkloadPriorityClass", group="kueue.x-k8s.io")
    assert causes(err) == [(REQ, "value", "Required value")]


def test_kueue_immutable_fields() -> None:
    schema = _spec("LocalQueue").schema("v1beta2")
    old = {"spec": {"clusterQueue": "cq-a"}}
    err = invalid_error({"spec": {"clusterQueue": "cq-b"}}, schema, old=old, kind="LocalQueue",
                        group="kueue.x-k8s.io")
    assert causes(err) == [(INV, "spec.clusterQueue", 'Invalid value: "cq-b": field is immutable')]


def test_schema_accessor_returns_a_copy() -> None:
    first = PROVISIONING_REQUEST.schema("v1")
    first["properties"].clear()
    assert PROVISIONING_REQUEST.schema("v1")["properties"]
    assert PROVISIONING_REQUEST.schema("v9") == {}


# --- transition rules: reasons, defaults and correlation ----------------------------------------------

def _rule(**extra: Any) -> JSON:
    return {"x-kubernetes-validations": [{"rule": "self == oldSelf", **extra}]}


RULE_CASES: list[tuple[str, JSON, JSON, JSON, list[Cause]]] = [
    ("default-message", _schema(n={"type": "integer", **_rule()}), {"n": 1}, {"n": 2},
     [(INV, "n", "Invalid value: 2: failed rule: self == oldSelf")]),
    ("reason-forbidden",
     _schema(s={"type": "string", **_rule(message=" frozen ", reason="FieldValueForbidden")}),
     {"s": "a"}, {"s": "b"}, [(FORB, "s", "Forbidden: frozen")]),
    ("field-path", _schema(o={"type": "object", "properties": {"x": {"type": "string"}},
                             **_rule(message="m", fieldPath=".x")}),
     {"o": {"x": "a"}}, {"o": {"x": "b"}}, [(INV, "o.x", "Invalid value: m")]),
    ("map-list-items-correlate-by-key",
     _schema(l={"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "required": ["k"],
                          "properties": {"k": {"type": "string"},
                                         "v": {"type": "string", **_rule(message="m")}}}}),
     {"l": [{"k": "a", "v": "1"}, {"k": "b", "v": "2"}]}, {"l": [{"k": "c", "v": "9"}, {"k": "a", "v": "3"}]},
     [(INV, "l[1].v", 'Invalid value: "3": m')]),
    ("map-values-correlate-by-key",
     _schema(m={"type": "object", "additionalProperties": {"type": "string", **_rule(message="m")}}),
     {"m": {"a": "1"}}, {"m": {"a": "2", "b": "new"}}, [(INV, "m[a]", 'Invalid value: "2": m')]),
]


@pytest.mark.parametrize(("schema", "old", "new", "expected"), [c[1:] for c in RULE_CASES],
                         ids=[c[0] for c in RULE_CASES])
def test_transition_rules(schema: JSON, old: JSON, new: JSON, expected: list[Cause]) -> None:
    assert causes(invalid_error(new, schema, old=old, kind="Widget", group="example.com")) == expected


def test_atomic_list_items_never_correlate() -> None:
    schema = _schema(l={"type": "array", "items": {"type": "string", **_rule()}})
    validation.validate({"l": ["b"]}, schema, old={"l": ["a"]}, kind="Widget", group="example.com", name="w")


def test_other_cel_rules_are_ignored() -> None:
    schema = _schema(s={"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 2"}]})
    validation.validate({"s": "long"}, schema, old={"s": "x"}, kind="Widget", group="example.com", name="w")


@pytest.mark.parametrize(("pattern", "value", "matches"), [
    ("^(?i)[a-z]+$", "ABC", True),        # upstream AdmissionCheck controllerName style: flag after ^
    ("^[a-z]+$", "ABC", False),
    ("^a(b(?i)c)d$", "abCd", True),       # the flag holds to the end of its group only
    ("^a(b(?i)c)D$", "abCd", False),
    ("^x$", "x\n", False),                # $ is end of text in RE2
], ids=["flag-after-anchor", "no-flag", "scoped-flag", "flag-ends-with-group", "dollar-end-of-text"])
def test_crd_patterns_follow_re2_inline_flags(pattern: str, value: str, matches: bool) -> None:
    compiled = validation._go_regex(pattern)
    assert not isinstance(compiled, str), compiled
    assert bool(compiled.search(value)) is matches
