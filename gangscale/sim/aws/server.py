""":class:`FakeEc2`: the fake EC2 query API over HTTP on 127.0.0.1, on an injected clock.

Auth: every call needs ``Authorization: AWS4-HMAC-SHA256 Credential=<key>/<yyyymmdd>/<region>/ec2/aws4_request,
SignedHeaders=…, Signature=…`` and ``X-Amz-Date`` (AWS General Reference, "Signature Version 4 request signing";
cloud-providers.md §4.3); else 401 ``AuthFailure`` "AWS was not able to validate the provided access credentials".
The signature's bytes are NOT verified (any key and secret pass), nor its date against the clock; the credential
scope's region must be the fake's and its service ``ec2``. Order of checks: auth, action, throttling and injected
errors, request shape, ``DryRun`` (``DryRunOperation``, HTTP 412, "Request would have succeeded, but DryRun flag is
set."), then the action.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, detached_context, wait_event
from gangscale.kube.transport import KubeHTTP
from gangscale.model.catalog import CATALOG, MachineType
from gangscale.sim.aws import actions as A
from gangscale.sim.aws import model
from gangscale.sim.aws.eks import EksFake, signed_service
from gangscale.sim.aws.engine import Engine
from gangscale.sim.aws.faults import Ec2Faults, Exchange, Hold
from gangscale.sim.aws.fleet import create_fleet
from gangscale.sim.aws.model import Ec2Error
from gangscale.sim.aws.nodes import Ec2NodeWorker
from gangscale.sim.aws.state import (
    CapacityReservation,
    Ec2State,
    Ids,
    Instance,
    LaunchTemplate,
    Subnet,
)

JSON = dict[str, Any]
XML_TYPE = "text/xml"
Observer = Callable[[Exchange], None]
#: Observers of every fake EC2 in this process (the tests add one per test, as for the fake Google Cloud).
OBSERVERS: list[Observer] = []
_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=[^/,\s]+/(\d{8})/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request, "
                   r"?SignedHeaders=[^,\s]+, ?Signature=[0-9a-f]+$")


def ec2_machines() -> dict[str, MachineType]:
    """The catalog's EC2 instance types (names with a dot)."""
    return {name: machine for name, machine in CATALOG.items() if "." in name}


