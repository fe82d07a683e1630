"""The ``simulated`` node-pool provider: a pretend cloud that registers real Node objects.

What the cloud does, per pool (the pool file's ``simulated:`` section, camelCase keys):

- It holds ``stock`` units (None: unlimited). Units obtained and not released count against it; asking for
  more than is left fails with STOCKOUT (``GCE_STOCKOUT``) and creates nothing.
- ``obtain`` creates every node of every unit through the Kubernetes API (``POST /api/v1/nodes``), a
  multi-host slice whole, with the pool's labels, taints and allocatable plus ``gangscale.io/node-pool``,
  ``gangscale.io/unit``, ``gangscale.io/token`` and ``kubernetes.io/hostname``. The nodes start with a
  ``Ready=False`` condition (the API server adds the ``not-ready`` taint); ``provisionSeconds`` of clock
  time later (default 60) a background task patches ``Ready=True`` into their status as a kubelet would,
  and the API server's node lifecycle controller lifts the taint.
- From registration until it is deleted, every node's kubelet heartbeats as a v1.36 kubelet does
  (:mod:`gangscale.providers.simnodes`): its Lease in ``kube-node-lease`` renewed every 10 s, its status posted
  on change and every 5 minutes; so a real kube-controller-manager never marks it ``Unknown``.
  ``heartbeats=False`` leaves that out (a simulation with no node lifecycle controller, spared a timer every
  10 s).
- The cloud's records *are* the Node objects: ``start()`` lists them and rebuilds which token obtained which
  units and how much stock is in use, and re-arms the Ready timers of nodes that are not Ready yet, so a
  new instance after a controller restart knows what earlier tokens obtained.
- The intent of an obtain is fixed by its token: unit *i* of token *T* is always ``<pool>-<10 hex of
  sha256(T/i)>`` and its nodes ``<unit>-0`` … ``<unit>-<hosts-1>``, and every node carries ``<i>/<count>`` (the
  slot annotation). So the first node created records the whole intent (every unit id and node name of the
  obtain); before it, nothing exists that would need undoing. A restarted instance rebuilds every unit of the
  intent, made or not: a repeated obtain creates exactly the missing ones, a lookup names the incomplete ones,
  the stock counts all of them. Ids are unique across processes because tokens are (a token is never reused
  for a different scale-up, ``gangscale.controller.logic.record.step_token``), and a node name already held by
  another unit fails the obtain (``NODE_NAME_TAKEN``) instead of being shared.
- ``obtain`` under a token that already obtained units returns those units and creates nothing; if it
  asks for a different pool or count it fails with PERMANENT ``TOKEN_MISMATCH``.
- ``release`` deletes the units' nodes (one already gone counts as deleted) and returns their stock.
- A spot pool's VMs can be reclaimed (``reclaim: {perNodeHour, noticeSeconds, seed}`` in its ``simulated:`` section,
  or the one-shot ``provider.faults(pool).reclaim(n)``; :class:`~gangscale.providers.simreclaims.Reclaims` and the
  simnodes module docstring say what a reclaim looks like from the API server, with sources): the node turns
  ``Ready=False`` (``node is shutting down``) at the notice and is deleted ``noticeSeconds`` later. The cloud's books
  then hold what a restarted provider would rebuild from the Node objects that remain: the unit stays, incomplete
  (``lookup`` names it; it counts against the stock until released, and a release of it succeeds), and a token whose
  every node is gone designates nothing any more (``lookup`` returns None, its stock is free). A repeated obtain
  under the token makes the missing node again, as for any node lost since.

Every failure is a :class:`~gangscale.providers.base.ProviderError`. A failed obtain deletes what it
created (``rolled_back=True``); if that cleanup itself fails, the units stay recorded against the token
(``rolled_back=False``) and an obtain with the same token finishes them.

Test knobs, per pool, through ``provider.faults(pool)`` (a mutable
:class:`~gangscale.providers.simfaults.PoolFaults`): ``stockout``, ``quota``, ``partial_grant`` (one-shot),
``never_ready``, ``timeouts`` (lost responses), ``transient_errors``, ``call_latency``, ``short_answer``
(one-shot: an answer that lost units), ``heartbeat_stopped`` (node names whose kubelet has stopped: no
Lease renewal, no status) and, on spot pools, ``reclaim(n)`` / ``set_reclaim_rate(r)``. ``provider.calls``
logs every obtain and release with its outcome. ``fence`` (the leader lease) is asked before every node create
and delete: a process that lost the lease stops mid-obtain (TRANSIENT ``NOT_LEADER``) and does not roll back what
the next leader will finish. The pool file's ``simulated:`` section sets the knobs' starting
values (``stockout``, ``quota``, ``partialGrant``, ``neverReady``, ``lostResponses``, ``transientErrors``,
``latencySeconds``), so a real ``gangscale run`` process can be fault-injected. Nodes made under ``never_ready``
carry ``ready-at: inf`` and stay NotReady in every later instance too.

``deadline`` is clock time (seconds since the epoch, like :meth:`Clock.now`); the only simulated time an
obtain spends is ``call_latency``, and a call whose latency would pass its deadline fails with TRANSIENT
``DEADLINE_EXCEEDED`` having done nothing. Time is read only from the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gangscale.clock import Clock
from gangscale.configschema import DEFAULT_PROVISION_SECONDS
from gangscale.kube.errors import ApiError
from gangscale.model.nodepool import POOL_LABEL, NodePool
from gangscale.model.tiers import SPOT
from gangscale.providers.base import (
    TOKEN_LABEL,
    UNIT_LABEL,
    ErrorClass,
    Fence,
    Obtained,
    ProviderError,
    Unit,
    labelled_node,
    labels_suffice,
    same_token,
    unfenced,
)
from gangscale.providers.simfaults import (
    CREATED,
    OBTAIN,
    RELEASE,
    RELEASED,
    REUSED,
    SPOT_NOTICE_SECONDS,
    CallTrace,
    PoolFaults,
    ProviderCall,
    api_error,
    gate,
    http_status,
    lost_response,
    quota_exceeded,
    stockout,
    with_rollback,
)
from gangscale.providers.simnodes import (
    READY_AT_ANNOTATION,
    Kubelet,
    Kubelets,
    KubeRequests,
    NodeAPI,
    ReadyTimers,
    is_ready,
    node_body,
    reclaim_at,
    slot_of,
    unit_node_names,
)
from gangscale.providers.simreclaims import Reclaims
from gangscale.timefmt import parse_rfc3339

__all__ = ["KubeRequests", "PoolFaults", "ProviderCall", "SimulatedProvider"]

JSON = dict[str, Any]
log = logging.getLogger(__name__)

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_LABEL_VALUE_MAX = 63
#: 40 bits of hash per unit id: among 10,000 units of one pool a collision has a chance of ~5e-5 (n²/2⁴¹),
#: and is caught (``NODE_NAME_TAKEN``), never silent.
_UNIT_SUFFIX_HEX = 10
#: The ready-at of nodes that never turn Ready.
NEVER = math.inf


@dataclass
class _Record:
    """What one token obtained: the units it designates and which of their nodes are known to exist."""

    token: str
    pool: str
    #: The count the obtain asked for (what a repeated obtain must ask for again).
    requested: int
    units: list[Unit]
    created: set[str] = field(default_factory=set)
    #: Nodes whose create call failed without saying whether it happened: a rollback must try them too.
    uncertain: set[str] = field(default_factory=set)
    ready_at: dict[str, float] = field(default_factory=dict)
    #: Nodes whose Ready timer was set up (or deliberately not, under ``never_ready``).
    armed: set[str] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        return all(name in self.created for unit in self.units for name in unit.nodes)

    def obtained(self) -> Obtained:
        incomplete = tuple(unit.unit_id for unit in self.units if not set(unit.nodes) <= self.created)
        return Obtained(self.token, self.pool, tuple(self.units), incomplete)


@dataclass(frozen=True, slots=True)
class _PoolSettings:
    stock: int | None
    provision_seconds: float


class SimulatedProvider:
    """A simulated cloud over the Kubernetes API; see the module docstring. Call :meth:`start` first."""

    name = "simulated"
    #: Every node carries gangscale's labels, so it is recognised by them, and its claim is its token.
    node_ref = staticmethod(labelled_node)
    claim = staticmethod(same_token)
    set_reclassify = staticmethod(labels_suffice)

    def __init__(self, http: KubeRequests, pools: Sequence[NodePool], clock: Clock, *,
                 fence: Fence = unfenced, heartbeats: bool = True, reclaims: bool = True) -> None:
        self._clock = clock
        #: The nodes' kubelets renew their Leases and report their status (``simnodes``). Off: they post Ready and
        #: nothing else, for a simulation that runs no node lifecycle controller and would rather not have a timer
        #: every 10 s of simulated time (a real cluster marks such nodes ``Unknown`` within a minute).
        self._heartbeats = heartbeats
        self._pools: dict[str, NodePool] = {}
        for pool in pools:
            if pool.name in self._pools:
                raise ValueError(f"pool {pool.name}: defined twice")
            self._pools[pool.name] = pool
        self._settings = {name: _settings(pool) for name, pool in self._pools.items()}
        self._faults = {name: initial_faults(pool) for name, pool in self._pools.items()}
        self._records: dict[str, _Record] = {}
        self._unit_token: dict[str, str] = {}
        self._nodes = NodeAPI(http, fence)
        self._kubelets = Kubelets(clock, self._nodes, self._heartbeat_stopped)
        self._timers = ReadyTimers(clock, self._kubelets)
        #: Spot reclaims (``simreclaims.Reclaims``). Off: none, not even those an earlier process began (a process that
        #: must write nothing, as ``--dry-run``).
        self._reclaiming = reclaims
        self._reclaims = Reclaims(clock, self._kubelets, self._nodes, self._faults, self._vm_gone)
        self._kubelets.on_change = self._reclaims.wake
        for faults in self._faults.values():
            faults.changed = self._reclaims.wake
        # One mutation at a time per pool, so its stock is never oversold and a token is never worked on twice
        # at once (a token belongs to one pool); pools are independent, as a cloud's would be.
        self._locks = {name: asyncio.Lock() for name in self._pools}
        self._started = False
        self.calls: list[ProviderCall] = []

    # --- knobs and state for tests ------------------------------------------------------------------

    def faults(self, pool: str) -> PoolFaults:
        return self._faults[self._pool(pool).name]

    def available(self, pool: str) -> int | None:
        """Units the pool can still hand out (None: unlimited)."""
        stock = self._settings[self._pool(pool).name].stock
        return None if stock is None else max(0, stock - self._in_use(pool))

    def set_stock(self, pool: str, stock: int | None) -> None:
        """Change how many units the pool holds in all (None: unlimited), as a cloud's capacity changes over
        time. Units already handed out keep counting against the new figure."""
        name = self._pool(pool).name
        self._settings[name] = replace(self._settings[name], stock=stock)

    def set_provision_seconds(self, pool: str, seconds: float) -> None:
        """Change the delay of nodes created from now on (nodes already coming up keep theirs)."""
        name = self._pool(pool).name
        self._settings[name] = replace(self._settings[name], provision_seconds=seconds)

    def in_use(self, pool: str) -> int:
        return self._in_use(self._pool(pool).name)

    @property
    def busy(self) -> bool:
        """A Ready timer is marking nodes now, or kubelets are heartbeating (for harnesses that wait until the
        simulated cluster is quiet)."""
        return self._timers.firing > 0 or self._kubelets.syncing or self._reclaims.busy

    def _heartbeat_stopped(self, kubelet: Kubelet) -> bool:
        faults = self._faults.get(kubelet.pool)
        return faults is not None and kubelet.name in faults.heartbeat_stopped

    # --- NodePoolProvider ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Rebuild the inventory from the Node objects, re-arm the Ready timers of nodes not Ready yet, and start
        the nodes' kubelets' heartbeats."""
        if self._started:
            return
        try:
            nodes = await self._nodes.list(POOL_LABEL)
        except Exception as exc:
            raise api_error("", "listing nodes", exc) from exc
        self._rebuild(nodes)
        if self._heartbeats:
            self._kubelets.start()
        if self._reclaiming:
            self._reclaims.start()
        self._started = True

    async def obtain(self, pool: str, units: int, *, token: str, deadline: float) -> Obtained:
        trace = CallTrace(OBTAIN, pool, units, token, self._clock.now())
        try:
            obtained = await self._obtain(trace, deadline)
        except ProviderError as exc:
            self.calls.append(trace.finish(exc))
            raise
        self.calls.append(trace.finish())
        return obtained

    async def lookup(self, token: str) -> Obtained | None:
        self._require_started()
        record = self._records.get(token)
        return record.obtained() if record is not None else None

    async def release(self, pool: str, unit_ids: Sequence[str], *, token: str) -> None:
        trace = CallTrace(RELEASE, pool, len(unit_ids), token, self._clock.now())
        try:
            await self._release(trace, list(dict.fromkeys(unit_ids)))
        except ProviderError as exc:
            self.calls.append(trace.finish(exc))
            raise
        self.calls.append(trace.finish())

    async def aclose(self) -> None:
        await self._reclaims.aclose()
        await self._timers.aclose()
        await self._kubelets.aclose()

    # --- obtain -------------------------------------------------------------------------------------

    async def _obtain(self, trace: CallTrace, deadline: float) -> Obtained:
        pool = self._pool(trace.pool)
        self._require_started()
        if trace.units < 1:
            raise ProviderError(ErrorClass.PERMANENT, "INVALID_ARGUMENT",
                                f"asked for {trace.units} units; at least 1 is needed", pool=pool.name)
        _check_token(trace.token, pool.name)
        faults = self._faults[pool.name]
        await gate(self._clock, faults, pool.name, deadline)
        async with self._locks[pool.name]:
            record = self._records.get(trace.token)
            if record is not None:
                if record.pool != pool.name or record.requested != trace.units:
                    raise ProviderError(ErrorClass.PERMANENT, "TOKEN_MISMATCH",
                                        f"token {trace.token} already obtained {record.requested} unit(s) of pool "
                                        f"{record.pool}; this call asks for {trace.units} of {pool.name}",
                                        pool=pool.name)
                trace.outcome = REUSED
                if not record.complete:  # an earlier attempt failed half-way and could not clean up
                    trace.outcome = CREATED
                    await self._materialize(pool, record, trace, faults)
            else:
                # No await since the lookup above: the token is claimed before another pool's call can see it.
                record = self._reserve(pool, trace, faults)
                trace.outcome = CREATED
                grant, faults.partial_grant = faults.partial_grant, None
                await self._materialize(pool, record, trace, faults,
                                        grant=None if grant is None else max(0, min(grant, trace.units)))
            trace.unit_ids = tuple(unit.unit_id for unit in record.units)
            if faults.timeouts > 0:
                faults.timeouts -= 1
                raise lost_response(pool.name)
            answer = record.obtained()
            if trace.outcome == CREATED and faults.short_answer is not None:
                keep, faults.short_answer = faults.short_answer, None
                answer = replace(answer, units=answer.units[:keep])
            return answer

    def _reserve(self, pool: NodePool, trace: CallTrace, faults: PoolFaults) -> _Record:
        """Check quota and stock and record the token's units, so that they count before any node exists."""
        if faults.quota:
            raise quota_exceeded(pool.name)
        if faults.stockout:
            raise stockout(pool.name, trace.units, 0, " (simulated stockout)")
        available = self.available(pool.name)
        if available is not None and trace.units > available:
            raise stockout(pool.name, trace.units, available)
        units = [_unit(pool, trace.token, index) for index in range(trace.units)]
        for unit in units:
            owner = self._unit_token.get(unit.unit_id)
            if owner is not None:
                raise ProviderError(ErrorClass.PERMANENT, "NODE_NAME_TAKEN",
                                    f"unit id {unit.unit_id} of token {trace.token} is already held by token {owner}",
                                    pool=pool.name)
        record = _Record(trace.token, pool.name, trace.units, units)
        self._remember(record)
        return record

    async def _materialize(self, pool: NodePool, record: _Record, trace: CallTrace, faults: PoolFaults, *,
                           grant: int | None = None) -> None:
        """Create the record's missing nodes; on failure delete what exists and raise (see ``_rollback``)."""
        settings = self._settings[pool.name]
        try:
            for slot, unit in enumerate(record.units[:grant] if grant is not None else record.units):
                # A unit made under ``never_ready`` says so on its nodes (ready-at: inf): a restarted instance
                # must not bring up a VM that was never going to boot.
                ready_at = record.ready_at.setdefault(
                    unit.unit_id, NEVER if faults.never_ready else self._clock.now() + settings.provision_seconds)
                for name in unit.nodes:
                    if name not in record.created and await self._create_node(pool, record, slot, unit, name):
                        trace.nodes_created += 1
                # Armed once the whole unit exists, including nodes left by an attempt that failed half-way.
                waiting = [name for name in unit.nodes if name not in record.armed]
                record.armed.update(waiting)
                if waiting and ready_at != NEVER and not faults.never_ready:
                    self._timers.arm(unit.unit_id, waiting, ready_at)
            if grant is not None:
                raise stockout(pool.name, record.requested, grant,
                               f" (simulated partial grant: ran out after creating {grant})")
        except Exception as exc:
            error = api_error(pool.name, "creating nodes", exc)
            raise with_rollback(error, await self._rollback(record, trace)) from exc

    async def _create_node(self, pool: NodePool, record: _Record, slot: int, unit: Unit, name: str) -> bool:
        """Create one node; False if it already existed as this unit's node (an earlier attempt made it)."""
        body = node_body(pool, record.token, f"{slot}/{record.requested}", unit.unit_id, name,
                         record.ready_at[unit.unit_id], self._clock.now())
        record.uncertain.add(name)
        try:
            created = await self._nodes.create(body)
        except Exception as exc:
            if http_status(exc) != 409:
                raise
            record.uncertain.discard(name)
            existing = await self._nodes.find(name) or {}
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if labels.get(TOKEN_LABEL) != record.token or labels.get(UNIT_LABEL) != unit.unit_id:
                raise ProviderError(ErrorClass.PERMANENT, "NODE_NAME_TAKEN",
                                    f"node {name} exists and does not belong to unit {unit.unit_id}",
                                    pool=pool.name) from exc
            record.created.add(name)
            if name not in self._kubelets:
                self._kubelets.add(existing, ready=is_ready(existing), reported=self._clock.now())
            return False
        record.uncertain.discard(name)
        record.created.add(name)
        self._kubelets.add(created, ready=False, reported=self._clock.now())
        return True

    async def _rollback(self, record: _Record, trace: CallTrace) -> bool:
        """Delete the record's nodes and forget it; False (and the record kept) if some delete failed."""
        if not self._nodes.fence():
            return False  # not ours to undo any more: the record stays, for the next leader's repeated obtain
        clean = True
        # If some node survives, a retry finishes the record and re-arms every node it then has.
        for unit in record.units:
            self._timers.cancel(unit.unit_id)
        record.armed.clear()
        for unit in record.units:
            for name in unit.nodes:
                if name not in record.created and name not in record.uncertain:
                    continue
                try:
                    trace.nodes_deleted += await self._nodes.delete(name)
                    self._kubelets.remove([name])
                except ProviderError as exc:  # the fence: the lease went while rolling back
                    log.warning("simulated: stopped rolling back token %s: %s", record.token, exc.message)
                    return False
                except Exception as exc:
                    # An API-server error is expected here (the caller retries the rollback); anything else is a bug.
                    log.warning("simulated: could not roll back node %s of token %s: %s", name, record.token, exc,
                                exc_info=not isinstance(exc, ApiError))
                    clean = False
                    continue
                record.created.discard(name)
                record.uncertain.discard(name)
        if clean:
            self._forget(record)
        return clean

    # --- release ------------------------------------------------------------------------------------

    async def _release(self, trace: CallTrace, unit_ids: list[str]) -> None:
        pool = self._pool(trace.pool)
        self._require_started()
        await gate(self._clock, self._faults[pool.name], pool.name, None)
        async with self._locks[pool.name]:
            for unit_id in unit_ids:
                owner = self._records.get(self._unit_token.get(unit_id, ""))
                if owner is not None and owner.pool != pool.name:
                    raise ProviderError(ErrorClass.PERMANENT, "WRONG_POOL",
                                        f"unit {unit_id} belongs to pool {owner.pool}", pool=pool.name)
            trace.outcome, trace.unit_ids = RELEASED, tuple(unit_ids)
            failure: Exception | None = None
            for unit_id in unit_ids:
                try:
                    for name in await self._unit_nodes(pool.name, unit_id):
                        trace.nodes_deleted += await self._nodes.delete(name)
                except Exception as exc:
                    failure = failure or exc
                    continue
                self._drop_unit(unit_id)
            if failure is not None:
                # Units whose nodes are all gone were forgotten; retrying releases the rest.
                raise with_rollback(api_error(pool.name, "deleting nodes", failure), False) from failure

    async def _vm_gone(self, pool: str, name: str) -> None:
        """A reclaimed VM's end: its Node deleted, and the VM off the books as if this process had been restarted
        (see the module docstring). Under the pool's lock, so no obtain or release of the pool sees half of it."""
        async with self._locks[pool]:
            await self._nodes.delete(name)
            self._lose(name)

    def _lose(self, name: str) -> None:
        self._kubelets.remove([name])
        for record in self._records.values():
            if any(name in unit.nodes for unit in record.units):
                # Not created any more, nor armed: a repeated obtain under the token makes it again and arms it.
                record.created.discard(name)
                record.uncertain.discard(name)
                record.armed.discard(name)
                if not record.created and not record.uncertain:
                    self._forget(record)  # nothing of the token exists: it designates nothing (lookup: None)
                return

    async def _unit_nodes(self, pool: str, unit_id: str) -> list[str]:
        """The unit's node names: from the inventory, else (a unit this instance never saw) from the API."""
        record = self._records.get(self._unit_token.get(unit_id, ""))
        if record is not None:
            return [name for unit in record.units if unit.unit_id == unit_id for name in unit.nodes]
        if not _is_label_value(unit_id):
            return []  # no node can carry it as a label
        nodes = await self._nodes.list(f"{POOL_LABEL}={pool},{UNIT_LABEL}={unit_id}")
        return [node["metadata"]["name"] for node in nodes]

    # --- inventory ----------------------------------------------------------------------------------

    def _remember(self, record: _Record) -> None:
        self._records[record.token] = record
        for unit in record.units:
            self._unit_token[unit.unit_id] = record.token

    def _forget(self, record: _Record) -> None:
        for unit in list(record.units):
            self._drop_unit(unit.unit_id)

    def _drop_unit(self, unit_id: str) -> None:
        self._timers.cancel(unit_id)
        token = self._unit_token.pop(unit_id, None)
        record = self._records.get(token or "")
        if record is None:
            return
        for unit in record.units:
            if unit.unit_id == unit_id:
                self._kubelets.remove(unit.nodes)
                record.created.difference_update(unit.nodes)
                record.uncertain.difference_update(unit.nodes)
                record.armed.difference_update(unit.nodes)
        record.units = [unit for unit in record.units if unit.unit_id != unit_id]
        record.ready_at.pop(unit_id, None)
        if not record.units:
            del self._records[record.token]

    def _in_use(self, pool: str) -> int:
        return sum(len(record.units) for record in self._records.values() if record.pool == pool)

    def _rebuild(self, nodes: Iterable[JSON]) -> None:
        found: dict[str, dict[str, dict[str, JSON]]] = {}  # token -> unit id -> node name -> node
        pools: dict[str, str] = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            pool, token, unit_id = labels.get(POOL_LABEL), labels.get(TOKEN_LABEL), labels.get(UNIT_LABEL)
            if pool not in self._pools or not token or not unit_id or meta.get("deletionTimestamp"):
                continue
            if pools.setdefault(token, pool) != pool:
                log.warning("simulated: token %s has nodes in pools %s and %s; keeping %s",
                            token, pools[token], pool, pools[token])
                continue
            found.setdefault(token, {}).setdefault(unit_id, {})[meta["name"]] = node
        for token, units in found.items():
            pool = self._pools[pools[token]]
            record = _rebuilt_record(pool, token, units)
            for unit_id, unit_nodes in units.items():
                record.created.update(unit_nodes)
                record.armed.update(unit_nodes)
                record.ready_at[unit_id] = min(self._ready_at(pool, node) for node in unit_nodes.values())
            self._remember(record)
            for unit_id, unit_nodes in units.items():
                up = record.ready_at[unit_id] <= self._clock.now() and not self._faults[pool.name].never_ready
                for node in unit_nodes.values():
                    self._kubelets.add(node, ready=up or is_ready(node), reported=self._reported(node))
                    gone_at = reclaim_at(node)
                    if gone_at is not None and self._reclaiming:
                        self._reclaims.resume(node["metadata"]["name"], pool.name, gone_at)
            if self._faults[pool.name].never_ready:
                continue
            for unit_id, unit_nodes in units.items():
                # A node under a reclaim's notice is shutting down: nothing will bring it up.
                pending = sorted(name for name, node in unit_nodes.items()
                                 if not is_ready(node) and reclaim_at(node) is None)
                if pending and record.ready_at[unit_id] != NEVER:
                    self._timers.arm(unit_id, pending, record.ready_at[unit_id])

    def _reported(self, node: JSON) -> float:
        """When the node's kubelet last posted its status, as far as the node says (its Ready heartbeat)."""
        conditions = (node.get("status") or {}).get("conditions") or []
        ready: JSON = next((c for c in conditions if c.get("type") == "Ready"), {})
        stamp = parse_rfc3339(ready.get("lastHeartbeatTime"))
        return self._clock.now() if stamp is None else min(stamp, self._clock.now())

    def _ready_at(self, pool: NodePool, node: JSON) -> float:
        meta = node.get("metadata") or {}
        with contextlib.suppress(KeyError, TypeError, ValueError):
            return float((meta.get("annotations") or {})[READY_AT_ANNOTATION])
        created = parse_rfc3339(meta.get("creationTimestamp"))
        if created is None:
            return self._clock.now()
        return created + self._settings[pool.name].provision_seconds

    # --- helpers ------------------------------------------------------------------------------------

    def _pool(self, name: str) -> NodePool:
        pool = self._pools.get(name)
        if pool is None:
            raise ProviderError(ErrorClass.PERMANENT, "UNKNOWN_POOL",
                                f"no simulated pool named {name!r} (known: {', '.join(sorted(self._pools))})",
                                pool=name)
        return pool

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("SimulatedProvider.start() must be awaited before the first call")


