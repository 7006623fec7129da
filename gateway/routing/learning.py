"""What a routed alias learns from its own traffic: the outcome memory, the exploration draw, the estimate.

One `Learning` per routed alias with `difficulty.memory` or `explore` (gateway.routing.aliases builds
it). On the request path it costs a kNN query when the memory has outcomes (one matrix-vector product
over at most `memory.capacity` rows) and one random draw; everything else happens after the answer, in
the background (gateway.routing.explorer) or when feedback arrives.

- `difficulty(prior, embedding)`: the prior blended with the memory's neighbours (router.memory.blend).
- `explores(first_tier)`: whether this cheap-routed request is also sent to the strong tier.
- `learn(embedding, verdict, source)`: one judged outcome (needs_strong = 1 - verdict) into the memory.
- `sample(...)` / `routed(strong)`: the live estimate's window (router.estimate), read at scrape time.

Outcomes reach the memory of the replica that judged them (exploration, cascade steps) or that accepted
the feedback, whichever replica served the request (gateway.observability.feedback_shared carries the
embedding as the delivery's `extra`).

Whose routing an outcome changes (issue 39: one org's 1,000 ratings moved another org's prompt from
`small` to `large`): outcomes the gateway judged (exploration, cascades) teach the alias's shared
memory. Ratings are the client's word, so by default (`memory.feedback: org`) an org's ratings teach
only that org's own memory (at most `org_capacity` outcomes, `max_orgs` orgs kept, least recently
used dropped), which is blended after the shared one for that org's requests alone. A flood of
ratings then moves only the flooding org's routing; feedback also spends the key's request rate.
`memory.feedback: shared` is the opt-in for orgs that trust each other.
"""

from __future__ import annotations

import math
import random
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gateway.observability.metrics import Metrics
from router.config import RoutingPolicy
from router.estimate import EstimateWindow, ExploreSample
from router.memory import BlendParams, OutcomeMemory, blend

__all__ = ["Learning", "Outcome", "decode_outcome", "encode_outcome"]

F32 = npt.NDArray[np.float32]

_OUTCOME = struct.Struct("!BHH")  # format version, tier index, alias length; alias, float16 embedding
_VERSION = 1


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a delivered answer's feedback needs to become an outcome: the routed alias, the tier that
    answered and the prompt's embedding. Stored with the delivery (`extra`), in Redis when shared."""

    alias: str
    tier: int
    embedding: F32


def encode_outcome(alias: str, tier: int, embedding: F32) -> bytes:
    name = alias.encode()
    return _OUTCOME.pack(_VERSION, tier, len(name)) + name + np.asarray(embedding, dtype="<f2").tobytes()


def decode_outcome(data: bytes) -> Outcome | None:
    """None for anything that is not a record of this version (another gateway version wrote it, or it
    is not ours): the feedback is then counted but teaches nothing."""
    if len(data) < _OUTCOME.size:
        return None
    version, tier, n = _OUTCOME.unpack_from(data)
    body = len(data) - _OUTCOME.size - n
    if version != _VERSION or body <= 0 or body % 2:
        return None
    try:
        alias = data[_OUTCOME.size : _OUTCOME.size + n].decode()
    except UnicodeDecodeError:
        return None
    emb = np.frombuffer(data, dtype="<f2", offset=_OUTCOME.size + n).astype(np.float32)
    if not np.isfinite(emb).all() or not emb.any():
        return None
    return Outcome(alias, tier, emb)


