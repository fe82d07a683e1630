"""Name, label and ObjectMeta validation with the real apiserver's rules and messages.

Reproduces (Kubernetes 1.36, the version the embedded server reports; sources: apimachinery
``util/validation/validation.go``, ``api/validate/content``, ``api/validation/objectmeta.go`` and
``generic.go``, ``apis/meta/v1/validation``):

- ``content.IsLabelKey`` (label keys, annotation keys, finalizers; a key with two ``/`` reads
  ``a valid label key must consist of ...`` - releases before ``content`` said ``a qualified name``),
  ``IsValidLabelValue``,
  ``IsDNS1123Subdomain``/``Label``, ``IsDNS1035Label``, path-segment names, with the exact
  ``RegexError`` texts (``(e.g. 'MyName',  or 'my.name', ...`` - the double space is upstream's). These
  pure checks live in :mod:`gangscale.model.k8svalidation`, which the pool file shares, and are
  re-exported here;
- ``ValidateObjectMetaAccessor`` on create: generateName (validated with the trailing dash masked),
  ``name or generateName is required``, namespace required/forbidden, negative generation, labels,
  annotations (keys lower-cased, total size <= 256 KiB), owner references, finalizers;
- on update (``old`` given): name, namespace, uid and creationTimestamp are immutable
  (``field is immutable``).

Not reproduced: the banned-owner check (Events as owners), managedFields validation, the
``resourceVersion must be specified for an update`` and ``generation must not be decremented`` checks
(the storage layer owns those), and the finalizer-on-deleting-object rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Product code (the pool file) uses the same checks, so they live below gangscale.sim; re-exported here.
from gangscale.model.k8svalidation import (
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_value,
    is_qualified_name,
)
from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.fielderrors import FieldError

__all__ = [
    "IMMUTABLE", "NAME_RULES", "OBJECT_META_FIELDS", "TOTAL_ANNOTATION_SIZE_LIMIT", "NameValidator",
    "annotation_errors", "is_dns1035_label", "is_dns1123_label", "is_dns1123_subdomain", "is_label_value",
    "is_qualified_name", "label_errors", "object_meta_errors", "validate_object_meta",
]

JSON = dict[str, Any]
NameValidator = Callable[[str, bool], list[str]]

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
IMMUTABLE = "field is immutable"

# ObjectMeta's JSON fields; anything else under metadata is an unknown field.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
})


def _mask_trailing_dash(name: str) -> str:
    # Upstream drops two characters and appends one; kept as-is because it decides which prefixes pass.
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def _path_segment(name: str, prefix: bool) -> list[str]:
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def _masked(check: Callable[[str], list[str]]) -> NameValidator:
    def validate(name: str, prefix: bool) -> list[str]:
        return check(_mask_trailing_dash(name) if prefix else name)
    return validate


NAME_RULES: dict[str, NameValidator] = {
    "subdomain": _masked(is_dns1123_subdomain),
    "label": _masked(is_dns1123_label),
    "dns1035": _masked(is_dns1035_label),
    "path": _path_segment,
}


# --- ObjectMeta ------------------------------------------------------------------------------------------

def _name_errors(meta: JSON, name_fn: NameValidator) -> list[FieldError]:
    errs: list[FieldError] = []
    generate = meta.get("generateName") or ""
    if generate:
        errs += [fe.invalid("metadata.generateName", generate, m) for m in name_fn(generate, True)]
    name = meta.get("name") or ""
    if not name:
        errs.append(fe.required("metadata.name", "name or generateName is required"))
    else:
        errs += [fe.invalid("metadata.name", name, m) for m in name_fn(name, False)]
    return errs


def _namespace_errors(meta: JSON, namespaced: bool) -> list[FieldError]:
    ns = meta.get("namespace") or ""
    if not namespaced:
        return [fe.forbidden("metadata.namespace", "not allowed on this type")] if ns else []
    if not ns:
        return [fe.required("metadata.namespace")]
    return [fe.invalid("metadata.namespace", ns, m) for m in NAME_RULES["label"](ns, False)]


def label_errors(labels: dict[str, str], path: str = "metadata.labels") -> list[FieldError]:
    errs: list[FieldError] = []
    for k, v in labels.items():
        errs += [fe.invalid(path, k, m) for m in is_qualified_name(k)]
        errs += [fe.invalid(path, v, m) for m in is_label_value(str(v))]
    return errs


def annotation_errors(annotations: dict[str, str], path: str = "metadata.annotations") -> list[FieldError]:
    errs: list[FieldError] = []
    for k in annotations:
        errs += [fe.invalid(path, k, m) for m in is_qualified_name(k.lower())]
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(fe.too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT))
    return errs


def _owner_reference_errors(refs: list[JSON]) -> list[FieldError]:
    path = "metadata.ownerReferences"
    errs: list[FieldError] = []
    controller = ""
    for ref in refs:
        version = str(ref.get("apiVersion") or "").rpartition("/")[2]
        if not version:
            errs.append(fe.invalid(f"{path}.apiVersion", ref.get("apiVersion", ""),
                                   "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                errs.append(fe.invalid(f"{path}.{key}", ref.get(key, ""), "must not be empty"))
        if ref.get("controller") is True:
            current = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if controller:
                errs.append(fe.invalid(path, [_owner_ref_json_order(r) for r in refs],
                                       'Only one reference can have Controller set to true. Found "true" in '
                                       f"references for {controller} and {current}"))
            else:
                controller = current
    return errs


def _owner_ref_json_order(ref: JSON) -> fe.GoStruct:
    # The bad value is a Go struct: fields in declaration order, the last two omitted when unset.
    out = fe.GoStruct((k, ref.get(k, "")) for k in ("apiVersion", "kind", "name", "uid"))
    out.update((k, ref[k]) for k in ("controller", "blockOwnerDeletion") if ref.get(k) is not None)
    return out


def _finalizer_errors(finalizers: list[str]) -> list[FieldError]:
    path = "metadata.finalizers"
    errs = [fe.invalid(path, f, m) for f in finalizers for m in is_qualified_name(f)]
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errs.append(fe.invalid(path, finalizers,
                               "finalizer orphan and foregroundDeletion cannot be both set"))
    return errs


def _update_errors(meta: JSON, old_meta: JSON) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in ("name", "namespace", "uid", "creationTimestamp"):
        if (meta.get(key) or "") != (old_meta.get(key) or ""):
            errs.append(fe.invalid(f"metadata.{key}", meta.get(key) or "", IMMUTABLE))
    return errs


def object_meta_errors(obj: JSON, *, namespaced: bool, name_rule: str = "subdomain",
                       old: JSON | None = None) -> list[FieldError]:
    """All ObjectMeta errors, in upstream order; ``name_rule`` is a key of :data:`NAME_RULES`."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    errs: list[FieldError] = []
    if old is None:
        errs += _name_errors(meta, NAME_RULES[name_rule])
    else:
        errs += _update_errors(meta, old.get("metadata") or {})
    errs += _namespace_errors(meta, namespaced)
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        errs.append(fe.invalid("metadata.generation", generation, "must be greater than or equal to 0"))
    errs += label_errors(meta.get("labels") or {})
    errs += annotation_errors(meta.get("annotations") or {})
    errs += _owner_reference_errors(meta.get("ownerReferences") or [])
    errs += _finalizer_errors(meta.get("finalizers") or [])
    return errs


def validate_object_meta(obj: JSON, *, namespaced: bool, name_rule: str = "subdomain", kind: str = "",
                         group: str = "", old: JSON | None = None) -> None:
    """Raise the real 422 (``<Kind>.<group> "<name>" is invalid: ...``) when ObjectMeta is invalid."""
    errs = object_meta_errors(obj, namespaced=namespaced, name_rule=name_rule, old=old)
    if errs:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise fe.to_invalid(kind or str(obj.get("kind") or ""), group, name, errs)