def unit_id_for(pool: NodePool, token: str, index: int) -> str:
    """The id of unit ``index`` of the obtain under ``token``: the same in every process, for every restart."""
    # Long pool names are cut so that the unit id (a label) and the node names (the hostname label, which has the
    # same 63-character limit) stay valid label values.
    room = _LABEL_VALUE_MAX - len(f"-{pool.nodes_per_unit - 1}") - _UNIT_SUFFIX_HEX - 1
    prefix = pool.name[:room].rstrip("-_.")
    digest = hashlib.sha256(f"{token}/{index}".encode()).hexdigest()[:_UNIT_SUFFIX_HEX]
    return f"{prefix}-{digest}"


def _unit(pool: NodePool, token: str, index: int) -> Unit:
    unit_id = unit_id_for(pool, token, index)
    return Unit(unit_id, tuple(f"{unit_id}-{i}" for i in range(pool.nodes_per_unit)))


def _rebuilt_record(pool: NodePool, token: str, found: dict[str, dict[str, JSON]]) -> _Record:
    """The whole intent of ``token`` from those of its nodes that exist (unit id -> node name -> node): every unit
    its count says the obtain asked for, under the ids the token fixes.

    Units under other ids were made by a version that drew ids at random: their intent cannot be rebuilt, so
    only what exists is known, and a repeated obtain returns fewer units than asked for; the controller treats
    such a short result as a failed step and releases it.
    """
    slots = {unit_id: slot_of(next(iter(nodes.values()))) for unit_id, nodes in found.items()}
    requested = max([len(found)] + [count for _, count in slots.values()])
    derived = [_unit(pool, token, index) for index in range(requested)]
    if set(found) <= {unit.unit_id for unit in derived}:
        return _Record(token, pool.name, requested, derived)
    ordered = sorted(found, key=lambda unit_id: (slots[unit_id][0], unit_id))
    return _Record(token, pool.name, requested, [
        Unit(unit_id, unit_node_names(unit_id, pool.nodes_per_unit, found[unit_id])) for unit_id in ordered])


