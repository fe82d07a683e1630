"""The store's reads at a revision (what paged and Exact lists stand on), against a model that copies the whole
state after every write: seeded random creates, updates, deletes and re-creates over keys of two namespaces and
a cluster scope, with windows of several sizes, compactions and window changes."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gangscale.sim.apiserver.resources import StorageKey
from gangscale.sim.apiserver.store import Store, TooOldResourceVersion

JSON = dict[str, Any]
PODS = StorageKey("", "pods")
NAMES = [("ns-a", f"p{i}") for i in range(6)] + [("ns", f"p{i}") for i in range(4)] + \
    [("ns-b", "p0"), ("ns", "q")]
PREFIXES = [("", ""), ("ns/", ""), ("ns-a/", ""), ("ns-a/", "p2"), ("", "ns-a/p3\x00"), ("ns-b/", ""), ("zz/", "")]


def obj(ns: str, name: str, gen: int) -> JSON:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"gen": gen}}


def key(ns: str, name: str) -> str:
    return f"{ns}/{name}"


def expected(state: dict[str, JSON], prefix: str, start: str) -> list[tuple[str, int]]:
    return [(k, o["spec"]["gen"]) for k, o in sorted(state.items()) if k.startswith(prefix) and k >= prefix + start]


@pytest.mark.parametrize("window", [0, 1, 5, 40, 1000])
@pytest.mark.parametrize("seed", range(6))
def test_reads_at_every_readable_revision_match_a_copy_of_the_state(window: int, seed: int) -> None:
    rng = random.Random(seed)
    store = Store(window=window)
    state: dict[str, JSON] = {}
    snapshots: dict[int, dict[str, JSON]] = {0: {}}
    for step in range(200):
        ns, name = rng.choice(NAMES)
        k = key(ns, name)
        roll = rng.random()
        if roll < 0.02:
            store.compact()
        elif roll < 0.04:
            store.set_window(rng.choice([0, 2, 10, window]))
        elif k in state and roll < 0.35:
            store.remove(PODS, ns, name)
            del state[k]
        else:
            o = obj(ns, name, step)
            store.put(PODS, o, added=k not in state)
            state[k] = o
        snapshots[store.resource_version] = dict(state)
        horizon = store.horizon(PODS)
        # Every revision now and then; else the latest, one older readable one and one too old.
        older = [rv for rv in snapshots if rv != store.resource_version]
        checked = snapshots.keys() if step % 25 == 0 else \
            [store.resource_version, *rng.sample(older, min(2, len(older)))]
        for rv in checked:
            snap = snapshots[rv]
            for prefix, start in PREFIXES:
                if rv < horizon:
                    with pytest.raises(TooOldResourceVersion):
                        store.scan(PODS, rv, prefix, start)
                    continue
                got = [(k2, o2["spec"]["gen"]) for k2, o2 in store.scan(PODS, rv, prefix, start)]
                assert got == expected(snap, prefix, start), (step, rv, prefix, start)
                assert store.count(PODS, rv, prefix, start) == len(got)
        snapshots = {rv: s for rv, s in snapshots.items() if rv >= horizon}
    # Nothing older than the window is kept: the index holds live keys and deletions the window still reaches.
    space = store._spaces[PODS]
    retained = {key(o.obj["metadata"]["namespace"], o.obj["metadata"]["name"]) for o in space.log}
    assert set(space.keys) == set(state) | (retained - set(state))
    assert set(space.versions) <= retained
    assert space.keys == sorted(space.keys)


def test_items_are_current_and_in_key_order() -> None:
    store = Store()
    for ns, name in [("team", "b"), ("team-a", "a"), ("team", "a"), ("", "node")]:
        store.put(PODS, obj(ns, name, 0) if ns else {"metadata": {"name": name}}, added=True)
    store.remove(PODS, "team", "b")
    assert [(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in store.items(PODS)] == \
        [("", "node"), ("team-a", "a"), ("team", "a")]
    assert [o["metadata"]["name"] for o in store.items(PODS, "team")] == ["a"]
    assert [o["metadata"]["name"] for o in store.items(PODS, "")] == ["node"]
