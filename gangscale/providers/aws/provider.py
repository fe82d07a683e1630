"""The ``aws`` node-pool provider: EC2 instances for EKS node pools, obtained all or nothing (see the package).

Every unit is one instance; its id is the unit id and its private DNS name the node name. The provider keeps no
state a restart needs: the token is the fleet's ``ClientToken`` and a tag of every instance, so ``lookup`` and a
repeated ``obtain`` answer from ``DescribeInstances``; the node-name map (:mod:`.nodes`) is rebuilt at start.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from gangscale.clock import Clock
from gangscale.model.nodepool import POOL_LABEL, ZONE_LABEL, NodePool
from gangscale.providers.aws.checks import Checks
from gangscale.providers.aws.client import FILTER_BATCH, Ec2
from gangscale.providers.aws.errors import from_exception, from_fleet_errors, from_state_reason, is_aws_failure
from gangscale.providers.aws.fleet import (
    CLUSTER_TAG,
    MAX_UNITS,
    POOL_TAG,
    TOKEN_TAG,
    create_fleet,
    fleet_answer,
    tag_values,
)
from gangscale.providers.aws.nodes import GONE, NodeNames
from gangscale.providers.aws.pools import EKS_NODEGROUP_LABEL, AwsPool, aws_pools
from gangscale.providers.base import ErrorClass, Fence, NodeRef, Obtained, ProviderError, Unit, unfenced

log = logging.getLogger(__name__)
JSON = dict[str, Any]
#: TerminateInstances takes at most 1000 ids a call (EC2 API reference: "up to 1000 instance IDs").
TERMINATE_BATCH = 1000
LIVE = frozenset({"pending", "running"})


@contextlib.contextmanager
def classified(pool: str, *, rolled_back: bool = True) -> Iterator[None]:
    """EC2 failures inside the block raised as :class:`ProviderError` (:func:`.errors.from_exception`)."""
    try:
        yield
    except ProviderError as exc:
        if exc.pool:
            raise
        # The client's fence refusal (not_leader) knows no pool: it is this one's.
        raise ProviderError(exc.error_class, exc.code, exc.message, pool=pool, retry_after=exc.retry_after,
                            rolled_back=exc.rolled_back, available=exc.available) from exc
    except Exception as exc:
        if not is_aws_failure(exc):
            raise
        raise from_exception(exc, pool, rolled_back=rolled_back) from exc


def _state(instance: Mapping[str, Any]) -> str:
    return str((instance.get("State") or {}).get("Name") or "")


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


class AwsProvider:
    name = "aws"

    def __init__(self, pools: Sequence[NodePool], clock: Clock, *, fence: Fence = unfenced,
                 user_agent: str = "gangscale", endpoint_url: str | None = None, max_attempts: int = 3,
                 credentials: tuple[str, str] | None = None, poll_interval: float = 2.0) -> None:
        self.clock = clock
        self.poll_interval = poll_interval
        self.pools = aws_pools({pool.name: pool for pool in pools})
        missing = sorted(pool.name for pool in pools if pool.name not in self.pools)
        if missing:
            raise ValueError(f"the aws provider needs an aws: block on every pool; missing on {', '.join(missing)}")
        self.clients = {region: Ec2(region, endpoint_url=endpoint_url, fence=fence, user_agent=user_agent,
                                    max_attempts=max_attempts, credentials=credentials)
                        for region in sorted({ap.region for ap in self.pools.values()})}
        self.names = NodeNames(clock, self._describe_names)
        self.checks = Checks()
        #: (identifying label, its value, zone) -> pool.
        self._by_label = {(*ap.identifying_label, ap.zone): ap for ap in self.pools.values()}

    @property
    def calls(self) -> list[str]:
        """Every EC2 call made, by operation name (all regions)."""
        return [call for ec2 in self.clients.values() for call in ec2.calls]

    def set_reclassify(self, callback: Callable[[Collection[str]], None]) -> None:
        """``callback(names)`` is called with node names that a background read found to be units of ours, after
        :meth:`node_ref` had answered them without a unit (see :mod:`.nodes`)."""
        self.names.set_reclassify(callback)

    # -- NodePoolProvider -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        for ec2 in self.clients.values():
            await ec2.start()
        for ap in self.pools.values():
            with classified(ap.name, rolled_back=False):
                await self.checks.pool(self.clients[ap.region], ap)
        for region, cluster in sorted({(ap.region, ap.cluster) for ap in self.pools.values()}):
            with classified("?", rolled_back=False):
                found = await self.clients[region].describe_instances([{"Name": f"tag:{CLUSTER_TAG}",
                                                                        "Values": [cluster]}])
            self.names.record(found)
        self.names.start()

    async def obtain(self, pool: str, units: int, *, token: str, deadline: float) -> Obtained:
        ap = self._pool(pool)
        if not 1 <= units <= MAX_UNITS:
            raise ProviderError(ErrorClass.PERMANENT, "InvalidParameterValue",
                                f"asked for {units} units; a fleet takes 1 to {MAX_UNITS}", pool=pool)
        ec2 = self.clients[ap.region]
        # A repeat (a lost answer, a restart): the token's instances, if EC2 has them, are the answer.
        with classified(pool, rolled_back=False):
            earlier = await self._of_token(ec2, token)
        mine = sorted(str(i.get("InstanceId")) for i in earlier if tag_values(i).get(POOL_TAG) == pool)
        if mine:
            if len(mine) != units:
                await self._roll_back(ap, ec2, mine)
                raise ProviderError(ErrorClass.STOCKOUT, "IncompleteFleet", f"token {token} has {len(mine)} of the "
                                    f"{units} instances asked for; they were terminated", pool=pool,
                                    available=len(mine))
            return await self._settle(ap, ec2, token, mine, deadline)
        with classified(pool):
            answer = fleet_answer(await ec2.call("CreateFleet", **create_fleet(ap, units, token)))
        ids = list(answer.instance_ids)
        if len(ids) != units:
            if ids:
                await self._roll_back(ap, ec2, ids)
            if len(ids) > units:
                raise ProviderError(ErrorClass.PERMANENT, "UnexpectedFleetAnswer", f"the fleet launched {len(ids)} "
                                    f"instances for {units} asked; they were terminated", pool=pool)
            error = from_fleet_errors(answer.errors, pool)
            if ids:
                log.warning("%s: the fleet of token %s launched %d of %d instances (%s); terminated them", pool, token,
                            len(ids), units, error.message)
                raise ProviderError(ErrorClass.STOCKOUT if error.error_class is ErrorClass.PERMANENT
                                    else error.error_class, error.code, error.message, pool=pool,
                                    available=len(ids))
            raise error
        return await self._settle(ap, ec2, token, ids, deadline)

    async def _settle(self, ap: AwsPool, ec2: Ec2, token: str, ids: list[str], deadline: float) -> Obtained:
        """The instances' node names, read until every instance has one (by ``deadline``): an instance that ended
        at launch rolls the obtain back; names still missing at the deadline leave it to be repeated."""
        while True:
            with classified(ap.name, rolled_back=False):
                found = await self._by_ids(ec2, ids)
            self.names.record(found)
            by_id = {str(i.get("InstanceId")): i for i in found}
            gone = [i for i in found if _state(i) in GONE]
            if gone:
                await self._roll_back(ap, ec2, ids)
                raise from_state_reason(str(gone[0].get("InstanceId")), gone[0].get("StateReason") or {}, ap.name)
            names = {i: str(by_id.get(i, {}).get("PrivateDnsName") or "") for i in ids}
            if all(names.values()):
                return Obtained(token, ap.name, tuple(Unit(i, (names[i],)) for i in ids))
            if self.clock.now() >= deadline:
                raise ProviderError(ErrorClass.TRANSIENT, "InstancesNotDescribed",
                                    f"{sum(1 for n in names.values() if not n)} of {len(ids)} instances of token "
                                    f"{token} have no private DNS name yet", pool=ap.name, rolled_back=False)
            await self.clock.sleep_until(min(deadline, self.clock.now() + self.poll_interval))

    async def lookup(self, token: str) -> Obtained | None:
        found: list[JSON] = []
        for ec2 in self.clients.values():
            with classified("?", rolled_back=False):
                found += await self._of_token(ec2, token)
        self.names.record(found)
        found = [i for i in found if tag_values(i).get(POOL_TAG) in self.pools]
        if not found or all(_state(i) in GONE for i in found):
            return None
        found.sort(key=lambda i: str(i.get("InstanceId")))
        units, incomplete = [], []
        for instance in found:
            instance_id, name = str(instance.get("InstanceId")), str(instance.get("PrivateDnsName") or "")
            units.append(Unit(instance_id, (name,) if name else ()))
            if _state(instance) not in LIVE or not name:
                incomplete.append(instance_id)
        return Obtained(token, tag_values(found[0])[POOL_TAG], tuple(units), tuple(incomplete))

    async def release(self, pool: str, unit_ids: Sequence[str], *, token: str) -> None:
        ap = self._pool(pool)
        ec2 = self.clients[ap.region]
        ids = sorted(set(unit_ids))
        with classified(pool, rolled_back=False):
            found = await self._by_ids(ec2, ids)
        ours = [i for i in found if tag_values(i).get(POOL_TAG) == pool]
        foreign = sorted(set(ids) - {str(i.get("InstanceId")) for i in ours})
        if foreign:
            # Gone long enough for EC2 to have forgotten them, or not of this pool: nothing of ours to terminate.
            log.info("%s: release %s: no instance of the pool has id %s", pool, token, ", ".join(foreign[:10]))
        await self._terminate(ap, ec2, [str(i.get("InstanceId")) for i in ours if _state(i) != "terminated"])

    async def aclose(self) -> None:
        await self.names.aclose()
        for ec2 in self.clients.values():
            await ec2.aclose()

    def node_ref(self, name: str, labels: Mapping[str, str]) -> NodeRef | None:
        zone = labels.get(ZONE_LABEL, "")
        ap = next((found for key in (EKS_NODEGROUP_LABEL, POOL_LABEL)
                   if (found := self._by_label.get((key, labels.get(key, ""), zone))) is not None), None)
        if ap is None:
            pool = labels.get(POOL_LABEL)
            return NodeRef(pool) if pool else None
        known = self.names.ref(name, ap.region)
        if known is None or known.token is None:
            return NodeRef(ap.name)
        return NodeRef(ap.name, known.instance_id, known.token)

    def claim(self, token: str) -> str:
        return token

    # -- EC2 --------------------------------------------------------------------------------------------------------

    async def _of_token(self, ec2: Ec2, token: str) -> list[JSON]:
        return await ec2.describe_instances([{"Name": f"tag:{TOKEN_TAG}", "Values": [token]}])

    async def _by_ids(self, ec2: Ec2, ids: Sequence[str]) -> list[JSON]:
        found: list[JSON] = []
        for batch in _chunks(ids, FILTER_BATCH):
            found += await ec2.describe_instances([{"Name": "instance-id", "Values": batch}])
        return found

    async def _describe_names(self, region: str, names: Sequence[str]) -> list[JSON]:
        return await self.clients[region].describe_instances([{"Name": "private-dns-name", "Values": list(names)}])

    async def _roll_back(self, ap: AwsPool, ec2: Ec2, ids: Sequence[str]) -> None:
        """Terminate what an obtain launched; a failure leaves it to a repeat (TRANSIENT, outcome unknown)."""
        await self._terminate(ap, ec2, ids)

    async def _terminate(self, ap: AwsPool, ec2: Ec2, ids: Sequence[str]) -> None:
        """``TerminateInstances`` of ``ids`` (idempotent: a terminated instance stays terminated); an id EC2 no
        longer knows fails its whole batch with ``InvalidInstanceID.NotFound``, so that batch is sent id by id."""
        from botocore.exceptions import ClientError  # noqa: PLC0415

        with classified(ap.name, rolled_back=False):
            for batch in _chunks(sorted(ids), TERMINATE_BATCH):
                try:
                    await ec2.call("TerminateInstances", InstanceIds=batch)
                except ClientError as exc:
                    if (exc.response.get("Error") or {}).get("Code") != "InvalidInstanceID.NotFound":
                        raise
                    for instance_id in batch:
                        with contextlib.suppress(ClientError):
                            await ec2.call("TerminateInstances", InstanceIds=[instance_id])
        self.names.forget(set(ids))

    def _pool(self, pool: str) -> AwsPool:
        ap = self.pools.get(pool)
        if ap is None:
            raise ProviderError(ErrorClass.PERMANENT, "UNKNOWN_POOL", f"no aws pool named {pool}", pool=pool)
        return ap
