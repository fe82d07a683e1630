"""``gangscale explain --offline``: one request's document built from the cluster itself, with the controller's code.

The ProvisioningRequest, every PodTemplate, ProvisioningRequest, Node and Pod are listed once through gangscale's
client; the nodes and pods go through the controller's :class:`~gangscale.controller.logic.view.ClusterView`,
the requests through :func:`~gangscale.controller.demand.prsource.new_state` (their phase and recorded scale-up, as
a restarted controller takes them up), booked requests are re-booked as after a restart
(:func:`~gangscale.controller.logic.planinput.rebook`), and the snapshot is
:func:`~gangscale.controller.logic.planinput.planning_snapshot`. A pending request is then
planned once with :func:`gangscale.planner.plan` at ``now``; the document is
:func:`~gangscale.controller.report.request_document`, as the controller serves it.

What only a running controller knows is missing: pool backoffs and stockout ceilings learnt from the cloud, the
Workload priorities (every gang is planned alone, so they do not matter here), units being removed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from gangscale.config import PoolFile
from gangscale.controller.demand.prsource import NAME, new_state, served
from gangscale.controller.logic.backoffs import PoolBackoffs
from gangscale.controller.logic.holdings import held
from gangscale.controller.logic.planinput import planning_snapshot, rebook, units_of
from gangscale.controller.logic.request import Phase, RequestState, phase
from gangscale.controller.logic.settings import Settings
from gangscale.controller.logic.view import BOUND_PODS, ClusterView, PodInfo, parse_pod, pod_key
from gangscale.controller.report import request_document
from gangscale.kube.errors import ApiError
from gangscale.kube.resources import NODES, PODS, PODTEMPLATES, PROVREQS
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.model.gang import Gang
from gangscale.model.snapshot import Snapshot
from gangscale.planner import plan
from gangscale.sources.provreq import (
    CHECK_CAPACITY_CLASSES,
    PodSetError,
    TemplateDemand,
    build_gang,
    parse,
    template_demand,
)
from gangscale.sources.raycluster import WORKER_PODS, worker_pod
from gangscale.timefmt import rfc3339

JSON = dict[str, Any]
#: Items per LIST page.
PAGE = 500


class NotExplainable(Exception):
    """No such request, or one gangscale does not serve: the one line to print."""


class Templates:
    """The gang of a request from the listed PodTemplates (``planinput.GangSource``, as the PR source is)."""

    def __init__(self, templates: Mapping[tuple[str, str], TemplateDemand], view: ClusterView) -> None:
        self.templates, self.view = templates, view

    def gang(self, st: RequestState, *, may_scale: bool | None = None) -> Gang | str | None:
        pr = parse(st.request.obj)
        scale = (pr.class_name not in CHECK_CAPACITY_CLASSES) if may_scale is None else may_scale
        try:
            return build_gang(pr, lambda name: self.templates.get((pr.namespace, name)), may_scale=scale)
        except PodSetError as exc:
            return str(exc)

    def consumers(self, st: RequestState) -> Iterable[PodInfo]:
        return self.view.consumers.get(st.key, {}).values()


async def list_all(http: KubeHTTP, resource: Resource, *, field_selector: str | None = None,
                   label_selector: str | None = None) -> AsyncIterator[JSON]:
    """Every object of ``resource`` in every namespace, a page at a time: a page is let go before the next is read
    (a large cluster's pods, whole, would not fit in memory)."""
    token = ""
    while True:
        query: dict[str, Any] = {"limit": PAGE, "fieldSelector": field_selector, "labelSelector": label_selector,
                                 **({"continue": token} if token else {})}
        page = await http.request("GET", resource.path(), query=query)
        for obj in page.get("items") or ():
            yield obj
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return


async def offline_document(http: KubeHTTP, pool_file: PoolFile, key: str, now: float,
                           settings: Settings | None = None) -> JSON:
    """The document of ``key`` (``namespace/name``); raises :class:`NotExplainable` for a request that is not there or
    not gangscale's, :class:`~gangscale.kube.errors.ApiError` when the API server cannot be read."""
    settings = settings or Settings()
    namespace, name = key.split("/", 1)
    try:
        target = await http.request("GET", PROVREQS.path(namespace, name))
    except ApiError as exc:
        if exc.not_found:
            raise NotExplainable(f"no ProvisioningRequest {key}") from None
        raise
    pr = parse(target)
    if not served(pr, settings.classes, settings.processor_instance):
        raise NotExplainable(f"ProvisioningRequest {key} is of class {pr.class_name!r}, which gangscale does not serve "
                             f"(it serves {', '.join(settings.classes)})")
    view = ClusterView()
    # What the controller's reflectors keep (README, "The reflector"), listed with the same selectors.
    async for node in list_all(http, NODES):
        view.apply_node(str((node.get("metadata") or {}).get("name", "")), view.node_record(node))
    async for pod in list_all(http, PODS, field_selector=BOUND_PODS):
        view.apply_pod(pod_key(pod), parse_pod(pod))
    async for pod in list_all(http, PODS, label_selector=WORKER_PODS):
        view.apply_worker(pod_key(pod), worker_pod(pod))
    templates = {(str(t["metadata"].get("namespace", "")), str(t["metadata"].get("name", ""))): template_demand(t)
                 async for t in list_all(http, PODTEMPLATES)}
    states = {st.key: st for st in [new_state(parse(obj)) async for obj in list_all(http, PROVREQS)]
              if served(parse(st.request.obj), settings.classes, settings.processor_instance)}
    states[key] = new_state(pr)  # as just read, even if the list came later
    st = states[key]
    source = Templates(templates, view)
    snap = _snapshot(pool_file, view, states, source, now)
    problem = None
    if phase(st) is Phase.PENDING:
        got = source.gang(st)
        if isinstance(got, Gang):
            st.gang = got
            [st.decision] = plan(snap, [got], now, pool_file.policy)
        else:
            problem = got
    document = request_document(st, view, settings, now, rfc3339(now) if st.decision is not None else None)
    return {"source": "offline", "at": rfc3339(now), **document, "problem": problem}


def _snapshot(pool_file: PoolFile, view: ClusterView, states: Mapping[str, RequestState], source: Templates,
              now: float) -> Snapshot:
    """The snapshot the controller would plan on, every other request's holdings in it (booked ones re-booked as
    after a restart)."""
    pools = {pool.name: pool for pool in pool_file.pools}
    provisioning = [st for st in states.values() if phase(st) is Phase.PROVISIONING]
    claims = {view.claim(token) for st in provisioning for token in (st.record.tokens if st.record else ())}
    coming = {node for claim in claims for node in view.by_claim.get(claim, ())}
    units = units_of(view, pools, claims, set())
    backoffs = PoolBackoffs(0.0, 0.0, 0.0)  # what the cloud said is only in the controller's memory

    def build(holders: Iterable[RequestState]) -> Snapshot:
        holdings = [held(st, view, source.consumers(st)) for st in holders]
        return planning_snapshot(pools, view, units, holdings, backoffs, now, going=set(), leaving=set(),
                                 coming=coming)

    booked = [st for st in states.values() if phase(st) is Phase.BOOKED]
    if booked:
        rebook(booked, {NAME: source}, view, build(provisioning), now, pool_file.policy)
    return build([*provisioning, *booked])
