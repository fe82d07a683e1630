"""The body half of :mod:`gangscale.sim.gcp.discovery`: a JSON value checked against a discovery document's
``schemas`` (``$ref``, ``properties``, ``additionalProperties``, ``items``, ``type``, ``format``, ``enum``,
``pattern``), the request-only rules (output-only, deprecated and required fields) and the error envelope.

Every problem is one line: ``<method id> <JSON path>: <what is wrong>``, e.g.
``compute.instanceGroupManagers.createInstances request.instances[0].nmae: unknown field``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

Direction = Literal["request", "response"]
Schema = Mapping[str, Any]

INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}
_DECIMAL = re.compile(r"-?[0-9]+")
_DURATION = re.compile(r"-?[0-9]+(\.[0-9]{1,9})?s")
_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
                       r"([Zz]|[+-][0-9]{2}:[0-9]{2})")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_OUTPUT_ONLY = re.compile(r"\s*(\[output only\]|output only[.:])", re.IGNORECASE)
_DEPRECATED = re.compile(r"\s*\[?deprecated\b", re.IGNORECASE)
_REQUIRED = re.compile(r"\s*(\[required\]|required[.:])", re.IGNORECASE)
_FLOAT_WORDS = frozenset({"NaN", "Infinity", "-Infinity"})
_ENVELOPE_KEYS = frozenset({"code", "message", "status", "errors", "details"})


def is_output_only(prop: Schema) -> bool:
    """``readOnly: true``, or a description starting "Output only." / "[Output Only]" (compute marks most of its
    output-only fields by description alone)."""
    return prop.get("readOnly") is True or bool(_OUTPUT_ONLY.match(str(prop.get("description", ""))))


def is_deprecated(prop: Schema) -> bool:
    """``deprecated: true``, or a description starting "Deprecated" / "[Deprecated]" or saying "This field is
    deprecated"."""
    desc = str(prop.get("description", ""))
    return prop.get("deprecated") is True or bool(_DEPRECATED.match(desc)) or "this field is deprecated" in desc.lower()


def decimal_in_range(text: str, fmt: str) -> bool:
    """``text`` is a base-10 integer inside the range of ``fmt`` (int32/uint32/int64/uint64)."""
    if not _DECIMAL.fullmatch(text):
        return False
    low, high = INT_RANGES.get(fmt, INT_RANGES["int64"])
    return low <= int(text) <= high