def _settings(pool: NodePool) -> _PoolSettings:
    raw = pool.provider.get("simulated") or {}
    stock = raw.get("stock")
    provision = raw.get("provisionSeconds", DEFAULT_PROVISION_SECONDS)
    if provision is None:
        provision = DEFAULT_PROVISION_SECONDS
    if stock is not None and (isinstance(stock, bool) or not isinstance(stock, int) or stock < 0):
        raise ValueError(f"pool {pool.name}: simulated.stock must be a non-negative integer, got {stock!r}")
    if isinstance(provision, bool) or not isinstance(provision, int | float) or provision < 0:
        raise ValueError(f"pool {pool.name}: simulated.provisionSeconds must be a non-negative number, "
                         f"got {provision!r}")
    return _PoolSettings(stock, float(provision))


def initial_faults(pool: NodePool) -> PoolFaults:
    """The fault knobs the pool file's ``simulated:`` section sets (all off by default): a real process's cloud can
    be made to misbehave from its configuration (``gangscale.configschema.SimulatedSpec``)."""
    raw = pool.provider.get("simulated") or {}
    faults = PoolFaults(stockout=bool(raw.get("stockout", False)), quota=bool(raw.get("quota", False)),
                        partial_grant=raw.get("partialGrant"), never_ready=bool(raw.get("neverReady", False)),
                        timeouts=int(raw.get("lostResponses") or 0),
                        transient_errors=int(raw.get("transientErrors") or 0),
                        call_latency=float(raw.get("latencySeconds") or 0.0))
    for name, value in (("partialGrant", faults.partial_grant), ("lostResponses", faults.timeouts),
                        ("transientErrors", faults.transient_errors), ("latencySeconds", faults.call_latency)):
        if value is not None and value < 0:
            raise ValueError(f"pool {pool.name}: simulated.{name} must not be negative, got {value!r}")
    _reclaim_knobs(pool, raw.get("reclaim"), faults)
    return faults


