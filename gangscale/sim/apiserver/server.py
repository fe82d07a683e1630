"""The HTTP face of the embedded API server: routing, query parameters, responses, watch streams.

See the package docstring (``gangscale.sim.apiserver``) for what is and is not emulated.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from gangscale.sim.apiserver import control, discovery, selectors
from gangscale.sim.apiserver import errors as E
from gangscale.sim.apiserver.api import ObjectAPI, WriteContext
from gangscale.sim.apiserver.applychecks import manager_from_user_agent
from gangscale.sim.apiserver.builtin import install_builtins
from gangscale.sim.apiserver.controllers import ControllerManager
from gangscale.sim.apiserver.deletion import DeleteOptions
from gangscale.sim.apiserver.errors import StatusError
from gangscale.sim.apiserver.faults import Fault, Faults, LoggedRequest
from gangscale.sim.apiserver.listing import ListOptions, served_as_stored
from gangscale.sim.apiserver.resources import Registry, ResourceType, storage_key
from gangscale.sim.apiserver.routing import Target, resolve
from gangscale.sim.apiserver.store import DEFAULT_WINDOW, Store
from gangscale.sim.apiserver.tables import to_table, wants_table
from gangscale.sim.apiserver.watching import WatchRequest
from gangscale.sim.apiserver.watchstream import serve_watch

JSON = dict[str, Any]


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json",
                        headers=headers)


def _raw_json(body: bytes, status: int, headers: dict[str, str]) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


def _headers(rt: ResourceType, ctx: WriteContext | None) -> dict[str, str]:
    """An answer's headers: ``Warning`` for a deprecated version and for the write's warnings."""
    headers: dict[str, str] = {}
    warnings = list(ctx.warnings) if ctx else []
    if rt.deprecated:
        warnings.insert(0, rt.deprecation_warning or f"{rt.api_version} {rt.kind} is deprecated")
    if warnings:
        headers["Warning"] = ", ".join(f'299 - "{w}"' for w in warnings)
    return headers


def _status_response(err: StatusError) -> web.Response:
    headers = {}
    if err.retry_after_seconds is not None:
        headers["Retry-After"] = str(err.retry_after_seconds)
    return _json(err.to_json(), err.code, headers)


def _not_found_path() -> StatusError:
    return StatusError(404, "NotFound", "the server could not find the requested resource")


def _manager(request: web.Request) -> tuple[str, bool]:
    """(manager, whether the request named it); an explicit name is validated later, not cut."""
    explicit = request.query.get("fieldManager") or None
    return manager_from_user_agent(explicit, request.headers.get("User-Agent", "")), explicit is not None


class EmbeddedAPIServer:
    """An in-memory kube-apiserver on 127.0.0.1 that speaks the real HTTP protocol.

    Bulk loading without HTTP: :meth:`load` creates objects directly through the server's ``api``
    (``ObjectAPI``), with every check a create makes, before or after :meth:`start` — for a process that hosts the
    server and wants a large cluster in it first (a benchmark's 150,000 pods), at a fraction of a request's cost::

        server = EmbeddedAPIServer(port=0)
        server.load([namespace, *nodes])
        server.load(pods, status_manager="kubelet")  # each pod's status written as the kubelet's status patch
        await server.start()

    ``api.create(rt, ns, body, ctx)`` / ``api.load(...)`` are the same one object at a time (``rt`` from
    ``registry.lookup(group, version, plural)``, ``ctx`` an ``api.WriteContext``).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], datetime] | None = None, watch_window: int = DEFAULT_WINDOW,
                 bookmark_interval: float = 60.0, seed: int | None = None, control: bool = False) -> None:
        self.host = host
        #: Serve the fault knobs over HTTP under ``/_sim/`` (see ``control``): for harnesses in other processes.
        self.control_enabled = control
        self.port = port
        self.clock = clock or (lambda: datetime.now(UTC))
        self.store = Store(window=watch_window)
        self.registry = Registry()
        self.api = ObjectAPI(self.store, self.registry, self.clock, rng=random.Random(seed))
        self.faults = Faults()
        self.requests: list[LoggedRequest] = []
        #: Requests being served now, watches excluded (they stay open): the simulation driver waits for
        #: zero, with the request log and the revision unchanged, before it moves simulated time on.
        self.busy = 0
        self.bookmark_interval = bookmark_interval
        self.controllers = ControllerManager(self.api)
        install_builtins(self.api)
        self._runner: web.AppRunner | None = None

    # --- lifecycle -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.controllers.start()

    async def stop(self) -> None:
        self.faults.release(serve=False)
        await self.controllers.stop()
        self.store.close_all_watchers()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> EmbeddedAPIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def kubeconfig_dict(self, context: str = "gangscale-sim") -> JSON:
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": context, "preferences": {},
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {"token": "gangscale-sim"}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context,
                                                        "namespace": "default"}}],
        }

    def write_kubeconfig(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(self.kubeconfig_dict(), sort_keys=False))
        return p

    # --- bulk loading --------------------------------------------------------------------------------

    def load(self, objects: Iterable[JSON], *, manager: str = "gangscale-load", status_manager: str | None = None,
             encode: bool = False) -> int:
        """Create ``objects`` (each found by its ``apiVersion`` and ``kind``, namespaced ones in their
        ``metadata.namespace``, which must exist: load Namespaces first) as ``manager``'s creates; returns how many.

        Every object is checked and defaulted as an HTTP create would be (a bad one raises the create's
        ``StatusError``, and the objects before it stay loaded); what is saved is the request's decoding, routing,
        logging and HTTP. With ``status_manager``, an object's ``status`` is written after the create as that
        manager's merge patch of ``/status`` would write it (its own managedFields entry), in the same write:
        ``ObjectAPI.load``. Each object is one revision and one ADDED event (watchers and the controllers see them as
        creates). ``encode``: also compute each object's JSON encoding now, which the first LIST or watch that
        serves it would otherwise do (see ``store``)."""
        # The objects are JSON trees, without reference cycles: the cyclic collector finds nothing in them, and its
        # passes over a heap that grows with every object were a tenth of a large load's cost.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._load(objects, manager, status_manager, encode)
        finally:
            if collecting:
                gc.enable()

    def _load(self, objects: Iterable[JSON], manager: str, status_manager: str | None, encode: bool) -> int:
        types: dict[tuple[str, str], ResourceType] = {}
        count = 0
        for body in objects:
            want = (str(body.get("apiVersion", "")), str(body.get("kind", "")))
            rt = types.get(want)
            if rt is None:  # built again when missing: a CRD loaded earlier in the call serves new kinds
                types = {(t.api_version, t.kind): t for t in self.registry.types()}
                rt = types.get(want)
            if rt is None:
                raise E.bad_request(f"no resource serves apiVersion {want[0]!r} kind {want[1]!r}")
            ns = ((body.get("metadata") or {}).get("namespace") or "default") if rt.namespaced else ""
            ctx = WriteContext(manager=manager, field_validation="Strict")
            out = self.api.load(rt, ns, body, ctx, status_manager=status_manager)
            if encode:
                stored = self.store.get(storage_key(rt), ns, out["metadata"]["name"])
                if stored is not None:
                    self.store.encoded(storage_key(rt), stored)
            count += 1
        return count

    # --- knobs for tests -----------------------------------------------------------------------------

    def inject(self, fault: Fault | None = None, /, **kw: Any) -> Fault:
        return self.faults.inject(fault, **kw)

    def release_held(self, *, serve: bool) -> int:
        """Let every request held by a ``hold`` fault go: served, or answered 503 without touching storage."""
        return self.faults.release(serve=serve)

    def set_watch_window(self, window: int) -> None:
        self.store.set_window(window)

    def compact(self) -> None:
        """Forget all retained watch events: every watch from an older resourceVersion gets 410."""
        self.store.compact()

    # --- requests ------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        log_entry: dict[str, Any] = {}
        counted = request.query.get("watch") not in ("true", "1")
        self.busy += counted
        try:
            return await self._dispatch(request, log_entry)
        except StatusError as err:
            log_entry["status"] = err.code
            return _status_response(err)
        finally:
            self.busy -= counted
            self._log(request, log_entry)

    def _log(self, request: web.Request, entry: dict[str, Any]) -> None:
        self.requests.append(LoggedRequest(
            time=self.clock(), method=request.method, path=request.path, query=dict(request.query),
            verb=entry.get("verb", ""), group=entry.get("group", ""), resource=entry.get("resource", ""),
            namespace=entry.get("namespace", ""), name=entry.get("name", ""), subresource=entry.get("sub"),
            content_type=request.headers.get("Content-Type", ""),
            user_agent=request.headers.get("User-Agent", ""), status=entry.get("status", 0)))

    async def _dispatch(self, request: web.Request, log_entry: dict[str, Any]) -> web.StreamResponse:
        if self.control_enabled and request.path.startswith(control.PREFIX):
            return await control.handle(request, self.faults, self.requests)
        if self.faults.down:
            raise StatusError(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        _check_accept(request.headers.get("Accept", ""))
        target = resolve(self.registry, request.path)
        if isinstance(target, str) or target is None:
            if request.method != "GET":
                raise _not_found_path()
            doc = discovery.serve(self.registry, request.path, target, f"{self.host}:{self.port}")
            if doc is None:
                raise _not_found_path()
            log_entry["status"] = 200
            return web.Response(text=doc) if isinstance(doc, str) else _json(doc)
        verb = _verb(request, target)
        log_entry.update(verb=verb, group=target.rt.group, resource=target.rt.plural,
                         namespace=target.namespace or "", name=target.name or "", sub=target.sub)
        body = await request.read() if verb not in ("get", "list", "watch") else b""
        fault = self.faults.take(verb, target.rt.group, target.rt.plural, target.namespace or "",
                                 target.name or "", target.sub, request.headers.get("User-Agent", ""), body)
        if fault is not None:
            if fault.latency:
                await asyncio.sleep(fault.latency)
            if fault.hold and not await self.faults.hold(fault, f"{request.method} {request.path_qs}"):
                raise StatusError(503, "ServiceUnavailable", "the request was held and then dropped (injected)")
            if fault.status is not None:
                raise StatusError(fault.status, fault.reason,
                                  fault.message or f"injected failure ({fault.status})",
                                  retry_after_seconds=fault.retry_after)
        if verb == "watch":
            req = WatchRequest(target.rt, target.namespace, self._matcher(request, target.rt),
                               request.query.get("resourceVersion", ""),
                               request.query.get("sendInitialEvents", "").lower() == "true")
            return await serve_watch(request, self.store, req, fault, self.bookmark_interval)
        resp = await self._serve_resource(request, target, verb)
        log_entry["status"] = resp.status
        return resp

    # --- resources -----------------------------------------------------------------------------------

    def _context(self, request: web.Request) -> WriteContext:
        manager, explicit = _manager(request)
        dry = request.query.getall("dryRun", [])
        if any(d != "All" for d in dry):
            raise E.bad_request(f"Invalid dry run value: {dry}")  # real: only "All" is accepted
        # Requests that do not say get the server default, Warn.
        fv = request.query.get("fieldValidation", "Warn")
        if fv not in ("Strict", "Warn", "Ignore"):
            raise E.bad_request(f"fieldValidation {fv!r} is invalid: must be one of Ignore, Warn, or Strict")
        return WriteContext(manager=manager, manager_explicit=explicit, dry_run=bool(dry), field_validation=fv)

    def _matcher(self, request: web.Request, rt: ResourceType) -> _Matcher:
        label_sel = selectors.parse_label_selector(request.query.get("labelSelector", ""))
        field_sel = selectors.parse_field_selector(request.query.get("fieldSelector", ""))
        field_sel = selectors.check_field_selector(field_sel, rt.kind if not rt.custom else "",
                                                   rt.selectable_fields, namespaced=rt.namespaced, group=rt.group)

        named = tuple(dict.fromkeys(field_sel.fields()))

        def matches(obj: JSON) -> bool:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not label_sel.matches(labels):
                return False
            if field_sel.empty():
                return True
            if rt.custom:
                fields = selectors.field_set_from_jsonpaths(obj, rt.selectable_fields, namespaced=rt.namespaced)
            else:
                fields = selectors.selected_fields(rt.kind, obj, named, namespaced=rt.namespaced)
            return field_sel.matches(fields)

        return _Matcher(matches, empty=label_sel.empty() and field_sel.empty())

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        ctype = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if ctype in ("application/json", "", "*/*"):
            try:
                return json.loads(raw or b"null")
            except ValueError as exc:
                raise E.bad_request(f"error decoding JSON: {exc}") from exc
        if ctype in ("application/yaml", "application/x-yaml"):
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise E.bad_request(f"error decoding YAML: {exc}") from exc
        raise E.unsupported_media_type("the body of the request was in an unknown format - "
                                       "accepted media types include: application/json, application/yaml")

    def _respond(self, request: web.Request, rt: ResourceType, body: JSON, status: int,
                 ctx: WriteContext | None = None) -> web.Response:
        if wants_table(request.headers.get("Accept", "")) and request.method == "GET":
            body = to_table(rt, body, self.clock(), list(rt.printer_columns), request.query.get("includeObject", ""))
            return _json(body, status, _headers(rt, ctx))
        raw = self._stored_encoding(rt, body)
        return _json(body, status, _headers(rt, ctx)) if raw is None else _raw_json(raw, status, _headers(rt, ctx))

    def _stored_encoding(self, rt: ResourceType, body: JSON) -> bytes | None:
        """The store's encoding of the object ``body`` shows when it is the stored object as stored (a write's answer
        is a view of what it committed: its values are the stored object's own), else None. The write's watchers and
        the next LIST then use the same bytes."""
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            return None
        key = storage_key(rt)
        stored = self.store.get(key, str(meta.get("namespace") or "") if rt.namespaced else "", str(meta.get("name")))
        if stored is None or stored.get("metadata") is not meta or not served_as_stored(rt, stored):
            return None
        if list(body) != list(stored) or any(body[k] is not v for k, v in stored.items()
                                             if k not in ("apiVersion", "kind")):
            return None
        if body.get("apiVersion") != stored.get("apiVersion") or body.get("kind") != stored.get("kind"):
            return None
        return self.store.encoded(key, stored)

    async def _serve_resource(self, request: web.Request, t: Target, verb: str) -> web.Response:
        rt, ns = t.rt, t.namespace or ""
        if rt.namespaced and t.name is not None and t.namespace is None:
            raise _not_found_path()
        table = wants_table(request.headers.get("Accept", ""))
        if verb == "get":
            if table:
                return self._respond(request, rt, self.api.get(rt, ns, t.name or ""), 200)
            return _raw_json(self.api.get_encoded(rt, ns, t.name or ""), 200, _headers(rt, None))
        if verb == "list":
            matcher = self._matcher(request, rt)
            if table:
                body = self.api.list_objects(rt, t.namespace, matches=matcher, options=_list_options(request),
                                             filtered=not matcher.empty)
                return self._respond(request, rt, body, 200)
            # Built from the objects' cached encodings: the bytes json.dumps would give for list_objects' answer.
            raw = self.api.list_encoded(rt, t.namespace, matches=matcher, options=_list_options(request),
                                        filtered=not matcher.empty)
            return _raw_json(raw, 200, _headers(rt, None))
        ctx = self._context(request)
        if verb == "create":
            if t.sub == "binding":
                return self._bind(request, t, await self._body(request), ctx)
            if rt.namespaced and t.namespace is None:
                raise _not_found_path()
            # The body was decoded for this request alone: handed over, not copied.
            out = self.api.create(rt, ns, await self._body(request), ctx, body_owned=True)
            return self._respond(request, rt, out, 201, ctx)
        assert t.name is not None or verb == "deletecollection"
        if verb == "update":
            out = self.api.replace(rt, ns, t.name or "", await self._body(request), t.sub, ctx, body_owned=True)
            return self._respond(request, rt, out, 200, ctx)
        if verb == "patch":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            force = request.query["force"].lower() == "true" if "force" in request.query else None
            existed = self.api.store.get(storage_key(rt), ns if rt.namespaced else "", t.name or "") is not None
            out = self.api.patch(rt, ns, t.name or "", ctype, await request.read(), t.sub, ctx, force)
            return self._respond(request, rt, out, 200 if existed or ctx.dry_run else 201, ctx)
        if verb == "delete":
            opts = await self._delete_options(request)
            obj, _ = self.api.delete(rt, ns, t.name or "", opts, ctx.dry_run)
            if rt.returns_deleted_object or obj["metadata"].get("deletionTimestamp"):
                return self._respond(request, rt, obj, 200, ctx)
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                          "details": {"name": t.name, "group": rt.group, "kind": rt.plural,
                                      "uid": obj["metadata"].get("uid")}})
        if verb == "deletecollection":
            opts = await self._delete_options(request)
            listing = self.api.list_objects(rt, t.namespace, matches=self._matcher(request, rt))
            for item in listing["items"]:
                meta = item["metadata"]
                with contextlib.suppress(StatusError):
                    self.api.delete(rt, meta.get("namespace", ""), meta["name"], opts, ctx.dry_run)
            return self._respond(request, rt, listing, 200, ctx)
        raise E.method_not_allowed("the server does not allow this method on the requested resource")

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        raw = await request.read()
        body: JSON = {}
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise E.bad_request(f"error decoding DeleteOptions: {exc}") from exc
        pre = body.get("preconditions") or {}
        policy = request.query.get("propagationPolicy") or body.get("propagationPolicy") or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise E.bad_request(f"propagationPolicy: Unsupported value: \"{policy}\"")
        return DeleteOptions(propagation=policy, uid=pre.get("uid"), resource_version=pre.get("resourceVersion"))

    def _bind(self, request: web.Request, t: Target, body: Any, ctx: WriteContext) -> web.Response:
        """``pods/binding``: set ``spec.nodeName`` once, as the scheduler does through the real server."""
        rt = t.rt
        node = ((body or {}).get("target") or {}).get("name", "")
        if not node:
            raise E.invalid("Binding", "", t.name or "",
                            [E.Cause("FieldValueRequired", "Required value", "target.name")])
        pod = self.api.get(rt, t.namespace or "", t.name or "")
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            raise E.conflict(rt.plural, rt.group, t.name or "",
                             f'pod {t.name} is already assigned to node "{current}"')
        self.api.bind_pod(t.namespace or "", t.name or "", node, ctx)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)


