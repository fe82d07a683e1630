"""What a fresh embedded cluster holds: the default namespaces and the CRDs of the resources gangscale
works with (ProvisioningRequest, Kueue, Ray), installed as CustomResourceDefinition objects.

The CRD objects are built from our own compact schemas (``schemas.py``), not the upstream files;
applying an upstream CRD over one of them replaces it, as ``kubectl apply`` of a CRD does on a real
cluster.
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver.api import ObjectAPI, WriteContext
from gangscale.sim.apiserver.schemas import BUILTIN_CUSTOM_RESOURCES, CustomResourceSpec

JSON = dict[str, Any]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
MANAGER = "kube-apiserver"


def crd_object(spec: CustomResourceSpec) -> JSON:
    versions = []
    for v in spec.versions:
        ver: JSON = {"name": v.name, "served": v.served, "storage": v.storage,
                     "schema": {"openAPIV3Schema": spec.schema(v.name)}}
        if v.printer_columns:
            ver["additionalPrinterColumns"] = [dict(c) for c in v.printer_columns]
        if v.has_status_subresource:
            ver["subresources"] = {"status": {}}
        if v.deprecated:
            ver["deprecated"] = True
            if v.deprecation_warning:
                ver["deprecationWarning"] = v.deprecation_warning
        if v.selectable_fields:
            ver["selectableFields"] = [{"jsonPath": f".{p}"} for p in v.selectable_fields]
        versions.append(ver)
    names: JSON = {"kind": spec.kind, "listKind": f"{spec.kind}List", "plural": spec.plural,
                   "singular": spec.singular}
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    if spec.categories:
        names["categories"] = list(spec.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{spec.plural}.{spec.group}"},
        "spec": {"group": spec.group, "names": names,
                 "scope": "Namespaced" if spec.namespaced else "Cluster", "versions": versions,
                 "conversion": {"strategy": "None"}},
    }


def install_builtins(api: ObjectAPI) -> None:
    ctx = WriteContext(manager=MANAGER)
    ns_type = api.registry.lookup("", "v1", "namespaces")
    crd_type = api.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    assert ns_type is not None and crd_type is not None
    for name in DEFAULT_NAMESPACES:
        api.create(ns_type, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, ctx)
    for spec in BUILTIN_CUSTOM_RESOURCES:
        api.create(crd_type, "", crd_object(spec), ctx)
