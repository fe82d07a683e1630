"""EC2's own API model, as botocore ships it, used both ways: to read a query-protocol request into the operation's
input structure and to write an output structure as EC2's XML; and, for the tests, to check traffic against it.

Source: ``botocore/data/ec2/2016-11-15/service-2.json.gz`` of the installed botocore (a dependency of aiobotocore);
only the JSON is read, never botocore's modules. Wire rules, from botocore's own client code:

- Requests (``serialize.py`` ``QuerySerializer`` / ``EC2Serializer``): a form of ``Action``, ``Version`` and one
  key per scalar; a member's key is its ``queryName``, else its ``locationName`` with the first letter upper-cased,
  else the member name; nested members are joined with ``.``; list elements are ``<key>.<n>`` counting from 1 (EC2
  never uses the query protocol's ``.member.`` infix); booleans are ``true``/``false``; timestamps ISO 8601.
- Answers (``parsers.py`` ``EC2QueryParser``): ``<{Operation}Response xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">``
  with ``<requestId>`` and each member as an element named by its ``locationName`` (else its member name); list
  elements are ``<item>`` (EC2's lists name their members ``item``); errors are
  ``<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>``.

Refusals use EC2's common client error codes (EC2 API reference, "Error codes for the Amazon EC2 API",
docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html): ``UnknownParameter`` (an unknown member),
``MissingParameter`` (a required member absent), ``InvalidParameterValue`` (a wrong type, enum value or range).
Their message texts are the forms EC2 is widely seen to send ("The parameter X is not recognized", "The request must
contain the parameter X", "Value (v) for parameter X is invalid. …"), not checked against a live EC2.
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib.resources
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

API_VERSION = "2016-11-15"
NAMESPACE = f"http://ec2.amazonaws.com/doc/{API_VERSION}/"
JSON = dict[str, Any]
_INTEGERS = ("integer", "long")
_FLOATS = ("double", "float")


class Ec2Error(Exception):
    """A whole-call EC2 error: HTTP ``status`` and the ``<Code>``/``<Message>`` of the error envelope."""

    def __init__(self, code: str, message: str, status: int = 400, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.headers = dict(headers or {})


@functools.cache
def _document() -> JSON:
    path = importlib.resources.files("botocore").joinpath("data", "ec2", API_VERSION, "service-2.json.gz")
    with path.open("rb") as raw:
        document: JSON = json.loads(gzip.decompress(raw.read()))
    return document


def shapes() -> JSON:
    return dict(_document()["shapes"])


def operations() -> frozenset[str]:
    return frozenset(_document()["operations"])


def _shape(name: str) -> JSON:
    shape: JSON = _document()["shapes"][name]
    return shape


def input_shape(operation: str) -> str | None:
    spec = _document()["operations"][operation].get("input")
    return None if spec is None else str(spec["shape"])


def output_shape(operation: str) -> str | None:
    spec = _document()["operations"][operation].get("output")
    return None if spec is None else str(spec["shape"])


def query_name(member_name: str, member: Mapping[str, Any]) -> str:
    """The form key of a member (botocore ``EC2Serializer._get_serialized_name``)."""
    if "queryName" in member:
        return str(member["queryName"])
    if "locationName" in member:
        name = str(member["locationName"])
        return name[0].upper() + name[1:]
    return member_name


def xml_name(member_name: str, member: Mapping[str, Any]) -> str:
    """The XML element of an output member (botocore ``BaseXMLResponseParser._member_key_name``)."""
    return str(member.get("locationName", member_name))


# --- requests ---------------------------------------------------------------------------------------------------


class _Problems:
    """Collects (code, message) pairs; ``strict`` raises the first one."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.found: list[tuple[str, str]] = []

    def add(self, code: str, message: str) -> None:
        if self.strict:
            raise Ec2Error(code, message)
        self.found.append((code, message))


def _tree(form: Mapping[str, str], problems: _Problems) -> JSON:
    root: JSON = {}
    for key, value in form.items():
        if key in ("Action", "Version"):
            continue
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                problems.add("InvalidParameterValue", f"Value ({child}) for parameter {key} is invalid.")
                break
            node = child
        else:
            if isinstance(node.get(parts[-1]), dict):
                problems.add("InvalidParameterValue", f"Value ({value}) for parameter {key} is invalid.")
            else:
                node[parts[-1]] = value
    return root


