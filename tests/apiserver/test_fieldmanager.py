"""Server-side apply and managedFields bookkeeping against kube-apiserver's field manager."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from gangscale.sim.apiserver import fieldmanager as fm
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.fieldsets import (
    FieldSet,
    TypedError,
    compare,
    compare_normalized,
    normalize,
    path_string,
    to_set,
)
from gangscale.sim.apiserver.shapes import SchemaShape, Shape, builtin_shape

AV = "x.io/v1"
T = [f"2024-05-01T00:00:0{i}Z" for i in range(10)]
POD = builtin_shape("Pod")
WIDGET = SchemaShape(
    {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "items": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "v": {"type": "integer"}},
                        },
                    },
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {
                            "type": "object",
                            "properties": {
                                "type": {"type": "string"},
                                "status": {"type": "string"},
                                "reason": {"type": "string"},
                            },
                        },
                    }
                },
            },
        },
    }
)


def widget(
    spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": AV,
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns", **meta},
    }
    if spec is not None:
        out["spec"] = spec
    if status is not None:
        out["status"] = status
    return out


def cond(kind: str, status: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": kind, "status": status}]}}


def entry(
    manager: str,
    operation: str,
    fields: dict[str, Any],
    *,
    time: str | None = None,
    sub: str | None = None,
    av: str = AV,
) -> dict[str, Any]:
    out: dict[str, Any] = {"manager": manager, "operation": operation, "apiVersion": av}
    if time:
        out["time"] = time
    out.update({"fieldsType": "FieldsV1", "fieldsV1": fields})
    if sub:
        out["subresource"] = sub
    return out


def do_apply(
    current: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    now: str,
    *,
    force: bool = False,
    sub: str | None = None,
    shape: Shape = WIDGET,
    **kw: Any,
) -> dict[str, Any]:
    return fm.apply(
        current,
        applied,
        manager=manager,
        force=force,
        shape=shape,
        api_version=applied.get("apiVersion", AV),
        subresource=sub,
        now=now,
        **kw,
    )


def do_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    now: str,
    *,
    sub: str | None = None,
    shape: Shape = WIDGET,
    av: str = AV,
    **kw: Any,
) -> dict[str, Any]:
    return fm.record_update(
        old, new, manager=manager, shape=shape, api_version=av, subresource=sub, now=now, **kw
    )


def managed(obj: dict[str, Any]) -> Any:
    return obj["metadata"].get("managedFields")


K_NAME_C = 'k:{"name":"c"}'
K_PROVISIONED = 'k:{"type":"Provisioned"}'
PROVISIONED: dict[str, Any] = {"f:status": {"f:conditions": {K_PROVISIONED: {".": {}, "f:status": {}, "f:type": {}}}}}

# --- field sets ------------------------------------------------------------------------------------

FIELDS_V1_CASES = [
    (
        "scalars-and-atomic-list",
        WIDGET,
        {"spec": {"replicas": 1, "tags": ["a"]}},
        {"f:spec": {"f:replicas": {}, "f:tags": {}}},
    ),
    (
        "set-items-sorted",
        WIDGET,
        {"spec": {"set": ["b", "a"]}},
        {"f:spec": {"f:set": {'v:"a"': {}, 'v:"b"': {}}}},
    ),
    (
        "map-items",
        WIDGET,
        {"spec": {"items": [{"name": "x", "v": 1}]}},
        {"f:spec": {"f:items": {'k:{"name":"x"}': {".": {}, "f:name": {}, "f:v": {}}}}},
    ),
    (
        "unknown-keys-owned-themselves",
        WIDGET,
        {"spec": {"extra": {"a": {"b": 1}, "l": [1]}}},
        {"f:spec": {"f:extra": {"f:a": {".": {}, "f:b": {}}, "f:l": {}}}},
    ),
    (
        "go-json-escapes-in-keys",
        WIDGET,
        {"spec": {"items": [{"name": "<a&b>"}]}},
        {"f:spec": {"f:items": {'k:{"name":"\\u003ca\\u0026b\\u003e"}': {".": {}, "f:name": {}}}}},
    ),
    (
        "ports-keys-sorted-with-default",
        POD,
        {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}},
        {
            "f:spec": {
                "f:containers": {
                    K_NAME_C: {
                        ".": {},
                        "f:name": {},
                        "f:ports": {
                            'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}
                        },
                    }
                }
            }
        },
    ),
    ("atomic-map", POD, {"spec": {"nodeSelector": {"a": "b"}}}, {"f:spec": {"f:nodeSelector": {}}}),
    (
        "granular-labels-finalizers",
        POD,
        {"metadata": {"labels": {"a": "b"}, "finalizers": ["f"]}},
        {"f:metadata": {"f:finalizers": {'v:"f"': {}}, "f:labels": {"f:a": {}}}},
    ),
    (
        "owner-references-by-uid",
        POD,
        {"metadata": {"ownerReferences": [{"uid": "u", "name": "o"}]}},
        {"f:metadata": {"f:ownerReferences": {'k:{"uid":"u"}': {".": {}, "f:name": {}, "f:uid": {}}}}},
    ),
    ("tolerations-atomic", POD, {"spec": {"tolerations": [{"key": "k"}]}}, {"f:spec": {"f:tolerations": {}}}),
]


@pytest.mark.parametrize(
    ("shape", "value", "expected"), [c[1:] for c in FIELDS_V1_CASES], ids=[c[0] for c in FIELDS_V1_CASES]
)
def test_fields_v1_encoding_round_trips(
    shape: Shape, value: dict[str, Any], expected: dict[str, Any]
) -> None:
    fields = to_set(value, shape)
    encoded = fields.to_fields_v1()
    assert encoded == expected
    assert list(encoded) == list(expected)  # key order is part of the wire form
    assert FieldSet.from_fields_v1(encoded) == fields


@pytest.mark.parametrize(
    ("value", "shape", "expected"),
    [
        (
            cond("Provisioned", "True"),
            WIDGET,
            [
                '.status.conditions[type="Provisioned"]',
                '.status.conditions[type="Provisioned"].status',
                '.status.conditions[type="Provisioned"].type',
            ],
        ),
        (
            {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}},
            POD,
            [
                '.spec.containers[name="c"]',
                '.spec.containers[name="c"].name',
                '.spec.containers[name="c"].ports[containerPort=80,protocol="TCP"]',
                '.spec.containers[name="c"].ports[containerPort=80,protocol="TCP"].containerPort',
            ],
        ),
        ({"spec": {"set": ["a"], "tags": ["x"]}}, WIDGET, [".spec.tags", '.spec.set[="a"]']),
    ],
    ids=["condition", "ports", "set-and-atomic"],
)
def test_paths_print_as_the_library_does(value: dict[str, Any], shape: Shape, expected: list[str]) -> None:
    assert [path_string(p) for p in to_set(value, shape).paths()] == expected


# --- updates ---------------------------------------------------------------------------------------


def test_create_owns_everything_present_with_zero_value_markers() -> None:
    new = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "d", "uid": "u", "labels": {"run": "p"}},
        "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]},
        "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]},
    }
    out = do_update(None, new, "kubectl-run", T[0], shape=POD, av="v1")
    assert managed(out) == [
        entry(
            "kubectl-run",
            "Update",
            {
                "f:metadata": {"f:labels": {".": {}, "f:run": {}}},
                "f:spec": {
                    "f:containers": {
                        K_NAME_C: {
                            ".": {},
                            "f:image": {},
                            "f:name": {},
                            "f:ports": {
                                ".": {},
                                'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}},
                            },
                            "f:resources": {},
                        }
                    }
                },
                "f:status": {
                    "f:conditions": {
                        ".": {},
                        'k:{"type":"Ready"}': {
                            ".": {},
                            "f:lastProbeTime": {},
                            "f:lastTransitionTime": {},
                            "f:status": {},
                            "f:type": {},
                        },
                    },
                    "f:phase": {},
                },
            },
            time=T[0],
            av="v1",
        )
    ]
    assert {k: v for k, v in out.items() if k != "metadata"} == {
        k: v for k, v in new.items() if k != "metadata"
    }


def test_crd_create_marks_new_top_level_nodes() -> None:
    out = do_update(None, widget({"replicas": 1}), "ctl", T[0])
    assert managed(out) == [entry("ctl", "Update", {"f:spec": {".": {}, "f:replicas": {}}}, time=T[0])]


def test_update_takes_fields_from_an_apply_manager_and_removal_leaves_every_set() -> None:
    obj = do_apply(None, widget({"replicas": 1, "tags": ["a"], "set": ["x"]}), "a", T[0])
    new = copy.deepcopy(obj)
    new["spec"]["replicas"] = 2
    del new["spec"]["tags"]
    out = do_update(obj, new, "ctl", T[1])
    assert managed(out) == [
        entry("a", "Apply", {"f:spec": {"f:set": {'v:"x"': {}}}}, time=T[0]),
        entry("ctl", "Update", {"f:spec": {"f:replicas": {}}}, time=T[1]),
    ]


def test_one_update_entry_per_api_version_and_subresource() -> None:
    obj = do_update(None, widget({"replicas": 1}), "ctl", T[0])
    obj = do_update(obj, widget({"replicas": 2}), "ctl", T[1], av="x.io/v2")
    obj = do_update(obj, widget({"replicas": 2}, cond("A", "True")["status"]), "ctl", T[2], sub="status")
    assert managed(obj) == [
        # The v1 entry lost .spec.replicas to v2 but still owns the .spec node its create added.
        entry("ctl", "Update", {"f:spec": {}}, time=T[0]),
        entry("ctl", "Update", {"f:spec": {"f:replicas": {}}}, time=T[1], av="x.io/v2"),
        entry(
            "ctl",
            "Update",
            {
                "f:status": {
                    ".": {},
                    "f:conditions": {".": {}, 'k:{"type":"A"}': {".": {}, "f:status": {}, "f:type": {}}},
                }
            },
            time=T[2],
            sub="status",
        ),
    ]


def test_unchanged_write_keeps_times_and_adds_no_entry() -> None:
    obj = do_update(None, widget({"replicas": 1}), "ctl", T[0])
    again = do_update(obj, widget({"replicas": 1}), "ctl", T[5])
    other = do_update(again, widget({"replicas": 1}), "other", T[6])
    assert managed(other) == managed(obj)


@pytest.mark.parametrize("reset", [[], [{}]], ids=["empty-list", "one-empty-entry"])
def test_reset_managed_fields_leaves_the_object_untracked(reset: list[Any]) -> None:
    obj = do_update(None, widget({"replicas": 1}), "ctl", T[0])
    cleared = do_update(
        obj, {**widget({"replicas": 1}), "metadata": {**obj["metadata"], "managedFields": reset}}, "ctl", T[1]
    )
    assert "managedFields" not in cleared["metadata"]
    later = do_update(cleared, widget({"replicas": 3}), "ctl", T[2])
    assert "managedFields" not in later["metadata"]


def test_request_managed_fields_replace_the_live_ones_except_on_subresources() -> None:
    obj = do_update(None, widget({"replicas": 1}), "ctl", T[0])
    mine = [entry("me", "Update", {"f:spec": {"f:replicas": {}}}, time=T[0])]
    put = do_update(obj, widget({"replicas": 1}, managedFields=mine), "ctl", T[1])
    assert managed(put) == mine
    status = do_update(obj, widget({"replicas": 1}, managedFields=mine), "ctl", T[1], sub="status")
    assert managed(status) == managed(obj)


def test_update_managers_are_capped_into_ancient_changes() -> None:
    obj = do_update(None, widget({"replicas": 0}), "m0", T[0])
    for i in range(1, 11):
        extra = {f"k{j}": j for j in range(1, i + 1)}
        obj = do_update(obj, widget({"replicas": 0, "extra": extra}), f"m{i}", f"2024-05-01T00:00:{i:02d}Z")
    assert [e["manager"] for e in managed(obj)] == ["ancient-changes", *(f"m{i}" for i in range(2, 11))]
    assert managed(obj)[0] == entry(
        "ancient-changes",
        "Update",
        {"f:spec": {".": {}, "f:extra": {".": {}, "f:k1": {}}, "f:replicas": {}}},
        time="2024-05-01T00:00:01Z",
    )


# --- apply -----------------------------------------------------------------------------------------


def test_create_by_apply() -> None:
    out = do_apply(
        None, widget({"replicas": 1, "items": [{"name": "a", "v": 1}]}, labels={"l": "1"}), "a", T[0]
    )
    assert out == widget(
        {"replicas": 1, "items": [{"name": "a", "v": 1}]},
        labels={"l": "1"},
        managedFields=[
            entry(
                "a",
                "Apply",
                {
                    "f:metadata": {"f:labels": {"f:l": {}}},
                    "f:spec": {
                        "f:items": {'k:{"name":"a"}': {".": {}, "f:name": {}, "f:v": {}}},
                        "f:replicas": {},
                    },
                },
                time=T[0],
            )
        ],
    )


def test_two_managers_co_own_a_condition_with_equal_values() -> None:
    obj = do_apply(None, widget({"replicas": 1}), "owner", T[0])
    obj = do_apply(obj, widget(status=cond("Provisioned", "True")["status"]), "kueue", T[1], sub="status")
    obj = do_apply(obj, widget(status=cond("Provisioned", "True")["status"]), "gangscale", T[2], sub="status")
    assert managed(obj) == [
        entry("gangscale", "Apply", PROVISIONED, sub="status"),  # a no-op apply records no time
        entry("owner", "Apply", {"f:spec": {"f:replicas": {}}}, time=T[0]),
        entry("kueue", "Apply", PROVISIONED, time=T[1], sub="status"),
    ]
    assert obj["status"] == {"conditions": [{"type": "Provisioned", "status": "True"}]}


def _shared_condition() -> dict[str, Any]:
    obj = do_apply(None, widget({"replicas": 1}, cond("Provisioned", "True")["status"]), "kueue", T[0])
    return do_update(obj, widget({"replicas": 2}, cond("Provisioned", "True")["status"]), "ctl", T[1])


def test_conflict_with_one_manager() -> None:
    obj = do_apply(None, widget(status=cond("Provisioned", "True")["status"]), "kueue", T[0], sub="status")
    with pytest.raises(fm.ApplyConflict) as err:
        do_apply(obj, widget(status=cond("Provisioned", "False")["status"]), "gangscale", T[1], sub="status")
    assert err.value.conflicts == (("kueue", '.status.conditions[type="Provisioned"].status'),)
    assert err.value.to_status_error("widgets", "x.io", "w").to_json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Apply failed with 1 conflict: conflict with "kueue" with subresource "status": '
        '.status.conditions[type="Provisioned"].status',
        "reason": "Conflict",
        "code": 409,
        "details": {
            "causes": [
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "kueue" with subresource "status"',
                    "field": '.status.conditions[type="Provisioned"].status',
                }
            ]
        },
    }


def test_conflicts_with_several_managers_are_grouped() -> None:
    obj = _shared_condition()
    with pytest.raises(fm.ApplyConflict) as err:
        do_apply(obj, widget({"replicas": 3}, cond("Provisioned", "False")["status"]), "me", T[2])
    # Grouped by the sorted manager identifiers ({"manager":"ctl",...} < {"manager":"kueue",...}).
    assert err.value.message == (
        'Apply failed with 2 conflicts: conflicts with "ctl" using x.io/v1:\n'
        "- .spec.replicas\n"
        'conflicts with "kueue":\n'
        '- .status.conditions[type="Provisioned"].status'
    )
    assert [c.to_json() for c in err.value.to_status_error().causes] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "ctl" using x.io/v1',
            "field": ".spec.replicas",
        },
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "kueue"',
            "field": '.status.conditions[type="Provisioned"].status',
        },
    ]


def test_force_moves_ownership() -> None:
    obj = do_apply(_shared_condition(), widget({"replicas": 3}), "me", T[2], force=True)
    assert obj["spec"] == {"replicas": 3}
    assert managed(obj) == [
        entry("kueue", "Apply", PROVISIONED, time=T[0]),
        entry("me", "Apply", {"f:spec": {"f:replicas": {}}}, time=T[2]),
    ]


def test_equal_value_is_shared_without_conflict() -> None:
    obj = do_apply(_shared_condition(), widget({"replicas": 2}), "me", T[2])
    # "me" changed nothing, so its entry has no time and sorts first among Apply entries.
    assert [e["manager"] for e in managed(obj)] == ["me", "kueue", "ctl"]
    assert managed(obj)[0] == entry("me", "Apply", {"f:spec": {"f:replicas": {}}})


def test_applier_dropping_a_field_removes_it_unless_someone_else_owns_it() -> None:
    obj = do_apply(None, widget({"replicas": 1, "tags": ["a"], "set": ["x", "y"]}), "a", T[0])
    obj = do_apply(obj, widget({"set": ["y"]}), "b", T[1])
    obj = do_apply(obj, widget({"replicas": 1}), "a", T[2])
    assert obj["spec"] == {"replicas": 1, "set": ["y"]}
    assert managed(obj) == [
        entry("b", "Apply", {"f:spec": {"f:set": {'v:"y"': {}}}}),
        entry("a", "Apply", {"f:spec": {"f:replicas": {}}}, time=T[2]),
    ]


def test_fields_owned_by_an_updater_survive_the_appliers_pruning() -> None:
    obj = do_apply(None, widget({"replicas": 1, "tags": ["a"]}), "a", T[0])
    obj = do_update(obj, widget({"replicas": 1, "tags": ["b"]}), "ctl", T[1])
    obj = do_apply(obj, widget({"replicas": 1}), "a", T[2])
    assert obj["spec"] == {"replicas": 1, "tags": ["b"]}


def test_list_map_merge_keeps_applied_order_and_live_only_items() -> None:
    obj = do_update(None, widget({"items": [{"name": "a"}, {"name": "live"}, {"name": "b"}]}), "ctl", T[0])
    obj = do_apply(
        obj, widget({"items": [{"name": "b", "v": 2}, {"name": "c"}, {"name": "a", "v": 1}]}), "me", T[1]
    )
    assert obj["spec"]["items"] == [
        {"name": "live"},
        {"name": "b", "v": 2},
        {"name": "c"},
        {"name": "a", "v": 1},
    ]


def test_status_subresource_apply_ignores_other_roots() -> None:
    obj = do_apply(None, widget({"replicas": 1}), "owner", T[0])
    out = do_apply(
        obj,
        widget({"replicas": 9}, cond("Ready", "True")["status"]),
        "ctl",
        T[1],
        sub="status",
        allowed_roots=frozenset({"status"}),
    )
    assert out["spec"] == {"replicas": 1}
    assert managed(out)[1] == entry(
        "ctl",
        "Apply",
        {"f:status": {"f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}}}},
        time=T[1],
        sub="status",
    )


def test_main_endpoint_apply_does_not_own_reset_status() -> None:
    reset = fm.reset_fields_for("Widget", subresource=None, status_subresource=True)
    out = do_apply(
        None, widget({"replicas": 1}, cond("Ready", "True")["status"]), "me", T[0], reset_fields=reset
    )
    assert "status" not in out
    assert managed(out) == [entry("me", "Apply", {"f:spec": {"f:replicas": {}}}, time=T[0])]


def test_first_apply_to_an_untracked_object_records_before_first_apply() -> None:
    obj = widget({"replicas": 1, "tags": ["a"]})
    with pytest.raises(fm.ApplyConflict) as err:
        do_apply(obj, widget({"replicas": 2}), "me", T[1])
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using x.io/v1: .spec.replicas'
    )
    out = do_apply(obj, widget({"replicas": 2}), "me", T[1], force=True)
    assert managed(out) == [
        entry("me", "Apply", {"f:spec": {"f:replicas": {}}}, time=T[1]),
        entry("before-first-apply", "Update", {"f:spec": {".": {}, "f:tags": {}}}, time=T[1]),
    ]


def test_kubectl_takes_over_what_client_side_apply_recorded() -> None:
    recorded = (
        '{"apiVersion":"x.io/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns"},'
        '"spec":{"replicas":1}}\n'
    )
    obj = do_update(
        None,
        widget({"replicas": 1}, annotations={fm.LAST_APPLIED: recorded}),
        "kubectl-client-side-apply",
        T[0],
    )
    applied = widget({"replicas": 2})
    out = do_apply(obj, applied, "kubectl", T[1])
    assert out["spec"] == {"replicas": 2}
    assert out["metadata"]["annotations"][fm.LAST_APPLIED] == (
        '{"apiVersion":"x.io/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns"},"spec":{"replicas":2}}\n'
    )
    assert managed(out) == [
        entry("kubectl", "Apply", {"f:spec": {"f:replicas": {}}}, time=T[1]),
        entry(
            "kubectl-client-side-apply",
            "Update",
            {"f:metadata": {"f:annotations": {".": {}, f"f:{fm.LAST_APPLIED}": {}}}, "f:spec": {}},
            time=T[0],
        ),
    ]
    with pytest.raises(fm.ApplyConflict):
        do_apply(obj, applied, "helm", T[1])


@pytest.mark.parametrize(
    ("applied", "message"),
    [
        (
            widget({"items": [{"name": "a"}, {"name": "a"}]}),
            "failed to create typed patch object (ns/w; x.io/v1, Kind=Widget): "
            '.spec.items: duplicate entries for key [name="a"]',
        ),
        (
            widget({"items": [{"v": 1}], "set": [{"a": 1}]}),
            "failed to create typed patch object (ns/w; x.io/v1, Kind=Widget): errors:\n"
            '  .spec.items: element 0: associative list with keys has an element that omits key field "name" '
            "(and doesn't have default value)\n"
            "  .spec.set: element 0: associative list without keys has an element that's a map type",
        ),
    ],
    ids=["duplicate-key", "missing-key-and-map-in-set"],
)
def test_untypable_apply_bodies_fail_like_the_real_server(applied: dict[str, Any], message: str) -> None:
    with pytest.raises(StatusError) as err:
        do_apply(None, applied, "me", T[0])
    assert (err.value.code, err.value.reason, err.value.message) == (500, "", message)


def test_apply_body_with_managed_fields_is_rejected() -> None:
    with pytest.raises(StatusError) as err:
        do_apply(None, widget(managedFields=[]), "me", T[0])
    assert (err.value.code, err.value.message) == (400, "metadata.managedFields must be nil")


def test_apply_never_mutates_its_inputs() -> None:
    current = do_apply(None, widget({"replicas": 1, "tags": ["a"]}), "a", T[0])
    applied = widget({"replicas": 2})
    before = copy.deepcopy((current, applied))
    do_apply(current, applied, "a", T[1])
    assert (current, applied) == before


# --- request checks --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            [1],
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array "
            "into Go value of type map[string]interface {}",
        ),
        (None, "invalid object type: /, Kind="),
        ({"apiVersion": "x.io/v2", "kind": "Widget"}, "invalid object type: x.io/v2, Kind=Widget"),
        ({"apiVersion": "v1", "kind": "Widget"}, "invalid object type: /v1, Kind=Widget"),
        (widget(managedFields=[{}]), "metadata.managedFields must be nil"),
        (
            {**widget(), "metadata": {"name": "other"}},
            "the name of the object (other) does not match the name on the URL (w)",
        ),
        (
            {**widget(), "metadata": {"namespace": "x"}},
            "the namespace of the object (x) does not match the namespace on the request (ns)",
        ),
    ],
    ids=["array", "null", "wrong-version", "core-version", "managed-fields", "name", "namespace"],
)
def test_validate_apply_body(body: Any, message: str) -> None:
    with pytest.raises(StatusError) as err:
        fm.validate_apply_body(body, api_version=AV, kind="Widget", name="w", namespace="ns")
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


def test_missing_field_manager_is_the_patch_options_422() -> None:
    assert fm.missing_manager_error().to_json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'PatchOptions.meta.k8s.io "" is invalid: '
        "fieldManager: Required value: is required for apply patch",
        "reason": "Invalid",
        "code": 422,
        "details": {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: is required for apply patch",
                    "field": "fieldManager",
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("apply", "manager", "force", "message"),
    [
        (
            True,
            "",
            False,
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
            "is required for apply patch",
        ),
        (
            False,
            "m",
            True,
            'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: '
            "may not be specified for non-apply patch",
        ),
        (
            True,
            "m" * 129,
            False,
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Too long: must have at most 128 bytes',
        ),
    ],
    ids=["no-manager", "force-without-apply", "too-long"],
)
def test_validate_patch_options(apply: bool, manager: str, force: bool, message: str) -> None:
    with pytest.raises(StatusError) as err:
        fm.validate_patch_options(apply=apply, field_manager=manager, force_given=force)
    assert (err.value.code, err.value.message) == (422, message)


def test_check_applied_identity() -> None:
    with pytest.raises(StatusError) as err:
        fm.check_applied_identity(widget(uid="u1"), created=True, resource="widgets", group="x.io", name="w")
    assert (err.value.code, err.value.message) == (
        409,
        'Operation cannot be fulfilled on widgets.x.io "w": uid mismatch: '
        "the provided object specified uid u1, "
        "and no existing object was found",
    )
    with pytest.raises(StatusError) as err:
        fm.check_applied_identity({"metadata": {}}, created=True, resource="widgets", group="x.io", name="w")
    assert (
        err.value.message
        == "the name of the object (w based on URL) was undeterminable: name must be provided"
    )


@pytest.mark.parametrize(
    ("manager", "agent", "expected"),
    [
        ("explicit", "kubectl/v1.30.0 (linux/amd64)", "explicit"),
        (None, "kubectl/v1.30.0 (linux/amd64) kubernetes/abc", "kubectl"),
        ("", "OpenAPI-Generator/30.1.0/python", "OpenAPI-Generator"),
    ],
    ids=["explicit", "kubectl", "python-client"],
)
def test_manager_from_user_agent(manager: str | None, agent: str, expected: str) -> None:
    assert fm.manager_from_user_agent(manager, agent) == expected


@pytest.mark.parametrize(
    ("kind", "sub", "status_sub", "expected"),
    [
        (
            "Pod",
            "status",
            True,
            (("spec",), ("metadata", "deletionTimestamp"), ("metadata", "ownerReferences")),
        ),
        ("Pod", None, True, (("status",),)),
        ("Widget", "status", True, (("spec",),)),
        ("Lease", None, False, ()),
    ],
    ids=["pod-status", "pod", "cr-status", "lease"],
)
def test_reset_fields_for(kind: str, sub: str | None, status_sub: bool, expected: tuple[Any, ...]) -> None:
    assert fm.reset_fields_for(kind, subresource=sub, status_subresource=status_sub) == expected


# --- Compare without normalizing what is equal -------------------------------------------------------------

def _mutated(rng: Any, value: Any) -> Any:
    """``value`` with random changes: keys dropped, replaced by null / empty / scalars, list items dropped and
    repeated, list keys and zero-valued fields added (what normalization and list keys react to)."""
    if isinstance(value, dict):
        out = dict(value)
        for k in list(out):
            roll = rng.random()
            if roll < 0.08:
                del out[k]
            elif roll < 0.16:
                out[k] = rng.choice([None, {}, [], "x", 0, False, 1.0])
            elif roll < 0.5:
                out[k] = _mutated(rng, out[k])
        if rng.random() < 0.2:
            out[rng.choice(["name", "protocol", "containerPort", "key", "image", "resources", "ports"])] = \
                rng.choice([None, {}, "p", 80, [{"containerPort": 80}], {"a": 1}])
        return out
    if isinstance(value, list):
        items = [_mutated(rng, v) if rng.random() < 0.5 else v for v in value]
        if items and rng.random() < 0.2:
            items.pop(rng.randrange(len(items)))
        if items and rng.random() < 0.2:
            items.append(copy.deepcopy(rng.choice(items)))
        return items
    return rng.choice([None, "y", 3, True, 3.0]) if rng.random() < 0.3 else value


def _a_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "labels": {"app": "a"}, "annotations": {"x": "1"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                              "uid": "u", "controller": True}]},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "main", "image": "i:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.name"}}}],
                 "ports": [{"containerPort": 80}, {"containerPort": 81, "protocol": "UDP"}],
                 "resources": {"requests": {"cpu": "1"}}, "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                "volumes": [{"name": "v", "configMap": {"name": "c"}}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0}]}}


def _comparison(shape: Shape, lhs: Any, rhs: Any, fast: bool) -> Any:
    try:
        diff = compare_normalized(lhs, rhs, shape) if fast else \
            compare(normalize(lhs, shape), normalize(rhs, shape), shape)
    except TypedError as exc:
        return "TypedError", str(exc)
    return [sorted(map(path_string, s.paths())) for s in (diff.added, diff.modified, diff.removed)]


@pytest.mark.parametrize("seed", range(40), ids=lambda s: f"seed-{s}")
@pytest.mark.parametrize(("kind", "shape"), [("Pod", POD), ("Widget", WIDGET)], ids=["pod", "custom-resource"])
def test_compare_normalized_is_compare_of_the_normalized_objects(kind: str, shape: Shape, seed: int) -> None:
    """What an Update records is the comparison of the two objects as Go serializes them (zero fields filled in);
    comparing them while normalizing only what differs must find the same added, modified and removed fields."""
    rng = random.Random(seed)
    base = _a_pod() if kind == "Pod" else {
        "apiVersion": AV, "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"replicas": 1, "tags": ["a", "b"], "set": ["x"], "items": [{"name": "a", "v": 1}],
                 "extra": {"free": {"form": 1}}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    one, other = _mutated(rng, base), _mutated(rng, base) if seed % 3 else base
    for lhs, rhs in [(other, one), ({}, one), (one, other), (one, {}), (one, copy.deepcopy(one))]:
        assert _comparison(shape, lhs, rhs, fast=True) == _comparison(shape, lhs, rhs, fast=False)
