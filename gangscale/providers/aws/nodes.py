"""Which EC2 instance, and which token, a Node of an ``aws`` pool is: by its name, the instance's private DNS name.

An EKS node carries only its launch template's labels (and EKS's, and the cloud's), never one per instance, so the
provider recognises the units it made by name: every ``DescribeInstances`` answer it gets (at start, after an obtain,
in a lookup) records private DNS name -> (instance id, ``gangscale.io/token`` tag). A node of a managed pool whose
name is not recorded (one made while another replica led, or before a restart whose start-up read missed it) is
asked about in the background: its name is queued, a guarded task asks ``DescribeInstances`` with the filter
``private-dns-name`` for queued names in batches (a read: no lease needed), records the answer and calls the
controller's callback (``set_reclassify``) with the names that turned out to be units of ours, so it classifies
those nodes again. An answer "an instance that is not ours" is kept for good (tags are set at launch); "no instance
has this name" is kept for ``absent_ttl`` seconds (bounded in number) and then asked again.

Private IP addresses, hence names, are reused: when an instance of ours is released, or seen shutting down or
terminated, its name is kept marked gone for ``gone_ttl`` seconds (its Node is still there meanwhile, a unit of ours
being released) and then asked about again; and a name recorded for one instance and then seen for another (an
address reused) is told to the controller like a name newly found.

EKS names a node by its instance's private DNS name, ``ip-…`` or, in a subnet with resource-based naming, the
instance id form (``i-09e0ab41a603abb0d.us-east-2.compute.internal``, as aws-ia/terraform-aws-eks-blueprints#1455
shows ``kubectl get nodes``); the AWS cloud provider supports both (kubernetes/cloud-provider-aws#286).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gangscale.aio import cancel_and_wait
from gangscale.clock import Clock, detached_context
from gangscale.providers.aws.fleet import POOL_TAG, TOKEN_TAG, tag_values
from gangscale.retry import PROVIDER_CALL, Backoff

log = logging.getLogger(__name__)
JSON = dict[str, Any]
#: Asks EC2 for the instances of these private DNS names in one region.
Describe = Callable[[str, Sequence[str]], Awaitable[list[JSON]]]
Reclassify = Callable[[Collection[str]], None]
GONE = frozenset({"shutting-down", "terminated"})


@dataclass(frozen=True, slots=True)
class Known:
    instance_id: str
    #: The token that launched it; None for an instance gangscale did not launch.
    token: str | None
    pool: str | None
    #: When it was seen shutting down or terminated, or released (clock time); None while it lives.
    gone: float | None = None


class NodeNames:
    def __init__(self, clock: Clock, describe: Describe, *, batch: int = 100, absent_ttl: float = 60.0,
                 absent_max: int = 10_000, gone_ttl: float = 120.0) -> None:
        self.clock = clock
        self.describe = describe
        self.batch = batch
        self.absent_ttl = absent_ttl
        self.absent_max = absent_max
        self.gone_ttl = gone_ttl
        self.known: dict[str, Known] = {}
        self._absent: OrderedDict[str, float] = OrderedDict()
        #: Names to ask about, with the region to ask in (insertion order: first asked, first answered).
        self._pending: dict[str, str] = {}
        #: Names answered "not known" by :meth:`ref`: the callback hears of them once they turn out ours.
        self._unresolved: set[str] = set()
        self._reclassify: Reclassify | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def set_reclassify(self, callback: Reclassify) -> None:
        self._reclassify = callback

    def ref(self, name: str, region: str) -> Known | None:
        """What is recorded of ``name``; None when nothing is (then it is asked about in the background, unless
        EC2 said recently that no instance has it)."""
        known = self.known.get(name)
        if known is not None and (known.gone is None or self.clock.now() < known.gone + self.gone_ttl):
            return known
        if known is not None:
            del self.known[name]  # gone long enough: a Node of this name now is another instance's
        when = self._absent.get(name)
        if when is not None and self.clock.now() < when + self.absent_ttl:
            return None
        self._unresolved.add(name)
        if name not in self._pending:
            self._pending[name] = region
            self._wake.set()
        return None

    def record(self, instances: Iterable[Mapping[str, Any]]) -> None:
        """Instances as ``DescribeInstances`` describes them: names of live ones recorded, of gone ones of ours
        forgotten; the callback hears of names that became units of ours."""
        changed = []
        for instance in instances:
            name, instance_id = str(instance.get("PrivateDnsName") or ""), str(instance.get("InstanceId") or "")
            state = str((instance.get("State") or {}).get("Name") or "")
            if state in GONE:
                self.forget([instance_id])
                continue
            if not name:
                continue
            tags = tag_values(instance)
            known = Known(instance_id, tags.get(TOKEN_TAG), tags.get(POOL_TAG))
            before = self.known.get(name)
            self.known[name] = known
            self._absent.pop(name, None)
            # Heard of: a name answered "not known", and a name recorded for another instance before (private
            # addresses are reused: a foreign instance's name kept for good may come back as one of ours).
            told = name in self._unresolved or (before is not None and before.instance_id != known.instance_id)
            self._unresolved.discard(name)
            if told and (known.token is not None or (before is not None and before.token is not None)):
                changed.append(name)
        if changed and self._reclassify is not None:
            self._reclassify(changed)

    def forget(self, instance_ids: Collection[str]) -> None:
        """These instances are going or gone (released, or seen shutting down or terminated). Their names are kept,
        marked gone, for ``gone_ttl`` seconds: their Nodes outlive the call (EC2 shuts an instance down, then the
        cloud controller deletes its Node), and while they are there they are units of ours being released, not
        free nodes (chaos seed 27056: forgotten at once, a released scale-up's still Ready nodes were planned as
        free capacity, booked, and gone a moment later). After that the name is asked about again, as addresses
        are reused."""
        now = self.clock.now()
        for name, known in list(self.known.items()):
            if known.instance_id in instance_ids and known.gone is None:
                self.known[name] = replace(known, gone=now)

    def start(self) -> None:
        if self._task is None:
            # The reads belong to no call of the provider's: their sleeps are no job's.
            self._task = asyncio.create_task(self._run(), name="aws-node-names", context=detached_context())

    async def aclose(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _run(self) -> None:
        backoff = Backoff(PROVIDER_CALL)
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                region = next(iter(self._pending.values()))
                names = [n for n, r in self._pending.items() if r == region][:self.batch]
                for name in names:
                    del self._pending[name]
                try:
                    instances = await self.describe(region, names)
                except Exception as exc:  # a guard: the task must outlive any failure
                    delay = backoff.next(getattr(exc, "retry_after", None))
                    log.warning("reading the instances of %d node names in %s failed (again in %.0f s): %s",
                                len(names), region, delay, exc)
                    for name in names:
                        self._pending.setdefault(name, region)
                    await self.clock.sleep(delay)
                    continue
                backoff.reset()
                self._answered(names, instances)

    def _answered(self, names: Sequence[str], instances: list[JSON]) -> None:
        self.record(instances)
        found = {str(i.get("PrivateDnsName") or "") for i in instances
                 if str((i.get("State") or {}).get("Name") or "") not in GONE}
        now = self.clock.now()
        for name in names:
            if name in found:
                if self.known.get(name, Known("", None, None)).token is None:
                    self._unresolved.discard(name)  # not ours, for good
                continue
            self._absent[name] = now
            self._absent.move_to_end(name)
        while len(self._absent) > self.absent_max:
            self._absent.popitem(last=False)
