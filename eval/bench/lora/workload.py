"""The offered work of `bench-lora` (pure): which adapter each request asks for, and its body.

Popularity is Zipf-like: adapter k (0-based, a0 the most popular) is drawn with weight 1 / (k + 1)^s.
The draws come from one seeded RNG, so both sides of a comparison get the same adapter for request i
(and `eval.bench.pools._load.run_load` the same arrival times for the same seed).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any


def zipf_weights(n: int, s: float) -> list[float]:
    """Normalized weights of ranks 1..n: 1 / k^s over their sum."""
    if n < 1:
        raise ValueError("need at least one adapter")
    raw = [1.0 / (k**s) for k in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def adapter_names(n: int) -> list[str]:
    return [f"a{k}" for k in range(n)]


@dataclass(frozen=True)
class Workload:
    adapters: tuple[str, ...]
    weights: tuple[float, ...]
    picks: tuple[int, ...]  # adapter index of request i (wrapping past the end)
    max_tokens: int = 64
    prompt_words: int = 40

    @classmethod
    def zipf(cls, n: int, s: float, seed: int, count: int, max_tokens: int = 64) -> Workload:
        weights = zipf_weights(n, s)
        rng = random.Random(seed)
        picks = rng.choices(range(n), weights=weights, k=count)
        return cls(tuple(adapter_names(n)), tuple(weights), tuple(picks), max_tokens)

    def adapter(self, i: int) -> str:
        return self.adapters[self.picks[i % len(self.picks)]]

    def body(self, i: int) -> dict[str, Any]:
        """A streamed chat request for request i's adapter (its alias has the adapter's name)."""
        adapter = self.adapter(i)
        words = " ".join(f"w{(i * 7 + j) % 211}" for j in range(self.prompt_words))
        return {
            "model": adapter,
            "messages": [{"role": "user", "content": f"Request {i} for {adapter}: {words}"}],
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }

    def shares(self, count: int) -> dict[str, float]:
        """The observed share of each adapter over the first `count` requests."""
        seen = Counter(self.adapter(i) for i in range(count))
        return {a: round(seen[a] / count, 4) if count else 0.0 for a in self.adapters}
