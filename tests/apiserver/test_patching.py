"""Merge patch, JSON patch and strategic merge patch against the behaviour of kube-apiserver."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.patching import json_patch, merge_patch, strategic_merge_patch
from gangscale.sim.apiserver.shapes import builtin_shape

POD = builtin_shape("Pod")
GENERIC_422 = "the server rejected our request due to an error in our request"


def pod(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **meta}, "spec": spec or {}}


def containers(*names_images: tuple[str, str]) -> dict[str, Any]:
    return {"containers": [{"name": n, "image": i} for n, i in names_images]}


# --- RFC 7386 ---------------------------------------------------------------------------------------

MERGE_CASES = [
    # RFC 7386 appendix A
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    # evanphx/json-patch also prunes nulls from objects inside an added array
    ({}, {"a": [{"b": None, "c": 1}, None]}, {"a": [{"c": 1}, None]}),
    # a null member counts as absent: the patch value is taken with its nulls pruned
    ({"a": None}, {"a": {"b": None, "c": 2}}, {"a": {"c": 2}}),
    # replacing an object by an array keeps the array as sent
    ({"a": {"x": 1}}, {"a": [{"b": None}]}, {"a": [{"b": None}]}),
]


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    MERGE_CASES,
    ids=[f"rfc7386-{i}" for i in range(13)] + ["array-nulls", "null-member", "obj-to-array"],
)
def test_merge_patch(target: Any, patch: Any, expected: Any) -> None:
    before_target, before_patch = copy.deepcopy(target), copy.deepcopy(patch)
    assert merge_patch(target, patch) == expected
    assert (target, patch) == (before_target, before_patch)


@pytest.mark.parametrize("patch", [None, "bar", 3], ids=["null", "string", "number"])
def test_merge_patch_rejects_scalar_patches_like_evanphx(patch: Any) -> None:
    with pytest.raises(StatusError) as err:
        merge_patch({"a": "foo"}, patch)
    assert (err.value.code, err.value.reason, err.value.message) == (500, "", "Invalid JSON Patch")


# --- RFC 6902 ---------------------------------------------------------------------------------------

JSON_PATCH_CASES = [
    (
        "A1-add-member",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux"}],
        {"foo": "bar", "baz": "qux"},
    ),
    (
        "A2-add-element",
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    ("A3-remove-member", {"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    (
        "A4-remove-element",
        {"foo": ["bar", "qux", "baz"]},
        [{"op": "remove", "path": "/foo/1"}],
        {"foo": ["bar", "baz"]},
    ),
    (
        "A5-replace",
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        "A6-move-value",
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        "A7-move-element",
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        "A8-test-success",
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        "A10-add-nested",
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        "A11-ignore-unknown-members",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
        {"foo": "bar", "baz": "qux"},
    ),
    ("A14-escapes", {"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    (
        "A16-add-array-value",
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
    ("copy", {"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}}),
    ("slash-key", {"a/b": 1}, [{"op": "replace", "path": "/a~1b", "value": 2}], {"a/b": 2}),
    ("test-null-on-missing-member", {"a": 1}, [{"op": "test", "path": "/b", "value": None}], {"a": 1}),
    ("null-document", {"a": 1}, None, {"a": 1}),
    # v4's partialDoc.get never fails for a missing key, so replace adds the member (the Ray autoscaler's
    # scaleStrategy patch depends on it).
    ("replace-missing-member-adds-it", {"a": 1}, [{"op": "replace", "path": "/b", "value": 2}], {"a": 1, "b": 2}),
]


@pytest.mark.parametrize(
    ("target", "ops", "expected"), [c[1:] for c in JSON_PATCH_CASES], ids=[c[0] for c in JSON_PATCH_CASES]
)
def test_json_patch(target: Any, ops: Any, expected: Any) -> None:
    before = copy.deepcopy(target)
    assert json_patch(target, ops) == expected
    assert target == before


JSON_PATCH_FAILURES = [
    ("A9-test-error", {"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
    ("A12-add-to-missing-parent", {"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
    ("A15-string-is-not-number", {"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}]),
    ("remove-missing", {"a": 1}, [{"op": "remove", "path": "/b"}]),
    ("replace-past-array-end", {"a": [1]}, [{"op": "replace", "path": "/a/1", "value": 2}]),
    ("replace-under-missing-parent", {"a": 1}, [{"op": "replace", "path": "/b/c", "value": 2}]),
    ("index-out-of-range", {"a": [1]}, [{"op": "add", "path": "/a/5", "value": 2}]),
    ("dash-only-for-add", {"a": [1]}, [{"op": "remove", "path": "/a/-"}]),
    ("unknown-op", {"a": 1}, [{"op": "frobnicate", "path": "/a"}]),
    ("missing-path", {"a": 1}, [{"op": "add", "value": 1}]),
    ("move-from-missing", {"a": 1}, [{"op": "move", "from": "/x", "path": "/y"}]),
]


@pytest.mark.parametrize(
    ("target", "ops"), [c[1:] for c in JSON_PATCH_FAILURES], ids=[c[0] for c in JSON_PATCH_FAILURES]
)
def test_json_patch_failures_are_the_generic_422(target: Any, ops: Any) -> None:
    with pytest.raises(StatusError) as err:
        json_patch(target, ops)
    assert (err.value.code, err.value.reason, err.value.message) == (422, "Invalid", GENERIC_422)
    assert err.value.__cause__ is not None


@pytest.mark.parametrize(
    ("ops", "code", "reason", "message"),
    [
        (
            {"op": "add"},
            400,
            "BadRequest",
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        ),
        ("x", 400, "BadRequest", "json: cannot unmarshal string into Go value of type jsonpatch.Patch"),
        (["x"], 400, "BadRequest", "json: cannot unmarshal string into Go value of type jsonpatch.Operation"),
        (
            [{"op": "test", "path": "/a", "value": 1}] * 10001,
            413,
            "RequestEntityTooLarge",
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001",
        ),
    ],
    ids=["object", "string", "string-op", "too-many"],
)
def test_json_patch_undecodable(ops: Any, code: int, reason: str, message: str) -> None:
    with pytest.raises(StatusError) as err:
        json_patch({"a": 1}, ops)
    assert (err.value.code, err.value.reason, err.value.message) == (code, reason, message)


# --- strategic merge patch --------------------------------------------------------------------------

SMP_CASES = [
    (
        "containers-merge-by-name",
        pod(containers(("a", "1"), ("b", "1"))),
        {"spec": {"containers": [{"name": "b", "image": "2"}]}},
        pod(containers(("a", "1"), ("b", "2"))),
    ),
    # Without $setElementOrder the patch's items go before the server-only ones (mergeSortedSlice).
    (
        "new-container-first",
        pod(containers(("a", "1"))),
        {"spec": {"containers": [{"name": "z", "image": "9"}]}},
        pod(containers(("z", "9"), ("a", "1"))),
    ),
    (
        "tolerations-replaced",
        pod({"tolerations": [{"key": "a"}, {"key": "b"}]}),
        {"spec": {"tolerations": [{"key": "c"}]}},
        pod({"tolerations": [{"key": "c"}]}),
    ),
    (
        "finalizers-union-patch-order",
        pod(finalizers=["a"]),
        {"metadata": {"finalizers": ["b", "a"]}},
        pod(finalizers=["b", "a"]),
    ),
    (
        "finalizers-new-first",
        pod(finalizers=["x", "a"]),
        {"metadata": {"finalizers": ["b"]}},
        pod(finalizers=["b", "x", "a"]),
    ),
    (
        "delete-from-primitive-list",
        pod(finalizers=["x", "a", "y"]),
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
        pod(finalizers=["x", "y"]),
    ),
    ("delete-from-missing-list", pod(), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, pod()),
    (
        "patch-delete-item",
        pod(containers(("a", "1"), ("b", "1"))),
        {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}},
        pod(containers(("b", "1"))),
    ),
    (
        "patch-replace-list",
        pod(containers(("a", "1"), ("b", "1"))),
        {"spec": {"containers": [{"name": "c", "image": "3"}, {"$patch": "replace"}]}},
        pod(containers(("c", "3"))),
    ),
    (
        "patch-replace-map",
        pod(labels={"a": "1", "b": "2"}),
        {"metadata": {"labels": {"$patch": "replace", "c": "3"}}},
        pod(labels={"c": "3"}),
    ),
    (
        "patch-delete-map",
        pod({"nodeSelector": {"a": "1"}, "hostname": "h"}),
        {"spec": {"nodeSelector": {"$patch": "delete"}}},
        pod({"nodeSelector": {}, "hostname": "h"}),
    ),
    (
        "null-deletes-key",
        pod(labels={"a": "1", "b": "2"}),
        {"metadata": {"labels": {"a": None, "z": None}}},
        pod(labels={"b": "2"}),
    ),
    (
        "retain-keys",
        pod({"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}),
        {"spec": {"volumes": [{"name": "v", "emptyDir": {}, "$retainKeys": ["emptyDir", "name"]}]}},
        pod({"volumes": [{"name": "v", "emptyDir": {}}]}),
    ),
    (
        "set-element-order-reorders",
        pod(containers(("a", "1"), ("b", "1"))),
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                "containers": [{"name": "a", "image": "2"}],
            }
        },
        pod(containers(("b", "1"), ("a", "2"))),
    ),
    (
        "set-element-order-adds",
        pod(containers(("a", "1"))),
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "z"}, {"name": "a"}],
                "containers": [{"name": "z", "image": "9"}],
            }
        },
        pod(containers(("z", "9"), ("a", "1"))),
    ),
    (
        "set-element-order-primitives",
        pod(finalizers=["a", "b"]),
        {"metadata": {"$setElementOrder/finalizers": ["b", "c", "a"], "finalizers": ["c"]}},
        pod(finalizers=["b", "c", "a"]),
    ),
    (
        "ports-merge-on-containerPort-only",
        pod(
            {
                "containers": [
                    {
                        "name": "a",
                        "ports": [
                            {"containerPort": 80, "protocol": "TCP"},
                            {"containerPort": 80, "protocol": "UDP"},
                        ],
                    }
                ]
            }
        ),
        {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "web"}]}]}},
        pod(
            {
                "containers": [
                    {
                        "name": "a",
                        "ports": [
                            {"containerPort": 80, "protocol": "TCP", "name": "web"},
                            {"containerPort": 80, "protocol": "UDP"},
                        ],
                    }
                ]
            }
        ),
    ),
    (
        "added-value-loses-nulls-and-directives",
        pod(),
        {"spec": {"affinity": {"nodeAffinity": None, "podAffinity": {"$patch": "delete"}, "x": 1}}},
        pod({"affinity": {"x": 1}}),
    ),
    ("unknown-dollar-keys-dropped", pod(), {"spec": {"$weird": 1, "hostname": "h"}}, pod({"hostname": "h"})),
    ("null-patch-is-empty", pod(labels={"a": "1"}), None, pod(labels={"a": "1"})),
]


@pytest.mark.parametrize(
    ("target", "patch", "expected"), [c[1:] for c in SMP_CASES], ids=[c[0] for c in SMP_CASES]
)
def test_strategic_merge_patch(target: dict[str, Any], patch: Any, expected: dict[str, Any]) -> None:
    before_target, before_patch = copy.deepcopy(target), copy.deepcopy(patch)
    assert strategic_merge_patch(target, patch, POD) == expected
    assert (target, patch) == (before_target, before_patch)


SMP_ERRORS = [
    (
        "patch-not-object",
        ["x"],
        400,
        "BadRequest",
        "json: cannot unmarshal array into Go value of type map[string]interface {}",
    ),
    (
        "bad-retain-keys-format",
        {"spec": {"volumes": [{"name": "v", "$retainKeys": "name"}]}},
        400,
        "BadRequest",
        "invalid patch format of retainKeys",
    ),
    (
        "key-outside-retain-keys",
        {"spec": {"volumes": [{"name": "v", "emptyDir": {}, "$retainKeys": ["name"]}]}},
        400,
        "BadRequest",
        "invalid patch format of retainKeys",
    ),
    (
        "set-element-order-without-field",
        {"spec": {"$setElementOrder": []}},
        400,
        "BadRequest",
        "invalid patch format of setElementOrder list",
    ),
    (
        "delete-list-without-field",
        {"metadata": {"$deleteFromPrimitiveList": ["a"]}},
        400,
        "BadRequest",
        "invalid patch format of primitive list",
    ),
    (
        "unknown-map-directive",
        {"metadata": {"labels": {"$patch": "bogus", "a": "b"}}},
        500,
        "",
        "unknown patch type: bogus in map: map[$patch:bogus a:b]",
    ),
    (
        "merge-directive-in-list",
        {"spec": {"containers": [{"$patch": "merge"}]}},
        500,
        "",
        "merging lists cannot yet be specified in the patch",
    ),
    (
        "item-without-merge-key",
        {"spec": {"containers": [{"image": "x"}]}},
        500,
        "",
        "map: map[image:x] does not contain declared merge key: name",
    ),
    ("list-of-lists", {"metadata": {"finalizers": [["x"]]}}, 422, "Invalid", GENERIC_422),
    (
        "order-does-not-match",
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "b", "image": "1"}],
            }
        },
        500,
        "",
        "the order in patch list:\n[map[image:1 name:b]]\n"
        " doesn't match $setElementOrder list:\n[map[name:a]]",
    ),
]


@pytest.mark.parametrize(
    ("patch", "code", "reason", "message"), [c[1:] for c in SMP_ERRORS], ids=[c[0] for c in SMP_ERRORS]
)
def test_strategic_merge_patch_errors(patch: Any, code: int, reason: str, message: str) -> None:
    # Directives are only interpreted where the patched field exists; added values just lose them.
    target = pod({**containers(("a", "1")), "volumes": [{"name": "v"}]}, finalizers=["a"], labels={"a": "1"})
    with pytest.raises(StatusError) as err:
        strategic_merge_patch(target, patch, POD)
    assert (err.value.code, err.value.reason, err.value.message) == (code, reason, message)