def is_datetime(text: str) -> bool:
    """RFC 3339 with a mandatory offset ("Z" or "+hh:mm") and an optional fraction of up to 9 digits."""
    if not _DATETIME.fullmatch(text):
        return False
    trimmed = re.sub(r"\.([0-9]{6})[0-9]*", r".\1", text.replace("z", "Z").replace("t", "T"))
    try:
        datetime.fromisoformat(trimmed.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def key(where: str, name: str) -> str:
    """The JSON path of a map entry: ``labels["team"]``."""
    return f"{where}[{json.dumps(name)}]"


@dataclass(frozen=True)
class BodyCheck:
    """Checks one body of one method in one direction; :meth:`run` returns the problems found."""

    schemas: Mapping[str, Schema]
    method_id: str
    direction: Direction

    def run(self, schema: Schema, body: Any) -> list[str]:
        out: list[str] = []
        self.value(schema, body, self.direction, out)
        return out

    def problem(self, out: list[str], where: str, what: str) -> None:
        out.append(f"{self.method_id} {where}: {what}")

    def resolve(self, prop: Schema) -> Schema:
        ref = prop.get("$ref")
        if ref is None:
            return prop
        return self.schemas.get(str(ref), {})

    def value(self, prop: Schema, value: Any, where: str, out: list[str]) -> None:
        schema = self.resolve(prop)
        if value is None:
            if self.direction == "response":  # proto3 JSON input takes null as "unset"; Google never sends it
                self.problem(out, where, "null value")
            return
        kind = schema.get("type", "any")
        if kind == "object":
            self.object(schema, value, where, out)
        elif kind == "array":
            self.array(schema, value, where, out)
        elif kind == "string":
            self.string(schema, value, where, out)
        elif kind == "integer":
            self.integer(schema, value, where, out)
        elif kind == "number":
            self.number(value, where, out)
        elif kind == "boolean" and not isinstance(value, bool):
            self.problem(out, where, f"expected a boolean, got {json.dumps(value)}")

    def array(self, schema: Schema, value: Any, where: str, out: list[str]) -> None:
        if not isinstance(value, list):
            self.problem(out, where, f"expected an array, got {type(value).__name__}")
            return
        items = schema.get("items", {})
        for i, item in enumerate(value):
            self.value(items, item, f"{where}[{i}]", out)

    def object(self, schema: Schema, value: Any, where: str, out: list[str]) -> None:
        if not isinstance(value, dict):
            self.problem(out, where, f"expected an object, got {type(value).__name__}")
            return
        if "additionalProperties" in schema:
            for name, item in value.items():
                self.value(schema["additionalProperties"], item, key(where, name), out)
            return
        if "properties" not in schema and "id" not in schema:
            return  # a free-form object (e.g. a detail of google.rpc.Status)
        props: Mapping[str, Schema] = schema.get("properties", {})
        for name, item in value.items():
            if name not in props:
                self.problem(out, f"{where}.{name}", "unknown field")
                continue
            if self.direction == "request":
                self.request_flags(props[name], f"{where}.{name}", out)
            self.value(props[name], item, f"{where}.{name}", out)
        if self.direction == "request":
            self.required(props, value, where, out)

    def request_flags(self, prop: Schema, where: str, out: list[str]) -> None:
        if is_output_only(prop):
            self.problem(out, where, "output-only field sent")
        if is_deprecated(prop) or self.resolve(prop).get("deprecated") is True:
            self.problem(out, where, "deprecated field sent")

    def required(self, props: Mapping[str, Schema], value: Mapping[str, Any], where: str, out: list[str]) -> None:
        """``annotations.required`` naming this method; or a message field whose description starts "Required."
        (scalars and lists are left out: proto3 JSON may omit a zero value, so absent is not wrong for them)."""
        for name, prop in props.items():
            if name in value:
                continue
            if self.method_id in prop.get("annotations", {}).get("required", ()):
                self.problem(out, f"{where}.{name}", "required field missing (annotations.required)")
            elif "$ref" in prop and _REQUIRED.match(str(prop.get("description", ""))):
                self.problem(out, f"{where}.{name}", "required field missing (description says Required)")

    def string(self, schema: Schema, value: Any, where: str, out: list[str]) -> None:
        fmt = str(schema.get("format", ""))
        if fmt in ("int64", "uint64"):
            self.int64(fmt, value, where, out)
            return
        if not isinstance(value, str):
            self.problem(out, where, f"expected a string, got {json.dumps(value)}")
            return
        if "enum" in schema and value not in schema["enum"]:
            self.problem(out, where, f"{value!r} is not one of the enum values {schema['enum']}")
        if "pattern" in schema and not re.fullmatch(str(schema["pattern"]), value):
            self.problem(out, where, f"{value!r} does not match pattern {schema['pattern']}")
        bad = {
            "google-duration": not _DURATION.fullmatch(value),
            "google-datetime": not is_datetime(value),
            "byte": not _BASE64.fullmatch(value),
        }.get(fmt, False)
        if bad:
            self.problem(out, where, f"{value!r} is not a valid {fmt}")

    def int64(self, fmt: str, value: Any, where: str, out: list[str]) -> None:
        """Proto3 JSON renders 64-bit integers as strings; on input it also takes numbers."""
        if isinstance(value, str):
            if not decimal_in_range(value, fmt):
                self.problem(out, where, f"{value!r} is not a decimal {fmt}")
        elif self.direction == "response":
            self.problem(out, where, f"{fmt} must be a JSON string in a response, got {json.dumps(value)}")
        elif not _integral(value) or not decimal_in_range(str(int(value)), fmt):
            self.problem(out, where, f"expected a {fmt} (decimal string or integer), got {json.dumps(value)}")

    def integer(self, schema: Schema, value: Any, where: str, out: list[str]) -> None:
        """int32/uint32: a JSON number (a decimal string is taken on input too)."""
        fmt = str(schema.get("format", "int32"))
        if isinstance(value, str) and self.direction == "request":
            ok = decimal_in_range(value, fmt)
        elif self.direction == "request":
            ok = _integral(value) and decimal_in_range(str(int(value)), fmt)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) and decimal_in_range(str(value), fmt)
        if not ok:
            self.problem(out, where, f"expected a {fmt} number, got {json.dumps(value)}")

    def number(self, value: Any, where: str, out: list[str]) -> None:
        """double/float: a JSON number, or "NaN"/"Infinity"/"-Infinity"; numeric text too on input."""
        if isinstance(value, str):
            ok = value in _FLOAT_WORDS or (self.direction == "request" and _is_float_text(value))
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            self.problem(out, where, f"expected a number, got {json.dumps(value)}")


def _is_float_text(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def check_error_envelope(method_id: str, status: int, body: Any) -> list[str]:
    """``{"error": {"code": int, "message": str, "status"?: str, "errors"?: [object], "details"?: [object]}}``,
    the code equal to the HTTP status."""
    problems: list[str] = []

    def bad(where: str, what: str) -> None:
        problems.append(f"{method_id} {where}: {what}")

    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        bad("response", f'an error answer must be {{"error": {{...}}}}, got {json.dumps(body)[:200]}')
        return problems
    error = body["error"]
    for name in sorted(set(error) - _ENVELOPE_KEYS):
        bad(f"response.error.{name}", "unknown field")
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        bad("response.error.code", f"expected an integer, got {json.dumps(code)}")
    elif code != status:
        bad("response.error.code", f"{code} differs from the HTTP status {status}")
    if not isinstance(error.get("message"), str):
        bad("response.error.message", f"expected a string, got {json.dumps(error.get('message'))}")
    if "status" in error and not isinstance(error["status"], str):
        bad("response.error.status", f"expected a string, got {json.dumps(error['status'])}")
    for name in ("errors", "details"):
        items = error.get(name, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            bad(f"response.error.{name}", f"expected an array of objects, got {json.dumps(items)[:200]}")
    return problems
