"""The fake EC2 of an aws run: ``gangscale.sim.aws.FakeEc2`` in the harness process, on the wall clock, set up from
the run's pool file (``chaoslib.awsplan``), its Nodes registered through a Kubernetes client of its own, its knobs
turned by the seed's ``cloud-fault`` actions during the fault phase, and its traffic judged as it happens
(:class:`AwsTraffic`).

The fake's kubelets write Nodes under the user agent ``eks-kubelets``: the API-server faults (aimed at
``gangscale*``) do not hit them, and the leadership judge does not count their writes (on EKS it is the kubelets
and the cloud controller manager, not gangscale, that register and remove Nodes). Each run has a fake of its own
and observes it through the fake's own ``observers`` (not the process-wide ``OBSERVERS``), so runs played at the
same time in one harness process do not see each other's calls.

Timings are those of a small, fast cloud: instances boot in 0.2 s, register 0.1 s later and turn Ready 0.3 s after
that, shut down in 0.2 s; a spot notice lasts what its ``reclaim`` action says (EC2's is two minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaoslib.awsplan import aws_pool_file
from chaoslib.plan import Action
from gangscale.clock import SystemClock
from gangscale.config import parse_pool_yaml
from gangscale.kube.client import make_http
from gangscale.model.nodepool import NodePool
from gangscale.sim.aws import Exchange, FakeEc2, Hold, InjectedError
from gangscale.sim.aws import model as ec2_model
from gangscale.sim.aws.faults import MUTATING
from gangscale.sim.aws.quotas import quota_name, used
from gangscale.sim.aws.standalone import set_up

JSON = dict[str, Any]
#: The fake's user agent towards the API server (its kubelets): not ``gangscale…``.
KUBELET_AGENT = "eks-kubelets"
#: The fake's timings (``Ec2Faults`` fields) for the whole run.
TIMINGS: dict[str, float] = {"boot_seconds": 0.2, "register_seconds": 0.1, "ready_seconds": 0.3,
                             "shutdown_seconds": 0.2, "answer_delay": 0.0}
#: A scale-up's nodes must be Ready this long after it starts (0.6 s of boot, plus room for throttled retries).
MAX_NODE_PROVISION_TIME = "8s"
#: Static credentials for botocore's environment provider (the fake checks the signature's form, not its bytes).
KEYS = {"AWS_ACCESS_KEY_ID": "AKIACHAOSEXAMPLE0000", "AWS_SECRET_ACCESS_KEY": "chaos/secret/key/not/a/real/one/0000"}
#: The tag gangscale puts on its instances (``gangscale.providers.aws.fleet``) naming the scale-up's token.
TOKEN_TAG = "gangscale.io/token"
LIVE = ("pending", "running")


@dataclass
class AwsTraffic:
    """An observer of one fake EC2: each of gangscale's exchanges checked against botocore's EC2 model at once
    (``problems``: the request against the operation's input shape; the answer's XML against its output shape or
    EC2's error envelope; the data behind it against the output shape) and its changes (``CreateFleet``,
    ``TerminateInstances``) kept for ``checks.leadership`` (``changes``: entries shaped as the API server's request
    log's)."""

    problems: list[str] = field(default_factory=list)
    changes: list[JSON] = field(default_factory=list)
    #: Exchanges of gangscale's checked.
    checked: int = 0

    def __call__(self, exchange: Exchange) -> None:
        if not exchange.user_agent.startswith("gangscale"):
            return
        self.checked += 1
        action, status = exchange.action, exchange.status
        found: list[str] = []
        if action not in ec2_model.operations():
            found.append(f"{action!r} is not an EC2 operation")
        else:
            found += ec2_model.request_problems(action, exchange.form)
            if status:
                found += ec2_model.answer_problems(action, status, exchange.body)
            if exchange.answer is not None:
                found += ec2_model.validate_output(action, exchange.answer)
        self.problems += [f"{action} -> {status or 'answer dropped'} ({exchange.user_agent}): breaks botocore's EC2 "
                          f"model: {problem}" for problem in found]
        if action in MUTATING:
            self.changes.append(ec2_change(exchange))


def ec2_change(exchange: Exchange) -> JSON:
    """A change to EC2 as a request-log entry for ``checks.leadership``. Applied: a 2xx answer, or none at all with
    the call read (status 0 with ``params``: the fake applied it and dropped its answer, a lost answer)."""
    lost = exchange.status == 0 and exchange.params is not None
    ids = ",".join(sorted(v for k, v in exchange.form.items() if k.startswith("InstanceId.")))
    token = exchange.form.get("ClientToken", "")
    what = f"{exchange.action} {token or ids}".rstrip() + (" (answer dropped)" if lost else "")
    return {"time": datetime.fromtimestamp(exchange.time, UTC).isoformat(timespec="microseconds"),
            "userAgent": exchange.user_agent, "verb": "create" if exchange.action == "CreateFleet" else "delete",
            "resource": "ec2", "name": token or ids, "status": exchange.status,
            "applied": lost or 200 <= exchange.status < 300, "what": what}


def instances_at_the_end(instances: Iterable[Any], nodes: Iterable[str]) -> list[str]:
    """EC2 holds nothing the nodes do not show: every live (pending or running) instance gangscale tagged has its
    Node (by its private DNS name). Together with ``checks.at_the_end`` (each pool holds exactly the nodes its live
    requests need) this leaves no instance that no request needs."""
    names = set(nodes)
    return [f"instance {i.id} ({i.state}, token {i.tags.get(TOKEN_TAG, '')}) has no Node {i.private_dns}"
            for i in sorted(instances, key=lambda i: i.id)
            if i.state in LIVE and TOKEN_TAG in i.tags and i.private_dns not in names]


def token_by_provider_id(instances: Mapping[str, Any]) -> Callable[[JSON], str]:
    """The token of the scale-up that made a Node: the ``gangscale.io/token`` tag of the instance its
    ``spec.providerID`` (``aws:///<zone>/<instance id>``) names ("" for another's). Node names (private DNS names)
    are reused once an instance's address is free again; instance ids are not."""

    def token(node: JSON) -> str:
        instance = instances.get(str((node.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1])
        return str(instance.tags.get(TOKEN_TAG, "")) if instance is not None else ""

    return token


@dataclass
class AwsCloud:
    """One run's fake EC2: start it (:func:`aws_cloud`), point replicas at it (:meth:`flags`, :meth:`env`), apply
    faults (:meth:`apply`), stop them all (:meth:`stop_faults`)."""

    ec2: FakeEc2
    pools: str
    traffic: AwsTraffic
    workdir: Path
    #: Cloud faults applied; spot instances given their notice.
    applied: int = 0
    reclaimed: int = 0
    #: Calls the counted faults acted on (answered with an injected error, or applied with their answer dropped) and
    #: reads held, as of the end of the fault phase.
    hits: int = 0
    #: Instances given their interruption notice.
    reclaimed_ids: set[str] = field(default_factory=set)
    _injected: list[tuple[InjectedError, int]] = field(default_factory=list)
    _lost: int = 0
    _holds: list[Hold] = field(default_factory=list)
    _open: dict[str, int] = field(default_factory=dict)
    _timers: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def by_name(self) -> dict[str, NodePool]:
        return {p.name: p for p in parse_pool_yaml(self.pools).pools}

    def flags(self) -> tuple[str, ...]:
        return ("--provider", "aws", "--aws-endpoint", self.ec2.url, "--max-node-provision-time",
                MAX_NODE_PROVISION_TIME)

    def env(self) -> dict[str, str]:
        """The replicas' environment: botocore's default chain finds the static keys and nothing of this machine's
        (no shared files, an empty home, no instance metadata)."""
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return env | KEYS | {"HOME": str(home), "AWS_CONFIG_FILE": str(home / "aws-config"),
                             "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"),
                             "AWS_EC2_METADATA_DISABLED": "true"}

    def node_token(self) -> Callable[[JSON], str]:
        return token_by_provider_id(self.ec2.instances)

    def reclaimed_tokens(self) -> set[str]:
        """The tokens of the instances the cloud gave an interruption notice. A revocation may name the scale-up's
        token rather than its nodes (seed 20003: the leader that made the promise stopped before it saw the notice;
        its successor found none of the token's instances left and revoked naming the token); the cloud's record
        says that token's capacity was reclaimed."""
        instances = self.ec2.instances
        return {instances[i].tags.get(TOKEN_TAG, "") for i in self.reclaimed_ids if i in instances} - {""}

    def reclaimed_units(self) -> set[str]:
        """The tokens and the instance ids (the units) the cloud reclaimed: a restarted leader that finds a unit
        incomplete names the unit, the instance id (seed 25032)."""
        return self.reclaimed_tokens() | set(self.reclaimed_ids)

    # --- faults -------------------------------------------------------------------------------------------------

    def apply(self, action: Action) -> None:
        """Turn the knob a ``cloud-fault`` action names; one that lasts is turned back after ``action.seconds``."""
        fault, faults, state = action.fault, self.ec2.faults, self.ec2.state
        kind = fault["kind"]
        if kind in ("stockout", "quota"):
            pool = self.by_name[str(fault["pool"])]
            lifecycle = "spot" if pool.capacity_type == "spot" else "on-demand"
            if kind == "stockout":
                key = (pool.machine_type, pool.zone, lifecycle)
                state.stock[key] = 0
                self._window(f"stock:{key}", action.seconds, lambda: state.stock.pop(key, None))
            else:
                name = quota_name(pool.machine_type, lifecycle)
                assert name is not None
                # Full as it stands: no more vCPUs of the quota's group than are in use now.
                state.quotas[name] = min(state.quotas.get(name, 1 << 30), used(state, name))
                self._window(f"quota:{name}", action.seconds, lambda: state.quotas.pop(name, None))
        elif kind == "error":
            error = faults.fail(str(fault["code"]), int(fault["status"]), str(fault["action"]),
                                message=str(fault.get("message") or ""), times=int(fault["times"]),
                                retry_after_ms=fault.get("retry_after_ms"))
            self._injected.append((error, error.times))
        elif kind == "lost-answers":
            # One target at a time: a later fault's action replaces an earlier one's (both counts add up).
            faults.lost_answers += int(fault["count"])
            faults.lost_action = str(fault["action"])
            self._lost += int(fault["count"])
        elif kind == "slow-answers":
            faults.answer_delay = float(fault["answer_seconds"])
            self._window("answer_delay", action.seconds, lambda: setattr(faults, "answer_delay", 0.0))
        elif kind == "held-read":
            self._hold(Hold(str(fault["action"]), skip=int(fault["skip"]), serve=True), action.seconds)
        elif kind == "reclaim":
            faults.spot_notice_seconds = float(fault["notice_seconds"])
            ids = self.ec2.reclaim(int(fault["count"]))
            self.reclaimed += len(ids)
            self.reclaimed_ids.update(ids)
        else:
            raise ValueError(f"unknown cloud fault {kind!r}")
        self.applied += 1
        self.ec2.poke()

    def _window(self, knob: str, seconds: float, restore: Callable[[], object]) -> None:
        self._open[knob] = self._open.get(knob, 0) + 1

        async def close() -> None:
            await asyncio.sleep(seconds)
            self._open[knob] -= 1
            if not self._open[knob]:
                restore()
                self.ec2.poke()

        self._timers.append(asyncio.create_task(close(), name=f"chaos cloud fault {knob}"))

    def _hold(self, hold: Hold, seconds: float) -> None:
        """Hold the next matching read for ``seconds`` after it arrives, then serve it."""
        self.ec2.holds.append(hold)
        self._holds.append(hold)

        async def release() -> None:
            await hold.held.wait()
            await asyncio.sleep(seconds)
            hold.released.set()

        self._timers.append(asyncio.create_task(release(), name=f"chaos cloud hold {hold.action}"))

    async def stop_faults(self) -> None:
        """Every knob back as it was, every injected error, lost answer and hold not yet used up gone (a held call
        is served)."""
        for timer in self._timers:
            timer.cancel()
        for timer in self._timers:
            with contextlib.suppress(asyncio.CancelledError):
                await timer
        self._timers.clear()
        self._open.clear()
        faults, state = self.ec2.faults, self.ec2.state
        self.hits += sum(times - error.times for error, times in self._injected) + self._lost - faults.lost_answers
        self.hits += sum(1 for hold in self._holds if hold.held.is_set())
        for hold in self._holds:
            hold.released.set()
            if not hold.held.is_set() and hold in self.ec2.holds:
                self.ec2.holds.remove(hold)
        self._injected, self._lost, self._holds = [], 0, []
        state.stock.clear()
        state.quotas.clear()
        faults.errors.clear()
        faults.throttle = faults.lost_answers = 0
        faults.lost_action = "*"
        set_timings(self.ec2)
        self.ec2.poke()

    def kubelet_failures(self) -> list[str]:
        return [f"the fake EC2's kubelet failed: {failure}" for failure in self.ec2.nodes.failures]


def set_timings(ec2: FakeEc2) -> None:
    for knob, value in TIMINGS.items():
        setattr(ec2.faults, knob, value)


@contextlib.asynccontextmanager
async def aws_cloud(workdir: Path, kubeconfig: Path, *, spot: bool) -> AsyncIterator[AwsCloud]:
    """The run's fake EC2, serving and observed, until the block ends (``spot``: the spot pools are spot)."""
    text = aws_pool_file(spot)
    http = await make_http(str(kubeconfig), user_agent=KUBELET_AGENT)
    pools = parse_pool_yaml(text).pools
    ec2 = FakeEc2(SystemClock(), http, region=str(pools[0].provider["aws"]["region"]), heartbeats=True)
    set_timings(ec2)
    set_up(ec2, pools)
    cloud = AwsCloud(ec2, text, AwsTraffic(), workdir)
    ec2.observers.append(cloud.traffic)
    try:
        await ec2.start()
        yield cloud
    finally:
        await cloud.stop_faults()
        await ec2.aclose()
        await http.api_client.close()
