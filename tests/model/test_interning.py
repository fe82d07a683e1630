"""Equal values as one object, up to a bound (gangscale.model.interning)."""

from __future__ import annotations

import pytest

from gangscale.model.interning import Interned


def text(*parts: str) -> str:
    return "".join(parts)  # a new string object each call, equal to the others


@pytest.mark.parametrize("bound, shared", [(10, True), (1, False)], ids=["within-the-bound", "past-the-bound"])
def test_equal_values_are_one_object_within_the_bound(bound: int, shared: bool) -> None:
    interned: Interned[str] = Interned(bound)
    interned(text("fir", "st"))  # fills a bound of 1
    a, b = interned(text("zo", "ne-a")), interned(text("zone", "-a"))
    assert a == b == "zone-a"
    assert (a is b) is shared
    assert len(interned) == min(bound, 2)
