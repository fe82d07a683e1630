"""What the loop looks up about requests by something other than their key, kept current as each one changes.

- the request that recorded each provider token, and the tokens of scale-ups not Provisioned yet;
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

from gangscale.controller.request import Phase, RequestState, phase
from gangscale.controller.snapshot import NOTHING, Holding


class RequestIndex:
    def __init__(self, touch_nodes: Callable[[Iterable[str]], None],
                 touch_tokens: Callable[[Iterable[str]], None], claim: Callable[[str], str]) -> None:
        self._touch_nodes, self._touch_tokens, self._claim = touch_nodes, touch_tokens, claim
        #: claim (``NodePoolProvider.claim``) of a recorded token -> key of the request that recorded it.
        self.token_owner: dict[str, str] = {}
        #: key -> tokens, for requests whose recorded scale-up is not Provisioned yet.
        self.provisioning: dict[str, tuple[str, ...]] = {}
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
        if tokens and now_phase is Phase.PROVISIONING:
            if self.provisioning.get(st.key) != tokens:
                self.provisioning[st.key] = tokens
                self._touch_tokens(tokens)
        elif (gone := self.provisioning.pop(st.key, None)) is not None:
            self._touch_tokens(gone)
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
        if (gone := self.provisioning.pop(key, None)) is not None:
            self._touch_tokens(gone)
        self.hold(key, None)
        self.retrying.discard(key)
        self._uncount(key)

    # -- reads ------------------------------------------------------------------------------------------------------

    def in_flight(self, claim: str, obtaining: set[str]) -> bool:
        """Whether ``claim`` belongs to a scale-up still in progress (being obtained, or not Provisioned yet);
        ``obtaining`` holds the claims of scale-ups whose provider calls run."""
        return claim in obtaining or self.token_owner.get(claim) in self.provisioning

    def in_flight_claims(self, obtaining: set[str]) -> set[str]:
        return obtaining.union(self._claim(token) for tokens in self.provisioning.values() for token in tokens)

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
