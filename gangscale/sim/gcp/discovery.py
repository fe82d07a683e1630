"""HTTP traffic between the GKE provider and the fake Google Cloud, checked against Google's own discovery documents:
``container.v1.json`` (revision 20261027) and ``compute.v1.json`` (revision 20261106) as shipped in the PyPI package
``google-api-python-client`` 2.202.0 (a dev dependency; only its JSON files are read, lazily, never its modules).

Usage::

    disc = Discovery.load()
    problems = disc.check(Exchange("POST", "/compute/v1/projects/p/zones/z/instanceGroupManagers/m/resize",
                                   {"size": "3"}, None, 200, operation_json))

What is checked (each problem names the discovery method id and the JSON path of the offending value)
---------------------------------------------------------------------------------------------------------
- Routing: the verb and path match a method's ``flatPath`` (container: rooted at ``/``, servicePath ""; compute:
  under ``/compute/v1/``). Every ``{x}`` of a flatPath is one path segment; when several templates match, the one with
  the most literal characters wins (so ``…/nodePools/np:setSize`` is ``setSize``, not ``get`` of a pool called
  "np:setSize"), and if none of the winners has the verb the exchange is refused ("no discovery method for PUT /…").
  ``/`` and ``/computeMetadata/…`` are the metadata server: not checked. Container's legacy ``projects.zones.*``
  methods have their own flatPaths (``…/zones/…``), so a ``…/locations/…`` path always selects the ``locations`` one.
- Path parameters: values are read with the method's ``path`` template (``{+name}`` spans segments, e.g. container's
  ``v1/{+name}:setSize``), percent-decoded, and must ``fullmatch`` the parameter's ``pattern`` when there is one.
- Query parameters: a ``location: query`` parameter of the method or a document-wide one (alt, fields, key,
  prettyPrint, quotaUser, …); ``type``/``format`` (decimal integers in the format's range, booleans "true"/"false"
  in any case), ``enum``, ``pattern``, ``minimum``/``maximum``; ``required`` ones present; ``deprecated`` ones
  (container's legacy ``projectId``/``zone``/… query parameters) refused.
- Request body: present iff the method has a ``request`` schema (an absent body is checked as ``{}``); recursive
  ``$ref``/``properties``/``additionalProperties``/``items``; unknown fields; types; ``enum`` (strings); ``pattern``
  (compute resource names); formats: int64/uint64 a JSON integer or a decimal string, int32/uint32 the same,
  double/float a number, "NaN"/"Infinity"/"-Infinity" or a numeric string, ``google-duration`` ("3.5s"),
  ``google-datetime`` (RFC 3339), ``byte`` (base64); JSON ``null`` is taken as "unset" (proto3 JSON input).
  Refused in requests: output-only fields (``readOnly: true``, or a description starting "Output only." or
  "[Output Only]", any case: compute marks most of them by description only), deprecated fields (``deprecated:
  true``, a description starting "Deprecated"/"[Deprecated]" or containing "This field is deprecated", or a ``$ref``
  to a schema marked ``deprecated``), missing required fields: ``annotations.required`` listing the method id (compute
  uses it, container does not), and message (``$ref``) fields whose description starts "Required." / "[Required]" /
  "REQUIRED:" (container's convention, e.g. ``CreateNodePoolRequest.nodePool``).
- Response body, 2xx only: a JSON object when the method has a ``response`` schema (``Empty`` is ``{}``), nothing or
  ``{}`` when it has none; the same recursive rules except that output-only and deprecated fields are fine, int64/
  uint64 MUST be JSON strings and int32/uint32 JSON numbers (proto3 JSON as Google renders it), and ``null`` is a
  problem. 4xx/5xx: the error envelope ``{"error": {"code", "message", "status"?, "errors"?, "details"?}}`` with
  ``code`` equal to the HTTP status; a 5xx without a JSON body is let through (Google's front end answers some 5xx
  with an HTML page, and the fake does too). Status 0 (connection dropped): no response to check.
- ``strict_request=False``: the request (its path, query and body) is not checked when the answer is not 2xx (a test
  sending a wrong request on purpose); with a 2xx answer it always is (a fake accepting what Google refuses is a bug).

Gaps (not checked)
------------------
- Semantics: values are checked for shape only (an existing zone, a machine type, a field's documented range in prose,
  ``oneof``-style "only one of" rules written in descriptions, "[Required]" scalars and lists: proto3 JSON may omit a
  zero value, so their absence cannot be told from a zero).
- ``enumDeprecated`` values, ``Input only`` fields in responses, ``default``s, field masks against the schema,
  ``format: google-fieldmask`` syntax, repeated query parameters (the exchange carries one value per name), headers
  (auth, ``Content-Type``, ``X-Goog-*``), ``alt=media``/uploads, batch paths, LROs' ``metadata``/``response`` ``Any``
  payloads (``@type`` not resolved), and the error ``details``/``errors`` items beyond being objects.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from gangscale.sim.gcp.discovery_schema import INT_RANGES, BodyCheck, check_error_envelope, decimal_in_range

PACKAGE = "google-api-python-client"
DOCUMENTS = {"container": "container.v1.json", "compute": "compute.v1.json"}
_PLACEHOLDER = re.compile(r"\{(\+?)([^}]+)\}")


@dataclass(frozen=True)
class Exchange:
    """One request and its answer as the fake saw them."""

    method: str  # HTTP verb
    path: str  # URL path, e.g. "/v1/projects/p/locations/l/clusters/c/nodePools"
    query: Mapping[str, str]
    request: Any  # parsed JSON body or None
    status: int  # HTTP status answered (0 = connection dropped)
    response: Any  # parsed JSON body or None


@dataclass(frozen=True)
class _Method:
    id: str
    verb: str
    spec: Mapping[str, Any]
    doc: Mapping[str, Any]
    flat: re.Pattern[str]
    depth: int  # slashes in the flatPath
    literal: int  # literal characters of the flatPath: the most specific template wins
    path: re.Pattern[str]
    path_names: tuple[str, ...]


@functools.cache
def _documents() -> dict[str, dict[str, Any]]:
    try:
        root = importlib.resources.files("googleapiclient.discovery_cache.documents")
    except ModuleNotFoundError as exc:
        raise RuntimeError(f"the Google discovery documents come from the {PACKAGE} package: "
                           f"pip install {PACKAGE}==2.202.0") from exc
    return {name: json.loads(root.joinpath(file).read_text(encoding="utf-8")) for name, file in DOCUMENTS.items()}


def _walk(resources: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for resource in resources.values():
        yield from resource.get("methods", {}).values()
        yield from _walk(resource.get("resources", {}))


def _template(template: str, *, spans: bool) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """A regex for a path template; ``{+x}`` spans segments when ``spans`` (the ``path``), else every ``{x}`` is one
    segment (the ``flatPath``)."""
    parts, names, last = [], [], 0
    for found in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[last:found.start()]))
        parts.append("(.+)" if spans and found.group(1) else "([^/]+)")
        names.append(found.group(2))
        last = found.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts)), tuple(names)


def _methods(doc: Mapping[str, Any]) -> Iterator[_Method]:
    for spec in _walk(doc.get("resources", {})):
        flat_template = str(spec.get("flatPath", spec["path"]))
        flat, _ = _template(flat_template, spans=False)
        path, names = _template(str(spec["path"]), spans=True)
        literal = len(_PLACEHOLDER.sub("", flat_template))
        yield _Method(str(spec["id"]), str(spec["httpMethod"]), spec, doc, flat, flat_template.count("/"), literal,
                      path, names)


def _is_metadata(path: str) -> bool:
    return path == "/" or path.startswith("/computeMetadata/")


class Discovery:
    """The container v1 and compute v1 discovery documents, indexed by path for :meth:`check`."""

    def __init__(self, docs: Mapping[str, Mapping[str, Any]]) -> None:
        self.revisions: dict[str, str] = {name: str(doc["revision"]) for name, doc in docs.items()}
        # Longest servicePath first: compute's "compute/v1/" before container's "".
        self._routes: list[tuple[str, dict[int, list[_Method]]]] = []
        for doc in sorted(docs.values(), key=lambda d: -len(str(d["servicePath"]))):
            by_depth: dict[int, list[_Method]] = {}
            for method in _methods(doc):
                by_depth.setdefault(method.depth, []).append(method)
            self._routes.append((str(doc["servicePath"]), by_depth))

    @classmethod
    def load(cls) -> Discovery:
        """Both documents from the installed ``google-api-python-client``; RuntimeError when it is missing."""
        return cls(_documents())

    def method_of(self, method: str, path: str) -> str | None:
        """The discovery method id for a verb and path, or None (no method, or the metadata server)."""
        found = self._match(method, path)
        return found.id if isinstance(found, _Method) else None

    def check(self, ex: Exchange, *, strict_request: bool = True) -> list[str]:
        """Human-readable problems of one exchange; [] when it is fine (see the module docstring for the rules)."""
        if _is_metadata(ex.path):
            return []
        found = self._match(ex.method, ex.path)
        refused = not 200 <= ex.status < 300
        if isinstance(found, str):
            return [] if refused and not strict_request else [found]
        problems = self._check_path(found, ex.path) if strict_request or not refused else []
        if strict_request or not refused:
            problems += self._check_query(found, ex.query)
            problems += self._check_request(found, ex.request)
        problems += self._check_response(found, ex.status, ex.response)
        return problems

    def _match(self, verb: str, path: str) -> _Method | str:
        if _is_metadata(path):
            return f"{path} is the metadata server"
        rest = path.removeprefix("/")
        hits: list[_Method] = []
        for prefix, by_depth in self._routes:
            if rest.startswith(prefix):
                tail = rest[len(prefix):]
                hits = [m for m in by_depth.get(tail.count("/"), ()) if m.flat.fullmatch(tail)]
                break
        if not hits:
            return f"no discovery method for {verb} {path}"
        best = max(m.literal for m in hits)
        top = [m for m in hits if m.literal == best]
        for method in top:
            if method.verb == verb.upper():
                return method
        verbs = ", ".join(sorted({m.verb for m in top}))
        return f"no discovery method for {verb} {path} (the path takes {verbs})"

    def _check_path(self, method: _Method, path: str) -> list[str]:
        prefix = str(method.doc["servicePath"])
        found = method.path.fullmatch(path.removeprefix("/").removeprefix(prefix))
        if found is None:
            return [f"{method.id} path: {path} does not fit the path template {method.spec['path']}"]
        problems = []
        params = method.spec.get("parameters", {})
        for name, raw in zip(method.path_names, found.groups(), strict=True):
            value, pattern = unquote(raw), params.get(name, {}).get("pattern")
            if pattern is not None and not re.fullmatch(pattern, value):
                problems.append(f"{method.id} path.{name}: {value!r} does not match pattern {pattern}")
        return problems

    def _check_query(self, method: _Method, query: Mapping[str, str]) -> list[str]:
        params: Mapping[str, Any] = method.spec.get("parameters", {})
        globals_: Mapping[str, Any] = method.doc.get("parameters", {})
        problems = []
        for name, value in query.items():
            spec = params.get(name) if params.get(name, {}).get("location") == "query" else globals_.get(name)
            if spec is None:
                problems.append(f"{method.id} query.{name}: unknown query parameter")
                continue
            problems += [f"{method.id} query.{name}: {what}" for what in _query_value(spec, value)]
        for name, spec in params.items():
            if spec.get("location") == "query" and spec.get("required") and name not in query:
                problems.append(f"{method.id} query.{name}: required query parameter missing")
        return problems

    def _check_request(self, method: _Method, body: Any) -> list[str]:
        schema = method.spec.get("request")
        if schema is None:
            return [] if body is None else [f"{method.id} request: a body sent to a method that takes none"]
        if body is None:
            body = {}  # proto3: an absent body is the empty message; required fields still show up as missing
        return BodyCheck(method.doc["schemas"], method.id, "request").run(schema, body)

    def _check_response(self, method: _Method, status: int, body: Any) -> list[str]:
        if status == 0 or 300 <= status < 400 or status < 200:
            return []
        if status >= 500 and body is None:
            return []  # Google's front end answers some 5xx with an HTML page: no JSON to check
        if status >= 400:
            return check_error_envelope(method.id, status, body)
        schema = method.spec.get("response")
        if schema is None:
            ok = body is None or body == {}
            return [] if ok else [f"{method.id} response: a body from a method that answers none"]
        if not isinstance(body, dict):
            return [f"{method.id} response: a {status} answer must be a JSON object, got {json.dumps(body)[:200]}"]
        return BodyCheck(method.doc["schemas"], method.id, "response").run(schema, body)


def _query_value(spec: Mapping[str, Any], value: str) -> Iterator[str]:
    """What is wrong with one query parameter's text value."""
    kind, fmt = spec.get("type", "string"), spec.get("format")
    if spec.get("deprecated") is True:
        yield "deprecated query parameter sent"
    if kind == "integer" or fmt in INT_RANGES:
        if not decimal_in_range(value, str(fmt or "int32")):
            yield f"{value!r} is not a decimal {fmt or 'integer'}"
        elif not int(spec.get("minimum", value)) <= int(value) <= int(spec.get("maximum", value)):
            yield f"{value} is outside [{spec.get('minimum', '')}, {spec.get('maximum', '')}]"
    elif kind == "boolean" and value.lower() not in ("true", "false"):
        yield f"{value!r} is not a boolean (true/false)"
    if "enum" in spec and value not in spec["enum"]:
        yield f"{value!r} is not one of the enum values {spec['enum']}"
    if "pattern" in spec and not re.fullmatch(spec["pattern"], value):
        yield f"{value!r} does not match pattern {spec['pattern']}"