class Learning:
    """Per routed alias, per replica; used on one event loop."""

    def __init__(
        self,
        alias: str,
        policy: RoutingPolicy,
        dim: int,
        metrics: Metrics,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`dim`: the router encoder's (the memory needs it; with no memory, 0 is fine)."""
        memory = policy.difficulty.memory if policy.difficulty is not None else None
        explore = policy.explore
        self.alias = alias
        self.strong_tier = len(policy.tiers) - 1
        self.explore = explore
        self.dim = dim
        self.memory = OutcomeMemory(dim, memory.capacity, memory.k) if memory is not None and dim else None
        self._org_scope = memory is not None and memory.feedback == "org"
        self._org_capacity = memory.org_capacity if memory is not None else 0
        self._max_orgs = memory.max_orgs if memory is not None else 0
        self._k = memory.k if memory is not None else 1
        self._orgs: OrderedDict[str, OutcomeMemory] = OrderedDict()  # org -> its ratings (feedback: org)
        self._blend = BlendParams(memory.blend_c) if memory is not None else BlendParams()
        self._window = EstimateWindow(explore.window_s) if explore is not None else None
        self._rng = rng or random.Random()
        self._clock = clock
        self.inflight = 0  # exploration calls running now (gateway.routing.explorer)
        self._metrics = metrics
        self._learnt = {
            s: metrics.router_memory_learnt.labels(alias, s)
            for s in ("explore", "cascade", "feedback", "shared")
        }
        # Set once at start-up when outcomes are shared between replicas (gateway.routing.outcome_share):
        # (alias, embedding, needs_strong, org; "" for the shared memory).
        self.share: Callable[[str, F32, float, str], None] | None = None
        if self.memory is not None:
            mem = self.memory
            metrics.router_memory_outcomes.labels(alias).set_function(lambda: float(len(mem)))
        if self._window is not None:
            self._export_estimate(metrics)

    def difficulty(self, prior: float, embedding: F32, org: str = "") -> float:
        """The difficulty the policy routes by: the prior alone until the memory has neighbours, then
        blended with the shared memory's, then with `org`'s own (its ratings) when it has any."""
        mem = self.memory
        if mem is None:
            return prior
        d = blend(prior, mem.neighbourhood(embedding), self._blend) if len(mem) else prior
        own = self._orgs.get(org) if self._orgs else None
        if own is not None and len(own):
            d = blend(d, own.neighbourhood(embedding), self._blend)
        return d

    def explores(self, first_tier: int) -> bool:
        """Whether a request started at `first_tier` is explored: cheap-routed, drawn at `rate`, and a
        slot free (a busy strong tier skips exploration rather than queueing behind it)."""
        x = self.explore
        if x is None or first_tier >= self.strong_tier or self._rng.random() >= x.rate:
            return False
        if self.inflight >= x.max_inflight:
            self._metrics.router_explore.labels(self.alias, "busy").inc()
            return False
        return True

    def routed(self, strong: bool) -> None:
        """Every routing decision of the alias counts in the estimate's strong share."""
        if self._window is not None:
            self._window.routed(strong, self._clock())

    def learn(self, embedding: F32, verdict: float, source: str) -> None:
        """One judged outcome: verdict 1.0 = the cheap answer was good enough."""
        if self.memory is None or not 0.0 <= verdict <= 1.0:
            return
        self.memory.add(embedding, 1.0 - verdict)
        self._learnt[source].inc()
        if self.share is not None:
            self.share(self.alias, embedding, 1.0 - verdict, "")

    def _org_memory(self, org: str) -> OutcomeMemory:
        own = self._orgs.get(org)
        if own is None:
            own = self._orgs[org] = OutcomeMemory(self.dim, self._org_capacity, self._k)
            if len(self._orgs) > self._max_orgs:
                self._orgs.popitem(last=False)
        else:
            self._orgs.move_to_end(org)
        return own

    def shared(self, embedding: F32, needs_strong: float, org: str = "") -> None:
        """An outcome another replica learnt (read back from Redis: checked, never trusted); `org`: one
        org's rating (feedback: org), else the shared memory's."""
        mem = self.memory
        if mem is None:
            return
        if org and self._org_scope:
            mem = self._org_memory(org)
        try:
            mem.add(embedding, needs_strong)  # refuses a label outside [0, 1], a wrong size, NaN, zeros
        except ValueError:
            return
        self._learnt["shared"].inc()

    def rated(self, outcome: Outcome, accepted: bool, org: str) -> None:
        """`org`'s feedback on a delivered answer: on a cheap tier, usable = good enough, rejected =
        needed the strong tier. A strong-tier answer's rating says nothing about the cheap tier: not
        learnt. With `feedback: org` it teaches `org`'s own memory only."""
        if outcome.tier >= self.strong_tier or outcome.embedding.shape[0] != self.dim:
            return
        if not self._org_scope:
            self.learn(outcome.embedding, 1.0 if accepted else 0.0, "feedback")
            return
        if self.memory is None:
            return
        needs_strong = 0.0 if accepted else 1.0
        self._org_memory(org).add(outcome.embedding, needs_strong)
        self._learnt["feedback"].inc()
        if self.share is not None:
            self.share(self.alias, outcome.embedding, needs_strong, org)

    def sample(self, verdict: float, cheap_cost: float, strong_cost: float) -> None:
        """One exploration sample for the live estimate (a relative judge: the strong answer scores 1)."""
        if self._window is not None:
            self._window.sample(ExploreSample(verdict, 1.0, cheap_cost, strong_cost), self._clock())

    def _export_estimate(self, metrics: Metrics) -> None:
        """Gauges computed at scrape time from the window (nothing on the request path)."""
        window, rate = self._window, self.explore.rate if self.explore is not None else 0.0
        assert window is not None

        def current() -> tuple[float, float, float, float]:
            est = window.estimate(self._clock(), explore_rate=rate)
            if est is None:
                return (math.nan,) * 4
            return est.quality_share, est.ci90_low, est.ci90_high, est.cost_share

        def part(i: int) -> Callable[[], float]:
            return lambda: current()[i]

        for i, bound in enumerate(("estimate", "ci90_low", "ci90_high")):
            metrics.router_quality_share.labels(self.alias, bound).set_function(part(i))
        metrics.router_cost_share_estimate.labels(self.alias).set_function(lambda: current()[3])
        metrics.router_explore_samples.labels(self.alias).set_function(lambda: float(window.samples()))
