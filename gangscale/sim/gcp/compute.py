"""compute.googleapis.com/compute/v1: the managed instance groups under the fake's node pools, their instance
templates, resize requests, instances and zone operations.

A resize request is refused (400, the fake's own wording) on a MIG whose template is neither flex-start nor
reservation-bound and consumes no specific reservation: Google's "About resize requests in a MIG" says resize
requests are for the flex-start and reservation-bound provisioning models (:mod:`.templates`).
``requestedRunDuration`` stays optional: the gcloud reference ("resize-requests create") says it is optional when
the MIG uses FLEX_START or consumes a reservation and required otherwise, and every other MIG is refused before that
matters; when given, it must be 10 minutes to 7 days (the range the fake has always checked; gangscale's
``configschema`` cites the compute discovery document and "About resize requests in a MIG" for it). "At the end of
the run duration instance will be deleted" (``InstanceGroupManagerResizeRequest.requestedRunDuration``): counted
from when the request SUCCEEDED.

Every mutating call takes an optional ``requestId`` (a UUID, not the zero UUID): the first call with it is applied
and makes an Operation; any later call with the same ``requestId`` answers that same Operation (as it is now) and
changes nothing. ``zoneOperations.wait`` is served by the server (it holds the request).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gangscale.sim.gcp import errors as E
from gangscale.sim.gcp import render
from gangscale.sim.gcp.engine import Engine
from gangscale.sim.gcp.routing import Req, Route, int_field, route
from gangscale.sim.gcp.state import ACTIVE_RR_STATES, CANCELLED, ComputeOp, Member, Mig, ResizeRequest
from gangscale.sim.gcp.templates import instance_template, resize_request_refusal, template_name
from gangscale.sim.gcp.wire import COMPUTE_NAME_REGEX, parse_instance_url, valid_compute_name, valid_request_id

JSON = dict[str, Any]

BASE = "/compute/v1/projects/{project}/zones/{zone}"
MIGS = f"{BASE}/instanceGroupManagers"
CREATE_INSTANCES_LIMIT = 1000
MIN_RUN_SECONDS = 600
MAX_RUN_SECONDS = 7 * 24 * 3600


def _bad_name(field: str, name: object) -> E.GcpError:
    return E.invalid(f"Invalid value for field '{field}': '{name}'. Must be a match of regex '{COMPUTE_NAME_REGEX}'")


class ComputeAPI:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.state = engine.state
        self.faults = engine.faults
        self.links = engine.links

    def routes(self) -> list[Route]:
        mig = f"{MIGS}/{{mig}}"
        rrs = f"{mig}/resizeRequests"

        def r(method: str, path: str, handler: Callable[[Req], tuple[int, JSON]], mutating: bool) -> Route:
            return route(method, path, handler, mutating=mutating, api="compute")

        return [
            r("GET", MIGS, self.list_migs, False),
            r("GET", mig, self.get_mig, False),
            r("POST", f"{mig}/listManagedInstances", self.list_managed_instances, False),
            r("POST", f"{mig}/resize", self.resize, True),
            r("POST", f"{mig}/createInstances", self.create_instances, True),
            r("POST", f"{mig}/deleteInstances", self.delete_instances, True),
            r("GET", rrs, self.list_resize_requests, False),
            r("POST", rrs, self.insert_resize_request, True),
            r("GET", f"{rrs}/{{rr}}", self.get_resize_request, False),
            r("POST", f"{rrs}/{{rr}}/cancel", self.cancel_resize_request, True),
            r("DELETE", f"{rrs}/{{rr}}", self.delete_resize_request, True),
            r("GET", f"{BASE}/instances/{{instance}}", self.get_instance, False),
            r("GET", "/compute/v1/projects/{project}/global/instanceTemplates/{template}", self.get_template, False),
            r("GET", f"{BASE}/operations/{{op}}", self.get_operation, False),
            route("POST", f"{BASE}/operations/{{op}}/wait", self.get_operation, mutating=False, api="compute",
                  hold=True),
        ]

    # --- lookups ----------------------------------------------------------------------------------------

    def _project(self, req: Req) -> None:
        if req["project"] not in (self.state.project, self.state.project_number):
            raise E.GcpError(403, f"Permission denied on resource project {req['project']}.", "PERMISSION_DENIED")

    def _mig(self, req: Req) -> Mig:
        self._project(req)
        found = self.state.mig(req["zone"], req["mig"])
        if found is None:
            raise E.compute_not_found(f"projects/{req['project']}/zones/{req['zone']}/instanceGroupManagers/"
                                      f"{req['mig']}")
        return found

    def _rr(self, req: Req, mig: Mig) -> ResizeRequest:
        found = mig.resize_requests.get(req["rr"])
        if found is None:
            raise E.compute_not_found(f"projects/{req['project']}/zones/{req['zone']}/instanceGroupManagers/"
                                      f"{mig.name}/resizeRequests/{req['rr']}")
        return found

    def operation(self, req: Req) -> ComputeOp:
        self._project(req)
        op = self.state.compute_ops.get(req["op"])
        if op is None or op.zone != req["zone"]:
            raise E.compute_not_found(f"projects/{req['project']}/zones/{req['zone']}/operations/{req['op']}")
        return op

    def _replayed(self, req: Req) -> tuple[str | None, tuple[int, JSON] | None]:
        """``(requestId, the answer of its first call)``; the answer is None for a new (or absent) requestId."""
        request_id = req.query.get("requestId")
        if request_id is None:
            return None, None
        if not valid_request_id(request_id):
            raise E.invalid(f"Invalid value for field 'requestId': '{request_id}'. The request id must be a valid "
                            "UUID with the exception that zero UUID is not supported "
                            "(00000000-0000-0000-0000-000000000000).")
        name = self.state.request_ids.get(request_id)
        if name is None:
            return request_id, None
        return request_id, (200, render.compute_operation(self.links, self.state.compute_ops[name]))

    def _op(self, op_type: str, mig: Mig, request_id: str | None, req: Req, *,
            target: tuple[str, str] | None = None) -> tuple[int, JSON]:
        link, target_id = target or (self.links.mig(mig.zone, mig.name), mig.id)
        op = self.engine.compute_op(op_type, mig.zone, link, target_id, request_id, req.now)
        return 200, render.compute_operation(self.links, op)

    # --- instance group managers ------------------------------------------------------------------------

    def list_migs(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        items = [render.mig(self.links, mig, req.now) for (zone, _), mig in sorted(self.state.migs.items())
                 if zone == req["zone"]]
        out: JSON = {"kind": "compute#instanceGroupManagerList", "id": f"projects/{req['project']}/zones/"
                     f"{req['zone']}/instanceGroupManagers", "selfLink": f"{self.links.zone(req['zone'])}/"
                     "instanceGroupManagers"}
        if items:
            out["items"] = items
        return 200, out

    def get_mig(self, req: Req) -> tuple[int, JSON]:
        return 200, render.mig(self.links, self._mig(req), req.now)

    def list_managed_instances(self, req: Req) -> tuple[int, JSON]:
        mig = self._mig(req)
        items = [render.managed_instance(self.links, mig, member, req.now) for member in mig.members.values()]
        return 200, ({"managedInstances": items} if items else {})

    def resize(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        request_id, replay = self._replayed(req)
        if replay is not None:
            return replay
        mig = self._mig(req)
        if "size" not in req.query:
            raise E.invalid("Required field 'size' not specified")
        size = int_field(req.query["size"], "size")
        if size < 0:
            raise E.invalid(f"Invalid value for field 'size': '{size}'. Must be greater than or equal to 0.")
        active = [rr.name for rr in mig.resize_requests.values() if rr.state in ACTIVE_RR_STATES]
        if active:
            raise E.compute_precondition(f"The managed instance group '{mig.name}' cannot be resized while resize "
                                         f"request '{active[0]}' is in progress.")
        if size > mig.target_size:
            self.engine.grow(mig, size, req.now)
        else:
            self.engine.shrink(mig, size, req.now)
        return self._op("compute.instanceGroupManagers.resize", mig, request_id, req)

    def create_instances(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        request_id, replay = self._replayed(req)
        if replay is not None:
            return replay
        mig = self._mig(req)
        instances = req.obj().get("instances")
        if not isinstance(instances, list) or not instances:
            raise E.invalid("Required field 'instances' not specified")
        if len(instances) > CREATE_INSTANCES_LIMIT:
            raise E.invalid(f"Invalid value for field 'instances': at most {CREATE_INSTANCES_LIMIT} instances can "
                            "be created in one request.")
        names = self._new_names(mig, instances, "resource.instances")
        for name in names:
            self.engine.new_member(mig, name=name)
        mig.retry_at = req.now
        return self._op("compute.instanceGroupManagers.createInstances", mig, request_id, req)

    def _new_names(self, mig: Mig, instances: list[Any], field: str) -> list[str]:
        names: list[str] = []
        for i, entry in enumerate(instances):
            name = entry.get("name") if isinstance(entry, dict) else None
            if not isinstance(name, str) or not valid_compute_name(name):
                raise _bad_name(f"{field}[{i}].name", name)
            if name in mig.members or (mig.zone, name) in self.state.vms or name in names:
                raise E.compute_exists(f"projects/{self.state.project}/zones/{mig.zone}/instances/{name}")
            names.append(name)
        return names

    def delete_instances(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        request_id, replay = self._replayed(req)
        if replay is not None:
            return replay
        mig = self._mig(req)
        body = req.obj()
        urls = body.get("instances")
        if not isinstance(urls, list) or not urls:
            raise E.invalid("Required field 'instances' not specified")
        skip = bool(body.get("skipInstancesOnValidationError", False))
        chosen: list[Member] = []
        for i, name in enumerate(self._instance_names(mig, urls)):
            member = mig.members.get(name) if name is not None else None
            if member is None or member.owner not in (None, "slice"):
                if skip:
                    continue
                raise E.invalid(f"Invalid value for field 'instances': '{urls[i]}'. The instance is not a member of "
                                f"the managed instance group '{mig.name}'.")
            chosen.append(member)
        for member in chosen:
            self.engine.delete_member(mig, member, req.now)
        return self._op("compute.instanceGroupManagers.deleteInstances", mig, request_id, req)

    def _instance_names(self, mig: Mig, refs: list[Any]) -> list[str | None]:
        """The instance name each entry of ``instances[]`` names (None: one of another zone). The entries are full or
        partial URLs, or names (queued instances have only a name), never both kinds in one request
        (``InstanceGroupManagersDeleteInstancesRequest.instances``); anything else is malformed, which
        ``skipInstancesOnValidationError`` does not skip (that flag covers instances that are not members)."""
        names: list[str | None] = []
        kinds = set()
        for i, ref in enumerate(refs):
            if isinstance(ref, str) and valid_compute_name(ref):
                kinds.add("name")
                names.append(ref)
                continue
            parsed = parse_instance_url(ref) if isinstance(ref, str) else None
            if parsed is None or parsed[0] not in (None, self.state.project, self.state.project_number):
                raise E.invalid(f"Invalid value for field 'resource.instances[{i}]': '{ref}'. The URL is malformed.")
            kinds.add("url")
            names.append(parsed[2] if parsed[1] == mig.zone else None)
        if len(kinds) > 1:
            raise E.invalid("Invalid value for field 'resource.instances': one cannot specify both instance URLs and "
                            "instance names in a single request.")
        return names

    def get_instance(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        vm = self.state.vms.get((req["zone"], req["instance"]))
        if vm is None:
            raise E.compute_not_found(f"projects/{req['project']}/zones/{req['zone']}/instances/{req['instance']}")
        mig = self.state.mig(vm.zone, vm.mig)
        return 200, render.instance(self.links, vm, req.now, self.state.pool_of(mig) if mig is not None else None)

    def get_template(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        for mig in self.state.migs.values():
            pool = self.state.pool_of(mig)
            if pool is not None and template_name(mig) == req["template"]:
                return 200, instance_template(self.links, mig, pool)
        raise E.compute_not_found(f"projects/{req['project']}/global/instanceTemplates/{req['template']}")

    def get_operation(self, req: Req) -> tuple[int, JSON]:
        return 200, render.compute_operation(self.links, self.operation(req))

    # --- resize requests --------------------------------------------------------------------------------

    def list_resize_requests(self, req: Req) -> tuple[int, JSON]:
        mig = self._mig(req)
        items = [render.resize_request(self.links, rr) for rr in mig.resize_requests.values()]
        out: JSON = {"kind": "compute#instanceGroupManagerResizeRequestList",
                     "id": f"{mig.id}/resizeRequests", "selfLink": f"{self.links.mig(mig.zone, mig.name)}/"
                     "resizeRequests"}
        if items:
            out["items"] = items
        return 200, out

    def get_resize_request(self, req: Req) -> tuple[int, JSON]:
        mig = self._mig(req)
        return 200, render.resize_request(self.links, self._rr(req, mig))

    def insert_resize_request(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        request_id, replay = self._replayed(req)
        if replay is not None:
            return replay
        mig = self._mig(req)
        body = req.obj()
        name = body.get("name")
        if not isinstance(name, str) or not valid_compute_name(name):
            raise _bad_name("resource.name", name)
        resize_by, given = body.get("resizeBy"), body.get("instances")
        if (resize_by is None) == (given is None):
            raise E.invalid("Exactly one of 'resource.resizeBy' and 'resource.instances' must be specified.")
        instances: list[str] | None = None
        if given is not None:
            if not isinstance(given, list) or not given:
                raise E.invalid("Invalid value for field 'resource.instances': must not be empty.")
            instances = self._new_names(mig, given, "resource.instances")
            count = len(instances)
        else:
            count = int_field(resize_by, "resource.resize_by")
            if count < 1:
                raise E.invalid(f"Invalid value for field 'resource.resizeBy': '{count}'. Must be greater than 0.")
        duration, seconds = self._duration(body.get("requestedRunDuration"))
        pool = self.state.pool_of(mig)
        refusal = None if pool is None else resize_request_refusal(pool, mig)
        if refusal is not None:
            raise E.invalid(refusal)
        if name in mig.resize_requests:
            raise E.compute_exists(f"projects/{self.state.project}/zones/{mig.zone}/instanceGroupManagers/"
                                   f"{mig.name}/resizeRequests/{name}")
        description = str(body.get("description") or "")
        rr = self.engine.insert_resize_request(mig, name, count, instances, duration, seconds, description, req.now)
        return self._op("compute.instanceGroupManagerResizeRequests.insert", mig, request_id, req,
                        target=(self.links.resize_request(mig.zone, mig.name, rr.name), rr.id))

    def _duration(self, raw: Any) -> tuple[JSON | None, float | None]:
        if raw is None:
            return None, None
        if not isinstance(raw, dict):
            raise E.invalid("Invalid value for field 'resource.requestedRunDuration': expected an object.")
        seconds = int_field(raw.get("seconds", 0), "resource.requested_run_duration.seconds", kind="TYPE_INT64")
        nanos = int_field(raw.get("nanos", 0), "resource.requested_run_duration.nanos")
        total = seconds + nanos / 1e9
        if not MIN_RUN_SECONDS <= total <= MAX_RUN_SECONDS:
            raise E.invalid("Invalid value for field 'resource.requestedRunDuration': the run duration must be "
                            "between 10 minutes and 7 days.")
        out: JSON = {"seconds": str(seconds)}
        if nanos:
            out["nanos"] = nanos
        return out, total

    def cancel_resize_request(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        request_id, replay = self._replayed(req)
        if replay is not None:
            return replay
        mig = self._mig(req)
        rr = self._rr(req, mig)
        if rr.state not in ACTIVE_RR_STATES:
            raise E.compute_precondition(f"The resize request '{rr.name}' cannot be cancelled in state {rr.state}.")
        self.engine.end_resize_request(mig, rr, CANCELLED, req.now)
        return self._op("compute.instanceGroupManagerResizeRequests.cancel", mig, request_id, req,
                        target=(self.links.resize_request(mig.zone, mig.name, rr.name), rr.id))

    def delete_resize_request(self, req: Req) -> tuple[int, JSON]:
        self._project(req)
        request_id, replay = self._replayed(req)
        if replay is not None:
            return replay
        mig = self._mig(req)
        rr = self._rr(req, mig)
        if rr.state in ACTIVE_RR_STATES:
            raise E.compute_precondition(f"The resize request '{rr.name}' is in state {rr.state}: cancel it before "
                                         "deleting it.")
        del mig.resize_requests[rr.name]
        return self._op("compute.instanceGroupManagerResizeRequests.delete", mig, request_id, req,
                        target=(self.links.resize_request(mig.zone, mig.name, rr.name), rr.id))
