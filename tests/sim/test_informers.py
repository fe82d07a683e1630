"""The emulators' shared informer cache: it answers as a LIST would, and never from behind the store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gangscale.kube.errors import ApiError
from gangscale.kube.resources import NODES, PODS, RESOURCEFLAVORS, WORKLOADS
from gangscale.kube.transport import KubeHTTP, Resource
from gangscale.sim.apiserver import EmbeddedAPIServer
from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.informers import HttpReader, Informers
from tests import builders as b

JSON = dict[str, Any]
FLAVORS = StorageKey(RESOURCEFLAVORS.group, RESOURCEFLAVORS.plural)


def flavor(name: str) -> JSON:
    return {"apiVersion": RESOURCEFLAVORS.api_version, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {"pool": name}}}


@pytest_asyncio.fixture
async def cache(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> AsyncIterator[Informers]:
    informers = Informers(http, apiserver.store, (RESOURCEFLAVORS, NODES, PODS, WORKLOADS))
    await informers.start()
    try:
        yield informers
    finally:
        await informers.aclose()


def names(items: list[JSON]) -> list[str]:
    return [o["metadata"]["name"] for o in items]


async def test_a_read_waits_for_every_change_the_store_committed(cache: Informers,
                                                                apiserver: EmbeddedAPIServer) -> None:
    await cache.items(RESOURCEFLAVORS)
    # Committed without yielding to the event loop: no watch event can have reached the reflector yet.
    stored = flavor("b")
    stored["metadata"]["uid"] = "uid-b"
    apiserver.store.put(FLAVORS, stored, added=True)
    assert not cache.current()
    assert names(await cache.items(RESOURCEFLAVORS)) == ["b"]
    assert cache.current()
    apiserver.store.remove(FLAVORS, "", "b")
    assert not cache.current()
    assert await cache.items(RESOURCEFLAVORS) == []


async def test_answers_as_a_list_does(cache: Informers, http: KubeHTTP) -> None:
    for name in ("z", "a", "m"):
        await http.request("POST", RESOURCEFLAVORS.path(), body=flavor(name))
    await http.request("POST", NODES.path(), body=b.node("n1", labels={"pool": "a"}))
    await http.request("POST", PODS.path("default"), body=b.pod("p2"))
    await http.request("POST", PODS.path("default"), body=b.pod("p1", labels={"app": "x"}))
    listing = HttpReader(http)
    for resource in (RESOURCEFLAVORS, NODES, PODS, WORKLOADS):
        assert await cache.items(resource) == await listing.items(resource), resource.plural
    labelled = await cache.items(PODS, lambda p: "app" in (p["metadata"].get("labels") or {}))
    assert names(labelled) == ["p1"]


async def test_readers_get_their_own_copies(cache: Informers, http: KubeHTTP) -> None:
    await http.request("POST", RESOURCEFLAVORS.path(), body=flavor("a"))
    (first,) = await cache.items(RESOURCEFLAVORS)
    first["spec"]["nodeLabels"]["pool"] = "changed by a reader"
    (again,) = await cache.items(RESOURCEFLAVORS)
    assert again["spec"]["nodeLabels"] == {"pool": "a"}


async def test_a_resource_not_served_answers_404_as_its_list_did(http: KubeHTTP, apiserver: EmbeddedAPIServer) -> None:
    widgets = Resource("example.com", "v1", "widgets")
    informers = Informers(http, apiserver.store, (widgets, NODES))
    await informers.start()
    try:
        with pytest.raises(ApiError) as raised:
            await informers.items(widgets)
        assert raised.value.not_found
        assert await informers.items(NODES) == []
        with pytest.raises(KeyError):
            await informers.items(PODS)
    finally:
        await informers.aclose()
    assert informers._committed not in apiserver.store.listeners
