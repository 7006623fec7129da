"""The serving benchmark's load generator: requests only inside the window, every decision timed."""

from __future__ import annotations

import time
from collections.abc import Sequence

from eval.routing.bench_serving import Samples, _instrument, head_decider, run_slice


class _InstantModel:
    """Stands in for DifficultyModel: assessing is free, so only the load generator is measured."""

    thresholds = {0.3: 0.5}

    def __init__(self) -> None:
        self.sent: list[float] = []

    def assess_many(self, texts: Sequence[str]) -> list[tuple[float, None]]:
        return [(0.25, None)] * len(texts)

    async def assess(self, text: str) -> tuple[float, None]:
        self.sent.append(time.perf_counter())
        return self.assess_many([text])[0]


async def test_requests_fall_inside_the_window_and_each_is_decomposed() -> None:
    model = _InstantModel()
    spans = _instrument(model)
    out = Samples()
    decide = head_decider(model)  # built first: its imports are not part of the window
    start = time.perf_counter()
    await run_slice(decide, spans, ["a prompt", "another prompt"], 200.0, 4, 0.5, out, tick=0.001)
    assert model.sent and max(model.sent) < start + 0.5
    assert out.elapsed >= 0.5  # the whole window is the denominator, not less
    assert len(out.latency) == len(out.queue) == len(out.service) == len(out.back) == len(model.sent)
    assert not spans  # every decision's span was consumed
    summary = out.summary()
    assert summary["decisions"] == len(model.sent)
    assert 0 < summary["throughput"] < 400  # offered 200/s; Poisson, so not exact
