"""Discovery and OpenAPI documents, enough for kubectl and client libraries.

Served: ``/version``, legacy discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/{g}``, ``/apis/{g}/{v}``,
as ``APIVersions`` / ``APIGroupList`` / ``APIGroup`` / ``APIResourceList``) and OpenAPI v3 (``/openapi/v3``
index and one document per group-version). Aggregated discovery (``apidiscovery.k8s.io/v2``) is not
served: clients that ask for it get the legacy documents with ``Content-Type: application/json``, which
client-go and kubectl accept as the fallback.

The OpenAPI v3 documents carry, for every resource, the paths with their operations and the
``fieldValidation`` query parameter (kubectl checks it before sending ``fieldValidation=Strict``), and
component schemas for custom resources (their CRD schema, tagged with
``x-kubernetes-group-version-kind``). Built-in kinds have no component schema, so kubectl falls back to
its compiled-in types for strategic merge patches. ``/openapi/v2`` returns a minimal Swagger 2.0 document
with no definitions.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gangscale.sim.apiserver.resources import ALL_VERBS, Registry, ResourceType

JSON = dict[str, Any]

KUBE_VERSION = {"major": "1", "minor": "36", "gitVersion": "v1.36.0-gangscale-sim",
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.25.0", "compiler": "gc",
                "platform": "linux/amd64"}


def api_versions(server_address: str) -> JSON:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group_json(name: str, versions: list[str]) -> JSON:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(reg: Registry) -> JSON:
    groups = [_group_json(g, vs) for g, vs in sorted(reg.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(reg: Registry, group: str) -> JSON | None:
    versions = reg.groups().get(group)
    if not versions or not group:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_json(group, versions)}


def api_resource_list(reg: Registry, group: str, version: str) -> JSON | None:
    types = [t for t in reg.types() if t.group == group and t.version == version]
    if not types:
        return None
    resources: list[JSON] = []
    for t in types:
        entry: JSON = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                       "kind": t.kind, "verbs": list(ALL_VERBS),
                       "storageVersionHash": _hash(f"{t.group}/{t.storage_version}/{t.kind}")[:12]}
        if t.short_names:
            entry["shortNames"] = list(t.short_names)
        if t.categories:
            entry["categories"] = list(t.categories)
        resources.append(entry)
        if t.status_subresource:
            resources.append({"name": f"{t.plural}/status", "singularName": "", "namespaced": t.namespaced,
                              "kind": t.kind, "verbs": ["get", "patch", "update"]})
        if t.kind == "Pod" and not t.group:
            resources.append({"name": "pods/binding", "singularName": "", "namespaced": True,
                              "kind": "Binding", "verbs": ["create"]})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- OpenAPI v3 ----------------------------------------------------------------------------------------

def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3_index(reg: Registry) -> JSON:
    paths: JSON = {}
    for group, versions in reg.groups().items():
        for v in versions:
            doc = openapi_v3_document(reg, group, v)
            digest = _hash(json.dumps(doc, sort_keys=True)).upper()[:128]
            paths[_gv_path(group, v)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(group, v)}?hash={digest}"}
    return {"paths": paths}


def _schema_name(t: ResourceType) -> str:
    rev = ".".join(reversed(t.group.split("."))) if t.group else "io.k8s.api.core"
    return f"{rev}.{t.version}.{t.kind}"


_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _operations(t: ResourceType, gvk: JSON, item: bool) -> JSON:
    params = [{"name": p, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
              for p in _QUERY_PARAMS]
    ok = {"200": {"description": "OK"}}
    ops: JSON = {"get": {"x-kubernetes-action": "get" if item else "list"}}
    if item:
        ops["put"] = {"x-kubernetes-action": "put"}
        ops["patch"] = {"x-kubernetes-action": "patch"}
        ops["delete"] = {"x-kubernetes-action": "delete"}
    else:
        ops["post"] = {"x-kubernetes-action": "post"}
        ops["delete"] = {"x-kubernetes-action": "deletecollection"}
    for op in ops.values():
        op["x-kubernetes-group-version-kind"] = gvk
        op["parameters"] = params
        op["responses"] = ok
    return ops


def openapi_v3_document(reg: Registry, group: str, version: str) -> JSON:
    paths: JSON = {}
    schemas: JSON = {}
    for t in reg.types():
        if t.group != group or t.version != version:
            continue
        gvk = {"group": t.group, "version": t.version, "kind": t.kind}
        base = f"/{_gv_path(group, version)}"
        coll = f"{base}/namespaces/{{namespace}}/{t.plural}" if t.namespaced else f"{base}/{t.plural}"
        paths[coll] = _operations(t, gvk, item=False)
        paths[f"{coll}/{{name}}"] = _operations(t, gvk, item=True)
        if t.status_subresource:
            paths[f"{coll}/{{name}}/status"] = _operations(t, gvk, item=True)
        if t.schema is not None:
            schema = dict(t.schema)
            schema["x-kubernetes-group-version-kind"] = [gvk]
            schemas[_schema_name(t)] = schema
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}


def openapi_v2_document() -> JSON:
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
            "paths": {}, "definitions": {}}


def serve(reg: Registry, path: str, what: str | None, server_address: str) -> JSON | str | None:
    """The document for a non-resource GET path (``what`` is the router's keyword), or None (404)."""
    path = path.rstrip("/")
    if path == "/version":
        return KUBE_VERSION
    if path in ("/healthz", "/livez", "/readyz"):
        return "ok"
    if path == "/openapi/v3":
        return openapi_v3_index(reg)
    if path.startswith("/openapi/v3/"):
        gv = path[len("/openapi/v3/"):].split("/")
        if gv[0] == "api" and len(gv) == 2:
            group, version = "", gv[1]
        elif gv[0] == "apis" and len(gv) == 3:
            group, version = gv[1], gv[2]
        else:
            return None
        if not any(t.group == group and t.version == version for t in reg.types()):
            return None
        return openapi_v3_document(reg, group, version)
    if path == "/openapi/v2":
        return openapi_v2_document()
    parts = [p for p in path.split("/") if p]
    if what == "api":
        return api_versions(server_address)
    if what == "apis":
        return api_group_list(reg)
    if what == "group":
        return api_group(reg, parts[1])
    if what == "resources":
        return api_resource_list(reg, "" if parts[0] == "api" else parts[1], parts[-1])
    return None
