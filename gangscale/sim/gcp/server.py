""":class:`FakeGcp`: the fake GKE + Compute Engine control plane and GCE metadata server on one local port."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, detached_context, wait_event
from gangscale.kube.transport import KubeHTTP
from gangscale.sim.gcp import errors as E
from gangscale.sim.gcp.compute import ComputeAPI
from gangscale.sim.gcp.container import ContainerAPI, parse_pool
from gangscale.sim.gcp.engine import Engine
from gangscale.sim.gcp.faults import Call, GcpFaults, Hold, InjectedError
from gangscale.sim.gcp.metadata import Metadata, is_metadata_path
from gangscale.sim.gcp.nodes import EFFECTS, NodeWorker
from gangscale.sim.gcp.queued import QueuedProvisioning
from gangscale.sim.gcp.routing import Req, Route
from gangscale.sim.gcp.state import DONE, CloudState, Cluster, NodePool
from gangscale.sim.gcp.wire import Links, Names

JSON = dict[str, Any]
JSON_TYPE = "application/json"


class Observer(Protocol):
    """Told of every answered container/compute request, with its JSON bodies (None where there was none): the
    tests check the traffic against Google's discovery documents (:mod:`gangscale.sim.gcp.discovery`)."""

    def __call__(self, *, method: str, path: str, query: Mapping[str, str], request: Any, status: int,
                 response: Any, user_agent: str) -> None: ...


#: Observers of every fake in this process (tests add one for the whole session).
OBSERVERS: list[Observer] = []
_K8S_EFFECTS = {k8s: api for api, k8s in EFFECTS.items()}
_DEFAULT_MESSAGES = {
    400: "Request contains an invalid argument.", 401: E.INVALID_CREDENTIALS,
    403: "The caller does not have permission", 404: "Requested entity was not found.",
    409: "Requested entity already exists", 429: "Resource has been exhausted (e.g. check quota).",
    500: "Internal error encountered.", 502: "Bad Gateway", 503: "The service is currently unavailable.",
    504: "Deadline exceeded.",
}


def project_number(project: str) -> str:
    """A stable 12-digit project number for a project id."""
    return str(100_000_000_000 + int(hashlib.sha256(project.encode()).hexdigest(), 16) % 900_000_000_000)