@dataclass(frozen=True)
class _Matcher:
    """A request's label and field selectors: whether an object passes, and whether there are any."""

    matches: Callable[[JSON], bool]
    empty: bool

    def __call__(self, obj: JSON) -> bool:
        return self.matches(obj)


def _list_options(request: web.Request) -> ListOptions:
    limit = request.query.get("limit", "")
    return ListOptions(limit=int(limit) if limit.isdigit() else 0,
                       continue_token=request.query.get("continue", ""),
                       resource_version=request.query.get("resourceVersion", ""),
                       resource_version_match=request.query.get("resourceVersionMatch", ""),
                       send_initial_events="sendInitialEvents" in request.query)


def _check_accept(accept: str) -> None:
    """406 when the client accepts no JSON: this server does not encode protobuf or CBOR."""
    if not accept:
        return
    for part in accept.split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("*/*", "application/*", "application/json", "application/yaml", "text/plain") or \
                media.endswith("+json"):
            return
    raise StatusError(406, "NotAcceptable",
                      "only the following media types are accepted: application/json, application/yaml")


def _verb(request: web.Request, t: Target) -> str:
    method = request.method
    if method == "GET":
        if request.query.get("watch", "").lower() in ("true", "1"):
            return "watch"
        return "get" if t.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if t.name else "deletecollection"
    raise E.method_not_allowed("the server does not allow this method on the requested resource")
