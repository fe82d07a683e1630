"""The node-pool provider interface (DESIGN decision 11) and its error taxonomy.

A provider obtains and releases *units* of a node pool: one node, or a whole multi-host TPU slice. The
contract the controller relies on:

- ``obtain(pool, units, token=, deadline=)`` is all-or-nothing. On failure the provider has released
  whatever it created (``ProviderError.rolled_back``), except for a :attr:`ErrorClass.TRANSIENT` error whose
  outcome is unknown (``rolled_back=False``): then the caller calls ``obtain`` again with the *same* token.
  The same token always designates the same units: repeating a call never scales twice.
- The intent of an obtain (which units, under which ids and node names) is fixed before the provider makes
  its first resource, and recorded where a restarted provider finds it (the cloud's own objects), so a call
  repeated after a crash finishes exactly those units, and a release undoes exactly them.
- ``lookup(token)`` tells what a token designates (after a restart, from the cloud's own records), every unit
  of its intent, with ``incomplete`` naming the units whose resources do not all exist (never made, or lost
  since); ``None`` when nothing of it exists. A caller must not count an incomplete unit as obtained.
- ``release(pool, unit_ids, token=)`` is idempotent: releasing a unit that is already gone succeeds. A release
  is by unit: the provider finds from each unit itself what made it (scale-down releases units one by one under
  a token of its own, and a restarted process releases orphans under their claim), and removes that too once
  none of its units is left. The token names the release for the provider's own logs and deduplication; once
  every unit a token obtained is released, the token designates nothing (``lookup`` returns None).
- ``Obtained.expires_at``: capacity with a run duration says when the cloud will delete it; the controller
  ends the booking then and tells the request.
- ``deadline`` is absolute clock time (seconds since the epoch, as :meth:`Clock.now`). Tokens must be valid
  label values (at most 63 characters): providers label nodes with them.
- The provider says how its nodes are recognised (:meth:`NodePoolProvider.node_ref`): from a Node's name and
  labels alone, which pool it belongs to, which unit, and the *claim* of the token that made it
  (:meth:`NodePoolProvider.claim`: the key a token's nodes can be found by; the token itself when the nodes
  carry it as a label). The controller counts units, keeps slices whole and finds a scale-up's nodes from
  Node objects through these two answers. The ``simulated`` provider labels every node with the pool, the unit
  and the token (:func:`labelled_node`); on GKE a VM's node can carry only its node pool's labels, so a unit
  made in an existing pool is recognised by its name instead (see ``gangscale.providers.gke``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gangscale.model.nodepool import POOL_LABEL

UNIT_LABEL = "gangscale.io/unit"
TOKEN_LABEL = "gangscale.io/token"


class ErrorClass(StrEnum):
    #: The cloud has no capacity of this kind now: back this pool off and try another.
    STOCKOUT = "stockout"
    #: An account or project limit: back off for longer; an operator has to act.
    QUOTA = "quota"
    #: Throttling, a server error, a timeout: retry the same call with the same token.
    TRANSIENT = "transient"
    #: A bad request, configuration or permission: do not retry as is.
    PERMANENT = "permanent"


class ProviderError(Exception):
    def __init__(self, error_class: ErrorClass, code: str, message: str, *, pool: str,
                 retry_after: float | None = None, rolled_back: bool = True, available: int | None = None) -> None:
        super().__init__(f"{pool}: {code}: {message}")
        self.error_class = error_class
        self.code = code
        self.message = message
        self.pool = pool
        self.retry_after = retry_after
        self.rolled_back = rolled_back
        #: For a stockout, the units the cloud said it had left, when it said so (GCE does not).
        self.available = available


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a provider failure worth the same call again (a ``retryable`` for :mod:`gangscale.retry`)."""
    return isinstance(exc, ProviderError) and exc.error_class is ErrorClass.TRANSIENT


#: Whether this process may change the cloud now (it holds the leader lease). A provider asks before every
#: mutating cloud request, not only once per obtain: an obtain that makes several resources stops at the first one
#: it may no longer make, and the next leader finishes the recorded intent.
Fence = Callable[[], bool]


def unfenced() -> bool:
    """The fence of a process that acts alone (no leader election)."""
    return True


def not_leader(pool: str) -> ProviderError:
    """A mutating call refused by the fence. TRANSIENT with an unknown outcome: whatever the call had already made
    stays recorded under its token, for the next leader to finish or undo."""
    return ProviderError(ErrorClass.TRANSIENT, "NOT_LEADER",
                         "this process no longer holds the leader lease; no further cloud change is made",
                         pool=pool, rolled_back=False)


@dataclass(frozen=True, slots=True)
class Unit:
    """One unit of a pool and the names of the nodes it registers as (all of them, even before they appear)."""

    unit_id: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Obtained:
    token: str
    pool: str
    units: tuple[Unit, ...]
    #: Ids of units (of ``units``) whose resources do not all exist: an obtain never returns any; a lookup may.
    incomplete: tuple[str, ...] = ()
    #: When the cloud deletes these units by itself (clock time), for capacity with a run duration (GKE flex-start
    #: and queued provisioning); None: they live until released.
    expires_at: float | None = None

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(name for unit in self.units for name in unit.nodes)


@dataclass(frozen=True, slots=True)
class NodeRef:
    """What a provider says of one Node: its pool, and for a node the provider made, its unit and the claim of
    the token that made it (see the module docstring)."""

    pool: str
    unit: str | None = None
    claim: str | None = None


def labelled_node(name: str, labels: Mapping[str, str]) -> NodeRef | None:
    """A node that carries gangscale's labels (``gangscale.io/node-pool``, ``/unit``, ``/token``); a unit's claim is
    its token."""
    pool = labels.get(POOL_LABEL)
    if pool is None:
        return None
    return NodeRef(pool, labels.get(UNIT_LABEL), labels.get(TOKEN_LABEL))


#: See :meth:`NodePoolProvider.set_reclassify`.
Reclassify = Callable[[Collection[str]], None]


def same_token(token: str) -> str:
    return token


def labels_suffice(callback: Reclassify) -> None:
    """:meth:`NodePoolProvider.set_reclassify` of a provider that recognises its nodes by their labels alone."""


class NodePoolProvider(Protocol):
    #: Short name for metrics and logs ("simulated", "gke").
    name: str

    async def start(self) -> None:
        """Load whatever the provider needs (its records of earlier tokens) before the first call."""
        ...

    async def obtain(self, pool: str, units: int, *, token: str, deadline: float) -> Obtained: ...

    async def lookup(self, token: str) -> Obtained | None: ...

    async def release(self, pool: str, unit_ids: Sequence[str], *, token: str) -> None: ...

    async def aclose(self) -> None: ...

    def node_ref(self, name: str, labels: Mapping[str, str]) -> NodeRef | None:
        """The pool, unit and claim of a Node, from its name and labels; None for a node of no managed pool."""
        ...

    def claim(self, token: str) -> str:
        """The key by which the nodes of ``token``'s units are found (``NodeRef.claim``)."""
        ...

    def set_reclassify(self, callback: Reclassify) -> None:
        """Where to say that :meth:`node_ref` now answers differently for some nodes: a provider that recognises
        nodes partly from what it reads from the cloud (the aws provider: a node's name is its instance's private
        DNS name, known from ``DescribeInstances``) calls ``callback`` with their names once it has read, and the
        controller classifies those nodes again. Providers that recognise nodes from their labels alone ignore it."""
        ...
