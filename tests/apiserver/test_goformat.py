"""Go's text forms of values: the outputs of strconv.Quote, fmt's %v and encoding/json for the same inputs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gangscale.sim.apiserver.goformat import FloatStyle, GoStruct, go_float, go_json, go_quote, go_v

# --- strconv.Quote ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "quoted"), [
    ("", '""'),
    ("plain", '"plain"'),
    ('a"b\\c', r'"a\"b\\c"'),
    ("\a\b\f\n\r\t\v", r'"\a\b\f\n\r\t\v"'),
    ("\x00\x01\x1f", r'"\x00\x01\x1f"'),
    ("\x7f", r'"\x7f"'),
    ("\x80\x9f", r'"\u0080\u009f"'),
    ("é日本", '"é日本"'),
    ("\U0001f600", '"\U0001f600"'),
    ("\u00a0", r'"\u00a0"'),
    ("\u200b\ufeff", r'"\u200b\ufeff"'),
    ("\u2028", r'"\u2028"'),
    ("\U000e0001", r'"\U000e0001"'),
    ("<&>", '"<&>"'),
], ids=repr)
def test_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


# --- floats ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "percent_v", "json"), [
    (1e21, "1e+21", "1e+21"),
    (1e-7, "1e-07", "1e-7"),
    (0.1, "0.1", "0.1"),
    (3.0, "3", "3"),
    (-2.5, "-2.5", "-2.5"),
    (0.0, "0", "0"),
    (1e6, "1e+06", "1000000"),
    (123456.0, "123456", "123456"),
    (1234567.0, "1.234567e+06", "1234567"),
    (0.0001, "0.0001", "0.0001"),
    (1e-5, "1e-05", "0.00001"),
    (1e-6, "1e-06", "0.000001"),
    (1.5e-7, "1.5e-07", "1.5e-7"),
    (1e20, "1e+20", "100000000000000000000"),
    (2.0**60, "1.152921504606847e+18", "1152921504606847000"),
    (-1.2345678901234567e20, "-1.2345678901234567e+20", "-123456789012345670000"),
    (1e100, "1e+100", "1e+100"),
    (5e-324, "5e-324", "5e-324"),
], ids=repr)
def test_float(value: float, percent_v: str, json: str) -> None:
    assert go_float(value) == percent_v
    assert go_float(value, "json") == json


@pytest.mark.parametrize(("value", "text"), [
    (math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf"), (-0.0, "-0"),
], ids=repr)
def test_float_specials_with_percent_v(value: float, text: str) -> None:
    assert go_float(value) == text


# --- encoding/json.Marshal -------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "marshalled"), [
    (None, "null"),
    (True, "true"),
    (9007199254740993, "9007199254740993"),
    (-9223372036854775808, "-9223372036854775808"),
    (1e21, "1e+21"),
    (2.0**60, "1152921504606847000"),
    ("<a&b>", r'"\u003ca\u0026b\u003e"'),
    ("\u2028\u2029", r'"\u2028\u2029"'),
    ('"\\\n\r\t', r'"\"\\\n\r\t"'),
    ("\x00\x1f\x7f", '"\\u0000\\u001f\x7f"'),
    ("é日\U0001f600", '"é日\U0001f600"'),
    ({"b": [1, 2.0, None], "a": "x", "<": {}}, r'{"\u003c":{},"a":"x","b":[1,2,null]}'),
    ({"é": 1, "z": 2, "Z": 3}, '{"Z":3,"z":2,"é":1}'),
    ([], "[]"),
], ids=repr)
def test_json(value: Any, marshalled: str) -> None:
    assert go_json(value) == marshalled


def test_json_go_struct_keeps_field_order() -> None:
    ref = GoStruct([("apiVersion", "v1"), ("kind", "Pod"), ("name", "p"), ("uid", "")])
    assert go_json(ref) == '{"apiVersion":"v1","kind":"Pod","name":"p","uid":""}'
    assert go_json(GoStruct([("z", 1), ("a", 2)])) == '{"z":1,"a":2}'
    assert go_json({"z": GoStruct([("b", 1), ("a", 2)]), "a": [GoStruct([("y", True), ("x", None)])]}) == (
        '{"a":[{"y":true,"x":null}],"z":{"b":1,"a":2}}')


# --- fmt's %v --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "printed"), [
    (None, "<nil>"),
    (False, "false"),
    (9007199254740993, "9007199254740993"),
    (1e6, "1e+06"),
    (2.5, "2.5"),
    ("a b\n", "a b\n"),
    ([1, "x", None, [True]], "[1 x <nil> [true]]"),
    ({"b": {"d": 1, "c": []}, "a": "<>"}, "map[a:<> b:map[c:[] d:1]]"),
    ({}, "map[]"),
], ids=repr)
def test_percent_v(value: Any, printed: str) -> None:
    assert go_v(value) == printed


# --- where we differ from Go (pinned so that a change is deliberate) -------------------------------------


@pytest.mark.parametrize(("ours", "expected", "go"), [
    # encoding/json (Go 1.22 on) writes \b and \f short.
    (go_json("\b\f"), r'"\u0008\u000c"', r'"\b\f"'),
    # encoding/json writes negative zero with its sign.
    (go_json(-0.0), "0", "-0"),
    # encoding/json fails on NaN (json: unsupported value: NaN); the "json" style prints it as %v does.
    (go_float(math.nan, "json"), "NaN", None),
], ids=["backspace-formfeed", "negative-zero", "nan"])
def test_known_differences_from_go(ours: str, expected: str, go: str | None) -> None:
    assert ours == expected != go


@pytest.mark.parametrize(("style", "value", "text"), [
    ("exact", 2.0**60, "1152921504606846976"),
    ("exact", -1.2345678901234567e20, "-123456789012345667584"),
    ("exact", 1e20, "100000000000000000000"),
    ("exact", 1e21, "1e+21"),
    ("exact", 1e6, "1000000"),
    ("exact", 1e-7, "1e-7"),
    ("exact", -0.0, "0"),
    ("json", -0.0, "0"),
    ("json", math.inf, "+Inf"),
], ids=repr)
def test_sim_only_float_forms(style: FloatStyle, value: float, text: str) -> None:
    assert go_float(value, style) == text


def test_exact_style_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(ValueError, match="json: unsupported value: NaN"):
        go_float(math.nan, "exact")
    with pytest.raises(ValueError, match=r"json: unsupported value: -Inf"):
        go_json([-math.inf], exact=True)


def test_exact_json_writes_non_string_keys_bare() -> None:
    assert go_json({1: "x", 2: 2.0**60}, exact=True) == '{1:"x",2:1152921504606846976}'
    assert go_json({1: "x"}) == '{"1":"x"}'
    assert go_v({"a": [1e6, 2.0**60]}, floats="exact") == "map[a:[1000000 1152921504606846976]]"