def _reclaim_knobs(pool: NodePool, raw: Any, faults: PoolFaults) -> None:
    """``reclaim: {perNodeHour, noticeSeconds, seed}`` (``gangscale.configschema.ReclaimSpec``), on spot pools only:
    reclaim is what spot means (the pool file's check; repeated here for pools built in code)."""
    faults.spot = pool.capacity_type == SPOT
    if raw is None:
        return
    if not faults.spot:
        raise ValueError(f"pool {pool.name}: simulated.reclaim is for a pool of capacityType spot; this one is "
                         f"{pool.capacity_type}")
    rate, notice = raw.get("perNodeHour", 0.0), raw.get("noticeSeconds", SPOT_NOTICE_SECONDS)
    for name, value in (("perNodeHour", rate), ("noticeSeconds", notice)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"pool {pool.name}: simulated.reclaim.{name} must be a non-negative number, "
                             f"got {value!r}")
    faults.reclaim_per_node_hour, faults.reclaim_notice_seconds = float(rate), float(notice)
    faults.reclaim_seed = int(raw.get("seed") or 0)


def _is_label_value(value: str) -> bool:
    return len(value) <= _LABEL_VALUE_MAX and _LABEL_VALUE.match(value) is not None


def _check_token(token: str, pool: str) -> None:
    # The token is stored as a node label: that is how a restarted provider finds what it obtained.
    if not token or not _is_label_value(token):
        raise ProviderError(ErrorClass.PERMANENT, "INVALID_TOKEN",
                            f"token {token!r} must be a non-empty label value (at most 63 alphanumerics, "
                            "'-', '_' or '.', starting and ending with an alphanumeric)", pool=pool)
