"""Capacity in flight: one ledger of what is being obtained, is coming up, is being released or is going away.

Planning and scale-down both need to know which capacity is not what it looks like in the cluster view: nodes
that are registered but belong to a scale-up still in progress, nodes of a release that has not finished, units
the provider already deleted whose Node objects linger. Each of those was once a set of its own in a different
object, and the fault campaigns found bugs in the gaps between them (the comments at the operations below name
them). Here they are one ledger that the pass owns and changes through named operations; it does no I/O and
reads the cluster only through what a query is given.

What is tracked, by claim (``NodePoolProvider.claim`` of a scale-up's token), node or unit:

============== ================================================= =====================================================
state          entered by                                        left by
============== ================================================= =====================================================
obtaining      :meth:`start_obtain` (the provider calls start)   :meth:`obtain_returned` (whatever the outcome)
unbooked       :meth:`track` (recorded, not Provisioned yet)     :meth:`track` / :meth:`untrack`
arriving       :meth:`track` (Provisioned before its nodes       :meth:`track` (every node seen), :meth:`untrack`
               registered: ``provisionedWhen: Requested``, or
               a booking not rebuilt yet after a restart)
leaving        :meth:`start_release` (a request's scale-up is    :meth:`release_returned`
               being handed back; by node, counted)
departing      :meth:`start_release`, :meth:`rolled_back`         :meth:`settle`: no node of the claim left in the
               (by claim, since when)                            view and ``DEPARTING_GRACE`` passed
removing       :meth:`start_removal` (scale-down, by unit)       :meth:`removal_returned`
released       :meth:`units_released` (the provider deleted      :meth:`settle`: the view has no node of the unit
               the unit)
============== ================================================= =====================================================

The questions it answers:

- :meth:`in_progress` / :meth:`in_progress_claims`: a scale-up still in progress (obtaining or unbooked). Its
  nodes are its request's, not free room, and scale-down never takes them.
- :meth:`coming_up_claims`: in progress or arriving. A unit of such a claim that misses hosts is still coming up,
  not half removed (the broken-slice rule must leave it alone).
- :meth:`leaving_nodes`: nodes no plan may use because their capacity is being handed back (leaving, departing).
- :meth:`going_units`: units that no longer count for minUnits/maxUnits and that no plan may use (removing,
  released).
- :meth:`releasing`: a request whose abandoned scale-up is being released is not planned again until it is gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

#: How long a rolled-back scale-up's claim is remembered after its last node is gone from the view: a watch
#: event still in flight could bring a node back within it.
DEPARTING_GRACE = 60.0


class Ledger:
    def __init__(self) -> None:
        self._obtaining: Counter[str] = Counter()
        #: key -> claims of its recorded scale-up while it is not Provisioned.
        self._unbooked: dict[str, frozenset[str]] = {}
        self._unbooked_claims: Counter[str] = Counter()
        #: key -> claim -> the node names the provider said it made, while Provisioned before they registered.
        self._arriving: dict[str, dict[str, tuple[str, ...]]] = {}
        self._leaving: Counter[str] = Counter()
        self._releases_for: Counter[str] = Counter()
        self._departing: dict[str, float] = {}
        self._removing: set[str] = set()
        self._released: set[str] = set()

    # -- scale-ups --------------------------------------------------------------------------------------------------

    def start_obtain(self, claims: Iterable[str]) -> None:
        """A scale-up's provider calls start. Its nodes may register before the calls return (found by
        hack/chaos.py, seeds 2013 and 3147: another gang was planned onto such nodes)."""
        self._obtaining.update(set(claims))

    def obtain_returned(self, claims: Iterable[str]) -> None:
        """The calls returned, whatever the outcome (a request now tracks what it recorded, :meth:`track`)."""
        for claim in set(claims):
            self._obtaining[claim] -= 1
            if self._obtaining[claim] <= 0:
                del self._obtaining[claim]

    def rolled_back(self, claims: Iterable[str], now: float) -> None:
        """A failed scale-up that the provider undid: its nodes may outlive the rollback (on GKE a Node stays until
        the node lifecycle controller sees its VM gone) and are no free room meanwhile (found by the gke crash
        tests: a re-plan put pods on a deleted slice's nodes)."""
        self._departing.update(dict.fromkeys(claims, now))

    def track(self, key: str, *, unbooked: Iterable[str] = (),
              arriving: Mapping[str, tuple[str, ...]] | None = None) -> set[str]:
        """What the request ``key``'s recorded scale-up holds now: the claims of a scale-up not Provisioned yet, or
        (claim -> node names) those Provisioned while their nodes may still be registering. Returns the claims
        whose state changed (scale-down looks at their nodes again)."""
        changed: set[str] = set()
        claims = frozenset(unbooked)
        old = self._unbooked.get(key, frozenset())
        if claims != old:
            self._unbooked_claims.subtract(old)
            self._unbooked_claims.update(claims)
            for claim in old - claims:
                if self._unbooked_claims[claim] <= 0:
                    del self._unbooked_claims[claim]
            changed |= claims ^ old
            if claims:
                self._unbooked[key] = claims
            else:
                self._unbooked.pop(key, None)
        new_arriving = dict(arriving or {})
        old_arriving = self._arriving.get(key, {})
        if new_arriving != old_arriving:
            changed |= set(new_arriving) ^ set(old_arriving)
            if new_arriving:
                self._arriving[key] = new_arriving
            else:
                self._arriving.pop(key, None)
        return changed

    def untrack(self, key: str) -> set[str]:
        """The request is gone; returns the claims it held."""
        return self.track(key)

    # -- releases of a request's scale-up ---------------------------------------------------------------------------

    def start_release(self, key: str, nodes: Iterable[str], claims: Iterable[str], now: float) -> None:
        """A request's scale-up is being handed back. Its nodes are known by name, and by claim: a scale-up resumed
        after a restart and released before its obtain returned knows no node names, and its nodes (Ready, or
        still registering) must not look free meanwhile (found by hack/chaos.py --provider gke, seed 9103: a gang
        was booked on the slice of a deleted request's release). The request is not planned again until every
        release of it returned: re-planned earlier, it could hold twice the nodes it needs (found by
        hack/chaos.py)."""
        self._leaving.update(set(nodes))
        self._releases_for[key] += 1
        self.rolled_back(claims, now)

    def release_returned(self, key: str, nodes: Iterable[str]) -> None:
        for node in set(nodes):
            self._leaving[node] -= 1
            if self._leaving[node] <= 0:
                del self._leaving[node]
        self._releases_for[key] -= 1
        if self._releases_for[key] <= 0:
            del self._releases_for[key]

    # -- scale-down -------------------------------------------------------------------------------------------------

    def start_removal(self, unit: str) -> None:
        self._removing.add(unit)

    def removal_returned(self, unit: str) -> None:
        self._removing.discard(unit)

    def units_released(self, units: Iterable[str]) -> set[str]:
        """The provider deleted these units (any release: scale-down, a rollback, an orphan); their nodes linger in
        the view until the watch says they are gone. Returns the units new to the ledger."""
        new = set(units) - self._released
        self._released |= new
        return new

    # -- the passage of time and of the view ------------------------------------------------------------------------

    def settle(self, now: float, *, claim_has_nodes: Callable[[str], bool],
               unit_present: Callable[[str], bool]) -> set[str]:
        """Forget what has left the view: a departing claim once it has no node and the grace has passed, a
        released unit once no node of it is left. Returns the released units forgotten (their scale-down state
        changed)."""
        self._departing = {claim: since for claim, since in self._departing.items()
                           if claim_has_nodes(claim) or now - since < DEPARTING_GRACE}
        gone = {unit for unit in self._released if not unit_present(unit)}
        self._released -= gone
        return gone

    # -- queries ----------------------------------------------------------------------------------------------------

    def in_progress(self, claim: str) -> bool:
        """Whether ``claim`` is a scale-up still in progress: its provider calls run, or its request is not
        Provisioned yet."""
        return claim in self._obtaining or claim in self._unbooked_claims

    def in_progress_claims(self) -> set[str]:
        return set(self._obtaining) | set(self._unbooked_claims)

    def coming_up_claims(self, present: Callable[[str], bool]) -> set[str]:
        """In progress, or Provisioned with a node that has not registered yet (``present``: the node is in the
        view). Issue 26: a slice whose second host had not registered was taken for a half-removed one."""
        arriving = {claim for claims in self._arriving.values() for claim, names in claims.items()
                    if not all(map(present, names))}
        return self.in_progress_claims() | arriving

    def leaving_nodes(self, nodes_of_claim: Callable[[str], Iterable[str]]) -> set[str]:
        """Nodes whose capacity is being handed back: those of releases in flight, and every node still registered
        of a departing claim."""
        return set(self._leaving) | {node for claim in self._departing for node in nodes_of_claim(claim)}

    def is_leaving(self, node: str) -> bool:
        return node in self._leaving

    def going_units(self) -> set[str]:
        """Units being removed by scale-down or already released at the provider."""
        return self._removing | self._released

    def is_going(self, unit: str) -> bool:
        return unit in self._removing or unit in self._released

    def removing(self) -> set[str]:
        """Units scale-down is removing."""
        return set(self._removing)

    def releasing(self, key: str) -> bool:
        """Whether a release of request ``key``'s scale-up is in flight."""
        return key in self._releases_for

    def summary(self) -> dict[str, int]:
        """Sizes, for debugging and tests of boundedness."""
        return {"obtaining": len(self._obtaining), "unbooked": len(self._unbooked_claims),
                "arriving": sum(map(len, self._arriving.values())), "leaving": len(self._leaving),
                "departing": len(self._departing), "removing": len(self._removing), "released": len(self._released)}
