"""The request checks around field management, as kube-apiserver's PATCH and write handlers make them.

Reproduces (k8s.io/apiserver ``endpoints/handlers`` and apimachinery ``ValidatePatchOptions``):

* ``PatchOptions`` validation: 422 on ``PatchOptions.meta.k8s.io`` for ``force`` on a non-apply patch,
  an apply patch without ``fieldManager``, a manager over 128 bytes or with unprintable characters;
* what an apply body must be before merging (400s): an object, of the URL's apiVersion and kind, without
  managedFields, with the URL's name and namespace when it names them;
* after an apply: no uid on create, and a name;
* the manager of a non-apply write: ``fieldManager``, else the User-Agent up to its first ``/``
  (printable characters, at most 128 bytes).

Not reproduced: the real handler checks name/namespace/uid after conflict detection; callers here call
``validate_apply_body`` / ``check_applied_identity`` before and after ``fieldmanager.apply``.
"""

from __future__ import annotations

from typing import Any

from gangscale.sim.apiserver.errors import Cause, StatusError, bad_request, conflict, invalid
from gangscale.sim.apiserver.goformat import go_quote
from gangscale.sim.apiserver.managedfields import object_meta

JSON = dict[str, Any]
FIELD_MANAGER_MAX_LENGTH = 128
_REQUIRED_MANAGER = Cause("FieldValueRequired", "Required value: is required for apply patch", "fieldManager")


def gvk_string(api_version: Any, kind: Any) -> str:
    """A group/version/kind as the server's messages print it (``x.io/v1, Kind=Widget``)."""
    version = api_version if isinstance(api_version, str) else ""
    group, _, ver = version.rpartition("/") if version.count("/") <= 1 else ("", "", "")
    return f"{group}/{ver}, Kind={kind if isinstance(kind, str) else ''}"


def validate_apply_body(body: Any, *, api_version: str, kind: str, name: str | None = None,
                        namespace: str | None = None) -> None:
    """What the real server rejects in an apply body before merging (all 400 BadRequest)."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        what = "array" if isinstance(body, list) else "string" if isinstance(body, str) else "number"
        raise bad_request("error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
                          f"unmarshal {what} into Go value of type map[string]interface {{}}")
    if body.get("apiVersion") != api_version or body.get("kind") != kind:
        raise bad_request(f"invalid object type: {gvk_string(body.get('apiVersion'), body.get('kind'))}")
    meta = object_meta(body)
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    if name is not None and meta.get("name") and meta["name"] != name:
        raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                          f"({name})")
    if namespace and meta.get("namespace") and meta["namespace"] != namespace:
        raise bad_request(f"the namespace of the object ({meta['namespace']}) does not match the namespace "
                          f"on the request ({namespace})")


def check_applied_identity(obj: JSON, *, created: bool, resource: str, group: str, name: str) -> None:
    """The checks after an apply: no uid on create, and a name (a create-by-apply body may omit it)."""
    meta = object_meta(obj)
    if created and meta.get("uid"):
        raise conflict(resource, group, name, "uid mismatch: the provided object specified uid "
                       f"{meta['uid']}, and no existing object was found")
    if not meta.get("name"):
        raise bad_request(f"the name of the object ({name} based on URL) was undeterminable: "
                          "name must be provided")


def validate_patch_options(*, apply: bool, field_manager: str | None, force_given: bool) -> None:
    """ValidatePatchOptions: 422 on PatchOptions.meta.k8s.io."""
    causes = []
    if not apply and force_given:
        causes.append(Cause("FieldValueForbidden", "Forbidden: may not be specified for non-apply patch",
                            "force"))
    if apply and not field_manager:
        causes.append(_REQUIRED_MANAGER)
    manager = field_manager or ""
    if len(manager.encode()) > FIELD_MANAGER_MAX_LENGTH:
        causes.append(Cause("FieldValueTooLong",
                            f"Too long: must have at most {FIELD_MANAGER_MAX_LENGTH} bytes", "fieldManager"))
    for index, char in enumerate(manager):
        if not char.isprintable():
            position = len(manager[:index].encode())  # Go ranges over bytes
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {go_quote(manager)}: invalid character "
                                f"U+{ord(char):04X} (at position {position})", "fieldManager"))
    if causes:
        raise invalid("PatchOptions", "meta.k8s.io", "", causes)


def missing_manager_error() -> StatusError:
    """The 422 for an apply patch without ``fieldManager``."""
    return invalid("PatchOptions", "meta.k8s.io", "", [_REQUIRED_MANAGER])


def manager_from_user_agent(field_manager: str | None, user_agent: str) -> str:
    """The manager of a non-apply write: ``fieldManager``, else the User-Agent up to its first ``/``."""
    if field_manager:
        return field_manager
    out = ""
    for char in user_agent.split("/", maxsplit=1)[0]:
        if char.isprintable():
            if len((out + char).encode()) > FIELD_MANAGER_MAX_LENGTH:
                break
            out += char
    return out
