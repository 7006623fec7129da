"""The serving benchmark's load generator: requests only inside the window, every decision timed."""

from __future__ import annotations

import time
from collections.abc import Sequence

from eval.routing.bench_serving import Samples, _instrument, run_slice


class _InstantModel:
    """Stands in for DifficultyModel: scoring is free, so only the load generator is measured."""

    thresholds = {0.3: 0.5}

    def __init__(self) -> None:
        self.sent: list[float] = []

    def score_many(self, texts: Sequence[str]) -> list[float]:
        return [0.25] * len(texts)

    async def score(self, text: str) -> float:
        self.sent.append(time.perf_counter())
        return self.score_many([text])[0]


async def test_requests_fall_inside_the_window_and_each_is_decomposed() -> None:
    model = _InstantModel()
    spans = _instrument(model)
    out = Samples()
    start = time.perf_counter()
    await run_slice(model, spans, ["a prompt", "another prompt"], 200.0, 4, 0.5, out, tick=0.001)
    assert model.sent and max(model.sent) < start + 0.5
    assert out.elapsed >= 0.5  # the whole window is the denominator, not less
    assert len(out.latency) == len(out.queue) == len(out.service) == len(out.back) == len(model.sent)
    assert not spans  # every decision's span was consumed
    summary = out.summary()
    assert summary["decisions"] == len(model.sent)
    assert 0 < summary["throughput"] < 400  # offered 200/s; Poisson, so not exact
