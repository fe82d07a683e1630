"""Resource lists: resource name -> canonical integer amount (see :mod:`gangscale.model.quantity`)."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

from gangscale.model.quantity import QuantityError, canonical, format_quantity

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
#: kubelet's default ``maxPods``; a node pool that does not say otherwise holds this many pods.
DEFAULT_MAX_PODS = 110


class ResourceList(Mapping[str, int]):
    """An immutable, hashable resource list. Zero amounts are dropped, so equal demands compare equal."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, int] | None = None, /, **amounts: int) -> None:
        merged = dict(items or {}, **amounts)
        self._items: dict[str, int] = {name: merged[name] for name in sorted(merged) if merged[name]}
        self._hash: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, where: str = "resources") -> ResourceList:
        """Parse a Kubernetes resource map (``{"cpu": "500m", "memory": "1Gi"}``); errors name the entry."""
        if raw is None:
            return EMPTY
        if not isinstance(raw, Mapping):
            raise QuantityError(f"{where}: expected a map of resource name to quantity, got {type(raw).__name__}")
        amounts: dict[str, int] = {}
        for name, value in raw.items():
            try:
                amounts[str(name)] = canonical(str(name), value)
            except QuantityError as exc:
                raise QuantityError(f"{where}.{name}: {exc}") from None
        return cls(amounts)

    def __getitem__(self, name: str) -> int:
        return self._items[name]

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]
        return self._items.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    # The dict's own views: Mapping's generic ones go through __iter__ and __getitem__ per entry, and resource lists
    # are summed once per pod event.
    def items(self) -> ItemsView[str, int]:
        return self._items.items()

    def keys(self) -> KeysView[str]:
        return self._items.keys()

    def values(self) -> ValuesView[int]:
        return self._items.values()

    def to_dict(self) -> dict[str, int]:
        """A mutable copy (``dict(resource_list)`` goes through ``__getitem__`` per entry)."""
        return dict(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceList):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        return f"ResourceList({self._items!r})"

    def __str__(self) -> str:
        return "{" + ", ".join(f"{name}: {format_quantity(name, value)}" for name, value in self._items.items()) + "}"

    def __add__(self, other: Mapping[str, int]) -> ResourceList:
        merged = dict(self._items)
        for name, value in other.items():
            merged[name] = merged.get(name, 0) + value
        return ResourceList(merged)

    def __sub__(self, other: Mapping[str, int]) -> ResourceList:
        """Difference, floored at zero per resource (free capacity is never negative)."""
        merged = dict(self._items)
        for name, value in other.items():
            merged[name] = max(0, merged.get(name, 0) - value)
        return ResourceList(merged)

    def scaled(self, factor: int) -> ResourceList:
        return ResourceList({name: value * factor for name, value in self._items.items()})

    def max_with(self, other: Mapping[str, int]) -> ResourceList:
        merged = dict(self._items)
        for name, value in other.items():
            merged[name] = max(merged.get(name, 0), value)
        return ResourceList(merged)

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        return all(value <= capacity.get(name, 0) for name, value in self._items.items())

    def shortfall(self, capacity: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """The resources that do not fit: name -> (needed, available)."""
        return {name: (value, capacity.get(name, 0)) for name, value in self._items.items()
                if value > capacity.get(name, 0)}


EMPTY = ResourceList()
