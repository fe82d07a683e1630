"""ProvisioningRequests as a demand source (provreq-spec §1-2).

Each PR of a served class (and of this ``processorInstance``) is one request. Its gang comes from the PodTemplates
it names (the PodTemplate cache; a template the cache has not seen yet is looked up once with a GET, since the
template watch may lag the PR watch) and the ``spec.priority`` of its owning Workload (the Workload cache; 0
without one, or where Kueue's API is not served). A PR of a RayCluster's Workload (an elastic slice) asks only
for the replicas not already on nodes. The outcome is written as the PR's status conditions and
``provisioningClassDetails`` by server-side apply (``kube.writes``), the Events on the PR.

The conditions gangscale owns are read from the object once, when the PR is first seen: gangscale is their only
writer, so its memory is authoritative while it runs, and a pass never acts on a watch event that lags behind
its own last write.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gangscale.controller.demand.protocol import Host
from gangscale.controller.logic import conditions as C
from gangscale.controller.logic.reconcile import Consumed
from gangscale.controller.logic.record import DETAIL_KEY, POOL_DETAIL_KEY, RELEASING, from_status
from gangscale.controller.logic.request import Request, RequestState, owned_from
from gangscale.controller.logic.view import PodInfo
from gangscale.kube.errors import ApiError
from gangscale.kube.reflector import Reflector, ReflectorEvent, object_key, strip_managed_fields
from gangscale.kube.resources import PODTEMPLATES, PROVREQS, WORKLOADS
from gangscale.kube.transport import KubeHTTP
from gangscale.kube.writes import apply_provreq_status, delete_provreq
from gangscale.model.gang import Gang
from gangscale.sources.provreq import (
    CHECK_CAPACITY_CLASSES,
    PodSetError,
    ProvReq,
    TemplateDemand,
    WorkloadRecord,
    build_gang,
    parse,
    template_demand,
    template_names,
    workload_record,
)
from gangscale.sources.provreqparams import read as read_parameters
from gangscale.sources.provreqparams import tier_policy
from gangscale.sources.raycluster import RayClusterError, bound_pods, parse_raycluster

JSON = dict[str, Any]
log = logging.getLogger(__name__)
NAME = "provisioningrequest"
Key = tuple[str, str]


def served(pr: ProvReq, classes: tuple[str, ...], processor_instance: str) -> bool:
    """Is this PR gangscale's? Its class is served and its ``processorInstance`` (if any) is ours."""
    return pr.class_name in classes and pr.parameters.get("processorInstance", "") == processor_instance


def request_of(pr: ProvReq) -> Request:
    params = read_parameters(pr.parameters)
    return Request(
        key=pr.key, uid=pr.uid, source=NAME, class_name=pr.class_name, obj=pr.obj, created=pr.created,
        generation=pr.generation, version=pr.resource_version, pods=pr.pods,
        may_scale=pr.class_name not in CHECK_CAPACITY_CLASSES, booking_ttl=params.booking_seconds,
        provisioned_when_requested=params.provisioned_when_requested, no_retry=params.no_retry, deletable=True,
        gang=f"{pr.namespace}/Workload/{owner}" if (owner := pr.workload_owner_uid()) else "",
        problems=params.problems)


