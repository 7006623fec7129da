"""A pool's live replica set: membership, picking with bookkeeping, outcomes, and the hold queue.

`acquire` is the relay's entry: pick now when some replica is eligible; otherwise hold the request
in a bounded, priority-ordered queue until a replica frees up, appears (scale from zero), or comes
out of its breaker -- or until the wait limit (`max_wait_s`, or `cold_start_timeout_s` while the
pool has no replica at all), then `NoCapacity`. Held requests are served in the order of
`pools.fair`: priority bands (lower bands keep a minimum share), and within a band weighted fair
queuing between tenants by tokens served (`settle` corrects an estimate to the real usage).
`dispatch` runs whenever that may have changed: a release, a membership change, the end of a scrape
round (saturation and breaker timers move with the clock).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from pools.breaker import Breaker
from pools.budget import RetryBudget
from pools.config import Admission, Balancing, Retries, Saturation
from pools.config import Breaker as BreakerConfig
from pools.fair import FairQueue, Flow, band_shares, tenant_of
from pools.lora import PLACEMENTS, Adapters, LoraPicking
from pools.picker import REASONS, Pick, eligible, pick, pick_adapter
from pools.replica import Replica, salt_of
from pools.slo import DrainRate, Signals, ahead_in_queue, decide, predict_ttft, saturation
from pools.spec_decode import DEFAULT_WINDOW_S, SpecFigures, pool_figures
from pools.tpot_curve import pool_curve


class NoCapacity(Exception):
    """No replica could take the request in time; `retry_after` is a hint in seconds."""

    def __init__(self, message: str, reason: str, retry_after: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


MAX_ORGS = 100  # distinct (band, org) rows of PoolStats.fair_tokens
OTHER_ORG = "_other"


@dataclass(slots=True)
class PoolStats:
    picks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    held: int = 0  # requests that had to wait
    hold_timeouts: int = 0
    queue_full: int = 0
    retries: int = 0
    placements: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PLACEMENTS, 0))
    # Tokens of requests dispatched from the hold queue (estimate, then settled) by (band, org); at
    # most MAX_ORGS orgs, the rest under OTHER_ORG (bounded metric labels).
    fair_tokens: dict[tuple[int, str], float] = field(default_factory=dict)
    # Held requests predicted to miss their SLO's TTFT, by (band, org, action: shed | reroute); the
    # same bound on orgs.
    slo_refused: dict[tuple[int, str, str], int] = field(default_factory=dict)

    def count_fair(self, band: int, org: str, tokens: float) -> None:
        key = (band, org)
        if key not in self.fair_tokens and len(self.fair_tokens) >= MAX_ORGS:
            key = (band, OTHER_ORG)
        self.fair_tokens[key] = self.fair_tokens.get(key, 0.0) + tokens

    def count_refused(self, band: int, org: str, action: str) -> None:
        key = (band, org, action)
        if key not in self.slo_refused and len(self.slo_refused) >= MAX_ORGS:
            key = (band, OTHER_ORG, action)
        self.slo_refused[key] = self.slo_refused.get(key, 0) + 1


@dataclass(slots=True, eq=False)
class _Waiter:
    key: int | None
    adapter: str | None
    future: asyncio.Future[Replica]
    flow: Flow | None


class ReplicaPool:
    def __init__(
        self,
        name: str,
        balancing: Balancing,
        saturation: Saturation,
        breaker: BreakerConfig,
        retries: Retries,
        admission: Admission,
        clock: Callable[[], float] = time.monotonic,
        rand: random.Random | None = None,
        spec_window_s: float = DEFAULT_WINDOW_S,
        lora: LoraPicking | None = None,
    ) -> None:
        self.name = name
        self.lora = lora  # a LoRA pool: its replicas track adapters; adapter requests are placed
        self.spec_window_s = spec_window_s  # the window of the speculative-decoding figures
        self.balancing = balancing
        self.saturation = saturation
        self.breaker_config = breaker
        self.retries = retries
        self.admission = admission
        self.replicas: list[Replica] = []
        self.stats = PoolStats()
        self.budget = RetryBudget(retries.budget_ratio, retries.budget_min_per_s)
        self._clock = clock
        self._rand = rand or random.Random()
        self._turn = itertools.count()
        self._waiters: FairQueue[_Waiter] = FairQueue(band_shares(admission.fairness))
        self._drain = DrainRate()  # requests finished per second (the hold queue's drain rate)
        # Called with the seconds a held request waited (placed or not), its band and org: the
        # gateway's histogram.
        self.on_wait: Callable[[float, int, str], None] | None = None
        # Called with a held request's predicted TTFT and the TTFT it had (seconds): the predictor's
        # error (pools.slo).
        self.on_prediction: Callable[[float, float], None] | None = None

    # --- membership ----------------------------------------------------------------------------
    def set_members(self, bases: Iterable[str]) -> None:
        """Replace the replica set; known replicas keep their state (in-flight, breaker, load)."""
        wanted = list(dict.fromkeys(b.rstrip("/") for b in bases))
        known = {r.base: r for r in self.replicas}
        self.replicas = [known.get(b) or self._replica(b) for b in wanted]
        self.dispatch()

    def _replica(self, base: str) -> Replica:
        r = Replica(base, Breaker(self.breaker_config.failures, self.breaker_config.open_s))
        if self.lora is not None:
            r.adapters = Adapters(self.lora.max_loras)
        return r

    def bases(self) -> list[str]:
        return [r.base for r in self.replicas]

    @property
    def held(self) -> int:
        return len(self._waiters)

    # --- what the scrapes say about the pool ------------------------------------------------------
    def spec_figures(self, now: float) -> SpecFigures | None:
        """Speculative-decoding acceptance over the last `spec_window_s`; None without drafts."""
        return pool_figures((r.spec for r in self.replicas), now, self.spec_window_s)

    def tpot_curve(self) -> Mapping[int, float]:
        """Observed TPOT (s) by running-batch bin, over the replicas (`pools.tpot_curve`)."""
        return pool_curve(r.tpot for r in self.replicas)

    def service_ttft(self) -> float:
        """The replicas' mean TTFT EWMA (seconds; 0 before any was observed)."""
        seen = [r.ttft_ewma for r in self.replicas if r.ttft_ewma > 0]
        return sum(seen) / len(seen) if seen else 0.0

    def predict(self, priority: int, flow: Flow | None) -> float | None:
        """A request's TTFT here now (`pools.slo`): the replicas' recent TTFT while one is free, else
        as if held; None when it would be held and the pool has no recent drain rate (unknown)."""
        if not self._waiters:
            now = self._clock()
            if eligible(self.replicas, self.saturation, now, self.balancing.stale_after_s, ()):
                return self.service_ttft()
        return self._predicted(priority, flow)

    def _predicted(self, priority: int, flow: Flow | None) -> float | None:
        fairness = self.admission.fairness
        tenant, _ = tenant_of(flow, fairness)
        ahead = ahead_in_queue(
            self._waiters.backlog(), priority, tenant, fairness.enabled, self._waiters.min_share
        )
        return predict_ttft(ahead, self._drain.rate(self._clock()), self.service_ttft())

    def signals(self, now: float) -> Signals:
        """The pool's saturation signals (`pools.slo.Signals`)."""
        loads = [r.fresh_load(now, self.balancing.stale_after_s) for r in self.replicas]
        fresh = [load for load in loads if load is not None]
        n = len(fresh)
        ttft = self.service_ttft()
        return Signals(
            len(self._waiters),
            sum(load.waiting for load in fresh) / n if n else None,
            sum(load.kv_usage for load in fresh) / n if n else None,
            ttft if ttft > 0 else None,
        )

    def saturated(self, now: float) -> tuple[bool, dict[str, bool]]:
        """Whether the pool counts as saturated, and each signal's verdict (`pools.slo.saturation`)."""
        sig = self.saturation.signals
        return saturation(self.signals(now), sig.waiting, sig.kv_usage, sig.ttft_s)

    def running_batch(self, now: float) -> float | None:
        """Mean scraped running batch per replica with fresh load; None when no load is fresh."""
        loads = [r.fresh_load(now, self.balancing.stale_after_s) for r in self.replicas]
        fresh = [load.running for load in loads if load is not None]
        return sum(fresh) / len(fresh) if fresh else None

    # --- picking -------------------------------------------------------------------------------
    def try_pick(
        self, key: int | None, exclude: Collection[Replica] = (), adapter: str | None = None
    ) -> Replica | None:
        now = self._clock()
        lora = self.lora
        if adapter is not None and lora is not None and lora.affinity:
            placed = pick_adapter(
                self.replicas,
                self.balancing,
                self.saturation,
                now,
                adapter=adapter,
                adapter_key=salt_of(adapter),
                lora=lora,
                exclude=exclude,
            )
            if placed is None:
                return None
            self.stats.placements[placed[1]] += 1
            return self._commit(placed[0], now, adapter)
        # Without affinity the adapter is only recorded (what may be in a slot, for loading); a pool
        # without LoRA has no adapter state to record it in (`_commit`).
        return self._commit_any(key, exclude, now, adapter)

    def _commit_any(
        self, key: int | None, exclude: Collection[Replica], now: float, adapter: str | None
    ) -> Replica | None:
        choice = pick(
            self.replicas,
            self.balancing,
            self.saturation,
            now,
            key=key,
            turn=next(self._turn),
            rand=self._rand,
            exclude=exclude,
        )
        if choice is None:
            return None
        return self._commit(choice, now, adapter)

    def _commit(self, choice: Pick, now: float, adapter: str | None) -> Replica:
        r = choice.replica
        if adapter is not None and r.adapters is not None:
            r.adapters.sent(adapter)
        r.inflight += 1
        r.picks += 1
        r.breaker.on_pick(now)
        self.stats.picks[choice.reason] += 1
        return r

    async def acquire(
        self, key: int | None, priority: int = 0, adapter: str | None = None, flow: Flow | None = None
    ) -> Replica:
        """A replica for the request; `priority` is its band, `flow` its tenant and input estimate
        (the hold queue's order, `pools.fair`; None: one anonymous tenant)."""
        self.budget.record_request(self._clock())
        if not self._waiters:  # never overtake a held request
            r = self.try_pick(key, adapter=adapter)
            if r is not None:
                return r
        adm = self.admission
        cold = not self.replicas
        limit = adm.cold_start_timeout_s if cold else adm.max_wait_s
        if limit <= 0:  # holding is switched off: refuse at once
            what = "has no ready replica" if cold else "has no free replica"
            raise NoCapacity(f"pool '{self.name}' {what}", "cold_start" if cold else "saturated", 1)
        if len(self._waiters) >= adm.max_queued:
            self.stats.queue_full += 1
            raise NoCapacity(f"pool '{self.name}' has no free replica and its queue is full", "queue_full", 1)
        if flow is not None and flow.slo is not None:
            # Held: would it still meet its SLO's TTFT? (`pools.slo`; shed and reroute are refusals
            # the caller turns into a 503 or another pool.)
            predicted = self._predicted(priority, flow)
            action = decide(predicted, flow.slo)
            if action != "queue":  # (a `reroute` one had its chance at routing: pools.slo)
                self.stats.count_refused(priority, flow.org, "shed")
                raise NoCapacity(
                    f"pool '{self.name}' is saturated: a request held now would get its first token in "
                    f"about {predicted:.1f}s, past its SLO of {flow.slo.ttft_s:g}s",
                    "slo_unattainable",
                    max(1, round(predicted or 1)),
                )
            flow.predicted = predicted
        loop = asyncio.get_running_loop()
        waiter = _Waiter(key, adapter, loop.create_future(), flow)
        tenant, weight = tenant_of(flow, adm.fairness)
        entry = self._waiters.push(waiter, priority, tenant, weight, flow.cost if flow is not None else 0)
        self.stats.held += 1
        held_at = self._clock()
        self.dispatch()
        try:
            return await asyncio.wait_for(waiter.future, limit)
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # picked at the very moment the wait ran out
            self.stats.hold_timeouts += 1
            what = "has no ready replica" if not self.replicas else "stayed saturated"
            raise NoCapacity(
                f"pool '{self.name}' {what} for {limit:g}s",
                "cold_start" if cold else "saturated",
                max(1, round(limit / 4)),
            ) from None
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(waiter.future.result(), "neutral")  # picked just as the client left
            raise
        finally:
            self._waiters.remove(entry)  # a no-op once dispatched
            if self.on_wait is not None:
                self.on_wait(self._clock() - held_at, priority, flow.org if flow is not None else "")

    def dispatch(self) -> None:
        """Hand eligible replicas to held requests, in the hold queue's order (`pools.fair`)."""
        queue = self._waiters
        while (entry := queue.head()) is not None:
            w = entry.item
            if w.future.done():
                queue.remove(entry)
                continue
            r = self.try_pick(w.key, adapter=w.adapter)
            if r is None:
                return
            queue.pop(entry)
            flow = w.flow
            if flow is not None:
                flow.held = (queue.period, entry.band, entry.tenant, entry.weight)
                self.stats.count_fair(entry.band, flow.org, entry.cost)
            w.future.set_result(r)

    def settle(self, flow: Flow, tokens: int, ttft: float | None = None) -> None:
        """A request that ended used `tokens` (input + output): correct its hold-queue charge (only a
        request dispatched from the hold queue in the current busy period was charged). `ttft`: the
        TTFT it had (streams), compared with its prediction."""
        predicted = flow.predicted
        if predicted is not None and ttft is not None and self.on_prediction is not None:
            flow.predicted = None
            self.on_prediction(predicted, ttft)
        held = flow.held
        if held is None:
            return
        flow.held = None  # settled once
        correction = tokens - max(flow.cost, 1)
        self.stats.count_fair(held[1], flow.org, correction)
        if held[0] == self._waiters.period:
            self._waiters.charge(held[1], held[2], held[3], correction)

    def backlog(self) -> dict[tuple[int, str], int]:
        """Held requests per (band, tenant)."""
        return self._waiters.backlog()

    def shares(self) -> dict[tuple[int, str], tuple[float, float]]:
        """Per (band, backlogged tenant): share of the band's tokens this busy period, and its due."""
        return self._waiters.shares()

    # --- outcomes ------------------------------------------------------------------------------
    def release(self, r: Replica, verdict: str, ttft: float | None = None) -> None:
        """`verdict`: ok (the replica answered), fail (error/timeout: feeds the breaker), neutral."""
        r.inflight -= 1
        self._drain.tick(self._clock())
        if verdict == "ok":
            r.breaker.success()
            if ttft is not None:
                r.observe_ttft(ttft)
        elif verdict == "fail":
            r.failures += 1
            r.breaker.failure(self._clock())
        else:
            r.breaker.neutral()
        if self._waiters:
            self.dispatch()

    def may_retry(self) -> bool:
        ok = self.budget.try_retry(self._clock())
        if ok:
            self.stats.retries += 1
        return ok
