"""The order of a saturated pool's hold queue: priority bands with minimum shares, and within a band
weighted fair queuing between tenants by virtual token counters (VTC, Sheng et al., OSDI 2024).

Only held requests go through here: while some replica is free `ReplicaPool.acquire` picks at once.

**Tenants (within a band).** Each tenant (an org, or an org's app: `fairness.by`) has a counter of the
tokens it was served divided by its weight. The next request dispatched is the oldest one of the
backlogged tenant with the smallest counter (FIFO within a tenant). A request is charged its input
estimate when it is dispatched and corrected to its real usage (input + output) when it ends
(`charge`), so long prompts and long answers pay for what they take. A tenant that becomes backlogged
has its counter lifted to the smallest counter among the band's backlogged tenants (or, in an empty
band, to the counter of the tenant served last): idle time is not banked, so a tenant back from a
pause cannot take the pool over to "catch up", and a lone tenant gets the whole pool
(work-conserving: nothing waits while a replica is free).

**Fairness bound.** Let U be the largest request (input + output tokens) and w_f, w_g two tenants'
weights. While f and g are both backlogged, at every dispatch decision the counter of the tenant
that is ahead exceeds the other's by at most U/w of the tenant that is ahead -- the usual WFQ
argument: the tenant behind is picked until it passes the other, and one dispatch moves a counter by
at most U/w -- provided each request's real size is charged before the next decision (one request
in flight at a time, or exact estimates). Hence over any interval in which both stay backlogged the
weighted service differs by at most 2·max(U/w_f, U/w_g). With K requests in flight at once, output
is charged only when each ends, which adds at most K·U/w for the unsettled part:
|S_f/w_f - S_g/w_g| <= 2·(K+1)·U/min(w_f, w_g)  (tests/unit/test_pools_fair.py checks both).

**Bands.** Bands are strict priority (premium 1, standard 0, background -1: `pools.config.BANDS`)
with one exception: a lower band with a `min_share` s > 0 that is backlogged while a higher band is
keeps s of the dispatched tokens. Between the highest backlogged band and those lower bands the same
VTC rule runs over band counters, with weight s for each such lower band and 1 - (their sum) for the
highest; a band with no share is served only when every band above it is empty. So premium
saturating the pool gets 1 - s, standard s, and standard may use everything premium leaves.

**Busy periods.** All counters are dropped when the queue empties (the pool had a free replica for
every request): fairness is about sharing a saturated pool, and it keeps the state as small as the
set of tenants that waited. `period` numbers these; a request's correction counts only in the period
it was charged in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from pools.config import BANDS, Fairness
from pools.slo import SloAsk

T = TypeVar("T")


@dataclass(slots=True)
class Flow:
    """A request's claim on the hold queue: whose it is and what it is expected to cost (tokens).
    `held` is written by the pool when the request is dispatched from the hold queue: (busy period,
    band, tenant, weight), what the correction at the end of the request is charged to."""

    org: str
    app: str = ""
    tier: str = ""
    cost: int = 0  # the input estimate
    slo: SloAsk | None = None  # its SLO class's TTFT target and action (pools.slo); None: just queue
    held: tuple[int, int, str, float] | None = None
    predicted: float | None = None  # its TTFT predicted when it was held (seconds)


def band_name(band: int) -> str:
    """A band's name for metric labels (`BANDS`), or its number."""
    return _BAND_NAMES.get(band) or str(band)


_BAND_NAMES = {v: k for k, v in BANDS.items()}


def tenant_of(flow: Flow | None, fairness: Fairness) -> tuple[str, float]:
    """The tenant a request is queued under and its weight. Without fairness every request is one
    tenant's (arrival order)."""
    if flow is None or not fairness.enabled:
        return "", 1.0
    name = f"{flow.org}/{flow.app}" if fairness.by == "app" else flow.org
    weight = fairness.org_weights.get(flow.org) or fairness.tier_weights.get(flow.tier) or 1.0
    return name, weight


def band_shares(fairness: Fairness) -> dict[int, float]:
    """The configured minimum shares by band number (none without fairness: strict priority)."""
    if not fairness.enabled:
        return {}
    return {BANDS[name]: s for name, s in fairness.min_share.items() if s > 0}


def band_weights(backlogged: Collection[int], shares: Mapping[int, float]) -> dict[int, float]:
    """The bands that compete for the next dispatch and their weights: the highest backlogged band,
    and each lower backlogged band with a share (weight = its share; the highest gets the rest)."""
    top = max(backlogged)
    weights = {b: shares[b] for b in backlogged if b != top and shares.get(b, 0.0) > 0}
    weights[top] = 1.0 - sum(weights.values())
    return weights


def next_band(vtime: Mapping[int, float], weights: Mapping[int, float]) -> int:
    """The competing band with the least virtual time; a tie goes to the higher band."""
    return min(weights, key=lambda b: (vtime.get(b, 0.0), -b))


def next_tenant(counters: Mapping[str, float], heads: Mapping[str, int]) -> str:
    """The backlogged tenant (`heads`: tenant -> arrival number of its oldest request) with the least
    counter; a tie goes to the one waiting longest."""
    return min(heads, key=lambda t: (counters.get(t, 0.0), heads[t]))


def lifted(own: float | None, others: Iterable[float], floor: float) -> float:
    """A newly backlogged counter: at least the least of the backlogged `others` (or `floor` when
    there are none), never lowered."""
    least = min(others, default=floor)
    return least if own is None else max(own, least)