class ProvReqSource:
    name = NAME

    def __init__(self, http: KubeHTTP, host: Host, *,
                 raycluster: Callable[[str, str], JSON | None] = lambda namespace, name: None) -> None:
        self.http = http
        self.host = host
        self.prs = Reflector(http, PROVREQS, transform=strip_managed_fields)
        self.templates: Reflector[TemplateDemand] = Reflector(http, PODTEMPLATES, transform=template_demand)
        self.workloads: Reflector[WorkloadRecord] | None = None
        self._raycluster = raycluster
        self._parsed: dict[str, ProvReq] = {}
        self._changed: set[Key] = set()
        #: PR keys by the (namespace, template) and (namespace, workload) they depend on.
        self._by_template: dict[Key, set[str]] = defaultdict(set)
        self._by_workload: dict[Key, set[str]] = defaultdict(set)
        #: Templates the cache had not seen, looked up for a PR: PR key -> template -> its demand (None: not found).
        self._looked_up: dict[str, dict[str, TemplateDemand | None]] = {}
        self._looking: set[str] = set()
        self.prs.add_handler(self._on_pr)
        self.templates.add_handler(self._on_template)

    # -- start ----------------------------------------------------------------------------------------------------

    async def start(self) -> list[Reflector[Any]]:
        reflectors: list[Reflector[Any]] = [self.prs, self.templates]
        try:
            found = await self.http.request("GET", f"/apis/{WORKLOADS.group}/{WORKLOADS.version}")
        except ApiError as exc:
            if not exc.not_found:
                log.warning("could not discover %s/%s (%s); Workload priorities are 0 until a restart",
                            WORKLOADS.group, WORKLOADS.version, exc)
            return reflectors
        if any(r.get("name") == WORKLOADS.plural for r in found.get("resources") or ()):
            self.workloads = Reflector(self.http, WORKLOADS, transform=workload_record)
            self.workloads.add_handler(self._on_workload)
            reflectors.append(self.workloads)
        return reflectors

    def recover(self) -> None:
        self._changed.update(object_key(obj) for obj in self.prs.cache.values())
        self.sync(self.host.clock.now())

    def recorded_tokens(self) -> set[str]:
        """Tokens recorded on any ProvisioningRequest, served or not (their units are not orphans)."""
        out: set[str] = set()
        for obj in self.prs.cache.values():
            record = from_status(obj.get("status") or {})
            if record is not None:
                out.update(record.tokens)
        return out

    async def aclose(self) -> None:
        return None

    # -- changes ----------------------------------------------------------------------------------------------------

    def _on_pr(self, event: ReflectorEvent[JSON]) -> None:
        self._changed.add(object_key(event.obj))
        self.host.wake()

    def _on_template(self, event: ReflectorEvent[TemplateDemand]) -> None:
        for key in self._by_template.get(event.key, ()):
            self.host.mark(key)
        self.host.wake()

    def _on_workload(self, event: ReflectorEvent[WorkloadRecord]) -> None:
        for key in self._by_workload.get(event.key, ()):
            self.host.mark(key)
        self.host.wake()

    def sync(self, now: float) -> None:
        changed, self._changed = self._changed, set()
        settings = self.host.settings
        for namespace, name in sorted(changed):
            key = f"{namespace}/{name}"
            obj = self.prs.get(namespace, name)
            pr = parse(obj) if obj is not None else None
            if pr is not None and not served(pr, settings.classes, settings.processor_instance):
                pr = None
            known = self._parsed.get(key)
            if known is not None and (pr is None or pr.uid != known.uid):
                self.host.forget(key, "its ProvisioningRequest was deleted")
            if pr is None:
                continue
            self._parsed[key] = pr
            self._index(pr)
            if known is not None and known.uid == pr.uid:
                self.host.update(key, request_of(pr))
            else:
                self.host.add(new_state(pr))

    def forgotten(self, key: str) -> None:
        pr = self._parsed.pop(key, None)
        self._looked_up.pop(key, None)
        if pr is None:
            return
        for name in template_names(pr):
            self._drop(self._by_template, (pr.namespace, name), key)
        owner = pr.workload_owner()
        if owner:
            self._drop(self._by_workload, (pr.namespace, owner), key)

    def _index(self, pr: ProvReq) -> None:
        for name in template_names(pr):
            self._by_template[(pr.namespace, name)].add(pr.key)
        owner = pr.workload_owner()
        if owner:
            self._by_workload[(pr.namespace, owner)].add(pr.key)

    @staticmethod
    def _drop(index: dict[Key, set[str]], at: Key, key: str) -> None:
        keys = index.get(at)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del index[at]

    def next_wake(self) -> float | None:
        return None

    def note_events(self, st: RequestState, events: Sequence[tuple[str, str, str]]) -> None:
        return None

    # -- gangs ------------------------------------------------------------------------------------------------------

    def gang(self, st: RequestState, *, may_scale: bool | None = None) -> Gang | str | None:
        pr = self._parsed.get(st.key)
        if pr is None:
            return "the ProvisioningRequest is gone"
        found: dict[str, TemplateDemand | None] = {}
        missing = []
        for name in dict.fromkeys(template_names(pr)):
            demand = self.templates.get(pr.namespace, name) if name else None
            if demand is None and name:
                if name not in (looked_up := self._looked_up.get(pr.key, {})):
                    missing.append(name)
                demand = looked_up.get(name)
            found[name] = demand
        if missing:
            self._look_up(pr, missing)
            return None
        priority, raycluster = self._workload(pr)
        scale = (pr.class_name not in CHECK_CAPACITY_CLASSES) if may_scale is None else may_scale
        tiers = tier_policy(read_parameters(pr.parameters), self.host.policy.tiers.for_class(pr.class_name))
        try:
            gang = build_gang(pr, found.get, priority=priority, may_scale=scale, tiers=tiers)
        except PodSetError as exc:
            return str(exc)
        return self._less_bound(gang, pr, raycluster) if raycluster else gang

    def _look_up(self, pr: ProvReq, names: list[str]) -> None:
        if pr.key in self._looking:
            return
        self._looking.add(pr.key)

        async def look_up() -> dict[str, TemplateDemand | None]:
            out: dict[str, TemplateDemand | None] = {}
            for name in names:
                try:
                    out[name] = template_demand(await self.http.request("GET", PODTEMPLATES.path(pr.namespace, name)))
                except ApiError as exc:
                    if not exc.not_found:
                        log.warning("could not read podtemplate %s/%s: %s", pr.namespace, name, exc)
                    out[name] = None
            return out

        def then(result: dict[str, TemplateDemand | None] | BaseException) -> None:
            self._looking.discard(pr.key)
            if pr.key not in self._parsed:
                return
            if isinstance(result, BaseException):
                result = dict.fromkeys(names, None)
            self._looked_up.setdefault(pr.key, {}).update(result)
            self.host.mark(pr.key)

        self.host.spawn(look_up(), f"look up templates of {pr.key}", then=then)

    def _workload(self, pr: ProvReq) -> tuple[int, str | None]:
        """The owning Workload's ``spec.priority`` (0 without one, or when Kueue is not installed) and the
        RayCluster that owns the Workload, if one does."""
        owner = pr.workload_owner()
        if owner is None or self.workloads is None:
            return 0, None
        record = self.workloads.get(pr.namespace, owner)
        return (0, None) if record is None else (record.priority, record.raycluster)

    def _less_bound(self, gang: Gang, pr: ProvReq, raycluster: str) -> Gang:
        """A PR of a RayCluster's Workload (an elastic slice counts every pod the cluster should have): the
        replicas already on nodes keep their capacity, so only the rest is provisioned (decision 10)."""
        obj = self._raycluster(pr.namespace, raycluster)
        if obj is None:
            return gang
        try:
            cluster = parse_raycluster(obj)
        except RayClusterError:
            return gang
        workers = list(self.host.view.workers.get((pr.namespace, raycluster), {}).values())
        less = bound_pods(gang, pr.name, cluster, workers)
        if less != gang:
            log.info("%s: %s of its pods belong to replicas of RayCluster %s already on nodes; provisioning the rest",
                     gang.key, gang.pods - less.pods, raycluster, extra={"pr": gang.key})
        return less

    # -- outcomes ---------------------------------------------------------------------------------------------------

    def consumers(self, st: RequestState) -> Iterable[PodInfo]:
        return self.host.view.consumers.get(st.key, {}).values()

    def consumed(self, st: RequestState) -> Consumed | None:
        if len(self.host.view.consumers.get(st.key, {})) >= st.request.pods:
            return Consumed(C.M_BOOKING_CONSUMED)
        return None

    def status(self, st: RequestState) -> JSON:
        return status_body(st)

    async def write(self, st: RequestState, body: JSON) -> str:
        written = await apply_provreq_status(self.http, st.request.namespace, st.request.name, body,
                                             uid=st.request.uid, resource_version=st.version or None)
        return str((written.get("metadata") or {}).get("resourceVersion") or "")

    async def delete(self, st: RequestState) -> None:
        await delete_provreq(self.http, st.request.namespace, st.request.name, st.request.uid)
        log.info("deleted %s: its outcome is older than %ss", st.key, self.host.settings.terminal_ttl)


def status_body(st: RequestState) -> JSON:
    status: JSON = {"conditions": st.owned_conditions()}
    if st.record is not None:
        details = {DETAIL_KEY: st.record.to_detail()}
        if (pool := st.record.single_pool) is not None and st.record.phase != RELEASING:
            details[POOL_DETAIL_KEY] = pool
        status["provisioningClassDetails"] = details
    return status


def new_state(pr: ProvReq) -> RequestState:
    """A PR seen for the first time: what gangscale wrote on it before (a restart) is taken up."""
    st = RequestState(request_of(pr), owned_from(pr.status.get("conditions")), from_status(pr.status))
    st.attempts = st.record.attempt if st.record is not None else 0
    st.written = repr(status_body(st))
    st.reported = {ctype: (cond.status, cond.reason) for ctype, cond in st.conditions.items()}
    if not st.conditions:  # told when gangscale first took the request up, not again after each restart
        for problem in st.request.problems:
            st.event("Warning", "InvalidParameter", problem)
    return st