class FakeGcp:
    """The fake cloud: ``url`` serves container v1 under ``/v1/``, compute v1 under ``/compute/v1/`` and the
    metadata server under ``/`` and ``/computeMetadata/v1/``. Time comes only from ``clock``; Nodes are registered
    through ``kube`` (none without it)."""

    def __init__(self, clock: Clock, kube: KubeHTTP | None, *, project: str = "demo-project",
                 token: str = "fake-token", number: str | None = None, seed: int | None = 0,
                 host: str = "127.0.0.1", port: int = 0, heartbeats: bool = False) -> None:
        self.clock = clock
        self.kube = kube
        self.project = project
        self.token = token
        self.host = host
        self.port = port
        self.faults = GcpFaults()
        self.state = CloudState(project, number or project_number(project))
        self.names = Names(seed)
        # Error request ids come from their own generator, so that errors do not change the names made later.
        self._request_infos = Names(None if seed is None else seed + 1)
        self.links = Links(project, self.state.project_number)
        self.engine = Engine(self.state, self.faults, self.names, self.links)
        self.engine.on_compute_done = self._compute_done
        self.container = ContainerAPI(self.engine, self.names.container_operation(clock.now()))
        self.compute = ComputeAPI(self.engine)
        self.email = f"{self.state.project_number}-compute@developer.gserviceaccount.com"
        self.metadata = Metadata(project, self.state.project_number, self.email, self._issue_token)
        self.routes: list[Route] = self.container.routes() + self.compute.routes()
        #: Every request answered, in order (status 0: the connection was dropped without an answer).
        self.calls: list[Call] = []
        #: Requests to hold (crash tests): see :class:`~gangscale.sim.gcp.faults.Hold`.
        self.holds: list[Hold] = []
        #: With ``heartbeats``, the Nodes' kubelets renew their Leases and post their status (:mod:`.nodes`).
        self.nodes = NodeWorker(kube, clock if heartbeats else None)
        #: GKE's handling of ``queued-provisioning.gke.io`` ProvisioningRequests (only with a Kubernetes client).
        self.queued = None if kube is None else QueuedProvisioning(clock, kube, self.engine, advance=self._advance,
                                                                    poke=self.poke)
        #: token → when it expires (None: never).
        self._tokens: dict[str, float | None] = {token: None}
        self._poke = asyncio.Event()
        self._done_events: dict[str, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None

    # --- lifecycle --------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        # Timers outlive whatever job starts the fake: their sleeps are not that job's.
        context = detached_context()
        self._tasks = [asyncio.create_task(self._tick(), name="fake-gcp-ticker", context=context),
                       asyncio.create_task(self.nodes.run(), name="fake-gcp-kubelet", context=context)]
        if self.queued is not None:
            self._tasks.append(asyncio.create_task(self.queued.run(), name="fake-gcp-queued-provisioning",
                                                   context=context))

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []
        await self.nodes.aclose()
        for event in self._done_events.values():
            event.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeGcp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def settle(self) -> None:
        """Apply what is due now and wait until every Node call it caused has been made."""
        self._advance(self.clock.now())
        await self.nodes.settle()

    @property
    def quiet(self) -> bool:
        """No Node call is queued or under way and no ProvisioningRequest is being handled (what is due by the
        clock's time has been applied only if a request or the ticker ran since the clock moved: call
        :meth:`settle` to be sure)."""
        return self.nodes.pending == 0 and (self.queued is None or self.queued.quiet)

    def poke(self) -> None:
        """Look at the state again now (after a knob such as ``stock`` changed)."""
        self._poke.set()

    def describe(self) -> str:
        pools = sum(len(c.pools) for c in self.state.clusters.values())
        return (f"fake GCP at {self.url} (project {self.project}, number {self.state.project_number}): GKE "
                f"container v1 at {self.url}/v1/, Compute Engine v1 at {self.url}/compute/v1/, metadata server at "
                f"{self.url}/computeMetadata/v1/ (GCE_METADATA_HOST={self.host}:{self.port}); "
                f"{len(self.state.clusters)} cluster(s), {pools} node pool(s), {len(self.state.vms)} VM(s)")

    # --- set-up helpers ---------------------------------------------------------------------------------

    def add_cluster(self, location: str, name: str, zones: Sequence[str], *,
                    release_channel: str = "REGULAR") -> Cluster:
        """A cluster; in the REGULAR release channel unless told otherwise ("" for none), as GKE enrolls a new
        cluster by default (``Cluster.releaseChannel`` in the container v1 discovery document)."""
        if not zones:
            raise ValueError("a cluster needs at least one zone")
        cluster = Cluster(location, name, list(zones), self.clock.now(), release_channel)
        self.state.clusters[(location, name)] = cluster
        return cluster

    def add_node_pool(self, cluster: str | tuple[str, str], name: str, *, machine_type: str,
                      zones: Sequence[str] | None = None, node_count_per_zone: int = 0,
                      labels: Mapping[str, str] | None = None, taints: Sequence[Mapping[str, str]] | None = None,
                      tpu_topology: str = "", autoscaling_enabled: bool = False,
                      accelerators: Sequence[Mapping[str, Any]] | None = None, spot: bool = False,
                      extra: Mapping[str, Any] | None = None) -> NodePool:
        """A node pool that already exists (RUNNING, its VMs up and their Nodes Ready as soon as registered).

        ``cluster`` is ``"projects/P/locations/L/clusters/C"`` or ``(L, C)``; taint effects may be GKE's
        (``NO_SCHEDULE``) or Kubernetes' (``NoSchedule``); ``extra`` holds other NodePool fields of the create request
        (``management``, ``upgradeSettings``, ``queuedProvisioning``, …) and ``config`` fields under its ``config`` key.
        Invalid arguments raise ValueError with GKE's message.
        """
        location, cluster_name = cluster if isinstance(cluster, tuple) else _cluster_path(cluster)
        found = self.state.cluster(location, cluster_name)
        if found is None:
            raise ValueError(f"no cluster {cluster_name} in {location}")
        config: JSON = {"machineType": machine_type, "labels": dict(labels or {})}
        if taints:
            config["taints"] = [{"key": t["key"], "value": t.get("value", ""),
                                 "effect": _K8S_EFFECTS.get(t["effect"], t["effect"])} for t in taints]
        if accelerators:
            config["accelerators"] = [dict(a) for a in accelerators]
        if spot:
            config["spot"] = True
        body: JSON = {"name": name, "initialNodeCount": node_count_per_zone, "config": config,
                      "locations": list(zones or found.zones)}
        for key, value in (extra or {}).items():
            if key == "config":
                config.update(value)
            else:
                body[key] = value
        if tpu_topology:
            body["placementPolicy"] = {"type": "COMPACT", "tpuTopology": tpu_topology}
        if autoscaling_enabled:
            body["autoscaling"] = {"enabled": True, "minNodeCount": 0, "maxNodeCount": max(node_count_per_zone, 100),
                                   "locationPolicy": "ANY"}
        if name in found.pools:
            raise ValueError(f"node pool {name} already exists")
        try:
            spec = parse_pool({"nodePool": body}, found)
        except E.GcpError as exc:
            raise ValueError(exc.message) from None
        self.engine.pools.create(found, spec, self.clock.now(), preexisting=True)
        self.poke()
        return found.pools[name]

    # --- time -------------------------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        self.engine.advance(now)
        actions, self.engine.actions = self.engine.actions, []
        for action in actions:
            self.nodes.put(action)
        if self.queued is not None:
            self.queued.cloud_changed()

    async def _tick(self) -> None:
        while True:
            self._poke.clear()
            now = self.clock.now()
            self._advance(now)
            await wait_event(self.clock, self._poke, self.engine.next_due(now))

    def _compute_done(self, name: str) -> None:
        event = self._done_events.pop(name, None)
        if event is not None:
            event.set()

    # --- auth -------------------------------------------------------------------------------------------

    def _issue_token(self) -> tuple[str, float]:
        expires_after = self.faults.token_expires_after
        self._tokens[self.token] = None if expires_after is None else self.clock.now() + expires_after
        return self.token, self.faults.token_lifetime

    def _authenticate(self, request: web.Request, now: float) -> None:
        header = request.headers.get("Authorization", "")
        if not header:
            raise E.unauthenticated(E.MISSING_CREDENTIALS, "required")
        scheme, _, token = header.partition(" ")
        expires = self._tokens.get(token.strip(), 0.0)
        if scheme.lower() != "bearer" or token.strip() not in self._tokens or (expires is not None and now >= expires):
            raise E.unauthenticated(E.INVALID_CREDENTIALS, "authError")

    # --- requests ---------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not await self._held(request):
            self.calls.append(Call(self.clock.now(), request.method, request.path, dict(request.query), 0))
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=503)  # never reaches the client: its connection is closed
        now = self.clock.now()
        self._advance(now)
        lost = False
        try:
            response, lost = await self._serve(request, now)
        except E.GcpError as err:
            response = self._error(err, api="compute" if request.path.startswith("/compute/") else "container")
        self.calls.append(Call(now, request.method, request.path, dict(request.query), 0 if lost else response.status))
        if OBSERVERS and not is_metadata_path(request.path):
            await self._observed(request, response, 0 if lost else response.status)
        self.poke()
        if lost and request.transport is not None:
            request.transport.close()
        return response

    async def _observed(self, request: web.Request, response: web.StreamResponse, status: int) -> None:
        sent = await request.read() if request.body_exists else b""
        answer = response.text if isinstance(response, web.Response) and response.content_type == JSON_TYPE else None
        for observer in OBSERVERS:
            observer(method=request.method, path=request.path, query=dict(request.query), request=_json_or_none(sent),
                     status=status, response=None if answer is None else json.loads(answer),
                     user_agent=request.headers.get("User-Agent", ""))

    async def _held(self, request: web.Request) -> bool:
        """Wait while a :class:`Hold` holds this request; False: drop it unapplied."""
        for hold in self.holds:
            if hold.held.is_set() or not hold.matches(request.method, request.path):
                continue
            if hold.skip > 0:
                hold.skip -= 1
                continue
            hold.request = f"{request.method} {request.path}"
            hold.held.set()
            await hold.released.wait()
            self.holds.remove(hold)
            return hold.serve
        return True

    async def _serve(self, request: web.Request, now: float) -> tuple[web.StreamResponse, bool]:
        injected = self.faults.take_error(request.method, request.path)
        if injected is not None:
            return self._injected(injected, request.path), False
        if is_metadata_path(request.path):
            return self.metadata.handle(request), False
        found = self._route(request)
        if found is None:
            return web.Response(status=404, text=E.HTML_404.format(path=request.path), content_type="text/html"), False
        target, params = found
        self._authenticate(request, now)
        body = await self._body(request)
        req = Req(params, {k: request.query[k] for k in request.query}, body, now)
        if target.hold:
            await self._hold(req)
            req = Req(req.params, req.query, req.body, self.clock.now())
        status, out = target.handler(req)
        lost = target.mutating and self.faults.lost_responses > 0
        if lost:
            self.faults.lost_responses -= 1
        return web.Response(status=status, text=json.dumps(out), content_type=JSON_TYPE, charset="utf-8"), lost

    def _route(self, request: web.Request) -> tuple[Route, dict[str, str]] | None:
        """The route and the path's named parts; None: no such method."""
        for target in self.routes:
            match = target.pattern.match(request.path)
            if match is not None and target.method == request.method:
                return target, match.groupdict()
        return None

    async def _body(self, request: web.Request) -> Any:
        if request.method in ("GET", "DELETE") or not request.can_read_body:
            return None
        raw = await request.read()
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise E.invalid("Invalid JSON payload received. Unexpected token.") from None

    async def _hold(self, req: Req) -> None:
        """``zoneOperations.wait``: hold until the operation is DONE or ``wait_seconds`` of clock time passed."""
        op = self.compute.operation(req)
        if op.status == DONE:
            return
        event = self._done_events.setdefault(op.name, asyncio.Event())
        deadline = req.now + self.faults.wait_seconds
        waiter = asyncio.create_task(wait_event(self.clock, event, deadline), name=f"fake-gcp-wait-{op.name}",
                                     context=detached_context())
        await waiter
        self._advance(self.clock.now())

    def _error(self, err: E.GcpError, *, api: str) -> web.Response:
        request_id = self._request_infos.request_info() if api == "container" else None
        return web.Response(status=err.code, text=json.dumps(err.body(request_id)), content_type=JSON_TYPE,
                            charset="utf-8", headers=err.headers)

    def _injected(self, injected: InjectedError, path: str) -> web.Response:
        headers: dict[str, str] = {}
        if injected.retry_after is not None:
            value = injected.retry_after
            headers["Retry-After"] = value if isinstance(value, str) else str(int(value))
        if injected.html:
            page = E.HTML_500 if injected.status >= 500 else E.HTML_404.format(path=path)
            return web.Response(status=injected.status, text=page, content_type="text/html", headers=headers)
        message = injected.message or _DEFAULT_MESSAGES.get(injected.status, "Error")
        err = E.GcpError(injected.status, message, injected.status_name, injected.reason)
        return web.Response(status=injected.status, text=json.dumps(err.body()), content_type=JSON_TYPE,
                            charset="utf-8", headers=headers)


def _json_or_none(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _cluster_path(path: str) -> tuple[str, str]:
    parts = path.strip("/").split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or parts[4] != "clusters":
        raise ValueError(f"not a cluster path (projects/P/locations/L/clusters/C): {path}")
    return parts[3], parts[5]
