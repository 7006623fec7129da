"""A fleet of simulated replicas on one virtual clock, fed open-loop arrivals and routed per request.

The replicas are the simulator's own `Engine` (eval/sim: the same continuous-batching, KV and
speculation model `llmgw sim` serves over HTTP), stepped by a discrete-event loop instead of in real
time: the benchmark is deterministic for a seed and runs a minute of traffic in seconds. Routing
sees what the gateway would: a replica's running batch and its engine's acceptance counters.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from eval.sim.engine import Engine
from eval.sim.engine import Sequence as Seq
from pools.tpot_curve import TpotCurve


@dataclass(slots=True)
class Replica:
    name: str  # "spec" or "plain"
    engine: Engine
    busy_until: float = math.inf  # end of the step in progress; inf = idle
    curve: TpotCurve = field(default_factory=TpotCurve)  # what the gateway learns from its scrapes

    def scrape(self) -> None:
        """One /metrics scrape as the gateway's `TpotCurve` reads it (running, TPOT sum and count)."""
        tpot = self.engine.stats.tpot
        self.curve.observe_scrape(len(self.engine.running), tpot.total, tpot.count)

    @property
    def batch(self) -> int:
        # What the gateway's rule reads: max(scraped running, its in-flight requests); one gateway's
        # in-flight requests on a replica are its running plus its waiting ones.
        return len(self.engine.running) + len(self.engine.waiting)

    def acceptance(self) -> float | None:
        s = self.engine.spec_stats
        return s.accepted / s.draft_tokens if s.draft_tokens else None


# (replicas, arrival time) -> index of the replica that takes the request
Router = Callable[[Sequence[Replica], float], int]


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    prompt_len: int
    output_len: int


def arrivals(rate: float, duration: float, seed: int, mean_out: float = 128.0) -> list[Arrival]:
    """Poisson arrivals at `rate`/s; prompts 100-400 tokens, answers log-normal around `mean_out`."""
    rand = random.Random(seed)
    out: list[Arrival] = []
    t, sigma = 0.0, 0.6
    mu = math.log(mean_out) - sigma**2 / 2
    while True:
        t += rand.expovariate(rate)
        if t >= duration:
            return out
        n = max(2, min(1024, round(rand.lognormvariate(mu, sigma))))
        out.append(Arrival(t, rand.randint(100, 400), n))


@dataclass(slots=True)
class Outcome:
    ttft: list[float] = field(default_factory=list)  # seconds
    tpot: list[float] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)


def run(fleet: Sequence[Replica], route: Router, load: Sequence[Arrival], scrape_s: float = 0.5) -> Outcome:
    """Serve `load` to the end, scraping every replica every `scrape_s`; per request TTFT and TPOT
    (requests of more than one token)."""
    seqs: list[Seq] = []
    out = Outcome(sent={r.name: 0 for r in fleet})
    i, scraped = 0, 0.0
    while i < len(load) or any(r.busy_until < math.inf for r in fleet):
        nxt = min(fleet, key=lambda r: r.busy_until)
        while scraped + scrape_s <= min(nxt.busy_until, load[i].at if i < len(load) else math.inf):
            scraped += scrape_s
            for r in fleet:
                r.scrape()
        if i < len(load) and load[i].at <= nxt.busy_until:
            a = load[i]
            i += 1
            r = fleet[route(fleet, a.at)]
            out.sent[r.name] += 1
            seqs.append(r.engine.add(Seq(a.prompt_len, [], a.output_len, "length", a.at)))
            if r.busy_until == math.inf:
                r.busy_until = a.at  # an idle engine starts a step now
            continue
        now = nxt.busy_until
        step = nxt.engine.step(now)
        nxt.busy_until = now + step.duration if nxt.engine.has_work else math.inf
    for s in seqs:
        assert s.first_token_time is not None
        out.ttft.append(s.first_token_time - s.arrival)
        if s.num_emitted > 1:
            out.tpot.append((s.last_token_time - s.first_token_time) / (s.num_emitted - 1))
    return out
