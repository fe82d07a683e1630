"""Every test of the embedded API server checks the store's cached encodings: a cached object's bytes are compared
with a fresh ``json.dumps`` each time they are served, so a stale encoding fails the test that served it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gangscale.sim.apiserver import store


@pytest.fixture(autouse=True)
def _verify_encodings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(store, "VERIFY_ENCODINGS", True)
    yield
