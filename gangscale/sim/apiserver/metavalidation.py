"""Name, label and ObjectMeta validation with the real apiserver's rules and messages.

Reproduces (Kubernetes 1.36, the version the embedded server reports; sources: apimachinery
``util/validation/validation.go``, ``api/validate/content``, ``api/validation/objectmeta.go`` and
``generic.go``, ``apis/meta/v1/validation``):

- ``content.IsLabelKey`` (label keys, annotation keys, finalizers; a key with two ``/`` reads
  ``a valid label key must consist of ...`` - releases before ``content`` said ``a qualified name``),
  ``IsValidLabelValue``,
  ``IsDNS1123Subdomain``/``Label``, ``IsDNS1035Label``, path-segment names, with the exact
  ``RegexError`` texts (``(e.g. 'MyName',  or 'my.name', ...`` - the double space is upstream's);
- ``ValidateObjectMetaAccessor`` on create: generateName (validated with the trailing dash masked),
  ``name or generateName is required``, namespace required/forbidden, negative generation, labels,
  annotations (keys lower-cased, total size <= 256 KiB), owner references, finalizers;
- on update (``old`` given): name, namespace, uid and creationTimestamp are immutable
  (``field is immutable``).

Not reproduced: the banned-owner check (Events as owners), managedFields validation, the
``resourceVersion must be specified for an update`` and ``generation must not be decremented`` checks
(the storage layer owns those), and the finalizer-on-deleting-object rule. ``IsDNS1123Label``'s
``must not contain dots`` variant comes from current upstream source; the release that introduced it was
not verified.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver.fielderrors import FieldError

JSON = dict[str, Any]
NameValidator = Callable[[str, bool], list[str]]

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
IMMUTABLE = "field is immutable"

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character")
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                      "and must start and end with an alphanumeric character")
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                          "characters, '-' or '.', and must start and end with an alphanumeric character")
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character")

_QNAME_RE = re.compile(_QNAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_RE = re.compile(_DNS1035_FMT)

# ObjectMeta's JSON fields; anything else under metadata is an unknown field.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
})


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def is_qualified_name(value: str) -> list[str]:
    """Label keys, annotation keys and finalizer names: ``[prefix/]name``."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return ["a valid label key " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(parts[0]))
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + max_len_error(63))
    if not _QNAME_RE.fullmatch(name):
        errs.append("name part " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(value: str) -> list[str]:
    errs = [max_len_error(63)] if len(value) > 63 else []
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = [max_len_error(253)] if len(value) > 253 else []
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1123_label(value: str) -> list[str]:
    errs = [max_len_error(63)] if len(value) > 63 else []
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = [max_len_error(63)] if len(value) > 63 else []
    if not _DNS1035_RE.fullmatch(value):
        errs.append(regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
    return errs


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
