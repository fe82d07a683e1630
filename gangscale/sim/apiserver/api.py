"""The verbs: get, list, create, update, patch (four types), delete, deletecollection, watch set-up.

Each verb follows the real ``genericregistry.Store`` pipeline: decode, admission defaults, strategy
(status/spec resets), validation, generation, managedFields, preconditions, no-op detection, commit.
A write that changes nothing keeps the resourceVersion and emits no watch event.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml

from gangscale.sim.apiserver import errors as E
from gangscale.sim.apiserver import fielderrors as fe
from gangscale.sim.apiserver import (
    fieldmanager,
    kindvalidation,
    listing,
    patching,
    quantity,
    strategies,
    validation,
)
from gangscale.sim.apiserver.conversion import from_storage, storage_view, to_storage
from gangscale.sim.apiserver.deletion import DeletionVerbs
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.jsoncopy import json_copy
from gangscale.sim.apiserver.listing import ListOptions
from gangscale.sim.apiserver.managedfields import Entry, EntryKey, with_managed
from gangscale.sim.apiserver.resources import Registry, ResourceType, StorageKey, storage_key
from gangscale.sim.apiserver.store import Store

JSON = dict[str, Any]
Clock = Callable[[], datetime]

PATCH_MERGE = "application/merge-patch+json"
PATCH_JSON = "application/json-patch+json"
PATCH_STRATEGIC = "application/strategic-merge-patch+json"
PATCH_APPLY = "application/apply-patch+yaml"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"
_NS_MISMATCH = "the namespace of the provided object does not match the namespace sent on the request"
_SERVER_META = ("uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp",
                "deletionGracePeriodSeconds", "selfLink")


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_last_second: list[tuple[int, str]] = [(-1, "")]


def _rfc3339_cached(t: datetime) -> str:
    """``rfc3339``, formatted once per second (a write asks for the time three times, a bulk load thousands of
    times a second; ``strftime`` showed in its cost)."""
    second = int(t.timestamp()) if t.tzinfo is not None else -1
    last = _last_second[0]
    if second >= 0 and second == last[0]:
        return last[1]
    text = rfc3339(t)
    if second >= 0:
        _last_second[0] = (second, text)
    return text


@dataclass
class WriteContext:
    manager: str
    # False when the manager name was derived from the User-Agent rather than given as fieldManager.
    manager_explicit: bool = True
    dry_run: bool = False
    field_validation: str = "Strict"
    warnings: list[str] = field(default_factory=list)


class ObjectAPI(DeletionVerbs):
    def __init__(self, store: Store, registry: Registry, clock: Clock,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.rng = rng or random.Random()

    # --- helpers -------------------------------------------------------------------------------------

    def _now(self) -> str:
        return _rfc3339_cached(self.clock())

    def _stored(self, rt: ResourceType, ns: str, name: str) -> JSON:
        obj = self.store.get(storage_key(rt), ns if rt.namespaced else "", name)
        if obj is None:
            raise E.not_found(rt.plural, rt.group, name)
        return obj

    def _check_namespace(self, rt: ResourceType, ns: str, name: str) -> None:
        if not rt.namespaced:
            return
        nsobj = self.store.get(StorageKey("", "namespaces"), "", ns)
        if nsobj is None:
            raise E.not_found("namespaces", "", ns)
        if (nsobj.get("status") or {}).get("phase") == "Terminating":
            raise StatusError(
                403, "Forbidden",
                f'{E.qualified(rt.plural, rt.group)} "{name}" is forbidden: unable to create new content in '
                f"namespace {ns} because it is being terminated",
                group=rt.group, kind=rt.plural, name=name,
            )

    def _validate(self, rt: ResourceType, obj: JSON, old: JSON | None, ctx: WriteContext) -> JSON:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        name_rule = "label" if rt.kind == "Namespace" else "subdomain"
        if rt.schema is None:
            # Metadata and kind-specific errors come back together, in one 422, as upstream's Validate.
            if not rt.custom:
                quantity.check_decodable(rt.kind, rt.version, obj)
            errs = validation.object_meta_errors(obj, namespaced=rt.namespaced, name_rule=name_rule, old=old)
            if not rt.custom:
                errs += kindvalidation.builtin_errors(rt, obj, old)
            if errs:
                raise fe.to_invalid(rt.kind, rt.group, str(name or ""), errs)
        else:
            if ctx.field_validation in ("Strict", "Warn"):
                unknown = validation.unknown_fields(obj, rt.schema)
                if unknown and ctx.field_validation == "Strict":
                    raise validation.unknown_fields_error(rt.kind, rt.version, unknown)
                ctx.warnings.extend(validation.unknown_field_messages(unknown))
            obj = validation.prune(obj, rt.schema)
            # A real server reports metadata and schema errors together, in one 422.
            meta_errors = validation.object_meta_errors(obj, namespaced=rt.namespaced, name_rule=name_rule,
                                                        old=old)
            validation.validate(obj, rt.schema, old=old, kind=rt.kind, group=rt.group, name=name,
                                extra_errors=meta_errors)
        if rt.kind == "CustomResourceDefinition":
            strategies.validate_crd(obj)
        return obj

    # --- reads ---------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, ns: str, name: str) -> JSON:
        return from_storage(rt, self._stored(rt, ns, name))

    def get_encoded(self, rt: ResourceType, ns: str, name: str) -> bytes:
        """``json.dumps(get(...)).encode()``: the store's cached encoding when ``rt`` shows the object as stored."""
        stored = self._stored(rt, ns, name)
        if listing.served_as_stored(rt, stored):
            return self.store.encoded(storage_key(rt), stored)
        return json.dumps(storage_view(rt, stored)).encode()

    def list_objects(self, rt: ResourceType, ns: str | None, *, matches: Callable[[JSON], bool],
                     options: ListOptions | None = None, filtered: bool = True) -> JSON:
        """A list (one page of it with ``options.limit``): see :mod:`listing`. ``filtered``: a selector was given."""
        return listing.list_objects(self.store, rt, ns, matches, options or ListOptions(), filtered=filtered)

    def list_encoded(self, rt: ResourceType, ns: str | None, *, matches: Callable[[JSON], bool],
                     options: ListOptions | None = None, filtered: bool = True) -> bytes:
        """``json.dumps(list_objects(...)).encode()``, from the objects' cached encodings
        (:func:`listing.list_encoded`)."""
        return listing.list_encoded(self.store, rt, ns, matches, options or ListOptions(), filtered=filtered)

    # --- create --------------------------------------------------------------------------------------

    def create(self, rt: ResourceType, ns: str, body: JSON, ctx: WriteContext, *, body_owned: bool = False) -> JSON:
        """``body_owned``: the caller hands ``body`` over (a request's freshly decoded body), so it is not copied."""
        obj = self._new_object(rt, ns, body, ctx, body_owned=body_owned)
        return self._create_prepared(rt, ns, obj, ctx, managed=lambda o: fieldmanager.record_update(
            None, o, manager=ctx.manager, shape=rt.shape, api_version=rt.api_version, subresource=None,
            now=self._now()), owned=True)

    def load(self, rt: ResourceType, ns: str, body: JSON, ctx: WriteContext, *,
             status_manager: str | None = None) -> JSON:
        """Bulk loading (``EmbeddedAPIServer.load``): :meth:`create`, with every check, default and managedFields
        entry of a create; with ``status_manager``, a ``status`` in ``body`` is then written as that manager's merge
        patch of the ``status`` subresource writes it (a kubelet's status update: its own managedFields entry,
        checked as such an update is), and both are committed as one write: one revision, one ADDED event. The
        object is what a create followed by that status patch would leave, but for its resourceVersion."""
        if status_manager is None or not isinstance(body, dict) or body.get("status") is None:
            return self.create(rt, ns, body, ctx)
        status = body["status"]
        obj = self._new_object(rt, ns, {k: v for k, v in body.items() if k != "status"}, ctx)
        # The create's managedFields entries are handed to the status write as they are, not encoded into the object
        # and decoded back (``created`` goes without them: nothing reads them but the field manager).
        creates: list[dict[EntryKey, Entry]] = []

        def managed(o: JSON) -> JSON:
            result, entries = fieldmanager.record_update_entries(
                None, {}, o, manager=ctx.manager, shape=rt.shape, api_version=rt.api_version, subresource=None,
                now=self._now())
            creates.append(entries or {})
            return result

        created = self._prepare_create(rt, ns, obj, ctx, managed=managed)
        status_ctx = WriteContext(manager=status_manager, manager_explicit=True, dry_run=ctx.dry_run,
                                  field_validation=ctx.field_validation, warnings=ctx.warnings)
        if isinstance(status, dict) and isinstance(created.get("status"), dict):
            # merge_patch(created, {"status": status}), without copying the rest of the object: it is not changed
            new = {**created, "status": patching.merge_patch(created["status"], status)}
        else:
            new = patching.merge_patch(created, {"status": status})
        # What the status endpoint resets (reset_for_subresource: everything but status, from the object before)
        # is ``created``'s own already. A Pod's validation reads its metadata and spec only (see kindvalidation),
        # which the create just validated and the status leaves as they were: the update's check of them would
        # find the same; other kinds are checked as their status update is (a Node's status capacity, say).
        if rt.kind != "Pod" or rt.custom:
            new = self._validate(rt, new, created, status_ctx)
        strategies.bump_generation(rt, created, new)
        result, entries = fieldmanager.record_update_entries(
            created, creates[0], new, manager=status_manager, shape=rt.shape, api_version=rt.api_version,
            subresource="status", now=self._now(), reset_fields=_reset_fields(rt, "status"))
        return self._commit_created(rt, with_managed(result, entries) if entries is not None else result, ctx,
                                    owned=True)

    def _new_object(self, rt: ResourceType, ns: str, body: JSON, ctx: WriteContext, *,
                    body_owned: bool = False) -> JSON:
        """A create's body decoded, its namespace and name settled (``generateName``), checked against the
        namespace."""
        obj = self._decode_body(rt, body, owned=body_owned)
        meta = obj.setdefault("metadata", {})
        if meta.get("resourceVersion"):
            raise E.bad_request("resourceVersion should not be set on objects to be created")
        meta.pop("managedFields", None)
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise E.bad_request(_NS_MISMATCH)
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(rt, ns, meta["generateName"])
        self._check_namespace(rt, ns, meta.get("name", ""))
        return obj

    def _create_prepared(self, rt: ResourceType, ns: str, obj: JSON, ctx: WriteContext,
                         managed: Callable[[JSON], JSON], *, owned: bool = False) -> JSON:
        return self._commit_created(rt, self._prepare_create(rt, ns, obj, ctx, managed), ctx, owned=owned)

    def _prepare_create(self, rt: ResourceType, ns: str, obj: JSON, ctx: WriteContext,
                        managed: Callable[[JSON], JSON]) -> JSON:
        """The object a create commits (in ``rt``'s version): server fields, defaults, validation, managedFields."""
        meta = obj["metadata"]
        for k in _SERVER_META:
            meta.pop(k, None)
        meta["uid"] = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = self._now()
        strategies.prepare_create(rt, obj)
        obj = self._validate(rt, obj, None, ctx)
        name = meta.get("name", "")
        if self.store.get(storage_key(rt), ns if rt.namespaced else "", name) is not None:
            raise E.already_exists(rt.plural, rt.group, name)
        return managed(obj)

    def _commit_created(self, rt: ResourceType, obj: JSON, ctx: WriteContext, *, owned: bool = False) -> JSON:
        """Store a created object. ``owned``: it came out of ``record_update`` (which builds its top level and
        metadata) from an object the request built: nothing else holds any part of it, no copy is needed."""
        stored = to_storage(rt, obj, owned=owned)
        if ctx.dry_run:
            return from_storage(rt, stored)
        if rt.kind == "CustomResourceDefinition":
            self.registry.install_crd(stored)
        # Write answers are only serialized: a view of the committed object saves a deep copy per write.
        return storage_view(rt, self.store.put(storage_key(rt), stored, added=True))

    def _generate_name(self, rt: ResourceType, ns: str, prefix: str) -> str:
        for _ in range(8):
            name = prefix[:58] + "".join(self.rng.choice(_NAME_CHARS) for _ in range(5))
            if self.store.get(storage_key(rt), ns if rt.namespaced else "", name) is None:
                return name
        raise E.already_exists(rt.plural, rt.group, prefix)

    def _decode_body(self, rt: ResourceType, body: Any, *, owned: bool = False) -> JSON:
        if not isinstance(body, dict):
            raise E.bad_request(f"Object '{rt.kind}' is not a valid object")
        obj = body if owned else json_copy(body)
        api_version = obj.get("apiVersion", rt.api_version)
        kind = obj.get("kind", rt.kind)
        if kind != rt.kind:
            raise E.bad_request(f"the server rejected our request due to an error in our request: "
                                f"kind {kind} does not match the expected kind {rt.kind}")
        if api_version != rt.api_version:
            other = self.registry.lookup(*_split_api_version(api_version), rt.plural)
            if other is None or storage_key(other) != storage_key(rt):
                raise E.bad_request(f"the API version in the data ({api_version}) does not match the "
                                    f"expected API version ({rt.api_version})")
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if not isinstance(obj.get("metadata", {}), dict):
            raise E.bad_request("metadata must be an object")
        if not rt.custom:
            quantity.check_decodable(rt.kind, rt.version, obj)
        return obj

    # --- update / patch ------------------------------------------------------------------------------

    def replace(self, rt: ResourceType, ns: str, name: str, body: JSON, sub: str | None,
                ctx: WriteContext, *, body_owned: bool = False) -> JSON:
        new = self._decode_body(rt, body, owned=body_owned)
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise _name_mismatch(meta.get("name"), name)
        if rt.namespaced and meta.get("namespace", ns) != ns:
            raise E.bad_request(_NS_MISMATCH)
        stored = self._stored(rt, ns, name)
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != stored["metadata"]["resourceVersion"]:
            raise E.conflict(rt.plural, rt.group, name,
                             _MODIFIED)
        return self._update(rt, ns, name, stored, new, sub, ctx, apply_managed=None)

    def patch(self, rt: ResourceType, ns: str, name: str, content_type: str, raw: bytes, sub: str | None,
              ctx: WriteContext, force: bool | None) -> JSON:
        """``force`` is None when the request did not carry the parameter at all."""
        fieldmanager.validate_patch_options(apply=content_type == PATCH_APPLY,
                                            field_manager=ctx.manager if ctx.manager_explicit else None,
                                            force_given=force is not None)
        if content_type == PATCH_APPLY:
            return self._apply(rt, ns, name, raw, sub, ctx, bool(force))
        stored = self.store.get(storage_key(rt), ns if rt.namespaced else "", name)
        if stored is None:
            raise E.not_found(rt.plural, rt.group, name)
        current = storage_view(rt, stored)  # the patch functions copy what they change
        if content_type == PATCH_MERGE:
            new = patching.merge_patch(current, _load_json(raw))
        elif content_type == PATCH_JSON:
            new = patching.json_patch(current, _load_json(raw))
        elif content_type == PATCH_STRATEGIC:
            if rt.custom:
                raise _unsupported_patch(rt)
            new = patching.strategic_merge_patch(current, _load_json(raw), rt.shape)
        else:
            raise _unsupported_patch(rt)
        if not isinstance(new, dict):
            raise E.bad_request("the patched object is not an object")
        new_meta = new.setdefault("metadata", {})
        if new_meta.get("name") != name:
            raise _name_mismatch(new_meta.get("name"), name)
        want_rv = new_meta.get("resourceVersion")
        if want_rv and want_rv != stored["metadata"]["resourceVersion"]:
            raise E.conflict(rt.plural, rt.group, name,
                             _MODIFIED)
        new_meta["resourceVersion"] = stored["metadata"]["resourceVersion"]
        return self._update(rt, ns, name, stored, new, sub, ctx, apply_managed=None)

    def _apply(self, rt: ResourceType, ns: str, name: str, raw: bytes, sub: str | None,
               ctx: WriteContext, force: bool) -> JSON:
        applied = _decode_apply(raw)
        fieldmanager.validate_apply_body(applied, api_version=rt.api_version, kind=rt.kind, name=name)
        stored = self.store.get(storage_key(rt), ns if rt.namespaced else "", name)
        roots = _allowed_roots(rt, sub)

        def do_apply(current: JSON | None) -> JSON:
            try:
                return fieldmanager.apply(current, applied, manager=ctx.manager, force=force, shape=rt.shape,
                                          api_version=rt.api_version, subresource=sub, now=self._now(),
                                          allowed_roots=roots, reset_fields=_reset_fields(rt, sub))
            except fieldmanager.ApplyConflict as exc:
                raise exc.to_status_error(rt.plural, rt.group, name) from exc

        if stored is None:
            if sub is not None:
                raise E.not_found(rt.plural, rt.group, name)
            self._check_namespace(rt, ns, name)
            created = do_apply(None)
            created["apiVersion"], created["kind"] = rt.api_version, rt.kind
            cmeta = created.setdefault("metadata", {})
            cmeta["name"] = name
            if rt.namespaced:
                cmeta["namespace"] = ns
            return self._create_prepared(rt, ns, created, ctx, managed=lambda o: o)
        current = storage_view(rt, stored)  # apply reads it and builds a new object
        new = do_apply(current)
        want_rv = (applied.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != stored["metadata"]["resourceVersion"]:
            raise E.conflict(rt.plural, rt.group, name,
                             _MODIFIED)
        return self._update(rt, ns, name, stored, new, sub, ctx, apply_managed=True)

    def _update(self, rt: ResourceType, ns: str, name: str, stored: JSON, new: JSON, sub: str | None,
                ctx: WriteContext, apply_managed: bool | None) -> JSON:
        old = storage_view(rt, stored)  # only read (a write stores a new object): no copy
        new = strategies.reset_for_subresource(rt, old, new, sub)
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "name", "namespace"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if rt.kind == "Pod" and sub is None:
            strategies.validate_pod_update(old, new)
        new = self._validate(rt, new, old, ctx)
        strategies.bump_generation(rt, old, new)
        if not apply_managed:
            new = fieldmanager.record_update(old, new, manager=ctx.manager, shape=rt.shape,
                                             api_version=rt.api_version, subresource=sub, now=self._now(),
                                             reset_fields=_reset_fields(rt, sub))
        if _same_ignoring_managed_times(old, new):
            return old
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer is gone: the update becomes the deletion (registry Store semantics).
            if ctx.dry_run:
                return new
            return self._remove_now(rt, ns, name)
        if ctx.dry_run:
            return new
        # Without apply, ``new`` came out of record_update from this request's own object: stored without a copy.
        stored_new = to_storage(rt, new, owned=not apply_managed)
        committed = self.store.put(storage_key(rt), stored_new, added=False)
        if rt.kind == "CustomResourceDefinition":
            self._reinstall_crd(stored, committed)
        return storage_view(rt, committed)

    def _reinstall_crd(self, old: JSON, new: JSON) -> None:
        before = {(t.group, t.plural) for t in self.registry.remove_crd(old["metadata"]["name"])}
        self.registry.install_crd(new)
        after = {(t.group, t.plural) for t in self.registry.types() if t.custom}
        for group, plural in before - after:
            self.store.drop_resource(StorageKey(group, plural))

    def bind_pod(self, ns: str, name: str, node: str, ctx: WriteContext) -> JSON:
        """The effect of a ``pods/binding`` create: nodeName set, ``PodScheduled=True``."""
        rt = self.registry.lookup("", "v1", "pods")
        assert rt is not None
        stored = self._stored(rt, ns, name)
        old = storage_view(rt, stored)
        new = json_copy(old)
        new.setdefault("spec", {})["nodeName"] = node
        conds = [c for c in new.setdefault("status", {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": self._now()})
        new["status"]["conditions"] = conds
        new = fieldmanager.record_update(old, new, manager=ctx.manager, shape=rt.shape,
                                         api_version=rt.api_version, subresource=None, now=self._now())
        if ctx.dry_run:
            return new
        return storage_view(rt, self.store.put(storage_key(rt), to_storage(rt, new, owned=True), added=False))


# --- small helpers -----------------------------------------------------------------------------------

def _decode_apply(raw: bytes) -> Any:
    """An apply body: YAML, of which JSON is a subset. Clients send JSON (client-go, kubernetes_asyncio, kubectl
    --server-side), which ``json`` decodes many times faster than a YAML parser written in Python."""
    if raw.lstrip()[:1] == b"{":
        try:
            return json.loads(raw)
        except ValueError:
            pass
    try:
        return yaml.load(raw, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise E.bad_request(f"error decoding YAML: {exc}") from exc


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _split_api_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        g, v = api_version.split("/", 1)
        return g, v
    return "", api_version


def _name_mismatch(body_name: Any, url_name: str) -> StatusError:
    return E.bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({url_name})")


def _load_json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise E.bad_request(f"error decoding patch: {exc}") from exc


def _unsupported_patch(rt: ResourceType) -> StatusError:
    accepted = [PATCH_JSON, PATCH_MERGE, *([] if rt.custom else [PATCH_STRATEGIC]), PATCH_APPLY]
    return E.unsupported_media_type(
        "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted))


def _reset_fields(rt: ResourceType, sub: str | None) -> tuple[tuple[str, ...], ...]:
    return fieldmanager.reset_fields_for(rt.kind if not rt.custom else "", subresource=sub,
                                         status_subresource=rt.status_subresource)


def _allowed_roots(rt: ResourceType, sub: str | None) -> frozenset[str] | None:
    if sub == "status":
        return frozenset({"status"}) if rt.custom else None
    return None


def _without(d: JSON, key: str) -> JSON:
    return {k: v for k, v in d.items() if k != key}


def _same_ignoring_managed_times(a: JSON, b: JSON) -> bool:
    # Compared in place, level by level: copying both objects to drop the times cost more than the write.
    ma, mb = a.get("metadata", {}), b.get("metadata", {})
    if _without(a, "metadata") != _without(b, "metadata") or _without(ma, "managedFields") != _without(
            mb, "managedFields") or ("managedFields" in ma) != ("managedFields" in mb):
        return False
    fa, fb = ma.get("managedFields") or [], mb.get("managedFields") or []
    return len(fa) == len(fb) and all(_without(x, "time") == _without(y, "time") for x, y in zip(fa, fb, strict=True))