def _scalar(shape: JSON, value: Any, name: str, problems: _Problems) -> Any:
    kind = shape["type"]
    if isinstance(value, dict):
        problems.add("InvalidParameterValue", f"Value ({name}.{'.'.join(value)}) for parameter {name} is invalid.")
        return None
    text = str(value)
    try:
        if kind in _INTEGERS:
            number = int(text)
            if "min" in shape and number < shape["min"]:
                raise ValueError(f"Expecting a value greater than or equal to {shape['min']}.")
            if "max" in shape and number > shape["max"]:
                raise ValueError(f"Expecting a value less than or equal to {shape['max']}.")
            return number
        if kind in _FLOATS:
            return float(text)
        if kind == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError("Expecting true or false.")
            return text.lower() == "true"
        if kind == "timestamp":
            return datetime.fromisoformat(text.replace("Z", "+00:00"))
        if kind == "blob":
            return base64.b64decode(text, validate=True)
    except ValueError as exc:
        reason = str(exc) if str(exc).startswith("Expecting") else "Expecting a value of type " + kind + "."
        problems.add("InvalidParameterValue", f"Value ({text}) for parameter {name} is invalid. {reason}")
        return None
    if "enum" in shape and text not in shape["enum"]:
        problems.add("InvalidParameterValue", f"Value ({text}) for parameter {name} is invalid. "
                                              f"Valid values: {', '.join(shape['enum'])}.")
    return text


def _read(shape_name: str, node: Any, name: str, problems: _Problems) -> Any:
    shape = _shape(shape_name)
    kind = shape["type"]
    if kind == "structure":
        if not isinstance(node, dict):
            problems.add("InvalidParameterValue", f"Value ({node}) for parameter {name} is invalid.")
            return None
        by_key = {query_name(m, spec): (m, spec) for m, spec in shape["members"].items()}
        out: JSON = {}
        for key, child in node.items():
            found = by_key.get(key)
            full = f"{name}.{key}" if name else key
            if found is None:
                problems.add("UnknownParameter", f"The parameter {full} is not recognized")
                continue
            member, spec = found
            out[member] = _read(spec["shape"], child, full, problems)
        for member in shape.get("required", []):
            if member not in out:
                key = query_name(member, shape["members"][member])
                problems.add("MissingParameter", f"The request must contain the parameter {name + '.' if name else ''}"
                                                 f"{key}")
        return out
    if kind == "list":
        if not isinstance(node, dict) or not all(k.isdigit() and int(k) >= 1 for k in node):
            problems.add("InvalidParameterValue", f"Value ({node}) for parameter {name} is invalid. "
                                                  f"Expecting {name}.N with N from 1.")
            return []
        member_shape = shape["member"]["shape"]
        return [_read(member_shape, node[k], f"{name}.{k}", problems) for k in sorted(node, key=int)]
    if kind == "map":
        problems.add("InvalidParameterValue", f"Value for parameter {name} is invalid: maps are not served")
        return None
    return _scalar(shape, node, name, problems)


def parse_request(operation: str, form: Mapping[str, str]) -> JSON:
    """The operation's input structure read from a form; raises :class:`Ec2Error` on the first problem."""
    shape = input_shape(operation)
    if shape is None:
        return {}
    problems = _Problems(True)
    parsed: JSON = _read(shape, _tree(form, problems), "", problems)
    return parsed


def request_problems(operation: str, form: Mapping[str, str]) -> list[str]:
    """Every way a form breaks the operation's input shape (empty: none)."""
    problems = _Problems(False)
    if form.get("Version") != API_VERSION:
        problems.add("InvalidParameterValue", f"Version {form.get('Version')!r} is not {API_VERSION}")
    shape = input_shape(operation)
    if shape is not None:
        _read(shape, _tree(form, problems), "", problems)
    return [f"{code}: {message}" for code, message in problems.found]


# --- answers ----------------------------------------------------------------------------------------------------


def timestamp(value: datetime | float) -> str:
    """EC2's timestamp form, ``2026-11-27T10:00:00.000Z``."""
    moment = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _text(shape: JSON, value: Any) -> str:
    kind = shape["type"]
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "timestamp":
        return timestamp(value)
    if kind == "blob":
        return base64.b64encode(value).decode()
    return str(value)


def _write(shape_name: str, value: Any, out: list[str]) -> None:
    shape = _shape(shape_name)
    kind = shape["type"]
    if kind == "structure":
        for member, spec in shape["members"].items():
            if member in value and value[member] is not None:
                tag = xml_name(member, spec)
                out.append(f"<{tag}>")
                _write(spec["shape"], value[member], out)
                out.append(f"</{tag}>")
    elif kind == "list":
        tag = shape["member"].get("locationName", "item")
        for element in value:
            out.append(f"<{tag}>")
            _write(shape["member"]["shape"], element, out)
            out.append(f"</{tag}>")
    else:
        out.append(escape(_text(shape, value)))


def answer_xml(operation: str, data: Mapping[str, Any], request_id: str) -> str:
    """The XML EC2 answers ``operation`` with, for an output structure ``data`` (member names as keys)."""
    out = [f'<?xml version="1.0" encoding="UTF-8"?>\n<{operation}Response xmlns="{NAMESPACE}">',
           f"<requestId>{request_id}</requestId>"]
    shape = output_shape(operation)
    if shape is not None:
        _write(shape, data, out)
    out.append(f"</{operation}Response>")
    return "".join(out)


def error_xml(code: str, message: str, request_id: str) -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}</Code>'
            f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>")


# --- checks (tests) ---------------------------------------------------------------------------------------------