class FakeEc2:
    """The fake EC2: ``url`` serves the query API (``POST /``); time comes only from ``clock``; Nodes are
    registered through ``kube`` (none without it)."""

    def __init__(self, clock: Clock, kube: KubeHTTP | None, *, region: str = "us-east-1", seed: int | None = 0,
                 host: str = "127.0.0.1", port: int = 0, heartbeats: bool = False) -> None:
        self.clock = clock
        self.kube = kube
        self.region = region
        self.host = host
        self.port = port
        self.faults = Ec2Faults()
        self.state = Ec2State(region)
        self.ids = Ids(seed)
        self._request_ids = Ids(None if seed is None else seed + 1)
        self.engine = Engine(self.state, self.faults, self.ids, ec2_machines())
        #: Every exchange, in order.
        self.calls: list[Exchange] = []
        #: Callables told of every exchange (besides the process-wide ``OBSERVERS``).
        self.observers: list[Observer] = []
        #: Calls to hold (crash tests).
        self.holds: list[Hold] = []
        self.nodes = Ec2NodeWorker(kube, clock if heartbeats else None)
        #: EKS's node groups and their Auto Scaling groups, on the same port (``gangscale pools --from-eks``).
        self.eks = EksFake(region)
        self._poke = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._handlers: dict[str, Callable[[JSON, float], JSON]] = {
            "CreateFleet": lambda p, now: create_fleet(self.engine, p, now),
            "DescribeInstances": lambda p, now: A.describe_instances(self.engine, p),
            "TerminateInstances": lambda p, now: A.terminate_instances(self.engine, p, now),
            "DescribeLaunchTemplates": lambda p, now: A.describe_launch_templates(self.engine, p),
            "DescribeLaunchTemplateVersions": lambda p, now: A.describe_launch_template_versions(self.engine, p),
            "DescribeSubnets": lambda p, now: A.describe_subnets(self.engine, p),
            "DescribeInstanceTypeOfferings": lambda p, now: A.describe_instance_type_offerings(self.engine, p),
            "DescribeInstanceTypes": lambda p, now: A.describe_instance_types(self.engine, p),
            "DescribeCapacityReservations": lambda p, now: A.describe_capacity_reservations(self.engine, p),
        }

    # --- knobs and set-up ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def instances(self) -> dict[str, Instance]:
        return self.state.instances

    @property
    def stock(self) -> dict[tuple[str, str, str], int | None]:
        return self.state.stock

    @property
    def quotas(self) -> dict[str, int]:
        return self.state.quotas

    @property
    def machines(self) -> dict[str, MachineType]:
        return self.engine.machines

    def add_subnet(self, subnet_id: str, zone: str, *, cidr: str = "10.0.0.0/20", hostname_type: str = "ip-name",
                   tags: Mapping[str, str] | None = None) -> Subnet:
        subnet = Subnet(subnet_id, zone, cidr, hostname_type=hostname_type, tags=dict(tags or {}))
        self.state.subnets[subnet_id] = subnet
        return subnet

    def add_launch_template(self, template_id: str, name: str, *, user_data: str = "", instance_type: str = "",
                            data: Mapping[str, Any] | None = None,
                            tags: Mapping[str, str] | None = None) -> LaunchTemplate:
        """A launch template with one version (1, the default). ``user_data`` is the plain text (stored base64);
        ``data`` holds other ``LaunchTemplateData`` members in botocore's names."""
        version: JSON = dict(data or {})
        if user_data:
            version["UserData"] = base64.b64encode(user_data.encode()).decode()
        if instance_type:
            version["InstanceType"] = instance_type
        template = LaunchTemplate(template_id, name, self.clock.now(), {1: version}, tags=dict(tags or {}))
        self.state.templates[template_id] = template
        return template

    def add_capacity_reservation(self, reservation_id: str, instance_type: str, zone: str, count: int, *,
                                 capacity_block: bool = False, match: str = "targeted",
                                 resource_groups: tuple[str, ...] = ()) -> CapacityReservation:
        reservation = CapacityReservation(reservation_id, instance_type, zone, count,
                                          kind="capacity-block" if capacity_block else "default", match=match,
                                          start=self.clock.now(), resource_groups=set(resource_groups))
        self.state.reservations[reservation_id] = reservation
        return reservation

    def reclaim(self, n: int) -> list[str]:
        """Give ``n`` running spot instances (the oldest first) their interruption notice; their Nodes are tainted
        now and the instances interrupted after ``faults.spot_notice_seconds``. Returns their ids."""
        now = self.clock.now()
        self.engine.advance(now)
        chosen = sorted((i for i in self.state.instances.values()
                         if i.lifecycle == "spot" and i.state == "running" and i.interrupt_at is None),
                        key=lambda i: (i.launched, i.id))[:n]
        for instance in chosen:
            self.engine.interrupt(instance, now)
        self._drain_actions()
        self.poke()
        return [i.id for i in chosen]

    def user_agents(self) -> list[str]:
        return [call.user_agent for call in self.calls]

    def describe(self) -> str:
        return (f"fake EC2 at {self.url} (region {self.region}): {len(self.state.subnets)} subnet(s), "
                f"{len(self.state.templates)} launch template(s), {len(self.state.reservations)} capacity "
                f"reservation(s), {len(self.state.instances)} instance(s)")

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = int(self._runner.addresses[0][1])
        context = detached_context()
        self._tasks = [asyncio.create_task(self._tick(), name="fake-ec2-ticker", context=context),
                       asyncio.create_task(self.nodes.run(), name="fake-ec2-kubelet", context=context)]

    async def aclose(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []
        await self.nodes.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    stop = aclose

    async def __aenter__(self) -> FakeEc2:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def settle(self) -> None:
        """Apply what is due now and wait until every Node call it caused has been made."""
        self._advance(self.clock.now())
        await self.nodes.settle()

    def poke(self) -> None:
        self._poke.set()

    def _drain_actions(self) -> None:
        actions, self.engine.actions = self.engine.actions, []
        for action in actions:
            self.nodes.put(action)

    def _advance(self, now: float) -> None:
        self.engine.advance(now)
        self._drain_actions()

    async def _tick(self) -> None:
        while True:
            self._poke.clear()
            self._advance(self.clock.now())
            await wait_event(self.clock, self._poke, self.engine.next_due())

    # --- requests -----------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        # One port serves the three APIs a client reaches by endpoint_url: EKS (rest-json, under /clusters), and
        # Auto Scaling and EC2 (both query protocol on POST /, told apart by the credential scope's service).
        if request.path.startswith("/clusters"):
            self.eks.now = self.clock.now()
            return await self.eks.handle(request)
        if signed_service(request) == "autoscaling":
            return await self.eks.handle_autoscaling(request)
        form = {k: str(v) for k, v in (await request.post()).items()} if request.method == "POST" else {}
        form.update({k: v for k, v in request.query.items() if k not in form})
        action = form.get("Action", "")
        user_agent = request.headers.get("User-Agent", "")
        if not await self._held(action):
            self._record(Exchange(self.clock.now(), action, form, None, 0, None, "", user_agent))
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=503)  # never reaches the client: its connection is closed
        now = self.clock.now()
        self._advance(now)
        params: JSON | None = None
        answer: JSON | None = None
        lost = False
        request_id = self._request_ids.uuid()
        headers: dict[str, str] = {}
        try:
            params = self._check(request, form, action)
            answer = self._handlers[action](params, now)
            status, body = 200, model.answer_xml(action, answer, request_id)
            lost = self.faults.take_lost(action)
        except Ec2Error as err:
            status, body, headers = err.status, model.error_xml(err.code, err.message, request_id), err.headers
        self._record(Exchange(now, action, form, params, 0 if lost else status, answer, body, user_agent))
        self._drain_actions()
        self.poke()
        if self.faults.answer_delay > 0:
            await self.clock.sleep(self.faults.answer_delay)
        if lost and request.transport is not None:
            request.transport.close()
        return web.Response(status=status, text=body, content_type=XML_TYPE, charset="utf-8", headers=headers)

    def _check(self, request: web.Request, form: Mapping[str, str], action: str) -> JSON:
        self._authenticate(request)
        if action not in self._handlers or form.get("Version") != model.API_VERSION:
            raise Ec2Error("InvalidAction", f"The action {action} is not valid for this web service.")
        injected = self.faults.take_error(action)
        if injected is not None:
            headers = {} if injected.retry_after_ms is None else {"x-amz-retry-after": str(injected.retry_after_ms)}
            raise Ec2Error(injected.code, injected.message or injected.code, injected.status, headers)
        params = model.parse_request(action, form)
        if params.get("DryRun"):
            raise Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412)
        return params

    def _authenticate(self, request: web.Request) -> None:
        match = _AUTH.match(request.headers.get("Authorization", ""))
        if match is None or not request.headers.get("X-Amz-Date") or match.group(2) != self.region \
                or match.group(3) != "ec2":
            raise Ec2Error("AuthFailure", "AWS was not able to validate the provided access credentials", 401)

    async def _held(self, action: str) -> bool:
        for hold in self.holds:
            if hold.held.is_set() or not hold.matches(action):
                continue
            if hold.skip > 0:
                hold.skip -= 1
                continue
            hold.held.set()
            await hold.released.wait()
            self.holds.remove(hold)
            return hold.serve
        return True

    def _record(self, exchange: Exchange) -> None:
        self.calls.append(exchange)
        for observer in [*OBSERVERS, *self.observers]:
            observer(exchange)
