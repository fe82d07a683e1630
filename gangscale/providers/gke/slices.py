"""``slice`` mode: one GKE node pool per unit (a multi-host TPU slice: GKE makes a pool's slice whole or not at all).

Obtaining ``n`` units creates the node pools ``gs-<claim>-0`` … ``-<n-1>`` one after the other (GKE runs one
operation at a time on a cluster; a refusal because it is busy is waited out), each with
``initialNodeCount`` = hosts per slice, ``placementPolicy {type: COMPACT, tpuTopology}`` for a TPU topology,
the pool's zone as its only location, and ``config.labels`` carrying the gangscale pool, the unit, the token
and the slot (GKE copies them onto the nodes). Each create's operation is polled to ``DONE``; the pool must then
be ``RUNNING``, and its nodes are the instances of its managed instance groups (instance name = node name).

All or nothing across slices is gangscale's job: if any slice fails (a stockout, a quota error, an operation
not done by the deadline), every pool of the token is deleted — including the failed one, which GKE may leave
behind in ``ERROR`` — and the error says whether that cleanup finished (``rolled_back``). A transient error
(throttling, a dropped connection) leaves things as they are: the caller repeats the obtain with the same token,
a create that had been applied answers 409, and the pool is adopted (its token label checked) and its operation
found again with ``operations.list``. ``lookup`` answers from the node pools' labels alone, so it works after a
restart.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gangscale.clock import Clock
from gangscale.model.nodepool import POOL_LABEL
from gangscale.providers.base import TOKEN_LABEL, UNIT_LABEL, ErrorClass, Obtained, ProviderError, Unit
from gangscale.providers.gke import names
from gangscale.providers.gke.calls import timed_out, while_busy, with_rollback
from gangscale.providers.gke.client import GcpError, GcpHttp
from gangscale.providers.gke.errors import from_http, from_pool, from_text
from gangscale.providers.gke.operations import OperationTimeout, Waiter, compute_path, operation_error
from gangscale.providers.gke.pools import GkePool

JSON = dict[str, Any]
log = logging.getLogger(__name__)
#: How long a rollback or release may take, beyond the obtain's deadline (deleting a pool takes minutes).
CLEANUP_SECONDS = 1800.0
#: NodeConfig fields of the template that a slice does not take from it: its own shape, labels and taints, and what
#: GKE fills in itself (``effectiveCgroupMode`` is output only).
NOT_COPIED = frozenset({"machineType", "labels", "taints", "accelerators", "reservationAffinity",
                        "effectiveCgroupMode"})


class Slices:
    def __init__(self, http: GcpHttp, waiter: Waiter, clock: Clock) -> None:
        self.http, self.waiter, self.clock = http, waiter, clock
        #: Each pool's template node pool (``gke.nodePool`` in slice mode), as GKE answered it.
        self.templates: dict[str, JSON] = {}
        #: Each cluster's release channel (``Cluster.releaseChannel.channel``; "" when it is in none).
        self.channels: dict[tuple[str, str, str], str] = {}

    # -- obtain -----------------------------------------------------------------------------------------------------

    async def obtain(self, gp: GkePool, units: int, token: str, deadline: float) -> Obtained:
        unit_names = [names.unit_name(token, i) for i in range(units)]
        try:
            await self.sweep(gp, keep=unit_names)
            running = [await self._ensure(gp, name, self._body(gp, token, index, units), token, deadline)
                       for index, name in enumerate(unit_names)]
            made = [await self._unit(gp, pool) for pool in running]
        except ProviderError as exc:
            if exc.error_class is ErrorClass.TRANSIENT:
                raise  # outcome unknown: the caller repeats the obtain with the same token
            log.warning("gke: a slice of %s (token %s) failed (%s); deleting every slice of the token", gp.name,
                        token, exc.message)
            try:
                rolled_back = await self._delete_all(gp, await self._ours(gp, unit_names, token),
                                                     deadline + CLEANUP_SECONDS)
            except GcpError as listing:
                log.warning("gke: cannot list the node pools of %s to roll back: %s", gp.cluster, listing)
                rolled_back = False
            raise with_rollback(exc, rolled_back) from exc
        return Obtained(token, gp.name, tuple(made))

    async def _ours(self, gp: GkePool, pools: Sequence[str], token: str) -> list[str]:
        """Those of ``pools`` that exist and were made for ``token`` (a pool of the name made by anybody else,
        which failed the create, is not ours to delete)."""
        listed = await self.http.container("GET", f"{gp.cluster_path}/nodePools")
        labels = {str(p.get("name")): ((p.get("config") or {}).get("labels") or {})
                  for p in listed.get("nodePools") or []}
        return [name for name in pools if labels.get(name, {}).get(TOKEN_LABEL) == token]

    def _body(self, gp: GkePool, token: str, index: int, count: int) -> JSON:
        template = self.templates.get(gp.name, {})
        config = {key: value for key, value in (template.get("config") or {}).items() if key not in NOT_COPIED}
        labels = {**(config.get("labels") or {}), **gp.node_labels(),
                  POOL_LABEL: gp.name, UNIT_LABEL: names.unit_name(token, index), TOKEN_LABEL: token,
                  names.SLOT_LABEL: names.slot(index, count)}
        config.update({"machineType": gp.pool.machine_type, "labels": labels, "taints": gp.node_taints()})
        body: JSON = {"name": names.unit_name(token, index), "initialNodeCount": gp.pool.nodes_per_unit,
                      "locations": [gp.zone], "config": config,
                      "management": management(template.get("management"), self.channels.get(gp.cluster_key, ""))}
        if template.get("upgradeSettings"):
            body["upgradeSettings"] = template["upgradeSettings"]
        if gp.pool.tpu_topology:
            body["placementPolicy"] = {"type": "COMPACT", "tpuTopology": gp.pool.tpu_topology}
        return body

    async def _ensure(self, gp: GkePool, name: str, body: JSON, token: str, deadline: float) -> JSON:
        """Create the slice's node pool (or adopt it, made by an earlier try), wait until it runs, return it."""
        try:
            op: JSON | None = await while_busy(
                lambda: self.http.container("POST", f"{gp.cluster_path}/nodePools", body={"nodePool": body}),
                self.clock, deadline, gp.name)
        except GcpError as exc:
            if not exc.conflict:
                raise from_http(exc, gp.name, rolled_back=False) from exc
            op = await self._adopt(gp, name, token)
        try:
            if op is not None:
                op = await self.waiter.container(gp.operations_path, op, deadline)
                failure = operation_error(op)
                if failure:
                    raise from_text(failure, gp.name)
            pool = await self._wait_pool(gp, name, deadline)
        except OperationTimeout as exc:
            raise timed_out(gp.name, f"node pool {name}") from exc
        except GcpError as exc:
            raise from_http(exc, gp.name, rolled_back=False) from exc
        if pool.get("status") != "RUNNING":
            raise from_pool(pool, gp.name)
        return pool

    async def _adopt(self, gp: GkePool, name: str, token: str) -> JSON | None:
        """A pool of this name exists: ours (an earlier try of this token) is adopted, with its running create."""
        pool = await self._get(gp, name)
        labels = (pool.get("config") or {}).get("labels") or {}
        if labels.get(TOKEN_LABEL) != token:
            raise ProviderError(ErrorClass.PERMANENT, "NODE_POOL_NAME_TAKEN",
                                f"node pool {name} exists and was not made for token {token}", pool=gp.name,
                                rolled_back=False)
        if pool.get("status") == "STOPPING":
            # Being deleted (a sweep, or a rollback of an earlier try): made again once it is gone.
            raise ProviderError(ErrorClass.TRANSIENT, "NODE_POOL_STOPPING", f"node pool {name} is being deleted; "
                                "it is made again once it is gone", pool=gp.name, rolled_back=False)
        ops = await self.http.container("GET", gp.operations_path)
        running = [op for op in ops.get("operations") or [] if op.get("status") != "DONE"
                   and op.get("operationType") == "CREATE_NODE_POOL"
                   and str(op.get("targetLink", "")).endswith(f"/nodePools/{name}")]
        return running[-1] if running else None

    async def sweep(self, gp: GkePool, keep: Sequence[str] = ()) -> None:
        """Delete the node pools gangscale made in this pool's cluster that GKE left in ``ERROR`` (a slice that could
        not be made: it has no VM and never will), but ``keep``. Such a pool is undone by the obtain that made it;
        this catches the one whose obtain ended with its process and whose request is gone, which no Node reveals
        (found by ``hack/chaos.py --provider gke``, seed 9039). Its delete is started, not waited for."""
        listed = await self.http.container("GET", f"{gp.cluster_path}/nodePools")
        for pool in listed.get("nodePools") or []:
            name = str(pool.get("name"))
            labels = (pool.get("config") or {}).get("labels") or {}
            if pool.get("status") != "ERROR" or not labels.get(TOKEN_LABEL) or name in keep \
                    or names.claim_of(name) is None:
                continue
            log.info("gke: deleting node pool %s: GKE left it in ERROR and no scale-up holds it", name)
            try:
                await self.http.container("DELETE", f"{gp.cluster_path}/nodePools/{name}")
            except GcpError as exc:
                log.info("gke: deleting node pool %s: %s (tried again later)", name, exc)

    async def _wait_pool(self, gp: GkePool, name: str, deadline: float) -> JSON:
        """The pool once it is no longer being made (its operation is DONE, or was not found)."""
        pool = await self._get(gp, name)
        polls = self.waiter.schedule()
        while pool.get("status") in ("PROVISIONING", "RECONCILING"):
            await polls.pause(deadline, {"name": f"node pool {name}"})
            pool = await self._get(gp, name)
        return pool

    async def _get(self, gp: GkePool, name: str) -> JSON:
        return await self.http.container("GET", f"{gp.cluster_path}/nodePools/{name}")

    async def _unit(self, gp: GkePool, pool: JSON) -> Unit:
        """The slice as a unit: its node pool's name, and its nodes (the instances of its instance groups)."""
        nodes: list[str] = []
        for url in pool.get("instanceGroupUrls") or []:
            found = await self.http.compute("POST", compute_path(str(url)) + "/listManagedInstances")
            nodes.extend(str(mi.get("name") or str(mi.get("instance", "")).rsplit("/", 1)[-1])
                         for mi in found.get("managedInstances") or [])
        return Unit(str(pool["name"]), tuple(sorted(nodes)))

    # -- lookup and release -----------------------------------------------------------------------------------------

    async def lookup(self, clusters: Mapping[tuple[str, str, str], GkePool], token: str) -> Obtained | None:
        """Every slice of ``token``, from the node pools of the clusters its pools live in."""
        for gp in clusters.values():
            listed = await self.http.container("GET", f"{gp.cluster_path}/nodePools")
            mine = {str(p["name"]): p for p in listed.get("nodePools") or []
                    if ((p.get("config") or {}).get("labels") or {}).get(TOKEN_LABEL) == token}
            if mine:
                return await self._found(gp, mine, token)
        return None

    async def _found(self, any_gp: GkePool, mine: Mapping[str, JSON], token: str) -> Obtained:
        labels = (next(iter(mine.values())).get("config") or {}).get("labels") or {}
        pool_name = str(labels.get(POOL_LABEL, any_gp.name))
        count = max((slot[1] for p in mine.values()
                     if (slot := names.parse_slot(str(((p.get("config") or {}).get("labels") or {})
                                                      .get(names.SLOT_LABEL, "")))) is not None), default=len(mine))
        units, incomplete = [], []
        for index in range(count):
            name = names.unit_name(token, index)
            pool = mine.get(name)
            if pool is None or pool.get("status") != "RUNNING":
                units.append(Unit(name, ()))
                incomplete.append(name)
                continue
            units.append(await self._unit(any_gp, pool))
        return Obtained(token, pool_name, tuple(units), tuple(incomplete))

    async def release(self, gp: GkePool, unit_ids: Sequence[str], token: str) -> None:
        if not await self._delete_all(gp, list(unit_ids), self.clock.now() + CLEANUP_SECONDS):
            raise ProviderError(ErrorClass.TRANSIENT, "DELETE_INCOMPLETE",
                                f"not every node pool of {', '.join(unit_ids)} could be deleted", pool=gp.name)

    async def _delete_all(self, gp: GkePool, pools: Sequence[str], deadline: float) -> bool:
        """Delete these node pools (one that is gone counts as deleted) and wait until they are; True if all are."""
        ok = True
        for name in pools:
            path = f"{gp.cluster_path}/nodePools/{name}"
            try:
                op = await while_busy(functools.partial(self.http.container, "DELETE", path), self.clock, deadline,
                                      gp.name)
                op = await self.waiter.container(gp.operations_path, op, deadline)
                if (failure := operation_error(op)) is not None:
                    log.warning("gke: deleting node pool %s failed: %s", name, failure)
                    ok = False
            except GcpError as exc:
                if not exc.not_found:
                    log.warning("gke: could not delete node pool %s: %s", name, exc)
                    ok = False
            except (ProviderError, OperationTimeout) as exc:
                log.warning("gke: could not delete node pool %s: %s", name, exc)
                ok = False
        return ok


def management(template: JSON | None, channel: str) -> JSON:
    """A slice's ``management``: the template pool's auto-repair and auto-upgrade (GKE's defaults, both on, without
    a template), auto-upgrade on when the cluster is enrolled in a release channel: GKE refuses a node pool with it
    off in such a cluster (``ReleaseChannel``: "Node auto-upgrade defaults to true and cannot be disabled", container
    v1 discovery document; the refusal's text: ``research/cloud-providers.md`` §1.9), and new clusters are enrolled
    in REGULAR by default (``Cluster.releaseChannel``). Only the two settable fields are copied."""
    found = template or {}
    out = {"autoRepair": bool(found.get("autoRepair", True)), "autoUpgrade": bool(found.get("autoUpgrade", True))}
    if channel and channel != "UNSPECIFIED":
        out["autoUpgrade"] = True
    return out
