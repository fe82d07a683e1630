"""What the loop looks up about requests by something other than their key, kept current as each one changes.

- the request that recorded each provider token (and, in the :class:`~.ledger.Ledger`, the claims its scale-up
  holds while in progress or while its nodes are still arriving);
- the requests booked on each node, and how many bookings hold each node (scale-down never removes one);
- what each request holds (:class:`~.snapshot.Holding`: bookings and units in flight), for the planner;
- pending requests waiting out a retry backoff (capacity handed back lets them try at once);
- the number of requests per (class, phase), for the gauges.

:meth:`RequestIndex.index` is called after a request changes and :meth:`RequestIndex.forget` when it goes, so
each map is exact and shrinks with the requests. When the protection of nodes changes (a booking, a scale-up
in flight), the loop is told which nodes or tokens, so that scale-down looks at exactly those again.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

from gangscale.controller.logic.holdings import NOTHING, Holding
from gangscale.controller.logic.ledger import Ledger
from gangscale.controller.logic.request import Phase, RequestState, phase


def held_claims(st: RequestState, claim: Callable[[str], str]) -> tuple[frozenset[str], dict[str, tuple[str, ...]]]:
    """The claims a request's recorded scale-up holds, for :meth:`Ledger.track`: those of a scale-up not
    Provisioned yet; and (claim -> node names the provider made) those of one Provisioned while its nodes may still
    be registering (``provisionedWhen: Requested``, or a booking not rebuilt yet after a restart)."""
    if st.record is None:
        return frozenset(), {}
    match phase(st):
        case Phase.PROVISIONING:
            return frozenset(map(claim, st.record.tokens)), {}
        case Phase.BOOKED if st.obtained and (st.request.provisioned_when_requested or st.booking is None):
            return frozenset(), {claim(token): got.node_names for token, got in st.obtained.items()}
    return frozenset(), {}


class RequestIndex:
    def __init__(self, touch_nodes: Callable[[Iterable[str]], None],
                 touch_claims: Callable[[Iterable[str]], None], claim: Callable[[str], str], ledger: Ledger) -> None:
        self._touch_nodes, self._touch_claims, self._claim = touch_nodes, touch_claims, claim
        self.ledger = ledger
        #: claim (``NodePoolProvider.claim``) of a recorded token -> key of the request that recorded it.
        self.token_owner: dict[str, str] = {}
        #: node -> keys of the requests booked on it.
        self.booked_on: dict[str, set[str]] = defaultdict(set)
        #: key -> what the request holds (absent: nothing).
        self.holdings: dict[str, Holding] = {}
        #: node -> how many holdings book it.
        self.booked_nodes: Counter[str] = Counter()
        self.retrying: set[str] = set()
        #: (class, phase) -> requests.
        self.counts: Counter[tuple[str, str]] = Counter()
        self._indexed: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._counted: dict[str, tuple[str, str]] = {}

    # -- changes ----------------------------------------------------------------------------------------------------

    def index(self, st: RequestState) -> None:
        """``st`` changed: its tokens, booked nodes, phase and count are indexed again."""
        tokens = st.record.tokens if st.record is not None else ()
        booked = tuple(st.booking or ())
        if self._indexed.get(st.key) != (tokens, booked):
            self._unindex(st.key)
            self._indexed[st.key] = (tokens, booked)
            for token in tokens:
                self.token_owner[self._claim(token)] = st.key
            for node in booked:
                self.booked_on[node].add(st.key)
        now_phase = phase(st)
        if now_phase is Phase.PENDING and st.retry_at is not None:
            self.retrying.add(st.key)
        else:
            self.retrying.discard(st.key)
        unbooked, arriving = held_claims(st, self._claim)
        if changed := self.ledger.track(st.key, unbooked=unbooked, arriving=arriving):
            self._touch_claims(changed)
        label = (st.request.class_name, now_phase.value.lower())
        if self._counted.get(st.key) != label:
            self._uncount(st.key)
            self._counted[st.key] = label
            self.counts[label] += 1

    def hold(self, key: str, holding: Holding | None) -> None:
        """What ``key`` holds now; nodes whose bookings changed are touched."""
        old = self.holdings.pop(key, None)
        if holding is not None and holding is not NOTHING:
            self.holdings[key] = holding
        before = {b.node for b in old.bookings} if old is not None else set()
        after = {b.node for b in holding.bookings} if holding is not None else set()
        if before == after:
            return
        self.booked_nodes.subtract(before)
        self.booked_nodes.update(after)
        for node in before - after:
            if self.booked_nodes[node] <= 0:
                del self.booked_nodes[node]
        self._touch_nodes(before ^ after)

    def forget(self, key: str) -> None:
        """The request is gone: nothing of it is left in any map."""
        self._unindex(key)
        if gone := self.ledger.untrack(key):
            self._touch_claims(gone)
        self.hold(key, None)
        self.retrying.discard(key)
        self._uncount(key)

    # -- helpers ----------------------------------------------------------------------------------------------------

    def _unindex(self, key: str) -> None:
        tokens, booked = self._indexed.pop(key, ((), ()))
        for token in tokens:
            if self.token_owner.get(self._claim(token)) == key:
                del self.token_owner[self._claim(token)]
        for node in booked:
            keys = self.booked_on.get(node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.booked_on[node]

    def _uncount(self, key: str) -> None:
        label = self._counted.pop(key, None)
        if label is not None:
            self.counts[label] -= 1
            if self.counts[label] <= 0:
                del self.counts[label]