@dataclass(slots=True, eq=False)  # found by identity
class Entry(Generic[T]):
    """One held request in the queue."""

    item: T
    band: int
    tenant: str
    weight: float
    cost: float
    seq: int
    queued: bool = True  # until dispatched or removed (a removal's check without a scan)


def tenant_shares(
    served: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, tuple[float, float]]:
    """Per backlogged tenant (`weights`): its share of the band's tokens served this busy period, and
    the share its weight entitles it to among the backlogged (what the first should approach)."""
    total = sum(served.values())
    wsum = sum(weights.values())
    return {t: (served.get(t, 0.0) / total if total > 0 else 0.0, w / wsum) for t, w in weights.items()}


class _Band(Generic[T]):
    __slots__ = ("queues", "counters", "served", "last")

    def __init__(self) -> None:
        self.queues: dict[str, deque[Entry[T]]] = {}  # backlogged tenants only
        self.counters: dict[str, float] = {}  # weighted service this busy period
        self.served: dict[str, float] = {}  # tokens this busy period (for the share metrics)
        self.last = 0.0  # the counter of the tenant served last (the floor of a lift in an empty band)


class FairQueue(Generic[T]):
    """The hold queue's state; the decisions are the pure functions above."""

    def __init__(self, shares: Mapping[int, float]) -> None:
        self.min_share = dict(shares)
        self.period = 0
        self._bands: dict[int, _Band[T]] = {}
        self._vtime: dict[int, float] = {}  # band counters (tokens / band weight) this busy period
        self._size = 0
        self._seq = 0

    def __len__(self) -> int:
        return self._size

    def push(self, item: T, band: int, tenant: str, weight: float, cost: float) -> Entry[T]:
        if self._size == 0:  # a new busy period: nothing is owed from the last one
            self.period += 1
            self._bands.clear()
            self._vtime.clear()
        self._seq += 1
        entry = Entry(item, band, tenant, weight, max(cost, 1.0), self._seq)
        b = self._bands.get(band)
        if b is None:
            b = self._bands[band] = _Band()
        if not b.queues:  # the band becomes backlogged
            busy = [self._vtime.get(k, 0.0) for k, o in self._bands.items() if o.queues]
            self._vtime[band] = lifted(self._vtime.get(band), busy, 0.0)
        q = b.queues.get(tenant)
        if q is None:  # the tenant becomes backlogged
            others = [b.counters.get(t, 0.0) for t in b.queues]
            b.counters[tenant] = lifted(b.counters.get(tenant), others, b.last)
            q = b.queues[tenant] = deque()
        q.append(entry)
        self._size += 1
        return entry

    def head(self) -> Entry[T] | None:
        """The request to dispatch next (left in the queue: `pop` it once it has a replica)."""
        if not self._size:
            return None
        busy = [k for k, o in self._bands.items() if o.queues]
        band = busy[0] if len(busy) == 1 else next_band(self._vtime, band_weights(busy, self.min_share))
        b = self._bands[band]
        queues = b.queues
        if len(queues) == 1:
            return next(iter(queues.values()))[0]
        tenant = next_tenant(b.counters, {t: q[0].seq for t, q in queues.items()})
        return queues[tenant][0]

    def pop(self, entry: Entry[T]) -> None:
        """`entry` (the head) is dispatched: charge its tenant and band the estimate."""
        self.charge(entry.band, entry.tenant, entry.weight, entry.cost)  # while it still competes
        self._drop(entry)
        b = self._bands[entry.band]
        b.last = b.counters[entry.tenant]

    def remove(self, entry: Entry[T]) -> None:
        """`entry` left without being served (timed out, cancelled): nothing is charged."""
        if entry.queued:
            self._drop(entry)

    def charge(self, band: int, tenant: str, weight: float, tokens: float) -> None:
        """Service (or a correction of an estimate, possibly negative) for a tenant of this busy period."""
        b = self._bands.get(band)
        if b is None or tenant not in b.counters:
            return
        b.counters[tenant] += tokens / weight
        b.served[tenant] = b.served.get(tenant, 0.0) + tokens
        busy = [k for k, o in self._bands.items() if o.queues]
        if band in busy:
            self._vtime[band] = self._vtime.get(band, 0.0) + tokens / band_weights(busy, self.min_share).get(
                band, 1.0
            )
        else:
            self._vtime[band] = self._vtime.get(band, 0.0) + tokens

    def _drop(self, entry: Entry[T]) -> None:
        entry.queued = False
        b = self._bands[entry.band]
        q = b.queues[entry.tenant]
        if q[0] is entry:
            q.popleft()
        else:
            q.remove(entry)
        if not q:
            del b.queues[entry.tenant]
        self._size -= 1

    def backlog(self) -> dict[tuple[int, str], int]:
        """Held requests per (band, tenant), for metrics."""
        return {(k, t): len(q) for k, b in self._bands.items() for t, q in b.queues.items()}

    def shares(self) -> dict[tuple[int, str], tuple[float, float]]:
        """Per (band, backlogged tenant): `tenant_shares` of this busy period, for metrics."""
        out = {}
        for k, b in self._bands.items():
            weights = {t: q[0].weight for t, q in b.queues.items()}
            for t, share in tenant_shares(b.served, weights).items():
                out[(k, t)] = share
        return out