def _check_value(shape_name: str, value: Any, path: str, problems: list[str]) -> None:
    shape = _shape(shape_name)
    kind = shape["type"]
    if kind == "structure":
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a structure ({shape_name}), got {type(value).__name__}")
            return
        for key, child in value.items():
            spec = shape["members"].get(key)
            if spec is None:
                problems.append(f"{path}.{key}: not a member of {shape_name}")
            else:
                _check_value(spec["shape"], child, f"{path}.{key}", problems)
    elif kind == "list":
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list ({shape_name}), got {type(value).__name__}")
            return
        for i, element in enumerate(value):
            _check_value(shape["member"]["shape"], element, f"{path}[{i}]", problems)
    else:
        _check_scalar(shape, value, path, problems)


def _check_scalar(shape: JSON, value: Any, path: str, problems: list[str]) -> None:
    kind = shape["type"]
    ok = {"boolean": isinstance(value, bool),
          "timestamp": isinstance(value, datetime),
          "blob": isinstance(value, bytes)}.get(kind)
    if kind in _INTEGERS:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind in _FLOATS:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif ok is None:
        ok = isinstance(value, str)
    if not ok:
        problems.append(f"{path}: {value!r} is not a {kind}")
    elif "enum" in shape and value not in shape["enum"]:
        problems.append(f"{path}: {value!r} is not one of {shape['enum']}")


def validate_output(operation: str, data: Mapping[str, Any]) -> list[str]:
    """Every way ``data`` (an answer as botocore parses it, or as the fake builds it) breaks the output shape:
    unknown members, types, enum values. ``ResponseMetadata`` (botocore's own) is skipped."""
    shape = output_shape(operation)
    problems: list[str] = []
    if shape is None:
        return [f"{operation}: no output shape, got {sorted(data)}"] if data else []
    _check_value(shape, {k: v for k, v in data.items() if k != "ResponseMetadata"}, operation, problems)
    return problems


def _local(tag: str) -> str:
    return re.sub(r"^\{.*\}", "", tag)


def _check_element(shape_name: str, element: ET.Element, path: str, problems: list[str]) -> None:
    shape = _shape(shape_name)
    kind = shape["type"]
    if kind == "structure":
        by_tag = {xml_name(m, spec): spec for m, spec in shape["members"].items()}
        for child in element:
            tag = _local(child.tag)
            spec = by_tag.get(tag)
            if spec is None:
                problems.append(f"{path}/{tag}: no member of {shape_name} is serialized as <{tag}>")
            else:
                _check_element(spec["shape"], child, f"{path}/{tag}", problems)
    elif kind == "list":
        tag = shape["member"].get("locationName", "item")
        for i, child in enumerate(element):
            if _local(child.tag) != tag:
                problems.append(f"{path}/{_local(child.tag)}: list elements of {shape_name} are <{tag}>")
            else:
                _check_element(shape["member"]["shape"], child, f"{path}/{tag}[{i}]", problems)
    else:
        _check_text(shape, element.text or "", path, problems)


def _check_text(shape: JSON, text: str, path: str, problems: list[str]) -> None:
    kind = shape["type"]
    try:
        if kind in _INTEGERS:
            int(text)
        elif kind in _FLOATS:
            float(text)
        elif kind == "boolean" and text not in ("true", "false"):
            raise ValueError(text)
        elif kind == "timestamp":
            datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        problems.append(f"{path}: {text!r} is not a {kind}")
        return
    if "enum" in shape and text not in shape["enum"]:
        problems.append(f"{path}: {text!r} is not one of {shape['enum']}")


def answer_problems(operation: str, status: int, body: str) -> list[str]:
    """Every way an answer's XML breaks EC2's wire form: a 2xx answer against the output shape (root element,
    namespace, ``requestId``, element names, scalar forms, enums), an error against the error envelope."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        return [f"not XML: {exc}"]
    if status >= 300:
        return _error_problems(root)
    problems: list[str] = []
    if root.tag != f"{{{NAMESPACE}}}{operation}Response":
        problems.append(f"root element {root.tag}, expected {{{NAMESPACE}}}{operation}Response")
    children = [c for c in root if _local(c.tag) != "requestId"]
    if len(children) == len(root):
        problems.append("no <requestId>")
    shape = output_shape(operation)
    if shape is None:
        problems += [f"<{_local(c.tag)}>: {operation} has no output" for c in children]
    else:
        holder = ET.Element("holder")
        holder.extend(children)
        _check_element(shape, holder, operation, problems)
    return problems


def _error_problems(root: ET.Element) -> list[str]:
    errors = root.find("Errors")
    error = errors.find("Error") if errors is not None else None
    if root.tag != "Response" or error is None:
        return ["an error must be <Response><Errors><Error>…</Error></Errors><RequestID/></Response>"]
    problems = [f"error without <{tag}>" for tag in ("Code", "Message") if not (error.findtext(tag) or "")]
    if not root.findtext("RequestID"):
        problems.append("error without <RequestID>")
    return problems


def members(shape_name: str) -> list[str]:
    return [str(m) for m in _shape(shape_name).get("members", {})]
